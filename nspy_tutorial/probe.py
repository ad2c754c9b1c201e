"""Try a profiler in a child process before the notebook's own process commits to it: loading Nsight Compute
or activating CUPTI cannot be undone, and either can fail for reasons no version predicts. Each candidate
(``ncu``, ``cupti``, ``ncu-cli``) profiles one tiny kernel in a fresh Python under a timeout; outcomes are
kept per machine in ``$XDG_CACHE_HOME/nspy-tutorial/probes.json`` (delete it to probe again)."""

import dataclasses
import json
import os
import subprocess
import sys
import time

from nspy_tutorial import backend, lifetime
from nspy_tutorial.sections import first_line

TIMEOUT = 180  # seconds; a probe that takes longer is counted as hung
MARKER = "NSPY_PROBE "  # the child's one result line: "NSPY_PROBE ok <row>" or "NSPY_PROBE failed <error>"
CHILD = [sys.executable, "-m", "nspy_tutorial.probe"]  # what a probe runs (the tests put a fake here)


@dataclasses.dataclass
class Outcome:
    """What one probe found: ``ok`` with the row it read, or the first line of the real error."""

    candidate: str
    ok: bool
    detail: str
    seconds: float
    cached: bool = False

    def line(self) -> str:
        how = "kept from an earlier probe on this machine" if self.cached else f"{self.seconds:.1f} s"
        return f"{'works' if self.ok else 'failed'}: {self.detail} ({how})"


def machine_key(gpu_name: str | None, driver: str | None) -> str:
    """What a kept outcome depends on besides the candidate and its tool: the GPU, the driver, nsight-python."""
    return f"{gpu_name}|{driver}|nsight-python {backend.installed('nsight-python')}"


def first_error(output: str) -> str:
    """The line that says what went wrong: ncu's ``==ERROR==``, else the child's failure line, else its last."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for prefix in ("==ERROR==", MARKER + "failed "):
        found = next((line for line in lines if line.startswith(prefix)), None)
        if found:
            return found.removeprefix(MARKER + "failed ")[:300]
    return (lines[-1][:300] if lines else "it printed nothing")


def command(candidate: str, tool: str) -> list[str]:
    """The child's command; ``tool`` is the ncu (``ncu``, ``ncu-cli``) or the libcupti (``cupti``). The ncu-cli
    probe needs no clock lock, and an ncu killed while it holds one can leave it (lifetime): ``--clock-control none``."""
    if candidate == "ncu-cli":
        return [tool, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--launch-skip", "1",
                "--launch-count", "1", "--csv", *CHILD, "kernel"]
    return [*CHILD, candidate, tool]


def environment(candidate: str, tool: str) -> dict[str, str]:
    """The child's environment: no profiler variables of this process; for ``ncu``, its folder first on PATH."""
    from nspy_tutorial.ncu_cli import child_environment

    env = {**child_environment(), "NSPY_NCU_INIT_AT_IMPORT": "1" if candidate == "ncu" else "0"}
    if candidate == "ncu":
        env["PATH"] = os.pathsep.join([os.path.dirname(tool), env.get("PATH", "")])
    return env


def try_candidate(candidate: str, tool: str, machine: str, timeout: float | None = None) -> Outcome:
    """Profile a tiny kernel with ``candidate`` in a child; kept by ``machine`` (:func:`machine_key`) and tool file."""
    timeout = TIMEOUT if timeout is None else timeout
    try:  # the tool's size and time: one replaced in place is probed again
        stat = os.stat(tool)
        stamp = f"{stat.st_size}:{int(stat.st_mtime)}"
    except OSError:
        stamp = "missing"
    key = json.dumps([machine, candidate, tool, stamp])
    cache = backend.cache_dir() / "probes.json"
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    if key in kept:
        return Outcome(**{**kept[key], "cached": True})
    start = time.perf_counter()
    try:
        code, output = lifetime.run(command(candidate, tool), environment(candidate, tool), timeout)
    except subprocess.TimeoutExpired:  # not kept: a hang may be passing
        return Outcome(candidate, False, f"no answer within {timeout:g} s: the probe hung and was stopped",
                       round(time.perf_counter() - start, 1))
    seconds = round(time.perf_counter() - start, 1)
    if candidate == "ncu-cli":  # ncu's CSV row of the kernel's duration
        rows = [line for line in output.splitlines() if "gpu__time_duration.sum" in line and "==" not in line]
        ok = code == 0 and bool(rows)
        detail = "a kernel's duration, in launch mode" if ok else first_error(output)
    else:
        result = [line for line in output.splitlines() if line.startswith(MARKER + "ok ")]
        ok = code == 0 and bool(result)
        detail = result[-1].removeprefix(MARKER + "ok ") if ok else first_error(output)
    outcome = Outcome(candidate, ok, detail, seconds)
    kept[key] = dataclasses.asdict(outcome)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(kept, indent=1), encoding="utf-8")
    except OSError:  # a read-only home only costs a probe next time
        pass
    return outcome


def child(argv: list[str]) -> int:
    """``python -m nspy_tutorial.probe ncu <ncu> | cupti <libcupti> | kernel``: one ``x + 1`` under that tool
    (``kernel``: bare, for the ncu command line to profile); prints the row's duration, or the real error."""
    lifetime.watch_owner()
    try:
        if argv[0] == "kernel":  # what ncu launches for the ncu-cli probe: two tiny kernels
            import torch

            _ = torch.ones(1 << 16, device="cuda") + 1
            torch.cuda.synchronize()
            return 0
        if argv[0] == "cupti":
            import ctypes

            ctypes.CDLL(argv[1], mode=ctypes.RTLD_GLOBAL)  # before torch loads its own libcupti
        import nsight
        from nsight.collection import ncu

        if argv[0] == "ncu" and nsight.get_active_tool() != nsight.Tool.NCU:
            raise RuntimeError(str(ncu.injection_load_error or "import nsight did not load Nsight Compute"))
        if argv[0] == "cupti":
            nsight.activate(nsight.Tool.CUPTI)
        import torch  # only now: after nsight and its tool

        @nsight.analyze.kernel(runs=1, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)
        def probe(n: int) -> None:
            x = torch.ones(n, device="cuda")
            with nsight.annotate("x + 1"):
                _ = x + 1

        row = probe(1 << 16).to_dataframe().iloc[0]
        if not row["AvgValue"] > 0:
            raise RuntimeError(f"the row holds no duration: {row.to_dict()}")
        print(f"{MARKER}ok {row['Annotation']}: {row['AvgValue'] / 1e3:.1f} us under {nsight.get_active_tool().name}",
              flush=True)
        return 0
    except Exception as exc:  # the probe's whole point: report the real error, in one line
        print(f"{MARKER}failed {type(exc).__name__}: {first_line(str(exc), 300)}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]))
