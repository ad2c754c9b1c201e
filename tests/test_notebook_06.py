"""Notebook 06 (roofline) without a GPU.

* Its analysis (``place``, ``roof_table``, ``combine``) runs here on a table shaped exactly as
  nsight-python's Nsight Compute backend returns it: ``tests/fixtures/06_roofline--limits.json``,
  the one table sections 2 and 3 share, kept from a strict run on the GPU test machine
  (``NSPY_TUTORIAL_KEEP_TABLES``).
* Its hand counts (FLOPs and the bytes the formula counts) are checked against what PyTorch's
  eager ops read and write, seen through the dispatcher on CPU; so is the rule the notebook uses
  instead of kernel names to know the math attention path's precision.
* The rules its cells keep: kernels written once in ``roofline_kernels.py``, one visible ``if``
  choosing the tool, precision never read from a kernel name.
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
from notebook_code import fixture, functions, import_module, module_source, source
from scipy import stats
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

STEM = "06_roofline"
TIME, DRAM_BYTES = "gpu__time_duration.sum", "dram__bytes.sum"
SM_PCT, DRAM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"
# Roofs as section 1 measures them on an H200 (the fixture's GPU): GB/s and TFLOP/s.
H200_ROOFS = {"memory": 4450.0, "fp16": 777.0, "bf16": 807.0, "fp32": 58.0}
H200_L2 = 60 * 2**20


def constant(name: str):
    """A top-level constant of the notebook (e.g. BOUND_AT), read from its source."""
    for node in ast.parse(source(STEM).replace("{{SETUP}}", "pass")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [t.id for t in node.targets[0].elts]
            if name in names:
                return ast.literal_eval(node.value.elts[names.index(name)])
    raise AssertionError(f"{STEM} defines no constant {name}")


@pytest.fixture(scope="module")
def rk(tmp_path_factory):
    return import_module(STEM, "roofline_kernels", tmp_path_factory.mktemp("rk"))


@pytest.fixture(scope="module")
def nb(rk):
    """The notebook's analysis functions, with the globals its cells give them."""
    return functions(STEM, "combine", "kernel_model", "place", "roof_table", "fmt",
                     np=np, pd=pd, stats=stats, rk=rk, TIME=TIME, DRAM_BYTES=DRAM_BYTES, SM_PCT=SM_PCT,
                     DRAM_PCT=DRAM_PCT, BOUND_AT=constant("BOUND_AT"), NEAR=constant("NEAR"))


@pytest.fixture(scope="module")
def limits(nb):
    """(call, table, placed): the kept table of sections 2 and 3, and the notebook's analysis of it."""
    call, table = fixture(f"{STEM}--limits")
    placed = nb.place(table, nb.kernel_model(*call["configs"][0]), H200_ROOFS)
    return call, table, placed


# --- the rules the cells keep -------------------------------------------------------------------

def test_every_kernel_is_written_once_in_the_module_the_ncu_command_line_runs(rk):
    text = source(STEM)
    assert "SEED_SCRIPT" not in text and "TRANSFORMER_SCRIPT" not in text and "textwrap.dedent" not in text
    assert module_source(STEM, "roofline_kernels").rstrip().endswith("ncu_cli.replay(globals())")
    assert re.search(r'ncu_cli\.nsight_table\("roofline_kernels\.py", rk\.limits,', text)
    assert callable(rk.limits) and callable(rk.roofs)


def test_one_visible_if_picks_the_tool_and_both_branches_get_the_same_settings():
    cells = re.split(r"^# %%", source(STEM), flags=re.M)
    measuring = [c for c in cells if "ncu_cli.nsight_table(" in c]
    assert len(measuring) == 1 and measuring[0].count('if ENV.backend == "ncu":') == 1
    cell = measuring[0]
    assert "nsight.analyze.kernel(configs=[CONFIG], **SETTINGS)(rk.limits)" in cell
    assert "configs=[CONFIG],\n" in cell and "**SETTINGS)" in cell
    assert cell.count('nt.rules(source, cache_control="all", clock_control="none")') == 1  # what nsight_table runs


def test_every_decorator_is_visible_silent_and_without_thermal_pauses():
    text = source(STEM).replace("\n", " ")
    assert re.search(r'nsight\.analyze\.kernel\(runs=10, combine_kernel_metrics=lambda x, y: x \+ y, '
                     r'thermal_mode="off", verbosity=SILENT\)', text)
    settings = re.search(r"SETTINGS = dict\((.*?)\)\s+if ENV", text).group(1)
    assert 'thermal_mode="off"' in settings and "verbosity=SILENT" in settings and "combine_kernel_metrics=combine" in settings


def test_precision_is_never_read_from_a_kernel_name():
    # Under Nsight Compute (backend or command line) kernel names are bare function names:
    # `Kernel2` or `nvjet_...` say nothing of fp32; the notebook knows precision from dtypes and the flag.
    text = source(STEM)
    assert not re.search(r"sgemm|f32f32|short_kernel_name", text)


def test_limits_takes_the_configuration_the_formula_counts(nb, rk):
    assert list(inspect.signature(rk.limits).parameters) == list(inspect.signature(nb.kernel_model).parameters)[:9]


def test_measure_runs_each_operation_once_unmeasured_then_once_per_run(rk):
    from nsight.annotation import clear_active_annotations

    calls = []
    for _ in range(3):  # three runs, as ncu_cli.replay makes them
        clear_active_annotations()
        rk.measure({"probe op": lambda: calls.append(1)})
    assert len(calls) == 4


# --- the analysis on the Nsight-Compute-shaped table --------------------------------------------

def test_the_kept_table_has_the_nsight_compute_backends_shape_for_limits(limits, rk):
    call, table, _ = limits
    assert call["function"] == "limits" and call["metrics"] == [TIME, SM_PCT, DRAM_PCT, DRAM_BYTES]
    assert list(table.columns[2:11]) == list(inspect.signature(rk.limits).parameters)
    assert {"AvgValue", "StdDev", "NumRuns", "Kernel", "CI95_Lower"} <= set(table.columns)
    assert table.groupby("Annotation").Metric.nunique().eq(4).all()


def test_every_annotation_is_placed_against_the_roof_of_its_own_precision(limits, rk):
    call, table, placed = limits
    half = call["configs"][0][7]
    assert set(placed.index) == set(table.Annotation)
    expected = {"fp16 matmul": "fp16", "x * 2": "fp32", "softmax [rows x 1024]": "fp32", "QKV projection": half,
                "attention softmax": "fp32", rk.MATH_FP32: "fp32", rk.MATH_HALF: half}
    assert {name: placed.loc[name, "roof"] for name in expected} == expected
    assert (placed.loc[[n for n in placed.index if n not in expected], "roof"] == half).all()  # flash, default


def test_percent_of_roof_is_the_time_the_roofline_allows_over_the_time_taken(limits, nb):
    call, table, placed = limits
    model = nb.kernel_model(*call["configs"][0])
    mean = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue")
    for name, r in placed.iterrows():
        flops, _, roof = model[name]
        t, moved = mean.loc[name, TIME] * 1e-9, mean.loc[name, DRAM_BYTES]
        allowed = max(flops / (H200_ROOFS[roof] * 1e12), moved / (H200_ROOFS["memory"] * 1e9))
        assert r["% of roof"] == pytest.approx(100 * allowed / t)
        assert r["AI measured"] == pytest.approx(flops / moved)
        assert r.kernels == table[(table.Annotation == name) & (table.Metric == TIME)].Kernel.iloc[0].count("|") + 1


def test_verdicts_follow_from_the_side_of_the_ridge_and_the_share_of_the_roof(limits):
    bound_at, near = constant("BOUND_AT"), constant("NEAR")
    _, _, placed = limits
    for _, r in placed.iterrows():
        side = "compute" if r["AI measured"] > r.ridge else "memory"
        assert r.verdict == (f"{side}-bound" if r["% of roof"] >= bound_at else f"neither ({side} side)")
        sm, dram = r["SM %"], r["DRAM %"]
        assert r.counters == ("neither" if max(sm, dram) < bound_at else "tie" if abs(sm - dram) < near
                              else "SM" if sm > dram else "DRAM")


def test_the_claims_sections_2_and_3_make_hold_on_the_kept_table(limits, rk):
    _, _, placed = limits
    for name in ("fp16 matmul", "x * 2", "softmax [rows x 1024]"):
        r = placed.loc[name]
        assert r.side == r["formula side"]
        if r.counters in ("SM", "DRAM") and r.verdict.endswith("bound"):
            assert {"SM": "compute", "DRAM": "memory"}[r.counters] == r.side
    assert (placed["measured MB"] >= placed["formula MB"] - H200_L2 / 1e6).all()
    assert placed.loc["QKV projection", "side"] == "compute" and placed.loc["attention softmax", "side"] == "memory"
    fused = next(n for n in placed.index if n in rk.FUSED.values())
    for before, after in ((rk.MATH_HALF, fused), (rk.MATH_FP32, fused), (rk.MATH_FP32, rk.MATH_HALF)):
        assert placed.loc[after, "measured MB"] < placed.loc[before, "measured MB"]
        assert placed.loc[after, "time_us"] < placed.loc[before, "time_us"]


def test_a_near_tie_of_the_counters_is_flagged_not_decided(nb):
    rows = []
    for name, (t, sm, dram, moved) in {"x * 2": (500e3, 80.0, 85.0, 2e9), "fp16 matmul": (500e3, 40.0, 5.0, 1e8)}.items():
        for metric, value in ((TIME, t), (SM_PCT, sm), (DRAM_PCT, dram), (DRAM_BYTES, moved)):
            rows.append({"Annotation": name, "Metric": metric, "AvgValue": value, "StdDev": 0.01 * value, "NumRuns": 3,
                         "Kernel": "k"})
    model = nb.kernel_model(4096, 2**28, 2**18, 1, 1, 64, 64, "bf16", "FLASH_ATTENTION")
    placed = nb.place(pd.DataFrame(rows), model, H200_ROOFS)
    assert placed.loc["x * 2", "counters"] == "tie"
    assert placed.loc["fp16 matmul", "counters"] == "neither"  # the busiest SM unit at 40 %: not near any peak
    assert placed.loc["fp16 matmul", "verdict"] == "neither (compute side)"  # 137 GFLOP in 500 us: a third of a 777 roof


def test_the_time_interval_is_students_t_for_few_runs(limits):
    _, table, placed = limits
    t = table[(table.Annotation == "x * 2") & (table.Metric == TIME)].iloc[0]
    n = t.NumRuns  # the kept table's run count
    assert placed.loc["x * 2", "± us"] == pytest.approx(stats.t.ppf(0.975, n - 1) * t.StdDev / np.sqrt(n) / 1e3)


def test_combine_adds_times_and_bytes_and_weights_percentages_by_time(nb):
    kernels = [np.array([100.0, 90.0, 10.0, 1e6]), np.array([300.0, 30.0, 80.0, 5e6]), np.array([600.0, 50.0, 60.0, 2e6])]
    acc = functools.reduce(nb.combine, kernels)  # nsight-python folds pairwise, left to right
    t = sum(k[0] for k in kernels)
    assert acc[0] == t and acc[3] == 8e6
    assert np.allclose(acc[1:3], sum(k[1:3] * k[0] for k in kernels) / t)
    assert nb.combine.__code__.co_argcount == 2  # what nsight-python's extraction asserts


def test_combine_runs_inside_nsight_pythons_own_extraction(nb, rk):
    from nsight import extraction, transformation, utils
    from nsight.utils import VerbosityLevel

    config = (64, 1024, 8, 1, 2, 64, 32, "bf16", "FLASH_ATTENTION")
    data = {"math": [utils.ActionData(name=f"k{i}", values=np.array([t, pct, pct, 1e3 * t]), compute_clock=1,
                                      memory_clock=1, gpu="g", units=["ns", "%", "%", "byte"])
                     for _ in range(2) for i, (t, pct) in enumerate(((100.0, 20.0), (300.0, 60.0)))]}
    raw = extraction.extract_df_from_data(data, [TIME, SM_PCT, DRAM_PCT, DRAM_BYTES], [config], 2, rk.limits, None,
                                          VerbosityLevel.SILENT, nb.combine)
    table = transformation.aggregate_data(raw, rk.limits, None, VerbosityLevel.SILENT).set_index("Metric")
    assert table.loc[TIME, "AvgValue"] == 400.0 and table.loc[DRAM_BYTES, "AvgValue"] == 4e5
    assert table.loc[SM_PCT, "AvgValue"] == pytest.approx(50.0) and table.loc[TIME, "Kernel"] == "k0|k1"


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


# --- the hand counts, against what PyTorch's eager ops read and write ----------------------------

VIEWS = {"aten.view.default", "aten.expand.default", "aten.transpose.int", "aten._unsafe_view.default", "aten.t.default"}


class Traffic(TorchDispatchMode):
    """Per aten op that moves data: its name, and (dtype, shape, bytes) of each tensor it reads and of its output."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func) not in VIEWS:
            def about(t):
                return t.dtype, tuple(t.shape), t.numel() * t.element_size()
            self.ops.append((str(func), [about(a) for a in args if isinstance(a, torch.Tensor)], about(out)))
        return out

    def bytes(self, shapes=None) -> int:
        """Bytes read and written, of tensors of the given shapes (default: all)."""
        return sum(size for _, inputs, out in self.ops for _, shape, size in [*inputs, out]
                   if shapes is None or shape in shapes)


def moved(traffic: Traffic) -> int:
    return traffic.bytes()


def test_the_seed_kernels_move_what_the_formula_counts(nb):
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
def test_the_math_paths_precision_follows_the_inputs_dtype_and_the_flag_not_a_kernel_name(nb, rk, keep_half):
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
    flops, formula, roof = model[rk.MATH_HALF if keep_half else rk.MATH_FP32]
    assert gemms == [[torch.bfloat16] * 2] * 2 if keep_half else gemms == [[torch.float32] * 2] * 2
    assert roof == ("bf16" if keep_half else "fp32")
    sc = b * h * s * s
    passes = traffic.bytes({(b * h, s, s), (b, h, s, s)})  # bytes over the [b, h, s, s] scores and probabilities
    if keep_half:  # QK^T writes the scores, softmax reads them and writes the probabilities, PV reads those
        assert passes == 2 * 4 * sc
    else:  # the same four passes in fp32, and more (the probabilities are also cast back to bf16)
        assert passes >= 4 * 4 * sc
    assert moved(traffic) >= formula  # the formula is the least an unfused path at that precision moves
    assert flops == 2 * 2 * sc * dh + 5 * sc


def test_a_fused_attention_needs_only_q_k_v_and_the_output(nb, rk):
    b, h, s, dh = 2, 4, 64, 16
    model = nb.kernel_model(64, 1024, 8, b, h, s, dh, "bf16", "FLASH_ATTENTION")
    assert model["attention, flash"][1] == model[rk.DEFAULT][1] == 2 * 4 * b * h * s * dh
    assert model[rk.MATH_HALF][1] - model["attention, flash"][1] == 2 * 4 * b * h * s * s
    assert model[rk.MATH_FP32][1] - model["attention, flash"][1] == 4 * 4 * b * h * s * s


# --- every section's cells, run on kept tables as the GPU would run them ----------------------------

def roofs_table(rk) -> pd.DataFrame:
    """Section 1's table as nsight-python returns it (durations only), H200-like, streams of 960 MiB."""
    times = {"x.sum()": 251e3, "y = x * 2": 468e3, rk.CLEAN: 462e3, "y = x + w": 686e3, "y = addcmul(x, w, v)": 905e3,
             "fp16 matmul": 1.415e6, "bf16 matmul": 1.362e6, "fp32 matmul": 18.96e6}
    return pd.DataFrame([{"Annotation": name, "Metric": TIME, "AvgValue": t, "StdDev": 0.005 * t, "MinValue": 0.99 * t,
                          "MaxValue": 1.01 * t, "NumRuns": 10, "Kernel": "k", "Unit": "ns"} for name, t in times.items()])


@pytest.mark.parametrize("backend", ["ncu", "cupti"])
def test_every_section_runs_on_kept_tables_through_either_branch(tmp_path, monkeypatch, capsys, backend):
    """The notebook's own cells, sections 1 to 4 and the summary, with the profilers replaced by kept tables:
    the Nsight Compute backend's branch (every Colab reader's) and the ncu command line's (an older ncu)."""
    import matplotlib
    import matplotlib.pyplot as plt
    import nsight

    import nspy_tutorial as nt
    from nspy_tutorial import gpu_facts, ncu_cli, sections

    matplotlib.use("Agg")
    monkeypatch.setattr(plt, "show", lambda: plt.savefig(tmp_path / "roofline.png"))
    rk = import_module(STEM, "roofline_kernels", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(rk, "sdpa_unavailable", lambda b, *args: None if b == "FLASH_ATTENTION" else "not probed")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (140 * 10**9, 141 * 10**9))
    call, kept = fixture(f"{STEM}--limits")
    tables, seen = {"roofs": roofs_table(rk), "limits": kept}, {}

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
    facts = gpu_facts.DeviceFacts(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=H200_L2,
                                  memory_bytes=150 * 10**9, max_sm_clock_mhz=1980, max_mem_clock_mhz=3201,
                                  memory_bus_width_bits=6144)
    env = SimpleNamespace(facts=facts, datasheet=gpu_facts.datasheet_for("NVIDIA H200"), backend=backend,
                          ncu_path="/usr/local/cuda/bin/ncu", gpu_name="NVIDIA H200", require=lambda need: None)
    namespace = {"ENV": env, "nt": nt}
    cells = re.split(r"^# %%", source(STEM), flags=re.M)[1:]
    code = [c.split("\n", 1)[1] for c in cells if not c.startswith((" [markdown]", " writefile"))]
    sections.reset()
    sections.set_notebook(STEM)
    try:
        for cell in code:
            exec(compile(cell.replace("{{SETUP}}", ""), STEM, "exec"), namespace)
        records = {r.section.split(".")[0]: r for r in sections.records()}
    finally:
        sections.reset()
    assert {k: r.status for k, r in records.items()} == {"1": "OK", "2": "OK", "3": "OK", "4": "OK"}, records
    assert tuple(namespace["CONFIG"]) == tuple(call["configs"][0])  # the sizes the notebook picks on an H200
    if backend == "ncu":
        settings, args = seen["limits"]
        assert settings["configs"] == [namespace["CONFIG"]] and "ncu-cli" not in seen
    else:
        script, func, settings = seen["ncu-cli"]
        assert script == "roofline_kernels.py" and func.__name__ == "limits" and settings["configs"] == [namespace["CONFIG"]]
    assert settings["metrics"] == call["metrics"] and settings["runs"] == call["runs"]
    assert "neither" in records["3"].result and "compute-bound" in records["2"].result
    assert (tmp_path / "roofline.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "clocks free to boost (clock_control='none')" in out.split("2. Limited by what?")[1]  # nsight_table's rules
