# %% [markdown]
# # 05 · Precision sweeps: fp32, TF32, fp16 and bf16 against the datasheet
#
# **What you will learn**
# - how to sweep matrix sizes and precisions in one benchmark, with one annotation per
#   precision;
# - why a sweep over sizes can fail with *"Expect same number of kernels per run"*
#   -- and the fix: one profiled call per size;
# - `derive_metric`, to get TFLOP/s as a metric of its own, and `normalize_against`, to
#   get times relative to fp32 -- and the trap in normalisation: **only `AvgValue` is
#   divided**, `StdDev`, the CI and `Unit` still describe raw nanoseconds;
# - how TF32 is switched on in PyTorch, and how to check that it really is on;
# - where each precision lands against this GPU's datasheet peak (plot and table).
#
# TF32 and bf16 need compute capability ≥ 8.0 (Ampere or newer). On a T4 (7.5) they
# are left out, with the reason printed -- no row is faked. Runs on either backend.

# %%
{{SETUP}}

# %%
import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch

from nspy_tutorial.profiling import (kernel_counts, predicted_kernel_count_error, profile_per_config,
                                     sum_kernels, tflops)

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
SIZES = [256, 512, 1024, 2048, 4096, 8192]
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
PRECISIONS = []
if ENV.facts:
    # three n x n fp32 matrices must fit comfortably: keep them under a quarter of memory
    SIZES = [n for n in SIZES if 3 * 4 * n * n < ENV.facts.memory_bytes / 4]
    ampere = ENV.facts.compute_capability >= (8, 0)
    PRECISIONS = ["fp32", "tf32", "fp16", "bf16"] if ampere else ["fp32", "fp16"]
    if not ampere:
        print(f"TF32 and bf16 left out: they need compute capability >= 8.0, this GPU is "
              f"{ENV.facts.compute_capability[0]}.{ENV.facts.compute_capability[1]}")
    print("sizes:", SIZES, " precisions:", PRECISIONS)

# %% [markdown]
# ## 1. TF32: how it is switched on, and a check that it is on
#
# On Ampere and newer GPUs, fp32 matmuls *can* run on tensor cores in TF32 (10-bit
# mantissa inputs, fp32 accumulate). PyTorch leaves it **off** for matmuls by default;
# `torch.backends.cuda.matmul.allow_tf32 = True` (or
# `torch.set_float32_matmul_precision("high")`) switches it on.
#
# The kernel name hints at it, but the reliable check is numerical: TF32 rounds the
# inputs, so its error against a float64 reference is about a thousand times larger
# than plain fp32's.

# %%
def matmul_error(allow_tf32: bool, n: int = 1024) -> float:
    """Max relative error of an fp32 matmul against float64, with TF32 on or off."""
    torch.manual_seed(0)
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    try:
        got = (a @ b).double()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    ref = a.double() @ b.double()
    return float(((got - ref).abs().max() / ref.abs().max()).item())


with nt.section("1. TF32 is really on when switched on") as s:
    ENV.require_compute_capability((8, 0), "TF32")
    nt.claim(torch.backends.cuda.matmul.allow_tf32 is False, "PyTorch's default leaves TF32 off for matmuls")
    e32, e_tf32 = matmul_error(False), matmul_error(True)
    print(f"  max relative error vs float64: fp32 {e32:.1e}, TF32 {e_tf32:.1e}")
    nt.claim(e_tf32 > 30 * e32, "TF32 is on: its error is far larger than fp32's", f"{e_tf32 / e32:.0f}x")
    s.result = f"TF32 error {e_tf32:.1e} vs fp32 {e32:.1e} ({e_tf32 / e32:.0f}x): TF32 really switched on"

# %% [markdown]
# ## 2. The benchmark, and why we profile one size at a time
#
# One function, one annotation per precision; TF32 is switched on only around its own
# annotation. `derive_metric=tflops` receives the measured `gpu__time_duration.sum`
# followed by the function's arguments (`n`) and returns `(value, "TFLOP/s")`; the
# DataFrame then has a second metric, `tflops`, next to the time.
#
# nsight-python requires **each annotation to launch the same number of kernels in
# every configuration and run**: it divides the number of kernels an annotation
# launched in the whole call by (configurations × runs). cuBLAS picks its algorithm by
# size and GPU, and some algorithms launch more than one kernel (the names are printed
# below, for the sizes where that happens on your GPU). Sweeping
# all sizes in one call then raises *"Expect same number of kernels per run. Got average
# of 1.33 per run"* (that exact message was seen on an H200 for sizes 512/2048/8192) --
# or silently mixes kernels up when the totals happen to divide evenly.
#
# Options the nsight-python docs give: `combine_kernel_metrics` (sums the kernels of a
# run, but still needs equal counts), `ignore_kernel_list` (drop a helper kernel by
# name; names differ by GPU), `replay_mode="range"` (Nsight Compute only: one result
# per range). The portable fix is **one profiled call per size**
# (`nspy_tutorial.profiling.profile_per_config`): then only the runs of one size must
# agree, which they do. Section 3 shows what happens on your GPU either way.

# %%
def make_sweep_body():
    def sweep(n: int) -> None:  # a fresh function object for each decorator
        inputs = {p: (torch.randn(n, n, device="cuda", dtype=DTYPES[p]),
                      torch.randn(n, n, device="cuda", dtype=DTYPES[p])) for p in PRECISIONS}
        for p in PRECISIONS:
            a, b = inputs[p]
            torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
            with nsight.annotate(p):
                _ = a @ b
        torch.backends.cuda.matmul.allow_tf32 = False
    return sweep


RUNS = 5
sweep_tflops = nsight.analyze.kernel(runs=RUNS, derive_metric=tflops, thermal_mode="off", verbosity=SILENT,
                                     combine_kernel_metrics=sum_kernels)(make_sweep_body())
sweep_normalized = nsight.analyze.kernel(runs=RUNS, normalize_against="fp32", thermal_mode="off",
                                         verbosity=SILENT, combine_kernel_metrics=sum_kernels)(make_sweep_body())

with nt.section("2. Sweep sizes one call per size, with a derived TFLOP/s metric") as s:
    ENV.require("profiler")
    df = profile_per_config(sweep_tflops, SIZES)
    TF = df[df.Metric == "tflops"].pivot(index="n", columns="Annotation", values="AvgValue")[PRECISIONS]
    TIMES = df[df.Metric == "gpu__time_duration.sum"]
    COUNTS = TIMES.assign(kernels=kernel_counts(TIMES)).pivot(index="n", columns="Annotation", values="kernels")[PRECISIONS]
    print("  TFLOP/s (derive_metric):")
    print(TF.to_string(float_format=lambda v: f"{v:8.1f}"))
    print("\n  kernels per annotation and run:")
    print(COUNTS.to_string())
    for _, r in TIMES[kernel_counts(TIMES) > 1].iterrows():
        print(f"  {r.Annotation} n={r.n}: " + " | ".join(k[:60] for k in r.Kernel.split("|")))
    derived = df[df.Metric == "tflops"].merge(TIMES[["Annotation", "n", "AvgValue"]], on=["Annotation", "n"],
                                              suffixes=("", "_ns"))
    # nsight derives per run, then averages: the mean of 2n^3/t is not 2n^3/mean(t), so allow 5 %
    nt.claim(np.allclose(derived.AvgValue, 2 * derived.n**3 / derived.AvgValue_ns / 1e3, rtol=0.05),
             "the tflops metric is 2 n^3 / time, computed per run by derive_metric")
    nt.claim((df[df.Metric == "tflops"].Unit == "TFLOP/s").all(), "the derived metric carries the unit we returned")
    big = SIZES[-1]
    s.result = f"n={big}: " + ", ".join(f"{p} {TF.loc[big, p]:.1f}" for p in PRECISIONS) + " TFLOP/s"

# %% [markdown]
# ## 3. One call for all sizes: does the kernel-count check bite on this GPU?
#
# From the per-size kernel counts we can *predict* whether one call over all sizes
# passes nsight-python's check, then try it. The prediction is checked against what
# actually happens, on your GPU.

# %%
with nt.section("3. One call over all sizes: predicted vs observed") as s:
    ENV.require("profiler")
    all_at_once = nsight.analyze.kernel(configs=SIZES, runs=RUNS, thermal_mode="off", verbosity=SILENT,
                                        combine_kernel_metrics=sum_kernels)(make_sweep_body())
    predicted = {p: predicted_kernel_count_error(list(COUNTS[p]), RUNS) for p in PRECISIONS}
    try:
        all_at_once()
        observed = None
    except RuntimeError as exc:
        observed = str(exc).splitlines()[0]
    print(f"  predicted to fail: {[p for p in PRECISIONS if predicted[p]] or 'none'}")
    print(f"  observed: {observed or 'no error'}")
    nt.claim(any(predicted.values()) == (observed is not None and "same number of kernels" in observed),
             "the error appears exactly when per-size kernel counts make the total indivisible")
    uneven = [p for p in PRECISIONS if COUNTS[p].nunique() > 1]
    if uneven and observed is None:
        print(f"  WARNING: counts differ by size for {uneven} but divide evenly: one call would have mixed kernels up")
    s.result = (f"kernel counts vary by size for {uneven or 'no precision'}; one call over all sizes "
                + (f"fails: {observed[:70]}" if observed else "passes"))

# %% [markdown]
# ## 4. `normalize_against="fp32"`: only `AvgValue` is divided
#
# With `normalize_against`, each `AvgValue` is divided by the fp32 `AvgValue` of the
# same configuration and metric: fp32 becomes 1.0, and fp16 at 0.1 means "ten times
# faster". The easy misreading: `StdDev`, `CI95_Lower/Upper`, `RelativeStdDevPct` and
# `Unit` are **not** normalised -- they still describe raw nanoseconds. The checks below
# rebuild the raw mean from the `NormalizationValue` column nsight-python leaves behind
# and show that every other statistic belongs to it.

# %%
with nt.section("4. Normalisation divides AvgValue only") as s:
    ENV.require("profiler")
    rd = profile_per_config(sweep_normalized, SIZES)
    cols = ["Annotation", "n", "AvgValue", "StdDev", "CI95_Lower", "CI95_Upper", "Unit", "Normalized"]
    nt.show(rd[rd.Annotation != "fp32"], cols, fmt="{:,.3f}")
    raw_mean = rd.AvgValue * rd.NormalizationValue
    half = 1.96 * rd.StdDev / np.sqrt(rd.NumRuns)
    nt.claim(np.allclose(rd[rd.Annotation == "fp32"].AvgValue, 1.0), "fp32 normalised against itself is exactly 1")
    nt.claim((rd.Normalized == "fp32").all(), "the Normalized column names the baseline annotation")
    nt.claim(np.allclose(rd.CI95_Lower, raw_mean - half) and np.allclose(rd.CI95_Upper, raw_mean + half),
             "CI95 bounds are still raw nanoseconds around the un-normalised mean")
    nt.claim(np.allclose(rd.RelativeStdDevPct, 100 * rd.StdDev / raw_mean),
             "RelativeStdDevPct is relative to the raw mean, not to the ratio")
    nt.claim((rd.Unit == "ns").all(), "Unit still says ns although AvgValue is now a ratio")
    other = rd[rd.Annotation != "fp32"]
    nt.claim((other.AvgValue < other.CI95_Lower).all(),
             "so the 'CI' of a normalised row does not even contain its AvgValue")
    fastest = other.loc[other.AvgValue.idxmin()]
    s.result = f"{fastest.Annotation} at n={fastest.n} takes {fastest.AvgValue:.3f}x the fp32 time; stats stay in ns"

# %% [markdown]
# ## 5. TFLOP/s against the datasheet peaks
#
# Each precision's measured TFLOP/s by size, with this GPU's datasheet peak as a dashed
# line of the same colour. Peaks come from the table in `nspy_tutorial` (dense, boost
# clock, fp32 accumulate for fp16), looked up by device name; for an unknown GPU the
# lines are simply absent.

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
    ax.set_xscale("log", base=2); ax.set_yscale("log")
    ax.set_xlabel("n (n x n x n matmul)"); ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{ENV.gpu_name}: measured (solid) vs datasheet peak (dashed)")
    ax.legend(); plt.tight_layout(); plt.show()
    if pct:
        print("  % of datasheet peak:")
        print(pd.DataFrame(pct).to_string(float_format=lambda v: f"{v:6.1f}"))
        for p in pct:
            nt.claim(pct[p].max() < 110, f"{p} stays below its datasheet peak", f"max {pct[p].max():.0f}%")
    big = SIZES[-1]
    if pct:
        s.result = f"n={big}: " + ", ".join(f"{p} {pct[p].loc[big]:.0f}%" for p in pct) + f" of {sheet.gpu} peak"
    else:
        s.result = f"{ENV.gpu_name} not in the datasheet table: measured only, no % of peak"

# %% [markdown]
# ## Takeaways
#
# - Sweep sizes with **one profiled call per size** when library kernels are involved:
#   the kernel count per annotation must be the same in every configuration of a call.
# - `derive_metric` adds a metric computed per run; return `(value, unit)`.
# - After `normalize_against`, only `AvgValue` is a ratio. Read spread from the
#   un-normalised run.
# - Small matrices are far from peak on any GPU; the gap closes with size, and tensor-core
#   precisions (TF32, fp16, bf16) reach many times the fp32 rate.
# - TF32 is opt-in in PyTorch for matmuls: check it is on by its numbers, not its name.

# %%
nt.summary();
