"""Functions a lesson wrote and a later lesson uses again, kept word for word (d2l's ``#@save``): each is shown,
explained and first used in the notebook cell marked ``# @save`` that holds it (tests/test_lessons.py checks the
two are the same code), and a later notebook imports it from here instead of copying the cell."""

import math

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
