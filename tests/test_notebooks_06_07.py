"""Checks on notebooks 06 (roofline) and 07 (kernel fusion) that need no GPU.

The notebooks' own helper functions are taken from their sources (notebooks/src/*.py) and
run here: the combine function that weights percentages by time, the per-run split of an
ncu report, and -- on CPU, with PyTorch's dispatcher counting -- the hand-counted kernels
and bytes that the prose and the analytic tables state. The static part pins the teaching
rules: nsight-python calls written in the cells, no retired helpers, visible ncu commands.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {stem: ROOT / "notebooks" / "src" / f"{stem}.py" for stem in ("06_roofline", "07_kernel_fusion")}


def source(stem: str) -> str:
    return SOURCES[stem].read_text(encoding="utf-8")


def functions(stem: str, names: list[str], namespace: dict) -> dict:
    """Compile the named top-level functions of a notebook source into ``namespace``."""
    tree = ast.parse(source(stem).replace("{{SETUP}}", "pass"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    assert sorted(f.name for f in found) == sorted(names), f"missing in {stem}: {set(names) - {f.name for f in found}}"
    exec(compile(ast.Module(body=found, type_ignores=[]), str(SOURCES[stem]), "exec"), namespace)
    return namespace


class Claims:
    """Stands in for ``nt``: records claims instead of printing them."""

    def __init__(self):
        self.made = []

    def claim(self, condition, statement, evidence=""):
        self.made.append((bool(condition), statement))
        if not condition:
            raise AssertionError(statement)


# --- static rules -----------------------------------------------------------------------------

@pytest.mark.parametrize("stem", SOURCES)
def test_no_retired_profiling_helpers(stem):
    assert "nspy_tutorial.profiling" not in source(stem)
    assert not re.search(r"\b(sum_kernels|profile_per_config|kernel_counts|tflops)\(", source(stem))


@pytest.mark.parametrize("stem", SOURCES)
def test_every_decorator_is_visible_silent_and_without_thermal_pauses(stem):
    calls = re.findall(r"nsight\.analyze\.kernel\(([^)]*)\)", source(stem).replace("\n", " "))
    assert calls, "the notebook must show its @nsight.analyze.kernel calls"
    for args in calls:
        assert 'thermal_mode="off"' in args and "verbosity=SILENT" in args, args


@pytest.mark.parametrize("stem", SOURCES)
def test_every_ncu_command_line_run_prints_its_command(stem):
    runs = re.findall(r"profile_script_report\((.*?)\)\n", source(stem), flags=re.S)
    assert runs and all("show_command=True" in r for r in runs)


@pytest.mark.parametrize("stem", SOURCES)
def test_combine_kernel_metrics_functions_are_defined_in_the_notebook(stem):
    used = set(re.findall(r"combine_kernel_metrics=(\w+)", source(stem)))
    defined = {f.name for f in ast.parse(source(stem).replace("{{SETUP}}", "pass")).body if isinstance(f, ast.FunctionDef)}
    assert used and used <= defined


# --- 06: the time-weighted combine and the per-run split ----------------------------------

def test_time_weighted_folds_kernels_into_the_duration_weighted_percentage():
    ns = functions("06_roofline", ["time_weighted"], {"np": np})
    kernels = [np.array([100.0, 90.0, 10.0]), np.array([300.0, 30.0, 80.0]), np.array([600.0, 50.0, 60.0])]
    acc = kernels[0]
    for k in kernels[1:]:  # nsight-python folds pairwise, left to right (functools.reduce)
        acc = ns["time_weighted"](acc, k)
    t = sum(k[0] for k in kernels)
    assert acc[0] == t
    assert np.allclose(acc[1:], sum(k[1:] * k[0] for k in kernels) / t)
    assert ns["time_weighted"].__code__.co_argcount == 2  # what nsight-python's extraction asserts


def test_per_run_splits_a_range_in_launch_order_and_combines_each_run():
    claims = Claims()
    ns = functions("06_roofline", ["per_run"], {"pd": pd, "nt": claims, "TIME": "t", "SM_PCT": "sm", "DRAM_PCT": "dram",
                                                "DRAM_READ": "rd", "DRAM_WRITE": "wr"})
    report = pd.DataFrame({"ID": range(6), "Range": ["m"] * 4 + ["other"] * 2, "Kernel Name": ["a", "b"] * 3,
                           "t": [1.0, 3.0, 2.0, 2.0, 9.0, 9.0], "sm": [10.0, 50.0, 20.0, 40.0, 0.0, 0.0],
                           "dram": [0.0] * 6})
    runs = ns["per_run"](report, "m", 2)
    assert runs["kernels"].tolist() == [2, 2]
    assert runs["t"].tolist() == [4.0, 4.0]
    assert runs["sm"].tolist() == [(10 * 1 + 50 * 3) / 4, (20 * 2 + 40 * 2) / 4]
    assert claims.made and all(ok for ok, _ in claims.made)
    with pytest.raises(AssertionError, match="same number of kernels"):
        ns["per_run"](report, "m", 3)


def test_place_is_the_ridge_point_in_disguise():
    ns = functions("06_roofline", ["place"], {})
    roofs = {"memory": 4000.0, "tensor": 800.0, "cuda cores": 60.0}
    for flops, nbytes, roof in ((2e12, 1e9, "tensor"), (1e9, 8e9, "cuda cores"), (3e11, 1e9, "tensor")):
        p = ns["place"]({"flops": flops, "bytes": nbytes, "roof": roof}, 1e6, roofs)
        assert p["ridge"] == pytest.approx(1e3 * roofs[roof] / roofs["memory"])
        assert (p["limited by"] == "compute") == (flops / nbytes > p["ridge"])


def test_transformer_model_counts_what_the_table_says():
    ns = functions("06_roofline", ["transformer_model"], {"QKV": "qkv", "SOFTMAX_ATT": "sm", "MATH": "math"})
    b, h, s, dh = 4, 16, 2048, 128
    m = ns["transformer_model"](b, h, s, dh)
    d = h * dh
    assert m["qkv"]["flops"] == 2 * b * s * d * 3 * d
    assert m["math"]["flops"] == m["fused"]["flops"] == 4 * b * h * s * s * dh + 5 * b * h * s * s
    assert m["math"]["bytes"] - m["fused"]["bytes"] == 2 * 4 * b * h * s * s  # four passes over the scores
    assert m["qkv"]["flops"] / m["qkv"]["bytes"] > 1000 > 2 > m["sm"]["flops"] / m["sm"]["bytes"]


# --- 07: the hand counts, checked against what PyTorch's eager ops read and write ------------

class Traffic(TorchDispatchMode):
    """Per aten op: bytes of the tensors it reads and of the tensor it returns."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        reads = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        self.ops.append((str(func), reads, out.numel() * out.element_size()))
        return out


def test_bias_gelu_eager_runs_the_nine_kernels_and_bytes_of_the_table():
    ns = functions("07_kernel_fusion", ["bias_gelu"], {"torch": torch, "math": math})
    rows, hidden = 64, 256
    n = rows * hidden
    x, bias = torch.randn(rows, hidden), torch.randn(hidden)
    with Traffic() as traffic:
        ns["bias_gelu"](x, bias)
    assert len(traffic.ops) == 9
    assert sum(r for _, r, _ in traffic.ops) == 4 * 11 * n + 4 * hidden  # ANALYTIC_2[EAGER]["read"]
    assert sum(w for _, _, w in traffic.ops) == 4 * 9 * n  # ANALYTIC_2[EAGER]["write"]
    assert "4 * 11 * N + 4 * HIDDEN" in source("07_kernel_fusion") and "4 * 9 * N" in source("07_kernel_fusion")


def test_a_plus_b_times_c_moves_what_the_table_says():
    n = 1000
    a, b, c = (torch.randn(n) for _ in range(3))
    with Traffic() as unfused:
        _ = a + b * c
    with Traffic() as fused:
        torch.addcmul(a, b, c)
    assert [op for op, _, _ in unfused.ops] == ["aten.mul.Tensor", "aten.add.Tensor"]
    assert sum(r for _, r, _ in unfused.ops) == 16 * n and sum(w for _, _, w in unfused.ops) == 8 * n
    assert sum(r for _, r, _ in fused.ops) == 12 * n and sum(w for _, _, w in fused.ops) == 4 * n
    src = source("07_kernel_fusion")
    assert '"read": 4 * (2 + 2) * N' in src and '"write": 4 * (1 + 1) * N' in src
    assert '"read": 4 * 3 * N, "write": 4 * N' in src


def test_the_ncu_script_runs_the_notebooks_bias_gelu_verbatim():
    src = source("07_kernel_fusion")
    body = re.search(r"def bias_gelu\(x: torch.Tensor, bias: torch.Tensor\) -> torch.Tensor:\n(?:    .*\n)+", src).group(0)
    notebook_lines = [line.strip() for line in body.splitlines()[1:] if not line.strip().startswith('"""')]
    script = re.search(r"GELU_SCRIPT = textwrap.dedent\('''(.*?)'''\)", src, flags=re.S).group(1)
    for line in notebook_lines:
        assert line in script, line
