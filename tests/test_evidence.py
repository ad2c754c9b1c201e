"""Specifications for nspy_tutorial.evidence (bookkeeping for keeping profiling evidence)."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from nspy_tutorial import evidence
from nspy_tutorial.clock import ClockState
from nspy_tutorial.environment import Environment


def no_gpu_environment() -> Environment:
    return Environment(notebook="10_keeping_the_evidence", on_colab=False, gpu_name=None,
                       gpu_problem="NVML sees no GPU", driver=None, ncu_path=None, ncu_version=None,
                       backend=None, backend_reason="no GPU", ncu_problem="no GPU", cupti_problem="no GPU")


def test_newest_output_compares_the_call_counter_as_a_number(tmp_path):
    for k in (0, 9, 10):
        (tmp_path / f"profiled_data-bench-{k}.csv").write_text("x\n")
    (tmp_path / "profiled_data-other-99.csv").write_text("x\n")
    assert evidence.newest_output(f"{tmp_path}/", "profiled_data", "bench").name == "profiled_data-bench-10.csv"


def test_newest_output_honours_a_prefix_that_is_not_a_folder(tmp_path):
    (tmp_path / "run1_processed_data-bench-0.csv").write_text("x\n")
    (tmp_path / "processed_data-bench-3.csv").write_text("x\n")
    found = evidence.newest_output(f"{tmp_path}/run1_", "processed_data", "bench")
    assert found.name == "run1_processed_data-bench-0.csv"


def test_newest_output_finds_the_nsight_compute_report(tmp_path):
    (tmp_path / "ncu-output-bench-0.ncu-rep").write_bytes(b"r")
    (tmp_path / "ncu-output-bench-0.log").write_text("log")
    assert evidence.newest_output(f"{tmp_path}/", "ncu-output", "bench").suffix == ".ncu-rep"


def test_newest_output_says_what_it_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"profiled_data-bench-<k>\.csv.*output_csv=True"):
        evidence.newest_output(f"{tmp_path}/", "profiled_data", "bench")


def test_listing_walks_subfolders_with_sizes(tmp_path):
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "a.png").write_bytes(b"12345")
    (tmp_path / "b.csv").write_text("ab")
    table = evidence.listing(tmp_path)
    assert table.to_dict("records") == [{"file": "b.csv", "bytes": 2}, {"file": "plots/a.png", "bytes": 5}]


def test_listing_of_an_empty_folder_has_the_columns(tmp_path):
    assert list(evidence.listing(tmp_path).columns) == ["file", "bytes"]


def test_round_trip_treats_na_and_nan_as_equal_and_reports_dtype_changes(tmp_path):
    frame = pd.DataFrame({
        "AvgValue": [1.0 / 3.0, 2.5e9],
        "StableMeasurement": pd.array([True, pd.NA], dtype="boolean"),
        "StdDev": [np.nan, 0.25],
        "Kernel": ["gemm", "gemm"],
        "NumRuns": [1, 2],
    })
    frame.to_csv(tmp_path / "t.csv", index=False)
    report = evidence.round_trip_differences(frame, pd.read_csv(tmp_path / "t.csv")).set_index("column")
    assert report.same_values.all()
    assert report.loc["StableMeasurement", "dtype_before"] == "boolean"
    assert report.loc["StableMeasurement", "dtype_after"] != "boolean"


def test_round_trip_reports_a_string_that_csv_turned_into_a_different_number(tmp_path):
    frame = pd.DataFrame({"driver_version": ["580.10", "580.10"], "ok": ["580.95.05", "580.95.05"]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    report = evidence.round_trip_differences(frame, pd.read_csv(tmp_path / "t.csv")).set_index("column")
    assert not report.loc["driver_version", "same_values"]
    assert report.loc["ok", "same_values"]


def test_round_trip_reports_a_missing_column_and_changed_values():
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [1, 2]})
    back = pd.DataFrame({"a": [1.0, 2.000001]})
    report = evidence.round_trip_differences(frame, back).set_index("column")
    assert not report.loc["a", "same_values"]
    assert not report.loc["b", "present"] and not report.loc["b", "same_values"]


@pytest.mark.parametrize("text, expected", [
    ("2026.3.1", (2026, 3, 1)),
    ("2025.3.1.0", (2025, 3, 1, 0)),
    ("2026.2", (2026, 2)),
    ("2026.3.1.post1", (2026, 3, 1)),
    (None, None),
])
def test_the_reader_version_is_the_installed_ncu_report_as_numbers(monkeypatch, text, expected):
    monkeypatch.setattr(evidence, "installed", lambda name: {"ncu-report": text}[name])
    assert evidence.reader_version() == expected


def test_reader_version_is_the_installed_ncu_report():
    version = evidence.reader_version()
    assert version is None or len(version) >= 2


def test_an_older_reader_gets_the_pip_command_nsight_would_ask_for():
    status, message = evidence.version_verdict((2026, 3, 1, 0), (2026, 2, 0))
    assert status == "reader-older"
    assert "pip install 'ncu-report>=2026.3'" in message


def test_a_newer_reader_is_fine_and_says_so():
    status, message = evidence.version_verdict((2025, 3, 1, 0), (2026, 3, 1))
    assert status == "ok" and "newer" in message


def test_only_year_and_minor_are_compared():
    assert evidence.version_verdict((2026, 3, 1, 0), (2026, 3, 0))[0] == "ok"


def test_unknown_versions_are_said_to_be_unknown():
    status, message = evidence.version_verdict(None, (2026, 3, 1))
    assert status == "unknown" and "unknown" in message


def test_check_loaded_accepts_a_report_with_ranges(tmp_path):
    evidence.check_loaded(1, tmp_path / "r.ncu-rep", (2025, 3, 1, 0), (2026, 3, 1))


def test_check_loaded_turns_zero_ranges_into_a_clear_error(tmp_path):
    bogus = tmp_path / "bogus.ncu-rep"
    bogus.write_bytes(b"not a report" * 10)
    with pytest.raises(evidence.UnreadableReport, match=r"bogus\.ncu-rep \(120 bytes\) opened with 0 ranges"):
        evidence.check_loaded(0, bogus, (2025, 3, 1, 0), (2026, 3, 1))


def test_check_loaded_names_the_version_problem_when_there_is_one(tmp_path):
    bogus = tmp_path / "new.ncu-rep"
    bogus.write_bytes(b"x")
    with pytest.raises(evidence.UnreadableReport, match=r"ncu-report>=2027\.1"):
        evidence.check_loaded(0, bogus, (2027, 1, 0, 0), (2026, 3, 1))


def test_environment_record_is_json_ready_without_a_gpu(tmp_path):
    env = dataclasses.replace(no_gpu_environment(), workdir=tmp_path)
    record = evidence.environment_record(env)
    text = json.dumps(record)
    assert {field.name for field in dataclasses.fields(env)} <= set(record) and record["workdir"] == str(tmp_path)
    assert record["gpu_problem"] == "NVML sees no GPU" and record["facts"] is None
    assert record["banner"] and "packages" in record and "nsight-python" in record["packages"]
    assert json.loads(text)["notebook"] == "10_keeping_the_evidence"


def test_environment_record_keeps_the_clock_state_so_a_cap_shows_in_the_evidence(tmp_path):
    """The capped H200: SM clock held at 1,500 MHz even idle, the rated maximum 1,980 MHz (setup's reading)."""
    held = ClockState("held", (1500, 1500), 1980, app_mhz=1980, default_app_mhz=1980, power_w=700.0, default_power_w=700.0)
    env = dataclasses.replace(no_gpu_environment(), workdir=tmp_path, clock=held)
    clock = json.loads(json.dumps(evidence.environment_record(env)))["clock"]
    assert clock["state"] == "held" and clock["idle_mhz"] == [1500, 1500] and clock["max_mhz"] == 1980
    assert clock["line"].startswith("HELD at 1,500 MHz even idle (76% of its 1,980 MHz)")
    assert evidence.environment_record(dataclasses.replace(env, clock=None))["clock"] is None
