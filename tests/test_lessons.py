"""``nspy_tutorial.lessons`` holds only what a lesson taught: every function in it is written, the same code,
in a notebook cell marked ``# @save``, and every function of such a cell is in it (d2l's habit)."""

from __future__ import annotations

import ast
import inspect
import math
import re
from pathlib import Path

import pytest

from nspy_tutorial import lessons

SOURCES = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "src").glob("[0-9][0-9]_*.py"))


def saved_cells() -> dict[str, tuple[str, ast.FunctionDef]]:
    """Function name -> (notebook, its definition) for every function of a ``# @save`` cell."""
    found = {}
    for path in SOURCES:
        for cell in re.split(r"^# %%.*\n", path.read_text(encoding="utf-8"), flags=re.M):
            if cell.lstrip().startswith("# @save"):
                for node in ast.parse(cell).body:
                    if isinstance(node, ast.FunctionDef):
                        found[node.name] = (path.stem, node)
    return found


def package_functions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(lessons))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_function_of_the_package_s_lessons_is_taught_in_a_saved_cell():
    assert set(package_functions()) <= set(saved_cells()), "write it in a notebook cell marked # @save first"


def test_every_function_of_a_saved_cell_is_kept_in_the_package():
    assert set(saved_cells()) <= set(package_functions())


@pytest.mark.parametrize("name", sorted(package_functions()))
def test_the_package_keeps_the_saved_cell_s_code_word_for_word(name):
    notebook, taught = saved_cells()[name]
    assert ast.dump(taught) == ast.dump(package_functions()[name]), f"lessons.{name} differs from {notebook}'s cell"


def test_the_run_to_run_band_is_the_far_end_of_the_shift_s_interval():
    first, second = (100.0, 2.0, 20), (101.0, 2.0, 20)
    shift, half, p = lessons.welch_shift(first, second)
    assert shift == pytest.approx(1.0) and p > 0.05
    assert half == pytest.approx(2.024 * math.sqrt(2 * 4 / 20), rel=1e-3)  # t(0.975, 38 df) x standard error
    assert lessons.run_to_run_pct(first, second) == pytest.approx(shift + half)
    assert lessons.run_to_run_pct(second, first) == pytest.approx(abs(100 * -1 / 101) + half * 100 / 101)
