# %% [markdown]
# # 03 · How many runs? Warm-up, spread, intervals and the stability flag
#
# **What you will learn**
# - what `AvgValue`, `StdDev`, `CI95_Lower/Upper`, `RelativeStdDevPct` and
#   `StableMeasurement` are, exactly -- recomputed from the raw per-run values;
# - why nsight-python's 95 % interval (mean ± 1.96 · sd/√n) is too narrow for a handful
#   of runs, and the Student-t interval that is not;
# - what the timer's step does to a microsecond kernel's durations;
# - why the first run of a batch is a **warm-up** run, and why a plan drops it before anything
#   else;
# - how many runs a kernel needs for ±1 % at 95 % -- planned from a spread that one outlier
#   cannot dominate and the timer's step cannot collapse -- and how often such a plan meets its
#   target, judged over many windows of your own runs;
# - **the run-to-run band**: how far two batches of one kernel may lie apart, which later
#   notebooks use before they call a difference real.
#
# One measurement tells you nothing about noise: here every kernel runs 20 times, and the two
# vector adds once more 100 times. All profiles are silent (`verbosity=SILENT`; notebook 02
# showed what nsight-python prints). Runs on either backend; every table says which one
# measured it. On Colab each notebook runs in a fresh runtime of its own: the setup cell below
# installs what this notebook needs, and a second run of it skips what is there.

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

SILENT = nsight.VerbosityLevel.SILENT
OUT = ""  # output_prefix is a plain string prefix; "" writes the CSVs into this notebook's work folder
SIZES = [1 << 14, 1 << 24]  # a 64 KiB and a 64 MiB vector (float32)
MATMUL_N = 2048
TARGET = 1.0  # the precision (%) section 6 plans for, at 95 % confidence
WARMUP = 1  # runs dropped at the start of every batch (section 4)
STEP = None  # the timer's step in ns, read in section 3 (0: none shows)
SERIES = None  # every batch's runs, in the order they ran (section 4)


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


def batches(raw: pd.DataFrame, raw100: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every batch's runs in the order they ran: each kernel's 20, then each vector add's 100."""
    found = {k: g.Value.to_numpy(dtype=float) for k, g in raw.groupby("kernel", sort=False)}
    for k, g in raw100.groupby("kernel", sort=False):
        found[f"{k} x100"] = g.Value.to_numpy(dtype=float)
    return found


# %% [markdown]
# ## 1. Twenty runs: mean, median, spread and the stability flag
#
# A 16 K-element vector add (about a microsecond), a 16 M-element add (tens of microseconds to a
# millisecond, depending on the GPU) and a 2048-cube fp32 matmul, 20 runs each; then the two
# vector adds again, 100 runs each, in a second call (sections 4 to 7 use it).
# `output_csv=True` with an `output_prefix` keeps the raw per-run values next to the aggregated
# table. The table shows the median and the minimum beside the mean: one slow run moves the
# mean, not the median.


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
    vector_add_x100(configs=SIZES)
    RAW = pd.concat(
        [raw_runs(f"{OUT}x20_", "add_vectors"), raw_runs(f"{OUT}x20_", "matmul")], ignore_index=True
    )
    RAW100 = raw_runs(f"{OUT}x100_", "add_vectors")
    df["kernel"] = [label(a, n) for a, n in zip(df.Annotation, df.n)]
    df["kernels"] = df.Kernel.str.count(r"\|") + 1
    df["median"] = df.kernel.map(RAW.groupby("kernel").Value.median())
    cols = ["kernel", "kernels", "AvgValue", "median", "MinValue", "StdDev", "RelativeStdDevPct"]
    print(nt.rules(ENV.backend))
    print("times in microseconds; 'kernels' = GPU kernels per run in the annotation")
    nt.show(
        df.assign(stable=df.StableMeasurement),
        [*cols, "stable"],
        scale={c: 1e-3 for c in ("AvgValue", "median", "MinValue", "StdDev")},
    )
    r = df.set_index("kernel")
    small, large = (label("vector add", n) for n in SIZES)
    s.result = (
        f"16K add mean {r.AvgValue[small] / 1e3:.2f} us, median {r['median'][small] / 1e3:.2f}, "
        f"RSD {r.RelativeStdDevPct[small]:.1f}%; 16M add RSD {r.RelativeStdDevPct[large]:.2f}%"
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
# deviation is itself estimated, and the right multiplier is [Student's
# t](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#students-t-interval) with
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
    nt.show(both, ["kernel", "count", "nsight +/- us", "Student t +/- us"], fmt="{:,.4f}")
    s.result = (
        f"all 5 aggregate columns match the {len(RAW)} raw runs; Student t widens nsight's CI95 "
        f"{t95(20) / 1.96:.2f}x at 20 runs"
    )

# %% [markdown]
# ## 3. The runs one by one, and the timer's step
#
# A plot of every run shows what the averages hide. Each panel is one kernel, every run as a
# percentage above or below that kernel's median. Look for a slow first run (section 4 says
# why it happens), isolated outliers, drift.
#
# Then **resolution**. Durations are differences of GPU timestamps, and timestamps advance in
# steps: a microsecond kernel's 20 runs take only a few distinct values. The step is read from
# every batch's runs by `timer_step` below: durations within two nanoseconds of each other count as one
# reading (converting the GPU's clock ticks to nanoseconds moves some by one), and the step is
# the commonest gap between neighbouring readings -- not the smallest, which that rounding
# shrinks by a nanosecond or two. A step counts only if it is several nanoseconds wide and puts
# nine in ten of the short kernel's runs on one grid; then the cell checks that it puts them all
# there. A timer finer than that shows no step: the cell says so, and later sections add no
# floor for it. `# @save` marks a cell the package keeps word for word
# (`nspy_tutorial.lessons`), so notebook 11 imports what this one teaches instead of copying it.


# %%
# @save
def timer_step(values: np.ndarray) -> float:
    """The timer's quantum as the runs show it: distinct durations within 2 ns of each other are one
    reading (tick conversion moves some by a ns or two), standing at its most-read value; the step is
    the median of the gaps between neighbouring readings within 2 ns of the commonest gap (0 if no
    two readings)."""
    vals, counts = np.unique(np.round(values), return_counts=True)
    groups = np.split(np.arange(len(vals)), np.flatnonzero(np.diff(vals) > 2) + 1)
    gaps = np.diff([vals[g][np.argmax(counts[g])] for g in groups])
    if not len(gaps):
        return 0.0
    gap, n = np.unique(gaps, return_counts=True)
    return float(np.round(np.median(gaps[np.abs(gaps - gap[np.argmax(n)]) <= 2])))


# %%
with nt.section("3. Per-run values and the timer's step") as s:
    ENV.require("profiler")
    kernels = list(RAW.kernel.unique())
    fig, axes = plt.subplots(1, len(kernels), figsize=(4 * len(kernels), 3), sharey=True)
    for ax, k in zip(np.atleast_1d(axes), kernels):
        v = RAW[RAW.kernel == k].Value.to_numpy(dtype=float)
        dev = 100 * (v / np.median(v) - 1)
        ax.plot(dev, "o-", ms=3)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(k, fontsize=9)
        ax.set_xlabel("run")
        i = int(np.argmax(np.abs(dev)))
        print(f"  {k}: median {np.median(v) / 1e3:.3f} us; farthest run {i} at {dev[i]:+.1f}%")
    np.atleast_1d(axes)[0].set_ylabel("% from the median")
    plt.tight_layout()
    plt.show()
    tiny = RAW[RAW.kernel == label("vector add", SIZES[0])].Value.to_numpy(dtype=float)
    seen = pd.Series(tiny.astype(int)).value_counts().sort_index()
    print("  16K add, ns: count: " + ", ".join(f"{v}: {c}" for v, c in seen.items()))
    step = timer_step(np.concatenate([RAW.Value, RAW100.Value]).astype(float))  # every batch
    d = tiny - pd.Series(tiny).mode().iloc[0]
    off = np.abs(d - step * np.round(d / step)) if step else d
    # the step is read to the ns: allow 2 ns plus half a ns per step, at most a quarter step
    tol = np.minimum(2 + 0.5 * np.abs(np.round(d / step)), step / 4) if step else 0
    if step >= 8 and (off <= tol).mean() >= 0.9:
        print(
            f"  timer step {step:.0f} ns; rounding to it spreads runs by {step / math.sqrt(12):.1f} ns"
        )
        nt.claim(
            (off <= tol).all(),
            f"every 16K run is its commonest value plus a whole number of {step:.0f} ns steps",
            f"farthest off by {off.max():.0f} ns",
        )
    else:
        print(f"  no timer step shows: a {step:.0f} ns grid holds under 90 % of the 16K runs")
        step = 0.0
    STEP = step
    s.result = f"16K add: {len(seen)} distinct values in {len(tiny)} runs; timer step {STEP:.0f} ns"

# %% [markdown]
# ## 4. Warm-up: the first run of a batch pays once
#
# The first run of a batch often takes longer, for reasons that have nothing to do with the
# kernel's steady speed: the first launch in a process loads the kernel's code onto the GPU
# (CUDA loads modules lazily); after a pause the SM clock has dropped to its idle level and
# ramps up again while run 0 executes; caches and the GPU's address translation start cold.
# These costs are paid once per batch, not once per run, so they are not noise to average
# away: they are a different measurement. Benchmark harnesses therefore run a **warm-up**
# first and throw it away ([glossary](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#warm-up-run);
# `triton.testing.do_bench` does, for one).
#
# This series drops run 0 of every batch **by rule** (`WARMUP = 1`), whether or not it looks
# slow: deciding from the data which runs to keep would let the data pick their own
# interval. The cell shows what run 0 did in each batch: how far above the median of the runs
# after it, in % and in robust standard deviations (section 6 defines them; at least one timer
# step). Where the clock was held (the setup banner says so), the clock cannot ramp, and
# run 0 may show less.


# %%
def warmup_excess(v: np.ndarray, step: float) -> tuple[float, float]:
    """Run 0 above the median of the runs after it: in % of that median, and in robust standard
    deviations of those runs (1.4826 MAD, at least one timer step)."""
    rest = v[1:]
    med = np.median(rest)
    scale = max(1.4826 * np.median(np.abs(rest - med)), step, 1e-9)
    return 100 * (v[0] / med - 1), (v[0] - med) / scale


with nt.section("4. Warm-up: run 0 of every batch") as s:
    ENV.require("profiler")
    step = nt.needs(STEP, "3")
    SERIES = batches(RAW, RAW100)
    warm = pd.DataFrame(
        [(name, len(v), *warmup_excess(v, step)) for name, v in SERIES.items()],
        columns=["batch", "runs", "run 0 %", "robust sd"],
    )
    slow = warm["robust sd"] > 3
    warm["run 0"] = np.where(
        slow, "beyond 3 robust sd: a warm-up shows", "within the others' scatter"
    )
    nt.show(warm, list(warm.columns), fmt="{:+,.1f}")
    print(f"  every batch below keeps runs {WARMUP} onwards, whatever its run 0 did")
    if ENV.clock is not None and ENV.clock.state == "held":
        print(f"  the SM clock was held at {ENV.clock.held_mhz:,} MHz: no ramp from idle to pay")
    s.result = (
        f"run 0 beyond 3 robust sd in {slow.sum()} of {len(warm)} batches; dropped in every one"
    )

# %% [markdown]
# ## 5. How the confidence interval narrows with the number of runs
#
# The 100-run batches after their warm-up run. For k = 2, 3, … we compute the 95 % interval's
# half-width, as % of the mean, from the first *k* runs only: with Student's t (solid) and
# with nsight's 1.96 (dotted). The dashed line is what the whole batch's spread predicts,
# t(k−1) · sd / √k. At small k the two intervals differ most -- exactly where you can least
# afford an interval that is too narrow.


# %%
def ci_halfwidth_pct(values: np.ndarray, multiplier: float | None = None) -> float:
    """95 % half-width of the mean as % of the mean; Student t unless a multiplier is given."""
    k = len(values)
    return 100 * (multiplier or t95(k)) * values.std(ddof=1) / math.sqrt(k) / values.mean()


with nt.section("5. CI width against the number of runs") as s:
    ENV.require("profiler")
    series = nt.needs(SERIES, "4")
    print(nt.rules(ENV.backend))
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    widths = {}
    for n in SIZES:
        v = series[f"{label('vector add', n)} x100"][WARMUP:]
        ks = np.arange(2, len(v) + 1)
        w_t = np.array([ci_halfwidth_pct(v[:k]) for k in ks])
        w_z = np.array([ci_halfwidth_pct(v[:k], 1.96) for k in ks])
        widths[n] = w_t
        (line,) = ax.plot(ks, w_t, label=f"vector add n={n:,} ({v.mean() / 1e3:.1f} us), Student t")
        ax.plot(ks, w_z, ":", color=line.get_color(), lw=1, label="  same runs, nsight's 1.96")
        predicted = [100 * t95(k) * v.std(ddof=1) / math.sqrt(k) / v.mean() for k in ks]
        ax.plot(ks, predicted, "--", color=line.get_color(), lw=0.8)
        print(
            f"  n={n:,}: +/-{w_t[5 - 2]:.2f}% at 5 runs (1.96 says +/-{w_z[5 - 2]:.2f}%), "
            f"+/-{w_t[20 - 2]:.2f}% at 20, +/-{w_t[-1]:.2f}% at {len(v)}"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"runs used (the first k after the {WARMUP} warm-up run)")
    ax.set_ylabel("95% CI half-width, % of mean")
    ax.legend(fontsize=7)
    plt.tight_layout()
    plt.show()
    s.result = "; ".join(
        f"n={n:,}: +/-{widths[n][5 - 2]:.2f}% at 5 runs, +/-{widths[n][-1]:.2f}% at {len(widths[n]) + 1}"
        for n in SIZES
    )

# %% [markdown]
# ## 6. How many runs for ±1 %: a plan, and how often it works
#
# To pin the mean down to ±*p* % with 95 % confidence you want the smallest k with
# `t(k−1) · RSD / √k ≤ p`, RSD being the kernel's relative standard deviation in %. Two
# questions decide whether such a plan holds.
#
# **Which RSD.** The classic one (`RelativeStdDevPct`) squares every deviation, so one slow
# run can dominate it and ask for hundreds of runs that would not make that run go away. The
# plan uses a spread neither a wild run nor the timer can distort:
#
# - **Outliers** are the runs more than 3 robust standard deviations from the median. The
#   robust standard deviation is 1.4826 × the
#   [MAD](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#mad), the
#   median absolute deviation: the median distance of the runs from their median, which for
#   normally scattered runs times 1.4826 estimates their standard deviation, and which one or
#   two wild runs cannot move. The table counts the runs the cut drops.
# - **The timer's step** (section 3). When most runs read the same value the MAD is zero or
#   nearly so, and the plan would say 2 runs whatever the kernel does. Two floors prevent that:
#   the MAD counts as at least one step, and the spread as at least
#   [h/√12](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#timer-step),
#   the standard deviation a reading gains by being rounded to a step h (its rounding error
#   spreads evenly over ±h/2).
#
# **How often.** Even with the right spread, `t(k−1) · RSD / √k ≤ p` only aims the *typical*
# batch's interval at the target. Each batch estimates the spread afresh, and that estimate
# scatters: with the fewest runs that reach the target, about half the batches come out wider.
# The share of batches that meet the target is the plan's **assurance** (sample-size planning's
# word for it: the probability that a planned batch achieves the precision it was planned for).
# For runs that scatter normally it has a formula:
# (k−1)·s²/σ² follows a chi-squared distribution with k−1 degrees of freedom, so the share of
# batches whose half-width `t · s / √k` stays within p is `chi2.cdf((k−1) · k · (p / (t · RSD))², k−1)`.
# `runs_needed` takes the fewest runs with the assurance you ask for; `plan_runs` does the whole
# plan on one batch: warm-up dropped, robust spread, runs needed.
#
# The table plans each batch three ways: from the classic RSD, and from the robust one for half
# the batches and for nine in ten. The check: for each vector add, the plans from its 20 runs
# and from its 100 runs agree within a factor of three -- a spread that collapses on a lucky
# sample fails it. Then both robust plans of the short kernel are tried on its 100-run batch,
# window after window of consecutive runs, each judged as you would judge a batch of that size
# (`halfwidth_pct`): the share of windows that met ±1 % estimates the plan's assurance. Windows
# that start at every run share runs, so that rate is not a count of independent trials; the
# windows that do not overlap are, and for them the cell gives the exact (Clopper–Pearson) 95 %
# interval of the rate. Where the timer's floor sets a kernel's spread, every window gets about
# the same width, and the rate says more about the floor than about the formula.


# %%
# @save
def robust_spread(v: np.ndarray, step: float) -> tuple[np.ndarray, float]:
    """(runs kept, their RSD in %): runs more than 3 robust sd (1.4826 MAD, at least one timer step)
    from the median are dropped; the spread of the rest counts as at least step / sqrt(12), what
    rounding to the timer's step adds."""
    med = np.median(v)
    keep = np.abs(v - med) <= 3 * max(1.4826 * np.median(np.abs(v - med)), step)
    return keep, 100 * max(v[keep].std(ddof=1), step / math.sqrt(12)) / v[keep].mean()


def runs_needed(rsd_pct: float, target_pct: float, assurance: float = 0.9) -> int:
    """Fewest runs k >= 2 whose 95 % half-width t(k-1) s / sqrt(k) stays within target_pct in a share
    `assurance` of batches, for runs that scatter normally with an RSD of rsd_pct: (k-1) s^2 / sigma^2
    is chi-squared with k-1 degrees of freedom. Tries k in blocks that double, fewest first."""
    k, size = 2, 64
    while k <= 100_000:
        ks = np.arange(k, k + size)
        t = stats.t.ppf(0.975, ks - 1)
        share = stats.chi2.cdf((ks - 1) * ks * (target_pct / (t * max(rsd_pct, 1e-9))) ** 2, ks - 1)
        if (share >= assurance).any():
            return int(ks[np.argmax(share >= assurance)])
        k, size = k + size, 2 * size
    raise ValueError(f"an RSD of {rsd_pct:g}% needs over 100,000 runs for +/-{target_pct:g}%")


def plan_runs(
    runs: np.ndarray, step: float, target_pct: float = 1.0, assurance: float = 0.9, warmup: int = 1
) -> tuple[int, float]:
    """(runs to measure after the warm-up, the robust RSD % that plan comes from) for a 95 % interval
    of +/- target_pct met in a share `assurance` of batches: the first `warmup` runs dropped, then
    robust_spread on the rest."""
    spread = robust_spread(np.asarray(runs, dtype=float)[warmup:], step)[1]
    return runs_needed(spread, target_pct, assurance), spread


# %%
def kept_stats(v: np.ndarray, step: float) -> tuple[float, float, int]:
    """Mean, standard deviation (at least step / sqrt(12)) and number of the runs robust_spread keeps."""
    x = v[robust_spread(v, step)[0]]
    return float(x.mean()), max(float(x.std(ddof=1)), step / math.sqrt(12)), len(x)


def halfwidth_pct(v: np.ndarray, step: float) -> float:
    """The Student-t 95 % half-width of the mean of the runs kept_stats keeps, in % of that mean."""
    mean, sd, n = kept_stats(v, step)
    return 100 * float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) / mean


def windows_met(v: np.ndarray, k: int, step: float) -> tuple[float, int, int, int]:
    """The plan of k runs tried on v: (share of the windows starting at every run that met TARGET,
    their number, windows met among the ones that do not overlap, their number)."""
    met = np.array([halfwidth_pct(v[j : j + k], step) <= TARGET for j in range(len(v) - k + 1)])
    disjoint = met[::k]  # windows 0..k-1, k..2k-1, ...
    return float(met.mean()) if len(met) else math.nan, len(met), int(disjoint.sum()), len(disjoint)


with nt.section("6. Runs needed for a target precision, and how often the plan met it") as s:
    ENV.require("profiler")
    step = nt.needs(STEP, "3")
    series = nt.needs(SERIES, "4")
    kept = {name: v[WARMUP:] for name, v in series.items()}
    plan = pd.DataFrame({"kernel": list(kept), "runs": [len(v) for v in kept.values()]})
    plan["RSD %"] = [100 * v.std(ddof=1) / v.mean() for v in kept.values()]
    plan["robust %"] = [robust_spread(v, step)[1] for v in kept.values()]
    plan["cut"] = [int((~robust_spread(v, step)[0]).sum()) for v in kept.values()]
    plan["classic"] = [runs_needed(rsd, TARGET, 0.5) for rsd in plan["RSD %"]]
    plan["half"] = [plan_runs(v, step, TARGET, 0.5, WARMUP)[0] for v in series.values()]
    plan["9 in 10"] = [plan_runs(v, step, TARGET, 0.9, WARMUP)[0] for v in series.values()]
    print(nt.rules(ENV.backend))
    print(f"  runs after warm-up; runs needed for +/-{TARGET:g}% at 95% met by half the batches")
    print(
        "  (classic RSD, robust spread) and by nine in ten (robust spread); cut: outliers dropped"
    )
    nt.show(plan, list(plan.columns), fmt="{:,.2f}")
    plan = plan.set_index("kernel")
    for n in SIZES:
        name = label("vector add", n)
        k20, k100 = plan.loc[[name, f"{name} x100"], "9 in 10"]
        nt.claim(
            max(k20, k100) <= 3 * min(k20, k100),
            f"vector add n={n:,}: the plans from 20 and from 100 runs agree within a factor of 3",
            f"{k20} and {k100} runs",
        )
    short = series[f"{label('vector add', SIZES[0])} x100"][WARMUP:]
    tried = {}
    for aim, column in ((0.5, "half"), (0.9, "9 in 10")):
        k = int(plan.loc[f"{label('vector add', SIZES[0])} x100", column])
        rate, windows, met, disjoint = windows_met(short, k, step)
        if not disjoint:
            print(f"  planned for {aim:.0%}: {k} runs, more than the batch holds: not tried")
            continue
        low, high = stats.binomtest(met, disjoint).proportion_ci(method="exact")
        fits = "consistent with" if low <= aim <= high else "below" if high < aim else "above"
        tried[aim] = rate
        print(
            f"  planned for {aim:.0%}: {k} runs met +/-{TARGET:g}% in {rate:.0%} of {windows} windows; "
            f"{met} of {disjoint} apart ({low:.0%}-{high:.0%}): {fits} the plan"
        )
    worst = plan["9 in 10"].idxmax()
    s.result = (
        f"+/-{TARGET:g}% at 95% in 9 batches of 10: {plan.loc[worst, '9 in 10']} runs for {worst}"
        + (f"; tried: {tried[0.9]:.0%} of windows met it" if 0.9 in tried else "")
    )

# %% [markdown]
# ## 7. A second batch of the same kernel: the run-to-run band
#
# Every interval and plan above describes *one batch*: the runs of one call, in one state of
# the GPU. Each vector add was measured in two calls, 20 runs and then 100. If an interval
# described the kernel rather than the batch, the second batch would land inside the first
# one's interval. The cell compares the batches, each after its warm-up run and on the runs
# the outlier cut keeps:
#
# - **Welch's t-test** compares two means without assuming the two batches spread alike; its
#   degrees of freedom come from the
#   [Welch–Satterthwaite](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#welch-satterthwaite-degrees-of-freedom)
#   formula, which weighs each batch's variance by its number of runs. It gives the shift of the
#   second mean from the first with the 95 % interval of that difference.
# - **Holm's correction**: two kernels are two tests, and the more tests, the likelier one false
#   alarm. [Holm](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#holm-correction)
#   compares the smallest p-value with 5 % / m, the next with 5 % / (m − 1), and so on, which
#   keeps the chance of any false alarm among the m tests at 5 %.
# - **The run-to-run band** (`run_to_run_pct`): |shift| plus the half-width of its interval --
#   the largest move between two batches of this kernel that the data leave open. Notebooks 06,
#   07, 09 and 11 measure one kernel twice in their own run and call a difference between two
#   kernels real only beyond that band.
#
# *Whether* the batches differ is the test's call ("not distinguishable": no shift found, which
# does not show there is none). *How much* is where the timer comes in: a duration is a whole
# number of steps, and when most runs sit on one reading the mean moves in whole steps too, so a
# shift is sized to about one step, no finer. For a microsecond kernel one step can be coarser
# than the ±1 % its plan aimed at. A shift comes from the session (clock, temperature, other
# work on the GPU): a number that must hold across sessions needs several batches.


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


# %%
def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: a family of p-values keeps its 5 % level whatever their number."""
    p = np.asarray(p, float)
    order, out = np.argsort(p), np.empty(len(p))
    out[order] = np.minimum(1, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return out


def batch_verdict(p_holm: float, gap: float, step: float) -> str:
    """'not distinguishable' (p >= 0.05 after Holm), else 'differ', sized by the gap between the tested
    means to the nearest whole timer step (no size without a step)."""
    if not p_holm < 0.05:
        return "not distinguishable"
    n = round(abs(gap) / step) if step else -1
    return {
        -1: "differ",
        0: "differ by under one timer step",
        1: "differ by about one timer step",
    }.get(n, f"differ by about {n} timer steps")


with nt.section("7. A second batch of the same kernel: the run-to-run band") as s:
    ENV.require("profiler")
    step = nt.needs(STEP, "3")
    series = nt.needs(SERIES, "4")
    table = pd.DataFrame({"kernel": [label("vector add", n) for n in SIZES]})
    pairs = [
        (kept_stats(series[k][WARMUP:], step), kept_stats(series[f"{k} x100"][WARMUP:], step))
        for k in table.kernel
    ]
    shifts = np.array([welch_shift(first, second) for first, second in pairs])
    table["mean 20 us"], table["mean 100 us"] = ([b[i][0] / 1e3 for b in pairs] for i in (0, 1))
    table["shift %"] = shifts[:, 0]
    table["its 95% %"] = [f"{m - h:+.2f} to {m + h:+.2f}" for m, h, _ in shifts]
    table["band %"] = [run_to_run_pct(first, second) for first, second in pairs]
    table["p Holm"] = holm(shifts[:, 2])
    gaps = [second[0] - first[0] for first, second in pairs]
    table["verdict"] = [batch_verdict(p, g, step) for p, g in zip(table["p Holm"], gaps)]
    print(nt.rules(ENV.backend))
    print(f"  runs after warm-up, outliers cut; timer step {step:.0f} ns; Welch's t, Holm over 2")
    nt.show(table, list(table.columns[:-1]), fmt="{:,.3g}")
    for _, r in table.iterrows():
        print(f"  {r.kernel}: {r.verdict}; the run-to-run band is {r['band %']:.2f}%")
    small = table.iloc[0]
    if step:
        share = 100 * step / small["mean 20 us"] / 1e3
        where = "coarser than" if share > TARGET else "within"
        print(
            f"  {small.kernel}: one timer step is {share:.1f}% of its mean, {where} +/-{TARGET:g}%"
        )
    s.result = "; ".join(
        f"{r.kernel}: {r.verdict}, band {r['band %']:.2f}%" for _, r in table.iterrows()
    )

# %% [markdown]
# ## Takeaways
#
# - `StableMeasurement` is a fixed threshold (RSD < 2 %), not a statistical test. Use it as a
#   flag, and read the spread and the interval yourself.
# - nsight-python's CI95 uses 1.96 at every run count. For a few runs use Student's t with
#   runs − 1 degrees of freedom (`scipy.stats.t.ppf(0.975, k - 1)`).
# - Drop the first run of every batch: it pays one-time costs (code loading, the clock ramping
#   from idle, cold caches). Decide that by rule, before looking at the numbers.
# - Plan run counts from a spread one outlier cannot dominate and the timer's step cannot
#   shrink to nothing, and say how often the plan should work: the textbook formula meets its
#   target in only about half the batches; ask `runs_needed` for nine in ten, and check the
#   plan over many windows of your own runs.
# - An interval describes its batch. Before calling two kernels different, measure one of them
#   twice and compare the difference with that run-to-run band.
#
# ## Try it
#
# - Set `WARMUP = 0` and rerun sections 5 and 6: the intervals from the first few runs widen
#   again (run 0 is in every one of them) and the classic RSD asks for many more runs; the
#   robust plan moves little where run 0 was slow enough for the outlier cut to drop it -- the
#   rule matters for the warm-up runs the cut would keep.
# - Set `TARGET = 0.5` and rerun section 6: the run counts grow about fourfold (the count
#   scales with 1/target²).
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [Profiling results: how each statistic is computed](https://docs.nvidia.com/nsight-python/overview/profiling_results.html) ·
# [`nsight.analyze.kernel`: `runs`, `output_csv`, `output_prefix`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)
# (`transformation.py` holds the aggregation)

# %%
nt.summary()
