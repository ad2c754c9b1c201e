"""Run the tutorial notebooks headless and write a results card.

Usage::

    nspy-tutorial run [--notebooks-dir notebooks] [--out results]
                      [--only 02 05 ...] [--timeout 1800]

Each notebook runs in its own Jupyter kernel through nbclient, one notebook after another;
the next notebook's kernel starts while the current one runs (:class:`Kernel`) and, when the
notebook's setup cell is the one call ``nt.setup(...)``, runs the setup's CUDA-free steps and
imports there (:func:`nspy_tutorial.bootstrap.warm_up`); a finished kernel is killed rather
than shut down. The notebooks' section
guards append one JSON line per section to the file named by ``NSPY_TUTORIAL_RESULTS``
(one file per notebook, set by the runner); the runner reads them back and writes
``<out>/results.md`` and ``<out>/results.json`` next to executed copies of the
notebooks in ``<out>/notebooks/``.

Everything is written into ``<out>.partial-<pid>`` first, which replaces ``<out>`` only
when the run is complete. Ctrl-C (SIGINT) or SIGTERM stops the run: the running kernel
is killed, the partial folder removed and ``<out>`` left as it was (exit 130 or 143).

The console script starts in :mod:`nspy_tutorial.cli`, which installs its signal handlers
and parses the command line before this module's slow imports (nbformat, nbclient, zmq).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import datetime as dt
import json
import os
import platform
import queue
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import nbformat
import zmq
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from traitlets.config import Config

from nspy_tutorial import bootstrap
from nspy_tutorial.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Interrupted, RunnerError, interrupted, main
from nspy_tutorial.sections import (
    FAILED,
    OK,
    RESULTS_VAR,
    SKIPPED,
    STATUSES,
    SectionRecord,
    SettingError,
    check_settings,
    first_line,
)
from nspy_tutorial.workdir import WORKDIR_VAR

REPOSITORY = "https://github.com/nspy-tutorial/nspy-tutorial"  # scripts/build_notebooks.py REPO
NOTEBOOK_NAME = re.compile(r"^(\d+)_.+\.ipynb$")
STOP_GRACE_SECONDS = 15.0  # how long an interrupted run waits for nbclient to let go
NEED_LABELS = {"gpu": "no GPU", "profiler": "no profiler backend", "ncu": "no Nsight Compute backend",
               "ncu-cli": "no ncu command line", "cupti": "no cupti-python", "triton": "no Triton",
               "counters": "GPU counters reserved to administrators"}


def now() -> str:
    """The local time as ISO 8601 with offset, to the second."""
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass
class NotebookResult:
    """The outcome of one notebook: OK when every cell ran and no section FAILED.

    A skipped section is an expected outcome (e.g. no GPU); a failed one is not.
    """

    notebook: str
    status: str
    seconds: float
    error: str | None = None
    sections: list[SectionRecord] = field(default_factory=list)
    cell: int | None = None  # the cell (1-based) that stopped the notebook, when one did

    def counts(self) -> dict[str, int]:
        """Number of sections per status, with all three statuses present."""
        counter = Counter(section.status for section in self.sections)
        return {status: counter.get(status, 0) for status in STATUSES}


def notebook_number(path: Path) -> int:
    """The numeric prefix of a notebook file name, e.g. 2 for ``02_first_profile.ipynb``."""
    match = NOTEBOOK_NAME.match(path.name)
    if match is None:
        raise ValueError(f"not a tutorial notebook name: {path.name}")
    return int(match.group(1))


def find_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """The ``NN_*.ipynb`` notebooks in numeric order; ``only`` keeps some numbers ("2", "02")."""
    if not notebooks_dir.is_dir():
        raise RunnerError(
            f"notebooks folder not found: {notebooks_dir}. The notebooks live in the repository, "
            f"not in the installed package: git clone {REPOSITORY} and run this from the clone, "
            "or pass --notebooks-dir <clone>/notebooks"
        )
    notebooks = sorted(
        (path for path in notebooks_dir.iterdir() if NOTEBOOK_NAME.match(path.name)),
        key=lambda path: (notebook_number(path), path.name),
    )
    if not notebooks:
        raise RunnerError(f"no NN_*.ipynb notebooks in {notebooks_dir}")
    return select_notebooks(notebooks, only) if only else notebooks


def select_notebooks(notebooks: list[Path], only: list[str]) -> list[Path]:
    """Keep the notebooks whose number is listed; an unknown number is an error naming the others."""
    available = {notebook_number(path) for path in notebooks}
    unknown = [value for value in only if not (value.isdigit() and int(value) in available)]
    if unknown:
        names = ", ".join(path.name.split("_", 1)[0] for path in notebooks)
        raise RunnerError(f"--only {' '.join(unknown)}: no such notebook number; available: {names}")
    wanted = {int(value) for value in only}
    return [path for path in notebooks if notebook_number(path) in wanted]


RECORD_FIELDS = {f.name for f in fields(SectionRecord)}


def read_section_records(path: Path) -> list[SectionRecord]:
    """Read a JSON-lines records file; the last record per (notebook, section) wins.

    A section is recorded again when its cell is re-run, and the latest run counts;
    sections keep the position of their first record. A line that is not a record is
    skipped with a warning rather than failing the whole card.
    """
    if not path.exists():
        return []
    latest: dict[tuple[str, str], SectionRecord] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if data.get("status") not in STATUSES or not isinstance(data.get("section"), str):
                raise ValueError
            record = SectionRecord(**{k: v for k, v in data.items() if k in RECORD_FIELDS})
        except (ValueError, TypeError, AttributeError):
            print(f"warning: {path.name}:{number}: not a section record, ignored", file=sys.stderr)
            continue
        latest[(record.notebook, record.section)] = record
    return list(latest.values())


class Stop:
    """Remembers the first SIGINT or SIGTERM of the run; the run stops at the next safe point.

    The handler only records the signal: the main thread then kills the running kernel
    and removes the partial folder. nbclient runs in a worker thread, where it cannot
    install its own signal handlers (it only tries in the main thread).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __call__(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> Stop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def kill_kernel(km: AsyncKernelManager | None) -> None:
    """Kill a kernel and everything it started (its own process group), if it is running."""
    provisioner = getattr(km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is None or process.poll() is not None:
        return
    try:
        pgid = getattr(provisioner, "pgid", None)
        if pgid and hasattr(os, "killpg"):
            os.killpg(pgid, signal.SIGKILL)
        else:
            process.kill()
    except OSError:
        pass  # it has just exited


class KernelLoop:
    """One asyncio event loop in a background thread, on which every kernel of a run is
    started, driven by nbclient and shut down.

    With one loop for the whole run, the next notebook's kernel (Python, IPython, ipykernel:
    about a second) starts while the current notebook runs and is handed over when it is
    done. The main thread only waits, so that it can react to Ctrl-C and SIGTERM.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nbclient", daemon=True)
        self.thread.start()

    def submit(self, coroutine: Any) -> concurrent.futures.Future:
        """Run ``coroutine`` on the loop; its result (or exception) arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def __enter__(self) -> KernelLoop:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# Runs bootstrap.warm_up() in a kernel without leaving a name in the notebook's namespace.
WARM_UP_CODE = '__import__("nspy_tutorial.bootstrap", fromlist=["warm_up"]).warm_up()'
WARM_UP_TIMEOUT = 300  # seconds; the imports take a few
SETUP_LINE = re.compile(r'^ENV = nt\.setup\("\w+"\)$', re.MULTILINE)  # the setup cell's call (not 01's manual one)


def warms_up(path: Path) -> bool:
    """Whether ``path``'s setup cell is the one-call ``ENV = nt.setup("NN_topic")``, which
    :func:`bootstrap.warm_up` can run ahead (notebook 01, which takes the steps in its own
    cells, is not warmed up: there the order is the lesson)."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception:  # execute_notebook reports an unreadable notebook
        return False
    return any(cell.cell_type == "code" and SETUP_LINE.search(cell.source) for cell in notebook.cells)


async def start_kernel(km: AsyncKernelManager, cwd: Path, env: dict[str, str], warm_up: bool) -> str | None:
    """Start ``km``'s kernel; with ``warm_up``, run :data:`WARM_UP_CODE` in it (silently, outside
    the notebook's history). Returns None, or why the warm-up failed (the setup cell then
    takes the same steps itself, and reports any error where the reader sees it)."""
    await km.start_kernel(extra_arguments=["--HistoryManager.hist_file=:memory:"], cwd=str(cwd), env=env)
    if not warm_up:
        return None
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=WARM_UP_TIMEOUT)  # raises if the kernel dies meanwhile
        msg_id = client.execute(WARM_UP_CODE, silent=True, store_history=False)
        deadline = time.monotonic() + WARM_UP_TIMEOUT
        while True:  # the reply, checking on the way that the kernel lives (the run's stop kills it)
            try:
                reply = await client.get_shell_msg(timeout=0.2)
            except queue.Empty:
                if not await km.is_alive():
                    return "the kernel died during the warm-up"
                if time.monotonic() > deadline:
                    return f"no reply within {WARM_UP_TIMEOUT} s"
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                break
    except RuntimeError as error:  # wait_for_ready: the kernel died or never answered
        return first_line(str(error))
    finally:
        client.stop_channels()
    content = reply["content"]
    return None if content["status"] == "ok" else f"{content.get('ename')}: {first_line(str(content.get('evalue')))}"


@dataclass
class Kernel:
    """A notebook's kernel, started on a :class:`KernelLoop` before the notebook needs it.

    ``started`` is done once the kernel process runs (or failed to start) and, when it was
    asked to, has run :func:`bootstrap.warm_up`; its result is None or why the warm-up failed.
    """

    loop: KernelLoop
    km: AsyncKernelManager
    started: concurrent.futures.Future
    closed: bool = False

    @classmethod
    def start(cls, loop: KernelLoop, cwd: Path, records_file: Path, socket_dir: Path | None = None,
              warm_up: bool = False) -> Kernel:
        """Start a kernel for the notebook whose sections go to ``records_file``, running in ``cwd``.

        Its environment tells the notebook where to write: ``NSPY_TUTORIAL_RESULTS`` (its
        records) and ``NSPY_TUTORIAL_WORKDIR`` (its files, under the run's scratch folder).
        IPython's history stays in memory, as under nbclient's own start. Its sockets go to
        ``socket_dir`` (default: the records' folder). ``warm_up``: run the setup's CUDA-free
        steps and imports in it now (:func:`bootstrap.warm_up`), while the current notebook runs.
        """
        config = kernel_config(socket_dir or records_file.parent, records_file.stem)
        km = AsyncKernelManager(kernel_name="python3", config=config)
        env = {**os.environ, RESULTS_VAR: str(records_file), WORKDIR_VAR: str(records_file.parent / "work")}
        return cls(loop, km, loop.submit(start_kernel(km, cwd, env, warm_up)))

    def warm_up_failure(self) -> str | None:
        """Why the warm-up failed, once the kernel has started; None if it ran, was not asked for, or is not done."""
        if not self.started.done() or self.started.cancelled() or self.started.exception() is not None:
            return None
        return self.started.result()

    def close(self) -> None:
        """Kill the kernel (started or still starting) and remove its connection file; wait for both."""
        if self.closed:
            return
        self.closed = True
        kill_kernel(self.km)
        try:
            self.started.result(timeout=STOP_GRACE_SECONDS)
        except Exception:  # it never started: nothing to shut down
            return
        self.loop.submit(self.km.shutdown_kernel(now=True)).result(timeout=STOP_GRACE_SECONDS)


class Client(NotebookClient):
    """nbclient's client, remembering the cell it runs and stopping when the run is stopped.

    It drives a kernel the runner started (:class:`Kernel`), so nbclient neither starts nor
    shuts it down: whoever started it closes it (:meth:`Kernel.close`).
    """

    stop: Stop | None = None
    current_cell: int | None = None

    async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
        if self.stop is not None and self.stop.signum is not None:
            raise DeadKernelError("the run was interrupted")
        self.current_cell = cell_index
        return await super().async_execute_cell(cell, cell_index, *args, **kwargs)


IPC_PATH_MAX = 96  # a Unix socket's path holds 107 bytes on Linux, 103 on macOS; jupyter adds "-<port>"


def socket_folder() -> tempfile.TemporaryDirectory:
    """A private folder for the kernels' sockets, with a short path: under /tmp where there is one.

    Not under the run's scratch folder, which follows ``TMPDIR`` and can be too deep for a socket.
    """
    return tempfile.TemporaryDirectory(prefix="nspy-ipc-", dir="/tmp" if os.path.isdir("/tmp") else None)


def kernel_config(socket_dir: Path, name: str = "kernel") -> Config:
    """Kernel over IPC sockets in a private folder where the platform has them.

    Over TCP, ipykernel warns on every start that the traffic is not encrypted;
    local sockets in a folder only this user can read need no encryption. Where the
    socket path would be too long for the platform, TCP it is.
    """
    path = str(socket_dir / name)
    if not zmq.has("ipc") or len(path.encode()) + 6 > IPC_PATH_MAX:
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": path}})


def run_notebook(
    notebook: nbformat.NotebookNode, cwd: Path, records_file: Path, timeout: int, stop: Stop,
    kernel: Kernel | None = None,
) -> tuple[str, int | None] | None:
    """Execute ``notebook`` in place in a fresh kernel: ``kernel`` (started earlier) or a new one.

    A kernel it is given is its caller's to close; one it starts itself it closes. Closing kills
    the kernel: its outputs are in, and a graceful exit only adds the second a process with torch
    and CUDA takes to end. When the run is stopped the kernel is killed at once.
    None on success, else why it stopped (one line) and the cell (1-based) it stopped in, if any.
    """
    own_loop = None
    if kernel is None:
        own_loop = KernelLoop()
        kernel = Kernel.start(own_loop, cwd, records_file)
    client = Client(notebook, km=kernel.km, timeout=timeout, kernel_name="python3",
                    resources={"metadata": {"path": str(cwd)}})
    client.stop = stop

    async def execute() -> None:
        try:
            await asyncio.wrap_future(kernel.started)
            await client.async_execute()
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
            # nbclient registers an exit-time cleanup of the kernel it drove; this one is ours
            atexit.unregister(client._cleanup_kernel)

    done = kernel.loop.submit(execute())
    deadline = None
    try:
        while True:
            concurrent.futures.wait([done], timeout=0.1)
            if done.done():
                error = done.exception()  # reported below, with the cell it stopped in
                break
            if stop.signum is not None:
                kill_kernel(kernel.km)  # again on every turn: the kernel may still be starting
                deadline = deadline or time.monotonic() + STOP_GRACE_SECONDS
                if time.monotonic() > deadline:
                    error = DeadKernelError("the run was interrupted")
                    break
    finally:
        if own_loop is not None:
            kernel.close()
            own_loop.close()
    if error is None:
        return None
    cell = None if client.current_cell is None else client.current_cell + 1
    return stop_reason(error, notebook, client.current_cell, timeout), cell


def stop_reason(
    error: BaseException, notebook: nbformat.NotebookNode, cell: int | None, timeout: int
) -> str:
    """One line: which cell stopped the notebook (number, first source line) and why."""
    where = ""
    if cell is not None:
        source = first_line(notebook.cells[cell].source, 60)
        where = f'cell {cell + 1} of {len(notebook.cells)} ("{source}"): '
    if isinstance(error, CellTimeoutError):
        return f"{where}still running after {timeout} s (--timeout); the kernel was stopped"
    if isinstance(error, CellExecutionError):
        return f"{where}{error.ename}: {first_line(error.evalue)}"
    if isinstance(error, DeadKernelError):
        return f"{where}the kernel died ({first_line(str(error))})"
    return f"{where}{type(error).__name__}: {first_line(str(error))}"


def execute_notebook(
    path: Path, executed_dir: Path, records_dir: Path, timeout: int, stop: Stop, kernel: Kernel | None = None
) -> NotebookResult:
    """Execute one notebook, save the executed copy (also after a failure), collect its sections.

    The kernel runs in the notebook's folder, so relative paths behave as in Jupyter.
    A notebook that cannot be read is FAILED with the reason; the run goes on.
    """
    started = time.monotonic()
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:
        why = f"cannot read {path.name}: {type(error).__name__}: {first_line(str(error))}"
        return NotebookResult(path.stem, FAILED, 0.0, error=why)
    records_file = records_dir / f"{path.stem}.jsonl"
    error, cell = run_notebook(notebook, path.parent.resolve(), records_file, timeout, stop, kernel) or (None, None)
    nbformat.write(notebook, executed_dir / path.name)
    sections = read_section_records(records_file)
    failed = error is not None or any(s.status == FAILED for s in sections)
    return NotebookResult(
        notebook=path.stem,
        status=FAILED if failed else OK,
        seconds=round(time.monotonic() - started, 1),
        error=error,
        sections=sections,
        cell=cell,
    )


def need_label(needs: str | None) -> str:
    """Why a section was skipped, in a few words, from the need it lacked."""
    if not needs:
        return "other reasons"
    if re.fullmatch(r"cc\d+\.\d+", needs):
        return f"GPU below compute capability {needs[2:]}"
    return NEED_LABELS.get(needs, f"no {needs}")


def headline(results: list[NotebookResult]) -> str:
    """What ran first, e.g. ``3 sections ran OK, 23 skipped (21 no GPU, 2 other reasons), 0 failed``.

    When a notebook stopped before its end (a cell error, a timeout, an unreadable file), the
    section counts say "sections" and the notebooks that stopped are named with their cell:
    ``... 0 sections failed; 1 of 3 notebooks stopped by an error in cell 2 (01_bad)``.
    """
    sections = [s for result in results for s in result.sections]
    counts = Counter(s.status for s in sections)
    skipped = Counter(need_label(s.needs) for s in sections if s.status == SKIPPED)
    why = ""
    if len(skipped) == 1:
        why = f" ({next(iter(skipped))})"
    elif skipped:
        why = " (" + ", ".join(f"{n} {label}" for label, n in skipped.most_common()) + ")"
    noun = "section" if counts[OK] == 1 else "sections"
    stopped = [result for result in results if result.error is not None]
    failed = f"{counts[FAILED]} failed"
    if stopped:  # notebooks are counted too: say which count is which
        failed = f"{counts[FAILED]} {'section' if counts[FAILED] == 1 else 'sections'} failed"
    text = f"{counts[OK]} {noun} ran OK, {counts[SKIPPED]} skipped{why}, {failed}"
    if stopped:
        total = f"{len(stopped)} of {len(results)} {'notebook' if len(results) == 1 else 'notebooks'}"
        if len(stopped) == 1:
            where = f" in cell {stopped[0].cell}" if stopped[0].cell is not None else ""
            text += f"; {total} stopped by an error{where} ({stopped[0].notebook})"
        else:
            where = ", ".join(r.notebook + (f" cell {r.cell}" if r.cell is not None else "") for r in stopped)
            text += f"; {total} stopped by an error ({where})"
    return text


def build_card(results: list[NotebookResult], started_at: str, finished_at: str) -> dict[str, Any]:
    """The results card as plain data, ready for JSON and for the Markdown writer."""
    section_totals: Counter[str] = Counter()
    for result in results:
        section_totals.update(result.counts())
    return {
        "started_at": started_at,
        "finished_at": finished_at,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "headline": headline(results),
        "totals": {
            "notebooks": len(results),
            "notebooks_ok": sum(r.status == OK for r in results),
            "notebooks_failed": sum(r.status != OK for r in results),
            "sections": {status: section_totals.get(status, 0) for status in STATUSES},
            "seconds": round(sum(r.seconds for r in results), 1),
        },
        "notebooks": [
            {
                "notebook": r.notebook,
                "status": r.status,
                "seconds": r.seconds,
                "error": r.error,
                "cell": r.cell,
                "counts": r.counts(),
                "sections": [asdict(section) for section in r.sections],
            }
            for r in results
        ],
    }


def counts_text(counts: dict[str, int]) -> str:
    """Section counts as text, e.g. ``3 OK, 1 SKIPPED, 0 FAILED``."""
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES)


def cell_text(value: str | None) -> str:
    """Text for one Markdown table cell: the whole first line, pipes escaped."""
    lines = (value or "").strip().splitlines()
    return (lines[0] if lines else "").replace("|", "\\|")


def card_markdown(card: dict[str, Any]) -> str:
    """The human-readable card: headline, one row per notebook, a table per notebook, skip reasons."""
    totals = card["totals"]
    lines = [
        "# nspy-tutorial results",
        "",
        f"**{card['headline']}**",
        "",
        f"- Notebooks: {totals['notebooks_ok']} of {totals['notebooks']} without a FAILED section, "
        f"{totals['seconds']:.1f} s",
        f"- When: {card['started_at']} to {card['finished_at']}",
        f"- Machine: {card['machine']['platform']}, Python {card['machine']['python']}",
        "",
        "| Notebook | Status | OK | SKIPPED | FAILED | Time (s) | Error |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in card["notebooks"]:
        n = entry["counts"]
        lines.append(
            f"| {entry['notebook']} | {entry['status']} | {n[OK]} | {n[SKIPPED]} | {n[FAILED]} "
            f"| {entry['seconds']:.1f} | {cell_text(entry['error'])} |"
        )
    lines.append("")
    for entry in card["notebooks"]:
        lines += [f"## {entry['notebook']} — {entry['status']}", ""]
        if entry["error"]:
            lines += [f"**Stopped by an error:** {cell_text(entry['error'])}", ""]
        if not entry["sections"]:
            lines += ["_No section records._", ""]
            continue
        lines += ["| Section | Status | Result or reason | Remedy |", "|---|---|---|---|"]
        for s in entry["sections"]:
            detail, remedy = (s["result"], None) if s["status"] == OK else (s["reason"], s["remedy"])
            lines.append(
                f"| {cell_text(s['section'])} | {s['status']} | {cell_text(detail)} | {cell_text(remedy)} |"
            )
        lines.append("")
    reasons = Counter(
        s["reason"] or "no reason given"
        for entry in card["notebooks"]
        for s in entry["sections"]
        if s["status"] == SKIPPED
    )
    if reasons:
        lines += ["## Why sections were skipped", ""]
        for reason, count in reasons.most_common():
            lines.append(f"- {cell_text(reason)} — {count} section{'' if count == 1 else 's'}")
    return "\n".join(lines).rstrip() + "\n"


def check_out_dir(out: Path) -> None:
    """Refuse to replace anything but a previous results folder (a mistyped --out is not wiped)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise RunnerError(f"--out {out} exists and is not a folder")
    if any(out.iterdir()) and not (out / "results.json").exists():
        raise RunnerError(
            f"--out {out} exists and does not look like a results folder "
            "(no results.json); refusing to replace it"
        )


def run(notebooks_dir: Path, out: Path, only: list[str] | None, timeout: int) -> int:
    """Run the notebooks, write the card, replace ``out``; return the exit code."""
    try:
        check_settings()
        bootstrap.backend_choice()
    except SettingError as error:
        raise RunnerError(str(error)) from None
    notebooks = find_notebooks(notebooks_dir, only)
    out = out.resolve()
    check_out_dir(out)
    partial = out.parent / f"{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    started_at = now()
    results: list[NotebookResult] = []
    try:
        with (
            Stop() as stop,
            tempfile.TemporaryDirectory(prefix="nspy-run-") as scratch,
            socket_folder() as sockets,
            KernelLoop() as loop,
        ):
            (partial / "notebooks").mkdir(parents=True)

            def kernel_for(path: Path) -> Kernel:
                return Kernel.start(loop, path.parent.resolve(), Path(scratch) / f"{path.stem}.jsonl", Path(sockets),
                                    warm_up=warms_up(path))

            upcoming: Kernel | None = kernel_for(notebooks[0])
            try:
                for index, path in enumerate(notebooks, 1):
                    if stop.signum is not None:
                        break
                    label = f"[{index}/{len(notebooks)}] {path.stem} ..."
                    print(label, flush=True)
                    # the next notebook's kernel starts while this one runs
                    kernel, upcoming = upcoming, kernel_for(notebooks[index]) if index < len(notebooks) else None
                    try:
                        result = execute_notebook(path, partial / "notebooks", Path(scratch), timeout, stop, kernel)
                        warm_up_failed = kernel.warm_up_failure()
                    finally:
                        kernel.close()  # run() started it, run() closes it, as soon as its notebook is done
                    if warm_up_failed and stop.signum is None:
                        print(f"{label} (its kernel's warm-up failed: {warm_up_failed}; the setup cell took the "
                              "same steps itself)", flush=True)
                    if stop.signum is None:
                        how = "FAILED after" if result.error else "done in"
                        why = f"; {result.error}" if result.error else ""
                        print(f"{label} {how} {result.seconds:.1f} s: {counts_text(result.counts())}{why}", flush=True)
                    results.append(result)
            finally:
                if upcoming is not None:
                    upcoming.close()
            if stop.signum is None:
                card = build_card(results, started_at, now())
                (partial / "results.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
                (partial / "results.md").write_text(card_markdown(card), encoding="utf-8")
            if stop.signum is not None:
                shutil.rmtree(partial, ignore_errors=True)
                return interrupted(stop.signum, out)
            if out.exists():
                shutil.rmtree(out)
            os.replace(partial, out)
    except (Interrupted, KeyboardInterrupt) as stopped:  # outside the Stop handler's window (cli's handlers)
        shutil.rmtree(partial, ignore_errors=True)
        return interrupted(stopped.signum if isinstance(stopped, Interrupted) else signal.SIGINT, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(card["headline"])
    print(f"Results card: {out / 'results.md'} (data: {out / 'results.json'})")
    return EXIT_OK if all(r.status == OK for r in results) else EXIT_FAILED


__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "RunnerError", "main", "run"]


if __name__ == "__main__":
    sys.exit(main())
