"""Tests for the notebook runner (``nspy-tutorial run``).

Executing a notebook starts a Jupyter kernel (about 1 s), so only the tests
whose point is execution run real notebooks; ordering and card tests replace
``execute_notebook`` with a stub. Tests of what reaches the terminal (the kernel's own
stderr included) and of signals run ``nspy-tutorial run`` as a separate process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial import runner
from nspy_tutorial.runner import NotebookResult, SectionRecord

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def record_cell(notebook: str, section: str, status: str, **fields: object) -> str:
    """Source of a cell that appends one section record, as a section guard would."""
    record = {
        "notebook": notebook,
        "section": section,
        "status": status,
        "result": fields.get("result"),
        "reason": fields.get("reason"),
        "remedy": fields.get("remedy"),
        "seconds": 0.1,
    }
    return (
        "import json, os\n"
        "with open(os.environ['NSPY_TUTORIAL_RESULTS'], 'a') as f:\n"
        f"    f.write(json.dumps({record!r}) + '\\n')\n"
    )


def write_notebook(folder: Path, name: str, *sources: str) -> Path:
    """Write a notebook of code cells to ``folder/name``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    path = folder / name
    nbformat.write(notebook, path)
    return path


def stub_result(path: Path, *sections: SectionRecord, error: str | None = None, cell: int | None = None
                ) -> NotebookResult:
    """A NotebookResult as execute_notebook would build it, without a kernel."""
    failed = error is not None or any(s.status == "FAILED" for s in sections)
    return NotebookResult(
        notebook=path.stem,
        status="FAILED" if failed else "OK",
        seconds=1.0,
        error=error,
        sections=list(sections),
        cell=cell,
    )


def section(notebook: str, name: str, status: str, **fields: str | None) -> SectionRecord:
    """A SectionRecord with short defaults."""
    return SectionRecord(notebook=notebook, section=name, status=status, seconds=0.1, **fields)


@pytest.fixture
def notebooks_dir(tmp_path: Path) -> Path:
    """An empty notebooks folder inside the test's temporary folder."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    return folder


def run_main(notebooks_dir: Path, out: Path, *extra: str) -> int:
    """Call the CLI entry point as ``nspy-tutorial run`` would."""
    return runner.main(["run", "--notebooks-dir", str(notebooks_dir), "--out", str(out), *extra])


# --------------------------------------------------------------------------
# Finding and selecting notebooks
# --------------------------------------------------------------------------


def test_notebooks_run_in_numeric_order(notebooks_dir, tmp_path, monkeypatch):
    for name in ["10_last.ipynb", "02_second.ipynb", "1_first.ipynb", "notes.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    order: list[str] = []

    def fake_execute(path, executed_dir, records_dir, timeout, stop, kernel=None):
        order.append(path.name)
        return stub_result(path)

    monkeypatch.setattr(runner, "execute_notebook", fake_execute)
    run_main(notebooks_dir, tmp_path / "results")
    assert order == ["1_first.ipynb", "02_second.ipynb", "10_last.ipynb"]


def test_only_selects_a_subset(notebooks_dir):
    for name in ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    chosen = runner.find_notebooks(notebooks_dir, only=["1", "03"])
    assert [path.name for path in chosen] == ["01_a.ipynb", "03_c.ipynb"]


def test_only_with_unknown_number_is_an_error_naming_available_ones(
    notebooks_dir, tmp_path, capsys
):
    for name in ["01_a.ipynb", "02_b.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    code = run_main(notebooks_dir, tmp_path / "results", "--only", "07")
    error = capsys.readouterr().err
    assert code == 2
    assert "07" in error and "01, 02" in error


def test_missing_notebooks_dir_says_where_the_notebooks_are(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    code = run_main(missing, tmp_path / "results")
    error = capsys.readouterr().err
    assert code == 2
    assert f"notebooks folder not found: {missing}" in error
    assert "live in the repository" in error
    assert f"git clone {runner.REPOSITORY}" in error
    assert "--notebooks-dir" in error


def test_repository_url_is_the_one_the_notebooks_are_built_for():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert runner.REPOSITORY == f"https://github.com/{build.REPO}"


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_timeout_must_be_a_positive_number_of_seconds(notebooks_dir, tmp_path, capsys, value):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    with pytest.raises(SystemExit) as exited:
        run_main(notebooks_dir, tmp_path / "results", "--timeout", value)
    assert exited.value.code == 2
    assert f"--timeout: must be a whole number of seconds above 0, got '{value}'" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("NSPY_TUTORIAL_STRICT", "maybe", "1/0, true/false, yes/no"),
        ("NSPY_TUTORIAL_REQUIRE", "gpu,bogus", "gpu, profiler, ncu, ncu-cli, cupti, triton, counters, cc<major>.<minor>"),
        ("NSPY_TUTORIAL_BACKEND", "bogus", "cupti"),
    ],
)
def test_a_mistyped_variable_is_a_usage_error_before_anything_runs(
    notebooks_dir, tmp_path, capsys, monkeypatch, variable, value, names
):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr(runner, "execute_notebook", lambda *_: pytest.fail("a notebook ran"))
    assert run_main(notebooks_dir, tmp_path / "results") == 2
    error = capsys.readouterr().err
    assert f"{variable}={value!r}" in error and names in error


# --------------------------------------------------------------------------
# Section records and the card
# --------------------------------------------------------------------------


def test_last_record_for_a_section_wins(tmp_path):
    lines = [
        {"notebook": "01_a", "section": "1. Setup", "status": "FAILED", "reason": "boom"},
        {"notebook": "01_a", "section": "2. Profile", "status": "OK", "result": "fine"},
        {"notebook": "01_a", "section": "1. Setup", "status": "OK", "result": "rerun worked"},
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = runner.read_section_records(path)
    assert [(r.section, r.status, r.result) for r in records] == [
        ("1. Setup", "OK", "rerun worked"),
        ("2. Profile", "OK", "fine"),
    ]


def test_headline_leads_with_what_ran_and_why_the_rest_skipped(tmp_path):
    gpu = dict(reason="needs a GPU", remedy="-", needs="gpu")
    result = stub_result(
        tmp_path / "01_a.ipynb",
        section("01_a", "1", "OK", result="r"),
        *[section("01_a", str(i), "SKIPPED", **gpu) for i in range(2, 5)],
    )
    assert runner.headline([result]) == "1 section ran OK, 3 skipped (no GPU), 0 failed"


def test_headline_counts_mixed_skip_reasons_separately(tmp_path):
    result = stub_result(
        tmp_path / "01_a.ipynb",
        *[section("01_a", str(i), "SKIPPED", reason="r", remedy="-", needs="gpu") for i in range(3)],
        section("01_a", "7", "SKIPPED", reason="TF32", remedy="-", needs="cc8.0"),
        section("01_a", "8", "SKIPPED", reason="section 7 was skipped", remedy="-"),
        section("01_a", "9", "SKIPPED", reason="no FP8", remedy="-", needs="fp8"),
        section("01_a", "10", "FAILED", reason="boom", remedy="-"),
    )
    assert runner.headline([result]) == (
        "0 sections ran OK, 6 skipped (3 no GPU, 1 GPU below compute capability 8.0, "
        "1 other reasons, 1 no fp8), 1 failed"
    )


def test_headline_tells_sections_from_notebooks_and_names_the_cell_that_stopped_one(tmp_path):
    gpu = dict(reason="needs a GPU", remedy="-", needs="gpu")
    results = [
        stub_result(tmp_path / "01_a.ipynb", section("01_a", "1", "OK", result="r")),
        stub_result(tmp_path / "02_b.ipynb", section("02_b", "1", "SKIPPED", **gpu),
                    error='cell 4 of 9 ("x = 1 / 0"): ZeroDivisionError: division by zero', cell=4),
        stub_result(tmp_path / "03_c.ipynb"),
    ]
    assert runner.headline(results) == (
        "1 section ran OK, 1 skipped (no GPU), 0 sections failed; 1 of 3 notebooks stopped by an error "
        "in cell 4 (02_b)"
    )


def test_headline_names_every_notebook_that_stopped(tmp_path):
    results = [
        stub_result(tmp_path / "01_a.ipynb", section("01_a", "1", "FAILED", reason="x", remedy="-"),
                    error="cell 2 of 5: ClaimFailed: ...", cell=2),
        stub_result(tmp_path / "02_b.ipynb", error="cannot read 02_b.ipynb: NotJSONError: ..."),
    ]
    assert runner.headline(results) == (
        "0 sections ran OK, 0 skipped, 1 section failed; 2 of 2 notebooks stopped by an error (01_a cell 2, 02_b)"
    )


def test_markdown_card_opens_with_the_headline(tmp_path):
    result = stub_result(
        tmp_path / "01_a.ipynb",
        section("01_a", "1", "OK", result="r"),
        section("01_a", "2", "SKIPPED", reason="needs a GPU", remedy="-", needs="gpu"),
    )
    text = runner.card_markdown(runner.build_card([result], "start", "end"))
    assert text.splitlines()[2] == "**1 section ran OK, 1 skipped (no GPU), 0 failed**"
    assert "5 of 5 OK" not in text and "Notebooks: 1 of 1 without a FAILED section" in text


def test_card_keeps_long_results_and_reasons_whole(tmp_path):
    long_reason = "needs a GPU: " + " ".join(f"word{i}" for i in range(80))
    result = stub_result(tmp_path / "01_a.ipynb", section("01_a", "1", "SKIPPED", reason=long_reason, remedy="-"))
    assert long_reason in runner.card_markdown(runner.build_card([result], "start", "end"))


def test_card_counts_sections_by_status(tmp_path):
    first = stub_result(
        tmp_path / "01_a.ipynb",
        section("01_a", "1", "OK", result="r"),
        section("01_a", "2", "SKIPPED", reason="needs a GPU", remedy="use a GPU"),
    )
    second = stub_result(
        tmp_path / "02_b.ipynb",
        section("02_b", "1", "OK", result="r"),
        section("02_b", "2", "FAILED", reason="wrong", remedy="fix it"),
    )
    card = runner.build_card([first, second], "start", "end")
    assert card["notebooks"][0]["counts"] == {"OK": 1, "SKIPPED": 1, "FAILED": 0}
    assert card["notebooks"][1]["status"] == "FAILED"
    assert card["totals"]["sections"] == {"OK": 2, "SKIPPED": 1, "FAILED": 1}
    assert card["totals"]["notebooks_ok"] == 1


def test_skipped_sections_are_grouped_by_reason_in_markdown(tmp_path):
    skipped = [
        section("01_a", str(i), "SKIPPED", reason="needs a GPU", remedy="-") for i in range(3)
    ]
    skipped.append(section("01_a", "9", "SKIPPED", reason="needs ncu", remedy="-"))
    card = runner.build_card([stub_result(tmp_path / "01_a.ipynb", *skipped)], "start", "end")
    text = runner.card_markdown(card)
    assert "## Why sections were skipped" in text
    assert "- needs a GPU — 3 sections" in text
    assert "- needs ncu — 1 section" in text


def test_failed_section_makes_exit_code_one(notebooks_dir, tmp_path, monkeypatch):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    monkeypatch.setattr(
        runner,
        "execute_notebook",
        lambda path, *_: stub_result(path, section("01_a", "1", "FAILED", reason="x", remedy="y")),
    )
    assert run_main(notebooks_dir, tmp_path / "results") == 1


# --------------------------------------------------------------------------
# The output folder
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_and_leaves_previous_output_untouched(
    notebooks_dir, tmp_path, monkeypatch, capsys, signum, code
):
    for name in ["01_a.ipynb", "02_b.ipynb", "03_c.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    calls: list[str] = []

    def signalled_execute(path, *_):
        calls.append(path.name)
        if len(calls) == 2:
            os.kill(os.getpid(), signum)  # as Ctrl-C or `kill` would, to this process
        return stub_result(path)

    monkeypatch.setattr(runner, "execute_notebook", signalled_execute)
    assert run_main(notebooks_dir, out) == code
    assert calls == ["01_a.ipynb", "02_b.ipynb"]
    assert (out / "results.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "results"]
    assert capsys.readouterr().err == f"interrupted ({signal.Signals(signum).name}); {out} left as it was\n"
    assert signal.getsignal(signum) is not None and signal.getsignal(signum).__class__ is not runner.Stop


def test_ctrl_c_before_the_run_took_over_the_signals_is_one_line_too(tmp_path, monkeypatch, capsys):
    def interrupted_early(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "find_notebooks", interrupted_early)
    assert run_main(tmp_path / "notebooks", tmp_path / "results") == 130
    assert capsys.readouterr().err == f"interrupted (SIGINT); {tmp_path / 'results'} left as it was\n"


def test_unrelated_out_folder_is_not_replaced(notebooks_dir, tmp_path, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    assert run_main(notebooks_dir, out) == 2
    assert (out / "thesis.tex").read_text() == "keep me"
    assert "refusing to replace" in capsys.readouterr().err


# --------------------------------------------------------------------------
# Real execution (each starts a kernel)
# --------------------------------------------------------------------------


def test_exit_code_zero_when_all_ok(notebooks_dir, tmp_path, capsys):
    write_notebook(
        notebooks_dir,
        "01_a.ipynb",
        record_cell("01_a", "1. Setup", "OK", result="ready"),
        record_cell("01_a", "2. Profile", "SKIPPED", reason="needs a GPU", remedy="use a GPU"),
    )
    out = tmp_path / "results"
    code = run_main(notebooks_dir, out)
    card = json.loads((out / "results.json").read_text())
    assert code == 0
    assert card["notebooks"][0]["counts"] == {"OK": 1, "SKIPPED": 1, "FAILED": 0}
    assert (
        capsys.readouterr().out.splitlines()[-1].startswith(f"Results card: {out / 'results.md'}")
    )


def test_unreadable_notebook_is_failed_with_its_reason_and_the_others_keep_their_results(
    notebooks_dir, tmp_path
):
    write_notebook(notebooks_dir, "01_good.ipynb", record_cell("01_good", "1. Fine", "OK", result="yes"))
    (notebooks_dir / "02_bad.ipynb").write_text("this is not a notebook")
    out = tmp_path / "results"
    assert run_main(notebooks_dir, out) == 1
    good, bad = json.loads((out / "results.json").read_text())["notebooks"]
    assert good["status"] == "OK" and good["counts"]["OK"] == 1
    assert bad["status"] == "FAILED"
    assert bad["error"].startswith("cannot read 02_bad.ipynb: NotJSONError")
    assert "02_bad" in (out / "results.md").read_text()


def test_failing_cell_marks_notebook_failed_and_run_continues(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_bad.ipynb", "print('before')", "1 / 0", "print('never')")
    write_notebook(
        notebooks_dir, "02_good.ipynb", record_cell("02_good", "1. Fine", "OK", result="yes")
    )
    out = tmp_path / "results"
    code = run_main(notebooks_dir, out)
    card = json.loads((out / "results.json").read_text())
    bad, good = card["notebooks"]
    assert code == 1
    assert bad["status"] == "FAILED"
    assert bad["error"] == 'cell 2 of 3 ("1 / 0"): ZeroDivisionError: division by zero'
    assert bad["cell"] == 2 and good["cell"] is None
    assert card["headline"] == (
        "1 section ran OK, 0 skipped, 0 sections failed; 1 of 2 notebooks stopped by an error in cell 2 (01_bad)"
    )
    assert good["status"] == "OK" and good["counts"]["OK"] == 1
    partial = nbformat.read(out / "notebooks" / "01_bad.ipynb", as_version=4)
    assert partial.cells[0].outputs[0]["text"] == "before\n"
    assert partial.cells[2].outputs == []


def test_a_required_need_fails_the_run_whatever_the_section_lacked_first(notebooks_dir, tmp_path, monkeypatch):
    """NSPY_TUTORIAL_REQUIRE=ncu with the CUPTI backend forced: the Nsight Compute section must fail the run,
    on a machine without a GPU (where it lacks the GPU first) as on one with a GPU."""
    write_notebook(
        notebooks_dir, "01_req.ipynb",
        "import nspy_tutorial as nt\nENV = nt.setup('01_req')",
        "with nt.section('1. Counters') as s:\n    ENV.require('ncu')\n    s.result = 'ran'",
        "nt.summary()",
    )
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu")
    monkeypatch.setenv("NSPY_TUTORIAL_BACKEND", "cupti")
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    out = tmp_path / "results"
    assert run_main(notebooks_dir, out) == 1
    (entry,) = json.loads((out / "results.json").read_text())["notebooks"]
    (record,) = entry["sections"]
    assert record["status"] == "FAILED" and record["reason"].startswith("required `ncu` is missing: ")


def run_cli(notebooks_dir: Path, out: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    """``nspy-tutorial run`` as its own process (this checkout's package), output captured."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "nspy_tutorial.cli", "run", "--notebooks-dir", str(notebooks_dir)]
    return subprocess.Popen(
        [*command, "--out", str(out), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen,
    )


def test_cell_timeout_names_the_cell_and_nothing_but_progress_reaches_the_terminal(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_slow.ipynb", "print('warm up')", "import time\ntime.sleep(30)")
    out = tmp_path / "results"
    process = run_cli(notebooks_dir, out, "--timeout", "1")
    output, _ = process.communicate(timeout=60)
    card = json.loads((out / "results.json").read_text())
    assert process.returncode == 1, output
    assert card["notebooks"][0]["error"] == (
        'cell 2 of 2 ("import time"): still running after 1 s (--timeout); the kernel was stopped'
    )
    # No kernel log lines: neither the TCP-without-encryption warning nor a ZMQError traceback.
    assert "Traceback" not in output and "ZMQError" not in output, output
    assert "without encryption" not in output and "[IPKernelApp]" not in output, output
    assert [line.split(" ...")[0] for line in output.splitlines()[:2]] == ["[1/1] 01_slow"] * 2


SLEEPY_CELL = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open({pids!r}, "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(120)
"""


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


STOPPED_WHILE_STARTING = """\
import signal, sys
from pathlib import Path
import nbformat
from nspy_tutorial import runner

notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('never')")])
stop = runner.Stop()
stop.signum = signal.SIGINT  # as if Ctrl-C came while the kernel was still starting
folder = Path(sys.argv[1])
error = runner.run_notebook(notebook, folder, folder / "records.jsonl", 60, stop)
print("stopped:", error is not None)
"""


def test_a_stop_while_the_kernel_starts_leaves_nothing_to_print_at_exit(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_WHILE_STARTING, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stopped: True\n"
    assert done.stderr == ""  # nbclient's exit-time cleanup would print an AssertionError


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_real_kernel_stops_cleanly(notebooks_dir, tmp_path, signum, code):
    """One line, exit 128+signal, previous card kept, no partial folder, no kernel or child left."""
    pids = tmp_path / "pids"
    write_notebook(notebooks_dir, "01_sleepy.ipynb", SLEEPY_CELL.format(pids=str(pids)))
    write_notebook(notebooks_dir, "02_never.ipynb", "print('never')")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    process = run_cli(notebooks_dir, out)
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline and process.poll() is None, "the cell never started"
        time.sleep(0.1)
    kernel, child = map(int, pids.read_text().split())
    process.send_signal(signum)
    output, _ = process.communicate(timeout=20)
    assert process.returncode == code
    assert output.splitlines() == [
        "[1/2] 01_sleepy ...",
        f"interrupted ({signal.Signals(signum).name}); {out} left as it was",
    ]
    assert (out / "results.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "pids", "results"]
    assert process_gone(kernel), "the kernel is still running"
    assert process_gone(child), "a process the kernel started is still running"


def test_executed_copies_are_written(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_hello.ipynb", "print('hello from the kernel')")
    out = tmp_path / "results"
    run_main(notebooks_dir, out)
    executed = nbformat.read(out / "notebooks" / "01_hello.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "hello from the kernel\n"
    assert (out / "results.md").exists()


# --------------------------------------------------------------------------
# Kernels: the next one starts early, none is left behind
# --------------------------------------------------------------------------

BOOT_CLOCK_CELL = """\
import os, time
from pathlib import Path
ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # start time, clock ticks after boot
with open({log!r}, "a") as f:
    f.write(f"{{os.getpid()}} {{ticks / os.sysconf('SC_CLK_TCK')}} {{time.clock_gettime(time.CLOCK_BOOTTIME)}}\\n")
time.sleep({sleep})
"""


def kernel_children() -> list[int]:
    """Live (not zombie) ipykernel processes started by this process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] not in ("Z", "X") and b"ipykernel" in cmdline:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process start times from /proc")
def test_the_next_notebooks_kernel_starts_while_the_current_one_runs(notebooks_dir, tmp_path):
    log = tmp_path / "kernels.log"
    write_notebook(notebooks_dir, "01_first.ipynb", BOOT_CLOCK_CELL.format(log=str(log), sleep=3))
    write_notebook(notebooks_dir, "02_second.ipynb", BOOT_CLOCK_CELL.format(log=str(log), sleep=0))
    assert run_main(notebooks_dir, tmp_path / "results") == 0
    (pid1, _, ran1), (pid2, started2, _) = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert pid1 != pid2, "each notebook has a kernel of its own"
    assert started2 < ran1 + 3, "the second kernel started only after the first notebook's cell ended"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_no_kernel_outlives_the_run_not_even_one_started_for_a_notebook_that_never_ran(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_fails.ipynb", "raise ValueError('stop here')")
    (notebooks_dir / "02_unreadable.ipynb").write_text("not json")
    write_notebook(notebooks_dir, "03_fine.ipynb", "pass")
    assert run_main(notebooks_dir, tmp_path / "results") == 1
    assert kernel_children() == []


def test_a_deep_tmpdir_does_not_stop_the_kernels(notebooks_dir, tmp_path, monkeypatch):
    """The run's scratch folder follows TMPDIR; the kernels' sockets must not (a socket path holds ~100 bytes)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)
    write_notebook(notebooks_dir, "01_hello.ipynb", "print('hello')")
    assert run_main(notebooks_dir, tmp_path / "results") == 0


def test_a_socket_path_too_long_for_the_platform_falls_back_to_tcp(tmp_path):
    assert runner.kernel_config(tmp_path / ("d" * 120)) == runner.Config()
    assert runner.kernel_config(Path("/tmp/nspy-ipc-x"), "01_a")["KernelManager"]["transport"] == "ipc"


WARM_PROBE_CELL = """import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps([m in sys.modules for m in ("nsight", "torch")]) + "\\n")"""


def test_a_notebook_with_the_one_call_setup_finds_its_kernel_warmed_up_and_another_does_not(notebooks_dir, tmp_path):
    log = tmp_path / "modules.log"
    write_notebook(notebooks_dir, "01_manual.ipynb", WARM_PROBE_CELL.format(log=str(log)))
    write_notebook(notebooks_dir, "02_setup.ipynb", WARM_PROBE_CELL.format(log=str(log)),
                   'import nspy_tutorial as nt\nENV = nt.setup("02_setup")')
    assert run_main(notebooks_dir, tmp_path / "results") == 0
    assert log.read_text().splitlines() == ["[false, false]", "[true, true]"]


def test_the_tutorials_notebooks_are_warmed_up_except_01_whose_cells_take_the_steps():
    warmed = {path.name[:2]: runner.warms_up(path) for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    assert warmed == {f"{n:02d}": n != 1 for n in range(1, 11)}
