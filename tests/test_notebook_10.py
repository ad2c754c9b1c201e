"""Notebook 10's analysis, as the notebook has it, on tables kept from a GPU run.

* ``10_keeping_the_evidence--stream``: section 1's ``to_dataframe()`` (two annotations, two
  sizes, the time metric and ``derive_metric``'s GB/s rows). nsight-python writes it to the
  processed CSV with ``to_csv(index=False)``; :func:`read_back` must find every value again
  and report the dtypes a CSV cannot keep.
* ``10_keeping_the_evidence--full-matmul``: section 2b's ``metric_table`` of the full report
  (candidate metric names that exist, with value and unit); :func:`key_metrics` must pick
  names that exist, prefer nothing that is absent, and print a clock in MHz and a time in us.
  The report must carry warp execution efficiency and the rated clock (``device__attribute_clock_rate``):
  tables kept before those were asked for lack them, and the tests that read them wait for a re-kept run.
* Section 2b's cell itself runs here on a report faked from that table (no ncu, no GPU): its claims
  about the base clock and the printed Speed Of Light section must hold on it, and fail where the
  data say otherwise.
* Every verdict is computed on two separate GPU runs' tables (``run1``, ``run2``) and must agree.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import sys
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source, source

from nspy_tutorial import evidence, ncu_cli, timeline
from nspy_tutorial.clock import ClockState

STEM = "10_keeping_the_evidence"


def notebook_constant(name: str):
    """A literal constant of the notebook (e.g. QUESTIONS), evaluated from its source."""
    tree = ast.parse(source(STEM).replace("{{SETUP}}", "pass"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    return ast.literal_eval(node.value)


NB = functions(STEM, "read_back", "residency", "metric_table", "readable", "key_metrics", "hmma_counts_wgmma",
               "clocks_mhz", pd=pd, evidence=evidence, ncu_cli=ncu_cli, QUESTIONS=notebook_constant("QUESTIONS"))
WARP, RATED = "smsp__thread_inst_executed_per_inst_executed.ratio", "device__attribute_clock_rate"


def write_csvs(table: pd.DataFrame, folder, runs: int) -> str:
    """The two CSVs nsight-python writes for call 0 of `stream`, from its aggregated table."""
    per_run = table.loc[table.index.repeat(runs), ["Annotation", "Metric", "n", "Kernel", "GPU", "Unit"]]
    per_run = per_run.assign(Value=table.MinValue.repeat(runs).to_numpy())
    per_run.to_csv(folder / "profiled_data-stream-0.csv", index=False)
    table.to_csv(folder / "processed_data-stream-0.csv", index=False)
    return f"{folder}/"


def test_the_processed_csv_gives_back_every_value_of_to_dataframe(tmp_path):
    call, table = fixture(f"{STEM}--stream")
    prefix = write_csvs(table, tmp_path, call["runs"])
    raw, back, diff = NB.read_back(table, prefix, "stream")
    assert list(back.columns) == list(table.columns)
    assert diff.same_values.all(), diff[~diff.same_values]
    assert (raw.groupby(["Annotation", "n", "Metric"]).size() == call["runs"]).all()
    assert set(raw.Metric) == {"gpu__time_duration.sum", "gb_per_s"}  # derive_metric's rows are in both CSVs
    changed = diff[diff.dtype_before != diff.dtype_after]
    assert "StableMeasurement" in set(changed.column)  # a nullable boolean comes back as a plain one


def test_derived_rows_carry_their_own_unit():
    _, table = fixture(f"{STEM}--stream")
    derived = table[table.Metric == "gb_per_s"]
    assert len(derived) == 4 and set(derived.Unit) == {"GB/s"}
    # GB/s = 8 n / ns, per run: the mean of the ratios lies within the ratios of the extremes
    times = table[table.Metric == "gpu__time_duration.sum"].set_index(["Annotation", "n"])
    for _, row in derived.iterrows():
        t = times.loc[(row.Annotation, row.n)]
        assert 8 * row.n / t.MaxValue <= row.AvgValue * (1 + 1e-9)
        assert row.AvgValue <= 8 * row.n / t.MinValue * (1 + 1e-9)


@pytest.mark.parametrize("value, unit, shown", [
    (14.6, "%", "14.6 %"),
    (231584.0, "ns", "231.58 us"),
    (231.584, "usecond", "231.58 us"),
    (1247634360.33, "hz", "1,248 MHz"),
    (1.98, "cycle/nsecond", "1,980 MHz"),
    (1024.0, "byte", "1,024 byte"),
])
def test_readable_units(value, unit, shown):
    assert NB.readable(value, unit) == shown


@pytest.mark.parametrize("metric, value, unit, shown", [
    (WARP, 32.0, "", "32.0 of 32 threads"),
    (WARP, 19.2, "thread", "19.2 of 32 threads"),
    (RATED, 1980000.0, "", "1,980 MHz"),  # kHz, whatever unit the report prints, as nsight-python reads it
    (RATED, 1590000.0, "khz", "1,590 MHz"),
])
def test_readable_names_the_warp_efficiency_and_reads_the_rated_clock_in_khz(metric, value, unit, shown):
    assert NB.readable(value, unit, metric) == shown


@pytest.mark.parametrize("n, l2_mib, where", [
    (1 << 20, 50, "L2-resident"),  # 8 MiB moved: fits in an H200's L2
    (1 << 24, 50, "DRAM"),         # 128 MiB: does not
    (1 << 20, 4, "DRAM"),          # the same 1M elements on a GPU with a 4 MiB L2 (a T4's)
])
def test_a_rate_is_called_l2_resident_only_where_the_bytes_fit_in_this_gpus_l2(n, l2_mib, where):
    assert NB.residency(n, l2_mib * 2**20).startswith(where)


def test_key_metrics_use_only_names_the_report_has():
    _, found = fixture(f"{STEM}--full-matmul")
    answers = NB.key_metrics(found).set_index("question")
    have = set(found.metric)
    used = [m for m in answers["metric used"] if m != "-"]
    assert set(used) <= have
    assert answers.value["SM clock it ran at"].endswith("MHz") and answers.value["duration"].endswith("us")
    clock = float(answers.value["SM clock it ran at"].split()[0].replace(",", ""))
    assert 100 < clock < 5000
    if any("op_gmma" in m for m in have):  # a Hopper report: the wgmma row reads a GMMA metric
        assert "gmma" in answers["metric used"]["wgmma issued"]
    assert "cycles_active" in answers["metric used"]["tensor pipes busy"]  # busy cycles, not instructions


def test_key_metrics_say_what_is_missing():
    found = pd.DataFrame([("gpu__time_duration.sum", 1000.0, "ns")], columns=["metric", "value", "unit"])
    answers = NB.key_metrics(found).set_index("question")
    assert answers.value["duration"] == "1.00 us"
    assert (answers.drop("duration").value == "not in this report").all()


class FakeMetric:
    def __init__(self, value, unit):
        self._value, self._unit = value, unit

    def value(self):
        return self._value

    def unit(self):
        return self._unit


class FakeAction(dict):
    def metric_names(self):
        return list(self)


def test_metric_table_keeps_candidates_and_tensor_averages_only():
    action = FakeAction({
        "gpu__time_duration.sum": FakeMetric(1000.0, "ns"),
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": FakeMetric(80.0, "%"),
        "sm__pipe_tensor_op_gmma_cycles_active.max.pct_of_peak_sustained_active": FakeMetric(95.0, "%"),
        "sm__pipe_tensor_op_xmma_cycles_active.avg.pct_of_peak_sustained_active": FakeMetric(1.0, "%"),
        "dram__bytes.sum": FakeMetric(1e6, "byte"),
    })
    table = NB.metric_table(action)
    assert list(table.metric) == ["gpu__time_duration.sum",
                                  "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                                  "sm__pipe_tensor_op_xmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert np.isclose(table.value.iloc[1], 80.0)


def test_the_module_defines_both_workloads_and_replays_them_for_ncu(tmp_path):
    module = import_module(STEM, "evidence_kernels", tmp_path)
    assert callable(module.stream) and callable(module.matmul)
    assert "ncu_cli.replay(globals())" in module_source(STEM, "evidence_kernels")


def test_the_full_report_answers_warp_efficiency_and_the_rated_clock():
    """Fails until the full-matmul fixture is kept again with the new key metrics (WARP and RATED)."""
    _, found = fixture(f"{STEM}--full-matmul")
    answers = NB.key_metrics(found).set_index("question").value
    assert answers["warp execution efficiency"].endswith(" of 32 threads") and answers["rated max SM clock"].endswith("MHz")
    ran, top = NB.clocks_mhz(found)
    assert 100 < ran < top  # ncu's default --clock-control base: below the rated maximum


def with_metrics(found: pd.DataFrame, **values) -> pd.DataFrame:
    """``found`` with metrics set (SYNTHETIC additions to a kept table: name=(value, unit))."""
    kept = found[~found.metric.isin(values)]
    return pd.concat([kept, pd.DataFrame([(m, v, u) for m, (v, u) in values.items()], columns=kept.columns)])


def test_clocks_mhz_reads_the_measured_clock_and_the_rated_one_from_the_report():
    _, found = fixture(f"{STEM}--full-matmul")
    both = with_metrics(found, **{RATED: (1980000.0, "khz")})
    ran, top = NB.clocks_mhz(both)
    assert top == pytest.approx(1980.0)
    assert ran == pytest.approx(ncu_cli.to_base_units(*found.set_index("metric").loc[
        "gpc__cycles_elapsed.avg.per_second", ["value", "unit"]]) / 1e6)
    assert NB.clocks_mhz(found[found.metric != RATED]) is None  # no rated clock: nothing to compare
    no_clock = both[~both.metric.str.endswith("cycles_elapsed.avg.per_second")]
    assert NB.clocks_mhz(no_clock) is None


def test_hmma_counts_wgmma_only_where_the_hmma_pipe_matches_any_tensor_pipe_while_wgmma_ran():
    _, found = fixture(f"{STEM}--full-matmul")
    hmma = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    gmma = "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"
    assert NB.hmma_counts_wgmma(found)  # the kept H200 report: 95 % HMMA = 95 % any, with wgmma issued
    assert not NB.hmma_counts_wgmma(with_metrics(found, **{hmma: (40.0, "%")}))  # another pipe carried the rest
    assert not NB.hmma_counts_wgmma(with_metrics(found, **{gmma: (0.0, "%")}))  # mma.sync only (e.g. Ampere)
    assert not NB.hmma_counts_wgmma(found[found.metric != hmma])


# --- section 2b's cell, on a report faked from a kept table -------------------------------------

class Recorder:
    """What the cell uses from ``nt``: a section that records its claims and result."""

    def __init__(self):
        self.claims, self.result = [], None

    @contextlib.contextmanager
    def section(self, name):
        yield self

    def claim(self, condition, statement, evidence=""):
        self.claims.append((bool(condition), statement))

    @staticmethod
    def rules(source):
        return f"measured by {source}"

    @staticmethod
    def short_kernel_name(name):
        return name


SOL = """  nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNN (132, 2, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    SM Frequency                    Ghz         1.25
    Duration                         us       223.71
    Compute (SM) Throughput           %        90.50
    ----------------------- ----------- ------------
"""


def section_2b(tmp_path, monkeypatch, found: pd.DataFrame, page: str = SOL, clock=None) -> Recorder:
    """Run 10 section 2b's cell with ncu and ncu_report faked: the report holds `found` (and padding metrics)."""
    monkeypatch.chdir(tmp_path)
    metrics = {m: FakeMetric(v, u) for m, v, u in found.itertuples(index=False)}
    action = FakeAction({**metrics, **{f"padding__metric_{i}": FakeMetric(0.0, "") for i in range(200)}})
    action.name = lambda: "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNN"
    action.metric_by_name = action.get
    report = SimpleNamespace(num_ranges=lambda: 1, range_by_idx=lambda i: SimpleNamespace(
        num_actions=lambda: 1, action_by_idx=lambda j: action))

    def run(cmd, timeout=600):
        if "--import" in cmd:
            return page
        (tmp_path / "evidence" / "full-matmul.ncu-rep").write_bytes(b"fake")
        return ""

    (tmp_path / "evidence").mkdir()
    nt = Recorder()
    text = source(STEM)
    cell = re.search(r"^with nt\.section\(\"2b\..*?(?=^# %%)", text, flags=re.M | re.S).group(0)
    env = SimpleNamespace(require=lambda *a, **k: None, ncu_path="/opt/ncu", ncu_version=(2025, 3), clock=clock)
    namespace = dict(nt=nt, ENV=env, EVIDENCE=tmp_path / "evidence",
                     ncu_cli=SimpleNamespace(run=run, command_text=ncu_cli.command_text,
                                             to_base_units=ncu_cli.to_base_units),
                     ncu_report=SimpleNamespace(load_report=lambda path: report),
                     evidence=SimpleNamespace(check_loaded=lambda *a, **k: None), json=json, sys=sys, time=time,
                     N_FULL=4096, TIME="gpu__time_duration.sum", NSIGHT_REPORT_METRICS=None, pd=pd,
                     actions_of=lambda r: [action], **{name: getattr(NB, name) for name in (
                         "metric_table", "key_metrics", "clocks_mhz", "hmma_counts_wgmma")},
                     QUESTIONS=notebook_constant("QUESTIONS"))
    exec(compile(cell, "10 section 2b", "exec"), namespace)  # noqa: S102
    return nt


def kept_report(rated_khz: float = 1980000.0) -> pd.DataFrame:
    """The kept full-matmul table, with the two new metrics added where it lacks them (SYNTHETIC values)."""
    _, found = fixture(f"{STEM}--full-matmul")
    return with_metrics(found, **{WARP: (31.9, ""), RATED: (rated_khz, "khz")})


def test_section_2b_prints_the_base_clock_beside_the_duration_and_the_speed_of_light_section(tmp_path, monkeypatch,
                                                                                              capsys):
    report = kept_report()
    nt = section_2b(tmp_path, monkeypatch, report)
    printed = capsys.readouterr().out
    assert all(ok for ok, _ in nt.claims), nt.claims
    ran, top = NB.clocks_mhz(report)  # the kept run's own clocks (about 1,250-1,280 of 1,980 MHz on the H200)
    assert f"at an SM clock of {ran:,.0f} MHz measured during the kernel" in printed
    assert f"{100 * ran / top:.0f} % of the rated maximum, {top:,.0f} MHz" in printed
    assert "The clock basis: ncu locked the clocks to base for the run" in printed and "held" not in printed
    assert "$ /opt/ncu --import" in printed and "--page details --section SpeedOfLight" in printed
    assert printed.count("--page details") == 1 and "Section: GPU Speed Of Light Throughput" in printed
    assert "it counts wgmma work here" in printed
    assert re.search(r"; [\d.]+ of 32 threads active$", nt.result)
    assert f" at {ran:,.0f} of 1,980 MHz (locked to base); " in nt.result and len(nt.result) <= 120
    assert all(len(line) <= 120 for line in printed.splitlines() if not line.startswith("  $ "))


def test_section_2b_names_a_clock_setup_found_held(tmp_path, monkeypatch, capsys):
    held = ClockState("held", (1500, 1500), 1980)
    section_2b(tmp_path, monkeypatch, kept_report(), clock=held)
    assert "Setup also found the SM clock held at 1,500 MHz: free is not free here." in capsys.readouterr().out


@pytest.mark.parametrize("page, rated, failing", [
    (SOL, 1254000.0, "below the GPU's rated maximum clock"),         # the report ran at its rated clock: no base lock
    ("==WARNING== no section matched\n", 1980000.0, "Speed Of Light section"),  # an ncu that printed no such section
], ids=["clock not below the maximum", "no Speed Of Light section printed"])
def test_section_2b_claims_fail_where_the_data_say_otherwise(tmp_path, monkeypatch, page, rated, failing):
    nt = section_2b(tmp_path, monkeypatch, kept_report(rated), page=page)
    assert [statement for ok, statement in nt.claims if not ok] == [s for ok, s in nt.claims if failing in s]
    assert any(failing in statement for ok, statement in nt.claims if not ok)


# --- verdicts that hold from one GPU run to the next ----------------------------------------------

def verdicts(run: str) -> dict:
    """What sections 1 and 2b conclude from one GPU run's kept tables."""
    call, table = fixture(f"{STEM}--stream", run)
    _, found = fixture(f"{STEM}--full-matmul", run)
    answers = NB.key_metrics(found).set_index("question")
    busy = found[found.metric.str.contains("pipe_tensor") & found.metric.str.contains("cycles_active")]
    clocks = NB.clocks_mhz(found)
    return {"derived rows": sorted(table[table.Metric == "gb_per_s"].Unit.unique()),
            "metrics used": list(answers["metric used"]), "tensor cores busy > 20 %": bool(busy.value.max() > 20),
            "HMMA counters include wgmma": NB.hmma_counts_wgmma(found),
            "below the rated clock": None if clocks is None else bool(clocks[0] < clocks[1])}


def test_sections_1_and_2b_give_the_same_verdicts_on_two_separate_gpu_runs():
    """Fails until tests/fixtures/run2 holds a second GPU run's 10 tables (and both carry the new metrics)."""
    first, second = verdicts("run1"), verdicts("run2")
    assert first == second
    assert first["below the rated clock"] is True


# --- section 3's cell: the zip keeps the clock state ----------------------------------------------

def test_section_3_zips_an_environment_record_that_shows_a_held_clock(tmp_path, monkeypatch, capsys):
    """The zip of a run on the capped H200 must show the cap: environment.json's clock and README.txt's line."""
    import dataclasses
    import shutil
    import zipfile
    from pathlib import Path

    from test_evidence import no_gpu_environment

    monkeypatch.chdir(tmp_path)
    (tmp_path / "evidence_kernels.py").write_text("# the module\n")
    folder = tmp_path / "evidence-20261204-140323"
    folder.mkdir()
    env = dataclasses.replace(no_gpu_environment(), workdir=tmp_path, clock=ClockState("held", (1500, 1500), 1980))
    nt = Recorder()
    text = source(STEM)
    cell = re.search(r"^with nt\.section\(\"3\..*?(?=^# %%)", text, flags=re.M | re.S).group(0)
    namespace = dict(nt=nt, ENV=env, EVIDENCE=folder, evidence=evidence, json=json, shutil=shutil, zipfile=zipfile,
                     Path=Path, RAW=None, FULL_REPORT=None, N_FULL=4096, timeline=timeline)
    (tmp_path.parent / "07_kernel_fusion").mkdir(exist_ok=True)  # 07 ran before, on this machine
    (tmp_path.parent / "07_kernel_fusion" / "trace-timeline.json").write_text("{}")
    exec(compile(cell, "10 section 3", "exec"), namespace)  # noqa: S102
    with zipfile.ZipFile(tmp_path / "evidence-20261204-140323.zip") as archive:
        record = json.loads(archive.read("evidence-20261204-140323/environment.json"))
        readme = archive.read("evidence-20261204-140323/README.txt").decode()
        assert "evidence-20261204-140323/trace-timeline.json" in archive.namelist()  # 07's timeline, kept
    assert record["clock"]["state"] == "held" and record["clock"]["idle_mhz"] == [1500, 1500]
    assert "SM clock before anything ran: HELD at 1,500 MHz even idle" in readme
    assert "the clock it records: held" in capsys.readouterr().out and nt.result.endswith("SM clock held")
