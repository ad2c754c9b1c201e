"""Specifications for ncu_cli's path to nsight-python's own table from the ncu command line.

The GPU run is what proves the whole path (see the closing notes and tests/fixtures/); these
tests pin each piece a CPU can check: the command, the order in which the kernels module
replays its function, the version pin on nsight-python's private functions, the saved
tables the CPU tests read, and what happens when the counters are refused.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from nspy_tutorial import ncu_cli, sections

# ncu's own words when the driver restricts the counters (as users have reported them).
PERMISSION_OUTPUT = """==PROF== Connected to process 9012 (/usr/bin/python3.12)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on \
the target device 0. For instructions on enabling permissions and to get more information see \
https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 9012
"""

MODULE = '''
import nsight

CALLS = []


def work(n, tag):
    with nsight.annotate("first"):
        CALLS.append((n, tag))
    with nsight.annotate("second"):
        pass


if __name__ == "__main__":
    from nspy_tutorial import ncu_cli
    ncu_cli.replay(globals())
    print(CALLS)
'''


def test_the_command_records_nsight_pythons_ranges_with_its_default_rules():
    cmd = ncu_cli.nsight_command("ncu", "k.py", "work", [(1, "x"), 2], 3, ["m1", "m2"], "work.ncu-rep")
    text = " ".join(cmd)
    assert "--nvtx --nvtx-include regex:nsight-python@.+" in text
    assert "--cache-control all --clock-control none --replay-mode kernel" in text
    assert cmd[cmd.index("--metrics") + 1] == "m1,m2" and cmd[cmd.index("-o") + 1] == "work.ncu-rep"
    assert cmd[-5:] == [sys.executable, "k.py", "work", '[[1, "x"], [2]]', "3"]


def test_the_module_replays_every_config_then_every_run_reentering_its_annotations(tmp_path):
    (tmp_path / "k.py").write_text(MODULE)
    done = subprocess.run([sys.executable, "k.py", "work", '[[1, "x"], [2, "y"]]', "2"], cwd=tmp_path,
                          capture_output=True, text=True, env=ncu_cli.child_environment(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[(1, 'x'), (1, 'x'), (2, 'y'), (2, 'y')]"


def test_replay_names_its_usage_when_the_arguments_are_wrong():
    with pytest.raises(SystemExit, match="usage: .* <function> <configs as JSON> <runs>"):
        ncu_cli.replay({}, ["work"])


def test_the_child_does_not_attach_nsight_compute_to_itself(monkeypatch):
    monkeypatch.setenv("NSPY_NCU_INIT_AT_IMPORT", "1")
    assert ncu_cli.child_environment()["NSPY_NCU_INIT_AT_IMPORT"] == "0"


@pytest.mark.parametrize("version", ["1.1.0", "1.1.7"])
def test_the_nsight_python_versions_it_was_tested_with_are_accepted(version):
    assert ncu_cli.check_nsight_version(version) == version


@pytest.mark.parametrize("version", ["1.0.3", "1.2.0", "2.0"])
def test_another_nsight_python_is_refused_naming_the_private_functions_and_the_fix(version):
    with pytest.raises(ncu_cli.NcuCliError, match=r"extract_df_from_report[\s\S]*nsight-python>=1.1,<1.2"):
        ncu_cli.check_nsight_version(version)


def test_nsight_table_refuses_settings_it_cannot_honour(tmp_path):
    script = tmp_path / "k.py"
    script.write_text(MODULE)
    with pytest.raises(ValueError, match="thermal_mode must be 'off'"):
        ncu_cli.nsight_table(str(script), print, ncu="ncu", configs=[1], thermal_mode="auto")
    with pytest.raises(TypeError, match="output_csv is not an nsight.analyze.kernel setting it supports"):
        ncu_cli.nsight_table(str(script), print, ncu="ncu", configs=[1], output_csv=True)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'configs'"):
        ncu_cli.nsight_table(str(script), print, ncu="ncu")


def test_nsight_table_without_its_module_says_to_run_the_writefile_cell(tmp_path):
    with pytest.raises(ncu_cli.NcuCliError, match="run its %%writefile cell first"):
        ncu_cli.nsight_table(str(tmp_path / "absent.py"), print, ncu="ncu", configs=[1], verbosity=0)


def test_nsight_table_prints_its_command_runs_it_and_returns_the_table_it_read(tmp_path, monkeypatch, capsys):
    (tmp_path / "k.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    read = []
    table = pd.DataFrame({"Annotation": ["work"], "AvgValue": [1.0]})
    monkeypatch.setattr(ncu_cli, "read_nsight_table", lambda report, *a, **k: read.append(report) or table)
    got = ncu_cli.nsight_table("k.py", print, ncu=fake_ncu(tmp_path, "", 0), configs=[16777216], runs=3,
                               report="work-none.ncu-rep", cache_control="none", verbosity=0)
    printed = capsys.readouterr().out
    assert printed.startswith("  $ ") and "--cache-control none --clock-control none" in printed
    assert read == ["work-none.ncu-rep"] and got is table


def fake_ncu(tmp_path, output: str, code: int) -> str:
    (tmp_path / "out.txt").write_text(output)
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\nexit {code}\n")
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize("code", [0, 1])
def test_counters_reserved_to_administrators_are_named_with_what_to_do_whatever_ncu_exits(tmp_path, code):
    ncu = fake_ncu(tmp_path, PERMISSION_OUTPUT, code)
    with pytest.raises(ncu_cli.NcuCliError, match=r"ERR_NVGPUCTRPERM[\s\S]*NVreg_RestrictProfilingToAdminUsers=0"):
        ncu_cli.run([ncu, "--version"])


def test_a_section_meeting_refused_counters_is_skipped_with_need_counters_not_failed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    monkeypatch.delenv("NSPY_TUTORIAL_REQUIRE", raising=False)
    ncu = fake_ncu(tmp_path, PERMISSION_OUTPUT, 0)
    with sections.section("counters refused") as s:
        ncu_cli.run([ncu])
    assert s.status == sections.SKIPPED
    record = sections.records()[-1]
    assert record.needs == "counters" and "CUPTI backend's kernel durations still work" in record.remedy
    assert "[SKIPPED] this machine reserves the GPU's performance counters to administrators" in capsys.readouterr().out


def test_nsight_pythons_own_error_text_is_skipped_the_same_way(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with sections.section("backend refused") as s:
        raise RuntimeError("NCU failed.\nErrors:\n" + PERMISSION_OUTPUT.splitlines()[1])
    assert s.status == sections.SKIPPED


def test_requiring_counters_turns_that_skip_into_a_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "0")
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "counters")
    with sections.section("counters required") as s:
        raise RuntimeError(PERMISSION_OUTPUT)
    assert s.status == sections.FAILED


def test_the_table_is_read_with_nsight_pythons_own_extraction_and_aggregation(tmp_path, monkeypatch):
    """Only the report reading is faked: nsight's extract_df_from_data and aggregate_data run for real."""
    from nsight import extraction, utils

    def work(n: int) -> None: ...

    def action(name: str, ns: float) -> utils.ActionData:
        return utils.ActionData(name=name, values=np.array([ns]), compute_clock=1980000, memory_clock=3201000,
                                gpu="NVIDIA H200", units=["ns"])

    runs = {"two kernels": [action("mul", 10.0), action("add", 5.0), action("mul", 12.0), action("add", 6.0)]}
    monkeypatch.setattr(extraction, "extract_data_from_report", lambda *args: runs)
    report = tmp_path / "work.ncu-rep"
    report.write_bytes(b"")
    table = ncu_cli.read_nsight_table(str(report), work, [1024], 2, ["gpu__time_duration.sum"],
                                      combine_kernel_metrics=lambda a, b: a + b)
    row = table.iloc[0]
    assert (row.Annotation, row.n, row.AvgValue, row.NumRuns, row.Kernel) == ("two kernels", 1024, 16.5, 2, "mul|add")
    assert list(table.columns)[:4] == ["Annotation", "Metric", "n", "AvgValue"]
    json.dumps(table.astype(str).to_dict())  # plain data, ready to keep


def test_a_table_kept_on_the_gpu_test_machine_has_the_nsight_compute_backends_shape():
    """Kept from the first GPU run of nsight_table (H200, ncu 2025.3.1, launch mode): a + b*c and addcmul."""
    from notebook_code import fixture

    call, table = fixture("h200_probe--fusion")
    assert call["function"] == "fusion" and call["runs"] == 3
    assert list(table.columns) == ["Annotation", "Metric", "n", "AvgValue", "StdDev", "MinValue", "MaxValue",
                                   "NumRuns", "Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit",
                                   "CI95_Lower", "CI95_Upper", "RelativeStdDevPct", "StableMeasurement",
                                   "Normalized", "Geomean"]
    kernels = dict(zip(table.Annotation, table.Kernel))
    # bare function names, the two kernels of one run joined by "|", as the backend gives them
    assert kernels == {"a + b*c": "vectorized_elementwise_kernel|vectorized_elementwise_kernel",
                       "addcmul": "vectorized_elementwise_kernel"}
    assert set(table.Unit) == {"ns", "byte"} and (table.NumRuns == 3).all()


def test_every_committed_fixture_was_kept_on_a_gpu_not_made_by_hand():
    from notebook_code import FIXTURES, RUNS

    # the GPU runs' tables; recorded/ holds tables parsed from recorded runs' notebooks, timeline/ a real trace
    made = [path.name for run in RUNS for path in (FIXTURES / run).glob("*.json")
            if json.loads(path.read_text(encoding="utf-8"))["call"].get("provisional")]
    assert not made, f"provisional fixtures, to be replaced by a GPU run's (NSPY_TUTORIAL_KEEP_TABLES): {made}"
