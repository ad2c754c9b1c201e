"""Specifications for nspy_tutorial.ncu_cli (the ncu command line on a script)."""

import sys

import pytest

from nspy_tutorial import ncu_cli

# Shape of `ncu --csv` output as seen on the GPU test machine (ncu 2025.3.1), trimmed.
CSV_OUTPUT = """==PROF== Connected to process 545 (/usr/bin/python3.12)
==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","545","python3.12","void vectorized_elementwise_kernel<4>(int)","gpc__cycles_elapsed.avg.per_second","hz","1,465,892,650.46"
"0","545","python3.12","void vectorized_elementwise_kernel<4>(int)","gpu__time_duration.sum","ns","3,456"
"1","545","python3.12","void vectorized_elementwise_kernel<4>(int)","gpu__time_duration.sum","ns","2,720"
==PROF== Disconnected from process 545
"""


def test_parse_csv_keeps_only_the_quoted_rows_and_reads_thousands_separators():
    df = ncu_cli.parse_csv(CSV_OUTPUT)
    assert len(df) == 3
    assert df["Metric Value"].tolist() == [1465892650.46, 3456.0, 2720.0]
    assert df["ID"].tolist() == [0, 0, 1]


def test_parse_csv_without_rows_is_a_clear_error():
    with pytest.raises(ncu_cli.NcuCliError, match="no metric rows"):
        ncu_cli.parse_csv("==PROF== Disconnected from process 1\n")


def test_child_environment_drops_the_profiler_injection_variables(monkeypatch):
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/x/libcupti.so")
    monkeypatch.setenv("NV_COMPUTE_PROFILER_IN_PROCESS", "1")
    monkeypatch.setenv("KEEP_ME", "yes")
    env = ncu_cli.child_environment()
    assert "NVTX_INJECTION64_PATH" not in env
    assert "NV_COMPUTE_PROFILER_IN_PROCESS" not in env
    assert env["KEEP_ME"] == "yes"


def test_ncu_command_filters_each_nvtx_range_and_passes_the_controls():
    cmd = ncu_cli.ncu_command("ncu", "s.py", ["7"], ["m1", "m2"], ["small", "large"], "none", "base")
    assert cmd[:6] == ["ncu", "--cache-control", "none", "--clock-control", "base", "--csv"]
    assert cmd.count("--nvtx-include") == 2 and "small/" in cmd and "large/" in cmd
    assert cmd[cmd.index("--metrics") + 1] == "m1,m2"
    assert cmd[-3:] == [sys.executable, "s.py", "7"]


def test_profile_script_reports_a_failing_ncu_with_its_last_lines(tmp_path):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== the profiler failed here'\nexit 9\n")
    fake.chmod(0o755)
    with pytest.raises(ncu_cli.NcuCliError, match=r"exited 9[\s\S]*profiler failed here"):
        ncu_cli.profile_script(str(fake), "s.py", [], ["m"], ["r"])


def test_profile_script_parses_what_ncu_prints(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text(CSV_OUTPUT)
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\ncat {out}\n")
    fake.chmod(0o755)
    df = ncu_cli.profile_script(str(fake), "s.py", [], ["m"], ["r"])
    assert set(df["Metric Name"]) == {"gpc__cycles_elapsed.avg.per_second", "gpu__time_duration.sum"}


def test_ncu_command_with_a_report_writes_it_instead_of_printing_csv():
    cmd = ncu_cli.ncu_command("ncu", "s.py", [], [], ["r"], section_set="full", report="/tmp/rep")
    assert "--csv" not in cmd
    assert cmd[cmd.index("-o") + 1] == "/tmp/rep" and "-f" in cmd
    assert cmd[cmd.index("--set") + 1] == "full"
    assert "--metrics" not in cmd


def test_command_text_quotes_what_a_shell_would_split():
    assert ncu_cli.command_text(["ncu", "--nvtx-include", "x * 2/", "python3"]) == "ncu --nvtx-include 'x * 2/' python3"


def test_write_script_puts_the_source_in_a_file(tmp_path):
    path = ncu_cli.write_script("print(1)\n", "a.py", str(tmp_path))
    assert path == str(tmp_path / "a.py")
    assert (tmp_path / "a.py").read_text() == "print(1)\n"


def test_profile_script_can_print_the_exact_command(tmp_path, capsys):
    out = tmp_path / "out.txt"
    out.write_text(CSV_OUTPUT)
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\ncat {out}\n")
    fake.chmod(0o755)
    ncu_cli.profile_script(str(fake), "s.py", ["3"], ["m"], ["r"], show_command=True)
    printed = capsys.readouterr().out
    assert printed.startswith(f"  $ {fake} --cache-control all --clock-control base --csv --nvtx")
    assert printed.rstrip().endswith("s.py 3")


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (3456, "nsecond", 3.456e-6),
        (3.456, "usecond", 3.456e-6),
        (2, "ms", 2e-3),
        (1.5, "Mbyte", 1.5e6),
        (4.2, "Tbyte/s", 4.2e12),
        (4200, "Gbyte/second", 4.2e12),
        (4.2e12, "byte/s", 4.2e12),
        (1.98, "cycle/nsecond", 1.98e9),
        (1980, "Mhz", 1.98e9),
        (91.5, "%", 91.5),
        (7, "", 7),
    ],
)
def test_to_base_units_reads_the_scaled_units_ncu_prints(value, unit, expected):
    assert ncu_cli.to_base_units(value, unit) == pytest.approx(expected)


def test_to_base_units_refuses_a_unit_it_does_not_know():
    with pytest.raises(ValueError, match="unexpected unit 'warp/cycle'"):
        ncu_cli.to_base_units(1.0, "warp/cycle")


def test_a_child_is_started_only_after_torchs_cached_gpu_memory_is_released(tmp_path, monkeypatch):
    """The notebook's cached blocks and the child's copy must not be held at once (a T4 has 15 GB)."""
    import types

    events = []
    cuda = types.SimpleNamespace(is_initialized=lambda: True, empty_cache=lambda: events.append("empty_cache"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\necho started >> {tmp_path / 'log'}\n")
    fake.chmod(0o755)
    ncu_cli.run([str(fake)])
    assert events == ["empty_cache"] and (tmp_path / "log").read_text() == "started\n"
