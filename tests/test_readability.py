"""Specifications for scripts/readability.py: what in a notebook's printed output a learner cannot read.

Tables are made here by pandas itself, in each layout the notebooks print (``to_string()`` with a
named or unnamed index, ``index=False`` as ``nt.show`` prints, a MultiIndex, a frame pandas wraps
or truncates), so the column count is checked against the frame's real shape. The recorded 06 of
the H200 run (tests/fixtures/readability/) is the real case the script was written for.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readability", ROOT / "scripts" / "readability.py")
readability = importlib.util.module_from_spec(spec)
sys.modules["readability"] = readability  # its dataclass looks its module up
spec.loader.exec_module(readability)

RECORDED_06 = ROOT / "tests" / "fixtures" / "readability" / "06_roofline-normal.nbjson"  # an .ipynb, renamed
RECORDED_RUN = next((folder / "shared" / "reference" / "runs" / "h200-2026-12-04-normal" for folder in
                     (ROOT.parent, ROOT.parent.parent) if (folder / "shared" / "reference").is_dir()), ROOT / "absent")
RULE = "=" * 78


def frame(columns: int, rows: int = 3) -> pd.DataFrame:
    """A frame like the notebooks': names with spaces, numbers wider than some names, a text column."""
    names = ["kernel us", "% of roof", "n", "AI measured", "MHz", "verdict", "p", "SD us", "roof", "ridge", "x"]
    data = {names[i % len(names)] + ("" if i < len(names) else f" {i}"): np.linspace(1, 2_000, rows) * (i + 1)
            for i in range(columns)}
    if columns > 5:
        data[list(data)[5]] = ["memory-bound", "neither (memory side)", "compute-bound"][:rows] * (rows // 3 + 1)
    return pd.DataFrame({k: v[:rows] for k, v in data.items()})


def columns_of(text: str) -> list[int]:
    return [n for _, n in readability.text_tables(text.split("\n"))]


@pytest.mark.parametrize("columns", [2, 8, 9, 13])
def test_an_unnamed_index_counts_as_a_column(columns):
    assert columns_of(frame(columns).to_string()) == [columns + 1]


@pytest.mark.parametrize("columns", [2, 8, 9])
def test_index_false_tables_count_their_columns_though_names_stand_one_space_apart(columns):
    text = frame(columns).to_string(index=False)
    assert columns_of(text) == [columns]


def test_a_named_index_and_its_names_line_count_once():
    df = frame(8).set_index(pd.Index(["fp16 matmul", "x * 2", "softmax [rows x 1024]"], name="Annotation"))
    assert columns_of(df.to_string()) == [9]


def test_each_level_of_a_named_multiindex_is_a_column():
    df = frame(7).assign(dtype=["fp16", "bf16", "fp32"], size=[1, 2, 3]).set_index(["dtype", "size"])
    assert columns_of(df.to_string()) == [9]


def test_names_with_spaces_over_narrower_values_are_one_column():
    df = pd.DataFrame({"% of datasheet": [88.7, 9.1], "time RSD %": [0.11, 1.89], "in words": ["tens of us", "x y"]})
    assert columns_of(df.to_string(index=False)) == [3]


def test_a_text_column_whose_values_hold_spaces_is_one_column():
    df = pd.DataFrame({"op": ["add", "matmul 512"], "overhead us": [39.56, 60.56],
                       "in words": ["tens of us, noisy", "tens of us"]})
    assert columns_of(df.to_string(index=False)) == [3]


def test_a_table_pandas_wraps_into_blocks_is_counted_whole():
    df = pd.DataFrame(np.random.default_rng(0).random((3, 12)) * 1000, columns=[f"col {i}" for i in range(12)])
    with pd.option_context("display.width", 80, "display.max_columns", 20):
        text = str(df)
    assert "\\" in text.splitlines()[0]  # pandas really wrapped it
    assert columns_of(text) == [13]


def test_a_table_pandas_truncates_is_counted_by_its_footer():
    df = pd.DataFrame(np.random.default_rng(0).random((2, 14)), columns=[f"column {i}" for i in range(14)])
    with pd.option_context("display.width", 80, "display.max_columns", 6):
        text = str(df)
    assert "..." in text and "[2 rows x 14 columns]" in text
    assert columns_of(text) == [15]


@pytest.mark.parametrize("text", [
    "  fits in L2: warm      6.2 us, flushed      9.5 us ->   5,103 vs   3,318 GB/s\n"
    "  8x L2     : warm    237.9 us, flushed    237.9 us ->   4,231 vs   4,232 GB/s",
    "  matmul 512: unflushed +16.9 % = +1.16 us per kernel: fits the per-kernel overhead\n"
    "  matmul 1024: unflushed +2.7 % = +1.65 us per kernel: fits the per-kernel overhead\n"
    "  matmul 2048: unflushed +0.5 % = +1.54 us per kernel: fits the per-kernel overhead",
    "  check: every kernel ran at the clock the table says it ran at, within one percent\n"
    "  check: the DRAM counters read the bytes counted by hand, within one L2 cache size",
])
def test_lines_printed_with_one_format_or_prose_are_not_wide_tables(text):
    assert all(n <= 8 for n in columns_of(text))


def test_a_line_is_measured_as_shown_without_colour_codes_and_after_a_carriage_return():
    assert readability.shown_lines("\x1b[31mred\x1b[0m\n10%\r100% done") == ["red", "100% done"]


def synthetic_notebook(folder: Path) -> Path:
    """A tiny executed notebook: a banner, a long line, a wide and a narrow table, an HTML table, a traceback."""
    wide, narrow = frame(9).to_string(), frame(7).to_string()
    html = frame(9).to_html()
    stream = nbformat.v4.new_output("stream", name="stdout",
                                    text=f"\n{RULE}\n1. First section\n{RULE}\n{'x' * 130}\n{wide}\n{narrow}\n")
    cells = [nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell("print(...)", outputs=[stream]),
             nbformat.v4.new_code_cell("df", outputs=[nbformat.v4.new_output(
                 "execute_result", data={"text/html": html, "text/plain": wide}, execution_count=1)]),
             nbformat.v4.new_code_cell("1/0", outputs=[nbformat.v4.new_output(
                 "error", ename="ZeroDivisionError", evalue="x", traceback=["y" * 300])])]
    notebook = nbformat.v4.new_notebook(cells=cells)
    path = folder / "99_tiny.ipynb"
    nbformat.write(notebook, path)
    return path


def test_a_synthetic_notebook_reports_each_wide_thing_once_under_its_section(tmp_path):
    found = readability.notebook_findings(synthetic_notebook(tmp_path))
    assert [(f.section, f.kind, f.size) for f in found if f.kind == "table"] == [
        ("1. First section", "table", 10), ("cell 3 (no section)", "table", 10)]
    assert [(f.section, f.size) for f in found if f.kind == "line"] == [("1. First section", 130)]


def test_the_traceback_of_a_failed_cell_is_not_read(tmp_path):
    found = readability.notebook_findings(synthetic_notebook(tmp_path))
    assert not [f for f in found if f.size == 300]


def test_the_command_exits_one_with_a_readable_report_when_something_is_too_wide(tmp_path, capsys):
    synthetic_notebook(tmp_path)
    assert readability.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "99_tiny" and "  [1. First section]" in out
    assert out[-1] == "1 printed line over 120 characters, 2 tables over 8 columns, in 1 notebook"
    assert max(map(len, out)) <= 120


def test_the_command_exits_zero_when_everything_fits(tmp_path, capsys):
    stream = nbformat.v4.new_output("stream", name="stdout", text=frame(3).to_string() + "\nshort line\n")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[stream])]),
                   tmp_path / "01_ok.ipynb")
    assert readability.main([str(tmp_path / "01_ok.ipynb")]) == 0
    assert capsys.readouterr().out.strip().endswith("0 printed lines over 120 characters, 0 tables over 8 columns, "
                                                    "in 0 notebooks")


def test_a_folder_without_executed_notebooks_is_exit_two_naming_what_to_give(tmp_path, capsys):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")]), tmp_path / "01_a.ipynb")
    assert readability.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "01_a.ipynb has no outputs (was it executed?)" in err and "nspy-tutorial run --out" in err


def test_a_run_folder_is_read_through_its_notebooks_folder(tmp_path):
    (tmp_path / "notebooks").mkdir()
    synthetic_notebook(tmp_path / "notebooks")
    assert readability.notebooks([tmp_path]) == [tmp_path / "notebooks" / "99_tiny.ipynb"]


def test_the_recorded_06_has_its_long_lines_and_wide_tables_found_in_their_sections():
    found = readability.notebook_findings(RECORDED_06)
    long_lines = {f.section for f in found if f.kind == "line"}
    assert {"1. This GPU's roofs: datasheet and measured", "2. Limited by what? Three kernels, three ways",
            "3. Transformer ops on the roofline"} <= long_lines
    assert [(f.section[:2], f.size) for f in found if f.kind == "table"] == [("2.", 14), ("3.", 17)]
    assert max(f.size for f in found if f.kind == "line") > 500  # the [OK] line of section 3


@pytest.mark.skipif(not RECORDED_RUN.exists(), reason=f"the recorded run is not here ({RECORDED_RUN})")
def test_the_whole_recorded_run_exits_one_and_names_06():
    assert readability.main([str(RECORDED_RUN)]) == 1
    assert "06_roofline" in {f.notebook for p in readability.notebooks([RECORDED_RUN])
                             for f in readability.notebook_findings(p)}
