"""Notebook 04's analysis on the table the Nsight Compute backend returns, on a CPU.

Section 1 of 04 measures ``cache_kernels.stream_and_matmul`` under the four cache/clock combinations,
with nsight-python's Nsight Compute backend or with the ``ncu`` command line (``ncu_cli.nsight_table``);
both hand the notebook nsight-python's own ``to_dataframe()`` table, and everything after that is the
functions run here, as the notebook has them. Three kinds of data:

* the GPU run's kept tables (``tests/fixtures/run1|run2``, one per combination:
  ``04_cache_and_clock_control--stream_and_matmul-<cache>-<clock>``). The fourth combination
  (``none-base``) and the clean L2 before each annotation are new: the tests that read all four kept
  tables skip until a GPU run keeps them;
* SYNTHETIC tables made now from run1's three kept ones: the fourth combination modelled on them, and
  the warm rows' DRAM writes set to the flushed rows' (what the clean L2 step is there to give);
* the two recorded strict runs' section-1 tables (``tests/fixtures/recorded/``, parsed from the
  executed notebooks), normal and with the SM clock left locked at 1,500 MHz.

Section 2 (the clock after ncu, the reset offered) and section 1's cell run with fakes of the GPU's
clock and of ncu. Section 3's analysis (warm vs flushed spread) reads the raw per-run CSV of its twenty
runs, kept as ``04_cache_and_clock_control--stream_after-raw``. Every claim is also shown to fail on data
that contradicts it.
"""

from __future__ import annotations

import ast
import contextlib
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source, source
from scipy import stats

from nspy_tutorial import ncu_cli, sections
from nspy_tutorial.clock import ClockState

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STEM = "04_cache_and_clock_control"
COMBINATIONS = [("all", "none"), ("none", "none"), ("all", "base"), ("none", "base")]
# an H200's NVML memory clock, and the bus width that gives the recorded runs' 4,814 GB/s
H200 = SimpleNamespace(max_mem_clock_mhz=3201, memory_bus_width_bits=6016)
FP16 = (989.4, 1830.0)  # an H200's fp16 datasheet peak (TFLOP/s) and the SM clock it is stated at (MHz)
MATMUL_N = 4096  # cache_kernels.MATMUL_N, checked below
SMALL_N, LARGE_N = 3_932_160, 125_829_120  # the H200's sizes (L2/4 and 8 x L2 bytes of float32)
RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded"
HELD_MHZ = 1500  # the capped run's SM clock, every idle sample (tests/fixtures/clock/h200-clock-capped.csv)
ANALYSIS = ("per_run", "per_configuration", "check_cache", "check_clock", "check_peak", "check_bandwidth",
            "plot_times", "spread", "check_spread")
FITS, EIGHT, MATMUL = "x * 2, fits in L2", "x * 2, 8x L2", "fp16 matmul"
WROTE = "DRAM wrote / 4n"


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


NAMES = constants("TIME", "SM_HZ", "DRAM_RATE", "DRAM_WRITE", "STREAMS", "MATMUL")


@pytest.fixture(scope="module")
def nb():
    namespace = {"nt": sections, "pd": pd, "np": np, "stats": stats, "plt": plt, "ncu_cli": ncu_cli, **NAMES}
    return functions(STEM, *ANALYSIS, **namespace)


def kept(combo: tuple, run: str = "run1") -> pd.DataFrame:
    return fixture(f"{STEM}--stream_and_matmul-{combo[0]}-{combo[1]}", run=run)[1]


def kept_tables(run: str = "run1") -> dict:
    """All four kept tables of a run: a skip until a GPU run has kept the fourth (none-base)."""
    return {combo: kept(combo, run) for combo in COMBINATIONS}


def scaled(tables: dict, combo: tuple, annotation: str, metric: str, factor: float) -> dict:
    """A copy of ``tables`` with one metric of one annotation multiplied by ``factor``."""
    tables = {k: v.copy() for k, v in tables.items()}
    t = tables[combo]
    rows = (t.Annotation == annotation) & (t.Metric == metric)
    t.loc[rows, ["AvgValue", "MinValue", "MaxValue"]] *= factor
    return tables


def value(table: pd.DataFrame, annotation: str, metric: str) -> float:
    return table[(table.Annotation == annotation) & (table.Metric == metric)].AvgValue.iloc[0]


def synthetic_tables() -> dict:
    """SYNTHETIC: run1's three kept tables and a fourth, none-base, modelled on them (all-base with each stream
    time scaled by the free clock's warm/flushed ratio, moving none-none's DRAM bytes); then the warm rows
    cleaned: their DRAM writes set to the flushed rows' (what the clean L2 step is there to give), the bytes
    the DRAM read kept."""
    time, rate, write = NAMES["TIME"], NAMES["DRAM_RATE"], NAMES["DRAM_WRITE"]
    tables = {combo: kept(combo) for combo in COMBINATIONS[:3]}
    warm_free, cold_free, none_base = tables[("none", "none")], tables[("all", "none")], tables[("all", "base")].copy()

    def put(table, annotation, metric, new):
        table.loc[(table.Annotation == annotation) & (table.Metric == metric), "AvgValue"] = new

    for annotation in (FITS, EIGHT):
        seconds = value(none_base, annotation, time) * value(warm_free, annotation, time) / value(
            cold_free, annotation, time)
        put(none_base, annotation, time, seconds)
        put(none_base, annotation, rate, value(warm_free, annotation, rate) * value(warm_free, annotation, time)
            / seconds)
        put(none_base, annotation, write, value(warm_free, annotation, write))
    tables[("none", "base")] = none_base
    for clock in ("none", "base"):
        warm, cold = tables[("none", clock)].copy(), tables[("all", clock)]
        for annotation in (FITS, EIGHT):
            seconds = value(warm, annotation, time) * 1e-9
            read = value(warm, annotation, rate) * seconds - value(warm, annotation, write)
            clean = value(cold, annotation, write)
            put(warm, annotation, write, clean)
            put(warm, annotation, rate, (read + clean) / seconds)
        tables[("none", clock)] = warm
    return tables


def recorded(tag: str) -> pd.DataFrame:
    """Section 1's table as a recorded strict run printed it (3 combinations; see the folder's README)."""
    return pd.read_csv(RECORDED / f"{STEM}-table-{tag}.csv")


def cleaned(table: pd.DataFrame) -> pd.DataFrame:
    """A recorded table with each warm stream row's DRAM writes set to its flushed row's (what the clean L2
    step gives; the recorded runs measured before it)."""
    table = table.copy()
    for kernel in (FITS, EIGHT):
        for clock in set(table.clock_control):
            rows = table[(table.kernel == kernel) & (table.clock_control == clock)].set_index("cache_control")
            if {"all", "none"} <= set(rows.index):
                pick = (table.kernel == kernel) & (table.clock_control == clock) & (table.cache_control == "none")
                table.loc[pick, WROTE] = rows.loc["all", WROTE]
    return table


# --- the kernels module ------------------------------------------------------------------------------

def test_the_kept_tables_have_the_shape_of_nsight_pythons_table_for_the_kernels_module(tmp_path):
    ck = import_module(STEM, "cache_kernels", tmp_path)
    assert ck.MATMUL_N == MATMUL_N
    for combo in COMBINATIONS[:3]:
        call, table = fixture(f"{STEM}--stream_and_matmul-{combo[0]}-{combo[1]}")
        assert call["function"] == ck.stream_and_matmul.__name__
        assert call["metrics"] == [NAMES["TIME"], NAMES["SM_HZ"], NAMES["DRAM_RATE"], NAMES["DRAM_WRITE"]]
        assert set(table.Annotation) == {*NAMES["STREAMS"], NAMES["MATMUL"]}
        assert {"small", "large", "AvgValue", "Unit", "ComputeClock", "RelativeStdDevPct"} <= set(table.columns)


def test_the_kernels_module_opens_the_annotations_the_analysis_reads_and_replays_under_ncu():
    text = module_source(STEM, "cache_kernels")
    for annotation in [*NAMES["STREAMS"], NAMES["MATMUL"]]:
        assert f'"{annotation}"' in text
    assert re.search(r'if __name__ == "__main__":[\s\S]*ncu_cli\.replay\(globals\(\)\)', text)


class Events:
    """A fake torch and nsight for the kernels module: what it reads, writes and annotates, in order."""

    float16 = "float16"

    def __init__(self):
        self.log = []
        self.cuda = SimpleNamespace(current_device=lambda: 0,
                                    get_device_properties=lambda d: SimpleNamespace(L2_cache_size=64))

    def tensor(self, name):
        events = self

        class Tensor:
            def sum(self):
                events.log.append(f"read {name}")

            def __mul__(self, other):
                events.log.append(f"kernel on {name}")

            __matmul__ = __mul__

        return Tensor()

    def randn(self, *shape, **kw):
        self.log.append(f"write input {len(self.log)}")
        return self.tensor(f"input {len(self.log) - 1}")

    def ones(self, n, device):
        self.log.append(f"write scratch of {4 * n} bytes")
        return self.tensor("scratch")

    @contextlib.contextmanager
    def annotate(self, name):
        self.log.append(f"open {name}")
        yield
        self.log.append("close")


def test_each_annotation_starts_on_a_clean_l2_holding_its_input_unless_evicted(tmp_path):
    """torch.randn's dirty lines are written back before the annotation opens: a read of a buffer twice
    the L2 (made once), then the input read back (warm) -- or not (section 3's flushed case)."""
    ck = import_module(STEM, "cache_kernels", tmp_path)
    events = Events()
    ck.torch, ck.nsight = events, events
    ck.stream_and_matmul(4, 8)
    log = events.log
    assert log[:7] == ["write input 0", "write scratch of 128 bytes", "read scratch", "read input 0",
                       "open x * 2, fits in L2", "kernel on input 0", "close"]
    assert log.count("write scratch of 128 bytes") == 1 and log.count("read scratch") == 3
    for name in ("x * 2, 8x L2", "fp16 matmul"):
        opened = log.index(f"open {name}")
        assert log[opened - 2] == "read scratch" and log[opened - 1].startswith("read input")
    events.log.clear()
    ck.stream_after(4, True)
    assert events.log == ["write input 0", "read scratch", "open x * 2", "kernel on input 0", "close"]
    events.log.clear()
    ck.stream_after(4, False)
    assert events.log == ["write input 0", "read scratch", "read input 0", "open x * 2", "kernel on input 0",
                          "close"]


# --- section 1: the table -----------------------------------------------------------------------------

def test_per_configuration_reads_gbs_dram_shares_and_the_matmuls_own_clock(nb):
    tables = synthetic_tables()
    table = nb.per_configuration(tables, MATMUL_N)
    assert len(table) == 3 * len(COMBINATIONS)
    stream = table[table.kernel == EIGHT].iloc[0]
    assert stream["GB/s"] == pytest.approx(8 * LARGE_N / (stream.time_us * 1e-6) / 1e9)
    assert 0 < stream[WROTE] <= 1.05 and 500 < stream["SM MHz"] < 3000
    assert table[table.kernel == MATMUL]["GB/s"].isna().all()  # no byte rates for the matmul
    by = table.set_index(["cache_control", "clock_control", "kernel"])
    for combo, t in tables.items():  # not inferred from the streams': the kernels ran at different clocks
        assert by.loc[(*combo, MATMUL), "SM MHz"] == pytest.approx(value(t, MATMUL, NAMES["SM_HZ"]) / 1e6)


def test_time_is_read_in_the_unit_the_table_states(nb):
    tables = synthetic_tables()
    in_us = {k: v.copy() for k, v in tables.items()}
    t = in_us[("all", "none")]
    rows = t.Metric == NAMES["TIME"]
    t.loc[rows, "AvgValue"] /= 1e3
    t.loc[rows, "Unit"] = "usecond"
    a, b = nb.per_configuration(tables, MATMUL_N), nb.per_configuration(in_us, MATMUL_N)
    assert b.time_us.tolist() == pytest.approx(a.time_us.tolist())


def test_a_split_matmul_run_reads_as_one_kernel_through_nsight_pythons_own_extraction(nb):
    """cuBLAS may split the matmul: per_run (the notebook's combine_kernel_metrics) adds times and bytes and
    weights the clock and the DRAM rate by each kernel's time; nsight-python's own extraction and aggregation
    run for real on two SYNTHETIC runs."""
    from nsight import extraction, transformation, utils
    from nsight.utils import VerbosityLevel

    metrics = [NAMES["TIME"], NAMES["SM_HZ"], NAMES["DRAM_RATE"], NAMES["DRAM_WRITE"]]

    def action(name, ns, hz, rate, written):
        return utils.ActionData(name=name, values=np.array([ns, hz, rate, written]), compute_clock=1980000,
                                memory_clock=3201000, gpu="NVIDIA H200", units=["ns", "hz", "byte/s", "byte"])

    def stream_and_matmul(small, large): ...

    data = {FITS: [action("elementwise", 7000.0, 1.9e9, 1.1e12, 8e6)] * 2,
            EIGHT: [action("elementwise", 238000.0, 1.9e9, 4.2e12, 5e8)] * 2,
            MATMUL: [action("gemm_splitK", 150000.0, 1.5e9, 6e11, 2e7),
                     action("splitKreduce_kernel", 50000.0, 1.9e9, 2e12, 3e7)] * 2}
    raw = extraction.extract_df_from_data(data, metrics, [(SMALL_N, LARGE_N)], 2, stream_and_matmul, None,
                                          VerbosityLevel.SILENT, nb.per_run)
    table = transformation.aggregate_data(raw, stream_and_matmul, None, VerbosityLevel.SILENT)
    row = nb.per_configuration({("all", "none"): table}, MATMUL_N).set_index("kernel").loc[MATMUL]
    assert row.kernels == 2 and row.time_us == pytest.approx(200.0)
    assert row["SM MHz"] == pytest.approx((150 * 1500 + 50 * 1900) / 200)  # cycles / time
    assert row["TFLOP/s"] == pytest.approx(2 * MATMUL_N**3 / 200e-6 / 1e12)


# --- section 1: the checks on a SYNTHETIC 2 x 2 ----------------------------------------------------------

def test_every_check_holds_on_a_synthetic_2x2_and_reads_both_clock_settings(nb, capsys):
    table = nb.per_configuration(synthetic_tables(), MATMUL_N)
    cache = nb.check_cache(table)
    clock = nb.check_clock(table, {1980000}, None)
    peak = nb.check_peak(table, *FP16)
    bandwidth = nb.check_bandwidth(table, H200, 4800.0)
    nb.plot_times(table)
    plt.close("all")
    out = capsys.readouterr().out
    assert "clock none:" in out and "clock base:" in out  # the cache effect, under either clock
    assert cache.startswith("flushed/warm") and clock.endswith("; not one frequency)")
    assert re.fullmatch(r"fp16 matmul \d+% of peak at its [\d,]+ MHz \(\d+% at the datasheet's 1,830\)", peak)
    assert "2 x 3,201 MHz x 6,016 bit / 8 = 4,814 GB/s" in out
    assert re.fullmatch(r"8x-L2 stream [\d,]+ of 4,814 GB/s \(2 x memory clock x bus width\)", bandwidth)
    assert out.count("check:") == 8


def test_the_peak_at_the_clock_scales_the_datasheet_peak_by_the_clock_it_is_stated_at(nb, capsys):
    table = nb.per_configuration(synthetic_tables(), MATMUL_N)
    nb.check_peak(table, *FP16)
    mm = table[(table.kernel == MATMUL) & (table.clock_control == "base")].iloc[0]
    expected = 100 * mm["TFLOP/s"] / (FP16[0] * mm["SM MHz"] / FP16[1])
    assert f"{expected:.1f}" in capsys.readouterr().out


def test_the_peak_claim_fails_when_the_matmul_beats_the_peak_at_its_clock(nb):
    """A clock read too low (15 % under the truth) would put the matmul above the peak at that clock."""
    slow_clock = scaled(synthetic_tables(), ("all", "base"), MATMUL, NAMES["SM_HZ"], 0.85)
    with pytest.raises(sections.ClaimFailed, match="never beats the fp16 peak at the clock it ran at"):
        nb.check_peak(nb.per_configuration(slow_clock, MATMUL_N), *FP16)


def test_without_the_datasheet_peak_or_its_clock_the_peak_check_says_so_and_claims_nothing(nb, capsys):
    table = nb.per_configuration(synthetic_tables(), MATMUL_N)
    for peak, clock in ((FP16[0], None), (None, None)):
        assert nb.check_peak(table, peak, clock).startswith("fp16 matmul up to")
    out = capsys.readouterr().out
    assert "no % of peak" in out and "check:" not in out


def test_a_held_clock_is_named_beside_the_percent_of_the_datasheet(nb, capsys):
    nb.check_peak(nb.per_configuration(synthetic_tables(), MATMUL_N), *FP16, (1500, 1500 / 1980))
    assert "SM clock held at 1,500 MHz, 76% of its maximum" in capsys.readouterr().out


def test_the_cache_claim_fails_when_warm_caches_do_not_help_the_small_stream(nb):
    tables = synthetic_tables()
    warm, cold = (value(tables[c], FITS, NAMES["TIME"]) for c in (("none", "base"), ("all", "base")))
    table = nb.per_configuration(scaled(tables, ("none", "base"), FITS, NAMES["TIME"], cold / warm), MATMUL_N)
    with pytest.raises(sections.ClaimFailed, match="only for the size that fits in L2, under either clock"):
        nb.check_cache(table)  # only under the locked clock: the 2 x 2's fourth table decides it


def test_the_served_from_l2_claim_fails_when_the_dram_read_the_warm_input(nb):
    tables = synthetic_tables()
    rate = value(tables[("all", "none")], FITS, NAMES["DRAM_RATE"]) / value(tables[("none", "none")], FITS,
                                                                           NAMES["DRAM_RATE"])
    cold_dram = scaled(tables, ("none", "none"), FITS, NAMES["DRAM_RATE"], 2 * rate)
    with pytest.raises(sections.ClaimFailed, match="input came from L2"):
        nb.check_cache(nb.per_configuration(cold_dram, MATMUL_N))


def test_the_writes_claim_fails_on_the_recorded_runs_where_torch_randns_dirty_input_was_written_back(nb):
    """Both recorded runs measured before the clean L2 step: warm, the DRAM wrote 1.01 of the 8x stream's
    output (0.95 flushed) and 0.54 of the small one's (0.00). With those rows cleaned the claims hold."""
    for tag in ("normal", "capped"):
        with pytest.raises(sections.ClaimFailed, match=r"the DRAM writes counted are the kernel's own.*0\.54 warm"):
            nb.check_cache(recorded(tag))
        assert nb.check_cache(cleaned(recorded(tag))).startswith("flushed/warm")


# --- section 1: the clock, free and held ---------------------------------------------------------------

def test_on_the_recorded_normal_run_every_clock_moves_and_the_matmul_follows_its_own(nb, capsys):
    said = nb.check_clock(recorded("normal"), {1980000}, None)
    assert said == "matmul 1.24x slower locked (1,572->1,266 MHz; not one frequency)"
    assert "check: every kernel's SM clock moves with clock_control" in capsys.readouterr().out


def test_on_the_recorded_capped_run_the_lock_is_named_and_section_1_passes(nb, capsys):
    """Issue 30: the capped run FAILED '...every kernel's SM clock moves with clock_control (fp16 matmul: 1,262
    vs 1,268 MHz ...)' though its own data showed the lock (222.60 vs 221.47 us). Now it says so and passes."""
    table = recorded("capped")
    said = nb.check_clock(table, {1980000}, HELD_MHZ)
    assert said == "clock held (1,268 MHz under load): clock_control moved nothing"
    nb.check_peak(table, *FP16, (HELD_MHZ, HELD_MHZ / 1980))
    nb.check_bandwidth(table, H200, 4800.0)
    nb.check_cache(cleaned(table))
    out = capsys.readouterr().out
    assert "setup found the SM clock held at 1,500 MHz even idle" in out
    assert "check: on a clock already held, clock_control moves neither" in out
    assert "every kernel's SM clock moves" not in out


def test_a_lock_that_setup_did_not_see_is_named_as_one_since_setup(nb, capsys):
    assert nb.check_clock(recorded("capped"), {1980000}, None).startswith("clock held")
    assert "setup found the SM clock free: held since then" in capsys.readouterr().out


def test_on_a_held_clock_a_matmul_whose_time_moves_fails_the_claim(nb):
    table = recorded("capped")
    table.loc[(table.kernel == MATMUL) & (table.clock_control == "base"), "time_us"] *= 1.1
    with pytest.raises(sections.ClaimFailed, match="on a clock already held"):
        nb.check_clock(table, {1980000}, HELD_MHZ)


def test_a_clock_that_moves_for_some_kernels_only_fails_the_claim(nb):
    table = recorded("normal")
    pick = (table.kernel == FITS) & (table.clock_control == "base")
    table.loc[pick, "SM MHz"] = table[(table.kernel == FITS) & (table.clock_control == "none")]["SM MHz"].iloc[0]
    with pytest.raises(sections.ClaimFailed, match="every kernel's SM clock moves with clock_control"):
        nb.check_clock(table, {1980000}, None)


def test_the_clock_claims_fail_when_the_matmul_does_not_feel_the_lock_or_not_by_its_own_clock(nb):
    table = recorded("normal")
    unfelt = table.copy()
    unfelt.loc[(unfelt.kernel == MATMUL) & (unfelt.clock_control == "base"), "time_us"] /= 1.24
    with pytest.raises(sections.ClaimFailed, match="feels the clock lock more"):
        nb.check_clock(unfelt, {1980000}, None)
    streams_clock = table.copy()  # the old reading: the matmul's locked clock taken to be the 8x stream's
    pick = (streams_clock.kernel == MATMUL) & (streams_clock.clock_control == "base")
    streams_clock.loc[pick, "SM MHz"] = 1447.36
    with pytest.raises(sections.ClaimFailed, match="follows its own clock"):
        nb.check_clock(streams_clock, {1980000}, None)


def test_base_is_reported_as_one_frequency_only_when_every_kernels_clock_agrees(nb):
    table = recorded("normal")
    pick = table.clock_control == "base"
    table.loc[pick, "SM MHz"] = 1266.07
    table.loc[pick & (table.kernel == MATMUL), "time_us"] = 179.19 * 1572.30 / 1266.07
    assert nb.check_clock(table, {1980000}, None).endswith("; one frequency)")


def test_the_bandwidth_claims_fail_above_the_peak_unless_the_dram_counters_explain_it(nb):
    table = recorded("normal")
    with pytest.raises(sections.ClaimFailed, match="never moved more bytes per second"):
        nb.check_bandwidth(table, SimpleNamespace(max_mem_clock_mhz=2000, memory_bus_width_bits=6016), None)
    fast = table.copy()
    big = fast.kernel == EIGHT
    fast.loc[big & (fast.cache_control == "all"), "GB/s"] = 5000.0  # above 4,814: the DRAM wrote 0.95 of it
    nb.check_bandwidth(fast, H200, None)  # explained: part of its output stayed in L2
    fast.loc[big, WROTE] = 1.0
    with pytest.raises(sections.ClaimFailed, match="rate above the DRAM peak is explained"):
        nb.check_bandwidth(fast, H200, None)


def test_without_nvmls_memory_clock_there_is_no_clock_derived_peak(nb, capsys):
    said = nb.check_bandwidth(recorded("normal"), SimpleNamespace(max_mem_clock_mhz=None,
                                                                 memory_bus_width_bits=None), 4800.0)
    assert said == "8x-L2 stream 4,300 GB/s; 4,800 GB/s on the datasheet"
    assert "no clock-derived peak" in capsys.readouterr().out


# --- section 1's cell, both paths, with fakes ----------------------------------------------------------

def code_cell(first_line: str) -> str:
    """The code cell of the notebook's source whose first line starts with ``first_line``."""
    cells = re.split(r"^# %%.*\n", source(STEM), flags=re.M)
    (found,) = [c for c in cells if c.startswith(first_line)]
    return found


class Notebook:
    """The parts of ``nt`` a section's cell uses; a claim raises when it does not hold."""

    def __init__(self):
        self.claims, self.result = [], None

    @contextlib.contextmanager
    def section(self, name):
        yield self

    def claim(self, condition, statement, evidence=""):
        self.claims.append((bool(condition), statement))
        print(f"  check: {statement} ({evidence})")
        if not condition:
            raise sections.ClaimFailed(statement)

    @staticmethod
    def rules(source, **settings):
        return f"measured by {source}, {settings}"


def run_section_1(tables: dict, backend: str, held: ClockState | None = None):
    """Section 1's cell: the Nsight Compute backend's decorator or the ncu command line returns ``tables``."""
    calls, guarded = [], []

    def kernel(cache_control, clock_control, **settings):
        calls.append(("ncu", cache_control, clock_control))
        return lambda func: (lambda: SimpleNamespace(to_dataframe=lambda: tables[(cache_control, clock_control)]))

    def nsight_table(script, func, *, cache_control, clock_control, report, ncu, **settings):
        calls.append(("ncu-cli", cache_control, clock_control, report))
        return tables[(cache_control, clock_control)]

    @contextlib.contextmanager
    def stop_children_cleanly():
        guarded.append(True)
        yield

    nt = Notebook()
    sheet = SimpleNamespace(mem_bandwidth_gbs=SimpleNamespace(value=4800.0))
    env = SimpleNamespace(backend=backend, require=lambda what: None, ncu_path="/usr/bin/ncu", facts=H200, clock=held)
    fakes = {"nt": nt, "pd": pd, "np": np, "stats": stats, "plt": plt, **NAMES, "SILENT": None, "SMALL": SMALL_N,
             "LARGE": LARGE_N, "FP16": FP16, "SHEET": sheet, "HELD_MHZ": held and held.held_mhz, "ENV": env,
             "ck": SimpleNamespace(stream_and_matmul=lambda small, large: None, MATMUL_N=MATMUL_N),
             "nsight": SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)),
             "lifetime": SimpleNamespace(stop_children_cleanly=stop_children_cleanly),
             "ncu_cli": SimpleNamespace(nsight_table=nsight_table, to_base_units=ncu_cli.to_base_units)}
    namespace = functions(STEM, *ANALYSIS, **fakes).per_run.__globals__  # the analysis, with these fakes
    exec(compile(code_cell("COMBINATIONS ="), "section 1", "exec"), namespace)
    plt.close("all")
    return nt, calls, guarded


def test_section_1_under_the_ncu_command_line_profiles_the_2x2_one_report_each(nb):
    nt, calls, guarded = run_section_1(synthetic_tables(), "cupti")
    assert [c[1:] for c in calls] == [(*combo, f"stream_and_matmul-{combo[0]}-{combo[1]}.ncu-rep")
                                      for combo in COMBINATIONS]
    assert all(ok for ok, _ in nt.claims) and len(nt.claims) == 8 and not guarded
    assert nt.result.startswith("ncu-cli: flushed/warm")


def test_section_1_under_the_nsight_compute_backend_guards_each_profile_for_a_clean_stop(nb):
    nt, calls, guarded = run_section_1(synthetic_tables(), "ncu")
    assert calls == [("ncu", *combo) for combo in COMBINATIONS] and len(guarded) == 4
    assert nt.result.startswith("ncu: flushed/warm")


def test_section_1_on_a_clock_held_since_setup_passes_and_says_so(nb, capsys):
    """SYNTHETIC: the 2 x 2 on a clock locked before the notebook ran -- each free row's clock and matmul
    time made its locked row's, as in the recorded capped run."""
    tables = synthetic_tables()
    for cache in ("all", "none"):
        free, locked = tables[(cache, "none")].copy(), tables[(cache, "base")]
        for annotation in (FITS, EIGHT, MATMUL):
            for metric in (NAMES["SM_HZ"], NAMES["TIME"]):
                rows = (free.Annotation == annotation) & (free.Metric == metric)
                free.loc[rows, "AvgValue"] = value(locked, annotation, metric)
        tables[(cache, "none")] = free
    held = ClockState("held", (1500, 1500), 1980)
    nt, _, _ = run_section_1(tables, "cupti", held)
    assert "clock_control moved nothing" in nt.result and all(ok for ok, _ in nt.claims)
    out = capsys.readouterr().out
    assert "held at 1,500 MHz even idle" in out and "76% of its maximum" in out


# --- section 2: the clock after ncu, and the reset offered ------------------------------------------------

FREE = ClockState("free", (345, 1980), 1980)
HELD = ClockState("held", (1500, 1500), 1980)


def run_section_2(setup: ClockState, readings: list, reset_opt_in: bool = False, has_reset: bool = True):
    """Section 2's cell with setup's reading, the clock readings it takes (in order), and a fake ncu."""
    resets = []

    def reset_clocks(path):
        resets.append(path)
        return "==PROF== Resetting GPU clocks (a fake ncu)"

    nt = Notebook()
    cell = code_cell("# True: reset a clock")
    if reset_opt_in:
        cell = cell.replace("RESET_CLOCKS = False", "RESET_CLOCKS = True")
    fake_ncu = SimpleNamespace(has_clock_reset=lambda path: has_reset, reset_clocks=reset_clocks)
    namespace = {"nt": nt, "read_clock_state": lambda: readings.pop(0),
                 "ncu_cli": fake_ncu,
                 "ENV": SimpleNamespace(require=lambda what: None, clock=setup, ncu_path="/usr/bin/ncu")}
    exec(compile(cell, "section 2", "exec"), namespace)
    return nt, resets


def test_a_free_clock_that_is_free_again_after_ncu_is_ok_and_nothing_is_reset(capsys):
    nt, resets = run_section_2(FREE, [FREE])
    assert resets == [] and nt.result == "idle clock now free: 345-1,980 MHz"
    assert "would run" not in capsys.readouterr().out


def test_a_clock_held_at_setup_is_not_reset_without_the_opt_in_and_the_cell_says_what_it_would_run(capsys):
    nt, resets = run_section_2(HELD, [HELD])
    out = capsys.readouterr().out
    assert resets == [] and "would run: /usr/bin/ncu --clock-control reset" in out
    assert "not run: RESET_CLOCKS is False in this cell" in out and "a new machine clears it" in out
    assert nt.result == "idle clock now held: 1,500-1,500 MHz" and all(ok for ok, _ in nt.claims)


def test_with_the_opt_in_a_clock_held_at_setup_is_reset_and_read_again(capsys):
    nt, resets = run_section_2(HELD, [HELD, FREE], reset_opt_in=True)
    assert resets == ["/usr/bin/ncu"] and nt.result == "idle clock now free: 345-1,980 MHz"
    assert "after the reset: free" in capsys.readouterr().out


def test_an_ncu_without_the_reset_value_is_not_asked_to_reset(capsys):
    _, resets = run_section_2(HELD, [HELD], reset_opt_in=True, has_reset=False)
    assert resets == [] and "no ncu here has --clock-control reset" in capsys.readouterr().out


def test_a_lock_left_by_this_notebooks_ncu_fails_the_check_and_is_never_reset_by_the_cell(capsys):
    """Setup found the clock free: a lock now is the notebook's own doing (an ncu killed mid-profile)."""
    with pytest.raises(sections.ClaimFailed, match="left the clock as setup found it"):
        run_section_2(FREE, [HELD], reset_opt_in=True)
    assert "setup found the clock free: a run above left this lock" in capsys.readouterr().out


# --- section 3: warm vs flushed spread, on the raw runs -------------------------------------------------
#
# SYNTHETIC raw runs (not measured), shaped as nsight-python's per-run CSV of section 3: one row per
# run, the configuration's columns ``n`` and ``flush``, the duration in ``Value`` (ns).

def raw_runs(seed: int, spreads: dict, outlier: float = 1.0) -> pd.DataFrame:
    """20 SYNTHETIC runs per (n, flush) with the given relative sd; run 0 of each multiplied by ``outlier``."""
    rng = np.random.default_rng(seed)
    means = {(SMALL_N, False): 6_200.0, (SMALL_N, True): 9_600.0, (LARGE_N, False): 236_000.0,
             (LARGE_N, True): 236_500.0}
    rows = []
    for (n, flush), mean in means.items():
        v = np.round(mean * (1 + rng.normal(0, spreads[(n, flush)], 20)) / 32) * 32  # a 32 ns timer
        v[0] *= outlier
        rows += [{"Annotation": "x * 2", "n": n, "flush": flush, "Value": value} for value in v]
    return pd.DataFrame(rows)


WIDER_FLUSHED = {(SMALL_N, False): 0.004, (SMALL_N, True): 0.03, (LARGE_N, False): 0.002, (LARGE_N, True): 0.002}
NARROWER_FLUSHED = {(SMALL_N, False): 0.03, (SMALL_N, True): 0.004, (LARGE_N, False): 0.002, (LARGE_N, True): 0.002}


def test_spread_finds_the_wider_flushed_runs_and_the_claim_holds(nb, capsys):
    found = nb.spread(raw_runs(1, WIDER_FLUSHED), SMALL_N)
    assert found["p"] < 0.05 and found["flushed/warm"] > 1 and found["RSD flushed %"] > found["RSD warm %"]
    said = nb.check_spread(raw_runs(1, WIDER_FLUSHED), SMALL_N)
    assert re.fullmatch(r"fits in L2: flushed spread \d+\.\d\dx warm's \(p [\d.e-]+\)", said), said
    assert "check: fits in L2: the flushed runs spread no narrower" in capsys.readouterr().out


def test_the_spread_claim_fails_when_flushing_makes_the_runs_agree_more_closely(nb):
    with pytest.raises(sections.ClaimFailed, match="the flushed runs spread no narrower"):
        nb.check_spread(raw_runs(2, NARROWER_FLUSHED), SMALL_N)


def test_one_slow_first_run_does_not_decide_the_spread_test(nb):
    """Run 0 of every configuration 30 % slow (as CUPTI's first runs can be), spreads otherwise equal: the
    RSDs jump, the median-centred test on log durations still finds nothing."""
    found = nb.spread(raw_runs(3, dict.fromkeys(WIDER_FLUSHED, 0.004), outlier=1.3), SMALL_N)
    assert found["RSD warm %"] > 5 and found["p"] > 0.05


def test_the_direction_comes_from_the_tests_own_statistic_when_the_timer_zeroes_both_mads(nb):
    """Durations on a 32 ns grid, most runs on one value: the flushed runs leave that value seven times in
    twenty, the warm ones once; the direction must not come out 'narrower'."""
    warm, cold = [6208.0] * 19 + [6240.0], [9600.0] * 13 + [9632.0] * 7
    raw = pd.DataFrame([{"n": SMALL_N, "flush": flush, "Value": v} for flush, vs in ((False, warm), (True, cold))
                        for v in vs])
    assert nb.spread(raw, SMALL_N)["flushed/warm"] > 1


def test_two_gpu_runs_of_section_3_pass_the_spread_claim():
    for run in ("run1", "run2"):
        _, raw = fixture(f"{STEM}--stream_after-raw", run=run)
        nb_ = functions(STEM, "spread", "check_spread", nt=sections, pd=pd, np=np, stats=stats)
        nb_.check_spread(raw, int(raw.n.min()))  # raises ClaimFailed if flushing narrowed the fitting size


# --- verdicts that hold from run to run -------------------------------------------------------------------
#
# ``run1`` and ``run2`` of the 2 x 2 are kept by the next two GPU runs; until then these tests skip.

def test_two_gpu_runs_of_section_1_pass_every_claim_and_agree_on_base(nb):
    verdicts = []
    for run in ("run1", "run2"):
        table = nb.per_configuration(kept_tables(run), MATMUL_N)
        nb.check_cache(table)  # each check raises ClaimFailed if its claim does not hold on this run
        nb.check_peak(table, *FP16)
        nb.check_bandwidth(table, H200, 4800.0)
        verdicts.append(nb.check_clock(table, {1980000}, None).rsplit("; ", 1)[1])
    assert verdicts[0] == verdicts[1], verdicts


def test_section_3_reads_the_raw_runs_nsight_python_wrote_and_checks_the_spread(tmp_path, monkeypatch, capsys):
    """Section 3's cell on a fake profile: the table of means, and the per-run CSV that output_csv=True writes."""
    monkeypatch.chdir(tmp_path)
    raw = raw_runs(1, WIDER_FLUSHED)

    def kernel(**settings):
        assert settings["cache_control"] == "none" and settings["output_csv"] and settings["runs"] == 20
        raw.to_csv(f"{settings['output_prefix']}profiled_data-stream_after-1.csv", index=False)
        means = raw.groupby(["n", "flush"]).Value.mean().rename("AvgValue").reset_index()
        return lambda func: (lambda: SimpleNamespace(to_dataframe=lambda: means))

    nt = Notebook()
    namespace = functions(STEM, "spread", "check_spread", nt=nt, pd=pd, np=np, stats=stats).spread.__globals__
    namespace.update(ENV=SimpleNamespace(require=lambda what: None, backend="cupti"), SILENT=None, SMALL=SMALL_N,
                     LARGE=LARGE_N, glob=__import__("glob"), os=__import__("os"),
                     ck=SimpleNamespace(stream_after=lambda n, flush: None),
                     nsight=SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)))
    exec(compile(code_cell("def spread("), "section 3", "exec"), namespace)
    assert len(namespace["RAW_BY_HAND"]) == 80 and all(ok for ok, _ in nt.claims)
    assert nt.result.startswith("cupti: flushed/warm 1.5") and "fits in L2: flushed spread" in nt.result
