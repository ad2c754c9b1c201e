"""Specifications for notebook 09's code that a CPU can check before a GPU ever runs it.

* The kernels module (``cupti_ncu_kernels.py``, the notebook's ``%%writefile`` cell): run as the
  CUPTI child it must take its steps in one order -- ``NSPY_NCU_INIT_AT_IMPORT=0``, the libcupti
  preload, ``import nsight``, CUPTI activation, and only then torch -- and run any other way it
  must take none of them. Its ``combine_kernel_metrics`` and empty-result check run here too.
* The analysis (``times``, ``welch``, ``compare``, ``fit_extra``, ``overhead``, ``reading``,
  ``event_clocks``) runs on tables shaped exactly as nsight-python returns them:
  ``09_cupti_vs_ncu--workload-{all,none,again}`` (the ``ncu`` command line read back by nsight-python's
  own extraction; the Nsight Compute backend gives the same shape) and ``--workload-cupti`` (the CUPTI
  backend), kept from strict runs on the GPU test machine; section 4's launches are kept as
  ``--events-cupti`` and ``--events-plain``. ``--workload-again`` (the second ``"all"`` call, for the
  run-to-run band) and ``--cupti-clock`` (NVML's SM clock while CUPTI measured) are new: until a GPU
  run keeps them, the tests that read them skip and SYNTHETIC copies stand in, named as such.
* Section 3's verdicts (the fit's cost per kernel and share of the length) are computed on four real
  runs and must agree, or differ only where the clock explains it: the two kept runs (``run1``,
  ``run2``) and the two recorded strict runs of 2026-12-04 -- a free H200 and the same H200 with its
  SM clock held at 1,500 MHz -- whose printed tables of sections 1 and 3 are parsed in
  ``tests/fixtures/recorded/09_cupti_vs_ncu-side-{normal,capped}.json``.
* nsight-python 1.1.0 and 1.1.1 say "no kernel profiled" differently (1.1.0: a table without the
  annotation; 1.1.1: a ``RuntimeError`` saying no kernel was profiled) and word their refusals
  differently: the module's code is run against fakes of both and must reach the same verdicts.
* What the notebook says about torch's libcupti, from ``torch.version.cuda`` (a fake CUDA 12
  torch), and a failed ``pip install`` of cupti-python on Colab: SKIPPED with the remedy.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from notebook_code import FIXTURES, fixture, functions, import_module, module_source, source
from scipy import optimize, stats

import nspy_tutorial as nt
from nspy_tutorial import backend, ncu_cli, sections
from nspy_tutorial.lessons import run_to_run_pct, welch_shift

STEM = "09_cupti_vs_ncu"
TIME, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
ANALYSIS = functions(STEM, "times", "welch", "batch", "compare", "fit_extra", "overhead", "reading", "event_clocks",
                     np=np, pd=pd, stats=stats, ncu_cli=ncu_cli, TIME=TIME, CLOCK=CLOCK, welch_shift=welch_shift,
                     run_to_run_pct=run_to_run_pct)


def tables(run: str = "run1") -> dict[str, pd.DataFrame]:
    """A kept run's tables; "again" (the second 'all' call) where kept, else a SYNTHETIC copy of "all"."""
    kept = {name: fixture(f"{STEM}--workload-{name}", run)[1] for name in ("cupti", "all", "none")}
    return kept | {"again": kept["all"]}


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


# nsight-python 1.1.1's release notes: it "now raises a RuntimeError when no kernel launch could be attributed to any
# nsight.annotate() region, instead of returning an empty DataFrame"; 1.1.0's Nsight Compute extraction says "No kernels
# were profiled". The fakes below word it in those terms; measured() reads the type and the words "no kernel".
NO_KERNEL_1_1_1 = "No kernel launch could be attributed to any nsight.annotate() region (fake 1.1.1)"


class FakeNsight:
    """``nsight.analyze.kernel`` as nsight-python ``version`` behaves under CUPTI, for the module's functions.

    A counter is refused at the call (with a wording of this fake's own: the notebook must not depend on
    it). A region in which no kernel ran gives an empty table under 1.1.0 and raises ``RuntimeError``
    under 1.1.1; ``add`` gives a row, unless ``blind``.
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
                if args[1] == "copy" or self.blind:
                    if self.version == "1.1.1":
                        raise RuntimeError(NO_KERNEL_1_1_1)
                    return Result(pd.DataFrame(columns=["Annotation", "AvgValue"]))
                return Result(pd.DataFrame({"Annotation": [args[1]], "AvgValue": [1.0]}))
            return call
        return decorate


@pytest.fixture
def fake_gpu(kernels, monkeypatch):
    """The module with a fake torch (no GPU needed) and a fake nsight of the given version."""
    fake_torch = SimpleNamespace(randn=lambda *a, **k: np.ones(4), empty=lambda *a, **k: np.ones(4))
    monkeypatch.setattr(kernels, "torch", fake_torch)

    def use(version: str, blind: bool = False):
        monkeypatch.setattr(kernels, "nsight", FakeNsight(version, blind))
        return kernels
    return use


@pytest.mark.parametrize("said", [None, NO_KERNEL_1_1_1, "No kernels were profiled"],
                         ids=["1.1.0: a table without it", "1.1.1: RuntimeError", "Nsight Compute extraction"])
def test_measured_names_an_annotation_without_rows_whether_nsight_returns_an_empty_table_or_raises(kernels, said):
    def nothing():  # what nsight-python does when no kernel ran in the annotation
        if said:
            raise RuntimeError(said)
        return Result(pd.DataFrame(columns=["Annotation", "AvgValue"]))
    message = kernels.raised(lambda: kernels.measured(nothing, ["copy"]), LookupError)
    assert "['copy']" in message and "memcpy" in message
    assert (said or "a table without them") in message  # nsight's own words travel with it
    df = pd.DataFrame({"Annotation": ["copy"], "AvgValue": [1.0]})
    assert kernels.measured(lambda: Result(df), ["copy"]) is df and kernels.raised(lambda: None, LookupError) is None


@pytest.mark.parametrize("message", ["CUDA error: an illegal memory access was encountered",
                                     "Expect same number of kernels per run. Got average of 1.33 per run"])
def test_measured_lets_a_runtime_error_that_is_not_no_kernel_through(kernels, message):
    """A CUDA error (torch raises it as a RuntimeError) or a kernel-count refusal is not nsight saying 'no kernel':
    section 6 must not call it blindness."""
    def failing():
        raise RuntimeError(message)
    with pytest.raises(RuntimeError, match=message.split(":")[0]):
        kernels.measured(failing, ["add"])
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
    assert set(found) == {"counter_error", "copy_error"}


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


def test_the_module_finds_no_kernel_by_behaviour_not_by_frame_introspection():
    assert "inspect" not in module_source(STEM, "cupti_ncu_kernels")


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


def test_welch_gives_the_difference_its_standard_error_and_dof_that_scipy_s_interval_uses():
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 1, 10), rng.normal(101, 3, 8)
    d, se, dof = ANALYSIS.welch(summary(a), summary(b))
    low, high = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    half = stats.t.ppf(0.975, dof) * se
    assert d - half == pytest.approx(low) and d + half == pytest.approx(high)


def test_welch_works_on_whole_columns():
    frame = pd.DataFrame([summary([5.0, 5.1]), summary([1.0, 2.0, 4.0])])
    other = pd.DataFrame([summary([7.0, 7.2]), summary([3.0, 5.0, 4.5])])
    d, se, _ = ANALYSIS.welch(frame, other)
    assert d.tolist() == pytest.approx([2.05, (12.5 - 7) / 3])
    assert se[1] == pytest.approx(ANALYSIS.welch(frame.iloc[1], other.iloc[1])[1])


def test_compare_on_the_fixtures_puts_the_flush_against_the_band_and_the_clock_below_the_ceiling():
    t = tables()
    side = ANALYSIS.compare(t["cupti"], t, 1900.0).set_index("op")
    c, a, n = (ANALYSIS.times(t[k]) for k in ("cupti", "all", "none"))
    assert side.index.tolist() == ["add", "matmul 512", "matmul 1024", "matmul 2048", "matmul 4096"]
    for op in side.index:
        shift, half, _ = welch_shift(tuple(n.loc[op, ["mean", "sd", "runs"]]), tuple(a.loc[op, ["mean", "sd", "runs"]]))
        assert (side.loc[op, "flush %"], side.loc[op, "flush ±"]) == pytest.approx((shift, half))  # 03's Welch
        band = run_to_run_pct(*(tuple(x.loc[op, ["mean", "sd", "runs"]]) for x in (a, ANALYSIS.times(t["again"]))))
        assert side.loc[op, "band %"] == pytest.approx(band)  # 03's run-to-run band of the two 'all' calls
        d, se, dof = ANALYSIS.welch(c.loc[op], n.loc[op])
        assert side.loc[op, "us/kernel"] == pytest.approx(d / c.kernels[op])
        assert side.loc[op, "±"] == pytest.approx(stats.t.ppf(0.975, dof) * se / c.kernels[op])
        mhz = ANALYSIS.times(t["none"], CLOCK)["mean"][op]
        assert side.loc[op, "none MHz"] == pytest.approx(mhz)
        assert side.loc[op, "clock can add us"] == pytest.approx(c["mean"][op] * max(0.0, 1900.0 / mhz - 1))


def timing(op_us: dict, sd: float, runs: int, clock_mhz: float = 1980.0, kernels: dict | None = None) -> pd.DataFrame:
    """A SYNTHETIC table as nsight-python returns it: one time row per op, and a clock row (Nsight Compute's)."""
    rows = []
    for op, us in op_us.items():
        names = "|".join(["k"] * (kernels or {}).get(op, 1))
        rows += [(op, TIME, 1e3 * us, 1e3 * sd, runs, names, "ns", 1980000),
                 (op, CLOCK, 1e6 * clock_mhz, 1e3, runs, names, "hz", 1980000)]
    return pd.DataFrame(rows, columns=["Annotation", "Metric", "AvgValue", "StdDev", "NumRuns", "Kernel", "Unit",
                                       "ComputeClock"])


LENGTHS = {"add": 1.5, "matmul 512": 14.0, "matmul 1024": 61.0, "matmul 2048": 342.0, "matmul 4096": 2682.0}
SPLIT = {"matmul 512": 2}


def side_of(none_us: dict, clock_mhz: float = 1980.0, ceiling: float = 1980.0, sd: float = 0.05,
            flush: float = 0.0, again: float = 0.0) -> pd.DataFrame:
    """compare() on SYNTHETIC runs: CUPTI's times are LENGTHS; Nsight Compute's `none_us`, flushed `none_us` + `flush`
    us, and the second flushed call `again` us off the first."""
    cupti = timing(LENGTHS, sd=0.05, runs=10, kernels=SPLIT)
    flushed = {op: us + flush for op, us in none_us.items()}
    ncu = {"all": timing(flushed, sd, 3, clock_mhz, SPLIT), "none": timing(none_us, sd, 3, clock_mhz, SPLIT),
           "again": timing({op: us + again for op, us in flushed.items()}, sd, 3, clock_mhz, SPLIT)}
    return ANALYSIS.compare(cupti[cupti.Metric == TIME], ncu, ceiling)


def share_of(side: pd.DataFrame, ceiling: float = 1980.0) -> float:
    return max(0.0, ceiling / side["none MHz"].min() - 1)  # as section 3 computes it


def test_the_fit_gives_back_a_cost_per_kernel_and_a_share_of_the_length_it_was_built_with():
    side = side_of({op: us + 1.0 * SPLIT.get(op, 1) + 0.002 * us for op, us in LENGTHS.items()})
    (a, b), (ha, hb) = ANALYSIS.fit_extra(side)
    assert a == pytest.approx(1.0, abs=0.02) and b == pytest.approx(0.002, abs=1e-4)
    assert a - ha <= 1.0 <= a + ha and b - hb <= 0.002 <= b + hb


def test_the_fit_s_band_at_a_kernel_of_some_length_lies_between_its_two_terms_half_widths_apart_and_added():
    """SYNTHETIC: the 95 % half-width of a + b * L (the plot's band) is the terms' own at (1, 0) and (0, 1), and at
    (1, L) lies between |ha - hb * L| and ha + hb * L (their covariance is neither -1 nor +1)."""
    side = side_of({op: us + 1.0 * SPLIT.get(op, 1) + 0.002 * us for op, us in LENGTHS.items()}, sd=0.5)
    _, (ha, hb) = ANALYSIS.fit_extra(side)
    lengths = [1.0, 100.0, 2682.0]
    _, (at_a, at_b, *band) = ANALYSIS.fit_extra(side, [(1, 0), (0, 1)] + [(1, length) for length in lengths])
    assert (at_a, at_b) == pytest.approx((ha, hb))
    for length, half in zip(lengths, band):
        assert abs(ha - hb * length) < half < ha + hb * length


def test_the_fit_weights_each_kernel_by_its_precision_and_widens_where_points_scatter_beyond_their_errors():
    side = side_of({op: us + 1.0 * SPLIT.get(op, 1) for op, us in LENGTHS.items()})
    _, (ha, _) = ANALYSIS.fit_extra(side)
    rough = side.copy()
    rough.loc[rough.op == "matmul 4096", "se"] *= 100  # a long kernel's noise: it barely moves the cost per kernel
    assert ANALYSIS.fit_extra(rough)[0][0] == pytest.approx(ANALYSIS.fit_extra(side)[0][0], abs=0.01)
    scattered = side.copy()
    scattered["us/kernel"] += np.array([0.3, -0.3, 0.3, -0.3, 0.3])  # far beyond the rows' tiny errors
    _, (ha_scattered, _) = ANALYSIS.fit_extra(scattered)
    assert ha_scattered > 5 * ha  # the Birge ratio widens the interval


def test_a_cost_of_one_microsecond_per_kernel_at_every_length_is_a_cost_per_kernel_and_no_share_of_the_length():
    side = side_of({op: us + 1.0 * SPLIT.get(op, 1) for op, us in LENGTHS.items()}, clock_mhz=1960.0)
    per, length = ANALYSIS.overhead(side, share_of(side))
    assert per.startswith("1.00 ± ") and per.endswith(" us per kernel")
    assert length.startswith("no share of the length detected")


def test_a_share_of_the_length_is_read_against_the_most_the_clock_can_add():
    slower = {op: us * 1.03 for op, us in LENGTHS.items()}  # 3 % at every length, no cost per kernel
    by_clock = side_of(slower, clock_mhz=1980.0 / 1.04)  # ran 4 % below NVML's highest reading: the clock can add 4 %
    per, length = ANALYSIS.overhead(by_clock, share_of(by_clock))
    assert per == "no cost per kernel detected"
    assert length.startswith("a share of the length, within what the clock can add (+3.00 ± ")
    at_ceiling = side_of(slower)  # Nsight Compute ran at NVML's highest reading: the clock can add nothing
    assert ANALYSIS.overhead(at_ceiling, share_of(at_ceiling))[1].startswith(
        "a share of the length, more than the clock can add")


def test_a_held_clock_bounds_the_clock_s_share_by_the_lock_not_by_the_rated_maximum():
    """The capped H200: CUPTI and Nsight Compute both ran under a 1,500 MHz lock. Against the rated 1,980 MHz the
    clock 'could add' 32 % of every length, enough to explain anything; against NVML's highest reading, nothing."""
    slower = {op: us * 1.03 for op, us in LENGTHS.items()}
    rated = side_of(slower, clock_mhz=1500.0, ceiling=1980.0)
    held = side_of(slower, clock_mhz=1500.0, ceiling=1500.0)
    assert ANALYSIS.overhead(rated, share_of(rated, 1980.0))[1].startswith("a share of the length, within")
    assert ANALYSIS.overhead(held, share_of(held, 1500.0))[1].startswith("a share of the length, more than")
    assert (held["clock can add us"] == 0).all()


def test_no_difference_reads_no_cost_and_no_share():
    same = side_of(dict(LENGTHS))
    assert ANALYSIS.overhead(same, share_of(same)) == ("no cost per kernel detected",
                                                       "no share of the length detected (+0.00 ± 0.00 %)")


@pytest.mark.parametrize(("flush", "again", "expected"), [
    (0.0, 0.0, "no flush detected"),
    (5.0, 0.1, "flush +35.7 %, beyond the run-to-run band of "),
    (5.0, 7.0, "flush +35.7 %, within the run-to-run band of "),
], ids=["no flush", "beyond the band", "within the band"])
def test_the_reading_calls_a_flush_real_only_beyond_its_interval_and_the_run_to_run_band(flush, again, expected):
    side = side_of(dict(LENGTHS), flush=flush, again=again).set_index("op")
    said = ANALYSIS.reading(side.loc["matmul 512"].to_dict() | {"kernels": 1})
    assert said.startswith(expected), said
    assert said.endswith(": not called real") == ("within" in expected)
    split = ANALYSIS.reading(side.loc["matmul 512"].to_dict())  # two kernels: the flush also between them
    assert ("(also between its kernels)" in split) == ("beyond" in expected)


# --- the four real runs: the kept ones and the recorded free and clock-capped H200 runs -----------------

RECORDED = FIXTURES / "recorded"


def solved_sd(half_us: float, cupti_sd: float) -> float:
    """The SD of Nsight Compute's 3 runs that makes the printed Welch half-width against CUPTI's 10 runs."""
    def half(sd: float) -> float:
        va, vb = cupti_sd**2 / 10, sd**2 / 3
        dof = (va + vb) ** 2 / (va**2 / 9 + vb**2 / 2)
        return stats.t.ppf(0.975, dof) * np.sqrt(va + vb) - half_us
    return 0.0 if half(1e-9) > 0 else optimize.brentq(half, 1e-9, 1e4)


def recorded(name: str) -> dict[str, pd.DataFrame]:
    """A recorded run's printed tables (sections 1 and 3) as nsight-python's tables. Nsight Compute's SDs are not
    printed: each is solved from its printed Welch half-width against CUPTI; "again" is a copy of "all" (that run
    made no second call: the band is not read from it)."""
    kept = json.loads((RECORDED / f"{STEM}-side-{name}.json").read_text(encoding="utf-8"))
    c1 = pd.DataFrame(**kept["section_1"]).set_index("op")
    s3 = pd.DataFrame(**kept["section_3"]).set_index("op")
    names = {op: "|".join(["k"] * int(k)) for op, k in c1.kernels.items()}

    def table(mean, sd, runs, mhz=None):
        rows = [(op, TIME, 1e3 * mean[op], 1e3 * sd[op], runs, names[op], "ns", 1980000) for op in c1.index]
        rows += [(op, CLOCK, 1e6 * mhz[op], 0.0, runs, names[op], "hz", 1980000) for op in c1.index] if mhz is not None else []
        return pd.DataFrame(rows, columns=["Annotation", "Metric", "AvgValue", "StdDev", "NumRuns", "Kernel", "Unit",
                                           "ComputeClock"])
    out = {"cupti": table(c1["mean"], c1.sd, 10)}
    for tool in ("all", "none"):
        sd = {op: solved_sd(s3.loc[op, f"{tool}-CUPTI ±"] * c1.loc[op, "mean"] / 100, c1.loc[op, "sd"]) for op in c1.index}
        out[tool] = table(s3[f"{tool} us"], sd, 3, s3[f"clock {tool} MHz"])
    return out | {"again": out["all"], "printed": s3}


def nvml_highest(name: str) -> float:
    """The highest SM clock nvidia-smi sampled through a recorded run (tests/fixtures/clock): a bound on CUPTI's."""
    rows = (FIXTURES / "clock" / f"h200-{name}.csv").read_text(encoding="utf-8").splitlines()
    return float(max(int(row.split(",")[3]) for row in rows if row.strip()))


RUNS_AND_CEILINGS = {"normal": "normal", "capped": "clock-capped"}


def test_the_recorded_tables_are_rebuilt_faithfully_from_what_was_printed():
    for name in RUNS_AND_CEILINGS:
        t = recorded(name)
        side = ANALYSIS.compare(t["cupti"], t, 1980.0).set_index("op")
        printed = t["printed"]
        assert side["us/kernel"].to_numpy() == pytest.approx(printed["us/kernel"].to_numpy(), abs=0.02)
        # the flush interval was printed in % of CUPTI; compare() gives it in % of 'none': rescale, allow rounding
        flush_half = side["flush ±"] * side["none us"] / side["CUPTI us"]
        assert flush_half.to_numpy() == pytest.approx(printed["all-none ±"].to_numpy(), rel=0.05, abs=0.02)


def section_3_verdicts(t: dict, ceiling: float) -> dict:
    """Section 3's fit verdicts on one run: the cost per kernel (value, half-width) and the share of the length."""
    side = ANALYSIS.compare(t["cupti"], t, ceiling)
    (a, _), (ha, _) = ANALYSIS.fit_extra(side)
    per, length = ANALYSIS.overhead(side, max(0.0, ceiling / side["none MHz"].min() - 1))
    return {"per kernel": (a, ha), "per words": per.split(" ± ")[0].replace(".", "").isdigit(),
            "length": length.split(" (")[0], "clock can add, longest us": side["clock can add us"].iloc[-1]}


def four_runs() -> dict:
    runs = {name: section_3_verdicts(recorded(name), nvml_highest(csv)) for name, csv in RUNS_AND_CEILINGS.items()}
    for run in ("run1", "run2"):  # the kept runs ran on a free H200 (setup then kept no NVML reading): rated 1,980 MHz
        runs[run] = section_3_verdicts(tables(run), 1980.0)
    return runs


EXPLAINED = {"no share of the length detected", "a share of the length, within what the clock can add"}


def test_section_3_gives_the_same_verdicts_on_a_free_and_a_clock_capped_h200_and_two_kept_runs():
    """The verdict that flipped (a fixed overhead of 1.48 us on the free H200, "not a fixed overhead" on the capped
    one) now agrees: a cost per kernel whose intervals overlap in every pair of runs, and a share of the length that
    is either not detected or within what the clock can add."""
    runs = four_runs()
    assert all(v["per words"] for v in runs.values()), runs  # a cost per kernel detected in every run
    for first, second in [(f, s) for f in runs for s in runs if f < s]:
        (a1, h1), (a2, h2) = runs[first]["per kernel"], runs[second]["per kernel"]
        assert abs(a1 - a2) <= h1 + h2, (first, second, runs)
    assert {v["length"] for v in runs.values()} <= EXPLAINED, runs
    assert {runs["normal"]["length"], runs["capped"]["length"]} == {"no share of the length detected"}


def test_on_the_capped_run_the_clock_bound_comes_from_the_lock_not_the_rated_clock():
    t = recorded("capped")
    assert nvml_highest("clock-capped") == 1500.0 and nvml_highest("normal") == 1980.0
    held = section_3_verdicts(t, 1500.0)["clock can add, longest us"]
    rated = section_3_verdicts(t, 1980.0)["clock can add, longest us"]
    assert held < 10 < 1000 < rated  # the old reading: 1,122 us 'the clock can add' to matmul 4096


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_the_kept_second_all_call_gives_a_band_that_calls_the_split_k_flush_real(run):
    """Skips until a GPU run keeps 09_cupti_vs_ncu--workload-again (section 2's second 'all' call)."""
    again = fixture(f"{STEM}--workload-again", run)[1]
    t = tables(run) | {"again": again}
    side = ANALYSIS.compare(t["cupti"], t, 1980.0).set_index("op")
    assert (side["band %"] > 0).all()
    assert ANALYSIS.reading(side.loc["matmul 512"].to_dict()).startswith("flush +")


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_the_kept_nvml_clock_during_cupti_bounds_the_clock_and_keeps_the_verdict(run):
    """Skips until a GPU run keeps 09_cupti_vs_ncu--cupti-clock (NVML's SM clock while CUPTI measured)."""
    highest = float(fixture(f"{STEM}--cupti-clock", run)[1].highest.iloc[0])
    assert 0 < highest <= 1980.0  # never above the H200's rated maximum
    assert section_3_verdicts(tables(run), highest)["length"] in EXPLAINED


# --- section 3's cell, run on the kept tables: what it prints, its claims, its plot ---------------

def section_3(t: dict, cupti_mhz, capsys, tmp_path) -> tuple[str, str, list]:
    """Section 3's cell on one run's tables (no GPU): what it printed, its result line and its claims; the figure is
    saved to tmp_path/section3.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    text = source(STEM)
    code = re.search(r"^# %%\n(.*?)(?=^# %%)", text[text.index("# ## 3. Side by side"):], flags=re.M | re.S).group(1)
    claims, result = [], SimpleNamespace(result=None)

    @contextlib.contextmanager
    def section(name):
        yield result

    notebook = SimpleNamespace(section=section, claim=lambda ok, what, evidence="": claims.append((ok, what)),
                               needs=lambda value, **k: value, rules=nt.rules, show=nt.show)
    ns = dict(np=np, pd=pd, stats=stats, plt=plt, nt=notebook, ncu_cli=ncu_cli, TIME=TIME, CLOCK=CLOCK,
              welch_shift=welch_shift, run_to_run_pct=run_to_run_pct, times=ANALYSIS.times,
              ENV=SimpleNamespace(require=lambda *a, **k: None, gpu_name="NVIDIA H200", backend="cupti"),
              CUPTI={"table": t["cupti"]}, NCU={k: t[k] for k in ("all", "none", "again")}, CUPTI_MHZ=cupti_mhz)
    exec(compile(code, "section 3", "exec"), ns)  # noqa: S102
    plt.gcf().savefig(tmp_path / "section3.png", dpi=80)
    axes = plt.gcf().axes
    plt.close("all")
    return capsys.readouterr().out, result.result, claims, axes


def test_section_3_prints_its_tables_within_eight_columns_and_its_clock_basis(capsys, tmp_path):
    printed, said, claims, axes = section_3(tables("run1"), (1500, 345, 1980), capsys, tmp_path)
    assert all(ok for ok, _ in claims), claims
    assert "NVML's highest reading during CUPTI, 1,980 MHz" in printed
    assert said.startswith("unflushed: 1.12 ± 0.17 us per kernel, a share of the length, within what the clock")
    assert said.endswith("; matmul 4096 +0.4 %") and len(said) <= 120
    shown = re.findall(r"nt\.show\(SIDE, \[(.*?)\]\)", source(STEM))
    assert len(shown) == 2 and all(len(columns.split(",")) <= 8 for columns in shown)  # tables of 8 columns at most
    assert sum(1 for line in printed.splitlines() if line.lstrip().startswith("op ")) == 2
    assert (tmp_path / "section3.png").stat().st_size > 0


def test_section_3_plots_on_a_linear_axis_that_shows_zero_and_every_interval_whole(capsys, tmp_path):
    """The old log axis cut an interval that crossed 0 off at the bottom (matmul 4096: it looked like extra time)."""
    printed, _, _, axes = section_3(tables("run1"), (1500, 345, 1980), capsys, tmp_path)
    ax = axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "linear")
    bottom, top = ax.get_ylim()
    side = ANALYSIS.compare(tables("run1")["cupti"], tables("run1"), 1980.0)
    assert bottom < min(0, (side["us/kernel"] - side["±"]).min()) and (side["us/kernel"] + side["±"]).max() < top
    assert any(list(line.get_ydata()) == [0, 0] for line in ax.get_lines())  # the zero line


def test_section_3_s_legend_says_the_fit_s_verdicts_as_printed_and_the_title_names_both_tools(capsys, tmp_path):
    printed, _, _, axes = section_3(tables("run1"), (1500, 345, 1980), capsys, tmp_path)
    legend = [text.get_text() for text in axes[0].get_legend().get_texts()]
    per, length = re.search(r"a fit over all kernels: (.*)\n  and (.*)\n", printed).groups()
    assert legend[0] == f"fit and its 95 % band: {per}\n  + {length}"
    assert axes[0].get_title() == "NVIDIA H200: ncu command line (cache none, clocks free) − CUPTI, per kernel"


def test_section_3_says_the_rated_clock_where_nvml_could_not_be_read(capsys, tmp_path):
    printed, _, _, _ = section_3(tables("run2"), None, capsys, tmp_path)
    assert "(rated / Nsight Compute's lowest)" in printed


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


def test_section_4_prints_whose_rules_made_its_table_before_showing_it():
    text = source(STEM)
    code = re.search(r"^# %%\n(.*?)(?=^# %%)", text[text.index("# ## 4. Two more clocks"):], flags=re.M | re.S).group(1)
    assert "nt.rules('cupti')" in code and code.index("nt.rules('cupti')") < code.index("nt.show(")


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
    assert result.endswith("nsight after: no kernel record, blind too (restart to profile again)")
    printed, result = section_6({"cuda_events": 0, "nsight_after": None}, capsys)
    assert result.endswith("nsight after: a row, as before") and "blind" not in printed
