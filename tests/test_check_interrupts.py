"""scripts/check_interrupts.py, the GPU check of issue 30 §1, on the CPU: its reading of clock samples (fake ones,
and the two recorded H200 runs' nvidia-smi samples), its verdicts, its command line, and one whole run against
fakes: an nvidia-smi that prints the SM clock kept in a file, and an ncu that "locks" it (writes 1,500 there) while
it profiles with clock control base and "restores" it (345) on SIGINT, as the real one did on the H200.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_interrupts", ROOT / "scripts" / "check_interrupts.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

CLOCK = ROOT / "tests" / "fixtures" / "clock"


def samples(*rows: tuple[float, int]) -> check.Samples:
    return check.Samples(list(rows))


def recorded(name: str) -> check.Samples:
    """A recorded run's nvidia-smi samples (timestamp, memory, temperature, SM clock, power) as the check's."""
    lines = (CLOCK / name).read_text().splitlines()
    start = datetime.strptime(lines[0].split(",")[0], "%Y/%m/%d %H:%M:%S.%f")
    rows = [((datetime.strptime(line.split(",")[0], "%Y/%m/%d %H:%M:%S.%f") - start).total_seconds(),
             int(line.split(",")[3])) for line in lines]
    return check.Samples(rows)


IDLE = {"idle_mhz": 345, "lowest_mhz": 345, "threshold_mhz": 545, "samples": 15}


# --------------------------------------------------------------------------
# Samples and what they say
# --------------------------------------------------------------------------


def test_a_line_of_nvidia_smi_gives_the_sm_clock():
    s = check.Samples()
    s.add(1.5, "2026/12/04 16:00:42.123, 345 MHz, 1234 MiB\n")
    s.add(1.7, "[N/A]\n")
    assert s.rows == [(1.5, 345)]


def test_the_idle_level_is_the_idle_windows_lowest_sample_and_a_margin():
    idle = check.idle_level(samples((0.0, 1980), (1.0, 345), (2.0, 360), (3.0, 345), (9.0, 1500)), 0.5, 3.5)
    assert idle == {"idle_mhz": 345, "highest_mhz": 360, "threshold_mhz": 345 + check.IDLE_MARGIN_MHZ, "samples": 3}


def test_a_boost_clock_that_lingers_after_work_does_not_raise_the_idle_level():
    # the GPU check's second run began right after the series: 1,980 MHz for 0.8 s, then 390, 360, 345
    idle = check.idle_level(samples((0.0, 1980), (0.6, 1980), (0.8, 390), (1.0, 360), (1.2, 345)), 0.5, 3.5)
    assert idle["idle_mhz"] == 345 and idle["threshold_mhz"] == 545
    with pytest.raises(RuntimeError, match="no SM clock sample"):
        check.idle_level(samples(), 0, 3)


def test_the_recorded_capped_machine_is_held_before_anything_runs_and_the_fresh_one_is_not():
    capped, normal = recorded("h200-clock-capped.csv"), recorded("h200-normal.csv")
    assert check.already_held(check.idle_level(capped, 0, 3), 1980)
    assert not check.already_held(check.idle_level(normal, 0, 3), 1980)


def test_the_recorded_capped_machine_is_held_at_the_end_and_the_fresh_one_comes_back():
    capped, normal = recorded("h200-clock-capped.csv"), recorded("h200-normal.csv")
    threshold = check.idle_level(normal, 0, 3)["threshold_mhz"]
    assert threshold == 545
    assert check.held_after(capped, capped.rows[-1][0] - check.BACK_WITHIN, threshold)
    ends = [t for (t, mhz), (_, after) in zip(normal.rows, normal.rows[1:]) if mhz > threshold >= after]
    assert len(ends) >= 10  # the ends of the normal run's bursts of work: the clock came back after each
    assert not any(check.held_after(normal, t, threshold) for t in ends)
    assert all(check.held_after(capped, t, threshold) for t in (0, 60, 120))


def clean_stop() -> check.Samples:
    """Idle at 345, ncu locks 1,500 from t=5, interrupt at t=10, ncu gone at 11.5, the boost lingers 2 s, idle at
    14 (modelled on the H200: SIGINT, ncu gone within 4 s, 345 MHz again)."""
    rows = [(t / 5, 345) for t in range(0, 25)] + [(t / 5, 1500) for t in range(25, 58)]
    rows += [(t / 5, 1980) for t in range(58, 70)] + [(t / 5, 345) for t in range(70, 100)]
    return check.Samples(rows)


def test_a_clean_stop_is_measured_from_the_interrupt():
    case = check.case_summary(clean_stop(), name="A", what="04", threshold=545, reached=True, seen=5.0, action=10.0,
                              gone=11.5, output="KeyboardInterrupt\n")
    assert case["ncu_gone_after_s"] == 1.5 and case["clock_back_after_s"] == 4.0
    assert case["peak_mhz"] == 1980 and case["mhz_at_interrupt"] == 1500
    assert case["stop"] == "clean" and case["reset"] == "not run"


def test_a_stop_that_needed_sigkill_carries_the_reset_line():
    line = "ncu was still running 8 s after SIGINT and was killed (clocks may be locked); `ncu --clock-control reset`: ok"
    case = check.case_summary(clean_stop(), name="A", what="04", threshold=545, reached=True, seen=5.0, action=10.0,
                              gone=11.5, output=f"x\n{line}\n")
    assert case["stop"] == "SIGKILL needed" and case["reset"] == line


def test_a_lock_that_stays_has_no_clock_back_and_fails_the_check():
    held = check.Samples([(t / 5, 345) for t in range(0, 25)] + [(t / 5, 1500) for t in range(25, 200)])
    case = check.case_summary(held, name="A", what="04", threshold=545, reached=True, seen=5.0, action=10.0, gone=11.0)
    assert case["clock_back_after_s"] is None and case["peak_mhz"] == 1500
    code, why = check.verdict({"cases": [case], "strict_04": {"not_run": "the clock did not come back", "sections": []}})
    assert code == 1 and why[0].startswith("case A: clean, clock back: None")


def test_a_clock_held_at_the_end_is_said_in_capitals_and_exits_3():
    code, why = check.verdict({"cases": [], "held_at_end": True})
    assert code == 3 and why == ["CLOCK STILL HELD: REPORT IT AND GIVE THE MACHINE BACK"]


def test_all_clean_and_04_without_a_failed_section_is_exit_0():
    case = check.case_summary(clean_stop(), name="A", what="04", threshold=545, reached=True, seen=5.0, action=10.0,
                              gone=11.5)
    strict = {"error": None, "sections": [{"section": "1. x", "status": "OK", "detail": "fine"}]}
    assert check.verdict({"cases": [case], "strict_04": strict, "held_at_end": False}) == (0, [])
    failed = {"error": None, "sections": [{"section": "1. x", "status": "FAILED", "detail": "no"}]}
    assert check.verdict({"cases": [case], "strict_04": failed, "held_at_end": False})[0] == 1


def test_a_case_not_reached_fails_the_check_with_its_note():
    case = check.case_summary(check.Samples(), name="B", what="10", threshold=545, reached=False, note="ended first")
    assert case["stop"] == "not reached"
    assert check.verdict({"cases": [case], "strict_04": {"error": None, "sections": []}})[1][0].endswith("ended first")


def test_the_table_is_short_lines():
    case = check.case_summary(clean_stop(), name="A", what="04 §1, --clock-control base", threshold=545, reached=True,
                              seen=5.0, action=10.0, gone=11.5)
    summary = {"idle": IDLE, "end_mhz": 345, "cases": [case],
               "strict_04": {"error": None, "sections": [{"section": "0. Defaults", "status": "OK", "detail": "x"}]}}
    lines = check.table(summary)
    assert all(len(line) <= 120 for line in lines)
    assert "1.5 s" in lines[3] and "4.0 s" in lines[3] and "clean" in lines[3] and lines[-1] == "04 strict: 0 OK"


def test_a_command_line_holds_words_in_order():
    line = ["/usr/local/cuda/bin/ncu", "--cache-control", "all", "--clock-control", "base", "python3"]
    assert check.holds(line, "--clock-control", "base") and not check.holds(line, "--clock-control", "none")
    assert check.ncu_processes({1: line, 2: ["/bin/sh", "/opt/ncu", "--set", "full"], 3: ["python3", "ncu.py"]}) == {
        1: line, 2: ["/bin/sh", "/opt/ncu", "--set", "full"]}


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "says"), [
    ([], "the following arguments are required: out"),
    (["{file}"], "is a file, not a folder"),
    (["{full}"], "is not empty: give a new folder"),
    (["{new}", "--budget", "60"], "--budget must be at least 120 seconds"),
    (["{new}", "--cases", "AE"], "--cases: letters among A, B, C, D"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, says):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.json").write_text("{}")
    paths = {"file": tmp_path / "file", "full": tmp_path / "full", "new": tmp_path / "new"}
    with pytest.raises(SystemExit) as exited:
        check.main([arg.format(**paths) for arg in args])
    assert exited.value.code == 2 and says in capsys.readouterr().err


def test_without_nvidia_smi_it_says_where_to_run_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(check, "SMI", ["no-such-nvidia-smi"])
    assert check.main([str(tmp_path / "out")]) == 2
    assert "run it on the GPU machine" in capsys.readouterr().err and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------
# A whole run against fakes
# --------------------------------------------------------------------------

FAKE_SMI = """import sys, time
while True:
    try:
        mhz = open(sys.argv[1]).read().strip() or "345"
    except OSError:
        mhz = "345"
    print(f"2026/12/04 00:00:00.000, {mhz} MHz, 0 MiB", flush=True)
    time.sleep(0.1)
"""

FAKE_NCU = """#!{python}
import os, signal, subprocess, sys, time
args, clock = sys.argv[1:], os.environ["FAKE_CLOCK"]
locks = "--set" in args or "base" in args  # ncu's default clock control, or asked for
target = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'w'); time.sleep(60)",
                           os.environ["FAKE_DEVICE"]])
def restore(*_):
    time.sleep(0.3)
    open(clock, "w").write("345")
    target.kill()
    sys.exit(0)
signal.signal(signal.SIGINT, restore)
if locks:
    open(clock, "w").write("1500")
time.sleep(4)
restore()
"""

RUNS_NCU = """import os, sys
from nspy_tutorial import lifetime
lifetime.run([os.environ["FAKE_NCU"], {options}, "-o", "report", sys.executable, "kernels.py"], dict(os.environ), 60)
"""

RECORDS = """import json, os
with open(os.environ["NSPY_TUTORIAL_RESULTS"], "a") as f:
    f.write(json.dumps({"notebook": "04", "section": "1. fake", "status": "OK", "result": "ran"}) + "\\n")
"""


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    clock = tmp_path / "clock"
    clock.write_text("345")
    (tmp_path / "smi.py").write_text(FAKE_SMI)
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for stem, options in [("04_cache_and_clock_control", '"--clock-control", "base"'),
                          ("10_keeping_the_evidence", '"--set", "full"')]:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(RUNS_NCU.format(options=options)),
                                             nbformat.v4.new_code_cell(RECORDS)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, notebooks / f"{stem}.ipynb")
    monkeypatch.setattr(check, "SMI", [sys.executable, str(tmp_path / "smi.py"), str(clock)])
    monkeypatch.setattr(check, "MAX_QUERY", [sys.executable, "-c", "print(1980)"])
    monkeypatch.setattr(check, "GPU_DEVICE", str(tmp_path / "fake-nvidia"))
    monkeypatch.setattr(check, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(check, "IDLE_SECONDS", 1.0)
    monkeypatch.setattr(check, "PROFILING_FOR", 1.0)
    monkeypatch.setattr(check, "BACK_WITHIN", 5.0)
    monkeypatch.setenv("FAKE_CLOCK", str(clock))
    monkeypatch.setenv("FAKE_DEVICE", str(tmp_path / "fake-nvidia0"))
    monkeypatch.setenv("FAKE_NCU", str(ncu))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return tmp_path


def test_a_whole_run_against_fakes_interrupts_each_case_and_finds_the_clock_back(fakes, capsys):
    out = fakes / "out"
    assert check.main([str(out), "--ncu", str(fakes / "ncu"), "--budget", "200"]) == 0, capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == ["04-strict.ipynb", "samples.csv", "summary.json"]
    assert summary["idle"]["idle_mhz"] == 345 and summary["held_at_end"] is False
    cases = {c["case"]: c for c in summary["cases"]}
    assert sorted(cases) == ["A", "B", "C", "D"]
    for name in "ABD":  # a clock-locking ncu: interrupted while the clock read 1,500, back at idle soon after
        assert cases[name]["stop"] == "clean" and cases[name]["mhz_at_interrupt"] == 1500, cases[name]
        assert cases[name]["ncu_gone_after_s"] < 6 and cases[name]["clock_back_after_s"] < 6, cases[name]  # grace: 8
    assert cases["C"]["stop"] == "clean" and cases["C"]["peak_mhz"] == 345 and "interrupted" in cases["C"]["note"]
    assert cases["A"]["note"] == "CellExecutionError: KeyboardInterrupt:" and "DeadKernelError" in cases["D"]["note"]
    assert summary["strict_04"] == {"error": None, "sections": [{"section": "1. fake", "status": "OK",
                                                                 "detail": "ran"}]}
    assert capsys.readouterr().out.splitlines()[-1] == "04 strict: 1 OK"


def test_a_machine_held_before_the_check_runs_nothing_and_exits_3(fakes, capsys):
    (fakes / "clock").write_text("1500")
    assert check.main([str(fakes / "out"), "--budget", "200"]) == 3
    summary = json.loads((fakes / "out" / "summary.json").read_text())
    assert summary["cases"] == [] and "already held" in summary["note"]
    assert capsys.readouterr().out.splitlines()[-1] == "CLOCK STILL HELD: REPORT IT AND GIVE THE MACHINE BACK"
