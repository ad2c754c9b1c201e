# %% [markdown]
# # 05 · Precision sweeps: fp32 vs fp16 first, then TF32, bf16 and FP8, against the datasheet
#
# **What you will learn**
# - seed 000's sweep: one benchmark, one annotation per precision (fp32 and fp16), matrix sizes
#   swept, and `derive_metric` to get TFLOP/s as a metric of its own;
# - why nsight-python can refuse a sweep over sizes in one call (its kernel-count check), and
#   the fix: one profiled call per size;
# - the sweep widened: TF32 (how it is switched on in PyTorch, and a check by its numbers that
#   it is on), bf16, and FP8 on GPUs that have FP8 tensor cores (`torch._scaled_mm`, e4m3);
# - `normalize_against`, and its trap: **only `AvgValue` is divided**;
# - where each precision lands against this GPU's datasheet peak, and at which clock: the one
#   the datasheet assumes, the one the kernels ran at (measured under Nsight Compute; under
#   CUPTI, NVML's reading during the call, said as such);
# - how to read a change between two sizes against the run-to-run band of this run.
#
# TF32 and bf16 need compute capability ≥ 8.0 (Ampere or newer), FP8 ≥ 8.9 (Ada, Hopper): on
# a T4 (7.5) those sections are SKIPPED with the reason -- no row is faked. Runs on either
# backend. On Colab each notebook runs in a fresh runtime of its own: the setup cell below
# installs what this notebook needs, and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import re

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd

from nspy_tutorial import ncu_cli
from nspy_tutorial.clock import Sampler
from nspy_tutorial.lessons import run_to_run_pct, welch_shift

SILENT = nsight.VerbosityLevel.SILENT
QUIET = dict(thermal_mode="off", verbosity=SILENT)  # every profile: no thermal pauses, no output
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
SIZES, RUNS = [256, 512, 1024, 2048, 4096, 8192], 5
if ENV.facts:  # three n x n fp32 matrices must fit comfortably: under a quarter of the memory
    SIZES = [n for n in SIZES if 3 * 4 * n * n < ENV.facts.memory_bytes / 4]
SHEET = ENV.datasheet
SWEEP = TF = COUNTS = BAND = None  # made by sections 1 (3), 4 and 5; a later section needs them


def add(a: float, b: float) -> float:
    """combine_kernel_metrics: sums the kernels of one run (cuBLAS may split a matmul)."""
    return a + b


def tflops(time_ns: float, n: int) -> tuple[float, str]:
    """derive_metric: 2 n^3 flops (a multiply and an add per term) over the measured time."""
    return 2 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s"


def rows_of(results) -> pd.DataFrame:
    """to_dataframe(), refusing an empty table (1.1.0's answer when no kernel ran; 1.1.1 raises)."""
    table = results.to_dataframe()
    if table.empty:
        raise RuntimeError("No kernels were profiled: nsight-python returned an empty table")
    return table


def one_call_per_size(bench, sizes: list[int]) -> pd.DataFrame:
    """Profile each size in its own call (section 4 shows why), with NVML's SM clock sampled
    during the call: the clock the kernels ran near, not measured by CUPTI (``nvml_mhz``)."""
    tables = []
    for n in sizes:
        with Sampler() as clock:
            table = rows_of(bench(configs=[n]))
        tables.append(table.assign(nvml_mhz=clock.mhz[0] if clock.mhz else np.nan))
    return pd.concat(tables, ignore_index=True)


# %% [markdown]
# The kernels, written once in `precision_kernels.py` (`%%writefile`): `sweep(n)` makes two
# n × n matrices per precision, then multiplies each pair inside an annotation named after
# its precision; `PRECISIONS` starts as seed 000's pair, fp32 and fp16. `fp8_matmul` is
# section 7's.

# %% writefile precision_kernels.py
"""Notebook 05's kernels: n x n matmuls in fp32 and fp16 (seed 000's sweep), TF32, bf16 and FP8."""

import nsight
import torch

DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
}
PRECISIONS = ["fp32", "fp16"]  # section 3 adds "tf32" and "bf16"
# PyTorch >= 2.9 switches TF32 with fp32_precision ("tf32"/"ieee"); before, with allow_tf32
TF32_SWITCH = (
    "fp32_precision" if hasattr(torch.backends.cuda.matmul, "fp32_precision") else "allow_tf32"
)


def set_tf32(on: bool) -> None:
    if TF32_SWITCH == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = on


def sweep(n: int) -> None:
    """One annotated n x n matmul per precision; TF32 switched on only around its own."""
    pairs = {
        p: [torch.randn(n, n, device="cuda", dtype=DTYPES[p]) for _ in "ab"] for p in PRECISIONS
    }
    for p, (a, b) in pairs.items():
        set_tf32(p == "tf32")
        with nsight.annotate(p):
            _ = a @ b
    set_tf32(False)


def fp8_matmul(n: int) -> None:
    """Section 7: an e4m3 GEMM, scales 1.0 (float32 scalars on the GPU), out in bf16; cuBLAS wants
    the second operand column-major: the .t() of a row-major tensor."""
    a, b = (torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn) for _ in "ab")
    one = torch.ones((), device="cuda")
    with nsight.annotate("fp8"):
        _ = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


# %%
import precision_kernels as pk


def versus_datasheet(rates: pd.DataFrame, nvml_mhz) -> pd.DataFrame:
    """% of each precision's datasheet peak (columns: precisions, rows: n), with the clock basis: the
    clock the datasheet assumes, NVML's during the calls, a clock that setup found held. Plotted."""
    peaks = {p: SHEET.peak_tflops(p).value for p in rates} if SHEET else {}
    pct = pd.DataFrame({p: 100 * rates[p] / peak for p, peak in peaks.items() if peak})
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, p in enumerate(rates):
        ax.plot(rates.index, rates[p], "o-", color=f"C{i}", label=p)
        if peaks.get(p):
            ax.axhline(peaks[p], color=f"C{i}", ls="--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="n (n x n x n matmul)", ylabel="TFLOP/s")
    ax.set_title(f"{ENV.gpu_name}: measured (solid) vs datasheet peak (dashed)")
    ax.legend()
    plt.show()
    if pct.empty:
        print(f"  {ENV.gpu_name} is not in the datasheet table: no % of peak")
        return pct
    clocks = ", ".join(f"{p} {SHEET.peak_clock_mhz(p) or float('nan'):,.0f}" for p in pct)
    print(f"  % of the datasheet peak, which assumes an SM clock of (MHz): {clocks}")
    seen = (
        f"median {np.nanmedian(nvml_mhz):,.0f} MHz" if np.isfinite(nvml_mhz).any() else "not read"
    )
    print(
        f"  NVML's SM clock in the calls, gaps between kernels included: {seen} (a kernel's own: 04, 06)"
    )
    if ENV.clock and ENV.clock.state == "held":
        held = f"HELD at {ENV.clock.held_mhz:,} MHz, {ENV.clock.ratio:.0%} of its maximum"
        print(
            f"  setup found the SM clock {held}: these figures sit under the datasheet by about that"
        )
    print(pct.to_string(float_format="{:6.1f}".format))
    for p in pct:
        nt.claim(
            pct[p].max() <= 100, f"{p} never exceeds its datasheet peak", f"max {pct[p].max():.1f}%"
        )
    return pct


# %% [markdown]
# ## 1. Seed 000's sweep: fp32 vs fp16, TFLOP/s by size
#
# The decorator gets `derive_metric=tflops`, a function we write: nsight-python calls it for
# every run with the measured metric (`gpu__time_duration.sum`, in ns) followed by the
# benchmark's arguments (`n`), and adds what it returns -- `(value, "TFLOP/s")` -- as a second
# metric named after the function. cuBLAS may launch more than one kernel for one matmul:
# `combine_kernel_metrics=add` sums them. Each size is profiled in a call of its own (section 4
# shows why), and NVML's SM clock is sampled while each call runs (`clock.Sampler`): under
# CUPTI nothing else says at what clock the kernels ran.
#
# What to look for: fp16 runs on the
# [tensor cores](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#tensor-core)
# (units that multiply small matrices in one step), fp32 does not, so fp16 pulls ahead with
# size; small matrices are far from any peak. The % of the datasheet is set at the clock the
# datasheet assumes, printed beside it.

# %%
seed_sweep = nsight.analyze.kernel(
    runs=RUNS, derive_metric=tflops, combine_kernel_metrics=add, **QUIET
)(pk.sweep)

with nt.section("1. Seed 000's sweep: fp32 vs fp16") as s:
    ENV.require("profiler")
    SWEEP = one_call_per_size(seed_sweep, SIZES)
    TF = SWEEP[SWEEP.Metric == "tflops"].pivot(index="n", columns="Annotation", values="AvgValue")
    TF = TF[pk.PRECISIONS]
    print(nt.rules(ENV.backend) + "\n  TFLOP/s (derive_metric, mean over the runs):")
    print(TF.to_string(float_format="{:8.1f}".format))
    timed, derived = (
        SWEEP[SWEEP.Metric == m].set_index(["Annotation", "n"]) for m in (TIME, "tflops")
    )
    # TFLOP/s of each size's fastest run
    fastest = 2 * timed.index.get_level_values("n") ** 3 / timed.MinValue / 1e3
    nt.claim(
        np.allclose(derived.MaxValue / fastest, 1),
        "derive_metric runs per run: the tflops maximum is 2 n^3 / (the fastest run)",
    )
    big = SIZES[-1]
    nt.claim(TF.fp16[big] > TF.fp32[big], "fp16 (tensor cores) beats fp32 at the largest size")
    pct = versus_datasheet(TF, SWEEP.nvml_mhz.to_numpy())
    share = ", ".join(f"{p} {pct[p][big]:.0f}%" for p in pct) or "no datasheet peak"
    s.result = f"n={big}: fp32 {TF.fp32[big]:.1f}, fp16 {TF.fp16[big]:.1f} TFLOP/s ({share} of the datasheet)"

# %% [markdown]
# ## 2. TF32: how it is switched on, and a check that it is on
#
# On Ampere and newer GPUs, fp32 matmuls *can* run on tensor cores in
# [TF32](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#tf32) (inputs
# rounded to a 10-bit mantissa, fp32 keeps 23; fp32 accumulate). PyTorch leaves it **off** for
# matmuls by default. The switch is `torch.backends.cuda.matmul.fp32_precision = "tf32"` in
# PyTorch 2.9 and newer, `allow_tf32 = True` before (`pk.set_tf32` picks the one this torch has).
# The kernel name hints at it, but the reliable check is numerical: the same fp32 matmul against
# a float64 reference -- switched on, TF32's rounding makes its error many times fp32's.


# %%
import torch


def matmul_error(tf32: bool | None, n: int = 1024) -> float:
    """Max relative error of an fp32 matmul against float64: TF32 on, off, or (None) as configured."""
    torch.manual_seed(0)
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    if tf32 is not None:
        pk.set_tf32(tf32)
    try:
        got = (a @ b).double()
    finally:
        pk.set_tf32(False)
    ref = a.double() @ b.double()
    return float(((got - ref).abs().max() / ref.abs().max()).item())


with nt.section("2. TF32 is really on when switched on") as s:
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
    s.result = f"TF32's error {e_tf32 / e32:.0f}x fp32's, switched with {pk.TF32_SWITCH}"

# %% [markdown]
# ## 3. The sweep widened: TF32 and bf16
#
# The same function, two more annotations: `pk.PRECISIONS` gets `"tf32"` and `"bf16"`, and the
# sweep runs again, one call per size. The kernel names and counts show what cuBLAS chose; a
# size where one matmul takes two kernels matters in section 4. Sections 4 to 6 read this wider
# sweep where it ran, seed 000's otherwise.

# %%
with nt.section("3. The sweep widened: TF32 and bf16") as s:
    ENV.require_compute_capability((8, 0), "the widened sweep (TF32, bf16)")
    ENV.require("profiler")
    pk.PRECISIONS = ["fp32", "fp16", "tf32", "bf16"]
    SWEEP = one_call_per_size(seed_sweep, SIZES)
    TF = SWEEP[SWEEP.Metric == "tflops"].pivot(index="n", columns="Annotation", values="AvgValue")
    TF = TF[pk.PRECISIONS]
    print(nt.rules(ENV.backend) + "\n  TFLOP/s:\n" + TF.to_string(float_format="{:8.1f}".format))
    pct = versus_datasheet(TF, SWEEP.nvml_mhz.to_numpy())
    s.result = (
        f"n={SIZES[-1]}: " + ", ".join(f"{p} {TF[p][SIZES[-1]]:.0f}" for p in TF) + " TFLOP/s"
    )

# %% [markdown]
# ## 4. One call for all sizes: does the kernel-count check bite on this GPU?
#
# nsight-python requires **each annotation to launch the same number of kernels in every
# configuration and run**: it divides the number of kernels an annotation launched in the whole
# call by (configurations × runs) and refuses the call unless that is whole. cuBLAS picks its
# algorithm by size and GPU, and some algorithms launch two kernels (the cell names them, for
# the sizes where that happens on your GPU). From the per-size counts we predict whether one
# call over all sizes passes -- `one_call_fails` writes the rule out -- then try it.
#
# The refusal is recognised by what the reader sees: a `RuntimeError` whose message is the
# kernel-count one, as each version words it (1.1.0: *"Expect same number of kernels per run.
# Got average of … per run"*; 1.1.1 reports the kernel and run counts and suggests warming up
# code that autotunes on its first call). Any other error -- from PyTorch, CUDA -- is not a
# refusal and stops the section. Where counts differ by size but happen to divide evenly,
# nsight-python accepts the call and may mix kernels up: the cell warns.

# %%
REFUSED = re.compile(r"number of kernels per run|autotun", re.I)  # 1.1.0's words, then 1.1.1's


def refusal(call) -> str | None:
    """None if call() returned; the first line of nsight-python's kernel-count refusal if it raised one."""
    try:
        call()
    except RuntimeError as exc:
        if not REFUSED.search(str(exc)):
            raise
        return f"RuntimeError: {str(exc).splitlines()[0]}"
    return None


def one_call_fails(counts_per_size: list[int], runs: int) -> bool:
    """nsight divides an annotation's kernels in the call by (configs x runs): refused unless whole."""
    return (sum(counts_per_size) * runs) % (len(counts_per_size) * runs) != 0


with nt.section("4. One call over all sizes: predicted vs observed") as s:
    ENV.require("profiler")
    times = nt.needs(SWEEP, section="1")
    times = times[times.Metric == TIME]
    COUNTS = times.assign(kernels=times.Kernel.str.count(r"\|") + 1)
    COUNTS = COUNTS.pivot(index="n", columns="Annotation", values="kernels")[pk.PRECISIONS]
    print("  kernels per annotation and run:\n" + COUNTS.to_string())
    for r in times[times.Kernel.str.contains("|", regex=False)].itertuples():
        names = [nt.short_kernel_name(k)[:100] for k in r.Kernel.split("|")]
        print(f"  {r.Annotation} n={r.n}:", *names, sep="\n    ")
    all_at_once = nsight.analyze.kernel(
        configs=SIZES, runs=RUNS, **QUIET, combine_kernel_metrics=add
    )(pk.sweep)
    predicted = [p for p in pk.PRECISIONS if one_call_fails(list(COUNTS[p]), RUNS)]
    observed = refusal(all_at_once)
    print(f"  predicted to fail: {predicted or 'none'}\n  observed: {observed or 'a table'}")
    nt.claim(
        bool(predicted) == (observed is not None),
        "nsight-python refuses the call exactly when per-size kernel counts make the total indivisible",
        observed or "no refusal",
    )
    uneven = [p for p in pk.PRECISIONS if COUNTS[p].nunique() > 1]
    if uneven and observed is None:
        print(f"  WARNING: {uneven}: counts differ by size yet divide evenly; kernels may mix up")
    verdict = "refused, as predicted" if observed else "passes, as predicted"
    s.result = f"counts vary by size for {', '.join(uneven) or 'no precision'}; one call {verdict}"

# %% [markdown]
# ## 5. `normalize_against="fp32"`: what is divided, and what is not
#
# With `normalize_against`, each `AvgValue` is divided by the fp32 `AvgValue` of the same
# configuration and metric: fp32 becomes 1.0, and 0.1 means "a tenth of fp32's time". The two
# largest sizes whose kernel counts agree go in one call. **Divided**: `AvgValue` only (the
# divisor is kept in `NormalizationValue`, raw ns); `Geomean` is built from the divided values.
# **Not divided, still raw ns**: `MinValue`, `MaxValue`, `StdDev`, the CI -- and `Unit` still
# says ns. `RelativeStdDevPct` is unitless, computed before the division: still the row's
# spread. The checks rebuild the raw mean (`AvgValue × NormalizationValue`) and show which
# statistic belongs to which.
#
# This call also measures the same kernels a second time, a call apart from the sweep: how far
# each kernel's mean moved between the two calls, with the uncertainty of that move, is **the
# run-to-run band** (notebook 03's `run_to_run_pct`: the shift between two batches of one kernel
# plus its 95 % Welch half-width, in % of the first). Each precision's band (the wider of its two
# sizes) is the yardstick for that precision in section 6: one jumpy kernel does not blur the others.


# %%
def check_normalised(rd: pd.DataFrame, times: pd.DataFrame) -> tuple[float, str]:
    """The claims on a table made with normalize_against="fp32"; ``times``: the sweep's time rows.
    Returns each precision's run-to-run band (%, the widest of its sizes measured in both calls), and the
    precision with the widest."""
    shown = "Annotation n AvgValue Geomean NormalizationValue MinValue StdDev Unit".split()
    raw_ns = {c: "{:,.0f}".format for c in ("NormalizationValue", "MinValue", "StdDev")}
    print(rd[shown].to_string(index=False, formatters=raw_ns, float_format="{:.3f}".format))
    raw_mean = rd.AvgValue * rd.NormalizationValue
    half = 1.96 * rd.StdDev / np.sqrt(rd.NumRuns)
    nt.claim(
        np.allclose(rd[rd.Annotation == "fp32"].AvgValue, 1.0),
        "fp32 normalised against itself is 1",
    )
    nt.claim(
        ((rd.MinValue <= raw_mean * (1 + 1e-9)) & (raw_mean <= rd.MaxValue * (1 + 1e-9))).all()
        and np.allclose(rd.CI95_Lower, raw_mean - half),
        "MinValue, MaxValue and the CI are raw ns: they bracket the un-normalised mean",
    )
    nt.claim(
        np.allclose(rd.RelativeStdDevPct, 100 * rd.StdDev / raw_mean),
        "RelativeStdDevPct is StdDev over the raw mean: a unitless spread, still valid",
    )
    geo = rd.groupby("Annotation").AvgValue.transform(lambda v: np.exp(np.log(v).mean()))
    nt.claim(
        np.allclose(rd.Geomean, geo), "Geomean is the geometric mean of the normalised AvgValue"
    )
    nt.claim(
        rd.Unit.isin(["ns", "nsecond"]).all(), "Unit still names ns although AvgValue is a ratio"
    )
    first = times.set_index(["Annotation", "n"]).loc[list(zip(rd.Annotation, rd.n))]
    back = raw_mean.to_numpy() / first.AvgValue.to_numpy()
    nt.claim(
        (abs(back - 1) < 0.1).all(),
        "AvgValue x NormalizationValue gives back the sweep's raw mean time (another call: within 10 %)",
        f"{back.min():.3f}-{back.max():.3f}",
    )
    bands = {}  # each precision's widest band over the sizes measured twice
    for a, m, sd, k in zip(first.itertuples(), raw_mean, rd.StdDev, rd.NumRuns):
        band = run_to_run_pct((a.AvgValue, a.StdDev, a.NumRuns), (m, sd, k))
        bands[a.Index[0]] = max(band, bands.get(a.Index[0], 0.0))
    print(
        "  run-to-run band (sweep vs this call):",
        ", ".join(f"{p} {b:.2f}%" for p, b in bands.items()),
    )
    return bands, max(bands, key=bands.get)


with nt.section("5. Normalisation divides AvgValue only") as s:
    ENV.require("profiler")
    counts = nt.needs(COUNTS, section="4")
    same = [n for n in SIZES if (counts.loc[n] == counts.loc[SIZES[-1]]).all()]
    pair = same[-2:]  # two sizes whose kernel counts agree: a call nsight-python accepts
    NORMALIZED = rows_of(
        nsight.analyze.kernel(
            configs=pair, runs=RUNS, normalize_against="fp32", **QUIET, combine_kernel_metrics=add
        )(pk.sweep)()
    )
    print(f"  sizes in one call: {pair}\n" + nt.rules(ENV.backend))
    BAND, BAND_OF = check_normalised(NORMALIZED, SWEEP[SWEEP.Metric == TIME])
    fastest = NORMALIZED.loc[NORMALIZED[NORMALIZED.Annotation != "fp32"].AvgValue.idxmin()]
    s.result = (
        f"{fastest.Annotation} n={fastest.n}: {fastest.AvgValue:.3f}x fp32's time; Min/Max/StdDev/CI stay ns; "
        f"run-to-run band up to {BAND[BAND_OF]:.2f}% ({BAND_OF})"
    )

# %% [markdown]
# ## 6. The clock beside the largest sizes, and the run-to-run band
#
# A rate that falls from one size to the next means little until the clock is known. For the
# two largest sizes the cell prints, per precision, the change of TFLOP/s with its Welch test
# (notebook 03's `welch_shift`), [Holm](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#holm-correction)-corrected
# over the precisions (Holm: multiply the smallest of k p-values by k, the next by k − 1, …, so
# the family keeps its 5 % level), and the clock beside it:
#
# - **under the Nsight Compute backend**: the clock each kernel ran at
#   (`gpc__cycles_elapsed.avg.per_second`, one more profile of the two sizes; a run of several
#   kernels weighted by their times), and the % of the peak *at that clock* (peak × clock / the
#   clock the datasheet assumes); the check fails if a kernel beats it;
# - **under CUPTI**: no clock is measured. The NVML column is the SM clock sampled while the
#   call ran -- the clock the kernels ran *near*, idle gaps included; not the kernel's own.
#
# **Within a batch is not between runs.** Welch's p says a change is larger than the runs'
# scatter *within this session*; it does not cover what moves between calls -- the clock, the
# temperature. So a change distinguishable within the batch is then set against section 5's
# run-to-run band: no larger than the band, **within the run-to-run band**; larger, **rises**
# or **falls** -- with ", clock not measured" where nothing measured the clock and setup did not
# find it held: a GPU whose clock drops under a longer load (power) slows a larger size too, so
# the fall may be the clock's, not the kernel's. Section 6's clock column says which under
# Nsight Compute.


# %%
def per_run(x, y):
    """combine_kernel_metrics on two kernels' [time, SM Hz] of one run: times add, clock by time."""
    out = x + y
    out[1] = (x[1] * x[0] + y[1] * y[0]) / out[0]
    return out


def beside_the_clock(table: pd.DataFrame, peaks: dict) -> pd.DataFrame:
    """Per precision and size: TFLOP/s and its sd, the SM clock where the table has it, NVML's during
    the call, % of the datasheet and of the peak at the measured clock. ``peaks``: precision ->
    (datasheet TFLOP/s, the SM clock in MHz it assumes)."""
    t = table[table.Metric == TIME].reset_index(drop=True)
    seconds = np.array([ncu_cli.to_base_units(v, u) for v, u in zip(t.AvgValue, t.Unit)])
    out = pd.DataFrame(
        {"precision": t.Annotation, "n": t.n, "TFLOP/s": 2 * t.n**3 / seconds / 1e12}
    )
    out["sd"], out["runs"] = out["TFLOP/s"] * t.StdDev / t.AvgValue, t.NumRuns
    hz = table[table.Metric == SM_HZ].set_index(["Annotation", "n"])
    hz = {k: ncu_cli.to_base_units(r.AvgValue, r.Unit) / 1e6 for k, r in hz.iterrows()}
    out["SM MHz"] = [hz.get(k, np.nan) for k in zip(t.Annotation, t.n)]
    out["NVML MHz"] = t.get("nvml_mhz", np.nan)
    peak, sheet_mhz = (
        out.precision.map(lambda p: peaks.get(p, (None, None))[i]).astype(float) for i in (0, 1)
    )
    out["% datasheet"] = 100 * out["TFLOP/s"] / peak
    out["% at its clock"] = out["% datasheet"] * sheet_mhz / out["SM MHz"]
    return out


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values."""
    p, order = np.asarray(p, float), np.argsort(p)
    adjusted = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    return np.minimum(1, adjusted)[np.argsort(order)]


def rate_change(
    clock: pd.DataFrame, small: int, large: int, band: dict, held: bool
) -> pd.DataFrame:
    """Per precision, the rate at ``large`` against ``small``: change %, Welch's p, Holm, the clock
    beside it, and the verdict against its own run-to-run ``band`` (%, by precision); a rise or fall says when no
    clock was measured and none was ``held``: then the clock may be its cause."""
    rows = []
    for p, g in clock.groupby("precision", sort=False):
        a, b = g.set_index("n").loc[small], g.set_index("n").loc[large]
        change, _, welch_p = welch_shift(*((r["TFLOP/s"], r.sd, r.runs) for r in (a, b)))
        clock_pct = 100 * (b["SM MHz"] / a["SM MHz"] - 1)
        rows.append({"precision": p, "rate %": change, "p": welch_p, "clock %": clock_pct})
    table = pd.DataFrame(rows)
    table["p_holm"] = holm(table.p)
    word = np.where(table["rate %"] < 0, "falls", "rises")
    word = np.where(
        table["clock %"].isna() & (not held), np.char.add(word, ", clock not measured"), word
    )
    inside = table["rate %"].abs() <= table.precision.map(
        band
    )  # each precision against its own band
    table["verdict"] = np.where(
        ~(table.p_holm < 0.05),
        "not distinguishable",
        np.where(inside, "within the run-to-run band", word),
    )
    return table


with nt.section("6. The clock beside the largest sizes") as s:
    ENV.require("profiler")
    small, large = SIZES[-2:]
    table = SWEEP[SWEEP.n.isin([small, large])]
    if ENV.backend == "ncu":  # one more profile of the two sizes, with the clock each kernel ran at
        clocked = nsight.analyze.kernel(
            runs=RUNS, metrics=[TIME, SM_HZ], **QUIET, combine_kernel_metrics=per_run
        )(pk.sweep)
        table = one_call_per_size(clocked, [small, large])
    print(nt.rules(ENV.backend))
    peaks = {
        p: (SHEET.peak_tflops(p).value, SHEET.peak_clock_mhz(p)) for p in pk.PRECISIONS if SHEET
    }
    CLOCK = beside_the_clock(table, peaks)
    print(CLOCK.drop(columns=["sd", "runs"]).to_string(index=False, float_format="{:,.1f}".format))
    band = nt.needs(BAND, section="5")
    CHANGE = rate_change(CLOCK, small, large, band, bool(ENV.clock and ENV.clock.state == "held"))
    print(
        f"\n  n={small} -> {large}, p Holm-adjusted; each against its own run-to-run band (section 5):"
    )
    print(CHANGE.to_string(index=False, float_format="{:,.3g}".format))
    if CLOCK["% at its clock"].notna().any():
        nt.claim(
            (CLOCK["% at its clock"].dropna() <= 100).all(),
            "no kernel beats its datasheet peak at the clock it ran at",
            f"up to {CLOCK['% at its clock'].max():.1f}%",
        )
    said = [
        f"{r.precision} {r.verdict} ({r['rate %']:+.1f}%"
        + (f", clock {r['clock %']:+.1f}%)" if np.isfinite(r["clock %"]) else ")")
        for _, r in CHANGE[CHANGE.verdict.str.match("rises|falls")].iterrows()
    ]
    s.result = f"n={small}->{large}: {'; '.join(said) or 'no change'} beyond its band (up to {band[BAND_OF]:.2f}%)"

# %% [markdown]
# ## 7. FP8 where the GPU has FP8 tensor cores
#
# Ada (compute capability 8.9) and Hopper (9.0) GPUs have tensor cores for 8-bit floats. The
# format here is e4m3 (4 exponent bits, 3 mantissa bits: a largest value of 448), reached from
# PyTorch through `torch._scaled_mm`: each operand comes with a scale (the true values are the
# 8-bit ones times it); here both scales are 1.0, since `torch.randn`'s values fit e4m3's range.
# The output is bf16. One matmul at the largest size, against the FP8 datasheet peak at the clock
# it assumes, with NVML's clock during the call beside it, and against bf16 of the same size.

# %%
fp8 = nsight.analyze.kernel(runs=RUNS, derive_metric=tflops, combine_kernel_metrics=add, **QUIET)(
    pk.fp8_matmul
)

with nt.section("7. FP8 (e4m3) against its datasheet peak") as s:
    ENV.require_compute_capability((8, 9), "FP8 tensor cores")
    ENV.require("profiler")
    n = SIZES[-1]
    FP8 = one_call_per_size(fp8, [n])
    rate = FP8[FP8.Metric == "tflops"].AvgValue.iloc[0]
    print(nt.rules(ENV.backend) + f"\n  fp8 n={n}: {rate:,.1f} TFLOP/s")
    pct = versus_datasheet(pd.DataFrame({"fp8": [rate]}, index=[n]), FP8.nvml_mhz.to_numpy())
    rates = nt.needs(TF, section="1")
    other = "bf16" if "bf16" in rates else "fp16"
    nt.claim(
        rate > rates[other][n],
        f"fp8 beats {other} at n={n}",
        f"{rate / rates[other][n]:.2f}x {other}'s rate",
    )
    share = f", {pct.fp8[n]:.0f}% of the datasheet" if "fp8" in pct else ""
    s.result = f"fp8 n={n}: {rate:,.0f} TFLOP/s, {rate / rates[other][n]:.2f}x {other}{share}"

# %% [markdown]
# ## Takeaways
#
# - Start simple: one annotation per precision, a derived TFLOP/s, one profiled call per size
#   when library kernels are involved -- the kernel count per annotation must be the same in
#   every configuration of a call.
# - `derive_metric` adds a metric computed per run; return `(value, unit)`.
# - After `normalize_against`, only `AvgValue` is a ratio (and `Geomean` is built from it);
#   `MinValue`, `MaxValue`, `StdDev` and the CI are still ns.
# - Tensor-core precisions (TF32, fp16, bf16, FP8) reach many times the fp32 rate; TF32 is
#   opt-in in PyTorch: check it is on by its numbers, not its name.
# - Say the clock beside every % of peak: the datasheet's, the one the kernels ran at (measured
#   under Nsight Compute; NVML's reading under CUPTI, said as such), and a held clock if setup
#   found one.
# - A change distinguishable within one batch may still be within the run-to-run band: measure
#   the band in the same run and read every change against it.
#
# ## Try it
#
# - Profile `seed_sweep` with `configs=SIZES` in one call: on a GPU where the counts differ,
#   you get section 4's refusal; where they divide evenly, compare the rows with section 1's.
# - In `fp8_matmul`, scale `a` by 1000 before the cast (values past e4m3's largest) and compare
#   the result with a bf16 matmul: then pass `scale_a` so the values fit again.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`: `derive_metric`, `normalize_against`, `combine_kernel_metrics`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [Profiling results: what normalisation changes](https://docs.nvidia.com/nsight-python/overview/profiling_results.html) ·
# [nsight-python 1.1.1's changes](https://docs.nvidia.com/nsight-python/release_notes/topics/updates-in-nsight-python-1.1.1.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
