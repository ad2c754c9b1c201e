"""Notebook 10's analysis, as the notebook has it, on tables kept from a GPU run.

* ``10_keeping_the_evidence--stream``: section 1's ``to_dataframe()`` (two annotations, two
  sizes, the time metric and ``derive_metric``'s GB/s rows). nsight-python writes it to the
  processed CSV with ``to_csv(index=False)``; :func:`read_back` must find every value again
  and report the dtypes a CSV cannot keep.
* ``10_keeping_the_evidence--full-matmul``: section 2b's ``metric_table`` of the full report
  (candidate metric names that exist, with value and unit); :func:`key_metrics` must pick
  names that exist, prefer nothing that is absent, and print a clock in MHz and a time in us.
"""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, import_module, module_source, source

from nspy_tutorial import evidence, ncu_cli

STEM = "10_keeping_the_evidence"


def notebook_constant(name: str):
    """A literal constant of the notebook (e.g. QUESTIONS), evaluated from its source."""
    tree = ast.parse(source(STEM).replace("{{SETUP}}", "pass"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    return ast.literal_eval(node.value)


NB = functions(STEM, "read_back", "metric_table", "readable", "key_metrics",
               pd=pd, evidence=evidence, ncu_cli=ncu_cli, QUESTIONS=notebook_constant("QUESTIONS"))


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


def test_key_metrics_use_only_names_the_report_has():
    _, found = fixture(f"{STEM}--full-matmul")
    answers = NB.key_metrics(found).set_index("question")
    have = set(found.metric)
    used = [m for m in answers["metric used"] if m != "-"]
    assert set(used) <= have
    assert answers.value["SM clock"].endswith("MHz") and answers.value["duration"].endswith("us")
    clock = float(answers.value["SM clock"].split()[0].replace(",", ""))
    assert 100 < clock < 5000
    if any("op_gmma" in m for m in have):  # a Hopper report: the wgmma row reads a GMMA metric
        assert "gmma" in answers["metric used"]["wgmma instructions issued (GMMA)"]
    assert "cycles_active" in answers["metric used"]["tensor pipe busy, any"]  # busy cycles, not instructions


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
