"""Functions a lesson wrote and a later lesson uses again, kept word for word (d2l's ``#@save``): each is shown,
explained and first used in the notebook cell marked ``# @save`` that holds it (tests/test_lessons.py checks the
two are the same code), and a later notebook imports it from here instead of copying the cell."""

import math

import numpy as np
from scipy import stats


# notebooks/src/03_run_counts.py, section 6
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
