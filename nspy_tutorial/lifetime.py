"""Every process a notebook starts ends with its cell, or with its kernel, and may first undo what it set: :func:`run`
stops (:func:`stop`) the command's whole tree whatever ends the wait (exit, timeout, an interrupted cell): every process
carrying its :data:`TREE_VAR`, and every descendant (ncu's ``TreeLauncherSubreaper`` escapes a process-group kill).
Measured on the H200 (ncu 2025.3.1, ``--clock-control base``): after SIGINT ncu exits within 4 s and the idle SM
clock is back; after SIGTERM it still runs at 5 s; SIGKILL while it profiles leaves the SM clock locked (1,500 MHz)
until the machine is given back. So: SIGINT, twice those 4 s of grace, then SIGKILL; the command in a session of its
own (a kernel restart SIGKILLs the kernel's process group); SIGINT when its parent dies (``PR_SET_PDEATHSIG``: a
killed kernel runs nothing), and a Python child further down exits in :func:`watch_owner`."""

import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence

TREE_VAR = "NSPY_TUTORIAL_TREE"  # one value per command run: every process of its tree inherits it
OWNER_VAR = "NSPY_TUTORIAL_OWNER"  # "<pid>:<start time>" of the notebook's process that started it
PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 8.0  # after SIGINT, before SIGKILL: ncu needed at most 4 s to restore the clocks
FORCED_STOP_HOOKS: list[Callable[[list[list[str]]], None]] = []  # called with the command lines SIGKILL ended
_LIBC = ctypes.CDLL(None, use_errno=True) if os.path.exists("/proc/self/stat") else None


def _stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, ...); None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZX" else fields


def identity(pid: int) -> str | None:
    """``"<pid>:<start time>"`` of a running process, else None: a reused pid differs."""
    fields = _stat(pid)
    return None if fields is None else f"{pid}:{fields[19]}"


def _tree(tag: str, root: int) -> set[int]:
    """Live processes that carry ``tag`` in their environment or descend from ``root``."""
    parents, tagged = {}, set()
    marker = f"{TREE_VAR}={tag}".encode()
    for name in filter(str.isdigit, os.listdir("/proc")):
        if (fields := _stat(name)) is None:
            continue
        parents[int(name)] = int(fields[1])
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    tagged.add(int(name))
        except OSError:  # another user's process, or gone
            pass
    found = tagged | ({root} & parents.keys())
    while more := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= more
    return found - {os.getpid()}


def _signal(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _command_line(pid: int) -> list[str]:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().decode(errors="replace").split("\0")[:-1]
    return []


def stop(find: Callable[[], set[int]]) -> None:
    """SIGINT each process ``find()`` names (also one that appears meanwhile), wait until none is left or
    :data:`GRACE_SECONDS` have passed, SIGKILL the rest until none is left, and give the hooks the command lines
    SIGKILL ended. A second Ctrl-C meanwhile must not cut the stop short: it is raised when the stop is done."""
    held, deadline, told, killed = [], time.monotonic() + GRACE_SECONDS, set(), {}
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: held.append(1))
    except ValueError:  # not the main thread, where no KeyboardInterrupt arrives anyway
        previous = held
    try:
        while (left := find()) and time.monotonic() < deadline:
            _signal(left - told, signal.SIGINT)
            told |= left
            time.sleep(0.05)
        for _ in range(100):
            if not (left := find()):
                break
            killed.update({pid: _command_line(pid) for pid in left - killed.keys()})
            _signal(left, signal.SIGKILL)
            time.sleep(0.01)
        for hook in FORCED_STOP_HOOKS if killed else ():
            hook(list(killed.values()))
    finally:
        if previous is not held:
            signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGINT)


def run(cmd: Sequence[str], env: Mapping[str, str], timeout: float, echo: bool = False) -> tuple[int, str]:
    """Run ``cmd`` with ``env``: its exit code and output (through a file: a full pipe blocks), or
    ``TimeoutExpired``. ``echo`` prints the lines as they come, and a line every 30 s of silence."""
    tag = uuid.uuid4().hex
    env = {**env, TREE_VAR: tag, OWNER_VAR: identity(os.getpid()) or ""}
    with tempfile.TemporaryFile(mode="w+b") as log:
        process = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=_die_with_parent, start_new_session=True)
        try:
            code = _wait_echoing(process, log, timeout) if echo else process.wait(timeout=timeout)
        finally:
            try:
                stop(lambda: _tree(tag, process.pid))
            finally:
                process.wait()
        log.seek(0)
        return code, log.read().decode(errors="replace")


@contextlib.contextmanager
def stop_children_cleanly() -> Iterator[None]:
    """Around a call that starts a process and may not end it (nsight-python's Nsight Compute backend starts its
    attach-mode ncu with ``Popen`` and restores nothing when interrupted): processes started during the block carry
    a tag of its own; if the block is interrupted or raises, :func:`stop` them, then re-raise. What it cannot do: if
    the kernel process itself dies, nothing runs in it and that ncu is orphaned; how that ncu then behaves is untested
    (the H200 test machine has no ncu >= 2026.2.1, which that backend needs)."""
    tag, outer = uuid.uuid4().hex, os.environ.get(TREE_VAR)
    os.environ[TREE_VAR] = tag
    try:
        yield
    except BaseException:
        stop(lambda: _tree(tag, -1))
        raise
    finally:
        os.environ.pop(TREE_VAR) if outer is None else os.environ.update({TREE_VAR: outer})


def _wait_echoing(process: subprocess.Popen, log, timeout: float) -> int:
    start = heard = time.monotonic()
    shown = 0
    while True:
        try:
            code = process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        log.seek(shown)
        new = log.read()
        lines = new if code is not None else new[: new.rfind(b"\n") + 1]  # a line still being written waits
        shown += len(lines)
        for line in lines.decode(errors="replace").splitlines():
            print(f"    {line}", flush=True)
        now = time.monotonic()
        if code is not None:
            return code
        if now - start > timeout:
            raise subprocess.TimeoutExpired(process.args, timeout)
        if lines:
            heard = now
        elif now - heard >= 30:
            print(f"    ... still running ({now - start:.0f} s)", flush=True)
            heard = now


def watch_owner(interval: float = 0.5) -> None:
    """In a child started by :func:`run`: exit at once when the notebook's process is gone."""
    owner = os.environ.get(OWNER_VAR)
    if not owner:
        return

    def watch() -> None:
        while identity(int(owner.split(":")[0])) == owner:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="watch-owner", daemon=True).start()
