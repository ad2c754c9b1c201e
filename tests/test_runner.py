"""Specifications for ``nspy-tutorial run`` (nspy_tutorial.runner and its card plug-in, nspy_tutorial.card).

The run is pytest + nbmake in a process of its own, so every test that runs executes tiny fake
notebooks written into the test's temporary folder (a kernel each, about a second), never the
tutorial's series: CI executes those once, under nbmake. Card tests build entries directly. Tests
of what reaches the terminal and of signals run ``nspy-tutorial run`` as a separate process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial import card, cli, runner
from nspy_tutorial.sections import SectionRecord

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def record_cell(notebook: str, section: str, status: str, **fields: object) -> str:
    """Source of a cell that appends one section record, as a section guard would."""
    record = {"notebook": notebook, "section": section, "status": status, "result": fields.get("result"),
              "reason": fields.get("reason"), "remedy": fields.get("remedy"), "seconds": 0.1}
    return ("import json, os\n"
            "with open(os.environ['NSPY_TUTORIAL_RESULTS'], 'a') as f:\n"
            f"    f.write(json.dumps({record!r}) + '\\n')\n")


def write_notebook(folder: Path, name: str, *sources: str) -> Path:
    """Write a notebook of code cells to ``folder/name``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    path = folder / name
    nbformat.write(notebook, path)
    return path


def entry(name: str, *sections: SectionRecord, error: str | None = None, cell: int | None = None) -> dict:
    """A notebook's card entry, as the plug-in builds it."""
    return card.notebook_entry(name, 1.0, list(sections), error, cell)


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
    return cli.main(["run", "--notebooks-dir", str(notebooks_dir), "--out", str(out), *extra])


def package_env() -> dict[str, str]:
    """This process's environment, with this checkout's package first on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_cli(notebooks_dir: Path, out: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    """``nspy-tutorial run`` as its own process (this checkout's package), output captured unless ``popen`` says."""
    command = [sys.executable, "-m", "nspy_tutorial.cli", "run", "--notebooks-dir", str(notebooks_dir)]
    popen = {"env": package_env(), "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen}
    return subprocess.Popen([*command, "--out", str(out), *extra], **popen)


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return process_gone(pid)


# --------------------------------------------------------------------------
# Finding and selecting notebooks
# --------------------------------------------------------------------------


def test_only_selects_a_subset_in_numeric_order(notebooks_dir):
    for name in ["10_last.ipynb", "03_c.ipynb", "1_a.ipynb", "02_b.ipynb", "notes.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    assert [p.name for p in runner.find_notebooks(notebooks_dir)] == [
        "1_a.ipynb", "02_b.ipynb", "03_c.ipynb", "10_last.ipynb"]
    assert [p.name for p in runner.find_notebooks(notebooks_dir, only=["1", "03"])] == ["1_a.ipynb", "03_c.ipynb"]


def test_only_with_unknown_number_is_an_error_naming_available_ones(notebooks_dir, tmp_path, capsys):
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
    assert "live in the repository" in error and f"git clone {runner.REPOSITORY}" in error
    assert "--notebooks-dir" in error


def test_outside_the_clone_the_default_notebooks_folder_is_the_clones(tmp_path, monkeypatch, capsys):
    """With an editable install, ``nspy-tutorial run`` anywhere runs the clone's notebooks/ (the package's parent)."""
    monkeypatch.chdir(tmp_path)
    assert runner.CLONE_NOTEBOOKS == ROOT / "notebooks"
    assert cli.main(["run", "--only", "99", "--out", str(tmp_path / "results")]) == 2
    assert "--only 99: no such notebook number; available: " + ", ".join(f"{n:02d}" for n in range(1, 11)) \
        in capsys.readouterr().err


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
    monkeypatch.setattr(runner, "run_pytest", lambda *_: pytest.fail("a notebook ran"))
    assert run_main(notebooks_dir, tmp_path / "results") == 2
    error = capsys.readouterr().err
    assert f"{variable}={value!r}" in error and names in error
    assert not (tmp_path / "results").exists()


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
    assert [(r.section, r.status, r.result) for r in card.read_section_records(path)] == [
        ("1. Setup", "OK", "rerun worked"), ("2. Profile", "OK", "fine")]


def test_a_line_that_is_not_a_record_is_ignored_with_a_warning(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text('{"notebook": "01_a", "section": "1", "status": "OK", "result": "r"}\nnot json\n')
    assert [r.section for r in card.read_section_records(path)] == ["1"]
    assert "records.jsonl:2: not a section record, ignored" in capsys.readouterr().err


def test_headline_leads_with_what_ran_and_why_the_rest_skipped():
    gpu = dict(reason="needs a GPU", remedy="-", needs="gpu")
    result = entry("01_a", section("01_a", "1", "OK", result="r"),
                   *[section("01_a", str(i), "SKIPPED", **gpu) for i in range(2, 5)])
    assert card.headline([result]) == "1 section ran OK, 3 skipped (no GPU), 0 failed"


def test_headline_counts_mixed_skip_reasons_separately():
    result = entry(
        "01_a",
        *[section("01_a", str(i), "SKIPPED", reason="r", remedy="-", needs="gpu") for i in range(3)],
        section("01_a", "7", "SKIPPED", reason="TF32", remedy="-", needs="cc8.0"),
        section("01_a", "8", "SKIPPED", reason="section 7 was skipped", remedy="-"),
        section("01_a", "9", "SKIPPED", reason="no FP8", remedy="-", needs="fp8"),
        section("01_a", "10", "FAILED", reason="boom", remedy="-"),
    )
    assert card.headline([result]) == (
        "0 sections ran OK, 6 skipped (3 no GPU, 1 GPU below compute capability 8.0, "
        "1 other reasons, 1 no fp8), 1 failed"
    )


def test_headline_tells_sections_from_notebooks_and_names_the_cell_that_stopped_one():
    gpu = dict(reason="needs a GPU", remedy="-", needs="gpu")
    results = [
        entry("01_a", section("01_a", "1", "OK", result="r")),
        entry("02_b", section("02_b", "1", "SKIPPED", **gpu),
              error='cell 4 of 9 ("x = 1 / 0"): ZeroDivisionError: division by zero', cell=4),
        entry("03_c"),
    ]
    assert card.headline(results) == (
        "1 section ran OK, 1 skipped (no GPU), 0 sections failed; 1 of 3 notebooks stopped by an error "
        "in cell 4 (02_b)"
    )


def test_headline_names_every_notebook_that_stopped():
    results = [
        entry("01_a", section("01_a", "1", "FAILED", reason="x", remedy="-"),
              error="cell 2 of 5: ClaimFailed: ...", cell=2),
        entry("02_b", error="cannot read 02_b.ipynb: NotJSONError: ..."),
    ]
    assert card.headline(results) == (
        "0 sections ran OK, 0 skipped, 1 section failed; 2 of 2 notebooks stopped by an error (01_a cell 2, 02_b)"
    )


def test_markdown_card_opens_with_the_headline():
    result = entry("01_a", section("01_a", "1", "OK", result="r"),
                   section("01_a", "2", "SKIPPED", reason="needs a GPU", remedy="-", needs="gpu"))
    text = card.card_markdown(card.build_card([result], "start", "end"))
    assert text.splitlines()[2] == "**1 section ran OK, 1 skipped (no GPU), 0 failed**"
    assert "Notebooks: 1 of 1 without a FAILED section" in text


def test_card_keeps_long_results_and_reasons_whole():
    long_reason = "needs a GPU: " + " ".join(f"word{i}" for i in range(80))
    result = entry("01_a", section("01_a", "1", "SKIPPED", reason=long_reason, remedy="-"))
    assert long_reason in card.card_markdown(card.build_card([result], "start", "end"))


def test_card_counts_sections_by_status():
    first = entry("01_a", section("01_a", "1", "OK", result="r"),
                  section("01_a", "2", "SKIPPED", reason="needs a GPU", remedy="use a GPU"))
    second = entry("02_b", section("02_b", "1", "OK", result="r"),
                   section("02_b", "2", "FAILED", reason="wrong", remedy="fix it"))
    data = card.build_card([first, second], "start", "end")
    assert data["notebooks"][0]["counts"] == {"OK": 1, "SKIPPED": 1, "FAILED": 0}
    assert data["notebooks"][1]["status"] == "FAILED"
    assert data["totals"]["sections"] == {"OK": 2, "SKIPPED": 1, "FAILED": 1}
    assert data["totals"]["notebooks_ok"] == 1


def test_skipped_sections_are_grouped_by_reason_in_markdown():
    skipped = [section("01_a", str(i), "SKIPPED", reason="needs a GPU", remedy="-") for i in range(3)]
    skipped.append(section("01_a", "9", "SKIPPED", reason="needs ncu", remedy="-"))
    text = card.card_markdown(card.build_card([entry("01_a", *skipped)], "start", "end"))
    assert "## Why sections were skipped" in text
    assert "- needs a GPU — 3 sections" in text
    assert "- needs ncu — 1 section" in text


# --------------------------------------------------------------------------
# The output folder
# --------------------------------------------------------------------------


def test_unrelated_out_folder_is_not_replaced(notebooks_dir, tmp_path, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    assert run_main(notebooks_dir, out) == 2
    assert (out / "thesis.tex").read_text() == "keep me"
    assert "refusing to replace" in capsys.readouterr().err


def test_the_hidden_folder_of_a_killed_run_does_not_make_out_look_unrelated(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    out = tmp_path / "results"
    (out / f"{runner.PARTIAL}left-by-kill-9").mkdir(parents=True)
    assert run_main(notebooks_dir, out) == 0
    assert (out / "results.json").exists()


@pytest.mark.parametrize("where", ["under a file", "under /proc"])
def test_an_out_folder_that_cannot_be_made_is_one_line_naming_it(notebooks_dir, tmp_path, capsys, where):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "results" if where == "under a file" else Path("/proc/nspy-results")
    assert run_main(notebooks_dir, out) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"nspy-tutorial: error: --out {out}: cannot write there (") and error.count("\n") == 1
    assert "Traceback" not in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "notebooks"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder of mode 0o500 anyway")
def test_an_out_folder_in_a_read_only_place_is_one_line_naming_it(notebooks_dir, tmp_path, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert run_main(notebooks_dir, locked / "results") == 2
    assert capsys.readouterr().err.startswith(f"nspy-tutorial: error: --out {locked / 'results'}: cannot write there")


def test_a_run_into_a_folder_that_cannot_be_renamed_or_removed_replaces_only_its_results(
    notebooks_dir, tmp_path, monkeypatch
):
    """A mount point (or a folder in a place the user cannot write to) holding earlier results."""
    write_notebook(notebooks_dir, "01_new.ipynb", record_cell("01_new", "1", "OK", result="new"))
    out = tmp_path / "mounted"
    (out / "notebooks").mkdir(parents=True)
    (out / "results.json").write_text('{"previous": true}')
    (out / "notebooks" / "01_old.ipynb").write_text("{}")

    def refuse(real):
        def call(path, *args, **kwargs):
            if Path(path) == out or Path(args[0] if args else "") == out:
                raise OSError(16, "Device or resource busy", str(out))
            return real(path, *args, **kwargs)
        return call

    for module, name in [(os, "rename"), (os, "replace"), (os, "rmdir"), (shutil, "rmtree"), (shutil, "move")]:
        monkeypatch.setattr(module, name, refuse(getattr(module, name)))
    assert run_main(notebooks_dir, out) == 0
    assert json.loads((out / "results.json").read_text())["notebooks"][0]["notebook"] == "01_new"
    assert sorted(p.name for p in out.iterdir()) == ["notebooks", "results.json", "results.md"]
    assert [p.name for p in (out / "notebooks").iterdir()] == ["01_new.ipynb"]


def test_a_run_that_writes_no_card_leaves_the_earlier_results(notebooks_dir, tmp_path, monkeypatch, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    monkeypatch.setenv("PYTEST_ADDOPTS", "--no-such-option")  # pytest stops at its command line
    assert run_main(notebooks_dir, out) == 1
    error = capsys.readouterr().err
    assert "pytest wrote no results card (exit 4)" in error and "--no-such-option" in error
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_text() == '{"previous": true}'


def test_ctrl_c_before_the_run_took_over_is_one_line_too(tmp_path, monkeypatch, capsys):
    def interrupted_early(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "find_notebooks", interrupted_early)
    assert run_main(tmp_path / "notebooks", tmp_path / "results") == 130
    assert capsys.readouterr().err == f"interrupted (SIGINT); {tmp_path / 'results'} left as it was\n"


# --------------------------------------------------------------------------
# Real execution (each notebook starts a kernel)
# --------------------------------------------------------------------------

PID_CELL = """import os
with open({log!r}, "a") as f:
    f.write(f"{{os.path.basename(os.getcwd())}} {{os.getpid()}}\\n")"""


def test_each_notebook_runs_once_in_numeric_order_in_a_kernel_that_is_gone_afterwards(notebooks_dir, tmp_path):
    log = tmp_path / "ran.log"
    for name in ["10_last.ipynb", "02_second.ipynb", "1_first.ipynb"]:
        write_notebook(notebooks_dir, name, "import nspy_tutorial.sections as w\nw.enter_workdir(%r)" % name[:-6],
                       PID_CELL.format(log=str(log)))
    assert run_main(notebooks_dir, tmp_path / "results") == 0
    ran = [line.split() for line in log.read_text().splitlines()]
    assert [name for name, _ in ran] == ["1_first", "02_second", "10_last"]
    assert len({pid for _, pid in ran}) == 3, "each notebook has a kernel of its own"
    assert all(wait_gone(int(pid)) for _, pid in ran), "a kernel outlived the run"


def test_exit_code_zero_when_all_ok(notebooks_dir, tmp_path, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb",
                   record_cell("01_a", "1. Setup", "OK", result="ready"),
                   record_cell("01_a", "2. Profile", "SKIPPED", reason="needs a GPU", remedy="use a GPU"))
    out = tmp_path / "results"
    code = run_main(notebooks_dir, out)
    data = json.loads((out / "results.json").read_text())
    assert code == 0
    assert data["notebooks"][0]["counts"] == {"OK": 1, "SKIPPED": 1, "FAILED": 0}
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[1/1] 01_a ..."
    assert re.fullmatch(r"\[1/1\] 01_a \.\.\. done in \d+\.\d s: 1 OK, 1 SKIPPED, 0 FAILED", printed[1]), printed
    assert printed[-1].startswith(f"Results card: {out / 'results.md'}")


def test_a_failed_section_makes_exit_code_one(notebooks_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "0")
    write_notebook(notebooks_dir, "01_a.ipynb", record_cell("01_a", "1", "FAILED", reason="x", remedy="y"))
    assert run_main(notebooks_dir, tmp_path / "results") == 1


def test_unreadable_notebook_is_failed_with_its_reason_and_the_others_keep_their_results(notebooks_dir, tmp_path):
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
    write_notebook(notebooks_dir, "02_good.ipynb", record_cell("02_good", "1. Fine", "OK", result="yes"))
    out = tmp_path / "results"
    code = run_main(notebooks_dir, out)
    data = json.loads((out / "results.json").read_text())
    bad, good = data["notebooks"]
    assert code == 1
    assert bad["status"] == "FAILED"
    assert bad["error"] == 'cell 2 of 3 ("1 / 0"): ZeroDivisionError: division by zero'
    assert bad["cell"] == 2 and good["cell"] is None
    assert data["headline"] == (
        "1 section ran OK, 0 skipped, 0 sections failed; 1 of 2 notebooks stopped by an error in cell 2 (01_bad)"
    )
    assert good["status"] == "OK" and good["counts"]["OK"] == 1
    partial = nbformat.read(out / "notebooks" / "01_bad.ipynb", as_version=4)
    assert partial.cells[0].outputs[0]["text"] == "before\n"
    assert partial.cells[2].outputs == []


def test_executed_copies_are_written_and_the_sources_left_alone(notebooks_dir, tmp_path):
    source = write_notebook(notebooks_dir, "01_hello.ipynb", "print('hello from the kernel')")
    before = source.read_bytes()
    out = tmp_path / "results"
    assert run_main(notebooks_dir, out) == 0
    executed = nbformat.read(out / "notebooks" / "01_hello.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "hello from the kernel\n"
    assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "results"]


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
    (notebook,) = json.loads((out / "results.json").read_text())["notebooks"]
    (record,) = notebook["sections"]
    assert record["status"] == "FAILED" and record["reason"].startswith("required `ncu` is missing: ")


def test_cell_timeout_names_the_cell_and_nothing_but_progress_reaches_the_terminal(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_slow.ipynb", "print('warm up')", "import time\ntime.sleep(30)")
    out = tmp_path / "results"
    process = run_cli(notebooks_dir, out, "--timeout", "1")
    output, _ = process.communicate(timeout=60)
    data = json.loads((out / "results.json").read_text())
    assert process.returncode == 1, output
    assert data["notebooks"][0]["error"] == (
        'cell 2 of 2 ("import time"): still running after 1 s (--timeout); the kernel was stopped'
    )
    assert "Traceback" not in output and "[IPKernelApp]" not in output, output
    lines = output.splitlines()
    assert [line.split(" ...")[0] for line in lines[:2]] == ["[1/1] 01_slow"] * 2
    assert lines[2:] == [data["headline"], f"Results card: {out / 'results.md'} (data: {out / 'results.json'})"]


SLEEPY_CELL = """\
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open({pids!r}, "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_a_notebook_stops_the_run_its_kernel_and_its_child(notebooks_dir, tmp_path, signum, code):
    """One line, exit 128+signal, previous card kept, nothing left in --out, no kernel or child left."""
    pids = tmp_path / "pids"
    write_notebook(notebooks_dir, "01_sleepy.ipynb", SLEEPY_CELL.format(pids=str(pids)))
    write_notebook(notebooks_dir, "02_never.ipynb", "print('never')")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    (tmp_path / "tmp").mkdir()
    process = run_cli(notebooks_dir, out, env={**package_env(), "TMPDIR": str(tmp_path / "tmp")})
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline and process.poll() is None, "the cell never started"
        time.sleep(0.1)
    kernel, child = map(int, pids.read_text().split())
    process.send_signal(signum)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == code
    assert output.splitlines() == [
        "[1/2] 01_sleepy ...",
        f"interrupted ({signal.Signals(signum).name}); {out} left as it was",
    ]
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_text() == '{"previous": true}'
    assert wait_gone(kernel), "the kernel is still running"
    assert wait_gone(child), "a process the kernel started is still running"
    assert not list((tmp_path / "tmp").glob("nspy-run-*")), "the run's scratch folder is left"


@pytest.mark.skipif(not Path("/dev/ptmx").exists(), reason="needs a pseudo-terminal")
def test_closing_the_terminal_stops_the_run_as_sighup_says_and_leaves_nothing(notebooks_dir, tmp_path):
    """The run in a terminal of its own (a pty as its controlling terminal); the terminal goes away: exit 129,
    --out as it was, no scratch folder, no kernel or child left, though the line has nowhere to go."""
    import fcntl
    import pty
    import termios

    pids = tmp_path / "pids"
    write_notebook(notebooks_dir, "01_sleepy.ipynb", SLEEPY_CELL.format(pids=str(pids)))
    out, scratch = tmp_path / "results", tmp_path / "tmp"
    out.mkdir()
    scratch.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    terminal, user_side = pty.openpty()

    def in_the_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = run_cli(notebooks_dir, out, env={**package_env(), "TMPDIR": str(scratch)}, stdin=user_side,
                      stdout=user_side, stderr=user_side, preexec_fn=in_the_terminal)
    os.close(user_side)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline and process.poll() is None, "the cell never started"
        time.sleep(0.1)
    kernel, child = map(int, pids.read_text().split())
    os.close(terminal)  # the terminal window closes
    assert process.wait(timeout=30) == 129
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert (out / "results.json").read_text() == '{"previous": true}'
    assert wait_gone(kernel) and wait_gone(child), "a kernel or its child is still running"
    assert not list(scratch.glob("nspy-run-*")), "the run's scratch folder is left"


PROFILER_CELL = """\
import os, sys
from nspy_tutorial import lifetime
lifetime.run([sys.executable, {script!r}, {log!r}], dict(os.environ), 120)
"""

FAKE_PROFILER = """\
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
def restore(*_):  # what ncu does on SIGINT: restore the clocks (a second or so), then exit
    log.write("SIGINT\\n")
    time.sleep(1)
    log.write("restored\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, restore)
log.write("ready\\n")
time.sleep(120)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopped_run_gives_a_profiler_in_its_kernel_sigint_and_time_to_restore(notebooks_dir, tmp_path, signum):
    """ncu restores the GPU clocks on SIGINT, not on SIGKILL: stopping the run must reach it as SIGINT."""
    (tmp_path / "ncu.py").write_text(FAKE_PROFILER)
    log = tmp_path / "log"
    write_notebook(notebooks_dir, "01_profiles.ipynb", PROFILER_CELL.format(script=str(tmp_path / "ncu.py"),
                                                                             log=str(log)))
    process = run_cli(notebooks_dir, tmp_path / "results")
    deadline = time.monotonic() + 60
    while not (log.exists() and "ready" in log.read_text()):
        assert time.monotonic() < deadline and process.poll() is None, "the profiler never started"
        time.sleep(0.1)
    process.send_signal(signum)
    process.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while "restored" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.read_text().splitlines() == ["ready", "SIGINT", "restored"]


# --------------------------------------------------------------------------
# A run of some notebooks into a folder that holds a full run (--only)
# --------------------------------------------------------------------------


def full_run(notebooks_dir: Path, out: Path) -> dict:
    for number, name in enumerate(["alpha", "beta", "gamma"], 1):
        stem = f"0{number}_{name}"
        write_notebook(notebooks_dir, f"{stem}.ipynb", record_cell(stem, "1", "OK", result=f"{name} first"),
                       f"print('{name} first')")
    assert run_main(notebooks_dir, out) == 0
    return json.loads((out / "results.json").read_text())


def test_only_keeps_the_notebooks_it_did_not_redo_and_says_which_it_redid(notebooks_dir, tmp_path, capsys,
                                                                          monkeypatch):
    out = tmp_path / "results"
    first = full_run(notebooks_dir, out)
    kept = (out / "notebooks" / "01_alpha.ipynb").read_bytes()
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "0")
    write_notebook(notebooks_dir, "02_beta.ipynb", record_cell("02_beta", "1", "FAILED", reason="beta again",
                                                               remedy="-"))
    capsys.readouterr()
    assert run_main(notebooks_dir, out, "--only", "02") == 1, "the exit code is this run's"
    data = json.loads((out / "results.json").read_text())
    assert [(e["notebook"], e["status"]) for e in data["notebooks"]] == [
        ("01_alpha", "OK"), ("02_beta", "FAILED"), ("03_gamma", "OK")]
    assert data["totals"]["sections"] == {"OK": 2, "SKIPPED": 0, "FAILED": 1}
    assert data["headline"] == (f"2 sections ran OK, 0 skipped, 1 failed; this run redid 02_beta, 2 notebooks kept "
                                f"from the run of {first['started_at']}")
    assert data["redone"] == ["02_beta"] and data["kept_from"] == first["started_at"]
    assert sorted(p.name for p in (out / "notebooks").iterdir()) == ["01_alpha.ipynb", "02_beta.ipynb",
                                                                     "03_gamma.ipynb"]
    assert (out / "notebooks" / "01_alpha.ipynb").read_bytes() == kept
    assert "beta again" in (out / "results.md").read_text() and "gamma first" in (out / "results.md").read_text()
    assert capsys.readouterr().out.splitlines()[-2] == data["headline"]


def test_only_of_every_notebook_on_the_card_is_a_plain_card(notebooks_dir, tmp_path):
    out = tmp_path / "results"
    full_run(notebooks_dir, out)
    assert run_main(notebooks_dir, out, "--only", "1", "2", "3") == 0
    data = json.loads((out / "results.json").read_text())
    assert "redone" not in data and "this run redid" not in data["headline"]


def test_only_into_a_folder_whose_card_cannot_be_read_is_refused_before_anything_runs(notebooks_dir, tmp_path,
                                                                                      capsys, monkeypatch):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    monkeypatch.setattr(runner, "run_pytest", lambda *_: pytest.fail("a notebook ran"))
    assert run_main(notebooks_dir, out, "--only", "01") == 2
    error = capsys.readouterr().err
    assert error.startswith(f"nspy-tutorial: error: --out {out}: its results.json is not a card this command wrote")
    assert "pass another --out" in error and sorted(p.name for p in out.iterdir()) == ["results.json"]


def test_only_is_explained_in_the_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "other notebooks' executed copies and rows are kept" in text and "names the ones this run redid" in text


def test_an_out_that_is_a_file_is_said_to_be_a_file(notebooks_dir, tmp_path, capsys):
    write_notebook(notebooks_dir, "01_a.ipynb", "pass")
    (tmp_path / "results").write_text("notes")
    assert run_main(notebooks_dir, tmp_path / "results") == 2
    assert capsys.readouterr().err == (f"nspy-tutorial: error: --out {tmp_path / 'results'} is a file, not a folder: "
                                       "pass --out a folder (missing, or a results folder)\n")
    assert (tmp_path / "results").read_text() == "notes"
