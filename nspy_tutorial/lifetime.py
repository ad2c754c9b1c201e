"""Every process a notebook starts ends with its cell, or with its kernel: :func:`run` kills the command's whole
tree whatever ends the wait (exit, timeout, an interrupted cell): every process carrying its :data:`TREE_VAR`, and
every descendant (ncu's ``TreeLauncherSubreaper`` escapes a process-group kill). A killed kernel runs nothing, so
the command dies with its parent (``PR_SET_PDEATHSIG``), and a Python child further down exits in :func:`watch_owner`."""

import ctypes
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

TREE_VAR = "NSPY_TUTORIAL_TREE"  # one value per command run: every process of its tree inherits it
OWNER_VAR = "NSPY_TUTORIAL_OWNER"  # "<pid>:<start time>" of the notebook's process that started it
PR_SET_PDEATHSIG = 1
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


def kill_tree(tag: str, root: int) -> None:
    """SIGKILL every process of the tree until none is left (a process may fork meanwhile)."""
    for _ in range(100):
        if not (left := _tree(tag, root)):
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run(cmd: Sequence[str], env: Mapping[str, str], timeout: float, echo: bool = False) -> tuple[int, str]:
    """Run ``cmd`` with ``env``: its exit code and output (through a file: a full pipe blocks), or
    ``TimeoutExpired``. ``echo`` prints the lines as they come, and a line every 30 s of silence."""
    tag = uuid.uuid4().hex
    env = {**env, TREE_VAR: tag, OWNER_VAR: identity(os.getpid()) or ""}
    with tempfile.TemporaryFile(mode="w+b") as log:
        process = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=_die_with_parent)
        try:
            code = _wait_echoing(process, log, timeout) if echo else process.wait(timeout=timeout)
        finally:
            kill_tree(tag, process.pid)
            process.wait()
        log.seek(0)
        return code, log.read().decode(errors="replace")


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
