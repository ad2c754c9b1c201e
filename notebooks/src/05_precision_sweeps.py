# %% [markdown]
# # 05 · Precision sweeps: fp32, TF32, fp16 and bf16 against the datasheet
#
# **What you will learn**
# - how to sweep matrix sizes and precisions in one benchmark, with one annotation per
#   precision;
# - why nsight-python can refuse a sweep over sizes (its kernel-count check) -- and the fix:
#   one profiled call per size;
# - `derive_metric`, to get TFLOP/s as a metric of its own, and `normalize_against`, to
#   get times relative to fp32 -- and the trap in normalisation: **only `AvgValue` is
#   divided**; `MinValue`, `MaxValue`, `StdDev`, the CI and `Unit` still describe raw
#   nanoseconds, `Geomean` is built from the divided values;
# - how TF32 is switched on in PyTorch (`fp32_precision`, or `allow_tf32` on older
#   versions), and how to check by its numbers that it really is on;
# - where each precision lands against this GPU's datasheet peak (plot and table), and the
#   clock beside the largest sizes: measured under Nsight Compute, not measured under CUPTI.
#
# TF32 and bf16 need compute capability ≥ 8.0 (Ampere or newer). On a T4 (7.5) they
# are left out, with the reason printed -- no row is faked. Runs on either backend. On Colab
# each notebook runs in a fresh runtime of its own: the setup cell below installs what this
# notebook needs (nothing has to run before it), and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import inspect
import math

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import pynvml
import torch
from scipy import stats

from nspy_tutorial import ncu_cli

pd.set_option("display.width", 200)
SILENT = (
    nsight.VerbosityLevel.SILENT
)  # every profile here is silent; notebook 02 shows nsight's output
SIZES = [256, 512, 1024, 2048, 4096, 8192]
DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
PRECISIONS = []
if ENV.facts:
    # three n x n fp32 matrices must fit comfortably: keep them under a quarter of memory
    SIZES = [n for n in SIZES if 3 * 4 * n * n < ENV.facts.memory_bytes / 4]
    ampere = ENV.facts.compute_capability >= (8, 0)
    PRECISIONS = ["fp32", "tf32", "fp16", "bf16"] if ampere else ["fp32", "fp16"]
    if not ampere:
        print(
            f"TF32 and bf16 left out: they need compute capability >= 8.0, this GPU is "
            f"{ENV.facts.compute_capability[0]}.{ENV.facts.compute_capability[1]}"
        )
    print("sizes:", SIZES, " precisions:", PRECISIONS)

# PyTorch >= 2.9 switches TF32 with `fp32_precision` ("tf32" / "ieee"); `allow_tf32` is being
# deprecated, and mixing the two raises. Use the new one where this torch has it.
NEW_TF32_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")
TF32_SWITCH = "torch.backends.cuda.matmul." + ("fp32_precision" if NEW_TF32_API else "allow_tf32")
print("TF32 switch used here:", TF32_SWITCH)


def set_tf32(on: bool) -> None:
    if NEW_TF32_API:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = on


def add(a: float, b: float) -> float:
    """combine_kernel_metrics: sums the kernels of one run (cuBLAS may split a matmul)."""
    return a + b


def kernel_names(kernel_column: str) -> list[str]:
    """The Kernel column joins combined kernels with '|': one short name each (nt.short_kernel_name)."""
    return [nt.short_kernel_name(name) for name in kernel_column.split("|")]


def rows_of(results) -> pd.DataFrame:
    """results.to_dataframe(), refusing an empty table (what 1.1.0 returns when no kernel ran; 1.1.1 raises itself)."""
    table = results.to_dataframe()
    if table.empty:
        raise RuntimeError("No kernels were profiled: nsight-python returned an empty table")
    return table


def refusal(call) -> str | None:
    """None if call() returned, else the first line of nsight-python's refusal: judged by where it was raised, not by
    its words (1.1.1 changed them); any other error propagates."""
    try:
        call()
    except Exception as exc:
        if (
            not inspect.trace()[-1].frame.f_globals.get("__name__", "").startswith("nsight")
        ):  # where it was raised
            raise
        return f"{type(exc).__name__}: " + (str(exc).splitlines() or [""])[0]
    return None


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def nvml_mhz_at_entry(annotation_name, n):
    """NVML's SM clock when the annotation opens, before its kernel starts: a weak proxy for the kernel's clock."""
    return pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)


# %% [markdown]
# ## 1. TF32: how it is switched on, and a check that it is on
#
# On Ampere and newer GPUs, fp32 matmuls *can* run on tensor cores in TF32 (inputs
# rounded to a 10-bit mantissa, fp32 keeps 23; fp32 accumulate). PyTorch leaves it
# **off** for matmuls by default. The switch is
# `torch.backends.cuda.matmul.fp32_precision = "tf32"` (`"ieee"` = off) in PyTorch 2.9
# and newer, `torch.backends.cuda.matmul.allow_tf32 = True` before; the cell above says
# which one this torch uses.
#
# The kernel name hints at it, but the reliable check is numerical: the same fp32
# matmul, with the same inputs, against a float64 reference. With the default settings
# its error is plain fp32's; switched on, TF32's rounding makes it many times larger --
# the cell prints how many.


# %%
def matmul_error(tf32: bool | None, n: int = 1024) -> float:
    """Max relative error of an fp32 matmul against float64: TF32 on, off, or (None) as configured."""
    torch.manual_seed(0)
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    if tf32 is not None:
        set_tf32(tf32)
    try:
        got = (a @ b).double()
    finally:
        set_tf32(False)
    ref = a.double() @ b.double()
    return float(((got - ref).abs().max() / ref.abs().max()).item())


with nt.section("1. TF32 is really on when switched on") as s:
    ENV.require_compute_capability((8, 0), "TF32")
    e_default = matmul_error(None)  # first, before anything is switched
    e32, e_tf32 = matmul_error(False), matmul_error(True)
    print(
        f"  max relative error vs float64: default {e_default:.2e}, fp32 {e32:.2e}, TF32 {e_tf32:.2e}"
    )
    nt.claim(
        e_tf32 > 10 * e32,
        "switched on, TF32's error is more than 10x fp32's",
        f"{e_tf32 / e32:.0f}x",
    )
    nt.claim(
        abs(e_default - e32) < abs(e_default - e_tf32),
        "PyTorch's default leaves TF32 off for fp32 matmuls: its error is fp32's, not TF32's",
    )
    s.result = f"TF32's error was {e_tf32 / e32:.0f}x fp32's on this GPU ({e_tf32:.1e} vs {e32:.1e}), switched with {TF32_SWITCH}"

# %% [markdown]
# ## 2. The benchmark, and why we profile one size at a time
#
# One function, one annotation per precision; TF32 is switched on only around its own
# annotation. `derive_metric=tflops` is a function we write: nsight-python calls it for
# every run with the measured metric (`gpu__time_duration.sum`, in ns) followed by the
# benchmark's arguments (`n`), and adds what it returns -- `(value, "TFLOP/s")` -- as a
# second metric named after the function, next to the time.
#
# nsight-python requires **each annotation to launch the same number of kernels in
# every configuration and run**: it divides the number of kernels an annotation
# launched in the whole call by (configurations × runs). cuBLAS picks its algorithm by
# size and GPU, and some algorithms launch more than one kernel (the names are printed
# below, for the sizes where that happens on your GPU). Sweeping all sizes in one call
# then raises an error that the kernel count per run differs (nsight-python 1.1.0 words it
# *"Expect same number of kernels per run. Got average of … per run"*; 1.1.1 words it
# differently, with the kernel and run counts) -- or silently mixes kernels up when the
# totals happen to divide evenly.
#
# The sweep also records NVML's SM clock as each annotation opens (`nvml_mhz_at_entry`, an
# `ANNOTATION` collector, notebook 08): a weak proxy for the clock the kernel ran at, read
# before the kernel starts, while earlier work may still be running. Section 6 uses it
# where nothing better is measured.
#
# Options the nsight-python docs give: `combine_kernel_metrics` (combines the kernels of
# a run, but still needs equal counts), `ignore_kernel_list` (drop a helper kernel by
# name; names differ by GPU), `replay_mode="range"` (Nsight Compute only: one result per
# range). The portable fix is **one profiled call per size**, the loop `one_call_per_size`
# below: then only the runs of one size must agree, which they do. Section 3 shows what
# happens on your GPU either way.


# %%
def tflops(time_ns: float, n: int) -> tuple[float, str]:
    """derive_metric: 2 n^3 flops (a multiply and an add per term) over the measured time."""
    return 2 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s"


def sweep(n: int) -> None:
    inputs = {
        p: (
            torch.randn(n, n, device="cuda", dtype=DTYPES[p]),
            torch.randn(n, n, device="cuda", dtype=DTYPES[p]),
        )
        for p in PRECISIONS
    }
    for p in PRECISIONS:
        a, b = inputs[p]
        set_tf32(p == "tf32")
        with nsight.annotate(p):
            _ = a @ b
    set_tf32(False)


def one_call_per_size(bench, sizes: list[int]) -> pd.DataFrame:
    """Profile each size in its own call: the kernel-count check then spans one size only."""
    return pd.concat([rows_of(bench(configs=[n])) for n in sizes], ignore_index=True)


RUNS, DRIFT = (
    5,
    None,
)  # DRIFT: how far section 4's second call moved the same kernels (section 6 reads it)
sweep_tflops = nsight.analyze.kernel(
    runs=RUNS,
    derive_metric=tflops,
    thermal_mode="off",
    verbosity=SILENT,
    combine_kernel_metrics=add,
    info_collectors=[nvml_mhz_at_entry],
)(sweep)

with nt.section("2. Sweep sizes one call per size, with a derived TFLOP/s metric") as s:
    ENV.require("profiler")
    pynvml.nvmlInit()
    NVML = (
        nt.nvml_handle()
    )  # the GPU CUDA runs on (NVML's own numbering ignores CUDA_VISIBLE_DEVICES)
    df = one_call_per_size(sweep_tflops, SIZES)
    TF = df[df.Metric == "tflops"].pivot(index="n", columns="Annotation", values="AvgValue")[
        PRECISIONS
    ]
    TIMES = df[df.Metric == "gpu__time_duration.sum"]
    COUNTS = TIMES.assign(kernels=[len(kernel_names(k)) for k in TIMES.Kernel]).pivot(
        index="n", columns="Annotation", values="kernels"
    )[PRECISIONS]
    print(nt.rules(ENV.backend))
    print("  TFLOP/s (derive_metric, mean over the runs):")
    print(TF.to_string(float_format=lambda v: f"{v:8.1f}"))
    print("\n  kernels per annotation and run:")
    print(COUNTS.to_string())
    for _, r in TIMES.iterrows():
        if len(kernel_names(r.Kernel)) > 1:
            print(f"  {r.Annotation} n={r.n}:", *kernel_names(r.Kernel), sep="\n    ")
    derived = df[df.Metric == "tflops"].merge(
        TIMES[["Annotation", "n", "AvgValue", "MinValue"]],
        on=["Annotation", "n"],
        suffixes=("", "_ns"),
    )
    # tflops is derived per run, then averaged: its max comes from the fastest run. (So its mean is
    # a mean of per-run rates, never below 2n^3 / mean time, since 1/t is convex -- printed, not claimed.)
    nt.claim(
        np.allclose(derived.MaxValue, 2 * derived.n**3 / derived.MinValue_ns / 1e3),
        "the tflops metric is computed per run: its maximum is 2 n^3 / (fastest run)",
    )
    gap = (derived.AvgValue / (2 * derived.n**3 / derived.AvgValue_ns / 1e3) - 1) * 100
    print(f"  mean of per-run TFLOP/s vs 2n^3 / mean time: up to {gap.max():.3f} % higher")
    nt.claim(
        (df[df.Metric == "tflops"].Unit == "TFLOP/s").all(),
        "the derived metric carries the unit we returned",
    )
    big = SIZES[-1]
    s.result = (
        f"n={big}: " + ", ".join(f"{p} {TF.loc[big, p]:.1f}" for p in PRECISIONS) + " TFLOP/s"
    )

# %% [markdown]
# ## 3. One call for all sizes: does the kernel-count check bite on this GPU?
#
# From the per-size kernel counts we can *predict* whether one call over all sizes
# passes nsight-python's check -- the rule is the division above, written out as
# `one_call_fails` -- then try it. The prediction is checked against what actually
# happens on your GPU: whether nsight-python refuses the call. A refusal is recognised by
# where the error comes from -- nsight-python's own code (`refusal`, defined at the top) --
# not by its wording, which changes between versions; an error from anywhere else (PyTorch,
# CUDA) is not a refusal and stops the section.


# %%
def one_call_fails(counts_per_size: list[int], runs: int) -> bool:
    """nsight divides an annotation's kernels in the whole call by (configs x runs): it raises unless that is whole."""
    return (sum(counts_per_size) * runs) % (len(counts_per_size) * runs) != 0


with nt.section("3. One call over all sizes: predicted vs observed") as s:
    ENV.require("profiler")
    all_at_once = nsight.analyze.kernel(
        configs=SIZES, runs=RUNS, thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=add
    )(sweep)
    predicted = {p: one_call_fails(list(COUNTS[p]), RUNS) for p in PRECISIONS}
    observed = refusal(all_at_once)
    print(
        f"  predicted to fail: {[p for p in PRECISIONS if predicted[p]] or 'none'}\n"
        f"  observed: {observed or 'nsight-python returned a table'}"
    )
    nt.claim(
        any(predicted.values()) == (observed is not None),
        "nsight-python refuses the call exactly when per-size kernel counts make the total indivisible",
        observed or "no refusal",
    )
    uneven = [p for p in PRECISIONS if COUNTS[p].nunique() > 1]
    if uneven and observed is None:
        print(
            f"  WARNING: counts differ by size for {uneven} but divide evenly: one call would have mixed kernels up"
        )
    s.result = (
        f"kernel counts vary by size for {', '.join(uneven) or 'no precision'}; one call over all sizes "
        + (f"fails as predicted: {observed}" if observed else "passes, as predicted")
    )

# %% [markdown]
# ## 4. `normalize_against="fp32"`: what is divided, and what is not
#
# With `normalize_against`, each `AvgValue` is divided by the fp32 `AvgValue` of the
# same configuration and metric: fp32 becomes 1.0, and bf16 at 0.1 means "a tenth of
# fp32's time". Here two sizes are profiled in one call (two whose kernel counts agree,
# so the call is legal), and the table shows every statistic:
#
# - **divided**: `AvgValue` only; nsight-python leaves the divisor in
#   `NormalizationValue` (raw ns);
# - **derived from the divided values**: `Geomean`, the geometric mean of each
#   annotation's normalised `AvgValue` over the configurations of the call;
# - **not divided, still raw nanoseconds**: `MinValue`, `MaxValue`, `StdDev`,
#   `CI95_Lower/Upper` -- and `Unit` still says ns;
# - **unitless and still valid**: `RelativeStdDevPct`, computed before the division: the
#   run-to-run spread of that row in percent, whatever the units.
#
# The checks rebuild the raw mean (`AvgValue × NormalizationValue`), show which statistic
# belongs to which, and that the rebuilt mean is the time in ns section 2 measured for the
# same precision and size. That is a separate measurement of the same kernels, so it agrees
# within the run-to-run drift, not to the nanosecond: the check allows a tenth. A misread --
# a ratio taken for ns, or the divisor of the other size -- is off by far more.


# %%
def check_normalised(rd: pd.DataFrame, times: pd.DataFrame) -> pd.Series:
    """The claims about a table made with normalize_against="fp32"; ``times``: section 2's time rows (raw ns).
    Returns the fastest normalised row and the largest move, in %, of one kernel's mean from section 2's."""
    ns_cols = ["NormalizationValue", "MinValue", "MaxValue", "StdDev", "CI95_Lower", "CI95_Upper"]
    view = rd[["Annotation", "n", "AvgValue", "Geomean", *ns_cols, "RelativeStdDevPct", "Unit"]]
    print(
        view.to_string(
            index=False,
            formatters={
                **{c: "{:,.0f}".format for c in ns_cols},
                "AvgValue": "{:.3f}".format,
                "Geomean": "{:.3f}".format,
                "RelativeStdDevPct": "{:.2f}".format,
            },
        )
    )
    raw_mean = rd.AvgValue * rd.NormalizationValue
    half = 1.96 * rd.StdDev / np.sqrt(rd.NumRuns)
    nt.claim(
        np.allclose(rd[rd.Annotation == "fp32"].AvgValue, 1.0),
        "fp32 normalised against itself is exactly 1",
    )
    nt.claim((rd.Normalized == "fp32").all(), "the Normalized column names the baseline annotation")
    nt.claim(
        ((rd.MinValue <= raw_mean * (1 + 1e-9)) & (raw_mean <= rd.MaxValue * (1 + 1e-9))).all(),
        "MinValue and MaxValue are raw ns: they bracket the un-normalised mean",
    )
    nt.claim(
        np.allclose(rd.CI95_Lower, raw_mean - half) and np.allclose(rd.CI95_Upper, raw_mean + half),
        "CI95 bounds are raw ns around the un-normalised mean",
    )
    nt.claim(
        np.allclose(rd.RelativeStdDevPct, 100 * rd.StdDev / raw_mean),
        "RelativeStdDevPct is StdDev over the raw mean: a unitless spread, still valid for the row",
    )
    geo = rd.groupby("Annotation").AvgValue.transform(lambda v: math.exp(np.log(v).mean()))
    nt.claim(
        np.allclose(rd.Geomean, geo),
        "Geomean is the geometric mean of the normalised AvgValue over the sizes",
    )
    nt.claim(
        rd.Unit.isin(["ns", "nsecond"]).all(),
        "Unit still names nanoseconds although AvgValue is now a ratio",
        f"{sorted(set(rd.Unit))}",
    )
    measured = times.set_index(["Annotation", "n"]).AvgValue
    back = raw_mean.to_numpy() / measured.loc[list(zip(rd.Annotation, rd.n))].to_numpy()
    worst = rd.iloc[
        np.abs(back - 1).argmax()
    ]  # the kernel whose mean moved most between the two calls
    print(
        f"  AvgValue x NormalizationValue over section 2's mean time of the same kernel: {back.min():.3f} to "
        f"{back.max():.3f}; the largest move: {worst.Annotation} n={worst.n}"
    )
    nt.claim(
        ((back > 0.9) & (back < 1.1)).all(),
        "AvgValue x NormalizationValue gives back section 2's raw mean "
        "time in ns (a separate measurement of the same kernels: within 10 %)",
        f"{back.min():.3f}-{back.max():.3f}",
    )
    other = rd[rd.Annotation != "fp32"]
    return other.loc[other.AvgValue.idxmin()], 100 * np.abs(back - 1).max()


sweep_normalized = nsight.analyze.kernel(
    runs=RUNS,
    normalize_against="fp32",
    thermal_mode="off",
    verbosity=SILENT,
    combine_kernel_metrics=add,
)(sweep)

with nt.section("4. Normalisation divides AvgValue only") as s:
    ENV.require("profiler")
    same = [
        n for n in SIZES if (COUNTS.loc[n] == COUNTS.loc[SIZES[-1]]).all()
    ]  # kernel counts equal to the largest's
    pair = same[-2:]
    print(
        f"  sizes in one call: {pair} (kernel counts agree for every precision)\n"
        + nt.rules(ENV.backend)
    )
    NORMALIZED = rows_of(sweep_normalized(configs=pair))
    fastest, DRIFT = check_normalised(NORMALIZED, TIMES)
    s.result = (
        f"{fastest.Annotation} at n={fastest.n} takes {fastest.AvgValue:.3f}x fp32's time (geomean over {pair}: "
        f"{fastest.Geomean:.3f}); Min/Max/StdDev/CI stay ns, RelativeStdDevPct stays valid"
    )

# %% [markdown]
# ## 5. TFLOP/s against the datasheet peaks
#
# Each precision's measured TFLOP/s by size, with this GPU's datasheet peak as a dashed
# line of the same colour. Peaks come from the table in `nspy_tutorial` (dense, boost
# clock, fp32 accumulate for fp16), looked up by device name; for an unknown GPU the
# lines are simply absent. A measured rate above its peak would be a finding to explain,
# not noise: the check fails if it happens.
#
# The table is a % of the **datasheet** peak, which the datasheet states at one SM clock.
# A GPU under a long tensor-core load need not hold that clock, and
# under the CUPTI backend the clock the kernels ran at is **not measured**: so a % of the
# datasheet is not a % of what the GPU could do at the clock it ran at. The cell says
# which: under the Nsight Compute backend section 6 measures the clock of the two largest
# sizes and prints the % of the peak at that clock beside this one.

# %%
with nt.section("5. Plot and % of peak") as s:
    ENV.require("profiler")
    sheet = ENV.datasheet
    fig, ax = plt.subplots(figsize=(7, 4))
    pct = {}
    for i, p in enumerate(PRECISIONS):
        ax.plot(TF.index, TF[p], "o-", color=f"C{i}", label=p)
        peak = sheet.peak_tflops(p).value if sheet else None
        if peak:
            ax.axhline(peak, color=f"C{i}", ls="--", lw=0.8)
            pct[p] = 100 * TF[p] / peak
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n (n x n x n matmul)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{ENV.gpu_name}: measured (solid) vs datasheet peak (dashed)")
    ax.legend()
    plt.tight_layout()
    plt.show()
    print(nt.rules(ENV.backend))
    s.result = f"{ENV.gpu_name} not in the datasheet table: measured only, no % of peak"
    if pct:
        print(
            "  % of the datasheet peak (stated at the SM clock the datasheet names); the clock these kernels ran at: "
            + (
                "not measured under CUPTI"
                if ENV.backend == "cupti"
                else "section 6 measures it for the two largest sizes, in a profile of its own"
            )
        )
        print(pd.DataFrame(pct).to_string(float_format=lambda v: f"{v:6.1f}"))
        for p in pct:
            nt.claim(
                pct[p].max() <= 100,
                f"{p} never exceeds its datasheet peak",
                f"max {pct[p].max():.1f}%",
            )
        s.result = (
            f"n={SIZES[-1]}: "
            + ", ".join(f"{p} {pct[p].loc[SIZES[-1]]:.0f}%" for p in pct)
            + f" of {sheet.gpu} datasheet peak; "
            + (
                "the kernels' clock not measured (CUPTI)"
                if ENV.backend == "cupti"
                else "% at the measured clock: section 6"
            )
        )

# %% [markdown]
# ## 6. The clock beside the largest sizes
#
# A rate that falls from one size to the next, or a % of peak, means little until the clock
# is known. For the two largest sizes the cell prints, per precision:
#
# - TFLOP/s at each size and whether it changes from the smaller to the larger: Welch's t on
#   the per-run rates, Holm-corrected over the precisions, then the size of the change
#   against the variation between runs (below) -- "falls", "rises", "within run-to-run
#   variation" or "not distinguishable";
# - **under the Nsight Compute backend**: the clock each kernel ran at
#   (`gpc__cycles_elapsed.avg.per_second`, in one more profile of the two sizes; for a run of
#   several kernels `per_run` weights their clocks by their times), the change of the rate per
#   clock cycle, and the % of the peak *at that clock* (peak × clock / the clock the datasheet
#   states it at) beside the % of the datasheet; the check fails if a kernel beats the peak at
#   its clock;
# - **under the CUPTI backend**: no clock. CUPTI measures durations only, so nothing here says
#   at what clock the kernels ran. The NVML column is a sample of the SM clock taken as each
#   annotation opened (section 2's collector): outside the kernel, before it started. It is
#   not the kernel's clock; a sample that reads the GPU's maximum SM clock says nothing about
#   the clock under load, and the cell says so when every sample does.
#
# **Within a batch is not between runs.** Welch's t compares five runs of one batch with five
# of another, in one session: its p says the change is larger than the runs' scatter *within
# this session*. It does not cover what moves between sessions -- the clock, the temperature,
# other work on the GPU; notebook 03 §6 compares two batches of one kernel for this reason.
# This notebook measures one piece of that: sections 2 and 4 time the same kernels in two
# separate calls, and section 4 printed how far one kernel's mean moved between them -- the
# largest move of its eight kernels, named there; one draw, so a rough yardstick, and a
# generous one for kernels that scatter less. That **measured move** is the yardstick for a
# change distinguishable within the batch:
#
# - no larger than the move: **within run-to-run variation**;
# - up to twice the move: **rises** or **falls (about the run-to-run variation)** -- a second
#   run may call it either, since both the change and the move are measured with that
#   scatter;
# - more than twice the move: **rises** or **falls**.
#
# Any such line is a line: the band in the middle is where a verdict sits on it, and the
# words say so instead of flipping silently from one run to the next.

# %%
SM_HZ = "gpc__cycles_elapsed.avg.per_second"
PROXY = "nvml_mhz_at_entry_Avg"  # section 2's ANNOTATION collector, as nsight-python aggregates it into the table


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: a family of p-values keeps its 5 % level whatever their number."""
    p, order = np.asarray(p, float), np.argsort(p)
    return np.minimum(1, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))[
        np.argsort(order)
    ]


def per_run(x, y):
    """combine_kernel_metrics on two kernels' [time, SM Hz] of one run: times add, the clock is time-weighted."""
    out = x + y
    out[1] = (x[1] * x[0] + y[1] * y[0]) / out[0]
    return out


def beside_the_clock(table: pd.DataFrame, peaks: dict) -> pd.DataFrame:
    """Per precision and size: TFLOP/s (2 n^3 / time) and its run-to-run sd, the SM clock where the table has it,
    NVML's clock sampled at annotation entry (outside the kernel), % of the datasheet and of the peak at the measured clock.
    ``peaks``: precision -> (datasheet TFLOP/s, the SM clock in MHz it is stated at)."""
    rows = []
    for r in table[table.Metric == "gpu__time_duration.sum"].itertuples():
        rate = 2 * r.n**3 / ncu_cli.to_base_units(r.AvgValue, r.Unit) / 1e12
        hz = table[(table.Metric == SM_HZ) & (table.Annotation == r.Annotation) & (table.n == r.n)]
        mhz = (
            ncu_cli.to_base_units(hz.AvgValue.iloc[0], hz.Unit.iloc[0]) / 1e6 if len(hz) else np.nan
        )
        peak, sheet_mhz = peaks.get(r.Annotation, (None, None))
        rows.append(
            {
                "precision": r.Annotation,
                "n": r.n,
                "TFLOP/s": rate,
                "sd": rate * r.StdDev / r.AvgValue,
                "runs": r.NumRuns,
                "SM MHz": mhz,
                "NVML MHz outside kernel": getattr(r, PROXY, np.nan),
                "% datasheet": 100 * rate / peak if peak else np.nan,
                "% at its clock": 100 * rate / (peak * mhz / sheet_mhz)
                if peak and sheet_mhz
                else np.nan,
            }
        )
    return pd.DataFrame(rows)


def rate_change(clock: pd.DataFrame, small: int, large: int, move_pct: float) -> pd.DataFrame:
    """Per precision, the rate at ``large`` against ``small``: change, Welch's p, Holm, the clock beside, and the
    verdict against ``move_pct`` (how far one kernel moved between two calls): not distinguishable (Holm), within
    run-to-run variation (|change| <= move), falls or rises (about the run-to-run variation) up to 2 x move, beyond."""
    rows = []
    for p, g in clock.groupby("precision", sort=False):
        a, b = g.set_index("n").loc[small], g.set_index("n").loc[large]
        welch = stats.ttest_ind_from_stats(
            a["TFLOP/s"], a.sd, a.runs, b["TFLOP/s"], b.sd, b.runs, equal_var=False
        )
        rows.append(
            {
                "precision": p,
                "rate %": 100 * (b["TFLOP/s"] / a["TFLOP/s"] - 1),
                "p": welch.pvalue,
                "clock %": 100 * (b["SM MHz"] / a["SM MHz"] - 1),
                "rate per cycle %": 100
                * (b["TFLOP/s"] / b["SM MHz"] / (a["TFLOP/s"] / a["SM MHz"]) - 1),
            }
        )
    table = pd.DataFrame(rows)
    table["p_holm"], moves = holm(table.p), table["rate %"].abs() / move_pct if move_pct else np.inf
    word = np.where(table["rate %"] < 0, "falls", "rises")
    table["verdict"] = np.select(
        [~(table.p_holm < 0.05), moves <= 1, moves <= 2],
        [
            "not distinguishable",
            "within run-to-run variation",
            word + " (about the run-to-run variation)",
        ],
        word,
    )
    return table


with nt.section("6. The clock beside the largest sizes") as s:
    ENV.require("profiler")
    small, large = SIZES[-2:]
    if ENV.backend == "ncu":  # one more profile of the two sizes, with the clock each kernel ran at
        clocked = nsight.analyze.kernel(
            runs=RUNS,
            metrics=["gpu__time_duration.sum", SM_HZ],
            thermal_mode="off",
            verbosity=SILENT,
            combine_kernel_metrics=per_run,
            info_collectors=[nvml_mhz_at_entry],
        )(sweep)
        table = one_call_per_size(clocked, [small, large])
    else:
        table = df[df.n.isin([small, large])]
        top = ENV.facts.max_sm_clock_mhz
        print(
            "  the CUPTI backend measures no clock: the clock columns stay empty; the NVML column is a sample taken "
            "as each annotation opened, outside the kernel, not the clock the kernel ran at"
            + (
                f"; every sample reads the max SM clock, {top} MHz: no evidence of the clock under load"
                if (table[PROXY] == top).all()
                else ""
            )
        )
    print(nt.rules(ENV.backend))
    sheet = ENV.datasheet
    CLOCK = beside_the_clock(
        table,
        {p: (sheet.peak_tflops(p).value, sheet.peak_clock_mhz(p)) for p in PRECISIONS}
        if sheet
        else {},
    )
    print(CLOCK.drop(columns=["sd", "runs"]).to_string(index=False, float_format="{:,.1f}".format))
    move = nt.needs(DRIFT, section="4")  # how far one kernel's mean moved between sections 2 and 4
    CHANGE = rate_change(CLOCK, small, large, move)
    print(
        f"\n  from n={small} to n={large} (p Holm-adjusted over {len(CHANGE)} precisions; against the {move:.1f}% one "
        f"kernel moved between sections 2 and 4 (named there); twice that: {2 * move:.1f}%):"
    )
    print(CHANGE.to_string(index=False, float_format="{:,.3g}".format))
    if CLOCK["% at its clock"].notna().any():
        nt.claim(
            (CLOCK["% at its clock"].dropna() <= 100).all(),
            "no kernel beats its datasheet peak at the clock it ran at",
            f"up to {CLOCK['% at its clock'].max():.1f}%",
        )
    s.result = (
        f"n={small}->{large}: "
        + ", ".join(
            f"{r.precision} {r.verdict} ({r['rate %']:+.1f}%; "
            + (
                f"clock {r['clock %']:+.1f}%)"
                if np.isfinite(r["clock %"])
                else "clock not measured)"
            )
            for _, r in CHANGE.iterrows()
        )
        + f"; a kernel moved {move:.1f}% between calls"
    )

# %% [markdown]
# ## Takeaways
#
# - Sweep sizes with **one profiled call per size** when library kernels are involved:
#   the kernel count per annotation must be the same in every configuration of a call.
# - `derive_metric` adds a metric computed per run; return `(value, unit)`.
# - After `normalize_against`, only `AvgValue` is a ratio (and `Geomean` is built from
#   it). `MinValue`, `MaxValue`, `StdDev` and the CI are still ns; `RelativeStdDevPct` is
#   unitless and still the row's spread.
# - Small matrices are far from peak on any GPU; the gap closes with size, and tensor-core
#   precisions (TF32, fp16, bf16) reach many times the fp32 rate.
# - Put the clock beside a rate before reading a change in it: under Nsight Compute measure
#   it (`gpc__cycles_elapsed.avg.per_second`) and set the rate against the peak at that
#   clock; under CUPTI no clock is measured, and an NVML sample taken outside the kernel is
#   not its clock.
# - A change distinguishable within one batch may still be within the variation between
#   runs: set it against a move you measured between two calls before calling it a fall or
#   a rise, and say when it is about that size.
# - TF32 is opt-in in PyTorch for matmuls: check it is on by its numbers, not its name.
#
# ## Try it
#
# - Profile `sweep_tflops` with `configs=SIZES` in one call (as section 3 does without
#   `derive_metric`): on a GPU where the counts differ, you get the kernel-count error;
#   where they divide evenly, compare the rows with section 2's -- the kernels may be
#   attributed to the wrong size.
# - Add `"fp8"` (`torch.float8_e4m3fn`, via `torch._scaled_mm`) on a Hopper GPU and set
#   it against the datasheet's fp8 peak.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`: `derive_metric`, `normalize_against`, `combine_kernel_metrics`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [Profiling results: what normalisation changes](https://docs.nvidia.com/nsight-python/overview/profiling_results.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
