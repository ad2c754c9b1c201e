"""Functions a lesson wrote and a later lesson uses again, kept word for word (d2l's ``#@save``): each is shown,
explained and first used in the notebook cell marked ``# @save`` that holds it (tests/test_lessons.py checks the
two are the same code), and a later notebook imports it from here instead of copying the cell."""

import math

import numpy as np
import pandas as pd
from scipy import stats

from nspy_tutorial import timeline


# notebooks/src/03_run_counts.py, section 3: the timer's step
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


# notebooks/src/03_run_counts.py, section 6: the run-count plan (warm-up dropped, robust spread, assurance)
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


# notebooks/src/03_run_counts.py, section 7: the run-to-run band
def welch_shift(first: tuple[float, float, int], second: tuple[float, float, int]) -> tuple[float, float, float]:
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


# notebooks/src/07_kernel_fusion.py, section 5: the timeline, range by range
def per_range(tl: timeline.Timeline) -> pd.DataFrame:
    """Per range: wall time, its kernels and their summed time, GPU busy %, idle gaps, launch time."""
    launched = tl.calls.merge(tl.kernels, on="correlation", suffixes=("", " k"))
    rows = []
    for r in tl.ranges.itertuples():
        k = launched[(launched.start >= r.start) & (launched.start < r.end)].sort_values("start k")
        reach = np.maximum.accumulate(k["end k"].to_numpy())  # the latest end so far
        gaps = np.clip(k["start k"].to_numpy()[1:] - reach[:-1], 0, None)
        start, end = k["start k"].clip(r.start, r.end), k["end k"].clip(r.start, r.end)
        covered = np.clip(end - np.maximum(start, np.r_[r.start, reach[:-1]]), 0, None).sum()
        wall = r.end - r.start
        rows.append(
            {
                "wall us": wall / 1e3,
                "kernels": len(k),
                "kernel sum us": (k["end k"] - k["start k"]).sum() / 1e3,
                "GPU busy %": 100 * covered / wall,
                "median gap us": np.median(gaps) / 1e3 if len(gaps) else np.nan,
                "us per launch": (k.end - k.start).mean() / 1e3,
            }
        )
    return pd.DataFrame(rows, index=tl.ranges.name.to_numpy())


# notebooks/src/06_roofline.py, before section 2: the placement on this GPU's roofline (notebook 11 reuses it)
def allowed_seconds(flops, dram_bytes, sm_mhz, dram_mhz, flop_per_cycle, bytes_per_cycle):
    """max(F / P, B / W) at a kernel's clocks: P = FLOP/cycle x SM MHz, W = B/cycle x DRAM MHz."""
    compute = flops / (flop_per_cycle * sm_mhz * 1e6)
    return np.maximum(compute, dram_bytes / (bytes_per_cycle * dram_mhz * 1e6))


def side_of_ridge(intensity: float, ridge: float, near: float = 1.1) -> str:
    """ "compute", "memory", or "ridge" where the intensity lies within a factor `near` of it."""
    if intensity > ridge * near:
        return "compute"
    return "memory" if intensity < ridge / near else "ridge"


def verdict(pct: float, side: str, band: float, bound_at: float = 60) -> str:
    """The legend's word for a kernel at `pct` % of its roof on `side` (side_of_ridge's, or "ops"
    for a region judged op by op); `band` is the run-to-run band in %."""
    words = {"compute": "compute-bound", "memory": "memory-bound", "ops": "bound op by op"}
    bound = words.get(side, "bound on the ridge")
    if pct >= 100 - band:
        return bound + (", above its roof" if pct > 100 + band else ", at the roof")
    if pct >= bound_at + band:
        return bound
    return bound + " or neither" if pct > bound_at - band else "neither"


def next_step(verdict: str, side: str, stall: str = "", occupancy: float = 100.0) -> str:
    """The remedy a verdict points to; for "neither", from the top stall and the occupancy %."""
    if side == "ops":
        return "fuse: one kernel for its chain of operations"
    if not verdict.endswith("neither"):
        steps = {"compute": "change precision (a faster roof), or cut FLOPs"}
        steps["memory"] = "cut bytes: fuse with its neighbours, or use smaller types"
        return steps.get(side, "either: cut bytes or change precision")
    if side == "compute":
        return "change the kernel: one built for this GPU's tensor instructions (Hopper: wgmma)"
    if stall in ("long_scoreboard", "lg_throttle", "drain"):  # waiting for memory
        return "raise occupancy: more warps" if occupancy < 50 else "overlap: more loads in flight"
    if stall in ("barrier", "gmma"):
        return "overlap: less waiting at barriers (more stages in flight)"
    return "cut instructions: fewer passes, conversions and checks per byte (fuse)"
