"""scripts/keep_fixtures.py: the tests' fixtures are written by a script a GPU run calls, not by the notebooks."""

from __future__ import annotations

import importlib.util
import re

import nbformat
import pytest
from notebook_code import ROOT, load_table, source

spec = importlib.util.spec_from_file_location("keep_fixtures", ROOT / "scripts" / "keep_fixtures.py")
keep_fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep_fixtures)

STEMS = {"04": "04_cache_and_clock_control", "05": "05_precision_sweeps", "06": "06_roofline", "08": "08_collectors_and_thermal", "09": "09_cupti_vs_ncu",
         "10": "10_keeping_the_evidence"}


def test_a_cell_run_after_the_notebook_keeps_a_table_the_notebook_made(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_KEEP_TABLES", "")
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
    names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", cell)) - {"keep_table", "print", "list", "name", "columns"}
    assert names
    for name in names:  # assigned (at top level or in a section's with block: a global), or imported as it
        assert re.search(rf"^\s*(?:\w+, )*{name}\b[^=\n]*=|^import \w+ as {name}\b|^def {name}\b", src, flags=re.M), name
