"""Specifications for notebook 09's code that a CPU can check before a GPU ever runs it.

* The kernels module (``cupti_ncu_kernels.py``, the notebook's ``%%writefile`` cell): run as the
  CUPTI child it must take its steps in one order -- ``NSPY_NCU_INIT_AT_IMPORT=0``, the libcupti
  preload, ``import nsight``, CUPTI activation, and only then torch -- and run any other way it
  must take none of them. Its ``combine_kernel_metrics`` and empty-result check run here too.
* The analysis (``times``, ``welch``, ``reading``, ``compare``, ``event_clocks``) runs on tables
  shaped exactly as nsight-python returns them: ``09_cupti_vs_ncu--workload-{all,none}`` (the
  ``ncu`` command line read back by nsight-python's own extraction; the Nsight Compute backend
  gives the same shape) and ``--workload-cupti`` (the CUPTI backend), kept from a strict run on
  the GPU test machine (``NSPY_TUTORIAL_KEEP_TABLES``); the tests below hold for any real run's values.
* What the notebook says about torch's libcupti, from ``torch.version.cuda`` (a fake CUDA 12
  torch), and a failed ``pip install`` of cupti-python on Colab: SKIPPED with the remedy.
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source
from scipy import stats

import nspy_tutorial as nt
from nspy_tutorial import backend, ncu_cli, sections

STEM = "09_cupti_vs_ncu"
TIME, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
ANALYSIS = functions(STEM, "times", "welch", "reading", "compare", "event_clocks", np=np, pd=pd, stats=stats,
                     ncu_cli=ncu_cli, TIME=TIME, CLOCK=CLOCK)


def tables() -> dict[str, pd.DataFrame]:
    return {name: fixture(f"{STEM}--workload-{name}")[1] for name in ("cupti", "all", "none")}


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


def test_measured_names_an_annotation_without_rows_and_error_of_returns_the_message(kernels):
    empty = pd.DataFrame(columns=["Annotation", "AvgValue"])  # what a memcpy-only region gives under CUPTI
    message = kernels.error_of(lambda: kernels.measured(Result(empty), ["copy"]), RuntimeError)
    assert "['copy']" in message and "memcpy" in message
    assert kernels.error_of(lambda: kernels.measured(Result(pd.DataFrame()), ["copy"]), RuntimeError)
    df = pd.DataFrame({"Annotation": ["copy"], "AvgValue": [1.0]})
    assert kernels.measured(Result(df), ["copy"]) is df and kernels.error_of(lambda: None, RuntimeError) is None


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
    c, a = ANALYSIS.times(t["cupti"]), ANALYSIS.times(t["all"])
    for i, op in enumerate(side.op):
        d, half = ANALYSIS.welch(c.loc[op], a.loc[op])
        assert side["all-CUPTI"][i] == pytest.approx(100 * d / c["mean"][op])
        assert side["all-CUPTI ±"][i] == pytest.approx(100 * half / c["mean"][op])
        assert side["clock none MHz"][i] == pytest.approx(ANALYSIS.times(t["none"], CLOCK)["mean"][op])
    for r in side.to_dict("records"):  # the reading says "flush" exactly when its interval excludes 0
        assert bool(re.search(r"\bflush ", r["reading"])) == (abs(r["all-none"]) > r["all-none ±"])
        assert ("unflushed" in r["reading"]) == (abs(r["none-CUPTI"]) > r["none-CUPTI ±"])


def row(**values) -> dict:
    base = {"kernels": 1, "all-none": 0.0, "all-none ±": 1.0, "none-CUPTI": 0.0, "none-CUPTI ±": 1.0,
            "clock none MHz": 1980.0, "max MHz": 1980.0}
    return {**base, **values}


@pytest.mark.parametrize(("values", "expected"), [
    ({}, "no difference detected"),
    ({"all-none": 20.0, "kernels": 2}, "flush +20.0 % (also between its kernels)"),
    ({"none-CUPTI": 10.0, "clock none MHz": 1755.0}, "the clock can account for it (up to +12.8 %)"),
    ({"none-CUPTI": 10.0}, "1,980 of 1,980 MHz: more than the clock can explain (up to +0.0 %)"),
    ({"none-CUPTI": 20.0, "none-CUPTI ±": 2.0, "clock none MHz": 1755.0}, "more than the clock can explain (up to +12.8 %)"),
    ({"none-CUPTI": -5.0}, "unflushed -5.0 % at 1,980 of 1,980 MHz: faster than CUPTI"),
], ids=["nothing", "flush, split-K", "slow clock", "clock at max", "gap above the clock's bound", "faster"])
def test_the_clock_column_is_read_against_the_rated_maximum(values, expected):
    assert expected in ANALYSIS.reading(row(**values))


def test_event_clocks_subtract_cuptis_kernel_mean_over_the_same_launches():
    cupti = tables()["cupti"]
    kernel = ANALYSIS.times(cupti)["mean"]
    events = [(op, 1e3 * us + 8000 + 100 * run, 1e3 * us + 30000) for op, us in kernel.items() for run in range(10)]
    got = ANALYSIS.event_clocks(events, cupti)
    assert got.op.tolist() == list(kernel.index)
    assert got["overhead us"].to_numpy() == pytest.approx(np.full(len(kernel), 8.45))
    assert got["wall us"].to_numpy() == pytest.approx((kernel + 30).to_numpy())
    assert got["overhead %"].iloc[0] > got["overhead %"].iloc[-1]


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
    def fake_run(cmd, check=False, **kwargs):  # like subprocess.run: check=True raises on a failed pip
        ran.append(cmd)
        done = subprocess.CompletedProcess(cmd, pip_exit, "", "ERROR: No matching distribution found for cupti-python")
        return done.check_returncode() if check else done

    fake_backend = SimpleNamespace(cupti_problem=lambda library, available: "cupti-python is not installed",
                                   find_cupti_library=lambda paths=None: None, cupti_python_available=lambda: False)
    install = [sys.executable, "-m", "pip", "install", "--target", str(tmp_path / "pkgs"), "cupti-python>=13.4"]
    return functions(STEM, "cupti_child", ENV=SimpleNamespace(on_colab=on_colab), nt=nt, backend=fake_backend,
                     subprocess=SimpleNamespace(run=fake_run), os=os, pd=pd, ncu_cli=ncu_cli, child=None,
                     CUPTI_DIR=str(tmp_path / "pkgs"), CUPTI_INSTALL=install,
                     CUPTI_REMEDY="`pip install 'nsight-python[cupti]'` ...").cupti_child


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
    assert reason in record.reason and "pip install 'nsight-python[cupti]'" in record.remedy
    assert len(ran) == (1 if on_colab else 0)  # pip runs on Colab only, and its command is printed
    assert ("$ " in capsys.readouterr().out) == on_colab
