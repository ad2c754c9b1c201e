"""Every process a notebook starts is gone within 5 s of its cell's or its kernel's end.

The ``ncu`` here is a fake with the real one's shape: it starts the profiled Python in a
session of its own (as ncu's ``TreeLauncherSubreaper`` may) and waits for it. The profiled
Python sleeps, watching its owner as the kernels modules do (``ncu_cli.replay``). Each
writes its pid into ``$FAKE_NCU_PIDS`` so that the test can see the tree it must not leave.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from nspy_tutorial import lifetime, ncu_cli

ROOT = Path(__file__).resolve().parents[1]
GONE_WITHIN = 5.0

FAKE_NCU = f"""#!{sys.executable}
import os, subprocess, sys
open(os.path.join(os.environ["FAKE_NCU_PIDS"], "ncu"), "w").write(str(os.getpid()))
script = next(i for i, arg in enumerate(sys.argv) if arg.endswith(".py"))
sys.exit(subprocess.run([sys.executable, *sys.argv[script:]], start_new_session=True).returncode)
"""

SLEEPER = """import os, time
from nspy_tutorial import lifetime
lifetime.watch_owner()
open(os.path.join(os.environ["FAKE_NCU_PIDS"], "python"), "w").write(str(os.getpid()))
time.sleep(120)
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """(the fake ncu, the sleeping script, the folder where both write their pids)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(0o755)
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    monkeypatch.setenv("FAKE_NCU_PIDS", str(pids))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return str(ncu), str(tmp_path / "sleeper.py"), pids


def started(pids: Path, timeout: float = 60) -> list[psutil.Process]:
    """The fake ncu and its Python, once both are running."""
    deadline = time.monotonic() + timeout
    while not (pids / "python").exists():
        assert time.monotonic() < deadline, "the fake ncu's Python did not start"
        time.sleep(0.05)
    time.sleep(0.1)
    return [psutil.Process(int((pids / name).read_text())) for name in ("ncu", "python")]


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def assert_gone(processes: list[psutil.Process]) -> None:
    deadline = time.monotonic() + GONE_WITHIN
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive(processes)
    for p in left:
        p.kill()
    assert left == [], f"still running after {GONE_WITHIN} s: {[(p.pid, p.cmdline()) for p in left]}"


def test_the_fake_ncu_starts_its_python_in_a_session_of_its_own(tree):
    ncu, sleeper, pids = tree
    process = subprocess.Popen([ncu, "--metrics", "x", sys.executable, sleeper])
    try:
        fake, python = started(pids)
        assert python.ppid() == fake.pid and os.getsid(python.pid) != os.getsid(fake.pid)
    finally:
        os.killpg(os.getpgid(python.pid), signal.SIGKILL)
        process.wait()


def test_an_interrupted_cell_leaves_no_process_of_the_tree(tree):
    """KeyboardInterrupt while the cell waits for ncu: what Colab's Stop button does."""
    ncu, sleeper, pids = tree
    seen = []
    interrupter = threading.Thread(target=lambda: (seen.extend(started(pids)), os.kill(os.getpid(), signal.SIGINT)))
    interrupter.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ncu_cli.run([ncu, "--nvtx", sys.executable, sleeper])
    interrupter.join()
    assert len(seen) == 2 and time.monotonic() - start < 60
    assert_gone(seen)


LEAVER = """import os, subprocess, sys
orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
open(os.path.join(os.environ["FAKE_NCU_PIDS"], "orphan"), "w").write(str(orphan.pid))
"""


def test_a_command_that_ends_leaves_no_descendant_behind(tree, tmp_path):
    """A grandchild in a session of its own that outlives its parent is ended when the wait ends."""
    ncu, _, pids = tree
    (tmp_path / "leaver.py").write_text(LEAVER)
    code, _ = lifetime.run([ncu, sys.executable, str(tmp_path / "leaver.py")], dict(os.environ), timeout=60)
    assert code == 0
    try:
        orphan = [psutil.Process(int((pids / "orphan").read_text()))]
    except psutil.NoSuchProcess:  # killed and already reaped
        orphan = []
    assert_gone(orphan)


NOTEBOOK_PROCESS = """import os, sys
from nspy_tutorial import ncu_cli
ncu_cli.run([sys.argv[1], "--nvtx", sys.executable, sys.argv[2]])
"""


def test_a_killed_kernel_leaves_no_process_of_the_tree(tree, tmp_path):
    """SIGKILL of the notebook's process: nothing of it runs, so ncu and its Python must notice."""
    ncu, sleeper, pids = tree
    (tmp_path / "notebook.py").write_text(NOTEBOOK_PROCESS)
    notebook = subprocess.Popen([sys.executable, str(tmp_path / "notebook.py"), ncu, sleeper])
    try:
        seen = started(pids)
    finally:
        notebook.kill()
        notebook.wait()
    assert_gone(seen)


TINY_NOTEBOOK = """import os, sys
from nspy_tutorial import ncu_cli
ncu_cli.run([os.environ["FAKE_NCU"], "--nvtx", sys.executable, os.environ["FAKE_SCRIPT"]])"""


def test_a_stopped_run_command_leaves_no_process_of_the_tree(tree, tmp_path, monkeypatch):
    """SIGTERM to ``nspy-tutorial run`` while a cell waits for ncu: the run, its kernel and ncu's tree end."""
    ncu, sleeper, pids = tree
    folder = tmp_path / "notebooks"
    folder.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TINY_NOTEBOOK)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / "01_waits_for_ncu.ipynb")
    monkeypatch.setenv("FAKE_NCU", ncu)
    monkeypatch.setenv("FAKE_SCRIPT", sleeper)
    run = subprocess.Popen([sys.executable, "-m", "nspy_tutorial.cli", "run", "--notebooks-dir", str(folder),
                            "--out", str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = started(pids)
        seen += [p for p in psutil.Process(run.pid).children(recursive=True) if p not in seen]
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=30)[0].decode()
    finally:
        run.kill()
    assert run.returncode == 143, output
    assert_gone(seen)


def test_a_child_of_a_process_that_is_gone_exits(tmp_path):
    """watch_owner: the owner named in the environment is gone (its start time no longer matches)."""
    script = tmp_path / "orphan.py"
    script.write_text(textwrap.dedent("""
        import time
        from nspy_tutorial import lifetime
        lifetime.watch_owner(interval=0.05)
        time.sleep(30)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT), lifetime.OWNER_VAR: f"{os.getpid()}:0"}
    done = subprocess.run([sys.executable, str(script)], env=env, timeout=10)
    assert done.returncode == 1


# --------------------------------------------------------------------------
# Stopping: SIGINT first, a grace, then SIGKILL (ncu restores the clocks on SIGINT, not on SIGKILL)
# --------------------------------------------------------------------------

FAKE_PROFILER = """import os, signal, subprocess, sys, time
log, behaviour = open(sys.argv[1], "a", buffering=1), sys.argv[2]
def restore(*_):  # what ncu does on SIGINT: a second or so to restore the clocks, then exit
    log.write(f"SIGINT {os.getpid()}\\n")
    time.sleep(1)
    log.write(f"restored {os.getpid()}\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, restore if behaviour != "ignores" else signal.SIG_IGN)
if behaviour == "grandchild":  # a child in a session of its own that restores on SIGINT too
    subprocess.Popen([sys.executable, __file__, sys.argv[1], "restores"], start_new_session=True)
log.write(f"ready {os.getpid()}\\n")
time.sleep(120)
"""


@pytest.fixture
def profiler(tmp_path, monkeypatch):
    """A function that returns (the fake profiler's command, its log's lines) for a behaviour; the forced-stop
    hooks replaced by one that records what it is given, a grace of 1.5 s."""
    script = tmp_path / "ncu"
    script.write_text(FAKE_PROFILER)
    forced = []
    monkeypatch.setattr(lifetime, "FORCED_STOP_HOOKS", [forced.append])
    monkeypatch.setattr(lifetime, "GRACE_SECONDS", 1.5)
    log = tmp_path / "log"

    def lines() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    def command(behaviour: str) -> list[str]:
        return [sys.executable, str(script), str(log), behaviour]

    return command, lines, forced


def ready(lines, count: int = 1, timeout: float = 30) -> list[int]:
    """The pids of the fake profilers, once ``count`` of them are running."""
    deadline = time.monotonic() + timeout
    while sum(line.startswith("ready") for line in lines()) < count:
        assert time.monotonic() < deadline, f"the fake profiler did not start: {lines()}"
        time.sleep(0.05)
    return [int(line.split()[1]) for line in lines() if line.startswith("ready")]


def assert_pids_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + GONE_WITHIN
    while any(lifetime.identity(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if lifetime.identity(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running after {GONE_WITHIN} s: {left}"


def interrupt_when_ready(lines, count: int = 1, again_after: float | None = None) -> threading.Thread:
    """A thread that sends this process SIGINT (a Stop in Jupyter) once the fake is ready; maybe a second one."""
    def go() -> None:
        ready(lines, count)
        os.kill(os.getpid(), signal.SIGINT)
        if again_after is not None:
            time.sleep(again_after)
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_an_interrupted_run_gives_a_profiler_sigint_and_the_time_to_restore_never_sigkill(profiler):
    command, lines, forced = profiler
    thread = interrupt_when_ready(lines)
    with pytest.raises(KeyboardInterrupt):
        lifetime.run(command("restores"), dict(os.environ), timeout=60)
    thread.join()
    pid = lines()[0].split()[1]
    assert lines() == [f"ready {pid}", f"SIGINT {pid}", f"restored {pid}"]
    assert forced == [], "nothing needed SIGKILL"


def test_a_command_that_ignores_sigint_is_killed_after_the_grace_and_the_hooks_hear_of_it(profiler):
    command, lines, forced = profiler
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        lifetime.run(command("ignores"), dict(os.environ), timeout=1)
    took = time.monotonic() - start
    assert 1 + 1.5 <= took < 1 + 1.5 + 5, took
    assert forced == [[command("ignores")]]
    assert_pids_gone(ready(lines))


def test_a_grandchild_in_a_session_of_its_own_gets_sigint_too_and_nothing_is_left(profiler):
    command, lines, forced = profiler
    thread = interrupt_when_ready(lines, count=2)
    with pytest.raises(KeyboardInterrupt):
        lifetime.run(command("grandchild"), dict(os.environ), timeout=60)
    thread.join()
    both = ready(lines, count=2)
    assert sorted(line.split()[0] for line in lines()) == ["SIGINT"] * 2 + ["ready"] * 2 + ["restored"] * 2
    assert forced == []
    assert_pids_gone(both)


def test_a_second_ctrl_c_does_not_cut_the_stop_short(profiler):
    """Stop pressed twice, the second during the grace: the stop still ends with SIGKILL for what ignored SIGINT,
    and the second interrupt is raised when it is done. (A watchdog kills the fake after 10 s, lest a stop cut
    short leave this test waiting for it.)"""
    command, lines, forced = profiler
    thread = interrupt_when_ready(lines, again_after=0.3)
    watchdog = threading.Timer(10, lambda: [os.kill(pid, signal.SIGKILL) for pid in ready(lines)])
    watchdog.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lifetime.run(command("ignores"), dict(os.environ), timeout=60)
    finally:
        watchdog.cancel()
        thread.join()
    assert forced == [[command("ignores")]], "the stop ended before its SIGKILL"


KERNEL = """import os, sys
from nspy_tutorial import lifetime
lifetime.run(sys.argv[1:], dict(os.environ), timeout=120)
"""


@pytest.mark.parametrize("how", ["the kernel alone", "the kernel's process group"])
def test_a_killed_kernel_gives_its_profiler_sigint_not_sigkill(profiler, tmp_path, how):
    """Colab's restart and Jupyter's kill SIGKILL the kernel's process group: the command is in a session of its
    own, so only its parent-death signal, SIGINT, reaches it."""
    command, lines, forced = profiler
    (tmp_path / "kernel.py").write_text(KERNEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    kernel = subprocess.Popen([sys.executable, str(tmp_path / "kernel.py"), *command("restores")], env=env,
                              start_new_session=True)
    try:
        fake = ready(lines)
    finally:
        os.killpg(kernel.pid, signal.SIGKILL) if how == "the kernel's process group" else kernel.kill()
        kernel.wait()
    assert_pids_gone(fake)
    pid = fake[0]
    assert lines() == [f"ready {pid}", f"SIGINT {pid}", f"restored {pid}"]


def test_the_guard_stops_what_the_block_started_when_it_raises_and_re_raises(profiler):
    command, lines, forced = profiler
    with pytest.raises(RuntimeError, match="nsight failed"), lifetime.stop_children_cleanly():
        child = subprocess.Popen(command("restores"))
        ready(lines)
        raise RuntimeError("nsight failed")
    assert child.wait(5) == 0
    assert [line.split()[0] for line in lines()] == ["ready", "SIGINT", "restored"] and forced == []


def test_the_guard_kills_a_child_that_ignores_sigint_after_the_grace_and_the_hooks_hear_of_it(profiler):
    command, lines, forced = profiler
    thread = interrupt_when_ready(lines)
    with pytest.raises(KeyboardInterrupt), lifetime.stop_children_cleanly():
        child = subprocess.Popen(command("ignores"))
        time.sleep(60)
    thread.join()
    assert child.wait(5) == -signal.SIGKILL and forced == [[command("ignores")]]


def test_the_guard_leaves_alone_what_was_running_before_the_block_and_does_nothing_on_success(profiler):
    command, lines, forced = profiler
    older = subprocess.Popen(command("restores"))
    try:
        ready(lines)
        with lifetime.stop_children_cleanly():
            newer = subprocess.Popen(command("restores"))
            ready(lines, count=2)
        with pytest.raises(ValueError), lifetime.stop_children_cleanly():
            raise ValueError
        time.sleep(0.5)
        assert older.poll() is None and newer.poll() is None
        assert [line.split()[0] for line in lines()] == ["ready", "ready"]
    finally:
        older.kill()
        newer.kill()
        older.wait()
        newer.wait()
