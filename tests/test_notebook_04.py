"""Notebook 04's analysis on the table the Nsight Compute backend returns, on a CPU.

Section 1 of 04 measures ``cache_kernels.stream_and_matmul`` under three cache/clock
combinations, with nsight-python's Nsight Compute backend or with the ``ncu`` command line
(``ncu_cli.nsight_table``); both hand the notebook nsight-python's own ``to_dataframe()``
table, and everything after that is the functions run here, as the notebook has them.
The tables are the GPU run's kept fixtures (``NSPY_TUTORIAL_KEEP_TABLES``), one per
combination: ``04_cache_and_clock_control--stream_and_matmul-<cache>-<clock>``.
Every claim is also shown to fail on data that contradicts it.
"""

from __future__ import annotations

import ast
import re

import matplotlib
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source, source

from nspy_tutorial import ncu_cli, sections

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STEM = "04_cache_and_clock_control"
COMBINATIONS = [("all", "none"), ("none", "none"), ("all", "base")]
PEAK_GBS = 2 * 3201e6 * 6144 / 8 / 1e9  # an H200's NVML memory clock and bus width
ANALYSIS = ("per_configuration", "slowdown", "check_cache", "check_clock", "check_bandwidth", "plot_times")


def constants(*names: str) -> dict:
    """Top-level literal assignments of the notebook (metric names, annotation names)."""
    found = {}
    for node in ast.parse(source(STEM).replace("{{SETUP}}", "pass")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            names_here = [t.id for t in getattr(target, "elts", [target]) if isinstance(t, ast.Name)]
            if set(names_here) & set(names):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                found.update(zip(names_here, value) if len(names_here) > 1 else [(names_here[0], value)])
    assert set(names) <= set(found), f"{STEM} assigns no literal {set(names) - set(found)}"
    return {name: found[name] for name in names}


@pytest.fixture(scope="module")
def nb():
    namespace = {"nt": sections, "pd": pd, "plt": plt, "ncu_cli": ncu_cli,
                 **constants("TIME", "SM_HZ", "DRAM_RATE", "DRAM_WRITE", "STREAMS", "MATMUL")}
    return functions(STEM, *ANALYSIS, **namespace)


def kept_tables() -> dict:
    return {combo: fixture(f"{STEM}--stream_and_matmul-{combo[0]}-{combo[1]}")[1] for combo in COMBINATIONS}


def scaled(tables: dict, combo: tuple, annotation: str, metric: str, factor: float) -> dict:
    """A copy of ``tables`` with one metric of one annotation multiplied by ``factor``."""
    tables = {k: v.copy() for k, v in tables.items()}
    t = tables[combo]
    rows = (t.Annotation == annotation) & (t.Metric == metric)
    t.loc[rows, ["AvgValue", "MinValue", "MaxValue"]] *= factor
    return tables


def test_the_fixtures_have_the_shape_of_nsight_pythons_table_for_the_kernels_module(tmp_path):
    ck = import_module(STEM, "cache_kernels", tmp_path)
    names = constants("STREAMS", "MATMUL", "TIME", "SM_HZ", "DRAM_RATE", "DRAM_WRITE")
    for combo, table in kept_tables().items():
        call, _ = fixture(f"{STEM}--stream_and_matmul-{combo[0]}-{combo[1]}")
        assert call["function"] == ck.stream_and_matmul.__name__
        assert call["metrics"] == [names["TIME"], names["SM_HZ"], names["DRAM_RATE"], names["DRAM_WRITE"]]
        assert set(table.Annotation) == {*names["STREAMS"], names["MATMUL"]}
        assert {"small", "large", "AvgValue", "Unit", "ComputeClock", "RelativeStdDevPct"} <= set(table.columns)


def test_the_kernels_module_opens_the_annotations_the_analysis_reads_and_replays_under_ncu():
    text = module_source(STEM, "cache_kernels")
    names = constants("STREAMS", "MATMUL")
    for annotation in [*names["STREAMS"], names["MATMUL"]]:
        assert f'"{annotation}"' in text
    assert re.search(r'if __name__ == "__main__":[\s\S]*ncu_cli\.replay\(globals\(\)\)', text)


def test_the_analysis_on_the_kept_tables_reads_cache_clock_and_bandwidth(nb, capsys):
    table = nb.per_configuration(kept_tables())
    assert len(table) == 3 * len(COMBINATIONS)
    stream = table[table.kernel == "x * 2, 8x L2"].iloc[0]
    n = int(kept_tables()[("all", "none")].large.iloc[0])
    assert stream["GB/s"] == pytest.approx(8 * n / (stream.time_us * 1e-6) / 1e9)
    assert 0 < stream["DRAM wrote / 4n"] <= 1.05 and 500 < stream["SM MHz"] < 3000
    assert table[table.kernel == "fp16 matmul"]["GB/s"].isna().all()  # rates of combined kernels are not read
    cache = nb.check_cache(table)
    clock = nb.check_clock(table, {1980000})
    bandwidth = nb.check_bandwidth(table, PEAK_GBS, 4800.0)
    nb.plot_times(table)
    plt.close("all")
    out = capsys.readouterr().out
    assert "flushed/warm" in cache and "slows matmul" in clock and "vs peak" in bandwidth
    assert out.count("check:") >= 4  # a fifth when a stream rate above the peak needs explaining


def test_time_is_read_in_the_unit_the_table_states(nb):
    tables = kept_tables()
    in_us = {k: v.copy() for k, v in tables.items()}
    t = in_us[("all", "none")]
    rows = t.Metric == "gpu__time_duration.sum"
    t.loc[rows, "AvgValue"] /= 1e3
    t.loc[rows, "Unit"] = "usecond"
    a, b = nb.per_configuration(tables), nb.per_configuration(in_us)
    assert b.time_us.tolist() == pytest.approx(a.time_us.tolist())


def test_the_cache_claim_fails_when_warm_caches_do_not_help_the_small_stream(nb):
    tables = kept_tables()
    warm, cold = (tables[c].query("Annotation == 'x * 2, fits in L2' and Metric == 'gpu__time_duration.sum'").AvgValue
                  .iloc[0] for c in (("none", "none"), ("all", "none")))
    table = nb.per_configuration(scaled(tables, ("none", "none"), "x * 2, fits in L2", "gpu__time_duration.sum",
                                        cold / warm))
    with pytest.raises(sections.ClaimFailed, match="only for the size that fits"):
        nb.check_cache(table)


def test_the_clock_claims_fail_when_the_clock_does_not_move_or_the_matmul_does_not_feel_it(nb):
    tables = kept_tables()
    def hz(combo, annotation):
        return tables[combo].query("Metric == 'gpc__cycles_elapsed.avg.per_second' and Annotation == @annotation"
                                   ).AvgValue.iloc[0]
    same = {c: t for c, t in tables.items()}
    for annotation in ("x * 2, fits in L2", "x * 2, 8x L2"):  # each stream's locked clock made its free one
        same = scaled(same, ("all", "base"), annotation, "gpc__cycles_elapsed.avg.per_second",
                      hz(("all", "none"), annotation) / hz(("all", "base"), annotation))
    with pytest.raises(sections.ClaimFailed, match="moves with clock_control"):
        nb.check_clock(nb.per_configuration(same), {1980000})
    table = nb.per_configuration(tables)
    slow_mm = nb.slowdown(table, "fp16 matmul", "all", "base")
    slow_stream = nb.slowdown(table, "x * 2, 8x L2", "all", "base")
    unfelt = scaled(tables, ("all", "base"), "fp16 matmul", "gpu__time_duration.sum", 0.9 * slow_stream / slow_mm)
    with pytest.raises(sections.ClaimFailed, match="feels the clock lock more"):
        nb.check_clock(nb.per_configuration(unfelt), {1980000})


def test_the_bandwidth_claims_fail_above_the_peak_unless_the_dram_counters_explain_it(nb):
    tables = kept_tables()
    table = nb.per_configuration(tables)
    with pytest.raises(sections.ClaimFailed, match="never moved more bytes per second"):
        nb.check_bandwidth(table, 0.9 * table[table.kernel == "x * 2, 8x L2"]["DRAM GB/s"].max(), None)
    fast = table.copy()
    big = fast.kernel == "x * 2, 8x L2"
    fast.loc[big, "GB/s"] = 1.2 * PEAK_GBS
    fast.loc[big, "DRAM wrote / 4n"] = 0.9
    nb.check_bandwidth(fast, PEAK_GBS, None)  # explained: the DRAM wrote less than the kernel did
    fast.loc[big, "DRAM wrote / 4n"] = 1.0
    with pytest.raises(sections.ClaimFailed, match="rate above the DRAM peak is explained"):
        nb.check_bandwidth(fast, PEAK_GBS, None)
