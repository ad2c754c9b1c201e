"""Specifications for several ncu processes started together that measure one at a time.

``ncu_cli.nsight_tables`` starts one ncu process per setting at once, so that their start-ups
(Python, torch, nsight) overlap; each child's ``replay`` waits for its turn before it touches
the GPU. Here the "ncu" commands are plain Python children that log when they start, get
their turn and finish: that is the order a GPU run depends on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nspy_tutorial import ncu_cli

CHILD = """
import sys, time
from nspy_tutorial import ncu_cli

log, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
def note(what):
    with open(log, "a") as handle:
        handle.write(f"{name} {what} {time.time()}\\n")
note("started")
ncu_cli.wait_for_turn()
note("turn")
time.sleep(seconds)
note("done")
"""


def child(log, name: str, seconds: float = 1.0) -> list[str]:
    return [sys.executable, "-c", CHILD, str(log), name, str(seconds)]


def events(log) -> dict[tuple[str, str], float]:
    return {(name, what): float(at) for name, what, at in (line.split() for line in log.read_text().splitlines())}


def test_the_children_start_together_and_measure_one_at_a_time_in_order(tmp_path):
    log = tmp_path / "log"
    ncu_cli.run_in_turns([child(log, name) for name in "abc"], str(tmp_path))
    at = events(log)
    assert max(at[name, "started"] for name in "abc") < at["a", "done"], "every child started before the first ended"
    assert at["a", "done"] <= at["b", "turn"] and at["b", "done"] <= at["c", "turn"], "one measures at a time, in order"


def test_each_childs_output_is_returned_in_order(tmp_path):
    commands = [[sys.executable, "-c", f"print('child {i}')"] for i in range(3)]
    assert [out.strip() for out in ncu_cli.run_in_turns(commands, str(tmp_path))] == ["child 0", "child 1", "child 2"]


def test_a_failing_child_stops_the_others_and_its_last_lines_say_why(tmp_path):
    fails = [sys.executable, "-c", "import sys; print('the kernels module is broken'); sys.exit(3)"]
    started = time.monotonic()
    with pytest.raises(ncu_cli.NcuCliError, match=r"ncu exited 3:\s+the kernels module is broken"):
        ncu_cli.run_in_turns([fails, child(tmp_path / "log", "b", seconds=60)], str(tmp_path))
    assert time.monotonic() - started < 30, "the waiting child was stopped, not waited for"


def test_refused_counters_in_any_child_name_the_fix(tmp_path):
    refused = [sys.executable, "-c", "print('==ERROR== ERR_NVGPUCTRPERM - The user does not have permission')"]
    with pytest.raises(ncu_cli.CountersNotPermitted, match="ERR_NVGPUCTRPERM"):
        ncu_cli.run_in_turns([[sys.executable, "-c", "pass"], refused], str(tmp_path))


def test_a_child_started_alone_does_not_wait(monkeypatch):
    monkeypatch.delenv(ncu_cli.TURN_VAR, raising=False)
    started = time.monotonic()
    ncu_cli.wait_for_turn(timeout=5)
    assert time.monotonic() - started < 1


def test_a_child_whose_turn_never_comes_gives_up_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(ncu_cli.TURN_VAR, str(tmp_path / "never"))
    with pytest.raises(SystemExit, match=f"no turn to measure within 0 s \\({ncu_cli.TURN_VAR}="):
        ncu_cli.wait_for_turn(timeout=0.05)


MODULE = '''
import nsight

CALLS = []


def warm_up():
    CALLS.append("warm-up")


def prepare(n):
    CALLS.append(f"prepare {n}")
    open(f"prepared-{n}", "w").close()


def work(n):
    with nsight.annotate("work"):
        CALLS.append(n)


if __name__ == "__main__":
    from nspy_tutorial import ncu_cli
    ncu_cli.replay(globals(), warm_up=warm_up, before_turn={"work": prepare})
    print(CALLS)
'''


def test_replay_prepares_each_config_then_waits_for_its_turn_then_warms_up_then_runs(tmp_path):
    (tmp_path / "k.py").write_text(MODULE)
    turn = tmp_path / "turn"
    env = {**ncu_cli.child_environment(), ncu_cli.TURN_VAR: str(turn)}
    process = subprocess.Popen([sys.executable, "k.py", "work", "[[1], [2]]", "1"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "prepared-2").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert (tmp_path / "prepared-2").exists() and process.poll() is None, "prepared, and waiting for its turn"
    turn.touch()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1] == "['prepare 1', 'prepare 2', 'warm-up', 1, 2]"


def test_a_waiting_child_whose_starter_is_gone_gives_up(tmp_path, monkeypatch):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv(ncu_cli.TURN_VAR, str(tmp_path / "never"))
    monkeypatch.setenv(ncu_cli.OWNER_VAR, str(gone.pid))
    with pytest.raises(SystemExit, match=f"the process that started this one \\({gone.pid}\\) is gone"):
        ncu_cli.wait_for_turn(timeout=30)


def test_processes_started_ahead_are_stopped_when_nobody_asks_for_their_turn(tmp_path):
    turns = ncu_cli.Turns([child(tmp_path / "log", "a", seconds=0)])
    process = turns.processes[0]
    del turns
    assert process.wait(timeout=10) != 0, "killed, not left waiting"


def work(n):
    return n


@pytest.mark.parametrize("key, report", [(None, "work.ncu-rep"), ("all", "work-all.ncu-rep"),
                                         (("all", "base"), "work-all-base.ncu-rep")])
def test_each_setting_gets_a_report_named_after_the_function_and_its_key(key, report):
    assert ncu_cli._variant_settings(work, key, {}, {"configs": [1]})["report"] == report


def test_a_setting_given_for_one_process_overrides_the_shared_one():
    chosen = ncu_cli._variant_settings(work, "x", {"cache_control": "none"}, {"configs": [1], "cache_control": "all"})
    assert chosen["cache_control"] == "none" and chosen["clock_control"] == "none"


def test_turn_files_go_in_the_folder_given_and_nothing_else_is_left_there(tmp_path):
    ncu_cli.run_in_turns([[sys.executable, "-c", "pass"]] * 2, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["turn-0", "turn-1"]


LAUNCHER = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
"""


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has exited
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc")
def test_stopping_a_waiting_command_also_stops_the_python_it_launched(tmp_path):
    """As ncu launches the profiled Python: killing only the launcher would leave it waiting for a turn."""
    grandchild = 'import os, sys; open(sys.argv[1], "w").write(str(os.getpid())); import time; time.sleep(60)'
    turns = ncu_cli.Turns([[sys.executable, "-c", LAUNCHER, grandchild, str(tmp_path / "pid")]])
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline, "the launched Python never started"
        time.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    turns.stop()
    deadline = time.monotonic() + 10
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)
