# %% [markdown]
# # 03 · How many runs? Spread, confidence intervals and the stability flag
#
# **What you will learn**
# - what `AvgValue`, `StdDev`, `CI95_Lower/Upper`, `RelativeStdDevPct` and
#   `StableMeasurement` are, exactly -- recomputed from the raw per-run values;
# - why nsight-python's 95 % interval (mean ± 1.96 · sd/√n) is too narrow for a handful
#   of runs, and the Student-t interval that is not;
# - why a microsecond kernel is noisier than a millisecond one, and what one slow run
#   does to the mean and the standard deviation (and what it does not do to the median);
# - how many runs a kernel needs for a target precision -- planned from a spread that
#   one outlier cannot dominate, on *your* measurements, and tried on them;
# - that such a plan describes one batch: a second batch of the same kernel can land outside
#   its interval, and one timer step is as finely as the timer can size such a shift.
#
# One measurement tells you nothing about noise. Here every kernel runs 20 times (and
# 100 times for the convergence plot). All profiles are silent
# (`verbosity=SILENT`; notebook 02 showed what nsight-python prints). Runs on either
# backend; every table says which one measured it. On Colab each notebook runs in a fresh
# runtime of its own: the setup cell below installs what this notebook needs (nothing has
# to run before it), and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import glob
import math
import os

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch
from scipy import stats

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
OUT = ""  # output_prefix is a plain string prefix; "" writes the CSVs into this notebook's work folder
SIZES = [1 << 14, 1 << 24]  # a 64 KiB and a 64 MiB vector (float32)
MATMUL_N = 2048
TARGET, STEP = (
    1.0,
    None,
)  # TARGET: the precision (%) section 5 plans for; STEP: its timer step (0: none), for section 6


def add(a: float, b: float) -> float:
    """combine_kernel_metrics: sums the kernels of one run (cuBLAS may split a matmul)."""
    return a + b


def t95(k: int) -> float:
    """Two-sided 95 % Student-t quantile for the mean of k runs (k - 1 degrees of freedom)."""
    return float(stats.t.ppf(0.975, k - 1))


def label(annotation: str, n: int) -> str:
    return f"matmul {n}x{n}x{n} fp32" if annotation == "matmul" else f"{annotation} n={n:,}"


def raw_runs(prefix: str, function: str) -> pd.DataFrame:
    """The raw per-run CSV: nsight names it <prefix>profiled_data-<function>-<k>.csv, k counting
    the calls of that decorated function; take the newest file (the work folder outlives a session)."""
    files = glob.glob(f"{prefix}profiled_data-{function}-*.csv")
    raw = pd.read_csv(max(files, key=os.path.getmtime))
    return raw.assign(kernel=[label(a, n) for a, n in zip(raw.Annotation, raw.n)])


# %% [markdown]
# ## 1. Twenty runs of three kernels
#
# A 16 K-element vector add (about a microsecond), a 16 M-element add (tens of
# microseconds to a millisecond, depending on the GPU) and a 2048-cube fp32 matmul: two
# benchmark functions, each kernel labelled with its own configuration.
# `output_csv=True` with an `output_prefix` keeps the raw per-run values next to the
# aggregated table; we use them below to check every aggregate column. The table shows
# the median and the minimum beside the mean: one slow run moves the mean, not the
# median.


# %%
def add_vectors(n: int) -> None:
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    with nsight.annotate("vector add"):
        _ = x + y


def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("matmul"):
        _ = a @ b


QUIET = dict(thermal_mode="off", verbosity=SILENT, output_csv=True)
vector_add_x20 = nsight.analyze.kernel(runs=20, output_prefix=f"{OUT}x20_", **QUIET)(add_vectors)
matmul_x20 = nsight.analyze.kernel(
    runs=20, output_prefix=f"{OUT}x20_", combine_kernel_metrics=add, **QUIET
)(matmul)
vector_add_x100 = nsight.analyze.kernel(runs=100, output_prefix=f"{OUT}x100_", **QUIET)(add_vectors)

with nt.section("1. Twenty runs: mean, median, spread and the stability flag") as s:
    ENV.require("profiler")
    df = pd.concat(
        [vector_add_x20(configs=SIZES).to_dataframe(), matmul_x20(MATMUL_N).to_dataframe()],
        ignore_index=True,
    )
    RAW = pd.concat(
        [raw_runs(f"{OUT}x20_", "add_vectors"), raw_runs(f"{OUT}x20_", "matmul")], ignore_index=True
    )
    df["kernel"] = [label(a, n) for a, n in zip(df.Annotation, df.n)]
    df["kernels"] = df.Kernel.str.count(r"\|") + 1
    df["median"] = df.kernel.map(RAW.groupby("kernel").Value.median())
    cols = [
        "kernel",
        "kernels",
        "AvgValue",
        "median",
        "MinValue",
        "StdDev",
        "CI95_Lower",
        "CI95_Upper",
        "RelativeStdDevPct",
        "StableMeasurement",
    ]
    print(nt.rules(ENV.backend))
    print("times in microseconds; 'kernels' = GPU kernels per run in the annotation")
    nt.show(
        df,
        cols,
        scale={
            c: 1e-3
            for c in ("AvgValue", "median", "MinValue", "StdDev", "CI95_Lower", "CI95_Upper")
        },
    )
    r = df.set_index("kernel")
    small, large, mm = (
        label("vector add", SIZES[0]),
        label("vector add", SIZES[1]),
        label("matmul", MATMUL_N),
    )
    s.result = (
        f"16K add mean {r.AvgValue[small] / 1e3:.2f} us (median {r['median'][small] / 1e3:.2f}, "
        f"min {r.MinValue[small] / 1e3:.2f}), RSD {r.RelativeStdDevPct[small]:.1f}%; "
        f"16M add RSD {r.RelativeStdDevPct[large]:.2f}%; matmul RSD {r.RelativeStdDevPct[mm]:.2f}%"
    )

# %% [markdown]
# ## 2. Every aggregate, recomputed from the raw runs
#
# nsight-python's aggregation (`nsight/transformation.py`) is short enough to state
# exactly, so we recompute each column from the raw CSV and compare:
#
# - `AvgValue` = mean, `StdDev` = sample standard deviation (n − 1), over `NumRuns`;
# - `CI95` = `AvgValue ± 1.96 · StdDev / √NumRuns` -- the normal approximation;
# - `RelativeStdDevPct` = `100 · StdDev / |AvgValue|`;
# - `StableMeasurement` = `RelativeStdDevPct < 2` -- *exactly* that, nothing smarter.
#
# The 1.96 is the normal distribution's 97.5 % point. With `NumRuns` runs the standard
# deviation is itself estimated, and the right multiplier is Student's t with
# `NumRuns − 1` degrees of freedom: larger, and much larger for a few runs. The cell prints
# how much wider it makes the interval at 2, 5 and 20 runs, and both intervals side by side.

# %%
with nt.section("2. Aggregates recomputed from the raw per-run CSV") as s:
    ENV.require("profiler")
    g = RAW.groupby(["Annotation", "n"], sort=False)["Value"]
    mine = pd.DataFrame({"mean": g.mean(), "sd": g.std(ddof=1), "count": g.count()}).reset_index()
    both = df.merge(mine, on=["Annotation", "n"])
    half = 1.96 * both["sd"] / np.sqrt(both["count"])
    nt.claim(
        np.allclose(both.AvgValue, both["mean"]) and np.allclose(both.StdDev, both.sd),
        "AvgValue and StdDev are the mean and the n-1 standard deviation of the raw runs",
    )
    nt.claim(
        np.allclose(both.CI95_Lower, both["mean"] - half)
        and np.allclose(both.CI95_Upper, both["mean"] + half),
        "CI95 is mean +/- 1.96 * StdDev / sqrt(NumRuns)",
    )
    nt.claim(
        np.allclose(both.RelativeStdDevPct, 100 * both.sd / both["mean"].abs()),
        "RelativeStdDevPct is 100 * StdDev / |mean|",
    )
    nt.claim(
        ((both.RelativeStdDevPct < 2) == both.StableMeasurement.astype(bool)).all(),
        "StableMeasurement is exactly RelativeStdDevPct < 2",
    )
    both["nsight +/- us"] = half / 1e3
    both["Student t +/- us"] = both["count"].map(t95) * both["sd"] / np.sqrt(both["count"]) / 1e3
    print("  Student t / 1.96: " + ", ".join(f"{k} runs {t95(k) / 1.96:.2f}x" for k in (2, 5, 20)))
    print(
        both[["kernel", "count", "nsight +/- us", "Student t +/- us"]].to_string(
            index=False, float_format="{:,.4f}".format
        )
    )
    s.result = (
        f"all 5 aggregate columns match the {len(RAW)} raw runs; Student t widens nsight's CI95 "
        f"{t95(20) / 1.96:.2f}x at 20 runs"
    )

# %% [markdown]
# ## 3. The runs one by one
#
# A plot of every run shows what the averages hide. Each panel is one kernel, every run
# as a percentage above or below that kernel's median. Things to look for: a slow first
# run (something paid once: a cold instruction cache, clocks ramping up from idle),
# isolated outliers, drift. The cell then names, for each kernel, the run farthest from
# the median and by how much, and the first run's distance -- so what you read below is
# what the data show, not a story.
#
# One more thing in the raw values of a microsecond kernel: **resolution**. Durations
# are differences of GPU timestamps, and at a microsecond their granularity is a visible
# share of the kernel. The cell prints the distinct values 20 runs produced and how
# often each occurred.

# %%
with nt.section("3. Per-run values") as s:
    ENV.require("profiler")
    kernels = list(RAW.kernel.unique())
    fig, axes = plt.subplots(1, len(kernels), figsize=(4 * len(kernels), 3), sharey=True)
    far = {}
    for ax, k in zip(np.atleast_1d(axes), kernels):
        v = RAW[RAW.kernel == k].Value.to_numpy(dtype=float)
        dev = 100 * (v / np.median(v) - 1)
        ax.plot(dev, "o-", ms=3)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(k, fontsize=9)
        ax.set_xlabel("run")
        i = int(np.argmax(np.abs(dev)))
        far[k] = (i, dev[i])
        print(
            f"  {k}: median {np.median(v) / 1e3:.3f} us; farthest run {i} at {dev[i]:+.1f}%; "
            f"run 0 at {dev[0]:+.1f}%"
        )
    np.atleast_1d(axes)[0].set_ylabel("% from the median")
    plt.tight_layout()
    plt.show()
    tiny = RAW[RAW.kernel == label("vector add", SIZES[0])].Value
    seen = tiny.astype(int).value_counts().sort_index()
    print(
        f"  16K add: {len(seen)} distinct values in {len(tiny)} runs (ns: count): "
        + ", ".join(f"{v}: {c}" for v, c in seen.items())
    )
    worst = max(far, key=lambda k: abs(far[k][1]))
    s.result = (
        f"farthest run: {worst}, run {far[worst][0]} at {far[worst][1]:+.0f}% of its median; "
        f"16K add: {len(seen)} distinct values in {len(tiny)} runs"
    )

# %% [markdown]
# ## 4. How the confidence interval narrows with the number of runs
#
# 100 runs of the short and the long vector add. For k = 2 … 100 we compute the 95 %
# interval's half-width, as % of the mean, from the first *k* runs only: with Student's
# t (solid) and with nsight's 1.96 (dotted). The dashed line is what the 100-run spread
# predicts, t(k−1) · sd / √k. At small k the two intervals differ most -- exactly where
# you can least afford an interval that is too narrow.


# %%
def ci_halfwidth_pct(values: np.ndarray, multiplier: float | None = None) -> float:
    """95 % half-width of the mean as % of the mean; Student t unless a multiplier is given."""
    k = len(values)
    return 100 * (multiplier or t95(k)) * values.std(ddof=1) / math.sqrt(k) / values.mean()


with nt.section("4. CI width against the number of runs") as s:
    ENV.require("profiler")
    vector_add_x100(configs=SIZES)
    RAW100 = raw_runs(f"{OUT}x100_", "add_vectors")
    ks = np.arange(2, 101)
    print(nt.rules(ENV.backend))
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    widths = {}
    for n in SIZES:
        v = RAW100[RAW100.n == n].Value.to_numpy(dtype=float)
        w_t = np.array([ci_halfwidth_pct(v[:k]) for k in ks])
        w_z = np.array([ci_halfwidth_pct(v[:k], 1.96) for k in ks])
        widths[n] = w_t
        (line,) = ax.plot(ks, w_t, label=f"vector add n={n:,} ({v.mean() / 1e3:.1f} us), Student t")
        ax.plot(ks, w_z, ":", color=line.get_color(), lw=1, label="  same runs, nsight's 1.96")
        ax.plot(
            ks,
            [100 * t95(k) * v.std(ddof=1) / math.sqrt(k) / v.mean() for k in ks],
            "--",
            color=line.get_color(),
            lw=0.8,
        )
        print(
            f"  n={n:,}: +/-{w_t[5 - 2]:.2f}% at 5 runs (1.96 says +/-{w_z[5 - 2]:.2f}%), "
            f"+/-{w_t[20 - 2]:.2f}% at 20, +/-{w_t[-1]:.2f}% at 100"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("runs used (the first k)")
    ax.set_ylabel("95% CI half-width, % of mean")
    ax.legend(fontsize=7)
    plt.tight_layout()
    plt.show()
    s.result = "; ".join(
        f"n={n:,}: +/-{widths[n][5 - 2]:.2f}% at 5 runs -> +/-{widths[n][-1]:.2f}% at 100 (Student t)"
        for n in SIZES
    )

# %% [markdown]
# ## 5. How many runs for ±1 %: a rule from your data
#
# To pin the mean down to ±*p* % with 95 % confidence you need the smallest k with
# `t(k−1) · RSD / √k ≤ p`, RSD being the kernel's relative standard deviation in %.
# The question is which RSD. The classic one (`RelativeStdDevPct`) squares every
# deviation, so a single slow run can dominate it and ask for hundreds of runs -- runs
# that would not make that slow run go away. So the plan uses a spread that neither a
# wild run nor the timer can distort:
#
# - **Outliers** are the runs more than 3 robust standard deviations from the median; the
#   robust standard deviation is 1.4826 × the median absolute deviation (MAD), which one
#   or two wild runs cannot move. The table names the runs dropped.
# - **The timer's step.** Section 3 showed that a microsecond kernel's durations take a few
#   distinct values: timestamps advance in steps. When most runs read the same value, the
#   MAD -- and the spread of the runs left -- is zero or nearly so, and the plan would say
#   2 runs whatever the kernel does. Two floors prevent that: the MAD counts as at least
#   one step (a run one step from the median is the timer, not an outlier), and the spread
#   as at least the quantisation noise h/√12 of a step h: the standard deviation that
#   rounding to a step adds by itself. The step is read from the data: durations within
#   two nanoseconds of each other count as one reading (converting the GPU's clock ticks to
#   nanoseconds moves some by one), and the step is the commonest gap between neighbouring
#   readings -- not the smallest, which that rounding shrinks by a nanosecond or two. A
#   step counts only if it is several nanoseconds wide and puts nine in ten of the short
#   kernel's runs on one grid; then the cell checks that it puts them all there. A timer
#   finer than that shows no step: the cell says so and adds no floor.
#
# The table gives both RSDs with the mean, median and minimum. Where they disagree,
# report the median (or the mean without the dropped runs, saying so) rather than buy
# hundreds of runs. The check: for each vector add, the plan from its 20 runs and the plan
# from its 100 runs agree within a factor of three -- a spread that collapses on a lucky
# sample fails it. Then the cell tries the plan on the short kernel's 100-run series,
# window by window, and prints how often it met the target.
#
# Read that hit count with the statistics in mind: a plan made this way only *aims* the
# interval at the target. Each window judges itself with its own spread estimate, which
# scatters around the true spread -- and a window that holds a slow run (run 0, say) gets
# a wider interval. How many windows miss depends on the margin: the plan takes the fewest
# runs that reach the target, so its half-width, `t(k−1) · RSD / √k`, usually lands just
# under it. The cell prints that planned half-width beside the target and says when it lies
# within a tenth of it: such a plan sits on the line, and many windows -- up to about half
# -- can be expected to miss. If you need the target met, not just aimed at, plan for a
# tighter one than you need, or add runs.
#
# And the plan describes *one batch*: the runs of one call, in one state of the GPU.
# Section 6 asks whether a second batch lands inside it.


# %%
def timer_step(values: np.ndarray) -> float:
    """The timer's quantum as the runs show it: distinct durations within 2 ns of each other are one reading (tick
    conversion moves some by a ns or two), standing at its most-read value; the step is the median of the gaps
    between neighbouring readings that lie within 2 ns of the commonest gap (0 if no two readings)."""
    vals, counts = np.unique(np.round(values), return_counts=True)
    groups = np.split(np.arange(len(vals)), np.flatnonzero(np.diff(vals) > 2) + 1)
    gaps = np.diff([vals[g][np.argmax(counts[g])] for g in groups])
    if not len(gaps):
        return 0.0
    gap, n = np.unique(gaps, return_counts=True)
    return float(np.round(np.median(gaps[np.abs(gaps - gap[np.argmax(n)]) <= 2])))


def robust_spread(v: np.ndarray, step: float) -> tuple[np.ndarray, float]:
    """(runs kept, their RSD in %): runs more than 3 robust sd (1.4826 MAD, at least one timer step) from the
    median are dropped; the spread of the rest counts as at least step / sqrt(12), what rounding adds."""
    med = np.median(v)
    keep = np.abs(v - med) <= 3 * max(1.4826 * np.median(np.abs(v - med)), step)
    return keep, 100 * max(v[keep].std(ddof=1), step / math.sqrt(12)) / v[keep].mean()


def rsd(v: np.ndarray) -> float:
    return 100 * v.std(ddof=1) / v.mean()


def runs_needed(rsd_pct: float, target_pct: float) -> int:
    """Smallest k >= 2 with t(k-1) * RSD / sqrt(k) <= target (t >= 1.96, so start from the normal answer)."""
    k = max(2, math.ceil((1.96 * rsd_pct / target_pct) ** 2))
    while t95(k) * rsd_pct / math.sqrt(k) > target_pct:
        k += 1
    return k


with nt.section("5. Runs needed for a target precision") as s:
    ENV.require("profiler")
    series = [(k, g.Value.to_numpy(dtype=float)) for k, g in RAW.groupby("kernel", sort=False)]
    series += [
        (f"{label('vector add', n)} x100", RAW100[RAW100.n == n].Value.to_numpy(dtype=float))
        for n in SIZES
    ]
    step = timer_step(np.concatenate([v for _, v in series]))
    print(nt.rules(ENV.backend))
    name, v = series[0]  # the short kernel: the step must put each of its runs on one grid
    d = v - pd.Series(v).mode().iloc[0]
    off = np.abs(d - step * np.round(d / step)) if step else d
    tol = (
        np.minimum(2 + 0.5 * np.abs(np.round(d / step)), step / 4) if step else 0
    )  # the step is read to the ns
    if (
        step >= 8 and (off <= tol).mean() >= 0.9
    ):  # a grid shows: nine runs in ten within a quarter step of it
        print(
            f"  timer step in these runs: {step:.0f} ns; rounding to it adds a spread of {step / math.sqrt(12):.1f} ns"
        )
        nt.claim(
            (off <= tol).all(),
            f"{name}: every run is its commonest value plus a whole number of {step:.0f} ns "
            "steps (within 2 ns plus 0.5 ns per step, at most a quarter step)",
            f"farthest off by {off.max():.0f} ns",
        )
    else:
        print(
            f"  no timer step shows in these runs (the step read, {step:.0f} ns, puts under 90 % of {name}'s runs "
            "on one grid): durations are read as continuous, and no rounding spread is added"
        )
        step = 0.0
    STEP, rows = step, []
    for name, v in series:
        (keep, spread), med = robust_spread(v, step), np.median(v)
        dropped = (
            ", ".join(f"run {i} {100 * (v[i] / med - 1):+.0f}%" for i in np.flatnonzero(~keep))
            or "none"
        )
        rows.append(
            {
                "kernel": name,
                "runs": len(v),
                "mean_us": v.mean() / 1e3,
                "median_us": med / 1e3,
                "min_us": v.min() / 1e3,
                "RSD_%": rsd(v),
                "robust_RSD_%": spread,
                "dropped": dropped,
                "runs_for_1%_classic": runs_needed(rsd(v), TARGET),
                "runs_for_1%_robust": runs_needed(spread, TARGET),
            }
        )
    plan = pd.DataFrame(rows).set_index("kernel")
    print(plan.to_string(float_format="{:,.3f}".format))
    for n in SIZES:
        k20, k100 = plan.loc[
            [label("vector add", n), f"{label('vector add', n)} x100"], "runs_for_1%_robust"
        ]
        nt.claim(
            max(k20, k100) <= 3 * min(k20, k100),
            f"vector add n={n:,}: the plans from 20 and from 100 runs agree within a factor of 3",
            f"{k20} and {k100} runs",
        )
    name, v = series[-2]  # the short kernel's 100-run series: try its plan on it
    k = plan.loc[name, "runs_for_1%_robust"]
    planned = (
        t95(k) * plan.loc[name, "robust_RSD_%"] / math.sqrt(k)
    )  # the half-width the plan aims the interval at
    windows = [v[j : j + k] for j in range(0, len(v) - k + 1, k)]
    met = sum(ci_halfwidth_pct(w) <= TARGET for w in windows)
    met_robust = sum(t95(k) * robust_spread(w, step)[1] / math.sqrt(k) <= TARGET for w in windows)
    tried = (
        f"{len(windows)} windows of {k} runs: the Student-t interval of the mean met +/-{TARGET:g}% in {met}, "
        f"with each window's robust spread in {met_robust}"
        if windows
        else f"the plan asks for {k} > 100 runs: not tried"
    )
    edge = " -- it sits on the line: expect many windows to miss" if planned > 0.9 * TARGET else ""
    tried = f"the plan aims at +/-{planned:.2f}% for +/-{TARGET:g}%{edge}; {tried}"
    print(f"  the plan on the 100-run 16K add: {tried}")
    worst = plan["runs_for_1%_robust"].idxmax()
    w = plan.loc[worst]
    s.result = (
        f"+/-{TARGET:g}% at 95% needs {w['runs_for_1%_robust']} runs for {worst} (robust RSD "
        f"{w['robust_RSD_%']:.2f}%, timer step {step:.0f} ns, dropped: {w['dropped']}; the classic RSD "
        f"{w['RSD_%']:.2f}% would ask {w['runs_for_1%_classic']}); 100-run 16K add, {tried}"
    )

# %% [markdown]
# Two functions of section 6 below are used again later: `welch_shift` compares two batches from
# their means, spreads and run counts, and `run_to_run_pct` turns that comparison into **the
# run-to-run band**: how far apart two batches of one kernel, measured apart in one run, may
# lie -- the far end of the 95 % interval of their shift. Notebooks 06, 07, 09 and 11 call a
# difference between two kernels real only beyond the band their own run measured. The
# `# @save` line marks a cell the package keeps word for word (`nspy_tutorial.lessons`), so a
# later notebook imports what this one taught instead of copying it.


# %%
# @save
def welch_shift(
    first: tuple[float, float, int], second: tuple[float, float, int]
) -> tuple[float, float, float]:
    """Two batches as (mean, standard deviation, runs): the second mean minus the first in % of the
    first, the 95 % half-width of that difference (same unit, Welch-Satterthwaite degrees of
    freedom: each batch keeps its own spread), and the two-sided p of "no shift"."""
    (ma, sa, na), (mb, sb, nb) = first, second
    va, vb = sa**2 / na, sb**2 / nb
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    se = math.sqrt(va + vb)
    half = stats.t.ppf(0.975, df) * se
    p = 2 * stats.t.sf(abs(mb - ma) / se, df)
    return 100 * (mb - ma) / ma, 100 * half / ma, float(p)


def run_to_run_pct(first: tuple[float, float, int], second: tuple[float, float, int]) -> float:
    """The run-to-run band, in % of the first batch's mean: |shift| plus its 95 % half-width, the
    largest move between two batches of one kernel that this run's data leave open."""
    shift, half, _ = welch_shift(first, second)
    return abs(shift) + half


# %% [markdown]
# ## 6. A second batch of the same kernel
#
# Every interval and plan above describes *one batch*. Sections 1 and 4 measured both
# vector adds in two separate calls -- 20 runs, then 100 -- so each kernel has two batches.
# If an interval described the kernel rather than the batch, the second batch would land
# inside the first one's interval. The cell prints each batch's Student-t interval of the
# mean (of the runs section 5 keeps, their spread at least the quantisation noise) and
# compares the batches: Welch's t-test (Student's t, each batch with its own spread) on
# those runs, Holm-corrected over the two kernels; the shift of the second batch's mean
# from the first's, with the 95 % interval of that difference; and the gaps between the
# two means and the two medians in timer steps.
#
# Read it in two steps. *Whether* the batches differ is the test's call, and averaging
# many runs can resolve the mean below one timer step: a shift smaller than a step can be
# detected. *How much* they differ is where the timer comes in. A duration is a whole
# number of steps, and when most runs sit on one reading the mean moves in whole steps
# too, so the timer sizes a shift to about one step, no finer. Hence the verdict: "not
# distinguishable" (the test found no shift -- which does not show there is none), or
# "differ by about N timer steps", N from the gap between the means the test compared. For a microsecond kernel one step can be a few percent of its
# time, coarser than the ±1 % the plan aimed at; where section 5 found a step, the cell
# says which it is for the short kernel. Either way a within-batch ±1 % interval says
# nothing about where the next call, or the next session, lands. The
# cell sets each shift against the first batch's own interval and the ±1 % target. A
# shift comes from the session (clock, temperature, other work on the GPU): a number that
# must hold from session to session needs several batches, and the spread between them.


# %%
def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: a family of p-values keeps its 5 % level whatever their number."""
    p = np.asarray(p, float)
    order, out = np.argsort(p), np.empty(len(p))
    out[order] = np.minimum(1, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return out


def kept_stats(v: np.ndarray, step: float) -> tuple[float, float, int]:
    """Mean, standard deviation (at least the quantisation noise step / sqrt(12)) and number of the runs
    robust_spread keeps."""
    x = v[robust_spread(v, step)[0]]
    return float(x.mean()), max(float(x.std(ddof=1)), step / math.sqrt(12)), len(x)


def batch_shift(a: np.ndarray, b: np.ndarray, step: float) -> tuple[float, float, float]:
    """Welch's comparison of two batches of one kernel, on the runs kept_stats keeps."""
    return welch_shift(kept_stats(a, step), kept_stats(b, step))


def batch_verdict(p_holm: float, gap: float, step: float) -> str:
    """'not distinguishable' (p >= 0.05 after Holm), else 'differ', sized by the gap between the tested means to the
    nearest whole timer step -- as finely as a timer that reads in steps can size a shift (no size without a step)."""
    if not p_holm < 0.05:
        return "not distinguishable"
    n = round(abs(gap) / step) if step else -1
    return {
        -1: "differ",
        0: "differ by under one timer step",
        1: "differ by about one timer step",
    }.get(n, f"differ by about {n} timer steps")


with nt.section(
    "6. A second batch of the same kernel: does it land inside the first's interval?"
) as s:
    ENV.require("profiler")
    step = nt.needs(STEP, "5")
    rows = []
    for n in SIZES:
        a, b = (
            frame[frame.n == n].Value.to_numpy(dtype=float)
            for frame in (RAW[RAW.Annotation == "vector add"], RAW100)
        )
        half = {
            runs: (m, t95(k) * sd / math.sqrt(k))
            for runs, (m, sd, k) in ((20, kept_stats(a, step)), (100, kept_stats(b, step)))
        }
        shift, within, p = batch_shift(a, b, step)
        rows.append(
            {
                "kernel": label("vector add", n),
                "median_20_us": np.median(a) / 1e3,
                "median_100_us": np.median(b) / 1e3,
                "gap_ns": np.median(b) - np.median(a),
                "mean_gap_ns": half[100][0] - half[20][0],
                "step_%_of_median": 100 * step / np.median(a),
                "p": p,
                **{
                    f"CI95_{runs}_us": f"{(m - h) / 1e3:.3f}-{(m + h) / 1e3:.3f}"
                    for runs, (m, h) in half.items()
                },
                "shift_%": shift,
                "shift_CI95_%": f"{shift - within:+.2f} to {shift + within:+.2f}",
                "CI95_20_+/-%": 100 * half[20][1] / half[20][0],
            }
        )
    table = pd.DataFrame(rows).set_index("kernel")
    table["gap_steps"], table["mean_gap_steps"] = (
        (table.gap_ns / step, table.mean_gap_ns / step) if step else (np.nan,) * 2
    )
    table["p_holm"] = holm(table.p)
    table["verdict"] = [
        batch_verdict(p, gap, step) for p, gap in zip(table.p_holm, table.mean_gap_ns)
    ]
    print(nt.rules(ENV.backend))
    print(
        f"  timer step {step:.0f} ns; Welch's t on the runs section 5 keeps; p Holm-adjusted over {len(table)} kernels"
    )
    print(table.to_string(float_format="{:,.3g}".format))
    for k, r in table.iterrows():
        size = abs(r["shift_%"])
        print(
            f"  {k}: {r.verdict} (p_holm {r.p_holm:.2g}); second batch {r['shift_%']:+.2f}% from the first "
            f"(95% interval of the difference {r['shift_CI95_%']}%): {size / TARGET:.1f}x the +/-{TARGET:g}% the "
            f"plan aimed at, {'beyond' if size > r['CI95_20_+/-%'] else 'within'} the first batch's own "
            f"+/-{r['CI95_20_+/-%']:.2f}%"
        )
    small = table.loc[label("vector add", SIZES[0])]
    if step:  # a fact of this GPU's timer and this kernel's length, printed: not a claim the lesson depends on
        coarse = small["step_%_of_median"] > TARGET
        print(
            f"  {small.name}: one timer step is {small['step_%_of_median']:.1f}% of its median, "
            + (
                f"coarser than the +/-{TARGET:g}% the plan aimed at: the timer cannot size a shift between its batches "
                "to the plan's precision"
                if coarse
                else f"within the +/-{TARGET:g}% the plan aimed at"
            )
        )
    differ = step and (table.verdict != "not distinguishable").any()
    resolution = (
        f"; the timer cannot size a shift finer than one step ({step:.0f} ns)" if differ else ""
    )
    s.result = (
        "; ".join(
            f"{k}: {r.verdict} (p_holm {r.p_holm:.2g}; means {r['shift_%']:+.1f}% = {r.mean_gap_steps:+.1f} "
            f"steps apart, medians {r.gap_ns:+.0f} ns)"
            for k, r in table.iterrows()
        )
        + resolution
    )

# %% [markdown]
# ## Takeaways
#
# - `StableMeasurement` is a fixed threshold (RSD < 2 %), not a statistical test. Use it
#   as a flag, and read the spread and the interval yourself.
# - nsight-python's CI95 uses 1.96 at every run count. For a few runs use Student's t
#   with runs − 1 degrees of freedom (`scipy.stats.t.ppf(0.975, k - 1)`).
# - Print the median and the minimum beside the mean. When they disagree, look at the
#   runs: one slow run moves the mean and inflates the standard deviation, not the median.
# - Plan run counts from a spread one outlier cannot dominate (here: a cut at 3 robust
#   standard deviations, naming the runs it drops) and the timer's step cannot shrink to
#   nothing (at least step/√12), with `t(k−1) · RSD / √k ≤ target`; short kernels need
#   more runs than long ones.
# - Compare two averages by the interval of their *difference*, or by a test on it (Welch's
#   t, as in section 6), not by single averages and not by whether their two intervals
#   overlap: two 95 % intervals can overlap while the difference is significant at 5 %.
# - An interval describes its batch: a ±1 % interval from one batch accounts for the
#   scatter of its runs, not for a shift to the next session's batch. Before trusting a
#   number across sessions, measure a second batch and test the difference. Size a shift
#   no finer than one timer step -- for a short kernel that step can be coarser than the
#   target its plan met within one batch.
#
# ## Try it
#
# - Change `runs=20` to `runs=5` for `vector_add_x20` and run sections 1-2 again: the
#   Student-t column becomes 1.4 times nsight's interval, and `StableMeasurement` may
#   flip for the short kernel from one run to the next.
# - Set `TARGET = 0.5` and rerun section 5: the run counts grow about fourfold (the
#   count scales with 1/target², above the minimum of 2).
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [Profiling results: how each statistic is computed](https://docs.nvidia.com/nsight-python/overview/profiling_results.html) ·
# [`nsight.analyze.kernel`: `runs`, `output_csv`, `output_prefix`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)
# (`transformation.py` holds the aggregation)

# %%
nt.summary()
