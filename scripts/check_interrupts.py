"""The GPU check of issue 30 §1: interrupt ncu mid-profile, and the SM clock is back at its idle level.

    python3 scripts/check_interrupts.py OUT [--ncu PATH] [--budget SECONDS] [--cases ABCD]

Run it LAST in a device call: if a stop leaves the clock locked, only a new machine clears it. It
never locks or resets the clocks on purpose (``ncu --clock-control reset`` runs only where the
package's own rule fires: an ncu that had to be SIGKILLed). Throughout, ``nvidia-smi`` samples the
SM clock every 200 ms into ``OUT/samples.csv``; first the GPU idles 3 s (its idle level); then

- A, 04 §1: notebook 04 in a Jupyter kernel (nbclient, as the runner); once an ncu whose command
  line holds ``--clock-control base`` runs and has *locked the clock* -- CUPTI's device-global
  clock-control status, polled every 50 ms by a child process (:data:`LOCK_WATCH`), has read
  ``LOCKED`` for 0.3 s: the moment a SIGKILL would leave the lock behind -- the kernel is interrupted
  (SIGINT to its process group: Jupyter's Stop button). Where CUPTI cannot be read, once the ncu has
  run 3 s and the Python it profiles has opened the GPU (the summary says which trigger fired);
- B, 10 §2b: the same with notebook 10 and its ``ncu --set full`` (clock control base by default);
- C, an interrupted probe: the ncu-cli probe child (``python -m nspy_tutorial.probe kernel`` under
  ncu, as setup starts it) through ``lifetime.run`` in a child Python, which gets SIGINT once the
  profiled Python has opened the GPU;
- D, the kernel dies: as A, but the kernel's process group gets SIGKILL (a restart: jupyter_client
  kills a kernel so), the parent-death path;

each measured from the interrupt: seconds until no ncu process is left, until the SM clock is back
at the idle level (up to 15 s after), the peak clock seen, whether a stop needed SIGKILL and whether
a reset ran (the package prints one line when it does). If and only if the clock came back after
every case, notebook 04 runs strict (``OUT/04-strict.ipynb``, its sections' statuses in the summary).
``OUT/summary.json`` holds it all; a short table is printed. Exit 0 when all is well, 1 when a case
was not reached, not clean or 04 failed, 2 on a usage error, 3 when the clock is still held at the
end ("CLOCK STILL HELD": report it and give the machine back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDLE_SECONDS = 3.0  # the GPU left alone this long gives its idle level
IDLE_MARGIN_MHZ = 200  # a sample at most this far above the idle level's highest is idle (a lock reads 1,500)
BACK_WITHIN = 15.0  # seconds allowed for the clock to come back once no ncu is left
PROFILING_FOR = 3.0  # seconds an ncu has run before it is interrupted ("it is profiling")
GONE_WITHIN = 30.0  # seconds allowed for every ncu to exit after the interrupt (the grace is 8)
FORCED = "was still running"  # ncu_cli.after_forced_stop's line: an ncu had to be SIGKILLed
SMI = ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,memory.used", "--format=csv,noheader", "-lms", "200"]
MAX_QUERY = ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]
GPU_DEVICE = "/dev/nvidia"  # a process with one of these open has started CUDA
LOCKED_FOR = 0.3  # seconds CUPTI has read LOCKED before the interrupt: ncu holds its lock
LOCK_WATCH = """import ctypes, sys, time
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
cuda, device, context = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
from cupti import cupti
while True:
    print(cupti.ClockControlStatus(cupti.clock_control_get_status(context.value)).name, flush=True)
    time.sleep(0.05)
"""
NOTEBOOKS = ROOT / "notebooks"
HELD = "CLOCK STILL HELD: report it and give the machine back"
PROBE_CHILD = """import sys
from nspy_tutorial import lifetime, probe
try:
    code, _ = lifetime.run(probe.command("ncu-cli", sys.argv[1]), probe.environment("ncu-cli", sys.argv[1]),
                           probe.TIMEOUT)
    print(f"the probe finished first (exit {code})", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


# --------------------------------------------------------------------------
# Samples of the SM clock, and what they say
# --------------------------------------------------------------------------


class Samples:
    """(seconds since the start, SM clock MHz) as nvidia-smi printed them."""

    def __init__(self, rows: list[tuple[float, int]] | None = None) -> None:
        self.rows = rows or []

    def add(self, t: float, line: str) -> None:
        fields = [part.strip() for part in line.split(",")]
        if len(fields) >= 2 and (mhz := re.match(r"\d+", fields[1])):
            self.rows.append((t, int(mhz[0])))

    def between(self, start: float, end: float) -> list[int]:
        return [mhz for t, mhz in list(self.rows) if start <= t <= end]

    def back_at(self, after: float, threshold: float) -> float | None:
        """The time of the first sample after ``after`` at the idle level, or None."""
        return next((t for t, mhz in list(self.rows) if t >= after and mhz <= threshold), None)


def idle_level(samples: Samples, start: float, end: float) -> dict:
    """The idle window's lowest sample (where a free GPU settles: it lingers at its boost clock about 2 s after
    work, as right after a run of the series), and the threshold a sample must not exceed to count as idle."""
    window = samples.between(start, end)
    if not window:
        raise RuntimeError("nvidia-smi gave no SM clock sample while the GPU idled")
    return {"idle_mhz": min(window), "highest_mhz": max(window), "threshold_mhz": min(window) + IDLE_MARGIN_MHZ,
            "samples": len(window)}


def already_held(idle: dict, max_mhz: int | None) -> bool:
    """The GPU idles above 60 % of its maximum clock before anything ran: a lock is there already (a fresh H200
    idles at 345 of 1,980 MHz; a locked one at 1,500)."""
    return bool(max_mhz) and idle["idle_mhz"] > 0.6 * max_mhz


def held_after(samples: Samples, after: float, threshold: float) -> bool:
    """No sample at the idle level within :data:`BACK_WITHIN` s after ``after`` (and there were samples)."""
    window = samples.between(after, after + BACK_WITHIN)
    return bool(window) and min(window) > threshold


def case_summary(samples: Samples, *, name: str, what: str, threshold: float, reached: bool, note: str = "",
                 seen: float | None = None, action: float | None = None, gone: float | None = None,
                 output: str = "") -> dict:
    """One case's record: seconds from the interrupt until no ncu was left and until the clock was back, the
    peak clock from the ncu's start on, whether a stop needed SIGKILL, and the reset line if one was printed."""
    record = {"case": name, "what": what, "reached": reached, "note": note}
    if not reached or action is None:
        return {**record, "ncu_gone_after_s": None, "clock_back_after_s": None, "peak_mhz": None,
                "stop": "not reached", "reset": "not run"}
    back = samples.back_at(max(action, gone if gone is not None else action), threshold)
    end = back if back is not None else (samples.rows[-1][0] if samples.rows else action)
    peak = samples.between(seen if seen is not None else action, end)
    at_interrupt = samples.between(action - 0.5, action + 0.25)
    forced = [line.strip() for line in output.splitlines() if FORCED in line]
    return {**record,
            "ncu_gone_after_s": None if gone is None else round(gone - action, 2),
            "clock_back_after_s": None if back is None else round(back - action, 2),
            "peak_mhz": max(peak) if peak else None,
            "mhz_at_interrupt": max(at_interrupt) if at_interrupt else None,
            "stop": "SIGKILL needed" if forced else ("clean" if gone is not None else "ncu still running"),
            "reset": forced[0] if forced else "not run"}


def verdict(summary: dict) -> tuple[int, list[str]]:
    """The exit code and the lines that say why: 3 if the clock is still held at the end (first of all)."""
    lines, code = [], 0
    if summary.get("held_at_end"):
        return 3, [HELD.upper()]
    for case in summary["cases"]:
        if case["stop"] != "clean" or case["clock_back_after_s"] is None:
            lines.append(f"case {case['case']}: {case['stop']}, clock back: {case['clock_back_after_s']} "
                         f"{case['note']}".rstrip())
            code = 1
    strict = summary.get("strict_04")
    if not strict or strict.get("error") or any(s["status"] == "FAILED" for s in strict.get("sections", [])):
        lines.append(f"04 strict: {(strict or {}).get('error') or (strict or {}).get('not_run') or 'a FAILED section'}")
        code = 1
    return code, lines


def table(summary: dict) -> list[str]:
    """A short table of the cases, the idle level and 04's statuses."""
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    idle = summary["idle"]
    lines = [f"idle SM clock {idle['idle_mhz']} MHz (idle below {idle['threshold_mhz']} MHz); "
             f"at the end {summary.get('end_mhz')} MHz",
             f"lock watch: {summary.get('lock_watch', '-')}",
             f"{'case':<34} {'ncu gone':>9} {'clock back':>11} {'at stop':>8}  {'stop':<16} reset"]
    for c in summary["cases"]:
        reset = "ran" if "--clock-control reset`" in c["reset"] else ("said: none" if FORCED in c["reset"] else
                                                                       c["reset"])
        at_stop = c.get("cupti_at_interrupt") or f"{c.get('mhz_at_interrupt') or '-'}"
        lines.append(f"{c['case'] + ' ' + c['what']:<34.34} {seconds(c['ncu_gone_after_s']):>9} "
                     f"{seconds(c['clock_back_after_s']):>11} {at_stop:>8}  {c['stop']:<16} {reset}")
    strict = summary.get("strict_04") or {}
    if strict.get("sections"):
        lines.append("04 strict: " + ", ".join(f"{s['section'].split('.')[0]} {s['status']}"
                                               for s in strict["sections"]))
    elif strict:
        lines.append(f"04 strict: {strict.get('error') or strict.get('not_run')}")
    return lines


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def command_lines() -> dict[int, list[str]]:
    found = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            found[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    return found


def ncu_processes(lines: dict[int, list[str]] | None = None) -> dict[int, list[str]]:
    """Running ncu processes (``ncu`` as the program, or as the script a shell runs)."""
    lines = command_lines() if lines is None else lines
    return {pid: line for pid, line in lines.items() if any(os.path.basename(a) == "ncu" for a in line[:2])}


def descendants(pid: int) -> set[int]:
    parents = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError):
            parents[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
    found, more = set(), {pid}
    while more:
        found |= more
        more = {child for child, parent in parents.items() if parent in more} - found
    return found - {pid}


def has_gpu_open(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(GPU_DEVICE) for fd in os.listdir(f"/proc/{pid}/fd"))
    return False


def last_line(error: BaseException) -> str:
    """The error's type and the last line of its text, without terminal colours (nbclient keeps ipython's)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    return f"{type(error).__name__}: {(text.splitlines() or [''])[-1][:200]}"


def gpu_open_below(pid: int) -> bool:
    """Whether a process under ``pid`` (the Python an ncu profiles) has the GPU open: CUDA has started there."""
    return any(has_gpu_open(p) for p in descendants(pid))


def holds(line: list[str], *words: str) -> bool:
    """Whether ``words`` appear one after another in the command line."""
    return any(line[i:i + len(words)] == list(words) for i in range(len(line)))


# --------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------


class Check:
    def __init__(self, out: Path, ncu: str, budget: float, cases: str = "ABCD") -> None:
        self.out, self.ncu, self.cases, self.t0 = out, ncu, cases, time.monotonic()
        self.deadline = self.t0 + budget
        self.samples = Samples()
        self.work = Path(tempfile.mkdtemp(prefix="check-interrupts-"))
        self.status, self.locked_since, self.watcher = None, None, None  # CUPTI's clock-control status

    def now(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def start_sampling(self) -> None:
        self.smi = subprocess.Popen(SMI, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        csv = open(self.out / "samples.csv", "w", encoding="utf-8", buffering=1)  # noqa: SIM115 (the thread's)
        csv.write("t_s, timestamp, clocks.sm [MHz], memory.used [MiB]\n")

        def read() -> None:
            for line in self.smi.stdout:
                t = self.now()
                csv.write(f"{t:.3f}, {line.strip()}\n")
                self.samples.add(t, line)
            csv.close()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def start_lock_watch(self) -> str:
        """CUPTI's clock-control status polled in a child (it needs a CUDA context); what it reads, or why not."""
        try:
            from nspy_tutorial import backend

            library = backend.find_cupti_library()
            if library is None or not backend.cupti_python_available():
                return "unavailable: no cupti-python with a libcupti here"
            self.watcher = subprocess.Popen([sys.executable, "-c", LOCK_WATCH, library.path], text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except Exception as error:  # the check goes on with the fallback trigger
            return f"unavailable: {type(error).__name__}: {error}"

        def read() -> None:
            for line in self.watcher.stdout:
                status = line.strip()
                if status == "LOCKED" and self.status != "LOCKED":
                    self.locked_since = self.now()
                self.status = status

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 30
        while self.status is None and self.watcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return f"CUPTI reads {self.status}" if self.status else "unavailable: the CUPTI child printed nothing"

    def locked_for(self) -> float:
        """Seconds CUPTI has read LOCKED without a break; 0 when it does not (or cannot) read it."""
        return self.now() - self.locked_since if self.status == "LOCKED" and self.locked_since is not None else 0.0

    def stop_sampling(self) -> None:
        if self.watcher is not None:
            self.watcher.terminate()
        self.smi.terminate()
        self.smi.wait(10)
        self.reader.join(5)

    async def settle(self, after: float, threshold: float) -> float | None:
        """Wait until the clock is back at the idle level (at most :data:`BACK_WITHIN` s); when it was."""
        while self.now() < after + BACK_WITHIN and self.left() > 0:
            back = self.samples.back_at(after, threshold)
            if back is not None:
                return back
            await asyncio.sleep(0.2)
        return self.samples.back_at(after, threshold)

    async def wait_gone(self) -> float | None:
        start = self.now()
        while self.now() < start + GONE_WITHIN:
            if not ncu_processes():
                return self.now()
            await asyncio.sleep(0.05)
        return None

    async def watch(self, running: asyncio.Task, match, ready) -> tuple[float | None, int | None]:
        """Wait for an ncu whose command line ``match``es and for ``ready(pid, seconds it has run)``; (when it was
        first seen, its pid), or (None, None) if the work ended first or the budget ran out."""
        seen, pid = None, None
        while not running.done() and self.left() > 60:
            found = [p for p, line in ncu_processes().items() if match(line)]
            if found and pid is None:
                seen, pid = self.now(), found[0]
            if pid is not None and pid in found and ready(pid, self.now() - seen):
                return seen, pid
            if pid is not None and pid not in found:  # that one ended before it was ready: wait for another
                seen, pid = None, None
            await asyncio.sleep(0.05)
        return None, None

    def environment(self, name: str, strict: bool = False) -> dict[str, str]:
        return {**os.environ, "NSPY_TUTORIAL_WORKDIR": str(self.work / name),
                "NSPY_TUTORIAL_RESULTS": str(self.work / f"{name}.jsonl"), "NSPY_TUTORIAL_STRICT": "1" if strict else "0"}

    async def notebook_case(self, name: str, what: str, stem: str, match, kill: bool, threshold: float) -> dict:
        """Run notebook ``stem`` in a kernel; interrupt it (or kill it) once the matching ncu has profiled a while."""
        import nbclient
        import nbformat

        path = NOTEBOOKS / f"{stem}.ipynb"
        client = nbclient.NotebookClient(nbformat.read(path, as_version=4), timeout=240, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        running = asyncio.create_task(client.async_execute(env=self.environment(name)))
        if self.watcher is not None:  # the lock itself: CUPTI reads LOCKED
            ready = lambda p, ran: self.locked_for() >= LOCKED_FOR  # noqa: E731
        else:  # the profiled Python has started CUDA
            ready = lambda p, ran: ran >= PROFILING_FOR and (gpu_open_below(p) or ran >= 4 * PROFILING_FOR)  # noqa: E731
        seen, pid = await self.watch(running, match, ready)
        if pid is None:
            note = f"no matching ncu before the notebook ended: {await self.outcome(running)}"
            return case_summary(self.samples, name=name, what=what, threshold=threshold, reached=False, note=note)
        action, status = self.now(), self.status
        if kill:
            os.killpg(client.km.provisioner.pgid, signal.SIGKILL)  # the kernel included
        else:
            await client.km.interrupt_kernel()
        gone = await self.wait_gone()
        await self.settle(gone if gone is not None else action, threshold)
        note = await self.outcome(running)
        output = "\n".join(o.get("text", "") for cell in client.nb.cells for o in cell.get("outputs", []))
        record = case_summary(self.samples, name=name, what=what, threshold=threshold, reached=True, seen=seen,
                              action=action, gone=gone, output=output, note=note)
        return {**record, "cupti_at_interrupt": status, "cupti_after": self.status}

    async def outcome(self, running: asyncio.Task) -> str:
        """How the notebook's run ended (it is given up to 30 s more)."""
        try:
            await asyncio.wait_for(running, 30)
            return "the notebook ran to its end"
        except asyncio.TimeoutError:
            return "the notebook was still running 30 s later"
        except Exception as error:  # CellExecutionError (KeyboardInterrupt), DeadKernelError, ...
            return last_line(error)

    async def probe_case(self, threshold: float) -> dict:
        name, what = "C", "interrupted ncu-cli probe"
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", PROBE_CHILD, self.ncu,
                                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        running = asyncio.create_task(child.communicate())

        seen, pid = await self.watch(running, lambda line: "nspy_tutorial.probe" in line,
                                     lambda p, ran: gpu_open_below(p))  # the profiled Python has started CUDA
        if pid is None:
            output = (await running)[0].decode(errors="replace").strip()
            return case_summary(self.samples, name=name, what=what, threshold=threshold, reached=False,
                                note=f"the probe ended before it was interrupted: {output[-200:]}")
        action = self.now()
        child.send_signal(signal.SIGINT)
        gone = await self.wait_gone()
        await self.settle(gone if gone is not None else action, threshold)
        output = (await asyncio.wait_for(running, 60))[0].decode(errors="replace")
        return case_summary(self.samples, name=name, what=what, threshold=threshold, reached=True, seen=seen,
                            action=action, gone=gone, output=output, note=output.strip()[-200:])

    async def strict_04(self) -> dict:
        import nbclient
        import nbformat

        path = NOTEBOOKS / "04_cache_and_clock_control.ipynb"
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        error = None
        try:
            await asyncio.wait_for(client.async_execute(env=self.environment("strict", strict=True)),
                                   max(30.0, self.left() - 15))
        except Exception as exc:  # a failed cell, a dead kernel, the budget
            error = last_line(exc)
        nbformat.write(nb, self.out / "04-strict.ipynb")
        records = self.work / "strict.jsonl"
        sections = {}
        for line in records.read_text(encoding="utf-8").splitlines() if records.exists() else []:
            with contextlib.suppress(ValueError, KeyError):
                record = json.loads(line)
                sections[record["section"]] = {"section": record["section"], "status": record["status"],
                                               "detail": record.get("result") or record.get("reason")}
        return {"error": error, "sections": list(sections.values())}

    async def run(self) -> dict:
        await asyncio.sleep(IDLE_SECONDS + 0.5)
        idle = idle_level(self.samples, 0.5, self.now())
        threshold = idle["threshold_mhz"]
        summary = {"idle": idle, "ncu": self.ncu, "cases": [], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "lock_watch": self.start_lock_watch()}
        print(f"lock watch: {summary['lock_watch']}", flush=True)
        maximum = subprocess.run(MAX_QUERY, capture_output=True, text=True).stdout.strip()
        summary["max_mhz"] = int(maximum) if maximum.isdigit() else None
        if already_held(idle, summary["max_mhz"]):
            summary["held_at_end"] = True
            summary["note"] = "the clock was already held before the check: nothing was run"
            return summary
        cases = [("A", "04 §1, --clock-control base", "04_cache_and_clock_control",
                  lambda line: holds(line, "--clock-control", "base"), False),
                 ("B", "10 §2b, ncu --set full", "10_keeping_the_evidence", lambda line: holds(line, "--set", "full"),
                  False),
                 ("C", None, None, None, None),
                 ("D", "04 §1, the kernel killed", "04_cache_and_clock_control",
                  lambda line: holds(line, "--clock-control", "base"), True)]
        for name, what, stem, match, kill in [case for case in cases if case[0] in self.cases]:
            print(f"case {name} ...", flush=True)
            if self.left() < 75:
                summary["cases"].append(case_summary(self.samples, name=name, what=what or "probe", threshold=threshold,
                                                     reached=False, note="not run: the time budget was spent"))
                continue
            try:
                case = await (self.probe_case(threshold) if name == "C" else
                              self.notebook_case(name, what, stem, match, kill, threshold))
            except Exception as error:  # the check's own failure: recorded, and the next case runs
                case = case_summary(self.samples, name=name, what=what or "probe", threshold=threshold, reached=False,
                                    note=f"the check failed: {type(error).__name__}: {error}"[:300])
            summary["cases"].append(case)
            print(f"  {json.dumps(case)}", flush=True)
        if all(c["clock_back_after_s"] is not None for c in summary["cases"] if c["reached"]):
            if self.left() > 60:
                print("04 strict ...", flush=True)
                summary["strict_04"] = await self.strict_04()
            else:
                summary["strict_04"] = {"not_run": "the time budget was spent", "sections": []}
        else:
            summary["strict_04"] = {"not_run": "the clock did not come back after every case", "sections": []}
        end = self.now()
        await asyncio.sleep(IDLE_SECONDS)
        await self.settle(end, threshold)
        summary["end_mhz"] = self.samples.rows[-1][1] if self.samples.rows else None
        summary["held_at_end"] = held_after(self.samples, end, threshold)
        leftover = ncu_processes()
        for pid in leftover:  # never SIGKILL an ncu: SIGINT lets it restore the clocks
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)
        summary["ncu_left_at_end"] = [" ".join(line)[:200] for line in leftover.values()]
        return summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for samples.csv, summary.json and 04-strict.ipynb")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu",
                        help="the ncu for case C's probe (default: ncu on PATH)")
    parser.add_argument("--budget", type=float, default=285.0, help="seconds the whole check may take (default 285)")
    parser.add_argument("--cases", default="ABCD", help="which cases to run (default ABCD: all)")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"{args.out} is a file, not a folder")
    if args.out.is_dir() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty: give a new folder")
    if args.budget < 120:
        parser.error("--budget must be at least 120 seconds (four cases and 04)")
    if not args.cases or set(args.cases) - set("ABCD"):
        parser.error(f"--cases: letters among A, B, C, D, got {args.cases!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which(SMI[0]) is None:
        print("check_interrupts: no nvidia-smi here: run it on the GPU machine", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.ncu, args.budget, args.cases)
    check.start_sampling()
    try:
        summary = asyncio.run(check.run())
    finally:
        check.stop_sampling()
        shutil.rmtree(check.work, ignore_errors=True)
    summary["seconds"] = round(check.now(), 1)
    code, why = verdict(summary)
    summary["verdict"] = {"exit": code, "why": why}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print("\n".join(table(summary) + why))
    return code


if __name__ == "__main__":
    sys.exit(main())
