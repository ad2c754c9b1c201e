"""Specifications for notebook 09's code that a CPU can check before a GPU ever runs it.

* The kernels module (``cupti_ncu_kernels.py``, the notebook's ``%%writefile`` cell): run as the
  CUPTI child it must take its steps in one order -- ``NSPY_NCU_INIT_AT_IMPORT=0``, the libcupti
  preload, ``import nsight``, CUPTI activation, and only then torch -- and run any other way it
  must take none of them. Its ``combine_kernel_metrics`` and empty-result check run here too.
* The analysis (``times``, ``welch``, ``reading``, ``compare``, ``overhead``, ``event_clocks``) runs
  on tables shaped exactly as nsight-python returns them: ``09_cupti_vs_ncu--workload-{all,none}``
  (the ``ncu`` command line read back by nsight-python's own extraction; the Nsight Compute backend
  gives the same shape) and ``--workload-cupti`` (the CUPTI backend), kept from a strict run on
  the GPU test machine (``NSPY_TUTORIAL_KEEP_TABLES``); the tests below hold for any real run's
  values. Section 4's launches are kept as ``--events-cupti`` and ``--events-plain`` (op, CUDA-event
  ns, wall ns per launch). Every verdict the notebook prints is computed on two separate GPU runs'
  tables (``run1``, ``run2``) and must agree, or one of them must say "not distinguishable".
* nsight-python 1.1.0 and 1.1.1 say "no kernel profiled" differently (an empty table; a
  ``RuntimeError``) and word their refusals differently: the module's code is run against fakes of
  both and must reach the same verdicts.
* What the notebook says about torch's libcupti, from ``torch.version.cuda`` (a fake CUDA 12
  torch), and a failed ``pip install`` of cupti-python on Colab: SKIPPED with the remedy.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source, source
from scipy import stats

import nspy_tutorial as nt
from nspy_tutorial import backend, ncu_cli, sections

STEM = "09_cupti_vs_ncu"
TIME, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
ANALYSIS = functions(STEM, "times", "welch", "reading", "compare", "fixed_overhead", "overhead", "event_clocks", np=np, pd=pd,
                     stats=stats, ncu_cli=ncu_cli, TIME=TIME, CLOCK=CLOCK)


def tables(run: str = "run1") -> dict[str, pd.DataFrame]:
    return {name: fixture(f"{STEM}--workload-{name}", run)[1] for name in ("cupti", "all", "none")}


# --- the kernels module: the CUPTI child's order -----------------------------------------------

class Stop(Exception):
    """Raised at `import torch`: everything before it is what the test looks at."""


def run_prologue(monkeypatch, argv: list[str]) -> list[tuple[str, str | None]]:
    """Execute the module as `python cupti_ncu_kernels.py *argv` until it imports torch; the steps it took."""
    steps: list[tuple[str, str | None]] = []
    env = lambda: os.environ.get("NSPY_NCU_INIT_AT_IMPORT")  # noqa: E731
    fake_backend = SimpleNamespace(find_cupti_library=lambda: SimpleNamespace(path="/w/nvidia/cu13/lib/libcupti.so.13"),
                                   preload_cupti=lambda library: steps.append(("preload " + library.path, env())))
    fake_nsight = SimpleNamespace(Tool=SimpleNamespace(CUPTI="cupti"),
                                  activate=lambda tool: steps.append((f"activate {tool}", env())))
    real_import = builtins.__import__

    def tracing_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "torch":
            steps.append(("import torch", env()))
            raise Stop
        if name == "nsight":
            steps.append(("import nsight", env()))
            return fake_nsight
        if name == "nspy_tutorial" and fromlist and "backend" in fromlist:
            return SimpleNamespace(backend=fake_backend)
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT", raising=False)
    monkeypatch.setattr(sys, "argv", ["cupti_ncu_kernels.py", *argv])
    monkeypatch.setattr(builtins, "__import__", tracing_import)
    with pytest.raises(Stop):
        exec(compile(module_source(STEM, "cupti_ncu_kernels"), "cupti_ncu_kernels.py", "exec"),  # noqa: S102
             {"__name__": "__main__"})
    return steps


def test_the_cupti_child_skips_nsight_compute_preloads_libcupti_and_activates_cupti_before_torch(monkeypatch):
    steps = run_prologue(monkeypatch, ["cupti", "cupti_workload"])
    assert [s for s, _ in steps] == ["preload /w/nvidia/cu13/lib/libcupti.so.13", "import nsight", "activate cupti",
                                     "import nsight", "import torch"]
    assert all(value == "0" for _, value in steps), steps  # Nsight Compute is off before nsight is imported


@pytest.mark.parametrize("argv", [["plain"], ["workload", "[[]]", "10"]], ids=["torch.profiler child", "ncu replay"])
def test_run_any_other_way_the_module_loads_no_libcupti_and_activates_nothing(monkeypatch, argv):
    assert [s for s, _ in run_prologue(monkeypatch, argv)] == ["import nsight", "import torch"]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return import_module(STEM, "cupti_ncu_kernels", tmp_path_factory.mktemp("kernels"))


def test_per_run_adds_durations_and_weights_the_clock_by_them(kernels):
    assert kernels.per_run(np.array([1000]), np.array([500])).tolist() == [1500]  # CUPTI: durations only
    gemm, reduce, third = np.array([3000.0, 1.5e9]), np.array([1000.0, 1.9e9]), np.array([1000.0, 1.0e9])
    combined = kernels.per_run(kernels.per_run(gemm, reduce), third)  # nsight folds a run's kernels left to right
    cycles = 3000 * 1.5 + 1000 * 1.9 + 1000 * 1.0  # (ns x GHz): the cycles the three kernels took
    assert combined[0] == 5000 and combined[1] == pytest.approx(cycles / 5000 * 1e9)


def test_nsight_pythons_own_extraction_combines_a_split_k_run_with_per_run(kernels):
    from nsight import extraction, transformation, utils
    from nsight.utils import VerbosityLevel

    def action(name, ns, hz):
        return utils.ActionData(name=name, values=np.array([ns, hz]), compute_clock=1980000, memory_clock=3201000,
                                gpu="NVIDIA H200", units=["ns", "hz"])

    def workload(): ...

    runs = {"matmul 512": [action("gemm", 12000.0, 1.8e9), action("splitKreduce_kernel", 2000.0, 1.5e9)] * 2}
    raw = extraction.extract_df_from_data(runs, [TIME, CLOCK], [()], 2, workload, None, VerbosityLevel.SILENT,
                                          kernels.per_run)
    table = transformation.aggregate_data(raw, workload, None, VerbosityLevel.SILENT)
    got = ANALYSIS.times(table)
    assert got.loc["matmul 512"].tolist() == [14.0, 0.0, 2, 2]
    assert ANALYSIS.times(table, CLOCK)["mean"]["matmul 512"] == pytest.approx((12 * 1800 + 2 * 1500) / 14)


class Result:
    def __init__(self, df: pd.DataFrame) -> None:
        self.df = df

    def to_dataframe(self) -> pd.DataFrame:
        return self.df


NSIGHT_CODE = {"__name__": "nsight.extraction"}  # a function compiled here counts as raised in nsight-python's code
exec("def refuse(message):\n    raise RuntimeError(message)\n", NSIGHT_CODE)


class FakeNsight:
    """``nsight.analyze.kernel`` as nsight-python ``version`` behaves under CUPTI, for the module's functions.

    A counter is refused at the call (with a wording of this fake's own: the notebook must not depend on
    it). A region in which no kernel ran gives an empty table under 1.1.0 and raises ``RuntimeError``
    under 1.1.1; ``x * 2`` gives one fastest run per configuration; ``add`` a row, unless ``blind``.
    """

    def __init__(self, version: str, blind: bool = False):
        self.version, self.blind = version, blind
        self.analyze = SimpleNamespace(kernel=self.kernel)
        self.annotate = lambda name: contextlib.nullcontext()

    def kernel(self, metrics=(TIME,), **settings):
        def decorate(func):
            def call(*args, configs=None):
                if list(metrics) != [TIME]:
                    raise ValueError(f"fake {self.version}: only {TIME} under CUPTI")
                if func.__name__ == "scale":
                    return Result(pd.DataFrame({"Annotation": ["x * 2"] * 2, "MinValue": [1000.0, 2500.0]}))
                if args[1] == "copy" or self.blind:
                    if self.version == "1.1.1":
                        NSIGHT_CODE["refuse"]("no kernel launch could be attributed to any annotation (fake 1.1.1)")
                    return Result(pd.DataFrame(columns=["Annotation", "AvgValue"]))
                return Result(pd.DataFrame({"Annotation": [args[1]], "AvgValue": [1.0]}))
            return call
        return decorate


@pytest.fixture
def fake_gpu(kernels, monkeypatch):
    """The module with a fake torch (no GPU needed) and a fake nsight of the given version."""
    device = SimpleNamespace(L2_cache_size=1 << 20)
    fake_torch = SimpleNamespace(randn=lambda *a, **k: np.ones(4), empty=lambda *a, **k: np.ones(4),
                                 cuda=SimpleNamespace(get_device_properties=lambda i: device))
    monkeypatch.setattr(kernels, "torch", fake_torch)

    def use(version: str, blind: bool = False):
        monkeypatch.setattr(kernels, "nsight", FakeNsight(version, blind))
        return kernels
    return use


@pytest.mark.parametrize("version", ["1.1.0", "1.1.1"])
def test_measured_names_an_annotation_without_rows_whether_nsight_returns_an_empty_table_or_raises(kernels, version):
    def nothing():  # what nsight-python `version` does when no kernel ran in the annotation
        if version == "1.1.1":
            NSIGHT_CODE["refuse"]("No kernels were profiled")
        return Result(pd.DataFrame(columns=["Annotation", "AvgValue"]))
    message = kernels.raised(lambda: kernels.measured(nothing, ["copy"]), LookupError)
    assert "['copy']" in message and "memcpy" in message
    assert ("No kernels were profiled" in message) == (version == "1.1.1")  # nsight's own words travel with it
    df = pd.DataFrame({"Annotation": ["copy"], "AvgValue": [1.0]})
    assert kernels.measured(lambda: Result(df), ["copy"]) is df and kernels.raised(lambda: None, LookupError) is None


def test_measured_lets_a_runtime_error_raised_outside_nsight_through_not_called_no_row(kernels):
    """A CUDA error (torch raises it as a RuntimeError) is not nsight saying 'no kernel': section 6 must not call
    it blindness."""
    def cuda_error():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        kernels.measured(cuda_error, ["add"])
    assert kernels.raised(lambda: None, LookupError) is None


def test_measured_lets_an_error_that_is_not_a_runtime_error_through(kernels):
    def broken():
        raise ValueError("a bug in the measured code")
    with pytest.raises(ValueError, match="a bug"):
        kernels.measured(broken, ["copy"])


@pytest.mark.parametrize("version", ["1.1.0", "1.1.1"])
def test_cupti_limits_reaches_the_same_findings_under_either_version(fake_gpu, version):
    found = fake_gpu(version).cupti_limits()
    assert found["counter_error"] == f"fake {version}: only {TIME} under CUPTI"  # refused, whatever the wording
    assert "['copy']" in found["copy_error"]  # section 5's claim, from an empty table or from nsight's RuntimeError
    assert set(found["x2_us"]) == {"all/none", "none/none", "all/base"}
    assert all(warm < flushed for warm, flushed in found["x2_us"].values())


@pytest.mark.parametrize("version", ["1.1.0", "1.1.1"])
@pytest.mark.parametrize("blind", [False, True], ids=["nsight still measures", "nsight blind afterwards"])
def test_profiler_beside_cupti_says_whether_nsight_still_measures_under_either_version(fake_gpu, monkeypatch, version,
                                                                                       blind):
    module = fake_gpu(version, blind)
    monkeypatch.setattr(module, "profiler_events", lambda: 0)
    found = module.profiler_beside_cupti()
    assert found["cuda_events"] == 0
    assert (found["nsight_after"] is None) != blind and (not blind or "['add']" in found["nsight_after"])


def test_the_workload_has_the_add_then_the_matmuls(kernels):
    assert kernels.SIZES == (512, 1024, 2048, 4096) and kernels.RUNS >= 5


# --- the analysis, on nsight-python-shaped tables --------------------------------------------

def test_the_fixtures_have_nsight_pythons_columns_one_row_per_operation_and_metric():
    t = tables()
    for name, table in t.items():
        assert list(table.Annotation.unique()) == ["add", "matmul 512", "matmul 1024", "matmul 2048", "matmul 4096"]
        assert {"AvgValue", "StdDev", "NumRuns", "Kernel", "Unit", "ComputeClock"} <= set(table.columns)
        assert set(table.Metric) == ({TIME} if name == "cupti" else {TIME, CLOCK})


def test_times_reads_any_unit_ncu_prints_as_us_and_mhz():
    table = tables()["all"]
    got, clock = ANALYSIS.times(table), ANALYSIS.times(table, CLOCK)
    rows = table[table.Metric == TIME]
    assert got["mean"].tolist() == pytest.approx((rows.AvgValue / 1e3).tolist())
    assert (got.runs == rows.NumRuns.to_numpy()).all()
    assert got.kernels.tolist() == (rows.Kernel.str.count(r"\|") + 1).tolist()
    scaled = table.copy()  # the same values in other units
    scaled.loc[scaled.Metric == TIME, ["AvgValue", "StdDev"]] /= 1e3
    scaled.loc[scaled.Metric == TIME, "Unit"] = "usecond"
    scaled.loc[scaled.Metric == CLOCK, ["AvgValue", "StdDev"]] /= 1e9
    scaled.loc[scaled.Metric == CLOCK, "Unit"] = "cycle/nsecond"
    pd.testing.assert_frame_equal(ANALYSIS.times(scaled), got)
    pd.testing.assert_frame_equal(ANALYSIS.times(scaled, CLOCK), clock)


def summary(x) -> dict:
    return {"mean": np.mean(x), "sd": np.std(x, ddof=1), "runs": len(x)}


def test_welch_from_means_and_sds_matches_scipy_on_the_raw_runs():
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 1, 10), rng.normal(101, 3, 8)
    d, half = ANALYSIS.welch(summary(a), summary(b))
    low, high = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert d - half == pytest.approx(low) and d + half == pytest.approx(high)


def test_welch_works_on_whole_columns_and_a_spread_of_zero_has_no_width():
    frame = pd.DataFrame([summary([5.0, 5.0]), summary([1.0, 2.0, 4.0])])
    other = pd.DataFrame([summary([7.0, 7.0]), summary([3.0, 5.0, 4.5])])
    d, half = ANALYSIS.welch(frame, other)
    assert d.tolist() == pytest.approx([2.0, (12.5 - 7) / 3]) and half[0] == 0.0
    assert half[1] == pytest.approx(ANALYSIS.welch(frame.iloc[1], other.iloc[1])[1])


def test_compare_on_the_fixtures_decomposes_nsight_computes_extra_time():
    t = tables()
    side = ANALYSIS.compare(t["cupti"], {"all": t["all"], "none": t["none"]})
    assert side.op.tolist() == ["add", "matmul 512", "matmul 1024", "matmul 2048", "matmul 4096"]
    assert (side["max MHz"] == t["all"].ComputeClock.iloc[0] / 1e3).all()
    # the flush and what is left add up to the whole difference (all in % of CUPTI's mean)
    assert (side["all-CUPTI"]).to_numpy() == pytest.approx((side["all-none"] + side["none-CUPTI"]).to_numpy())
    c, a, n = ANALYSIS.times(t["cupti"]), ANALYSIS.times(t["all"]), ANALYSIS.times(t["none"])
    for i, op in enumerate(side.op):
        d, half = ANALYSIS.welch(c.loc[op], a.loc[op])
        assert side["all-CUPTI"][i] == pytest.approx(100 * d / c["mean"][op])
        assert side["all-CUPTI ±"][i] == pytest.approx(100 * half / c["mean"][op])
        assert side["clock none MHz"][i] == pytest.approx(ANALYSIS.times(t["none"], CLOCK)["mean"][op])
        us = n["mean"][op] - c["mean"][op]  # the unflushed difference in us, per kernel of the run
        assert side["us/kernel"][i] == pytest.approx(us / c.kernels[op])
        ratio = side["max MHz"][i] / side["clock none MHz"][i]
        assert side["clock bound us"][i] == pytest.approx(c["mean"][op] * (ratio - 1))
    for r in side.to_dict("records"):  # the reading says "flush" exactly when its interval excludes 0
        assert bool(re.search(r"\bflush ", ANALYSIS.reading(r))) == (abs(r["all-none"]) > r["all-none ±"])
        if r["unflushed"] != "fits the per-kernel overhead":  # a row the overhead explains reads so, noisy or not
            assert (r["unflushed"] == "no difference detected") == (abs(r["none-CUPTI"]) <= r["none-CUPTI ±"])


def timing(op_us: dict, sd: float, runs: int, clock_mhz: float | dict = 1980.0, max_mhz: float = 1980.0,
           kernels: dict | None = None) -> pd.DataFrame:
    """A SYNTHETIC table as nsight-python returns it: one time row per op (and a clock row, for Nsight Compute)."""
    rows = []
    for op, us in op_us.items():
        names = "|".join(["k"] * (kernels or {}).get(op, 1))
        clock = clock_mhz[op] if isinstance(clock_mhz, dict) else clock_mhz
        rows += [(op, TIME, 1e3 * us, 1e3 * sd, runs, names, "ns", 1e3 * max_mhz),
                 (op, CLOCK, 1e6 * clock, 1e3, runs, names, "hz", 1e3 * max_mhz)]
    return pd.DataFrame(rows, columns=["Annotation", "Metric", "AvgValue", "StdDev", "NumRuns", "Kernel", "Unit",
                                       "ComputeClock"])


LENGTHS = {"add": 1.5, "matmul 512": 14.0, "matmul 1024": 61.0, "matmul 2048": 342.0, "matmul 4096": 2682.0}
SPLIT = {"matmul 512": 2}


def side_of(none_us: dict, clock_mhz: float | dict = 1980.0, all_extra: float = 0.0) -> pd.DataFrame:
    """compare() on SYNTHETIC runs: CUPTI's times are LENGTHS, Nsight Compute's `none_us` (flushed: + all_extra)."""
    cupti = timing(LENGTHS, sd=0.05, runs=10, kernels=SPLIT)
    cupti = cupti[cupti.Metric == TIME]
    flushed = {op: us + all_extra for op, us in none_us.items()}
    return ANALYSIS.compare(cupti, {"all": timing(flushed, 0.05, 3, clock_mhz, kernels=SPLIT),
                                    "none": timing(none_us, 0.05, 3, clock_mhz, kernels=SPLIT)})


def test_a_cost_of_one_microsecond_per_kernel_at_every_length_is_named_a_fixed_overhead():
    side = side_of({op: us + 1.0 * SPLIT.get(op, 1) for op, us in LENGTHS.items()}, clock_mhz=1960.0)
    assert set(side.unflushed) == {"fits the per-kernel overhead"}
    with pytest.warns(stats.ConstantInputWarning):  # the same cost at every length: no rank to correlate
        said = ANALYSIS.overhead(side)
    assert said.startswith("a fixed overhead of about 1.00 us per kernel, consistent with every row, no trend with length")
    assert side["none-CUPTI"].iloc[0] > 50 > side["none-CUPTI"].iloc[-1]  # most of the add, little of matmul 4096


def test_a_cost_that_grows_with_the_kernel_is_not_a_fixed_overhead_and_the_clock_is_read_alone():
    slower = {op: us * 1.03 for op, us in LENGTHS.items()}  # 3 % at every length
    by_clock = side_of(slower, clock_mhz=1980.0 / 1.04)      # ran 4 % below the maximum: the clock can add 4 %
    assert ANALYSIS.overhead(by_clock).startswith("not a fixed overhead")
    long = by_clock[by_clock.op.isin(["matmul 2048", "matmul 4096"])]
    assert set(long.unflushed) == {"the clock can account for it"}
    at_max = side_of(slower)                                  # at the maximum clock: the clock can add nothing
    assert ANALYSIS.overhead(at_max).startswith("not a fixed overhead")
    assert at_max.unflushed.iloc[-1] == "more than the clock can explain"


def test_one_kernel_that_pays_far_more_than_the_others_breaks_the_fixed_overhead():
    extra = {op: us + 1.0 * SPLIT.get(op, 1) for op, us in LENGTHS.items()}
    extra["matmul 1024"] += 8.0  # 9 us where the others pay 1: no one overhead fits every row
    side = side_of(extra)
    assert ANALYSIS.overhead(side).startswith("not a fixed overhead")
    assert side.set_index("op").unflushed["matmul 1024"] == "more than the clock can explain"


def test_no_difference_and_a_faster_tool_are_read_as_such():
    same = side_of(dict(LENGTHS))
    assert set(same.unflushed) == {"no difference detected"}
    assert ANALYSIS.overhead(same) == "no unflushed difference detected"
    faster = side_of({op: us - 0.5 for op, us in LENGTHS.items()})
    assert set(faster.unflushed) == {"faster than CUPTI"}


@pytest.mark.parametrize(("values", "expected"), [
    ({}, "unflushed +0.0 % = +0.00 us per kernel: no difference detected"),
    ({"all-none": 20.0, "kernels": 2}, "flush +20.0 % (also between its kernels); unflushed"),
    ({"all-none": -3.0}, "flush -3.0 %; unflushed"),
], ids=["nothing", "flush, split-K", "flush, one kernel"])
def test_the_reading_names_the_flush_only_where_its_interval_excludes_0(values, expected):
    r = {"kernels": 1, "all-none": 0.0, "all-none ±": 1.0, "none-CUPTI": 0.0, "us/kernel": 0.0,
         "unflushed": "no difference detected", **values}
    assert ANALYSIS.reading(r).startswith(expected)


# --- verdicts that hold from one GPU run to the next ----------------------------------------------

def agree(first: str, second: str) -> bool:
    """Two runs' verdicts agree, or one of them says the difference is not distinguishable."""
    return first == second or any(word in (first, second) for word in ("no difference detected",
                                                                       "no unflushed difference detected"))


def section_3_verdicts(run: str) -> dict:
    t = tables(run)
    side = ANALYSIS.compare(t["cupti"], {"all": t["all"], "none": t["none"]})
    return {"all kernels": ANALYSIS.overhead(side).split(" of about")[0].split(" (")[0].split(":")[0],
            **dict(zip(side.op, side.unflushed))}


def test_section_3_gives_the_same_verdicts_on_two_separate_gpu_runs():
    """Fails until tests/fixtures/run2 holds a second GPU run's 09 tables (workload-cupti/all/none)."""
    first, second = section_3_verdicts("run1"), section_3_verdicts("run2")
    assert first.keys() == second.keys()
    assert all(agree(first[k], second[k]) for k in first), (first, second)


def events(kept: pd.DataFrame) -> list:
    return [tuple(row) for row in kept[["op", "events_ns", "wall_ns"]].itertuples(index=False)]


def section_4(run: str) -> pd.DataFrame:
    return ANALYSIS.event_clocks(events(fixture(f"{STEM}--events-cupti", run)[1]),
                                 events(fixture(f"{STEM}--events-plain", run)[1]), tables(run)["cupti"])


def test_section_4_describes_the_events_overhead_in_the_same_words_on_two_separate_gpu_runs():
    """Fails until both runs keep section 4's launches (events-cupti and events-plain)."""
    first, second = section_4("run1"), section_4("run2")
    words = first.merge(second, on=["op", "profiler"], suffixes=("", " 2"))
    # the same words, unless the two runs' overheads are not distinguishable (their 95 % intervals meet)
    half = lambda sd: stats.t.ppf(0.975, 9) * sd / np.sqrt(10)  # noqa: E731
    apart = abs(words["overhead us"] - words["overhead us 2"]) > half(words["SD us"]) + half(words["SD us 2"])
    assert (words["in words"] == words["in words 2"])[apart].all(), words[["op", "profiler", "in words", "in words 2"]]


def launches(op_us: dict, overhead_us: float, spread_us: float, seed: int) -> list:
    """SYNTHETIC launches: per op, ten (op, events ns, wall ns) around kernel + overhead."""
    rng = np.random.default_rng(seed)
    return [(op, 1e3 * (us + overhead_us + rng.normal(0, spread_us)), 1e3 * (us + overhead_us + 15)) for op, us in
            op_us.items() for _ in range(10)]


def test_event_clocks_subtract_cuptis_kernel_mean_and_word_the_overhead():
    cupti = tables()["cupti"]
    kernel = ANALYSIS.times(cupti)["mean"]
    exact = [(op, 1e3 * us + 8000 + 100 * run, 1e3 * us + 30000) for op, us in kernel.items() for run in range(10)]
    got = ANALYSIS.event_clocks(launches(kernel, 40.0, 8.0, seed=1), exact, cupti).set_index(["op", "profiler"])
    none = got.xs("none", level="profiler")
    assert none.index.tolist() == list(kernel.index)
    assert none["overhead us"].to_numpy() == pytest.approx(np.full(len(kernel), 8.45))
    assert none["wall us"].to_numpy() == pytest.approx((kernel + 30).to_numpy())
    assert none["SD us"].to_numpy() == pytest.approx(np.full(len(kernel), np.std(np.arange(10) * 0.1, ddof=1)))
    assert set(none["in words"]) == {"a few us"}  # 8.45 us, scattered by 0.3 us: less than even the add lasts
    traced = got.xs("CUPTI", level="profiler")["in words"]
    assert traced["add"] == "tens of us, noisy"  # launches scatter by 8 us around a 1.5 us kernel
    assert traced["matmul 4096"] == "tens of us"  # the same scatter is nothing to a 2.7 ms kernel


@pytest.mark.parametrize(("overhead", "words"), [(3.0, "a few us"), (33.0, "tens of us"), (61.0, "tens of us"),
                                                 (250.0, "hundreds of us"), (1500.0, "milliseconds")])
def test_the_size_of_the_overhead_in_words(overhead, words):
    op = {"add": 1.5}
    cupti = timing(op, 0.05, 10).query(f"Metric == '{TIME}'")
    got = ANALYSIS.event_clocks(launches(op, overhead, 0.0, 0), launches(op, overhead, 0.0, 0), cupti)
    assert set(got["in words"]) == {words}


# --- torch's libcupti, and cupti-python on Colab ---------------------------------------------

@pytest.mark.parametrize(("cuda", "one", "words"), [
    ("12.6", False, "asks for libcupti.so.12: not libcupti.so.13, so the preload cannot stand in -- two libcupti"),
    ("13.0", True, "asks for libcupti.so.13: the preloaded 13.4+ copy has that name and serves torch too"),
    (None, None, "built without CUDA"),
], ids=["CUDA 12 torch", "CUDA 13 torch", "CPU torch"])
def test_what_the_preload_means_follows_torch_version_cuda(cuda, one, words):
    fake_torch = SimpleNamespace(version=SimpleNamespace(cuda=cuda))
    got, text = functions(STEM, "torch_cupti", backend=backend).torch_cupti(fake_torch.version.cuda)
    assert got is one and words in text


def cupti_child(tmp_path, monkeypatch, *, on_colab: bool, pip_exit: int, ran: list):
    def fake_run(cmd, env, timeout):  # like lifetime.run: exit code and output
        ran.append(cmd)
        return pip_exit, "ERROR: No matching distribution found for cupti-python"

    fake_backend = SimpleNamespace(cupti_problem=lambda library, available: "cupti-python is not installed",
                                   find_cupti_library=lambda paths=None: None, cupti_python_available=lambda: False,
                                   use_cupti_target=lambda: (None, f"cupti-python is not installed (looked in {tmp_path})"))
    install = [sys.executable, "-m", "pip", "install", "--target", str(tmp_path / "pkgs"), "cupti-python==13.4.0"]
    return functions(STEM, "cupti_child", ENV=SimpleNamespace(on_colab=on_colab), nt=nt, backend=fake_backend,
                     lifetime=SimpleNamespace(run=fake_run), os=os, pd=pd, ncu_cli=ncu_cli, child=None,
                     CUPTI_INSTALL=install, CUPTI_REMEDY="`pip install 'nspy-tutorial[cupti]'` ...").cupti_child


@pytest.mark.parametrize(("on_colab", "reason"), [(True, "pip failed: ERROR: No matching distribution"),
                                                   (False, "CUPTI cannot run in a child process here")])
def test_without_cupti_python_the_section_is_skipped_with_the_remedy_not_failed(tmp_path, monkeypatch, capsys,
                                                                               on_colab, reason):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    monkeypatch.delenv("NSPY_TUTORIAL_REQUIRE", raising=False)
    ran: list = []
    run = cupti_child(tmp_path, monkeypatch, on_colab=on_colab, pip_exit=1, ran=ran)
    with sections.section("09 test: CUPTI child") as s:
        run("cupti_workload")
    record = sections.records()[-1]
    assert s.status == sections.SKIPPED and record.needs == "cupti"
    assert reason in record.reason and "pip install 'nspy-tutorial[cupti]'" in record.remedy
    assert len(ran) == (1 if on_colab else 0)  # pip runs on Colab only, and its command is printed
    assert ("$ " in capsys.readouterr().out) == on_colab


# The unflushed differences of the two strict H200 runs of 2026-12-03, as section 3 printed them (us per row,
# its Welch half-width in us, kernels, the clock's bound in us): under the old reading (the median us per kernel
# over every row, the long matmuls' noise included) the first run read "not a fixed overhead" and the second "a
# fixed overhead" -- the verdict flipped between two runs of the same code.
H200_RUNS = {
    "first": {"add": (1.04, 0.495, 1, 0.02), "matmul 512": (2.05, 0.877, 2, 0.28), "matmul 1024": (1.71, 0.323, 1, 0.72),
              "matmul 2048": (2.50, 2.25, 1, 3.07), "matmul 4096": (3.23, 6.70, 1, 7.21)},
    "second": {"add": (1.20, 0.902, 1, 0.02), "matmul 512": (1.98, 0.631, 2, 0.27), "matmul 1024": (1.64, 0.647, 1, 0.51),
               "matmul 2048": (2.06, 2.05, 1, 2.46), "matmul 4096": (-0.99, 8.31, 1, 5.02)},
}


@pytest.mark.parametrize("run", sorted(H200_RUNS))
def test_the_two_h200_runs_that_flipped_under_the_median_now_read_one_fixed_overhead(run):
    d, half, kernels, bound = (pd.Series({op: v[i] for op, v in H200_RUNS[run].items()}, dtype=float) for i in range(4))
    cost, fits = ANALYSIS.fixed_overhead(d, half, kernels, bound)
    assert fits.all() and 1.0 < cost < 1.5, (cost, fits.to_dict())
    median = (d / kernels).median()  # the old reading, for the record: it missed the add in the first run
    assert bool((d + half >= kernels * median).all()) == (run == "second")


# Section 3 as the closing strict H200 run printed it (CUPTI us, us per kernel, none-CUPTI ± in % of CUPTI, kernels,
# clock bound us): every row's interval met one cost of about 1.1 us per kernel, and the run read "a fixed overhead
# ..., consistent with every row" -- yet us per kernel rose with the kernel's length, the long rows fitting only
# because their intervals are wide.
CLOSING_RUN = {"add": (1.50, 1.08, 26.82, 1, 0.02), "matmul 512": (13.71, 1.02, 5.10, 2, 0.29),
               "matmul 1024": (60.87, 1.90, 1.89, 1, 0.62), "matmul 2048": (341.14, 2.00, 0.43, 1, 2.52),
               "matmul 4096": (2678.94, 2.28, 0.30, 1, 5.66)}


def printed_side(rows: dict) -> pd.DataFrame:
    """compare()'s columns that overhead() reads, rebuilt from a printed table (fixed_overhead() run on it)."""
    cupti, per, pct, kernels, bound = (pd.Series({op: v[i] for op, v in rows.items()}, dtype=float) for i in range(5))
    cost, fits = ANALYSIS.fixed_overhead(per * kernels, pct * cupti / 100, kernels, bound)
    return pd.DataFrame({"CUPTI us": cupti, "us/kernel": per, "clock bound us": bound, "fixed us": cost,
                         "unflushed": np.where(fits, "fits the per-kernel overhead", "more than the clock can explain")}
                        ).reset_index(names="op")


def test_a_per_kernel_cost_that_rises_with_length_is_not_called_one_fixed_overhead():
    side = printed_side(CLOSING_RUN)
    assert set(side.unflushed) == {"fits the per-kernel overhead"}  # every row fits: the old reading said "fixed"
    said = ANALYSIS.overhead(side)
    assert said.startswith("an overhead per kernel rising with the kernel's length, not one fixed cost: about 1.1")
    excess = 2.28 - side["fixed us"].iloc[0]  # matmul 4096 above the fitted cost, in us per kernel
    assert f"the longer ones exceed it by up to {excess:.2f} us, within each row's interval plus what the clock" in said
    assert "(Spearman +0.90, p 0.04)" in said
    # the same rows with us per kernel in no order of length: one fixed overhead, no trend detected
    shuffled = {op: (v[0], per, *v[2:]) for (op, v), per in zip(CLOSING_RUN.items(), (1.15, 1.05, 1.30, 0.90, 1.10))}
    fixed = ANALYSIS.overhead(printed_side(shuffled))
    assert fixed.startswith("a fixed overhead of about 1.10 us per kernel, consistent with every row, no trend with length "
                            "detected (Spearman ") and "; 5 kernels, a weak test)" in fixed  # the test's power said


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_both_kept_gpu_runs_read_a_rising_per_kernel_overhead(run):
    t = tables(run)
    said = ANALYSIS.overhead(ANALYSIS.compare(t["cupti"], {"all": t["all"], "none": t["none"]}))
    assert said.startswith("an overhead per kernel rising with the kernel's length, not one fixed cost"), said


def test_the_fixed_overhead_is_the_precise_rows_cost_not_the_noisy_ones():
    d = pd.Series({"short": 1.0, "long": 40.0})  # the long kernel's 40 us is well inside its noise
    cost, fits = ANALYSIS.fixed_overhead(d, pd.Series({"short": 0.2, "long": 60.0}), pd.Series({"short": 1, "long": 1}),
                                         pd.Series({"short": 0.01, "long": 10.0}))
    assert cost == pytest.approx(1.0, abs=0.01) and fits.all()


@pytest.mark.parametrize(("heading", "rules"), [("# ## 4. Two more clocks", "nt.rules('cupti')"),
                                               ("# ## 5. What CUPTI cannot do", "nt.rules('cupti', cache_control=")])
def test_sections_4_and_5_print_whose_rules_made_their_tables_before_showing_them(heading, rules):
    text = source(STEM)
    code = re.search(r"^# %%\n(.*?)(?=^# %%)", text[text.index(heading):], flags=re.M | re.S).group(1)
    assert rules in code and code.index(rules) < code.index("nt.show(")
    said = nt.rules("cupti", cache_control="all, none", clock_control="none, base")  # section 5's three settings
    assert "(cache_control='all, none', clock_control='none, base' ignored)" in said


# --- section 6: what the cell says after torch.profiler ran beside nsight's CUPTI ---------------------

def section_6(found: dict, capsys) -> tuple[str, str]:
    """Section 6's cell on a SYNTHETIC result of profiler_beside_cupti: (what it printed, its result line)."""
    text = source(STEM)
    after = text[text.index("# ## 6. `torch.profiler`"):]
    code = re.search(r"^# %%\n(.*?)(?=^# %%)", after, flags=re.M | re.S).group(1)
    claims, result = [], SimpleNamespace(result=None)

    @contextlib.contextmanager
    def section(name):
        yield result

    notebook = SimpleNamespace(section=section, claim=lambda ok, what, evidence="": claims.append((ok, what)))
    ns = dict(nt=notebook, ENV=SimpleNamespace(require=lambda *a, **k: None, backend="cupti"), PLAIN={"cuda_events": 10},
              ck=SimpleNamespace(profiler_beside_cupti=lambda: found), ONE_LIBCUPTI=True)
    exec(compile(code, "section 6", "exec"), ns)  # noqa: S102
    assert all(ok for ok, _ in claims), claims
    return capsys.readouterr().out, result.result


def test_section_6_calls_nsight_blind_after_torch_profiler_not_a_region_without_a_kernel(capsys):
    error = "no row for ['add'] (nsight-python gave a table without them): no kernel there? A memcpy is not one"
    printed, result = section_6({"cuda_events": 0, "nsight_after": error}, capsys)
    assert "then nsight-python on x + x (one kernel): no kernel record, blind too" in printed
    assert "memcpy" not in printed and "memcpy" not in result  # x + x launches a kernel: the hint does not apply
    assert result.endswith("then nsight: no kernel record, blind too (restart to profile again)")
    printed, result = section_6({"cuda_events": 0, "nsight_after": None}, capsys)
    assert result.endswith("then nsight: a row, as before") and "blind" not in printed
