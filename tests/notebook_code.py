"""The notebooks' own code, for CPU tests: their functions, their kernels modules, their fixtures.

* :func:`functions` compiles named top-level functions of a notebook source into a namespace:
  the analysis a notebook runs on its table is tested as the notebook has it.
* :func:`module_source` is the text of a ``# %% writefile NAME.py`` cell, and
  :func:`import_module` writes it to a folder and imports it, as the notebook does.
* :func:`fixture` loads a table kept from a GPU run (``scripts/keep_fixtures.py``, which
  saves them with ``ncu_cli.keep_table``): nsight-python's own table, shaped exactly as the
  Nsight Compute backend's ``to_dataframe()`` -- the branch every Colab reader takes.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def source(stem: str) -> str:
    return (SOURCES / f"{stem}.py").read_text(encoding="utf-8")


def flat(text: str) -> str:
    """``text`` on one line, as ``ruff format`` would print a call that fits: whitespace runs become one space,
    none after an opening or before a closing bracket, no trailing comma (source checks that ignore layout)."""
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"([(\[{]) ", r"\1", text)
    return re.sub(r",? ([)\]}])", r"\1", text)


def functions(stem: str, *names: str, **namespace) -> SimpleNamespace:
    """The notebook's top-level functions ``names``, compiled into ``namespace`` (its globals)."""
    tree = ast.parse(source(stem).replace("{{SETUP}}", "pass").replace("{{SETUP_MANUAL}}", "pass"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    missing = set(names) - {node.name for node in found}
    assert not missing, f"{stem} defines no top-level function(s) {sorted(missing)}"
    exec(compile(ast.Module(body=found, type_ignores=[]), str(SOURCES / f"{stem}.py"), "exec"), namespace)
    return SimpleNamespace(**{name: namespace[name] for name in names})


def module_source(stem: str, module: str) -> str:
    """The body of the notebook's ``# %% writefile <module>.py`` cell."""
    match = re.search(rf"^# %% writefile {module}\.py\n(.*?)(?=^# %%|\Z)", source(stem), flags=re.M | re.S)
    assert match, f"{stem} has no '# %% writefile {module}.py' cell"
    return match.group(1)


def import_module(stem: str, module: str, folder: Path):
    """Write the notebook's kernels module into ``folder`` and import it (fresh)."""
    (folder / f"{module}.py").write_text(module_source(stem, module), encoding="utf-8")
    sys.path.insert(0, str(folder))
    sys.modules.pop(module, None)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(folder))


def load_table(path: str | Path) -> tuple[dict, pd.DataFrame]:
    """A table saved by ``scripts/keep_fixtures.py``: (the call, the DataFrame with its column types)."""
    kept = json.loads(Path(path).read_text(encoding="utf-8"))
    split = kept["table"]
    table = pd.DataFrame(split["data"], columns=split["columns"])
    for column, dtype in kept["dtypes"].items():
        if dtype not in ("object", "str", "string"):
            table[column] = table[column].astype(dtype)
    return kept["call"], table


RUNS = ("run1", "run2")  # two separate strict GPU runs of the series, kept by scripts/keep_fixtures.py


def fixture(name: str, run: str = "run1"):
    """(call, table) of ``tests/fixtures/<run>/<name>.json``, e.g. ``fixture("07_kernel_fusion--fusion")``.

    ``run`` names one of two separate GPU runs (:data:`RUNS`): a verdict the notebook prints
    must be the same on both, or the notebook must say the difference is not distinguishable.
    """
    if run not in RUNS:
        raise ValueError(f"fixture(): run must be one of {RUNS}, got {run!r}")
    path = FIXTURES / run / f"{name}.json"
    if not path.exists():  # never made up: a table no GPU run has kept yet is a skip that names it
        pytest.skip(f"no {run} table {path.name} yet: a strict GPU run keeps it with scripts/keep_fixtures.py "
                    f"--out tests/fixtures/{run} (see the closing note of the session that added it)")
    return load_table(path)
