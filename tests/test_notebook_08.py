"""Notebook 08's analysis, as the notebook has it, on per-run tables shaped like its CSVs.

The per-run CSV of a thermal series has one row per run: ``Value`` (kernel ns) and the
collectors' columns (``sm_clock_mhz``, ``clock_at_entry_mhz``, ``gpu_temp_c``, ``headroom_c``,
``headroom_at_entry_c``, ``run_start_s``). These tests build such tables by hand, with the
effects the notebook's prose warns about (one leverage point, a shared warm-up trend, one
slow run, a pause), and check that the analysis says what the data shows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from notebook_code import functions
from scipy import stats

NB = functions("08_collectors_and_thermal", "rank_correlation", "holm", "correlation_table", "robust_spread_pct",
               "pause_evidence", "first_sample", np=np, pd=pd, stats=stats)


def series(n=20, seed=0, trend=0.0, clock_effect=0.0):
    """A per-run table: time, clock and temperature, optionally sharing a warm-up trend."""
    rng = np.random.default_rng(seed)
    run = np.arange(n, dtype=float)
    clock = 1500 + rng.normal(0, 20, n)
    temp = 40 + trend * run + rng.normal(0, 0.5, n)
    time_ns = 1e6 * (1 + trend * 0.01 * run + rng.normal(0, 0.005, n)) - clock_effect * (clock - 1500)
    return pd.DataFrame({"Value": time_ns, "clock_at_entry_mhz": clock.round(), "sm_clock_mhz": clock.round(),
                         "gpu_temp_c": temp.round(), "run_start_s": 0.11 * run, "headroom_at_entry_c": 30 - 0 * run})


def test_rank_correlation_without_a_trend_is_scipys_spearman():
    x, y = series(seed=1).Value, series(seed=2).Value
    r, p = NB.rank_correlation(x, y)
    expected = stats.spearmanr(x, y)
    assert r == pytest.approx(expected.statistic) and p == pytest.approx(expected.pvalue)


def test_a_shared_trend_correlates_until_it_is_removed():
    rng = np.random.default_rng(3)
    run = np.arange(1, 20, dtype=float)
    x, y = run + rng.normal(0, 1, 19), run + rng.normal(0, 1, 19)  # related only through the run index
    r_plain, p_plain = NB.rank_correlation(x, y)
    r_partial, p_partial = NB.rank_correlation(x, y, trend=run)
    assert r_plain > 0.8 and p_plain < 1e-4
    assert abs(r_partial) < 0.5 and p_partial > 0.05


def test_a_real_relation_survives_the_trend_removal():
    rng = np.random.default_rng(4)
    run = np.arange(1, 30, dtype=float)
    clock = rng.normal(0, 1, 29)
    time_ns = run - 3 * clock + rng.normal(0, 0.3, 29)
    r, p = NB.rank_correlation(time_ns, clock, trend=run)
    assert r < -0.7 and p < 1e-3


def test_a_constant_series_has_no_correlation():
    r, p = NB.rank_correlation([1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0])
    assert np.isnan(r) and np.isnan(p)


def test_holm_matches_a_worked_example():
    adjusted = NB.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert NB.holm([0.2, 0.01]) == pytest.approx([0.2, 0.02])
    assert NB.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_correlation_table_leaves_run_0_out_and_corrects_only_real_tests():
    off = series(seed=5)
    off.loc[0, ["Value", "clock_at_entry_mhz"]] = [5e6, 300]  # an idle-clock leverage point
    auto = series(seed=6)
    auto["clock_at_entry_mhz"] = 1980  # a locked clock: nothing to correlate
    table = NB.correlation_table({"off": off, "auto": auto})
    assert list(table.n) == [19] * 6
    assert table.p.isna().sum() == 1 and table.p_holm.isna().sum() == 1
    tested = table.dropna(subset=["p"])
    assert (tested.p_holm >= tested.p - 1e-15).all()
    # without run 0, off's clock and time are unrelated noise
    clock_row = table[(table.series == "off") & table.test.str.contains("clock")].iloc[0]
    assert clock_row.p_holm > 0.05


def test_robust_spread_ignores_one_slow_run_that_dominates_the_rsd():
    values = np.r_[np.random.default_rng(7).normal(1000, 10, 19), 1500.0]
    rsd = 100 * values.std(ddof=1) / values.mean()
    robust = NB.robust_spread_pct(values)
    assert rsd > 5 and 0.5 < robust < 2


def run(headroom_before, headroom, starts):
    raw = pd.DataFrame({"headroom_at_entry_c": headroom, "run_start_s": starts})
    return {"raw": raw, "headroom_before": headroom_before}


def test_auto_mode_that_never_came_near_the_threshold_is_not_credited():
    lowest, long, verdict = NB.pause_evidence(run(40, [35, 34, 33, 33], [0.0, 0.1, 0.2, 0.3]), wait=10)
    assert (lowest, long) == (33, 0) and verdict.startswith("auto never paused")


def test_a_low_headroom_and_a_long_gap_are_reported_as_a_possible_pause():
    lowest, long, verdict = NB.pause_evidence(run(15, [12, 9, 20, 19, 18], [0.0, 0.1, 0.2, 1.9, 2.0]), wait=10)
    assert lowest == 9 and long == 1 and verdict.startswith("auto had reason to pause")


@pytest.mark.parametrize("first, word", [(345, "BELOW"), (1980, "ABOVE"), (1440, "within")])
def test_first_sample_reports_whichever_way_the_data_went(first, word):
    raw = pd.DataFrame({"sm_clock_mhz": [first] + [1425] * 19})
    assert NB.first_sample(raw).startswith(word)
