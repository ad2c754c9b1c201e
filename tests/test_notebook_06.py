"""Notebook 06 (roofline) without a GPU.

* Its analysis (``place``, ``roof_table``, ``combine``, ``by_operation``, ``taken_apart``,
  ``instructions``) runs here on tables shaped exactly as nsight-python returns them: the kept
  tables of two separate strict GPU runs (``tests/fixtures/run1`` and ``run2``:
  ``06_roofline--limits.json``, the one table sections 2 and 3 share, and
  ``06_roofline--roofs.json``, section 1's), and synthetic H200-like tables that show every
  claim failing on data that contradicts it.
* Its hand counts (FLOPs and the bytes the formula counts) are checked against what PyTorch's
  eager ops read and write, seen through the dispatcher on CPU, including PyTorch's safe softmax;
  so is the rule the notebook uses to know the math attention path's precision.
* The rules its cells keep: kernels written once in ``roofline_kernels.py``, one visible ``if``
  choosing the tool, precision taken from the inputs' dtypes, not from kernel names.
* The verdicts of two separate GPU runs agree, or the notebook flags them as not decided.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from notebook_code import fixture, flat, functions, import_module, module_source, source
from scipy import stats
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

STEM = "06_roofline"
TIME, DRAM_BYTES, CLOCK = "gpu__time_duration.sum", "dram__bytes.sum", "gpc__cycles_elapsed.avg.per_second"
SM_PCT, DRAM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"
METRICS = [TIME, SM_PCT, DRAM_PCT, DRAM_BYTES, CLOCK]
H200_L2 = 60 * 2**20
# Roofs as section 1 measured them in a strict H200 run (the series of 2026-12-03), with its datasheet peaks taken
# apart (132 SMs, 1,980 MHz).
H200_ROOFS = {"memory": 4483.0, "fp16": 769.0, "bf16": 800.0, "fp32": 51.1, "clock memory": 4917.0,
              "datasheet": {"fp16": 989.4, "bf16": 989.4, "fp32": 67.0},
              "apart": {"fp16": (4096, 1830.0), "bf16": (4096, 1830.0), "fp32": (256, 1982.8)},
              "per MHz": {"fp16": 132 * 4096 / 1e6, "bf16": 132 * 4096 / 1e6, "fp32": 132 * 256 / 1e6}}
FLAGS = ("on the ridge", "tie", "within run-to-run variation")  # what the notebook says where a run-to-run difference could flip a verdict


def constant(name: str):
    """A top-level literal constant of the notebook (e.g. BOUND_AT, ISA), read from its source."""
    for node in ast.parse(source(STEM).replace("{{SETUP}}", "pass")).body:
        if isinstance(node, ast.Assign):
            target = node.targets[0]
            names = [t.id for t in getattr(target, "elts", [target]) if isinstance(t, ast.Name)]
            if name in names:
                value = node.value.elts[names.index(name)] if isinstance(target, ast.Tuple) else node.value
                return ast.literal_eval(value)
    raise AssertionError(f"{STEM} defines no constant {name}")


@pytest.fixture(scope="module")
def rk(tmp_path_factory):
    return import_module(STEM, "roofline_kernels", tmp_path_factory.mktemp("rk"))


@pytest.fixture(scope="module")
def nb(rk):
    """The notebook's analysis functions, with the globals its cells give them."""
    return functions(STEM, "combine", "kernel_model", "place", "roof_table", "fmt", "taken_apart", "by_operation",
                     "instructions", "unlike_its_roof", "beside_top", np=np, pd=pd, stats=stats, rk=rk, TIME=TIME, DRAM_BYTES=DRAM_BYTES, CLOCK=CLOCK,
                     SM_PCT=SM_PCT, DRAM_PCT=DRAM_PCT, METRICS=METRICS, ISA=constant("ISA"),
                     **{k: constant(k) for k in ("BOUND_AT", "NEAR", "RIDGE", "RUN_TO_RUN_PCT")})


def kept(run: str = "run1"):
    """(call, table, placed): a run's kept table of sections 2 and 3, and the notebook's analysis of it."""
    call, table = fixture(f"{STEM}--limits", run)
    return call, table


# --- the rules the cells keep -------------------------------------------------------------------

def test_every_kernel_is_written_once_in_the_module_the_ncu_command_line_runs(rk):
    text = source(STEM)
    assert "SEED_SCRIPT" not in text and "TRANSFORMER_SCRIPT" not in text and "textwrap.dedent" not in text
    assert module_source(STEM, "roofline_kernels").rstrip().endswith("ncu_cli.replay(globals())")
    assert re.search(r'ncu_cli\.nsight_table\("roofline_kernels\.py", rk\.limits,', flat(text))
    assert callable(rk.limits) and callable(rk.roofs)


def test_one_visible_if_picks_the_tool_and_both_branches_get_the_same_settings():
    cells = re.split(r"^# %%", source(STEM), flags=re.M)
    measuring = [c for c in cells if "ncu_cli.nsight_table(" in c]
    assert len(measuring) == 1 and measuring[0].count('if ENV.backend == "ncu":') == 1
    cell = flat(measuring[0])
    assert "nsight.analyze.kernel(configs=[CONFIG], **SETTINGS)(rk.limits)" in cell
    assert "configs=[CONFIG], **SETTINGS)" in cell
    assert cell.count('nt.rules(source, cache_control="all", clock_control="none")') == 1  # what nsight_table runs


def test_every_decorator_is_visible_silent_and_without_thermal_pauses():
    text = flat(source(STEM))
    assert re.search(r'nsight\.analyze\.kernel\(runs=10, combine_kernel_metrics=lambda x, y: x \+ y, '
                     r'thermal_mode="off", verbosity=SILENT\)', text)
    settings = re.search(r"SETTINGS = dict\((.*?)\)\s+if ENV", text).group(1)
    assert 'thermal_mode="off"' in settings and "verbosity=SILENT" in settings and "combine_kernel_metrics=combine" in settings
    assert "metrics=METRICS" in settings


def code_cells() -> list[str]:
    parts = re.split(r"^# %%", source(STEM), flags=re.M)[1:]
    return [p.split("\n", 1)[1] for p in parts if not p.startswith(" [markdown]")]


def test_precision_comes_from_the_inputs_and_kernel_names_only_name_the_instructions():
    # Names vary by library and version: the code takes each row's precision from kernel_model (the inputs'
    # dtypes and the flag); it reads names only in `instructions`.
    code = "\n".join(code_cells())
    assert not re.search(r"f32f32|sgemm|short_kernel_name|hsh_|tst_", code)
    assert '"roof": [model[n][2] for n in names]' in code  # place: each row's roof is the one kernel_model gives it


def test_the_prose_no_longer_says_kernel_names_carry_no_precision():
    text = source(STEM)
    assert "no template arguments, so no precision" not in text and "never reads precision from a name" not in text
    assert "f32f32" in text and "wgmma_f16" in text  # the names that do carry it, named in the prose


def test_the_reader_is_told_each_colab_notebook_sets_itself_up():
    text = source(STEM)
    assert "after notebook 01" not in text and "fresh runtime" in text


def test_the_sources_of_the_three_kernels_and_the_table_are_named_not_seeds():
    text = source(STEM).lower()
    assert "seed" not in text
    assert "the tutorial this series grew from" in text and "the nsight guide this series follows" in text


def test_limits_takes_the_configuration_the_formula_counts(nb, rk):
    assert list(inspect.signature(rk.limits).parameters) == list(inspect.signature(nb.kernel_model).parameters)[:9]


def test_measure_runs_each_operation_once_unmeasured_then_once_per_run(rk):
    from nsight.annotation import clear_active_annotations

    calls = []
    for _ in range(3):  # three runs, as ncu_cli.replay makes them
        clear_active_annotations()
        rk.measure({"probe op": lambda: calls.append(1)})
    assert len(calls) == 4


# --- the kernels module on the CPU: annotations as nsight-python would see them -------------------

@pytest.fixture
def on_cpu(rk, monkeypatch):
    """rk's functions on the CPU: tensors on the CPU, each annotation recorded with the aten ops inside it."""
    randn, empty = torch.randn, torch.empty
    monkeypatch.setattr(torch, "randn", lambda *shape, device=None, **kw: randn(*shape, **kw))
    monkeypatch.setattr(torch, "empty", lambda *shape, device=None, **kw: empty(*shape, **kw))
    opened = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            opened.append(self.name)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(rk, "annotate", Recorder)
    monkeypatch.setattr(rk, "CALLS", __import__("itertools").count())
    return opened


def test_the_matmuls_of_section_1_run_in_an_order_that_rotates_from_run_to_run(rk, on_cpu):
    orders = []
    for _ in range(6):
        on_cpu.clear()
        rk.roofs(64, 16, 1024, "bf16,fp16,fp32")
        orders.append([name.split()[0] for name in on_cpu if name.endswith(" matmul")])
    assert orders == [["bf16", "fp16", "fp32"], ["fp16", "fp32", "bf16"], ["fp32", "bf16", "fp16"]] * 2
    for p in ("bf16", "fp16", "fp32"):  # each precision first, in the middle and last equally often: none always first
        assert [order.index(p) for order in orders].count(0) == 2 and len({order.index(p) for order in orders}) == 3
    assert on_cpu[:5] == ["y = x * 2", rk.CLEAN, "x.sum()", "y = x + w", "y = addcmul(x, w, v)"]


def test_each_op_puts_every_operation_of_the_math_path_in_an_annotation_of_its_own(rk, on_cpu):
    q = torch.randn(1, 2, 16, 8, dtype=torch.bfloat16)
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    try:
        for keep in (False, True):
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(keep)
            on_cpu.clear()
            with rk.EachOp("math"):
                rk.attention(q, q, q, "MATH")
            views = ("view", "expand", "transpose", "_unsafe_view")  # launch no kernel: their annotations stay empty
            ops = [name.split(" ", 2)[2] for name in on_cpu if name.split()[-1] not in views]
            if keep:
                assert ops == ["mul", "mul", "bmm", "_safe_softmax", "bmm"]
            else:
                assert ops == ["_to_copy"] * 3 + ["mul", "mul", "bmm", "_safe_softmax", "_to_copy", "bmm", "_to_copy"]
            assert all(re.fullmatch(r"math: \d\d \w+", name) for name in on_cpu) and len(set(on_cpu)) == len(on_cpu)
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


def test_each_op_keeps_nsight_pythons_annotation_rules_one_at_a_time_and_unique_names(rk):
    from nsight.annotation import _is_in_annotation, clear_active_annotations

    q = torch.randn(1, 2, 16, 8)
    for _ in range(2):  # two runs, as nsight-python makes them: the same names again after the reset
        clear_active_annotations()
        with sdpa_kernel(SDPBackend.MATH), rk.EachOp("math"):  # nsight's own annotate: nesting or a repeat would raise
            out = F.scaled_dot_product_attention(q, q, q)
        assert not _is_in_annotation()
    assert torch.allclose(out, F.scaled_dot_product_attention(q, q, q), atol=1e-6)


def test_limits_measures_both_math_paths_whole_and_op_by_op(rk, on_cpu, monkeypatch):
    monkeypatch.setattr(rk, "WARM", set())
    rk.limits(8, 64, 2, 1, 2, 16, 8, "bf16", "none")
    names = list(dict.fromkeys(on_cpu))
    for region in (rk.MATH_FP32, rk.MATH_HALF):
        assert region in names and any(n.startswith(region + ": ") and n.endswith(" bmm") for n in names)
    assert rk.DEFAULT in names and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()


# --- the analysis on the Nsight-Compute-shaped table --------------------------------------------

def test_the_kept_table_has_the_nsight_compute_backends_shape_for_limits(rk):
    call, table = kept()
    assert call["function"] == "limits" and call["metrics"] == METRICS
    assert list(table.columns[2:11]) == list(inspect.signature(rk.limits).parameters)
    assert {"AvgValue", "StdDev", "NumRuns", "Kernel", "CI95_Lower"} <= set(table.columns)
    assert table.groupby("Annotation").Metric.nunique().eq(len(METRICS)).all()


def test_the_kept_roofs_table_is_section_1s():
    call, table = fixture(f"{STEM}--roofs")
    assert call["function"] == "roofs" and call["runs"] == 10 and set(table.Metric) == {TIME}
    assert {"y = x * 2", "x.sum()", "fp16 matmul", "fp32 matmul"} <= set(table.Annotation)


def test_every_annotation_is_placed_against_the_roof_of_its_own_precision(nb, rk):
    call, table = kept()
    placed = nb.place(table, nb.kernel_model(*call["configs"][0]), H200_ROOFS)
    half = call["configs"][0][7]
    assert set(placed.index) == {n for n in table.Annotation if ": " not in n}  # op-by-op rows are section 3's detail
    expected = {"fp16 matmul": "fp16", "x * 2": "fp32", "softmax [rows x 1024]": "fp32", "QKV projection": half,
                "attention softmax": "fp32", rk.MATH_FP32: "fp32", rk.MATH_HALF: half}
    assert {name: placed.loc[name, "roof"] for name in expected} == expected
    assert (placed.loc[[n for n in placed.index if n not in expected], "roof"] == half).all()  # flash, default


def test_percent_of_roof_and_percent_at_its_clock_follow_from_the_kept_table(nb):
    call, table = kept()
    model, placed = nb.kernel_model(*call["configs"][0]), None
    placed = nb.place(table, model, H200_ROOFS)
    mean = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue")
    for name, r in placed.iterrows():
        flops, _, roof = model[name][:3]
        t, moved, hz = mean.loc[name, TIME] * 1e-9, mean.loc[name, DRAM_BYTES], mean.loc[name, CLOCK]
        allowed = max(flops / (H200_ROOFS[roof] * 1e12), moved / (H200_ROOFS["memory"] * 1e9))
        if len(model[name]) > 3:  # a region run op by op: each operation bound on its own, the times summed
            ops = [n for n in mean.index if n.startswith(name + ": ")]
            gemm = 2 * call["configs"][0][3] * call["configs"][0][4] * call["configs"][0][5] ** 2 * call["configs"][0][6]
            op_flops = [gemm if n.endswith(" bmm") else flops - 2 * gemm if n.endswith(" _safe_softmax") else 0 for n in ops]
            op_roofs = [H200_ROOFS[roof] if n.endswith(" bmm") else H200_ROOFS["fp32"] for n in ops]
            allowed = sum(max(f / (p * 1e12), mean.loc[n, DRAM_BYTES] / (H200_ROOFS["memory"] * 1e9))
                          for n, f, p in zip(ops, op_flops, op_roofs))
            assert r.against == "its ops' roofs" and r.verdict.startswith(("bound op by op", "neither (op by op)"))
        assert r["% of roof"] == pytest.approx(100 * allowed / t)
        assert r["AI measured"] == pytest.approx(flops / moved) and r.MHz == pytest.approx(hz / 1e6)
        if r.side == "compute":
            per_clock = H200_ROOFS["apart"][roof][0]
            assert r["% at its clock"] == pytest.approx(100 * flops / t / (132 * per_clock * hz))
            assert r["% of datasheet"] == pytest.approx(100 * flops / t / (H200_ROOFS["datasheet"][roof] * 1e12))
        else:
            assert np.isnan(r["% at its clock"]) and r.against in ("the memory slope", "its ops' roofs")


def test_the_op_by_op_rows_add_up_to_their_region(nb, rk):
    call, table = kept()
    placed = nb.place(table, nb.kernel_model(*call["configs"][0]), H200_ROOFS)
    b, h, s = call["configs"][0][3:6]
    for region in (rk.MATH_FP32, rk.MATH_HALF):
        parts = nb.by_operation(table, region, b * h * s * s, nb.kernel_model(*call["configs"][0])[region][3], H200_ROOFS)
        assert "|".join(parts.kernels) == placed.loc[region, "kernel names"]
        assert parts.us.sum() == pytest.approx(placed.loc[region, "time_us"], rel=0.03)
        assert parts["% of time"].sum() == pytest.approx(100)
        assert {"bmm", "_safe_softmax"} <= {name.split()[1] for name in parts.index}


def test_verdicts_follow_from_the_side_of_the_ridge_and_the_share_of_the_roof(nb):
    call, table = kept()
    placed = nb.place(table, nb.kernel_model(*call["configs"][0]), H200_ROOFS)
    bound_at, near, ridge, varies = constant("BOUND_AT"), constant("NEAR"), constant("RIDGE"), constant("RUN_TO_RUN_PCT")
    for name, r in placed.iterrows():
        side = "compute" if r["AI measured"] > r.ridge else "memory"
        split = r.against == "its ops' roofs"
        on = not split and abs(np.log(r["AI measured"] / r.ridge)) < np.log(ridge)
        where = "op by op" if split else "on the ridge" if on else f"{side} side"
        bound = f"bound {where}" if split or on else f"{side}-bound"
        pct = r["% of roof"]
        assert r.verdict == (f"{bound}, at the roof (within run-to-run variation)" if pct >= 100 - varies else bound
                             if pct >= bound_at + varies else f"at {bound_at} % (within run-to-run variation): bound or "
                             f"neither, {where}" if pct > bound_at - varies else f"neither ({where})")
        sm, dram = r["SM %"], r["DRAM %"]
        assert r.counters == ("neither" if max(sm, dram) < bound_at else "tie" if abs(sm - dram) < near
                              else "SM" if sm > dram else "DRAM")


def test_the_time_interval_is_students_t_for_few_runs(nb):
    call, table = kept()
    placed = nb.place(table, nb.kernel_model(*call["configs"][0]), H200_ROOFS)
    t = table[(table.Annotation == "x * 2") & (table.Metric == TIME)].iloc[0]
    n = t.NumRuns  # the kept table's run count
    assert placed.loc["x * 2", "± us"] == pytest.approx(stats.t.ppf(0.975, n - 1) * t.StdDev / np.sqrt(n) / 1e3)


def test_combine_adds_times_and_bytes_and_weights_percentages_and_the_clock_by_time(nb):
    kernels = [np.array([100.0, 90.0, 10.0, 1e6, 1.9e9]), np.array([300.0, 30.0, 80.0, 5e6, 1.5e9]),
               np.array([600.0, 50.0, 60.0, 2e6, 1.7e9])]
    acc = functools.reduce(nb.combine, kernels)  # nsight-python folds pairwise, left to right
    t = sum(k[0] for k in kernels)
    assert acc[0] == t and acc[3] == 8e6
    assert np.allclose(acc[[1, 2, 4]], sum(k[[1, 2, 4]] * k[0] for k in kernels) / t)
    assert nb.combine.__code__.co_argcount == 2  # what nsight-python's extraction asserts


def test_combine_runs_inside_nsight_pythons_own_extraction(nb, rk):
    from nsight import extraction, transformation, utils
    from nsight.utils import VerbosityLevel

    config = (64, 1024, 8, 1, 2, 64, 32, "bf16", "FLASH_ATTENTION")
    data = {"math": [utils.ActionData(name=f"k{i}", values=np.array([t, pct, pct, 1e3 * t, hz]), compute_clock=1,
                                      memory_clock=1, gpu="g", units=["ns", "%", "%", "byte", "hz"])
                     for _ in range(2) for i, (t, pct, hz) in enumerate(((100.0, 20.0, 1.2e9), (300.0, 60.0, 1.6e9)))]}
    raw = extraction.extract_df_from_data(data, METRICS, [config], 2, rk.limits, None, VerbosityLevel.SILENT, nb.combine)
    table = transformation.aggregate_data(raw, rk.limits, None, VerbosityLevel.SILENT).set_index("Metric")
    assert table.loc[TIME, "AvgValue"] == 400.0 and table.loc[DRAM_BYTES, "AvgValue"] == 4e5
    assert table.loc[SM_PCT, "AvgValue"] == pytest.approx(50.0) and table.loc[CLOCK, "AvgValue"] == pytest.approx(1.5e9)
    assert table.loc[TIME, "Kernel"] == "k0|k1"


def test_roof_table_turns_durations_into_bandwidth_and_flop_rates(nb, rk):
    stream_bytes, m = 2**30, 8192
    rows = [{"Annotation": name, "Metric": TIME, "AvgValue": 1e6, "StdDev": 1e4, "MinValue": 0.98e6, "NumRuns": 10}
            for name in rk.STREAMS] + [{"Annotation": "bf16 matmul", "Metric": TIME, "AvgValue": 2e6, "StdDev": 0.0,
                                        "MinValue": 2e6, "NumRuns": 10}]
    sheet = SimpleNamespace(mem_bandwidth_gbs=SimpleNamespace(value=4800.0),
                            peak_tflops=lambda p: SimpleNamespace(value={"bf16": 989.4}[p]))
    t = nb.roof_table(pd.DataFrame(rows), stream_bytes, m, sheet)
    assert t.loc["y = addcmul(x, w, v)", "mean"] == pytest.approx(4 * stream_bytes / 1e6)  # bytes per ns = GB/s
    assert t.loc["x.sum()", "mean"] == pytest.approx(stream_bytes / 1e6)
    assert t.loc["bf16 matmul", "mean"] == pytest.approx(2 * m**3 / 2e6 / 1e3)  # FLOP per ns / 1e3 = TFLOP/s
    half = stats.t.ppf(0.975, 9) * 1e4 / np.sqrt(10)
    assert t.loc["x.sum()", "CI95 low"] == pytest.approx(stream_bytes / (1e6 + half))
    assert t.loc["bf16 matmul", "% of datasheet"] == pytest.approx(100 * t.loc["bf16 matmul", "mean"] / 989.4)
    assert set(t.unit) == {"GB/s", "TFLOP/s"}


@pytest.mark.parametrize("gpu, precision, expected", [
    ("NVIDIA H200", "fp16", (4096, 1830)),  # NVIDIA quotes Hopper's tensor peaks at 1,830 MHz, below its 1,980
    ("NVIDIA H200", "fp32", (256, 1983)),  # ... and its fp32 peak at the highest clock (67 is rounded up)
    ("Tesla T4", "fp16", (1024, 1587)),
    ("Tesla T4", "fp32", (128, 1582)),
    ("NVIDIA A100-SXM4-40GB", "bf16", (2048, 1411)),
])
def test_taken_apart_finds_the_flop_per_clock_and_the_clock_a_datasheet_peak_assumes(nb, gpu, precision, expected):
    from nspy_tutorial import gpu_facts

    sms, top = {"NVIDIA H200": (132, 1980), "Tesla T4": (40, 1590), "NVIDIA A100-SXM4-40GB": (108, 1410)}[gpu]
    per_clock, mhz = nb.taken_apart(gpu_facts.datasheet_for(gpu).peak_tflops(precision).value, sms, top)
    assert (per_clock, round(mhz)) == expected


@pytest.mark.parametrize("tflops, mhz, says", [
    (989.4, 1830.0, "the highest clock: 1,980 MHz"),  # at or below the highest: nothing to explain
    (67.0, 1982.8, "0.14 % above the highest clock, 1,980 MHz: the datasheet's 67 is rounded, by up to 0.75 %"),  # H200
    (989.4, 1982.8, "0.14 % above the highest clock, 1,980 MHz: more than its rounding explains"),  # 989.4: rounded by at most 0.005 %
    (70.0, 2071.6, "4.63 % above the highest clock, 1,980 MHz: more than its rounding explains"),
])
def test_a_clock_above_the_highest_is_named_and_put_beside_the_datasheets_rounding(nb, tflops, mhz, says):
    assert nb.beside_top(tflops, mhz, 1980) == says


def test_a_kernel_whose_names_differ_from_its_roofs_matmul_is_said_to_be_so_and_only_then(nb):
    """FlashAttention-2 (sm80 mma.sync) against a bf16 roof a Hopper GEMM set: 'neither' may be its instructions'
    ceiling. Read from the names in the reader's tables, so a T4 (no wgmma, other names) gets its own words."""
    h200 = {"kernels": {"bf16 matmul": "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
                        "fp32 matmul": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_ffma_aligna4"}}
    t4 = {"kernels": {"fp16 matmul": "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn"}}

    def row(kernels, roof, against):
        return pd.Series({"instructions": nb.instructions(kernels), "roof": roof, "against": against})
    flash = nb.unlike_its_roof(row("flash_fwd_kernel", "bf16", "its bf16 roof"), h200)
    assert flash == " (its names say flash_fwd, its roof matmul's say sm90: other instructions can have a lower ceiling)"
    assert nb.unlike_its_roof(row("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "bf16", "its bf16 roof"), h200) == ""
    assert nb.unlike_its_roof(row("sm90_fmha_wgmma_bf16_kernel", "bf16", "its bf16 roof"), h200) == ""  # sm90 and more
    assert nb.unlike_its_roof(row("flash_fwd_kernel", "bf16", "the memory slope"), h200) == ""  # no GEMM roof: no note
    assert nb.unlike_its_roof(row("flash_fwd_kernel", "bf16", "its ops' roofs"), h200) == ""  # op by op: each op's roof
    assert nb.unlike_its_roof(row("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "fp16", "its fp16 roof"), t4) == ""
    t4_fused = nb.unlike_its_roof(row("fmha_cutlassF_f16_aligned_64x64_rf_sm75", "fp16", "its fp16 roof"), t4)
    assert "say sm75, its roof matmul's say turing, s1688" in t4_fused and "sm90" not in t4_fused
    assert "not in the names" in nb.unlike_its_roof(row("flash_fwd_kernel", "fp16", "its fp16 roof"), h200)  # no fp16 roof


@pytest.mark.parametrize("kernels, expected", [
    ("flash_fwd_kernel", "flash_fwd"),  # PyTorch's flash backend: FlashAttention-2 (the text says what it is)
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT|softmax_warp_forward", "sm90"),  # no instruction in the name
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     "sm90, wgmma"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute",
     "sm80, ffma"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "ampere, s16816"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "turing, s1688"),  # a T4: nothing of Hopper's
    ("vectorized_elementwise_kernel|softmax_warp_forward", "not in the names"),
])
def test_instructions_are_read_from_the_kernel_names_where_they_say_it(nb, kernels, expected):
    assert nb.instructions(kernels) == expected


# --- the hand counts, against what PyTorch's eager ops read and write ----------------------------

VIEWS = {"aten.view.default", "aten.expand.default", "aten.transpose.int", "aten._unsafe_view.default", "aten.t.default"}


class Traffic(TorchDispatchMode):
    """Per aten op that moves data: its name, and (dtype, shape, bytes) of each tensor it reads and of its output.

    PyTorch's ``_safe_softmax`` is recorded as the operations its C++ runs (aten/src/ATen/native/SoftMax.cpp):
    softmax, ``eq(-inf)``, ``all`` over the row, and ``where`` with a scalar zero."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def record(self, name, inputs, out):
        def about(t):
            return t.dtype, tuple(t.shape), t.numel() * t.element_size()
        self.ops.append((name, [about(a) for a in inputs if isinstance(a, torch.Tensor)], about(out)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) == "aten._safe_softmax.default":
            x, dim = args[0], args[1]
            out = torch.softmax(x, dim)
            masked = x.eq(float("-inf"))
            rows = masked.all(dim, keepdim=True)
            zero = torch.zeros((), dtype=out.dtype)
            result = torch.where(rows, zero, out)
            for name, inputs, made in (("softmax", [x], out), ("eq", [x], masked), ("all", [masked], rows),
                                       ("where", [rows, zero, out], result)):
                self.record(name, inputs, made)
            return result
        out = func(*args, **(kwargs or {}))
        if str(func) not in VIEWS:
            self.record(str(func), args, out)
        return out

    def bytes(self, shapes=None) -> int:
        """Bytes read and written, of tensors of the given shapes (default: all)."""
        return sum(size for _, inputs, out in self.ops for _, shape, size in [*inputs, out]
                   if shapes is None or shape in shapes)


def moved(traffic: Traffic) -> int:
    return traffic.bytes()


def test_the_three_kernels_move_what_the_formula_counts(nb):
    n_mm, n_vec, rows = 64, 4096, 32
    model = nb.kernel_model(n_mm, n_vec, rows, 1, 1, 8, 8, "bf16", "FLASH_ATTENTION")
    a, x, m = torch.randn(n_mm, n_mm, dtype=torch.float16), torch.randn(n_vec), torch.randn(rows, 1024)
    for name, op in (("fp16 matmul", lambda: a @ a), ("x * 2", lambda: x * 2.0),
                     ("softmax [rows x 1024]", lambda: torch.softmax(m, dim=-1))):
        with Traffic() as traffic:
            op()
        assert len(traffic.ops) == 1 and moved(traffic) == model[name][1], name
    assert model["fp16 matmul"][0] == 2 * n_mm**3 and model["x * 2"][0] == n_vec


def test_the_qkv_projection_and_attention_softmax_move_what_the_formula_counts(nb):
    b, h, s, dh = 2, 4, 64, 16
    model = nb.kernel_model(64, 1024, 8, b, h, s, dh, "bf16", "FLASH_ATTENTION")
    x, w = torch.randn(b * s, h * dh, dtype=torch.bfloat16), torch.randn(h * dh, 3 * h * dh, dtype=torch.bfloat16)
    scores = torch.randn(b, h, s, s, dtype=torch.bfloat16)
    with Traffic() as qkv:
        x @ w
    with Traffic() as soft:
        torch.softmax(scores, dim=-1)
    assert moved(qkv) == model["QKV projection"][1] and moved(soft) == model["attention softmax"][1]
    assert model["QKV projection"][0] == 2 * (b * s) * (h * dh) * (3 * h * dh)


@pytest.mark.parametrize("keep_half", [False, True])
def test_the_math_path_formula_counts_the_operations_pytorch_runs_safe_softmax_included(nb, rk, keep_half):
    b, h, s, dh = 2, 4, 64, 16
    model = nb.kernel_model(64, 1024, 8, b, h, s, dh, "bf16", "FLASH_ATTENTION")
    q, k, v = (torch.randn(b, h, s, dh, dtype=torch.bfloat16) for _ in range(3))
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(keep_half)
    try:
        with Traffic() as traffic, sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, v)
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)
    gemms = [[dtype for dtype, *_ in inputs] for name, inputs, _ in traffic.ops if name == "aten.bmm.default"]
    flops, formula, roof, by_op = model[rk.MATH_HALF if keep_half else rk.MATH_FP32]
    assert gemms == [[torch.bfloat16] * 2] * 2 if keep_half else gemms == [[torch.float32] * 2] * 2
    assert roof == ("bf16" if keep_half else "fp32")
    assert [name for name, *_ in traffic.ops].count("where") == 1  # the safe softmax's extra passes are counted
    # exactly what the formula counts, but for the per-row flags of `all` (written, then read by `where`) and a scalar
    assert 0 <= moved(traffic) - formula <= 2 * b * h * s + 4
    four_passes = (2 if keep_half else 4) * 4 * b * h * s * s  # write, read, write, read: the least an unfused path moves
    assert traffic.bytes({(b * h, s, s), (b, h, s, s)}) > four_passes
    assert flops == 2 * 2 * b * h * s * s * dh + 5 * b * h * s * s
    ops = [name.split(".")[1] for name, *_ in traffic.ops if name.startswith("aten.")]  # the FLOPs op by op add up
    assert flops == sum(by_op.get(op, (0,))[0] for op in ops + ["_safe_softmax"]) and by_op["bmm"][1] == roof


def test_a_fused_attention_needs_only_q_k_v_and_the_output(nb, rk):
    b, h, s, dh = 2, 4, 64, 16
    n, sc = b * h * s * dh, b * h * s * s
    model = nb.kernel_model(64, 1024, 8, b, h, s, dh, "bf16", "FLASH_ATTENTION")
    assert model["attention, flash"][1] == model[rk.DEFAULT][1] == 2 * 4 * n
    assert model[rk.MATH_HALF][1] - model["attention, flash"][1] == 2 * 4 * n + 16 * sc  # 7e + 2 bytes per score
    assert model[rk.MATH_FP32][1] - model["attention, flash"][1] == 48 * n + 36 * sc  # 34 + e bytes per score


# --- every section's cells, run on tables as the GPU would hand them ----------------------------

def roofs_table(rk, bf16_over_fp16: float = 1.04) -> pd.DataFrame:
    """Section 1's table as nsight-python returns it (durations only), H200-like, streams of 960 MiB."""
    times = {"x.sum()": 251e3, "y = x * 2": 468e3, rk.CLEAN: 462e3, "y = x + w": 686e3, "y = addcmul(x, w, v)": 905e3,
             "fp16 matmul": 1.415e6, "bf16 matmul": 1.415e6 / bf16_over_fp16, "fp32 matmul": 18.96e6}
    kernels = {"fp16 matmul": "nvjet_sm90_hsh_320x128_64x3_1x2_h_bz_coopB_NNT",  # as the H200 run named them
               "bf16 matmul": "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
               "fp32 matmul": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4"}
    return pd.DataFrame([{"Annotation": name, "Metric": TIME, "AvgValue": t, "StdDev": 0.005 * t, "MinValue": 0.99 * t,
                          "MaxValue": 1.01 * t, "NumRuns": 10, "Kernel": kernels.get(name, "vectorized_elementwise_kernel"),
                          "Unit": "ns"} for name, t in times.items()])


# Sections 2 and 3 on an H200, as one strict run measured them (time us, SM %, DRAM %, DRAM MB, MHz, kernels)
H200_LIMITS = {
    "fp16 matmul": (178, 90.4, 12.7, 108.4, 1600, "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"),
    "x * 2": (468, 6.5, 88.3, 1988.8, 1950, "vectorized_elementwise_kernel"),
    "softmax [rows x 1024]": (484, 59.2, 85.3, 1987.2, 1950, "softmax_warp_forward"),
    "QKV projection": (263, 88.7, 17.3, 218.7, 1600, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
    "attention softmax": (570, 54.7, 38.4, 1054.0, 1950, "softmax_warp_forward"),
    "attention, math (upcast to fp32)": (5350, 66.3, 40.2, 10349.9, 1900, "|".join(
        ["unrolled_elementwise_kernel"] * 3 + ["vectorized_elementwise_kernel"] * 2
        + ["sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute",
           "softmax_warp_forward", "vectorized_elementwise_kernel", "reduce_kernel", "vectorized_elementwise_kernel",
           "elementwise_kernel", "vectorized_elementwise_kernel",
           "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute",
           "vectorized_elementwise_kernel"])),
    "attention, math (kept in 16 bit)": (2005, 55.4, 46.0, 4437.8, 1900, "|".join(
        ["vectorized_elementwise_kernel"] * 2 + ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "softmax_warp_forward",
                                                 "vectorized_elementwise_kernel", "reduce_kernel",
                                                 "vectorized_elementwise_kernel", "elementwise_kernel",
                                                 "nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNN"])),
    "attention, flash": (405, 53.5, 6.7, 130.7, 1900, "flash_fwd_kernel"),
    "attention, PyTorch's default": (216, 70.1, 12.0, 124.9, 1900,
                                     "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128"),
}
# How the op-by-op run splits each math region: (op, how many of the region's kernels, share of its time and bytes)
H200_OPS = {"attention, math (upcast to fp32)": [("01 _to_copy", 1, .04), ("02 _to_copy", 1, .04), ("03 _to_copy", 1, .04),
                                                 ("04 mul", 1, .03), ("06 mul", 1, .03), ("11 bmm", 1, .2),
                                                 ("13 _safe_softmax", 5, .4), ("14 _to_copy", 1, .06),
                                                 ("19 bmm", 1, .15), ("21 _to_copy", 1, .01)],
            "attention, math (kept in 16 bit)": [("01 mul", 1, .03), ("03 mul", 1, .03), ("08 bmm", 1, .2),
                                                 ("10 _safe_softmax", 5, .6), ("15 bmm", 1, .14)]}


def limits_table(change: dict | None = None) -> pd.DataFrame:
    """Sections 2 and 3's table as nsight-python returns it, with the op-by-op rows; `change` sets some values,
    e.g. {("x * 2", DRAM_BYTES): 5e9}."""
    rows, change = [], change or {}

    def add(name, values, kernels):
        for metric, value in zip(METRICS, values):
            value = change.get((name, metric), value)
            rows.append({"Annotation": name, "Metric": metric, "AvgValue": value, "StdDev": 0.002 * value,
                         "NumRuns": 2, "Kernel": kernels})

    for name, (us, sm, dram, mb, mhz, kernels) in H200_LIMITS.items():
        add(name, (us * 1e3, sm, dram, mb * 1e6, mhz * 1e6), kernels)
        names = kernels.split("|")
        for op, count, share in H200_OPS.get(name, []):
            add(f"{name}: {op}", (share * us * 1e3, sm, dram, share * mb * 1e6, mhz * 1e6), "|".join(names[:count]))
            names = names[count:]
    return pd.DataFrame(rows)


H200_FACTS = dict(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=H200_L2, memory_bytes=150 * 10**9,
                  max_sm_clock_mhz=1980, max_mem_clock_mhz=3201, memory_bus_width_bits=6144)


def run_notebook(tmp_path, monkeypatch, tables: dict, backend: str = "ncu", free: int = 140 * 10**9) -> dict:
    """The notebook's own cells, sections 1 to 4 and the summary, with the profilers replaced by `tables`
    ({"roofs": ..., "limits": ...}). Returns the namespace, the section records, what was seen and printed."""
    import matplotlib
    import matplotlib.pyplot as plt
    import nsight

    import nspy_tutorial as nt
    from nspy_tutorial import gpu_facts, ncu_cli, sections

    matplotlib.use("Agg")
    monkeypatch.delenv("NSPY_TUTORIAL_STRICT", raising=False)
    monkeypatch.setattr(plt, "show", lambda: plt.savefig(tmp_path / "roofline.png"))
    rk = import_module(STEM, "roofline_kernels", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(rk, "sdpa_unavailable", lambda b, *args: None if b == "FLASH_ATTENTION" else "not probed")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (free, 141 * 10**9))
    seen = {}

    def kernel(**settings):  # nsight.analyze.kernel(...)(func)(*config).to_dataframe()
        def decorate(func):
            def run(*args):
                seen[func.__name__] = (settings, args)
                return SimpleNamespace(to_dataframe=lambda: tables[func.__name__])
            return run
        return decorate

    def nsight_table(script, func, **settings):
        seen["ncu-cli"] = (script, func, settings)
        return tables[func.__name__]

    monkeypatch.setattr(nsight.analyze, "kernel", kernel)
    monkeypatch.setattr(ncu_cli, "nsight_table", nsight_table)
    env = SimpleNamespace(facts=gpu_facts.DeviceFacts(**H200_FACTS), datasheet=gpu_facts.datasheet_for("NVIDIA H200"),
                          backend=backend, ncu_path="/usr/local/cuda/bin/ncu", gpu_name="NVIDIA H200",
                          require=lambda need: None)
    namespace = {"ENV": env, "nt": nt}
    sections._RECORDS.clear()
    sections.set_notebook(STEM)
    try:
        for cell in code_cells():
            if not cell.startswith('"""Notebook 06'):  # the writefile module: imported above
                exec(compile(cell.replace("{{SETUP}}", ""), STEM, "exec"), namespace)
        records = {r.section.split(".")[0]: r for r in sections.records()}
    finally:
        sections._RECORDS.clear()
    return {"ns": namespace, "records": records, "seen": seen}


def statuses(result) -> dict:
    return {k: r.status for k, r in result["records"].items()}


@pytest.mark.parametrize("backend", ["ncu", "cupti"])
def test_every_section_runs_to_ok_through_either_branch(tmp_path, monkeypatch, capsys, backend, rk):
    """The Nsight Compute backend's branch (every Colab reader's) and the ncu command line's (an older ncu)."""
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table()}, backend)
    assert statuses(result) == {"1": "OK", "2": "OK", "3": "OK", "4": "OK"}, result["records"]
    ns, seen = result["ns"], result["seen"]
    if backend == "ncu":
        settings, _ = seen["limits"]
        assert settings["configs"] == [ns["CONFIG"]] and "ncu-cli" not in seen
    else:
        script, func, settings = seen["ncu-cli"]
        assert script == "roofline_kernels.py" and func.__name__ == "limits" and settings["configs"] == [ns["CONFIG"]]
    assert settings["metrics"] == METRICS and settings["runs"] == 2
    records = result["records"]
    assert "fp16 matmul: compute-bound" in records["2"].result and "% at the 1,600 MHz it ran" in records["2"].result
    assert "x * 2: memory-bound, 96 % of the memory slope" in records["2"].result
    assert "neither" in records["3"].result
    assert (tmp_path / "roofline.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "clocks free to boost (clock_control='none')" in out.split("2. Limited by what?")[1]  # nsight_table's rules
    assert "the clock each kernel ran at is not measured here" in out  # section 1: durations only
    assert "datasheet fp16: 989.4 TFLOP/s = 132 SMs x 4,096 FLOP per clock x 1,830 MHz (the highest clock: 1,980 MHz)" in out
    assert ("datasheet fp32: 67 TFLOP/s = 132 SMs x 256 FLOP per clock x 1,983 MHz (0.14 % above the highest clock, "
            "1,980 MHz: the datasheet's 67 is rounded, by up to 0.75 %)") in out
    assert ("attention, flash: neither (compute side) at 42 % of its bf16 roof (its names say flash_fwd, its roof matmul's "
            "say sm90: other instructions can have a lower ceiling), 405 us") in records["3"].result
    assert re.search(r"QKV projection: [^;]* roof, 263 us", records["3"].result)  # the roof's own GEMM: no note
    assert "nan" not in out.split("4. The roofline plot")[1] and "x * 2: below the hardware's peaks (memory side: " in out
    assert "fusion alone (and flash_fwd for sm90)" in out  # FlashAttention-2 against GEMMs whose names say sm90
    assert "wgmma" not in out.split("3. Transformer")[1].split("op by op:")[0].split("PyTorch's default")[0]  # not named
    assert re.search(r"attention, math \(kept in 16 bit\), op by op \(kernel by kernel[^\n]*\n.*\n.*\n01 mul", out)


def test_the_sizes_print_the_real_ratio_to_the_l2_when_free_memory_caps_them(tmp_path, monkeypatch, capsys, rk):
    free = int(15.2 * H200_L2 * 16)  # a GPU with less memory free: the streams get 1/16 of it
    run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table()}, free=free)
    assert "(15.2x L2)" in capsys.readouterr().out


def failed(result, section: str) -> str:
    record = result["records"][section]
    assert record.status == "FAILED", (section, record)
    return record.reason


def test_a_stream_faster_than_the_clock_derived_dram_peak_fails_section_1(tmp_path, monkeypatch, rk):
    roofs = roofs_table(rk)
    roofs.loc[roofs.Annotation == "y = x * 2", "AvgValue"] = 380e3  # 2 x 960 MiB in 380 us: 5,300 GB/s > 4,917
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs, "limits": limits_table()})
    assert "every mean stays at or below the hardware's peak" in failed(result, "1")


def test_fp16_and_bf16_roofs_far_apart_fail_the_one_rate_claim(tmp_path, monkeypatch, rk):
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk, 1.15), "limits": limits_table()})
    assert "fp16 and bf16 (one datasheet rate) reach roofs within 10 %" in failed(result, "1")


def test_measured_bytes_far_above_the_formula_fail_the_byte_check(tmp_path, monkeypatch, rk):
    # what the old four-pass formula let through: 2.3x its count
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table(
        {("attention softmax", DRAM_BYTES): 2.3 * 1073.7e6})})
    assert "attention softmax: measured bytes within one L2 per kernel below the formula, 1.5x above" in failed(result, "3")


def test_a_gemm_that_re_reads_its_operands_is_held_to_the_lower_side_only(tmp_path, monkeypatch, rk):
    # a small L2 makes cuBLAS read its operands again and again: 3x the formula is a GEMM's, not a wrong count
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table(
        {("QKV projection", DRAM_BYTES): 3 * 159.4e6})})
    assert statuses(result)["3"] == "OK"


def test_measured_bytes_more_than_one_l2_per_kernel_below_the_formula_fail_the_byte_check(tmp_path, monkeypatch, rk):
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table(
        {("x * 2", DRAM_BYTES): 2013.3e6 - 1.5 * H200_L2})})
    assert "x * 2: measured bytes" in failed(result, "3")


def test_a_kernel_near_its_ridge_on_the_other_side_than_the_formula_fails_the_side_check(tmp_path, monkeypatch, rk):
    # the fp32 math path moves 10.6 GB by the formula (AI 13.1, compute side of a 13.0 ridge); measured 13 GB: memory side
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table(
        {("attention, math (upcast to fp32)", DRAM_BYTES): 13.0e9})})
    assert "near their ridge, measured intensities fall on the formula's side" in failed(result, "3")


def test_kernels_far_from_their_ridge_are_not_checked_for_their_side(nb):
    call_config = (4096, 251658240, 245760, 4, 16, 2048, 128, "bf16", "FLASH_ATTENTION")
    placed = nb.place(limits_table(), nb.kernel_model(*call_config), H200_ROOFS)
    far = np.abs(np.log(placed["AI formula"] / placed.ridge)) >= np.log(4)
    assert {"x * 2", "softmax [rows x 1024]", "fp16 matmul", "QKV projection", "attention softmax"} <= set(placed.index[far])
    section_2 = next(cell for cell in code_cells() if 'nt.section("2.' in cell)
    assert "side" not in " ".join(re.findall(r"nt\.claim\(([^,]*),", section_2))  # the three are all far from it


def test_an_intensity_within_the_ridge_band_is_on_the_ridge_not_on_a_side(nb):
    config = (4096, 251658240, 245760, 4, 16, 2048, 128, "bf16", "FLASH_ATTENTION")
    model = nb.kernel_model(*config)
    ai = model["attention softmax"][0] / 1054.0e6  # the softmax's measured intensity (limits_table: 1,054 MB)
    roofs = dict(H200_ROOFS, fp32=1e-3 * H200_ROOFS["memory"] * ai)  # a fp32 roof whose ridge is the attention softmax's AI
    placed = nb.place(limits_table(), model, roofs)
    assert placed.loc["attention softmax", "verdict"] == "neither (on the ridge)"
    assert "op by op" in placed.loc["attention, math (upcast to fp32)", "verdict"]  # a sum has no one side


def test_a_kernel_faster_than_the_peak_at_the_clock_it_ran_fails_the_hardware_check(tmp_path, monkeypatch, rk):
    # 772 TFLOP/s at a measured 1,200 MHz would be 119 % of the tensor peak at that clock: a wrong clock or a wrong count
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": limits_table(
        {("fp16 matmul", CLOCK): 1.2e9})})
    assert "fp16 matmul: below the hardware's peaks" in failed(result, "4")


def test_an_operation_given_flops_but_renamed_in_the_op_by_op_run_fails_its_check(tmp_path, monkeypatch, rk):
    table = limits_table()  # e.g. a PyTorch that dispatches the second GEMM as baddbmm: the formula's bmm FLOPs go missing
    table.Annotation = table.Annotation.replace("attention, math (kept in 16 bit): 15 bmm", "attention, math (kept in 16 bit): 15 baddbmm")
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": table})
    assert ("attention, math (kept in 16 bit): each op given FLOPs (_safe_softmax, bmm) is named as often as the formula "
            "counts it") in failed(result, "3")


def test_an_op_by_op_run_that_launched_other_kernels_fails_its_check(tmp_path, monkeypatch, rk):
    table = limits_table()
    table.loc[table.Annotation == "attention, math (kept in 16 bit): 08 bmm", "Kernel"] = "ampere_bf16_s16816gemm"
    result = run_notebook(tmp_path, monkeypatch, {"roofs": roofs_table(rk), "limits": table})
    assert "the op-by-op run launches the region's kernels, in order" in failed(result, "3")


def test_a_near_tie_of_the_counters_is_flagged_not_decided(nb):
    rows = []
    for name, (t, sm, dram, moved_, hz) in {"x * 2": (500e3, 80.0, 85.0, 2e9, 1.9e9),
                                             "fp16 matmul": (500e3, 40.0, 5.0, 1e8, 1.9e9)}.items():
        for metric, value in zip(METRICS, (t, sm, dram, moved_, hz)):
            rows.append({"Annotation": name, "Metric": metric, "AvgValue": value, "StdDev": 0.01 * value, "NumRuns": 3,
                         "Kernel": "k"})
    model = nb.kernel_model(4096, 2**28, 2**18, 1, 1, 64, 64, "bf16", "FLASH_ATTENTION")
    placed = nb.place(pd.DataFrame(rows), model, H200_ROOFS)
    assert placed.loc["x * 2", "counters"] == "tie"
    assert placed.loc["fp16 matmul", "counters"] == "neither"  # the busiest SM unit at 40 %: not near any peak
    assert placed.loc["fp16 matmul", "verdict"] == "neither (compute side)"  # 137 GFLOP in 500 us: a third of a 777 roof


# --- two separate GPU runs: the same verdicts ---------------------------------------------------

def verdicts_of(run: str, tmp_path, monkeypatch) -> dict:
    """Every verdict the notebook prints, from one run's kept tables, by the notebook's own cells."""
    call, limits = fixture(f"{STEM}--limits", run)
    _, roofs = fixture(f"{STEM}--roofs", run)
    n_vec = call["configs"][0][1]
    result = run_notebook(tmp_path / run, monkeypatch, {"roofs": roofs, "limits": limits}, free=16 * 4 * n_vec + 1)
    assert tuple(result["ns"]["CONFIG"]) == tuple(call["configs"][0])  # the sizes that run measured
    placed, ns = result["ns"]["LIMITS"], result["ns"]
    return {"sections": statuses(result), **{f"{n}: verdict": r.verdict for n, r in placed.iterrows()},
            **{f"{n}: counters": r.counters for n, r in placed.iterrows()},
            **{f"{n}: names beside its roof's": ns["unlike_its_roof"](r, ns["ROOFS"]) for n, r in ns["ops"].iterrows()}}


def test_two_separate_gpu_runs_give_the_same_verdicts_or_flag_them_as_undecided(tmp_path, monkeypatch):
    """Needs tests/fixtures/run2 (a second strict GPU run, kept by scripts/keep_fixtures.py): fails until then."""
    for run in ("run1", "run2"):
        (tmp_path / run).mkdir()
    one, two = (verdicts_of(run, tmp_path, monkeypatch) for run in ("run1", "run2"))
    assert one["sections"] == two["sections"] == {"1": "OK", "2": "OK", "3": "OK", "4": "OK"}
    assert one.keys() == two.keys()
    differ = {k: (one[k], two[k]) for k in one if k != "sections" and one[k] != two[k]}
    assert all(any(flag in a or flag in b for flag in FLAGS) for a, b in differ.values()), differ


def test_a_region_of_several_kernels_is_bound_op_by_op_and_both_kept_runs_agree(nb, rk):
    """The math paths launch GEMMs and a safe softmax: each operation is bound on its own roof, the times summed.
    Against roofs that moved as much as two sessions' roofs do, the two kept runs give the same verdicts, or flag them."""
    moved = {p: v * 1.018 for p, v in H200_ROOFS.items() if p in ("fp16", "bf16")}  # a roof ~2 % higher in another session
    verdicts = []
    for run, roofs in (("run1", H200_ROOFS), ("run2", dict(H200_ROOFS, **moved))):
        call, table = kept(run)
        placed = nb.place(table, nb.kernel_model(*call["configs"][0]), roofs)
        as_one = 100 * max(placed.loc[rk.MATH_FP32, "TFLOP/s"] / roofs["fp32"],
                           placed.loc[rk.MATH_FP32, "GB/s"] / roofs["memory"])  # the region as one point
        assert as_one < constant("BOUND_AT") < placed.loc[rk.MATH_FP32, "% of roof"]  # ~50 % as one, ~84 % op by op
        assert placed.loc[rk.MATH_FP32, "verdict"] == "bound op by op"
        assert placed.loc[rk.MATH_HALF, "verdict"] == "neither (op by op)"  # its safe softmax is far below the slope
        verdicts.append(placed.verdict)
    differ = verdicts[0][verdicts[0] != verdicts[1]]
    assert all(any(f in a or f in b for f in FLAGS) for a, b in zip(differ, verdicts[1][differ.index])), differ


def test_near_the_roof_or_the_bound_line_a_verdict_says_within_run_to_run_variation(nb):
    call, table = kept()
    model, varies, bound_at = nb.kernel_model(*call["configs"][0]), constant("RUN_TO_RUN_PCT"), constant("BOUND_AT")
    placed = nb.place(table, model, H200_ROOFS)
    t = placed.loc["fp16 matmul", "time_us"] * 1e-6
    for pct, says in ((100 - varies / 2, "at the roof (within run-to-run variation)"), (bound_at + varies / 2,
                      f"at {bound_at} % (within run-to-run variation): bound or neither"), (bound_at + 2 * varies, None)):
        roofs = dict(H200_ROOFS, fp16=model["fp16 matmul"][0] / t / (pct / 100) / 1e12)
        verdict = nb.place(table, model, roofs).loc["fp16 matmul", "verdict"]
        assert (says in verdict) if says else verdict == "compute-bound", (pct, verdict)


def test_a_kernel_well_above_its_measured_roof_is_called_above_it_not_at_it(nb):
    """A kernel faster than its measured roof by more than RUN_TO_RUN_PCT (e.g. a boost-clock GEMM against a roof measured
    throttled) is a finding the verdict names, not 'at the roof'."""
    call, table = kept()
    model, varies = nb.kernel_model(*call["configs"][0]), constant("RUN_TO_RUN_PCT")
    t = nb.place(table, model, H200_ROOFS).loc["fp16 matmul", "time_us"] * 1e-6
    roofs = dict(H200_ROOFS, fp16=model["fp16 matmul"][0] / t / ((100 + 2 * varies) / 100) / 1e12)
    verdict = nb.place(table, model, roofs).loc["fp16 matmul", "verdict"]
    assert "above its measured roof" in verdict and "at the roof" not in verdict, verdict
