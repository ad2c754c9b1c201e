"""The teaching rules every notebook source must keep (notebooks/src/NN_topic.py).

* Each kernel is written once: a workload lives in a ``# %% writefile NAME.py`` cell (Jupyter's
  ``%%writefile``) that the notebook imports and the ``ncu`` command line runs, never as a
  Python program inside a string literal.
* The lesson is most of the code: no notebook has more than 400 code lines, counted as the
  reader sees them (non-blank lines of the generated notebook's code cells) after ``ruff format``
  at 100 columns (tests/test_lint.py); no statements chained with ``;`` and no walrus
  (``:=``) in a lesson: one statement a line, each name bound where it is read.
* Numbers in prose come from the reader's run: markdown states no measured figure. A number
  with a unit (us, ms, GB/s, MHz, %, TFLOP/s, x) is allowed only as part of the method's own
  definitions (``DEFINITIONS``) or on a line that marks it as a datasheet fact or a worked
  example (``MARKERS``); measured figures are printed by code.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
MAX_CODE_LINES = 400
UNIT = re.compile(r"(?<![\w.])[-+±~≈]?\d[\d,.]*\s?(?:µs|us|ms|ns|GB/s|TB/s|MB/s|MHz|GHz|%|TFLOP/s|TFLOPs|×|x)(?![\w])")
# What the method itself fixes, not what a run measured: confidence and significance levels,
# nsight-python's stability threshold and the precision target, sizes chosen against the L2.
DEFINITIONS = {"95 %", "97.5 %", "2 %", "±1 %", "1 %", "5 %", "2×", "4×", "8×", "16×", "1.4826 ×"}
MARKERS = ("datasheet", "worked example", "for example", "e.g.")

each_source = pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])


def cells(path: Path) -> list[tuple[str, str]]:
    """(kind, text) of each cell of a percent-format source; writefile cells are code."""
    parts = re.split(r"^# %%", path.read_text(encoding="utf-8"), flags=re.M)[1:]
    return [("markdown" if part.startswith(" [markdown]") else "code", part.split("\n", 1)[1] if "\n" in part else "")
            for part in parts]


def programs_in_strings(source: str) -> list[int]:
    """Line numbers of string literals that hold a Python program (imports, defs or loops)."""
    found = []
    for node in ast.walk(ast.parse(source.replace("{{SETUP}}", "pass").replace("{{SETUP_MANUAL}}", "pass"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") >= 2:
            try:
                tree = ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                continue
            if any(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.For, ast.With))
                   for n in ast.walk(tree)):
                found.append(node.lineno)
    return found


@each_source
def test_no_python_program_is_typed_inside_a_string_literal(path):
    lines = programs_in_strings(path.read_text(encoding="utf-8"))
    assert not lines, f"{path.name}: Python source in string literal(s) at line(s) {lines}; " \
                      "write the module once in a '# %% writefile NAME.py' cell and run that file"


def test_the_string_program_check_can_fail():
    assert programs_in_strings("SCRIPT = '''\nimport torch\nx = torch.ones(3)\n'''\n") == [1]
    assert programs_in_strings('def f():\n    """Docs.\n\n    More docs.\n    """\n') == []


def code_lines(path: Path) -> int:
    notebook = nbformat.read(ROOT / "notebooks" / f"{path.stem}.ipynb", as_version=4)
    return sum(1 for cell in notebook.cells if cell.cell_type == "code"
               for line in cell.source.splitlines() if line.strip())


@each_source
def test_no_notebook_has_more_than_400_code_lines(path):
    assert code_lines(path) <= MAX_CODE_LINES, f"{path.stem}: {code_lines(path)} code lines"


def measured_looking_numbers(markdown: str) -> list[str]:
    """Number-with-unit tokens of a markdown text that are neither definitions nor marked lines."""
    flagged = []
    for line in markdown.splitlines():
        if any(marker in line.lower() for marker in MARKERS):
            continue
        for match in UNIT.finditer(line):
            token = re.sub(r"^[~≈+-]", "", match.group(0)).replace(" ", " ").replace("x", "×")
            token = re.sub(r"(\d)([%×])", r"\1 \2", token) if token.endswith("%") else token
            if token not in DEFINITIONS and token.replace(" ", "") not in {d.replace(" ", "") for d in DEFINITIONS}:
                flagged.append(f"{match.group(0)!r} in: {line.strip()}")
    return flagged


@each_source
def test_markdown_states_no_measured_number(path):
    flagged = [hit for kind, text in cells(path) if kind == "markdown" for hit in measured_looking_numbers(text)]
    assert not flagged, f"{path.stem}: numbers in prose must come from the reader's run:\n" + "\n".join(flagged)


def test_the_markdown_number_check_can_fail_and_spares_definitions_and_marked_lines():
    assert measured_looking_numbers("# the 512 matmul took a third longer (13 us)")
    assert measured_looking_numbers("# `x * 2` sits at 96 % of the roof")
    assert not measured_looking_numbers("# a 95 % interval; StableMeasurement is RSD < 2 %")
    assert not measured_looking_numbers("# The H200's datasheet gives 4,800 GB/s")
    assert not measured_looking_numbers("# e.g. 2,619 MHz x 5,120 bit / 8 gives 3,352 GB/s")


@each_source
def test_every_written_module_is_imported_by_its_notebook(path):
    text = path.read_text(encoding="utf-8")
    for name in re.findall(r"^# %% writefile (\w+)\.py$", text, flags=re.M):
        assert re.search(rf"^\s*(import {name}\b|from {name} import)", text, flags=re.M), \
            f"{path.stem} writes {name}.py but never imports it"


def packed_statements(source: str) -> list[str]:
    """``line N: ;`` for statements chained with a semicolon, ``line N: :=`` for each walrus."""
    tree = ast.parse(source.replace("{{SETUP}}", "pass").replace("{{SETUP_MANUAL}}", "pass"))
    found = [f"line {node.lineno}: :=" for node in ast.walk(tree) if isinstance(node, ast.NamedExpr)]
    rows: dict[int, int] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            for statement in body if isinstance(body, list) else []:
                if isinstance(statement, ast.stmt):
                    rows[statement.lineno] = rows.get(statement.lineno, 0) + 1
    return found + [f"line {row}: ;" for row, count in sorted(rows.items()) if count > 1]


@each_source
def test_lessons_chain_no_statements_and_use_no_walrus(path):
    found = packed_statements(path.read_text(encoding="utf-8"))
    assert not found, f"{path.stem}: one statement a line, no walrus:\n" + "\n".join(found)


def test_the_packed_statement_check_can_fail_and_spares_plain_code():
    assert packed_statements("a = 1; b = 2\n") == ["line 1: ;"]
    assert packed_statements("if (n := 3) > 2:\n    pass\n") == ["line 1: :="]
    assert packed_statements("a = 1\nif a:\n    b = 2\nelse:\n    b = 3\n") == []
