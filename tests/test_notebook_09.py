"""Specifications for notebook 09's code that a CPU can check before a GPU ever runs it.

The child scripts (their text lives in the notebook) must do things in one order:
``NSPY_NCU_INIT_AT_IMPORT=0``, the libcupti preload, ``import nsight``, CUPTI activation,
and only then torch. The notebook's helper functions (statistics, splitting ncu's launches
into runs, the empty-result check) are taken from the source by name and run on made-up data.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

SOURCE = Path(__file__).resolve().parents[1] / "notebooks" / "src" / "09_cupti_vs_ncu.py"
TREE = ast.parse(SOURCE.read_text(encoding="utf-8"))


def scripts() -> dict[str, str]:
    """Every ``NAME_SCRIPT = textwrap.dedent('''...''')`` of the notebook, dedented."""
    found = {}
    for node in TREE.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.endswith("_SCRIPT")):
            found[node.targets[0].id] = textwrap.dedent(node.value.args[0].value)
    return found


def functions(*names: str, **namespace) -> SimpleNamespace:
    """The notebook's top-level functions ``names``, defined in ``namespace``."""
    namespace = {"np": np, "pd": pd, "stats": stats, **namespace}
    for node in TREE.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            # the notebook's own function, compiled from its source: this is what is under test
            exec(compile(ast.Module([node], []), str(SOURCE), "exec"), namespace)  # noqa: S102
    return SimpleNamespace(**{name: namespace[name] for name in names})


SCRIPTS = scripts()


def test_the_notebook_has_its_four_child_scripts():
    assert set(SCRIPTS) == {"NCU_SCRIPT", "CUPTI_SCRIPT", "LIMITS_SCRIPT", "PLAIN_SCRIPT"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_script_compiles_and_prints_one_result_line(name):
    compile(SCRIPTS[name], name, "exec")
    assert SCRIPTS[name].count('print("NSPY_RESULT "') == 1


@pytest.mark.parametrize("name", ["CUPTI_SCRIPT", "LIMITS_SCRIPT"])
def test_cupti_scripts_skip_nsight_compute_preload_libcupti_and_activate_before_torch(name):
    text = SCRIPTS[name]
    steps = [r'^os\.environ\["NSPY_NCU_INIT_AT_IMPORT"\] = "0"', r"^ctypes\.CDLL\(", r"^import nsight$",
             r"^nsight\.activate\(nsight\.Tool\.CUPTI\)", r"^import torch\b"]
    where = [re.search(step, text, re.MULTILINE) for step in steps]
    assert None not in where, dict(zip(steps, where))
    starts = [match.start() for match in where]
    assert starts == sorted(starts), dict(zip(steps, starts))


@pytest.mark.parametrize("name", ["NCU_SCRIPT", "PLAIN_SCRIPT"])
def test_scripts_run_without_nsight(name):
    assert not re.search(r"^\s*(import|from) nsight", SCRIPTS[name], re.MULTILINE)


def test_the_ncu_script_marks_the_range_the_notebook_filters():
    assert SCRIPTS["NCU_SCRIPT"].count('range_push("matmul")') == 1
    assert '[TIME], ["matmul"]' in SOURCE.read_text(encoding="utf-8")


def test_spread_uses_the_student_t_quantile():
    f = functions("spread")
    got = f.spread([1000.0, 2000.0, 3000.0])
    assert got["mean_us"] == pytest.approx(2.0)
    assert got["t95_us"] == pytest.approx(stats.t.ppf(0.975, 2) * 1.0 / np.sqrt(3))
    assert got["median_us"] == pytest.approx(2.0) and got["MAD_us"] == pytest.approx(1.0)


def test_welch_interval_matches_scipy():
    f = functions("welch")
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 1, 10), rng.normal(101, 3, 10)
    d, half = f.welch(a, b)
    low, high = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert d - half == pytest.approx(low) and d + half == pytest.approx(high)


def test_welch_of_two_constant_samples_has_no_width():
    assert functions("welch").welch([5.0, 5.0], [7.0, 7.0]) == (2.0, 0.0)


def ncu_launches(counts: dict[int, int], runs: int) -> pd.DataFrame:
    rows = [{"ns": float(n + k), "Kernel Name": f"k{k}"} for n, per_run in counts.items()
            for _ in range(runs) for k in range(per_run)]
    return pd.DataFrame(rows)


def test_ncu_launches_split_into_runs_by_the_kernels_per_run():
    counts = {512: 1, 1024: 2}
    f = functions("runs_from_ncu", RUNS=3, SIZES=list(counts))
    runs = f.runs_from_ncu(ncu_launches(counts, 3), counts)
    assert runs.groupby("n").size().to_dict() == {512: 3, 1024: 3}
    assert runs[runs.n == 1024].ns.tolist() == [2 * 1024 + 1.0] * 3
    assert runs[runs.n == 1024].Kernel.iloc[0] == "k0|k1"


def test_ncu_launches_that_do_not_add_up_are_refused():
    f = functions("runs_from_ncu", RUNS=3, SIZES=[512, 1024])
    with pytest.raises(RuntimeError, match="profiled 9 launches.*predict 6"):
        f.runs_from_ncu(ncu_launches({512: 1, 1024: 2}, 3), {512: 1, 1024: 1})


def test_runs_from_raw_counts_the_kernels_each_run_combined():
    raw = pd.DataFrame({"n": [512, 512, 1024], "Value": [1.0, 2.0, 3.0], "Kernel": ["a", "a", "b|c"]})
    runs = functions("runs_from_raw").runs_from_raw(raw)
    assert runs.run.tolist() == [0, 1, 0] and runs.kernels.tolist() == [1, 1, 2]


class Result:
    def __init__(self, df: pd.DataFrame) -> None:
        self.df = df

    def to_dataframe(self) -> pd.DataFrame:
        return self.df


def test_measured_names_an_annotation_without_rows():
    measured = functions("measured").measured
    empty = pd.DataFrame(columns=["Annotation", "AvgValue"])  # what a memcpy-only region gives under CUPTI
    with pytest.raises(RuntimeError, match=r"\['copy'\].*memcpy"):
        measured(Result(empty), ["copy"])
    with pytest.raises(RuntimeError, match=r"\['copy'\]"):
        measured(None, ["copy"])


def test_measured_returns_the_frame_when_every_annotation_has_rows():
    df = pd.DataFrame({"Annotation": ["copy"], "AvgValue": [1.0]})
    assert functions("measured").measured(Result(df), ["copy"]) is df
