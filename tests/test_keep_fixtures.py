"""scripts/keep_fixtures.py: the tests' fixtures are written by a script a GPU run calls, not by the notebooks."""

from __future__ import annotations

import importlib.util
import re

import nbformat
import numpy as np
import pandas as pd
import pytest
from notebook_code import ROOT, load_table, source

from nspy_tutorial import ncu_cli

spec = importlib.util.spec_from_file_location("keep_fixtures", ROOT / "scripts" / "keep_fixtures.py")
keep_fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep_fixtures)

STEMS = {"02": "02_first_profile", "03": "03_run_counts", "04": "04_cache_and_clock_control", "05": "05_precision_sweeps",
         "06": "06_roofline", "07": "07_kernel_fusion", "08": "08_collectors_and_thermal", "09": "09_cupti_vs_ncu",
         "10": "10_keeping_the_evidence", "11": "11_your_kernel"}


def test_a_cell_run_after_the_notebook_keeps_a_table_the_notebook_made(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "0")
    folder = tmp_path / "10_tiny"
    folder.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import pandas as pd\nT = pd.DataFrame({'Annotation': ['x'], 'AvgValue': [1.5]})\ndef work(n): pass")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "10_tiny.ipynb")
    keep_fixtures.keep(folder / "10_tiny.ipynb", tmp_path / "kept",
                       keep_fixtures.KEEP + 'keep_table(T, work, [7], 2, ["m"], name="t")')
    call, table = load_table(tmp_path / "kept" / "10_tiny--t.json")
    assert call == {"function": "work", "configs": [[7]], "runs": 2, "metrics": ["m"]}
    assert table.to_dict("list") == {"Annotation": ["x"], "AvgValue": [1.5]}


@pytest.mark.parametrize("number", sorted(keep_fixtures.IN_PROCESS))
def test_the_cells_keep_only_names_the_notebook_defines(number):
    src = source(STEMS[number])
    cell = re.sub(r'"[^"]*"', "", keep_fixtures.IN_PROCESS[number].removeprefix(keep_fixtures.KEEP))
    keywords = set(re.findall(r"(\w+)=(?!=)", cell))  # a keyword argument's name is not the notebook's
    names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", cell)) - {"keep_table", "print", "list"} - keywords
    assert names
    for name in names:  # assigned (at top level or in a section's with block: a global), or imported as it
        assert re.search(rf"^\s*(?:\w+, )*{name}\b[^=\n]*=|^import \w+ as {name}\b|^def {name}\b", src, flags=re.M), name


def nsight_shaped_table() -> pd.DataFrame:
    """Columns and types as nsight-python 1.1's to_dataframe() returns them."""
    return pd.DataFrame({
        "Annotation": ["a + b*c", "addcmul"], "Metric": ["dram__bytes.sum"] * 2, "n": [16777216, 16777216],
        "AvgValue": [3.589e8, 2.53e8], "StdDev": [np.nan, 28736.3], "NumRuns": [1, 3],
        "Kernel": ["vectorized_elementwise_kernel|vectorized_elementwise_kernel", "vectorized_elementwise_kernel"],
        "ComputeClock": [1980000, 1980000], "Unit": ["byte", "byte"],
        "StableMeasurement": pd.array([pd.NA, True], dtype="boolean"), "Normalized": [False, False]})


def test_a_kept_table_loads_back_equal_with_its_column_types(tmp_path, monkeypatch):
    monkeypatch.setenv(keep_fixtures.KEEP_VAR, str(tmp_path / "kept"))
    monkeypatch.chdir(tmp_path)
    table = nsight_shaped_table()
    path = keep_fixtures.keep_table(table, nsight_shaped_table, [16777216], 3, ["dram__bytes.sum"])
    assert path == str(tmp_path / "kept" / f"{tmp_path.name}--nsight_shaped_table.json")
    call, back = load_table(path)
    assert call == {"function": "nsight_shaped_table", "configs": [[16777216]], "runs": 3,
                    "metrics": ["dram__bytes.sum"]}
    pd.testing.assert_frame_equal(back, table, check_dtype=False)
    assert back["StableMeasurement"].dtype == "boolean" and back["n"].dtype == "int64"


def test_once_installed_every_table_nsight_table_reads_is_kept_under_its_report_name(tmp_path, monkeypatch):
    monkeypatch.setenv(keep_fixtures.KEEP_VAR, str(tmp_path / "kept"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ncu_cli, "nsight_table", lambda script, func, **settings: nsight_shaped_table())
    keep_fixtures.keep_ncu_tables()
    table = ncu_cli.nsight_table("k.py", nsight_shaped_table, ncu="ncu", configs=[16777216], runs=3,
                                 report="work-none.ncu-rep", cache_control="none")
    call, kept = load_table(tmp_path / "kept" / f"{tmp_path.name}--work-none.json")
    assert call == {"function": "nsight_shaped_table", "configs": [[16777216]], "runs": 3,
                    "metrics": list(ncu_cli.DEFAULTS["metrics"])}
    pd.testing.assert_frame_equal(kept, table, check_dtype=False)


def test_the_notebooks_do_not_keep_tables_themselves():
    for path in (ROOT / "notebooks" / "src").glob("*.py"):
        assert "keep_table" not in path.read_text(encoding="utf-8"), path.name
