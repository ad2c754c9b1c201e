"""Tests for the notebook runner (``nspy-tutorial run``).

Executing a notebook starts a Jupyter kernel (about 2 s), so only the tests
whose point is execution run real notebooks; ordering and card tests replace
``execute_notebook`` with a stub.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial import runner
from nspy_tutorial.runner import NotebookResult, SectionRecord

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


def stub_result(path: Path, *sections: SectionRecord, error: str | None = None) -> NotebookResult:
    """A NotebookResult as execute_notebook would build it, without a kernel."""
    failed = error is not None or any(s.status == "FAILED" for s in sections)
    return NotebookResult(
        notebook=path.stem,
        status="FAILED" if failed else "OK",
        seconds=1.0,
        error=error,
        sections=list(sections),
    )


def section(notebook: str, name: str, status: str, **fields: str) -> SectionRecord:
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

    def fake_execute(path, executed_dir, records_dir, timeout):
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


def test_missing_notebooks_dir_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    code = run_main(missing, tmp_path / "results")
    assert code == 2
    assert f"notebooks folder not found: {missing}" in capsys.readouterr().err


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
    path = tmp_path / "results.md"
    runner.write_card_markdown(card, path)
    text = path.read_text()
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


def test_interrupted_run_leaves_previous_output_untouched(notebooks_dir, tmp_path, monkeypatch):
    for name in ["01_a.ipynb", "02_b.ipynb"]:
        write_notebook(notebooks_dir, name, "pass")
    out = tmp_path / "results"
    out.mkdir()
    (out / "results.json").write_text('{"previous": true}')
    calls: list[str] = []

    def interrupted_execute(path, *_):
        calls.append(path.name)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return stub_result(path)

    monkeypatch.setattr(runner, "execute_notebook", interrupted_execute)
    code = run_main(notebooks_dir, out)
    assert code == 130
    assert (out / "results.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "results"]


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
    assert bad["error"] == "ZeroDivisionError: division by zero"
    assert good["status"] == "OK" and good["counts"]["OK"] == 1
    partial = nbformat.read(out / "notebooks" / "01_bad.ipynb", as_version=4)
    assert partial.cells[0].outputs[0]["text"] == "before\n"
    assert partial.cells[2].outputs == []


def test_cell_timeout_marks_notebook_failed(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_slow.ipynb", "import time; time.sleep(30)")
    out = tmp_path / "results"
    code = run_main(notebooks_dir, out, "--timeout", "1")
    card = json.loads((out / "results.json").read_text())
    assert code == 1
    assert card["notebooks"][0]["error"].startswith("CellTimeoutError")


def test_executed_copies_are_written(notebooks_dir, tmp_path):
    write_notebook(notebooks_dir, "01_hello.ipynb", "print('hello from the kernel')")
    out = tmp_path / "results"
    run_main(notebooks_dir, out)
    executed = nbformat.read(out / "notebooks" / "01_hello.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "hello from the kernel\n"
    assert (out / "results.md").exists()
