"""Specifications for nspy_tutorial.ncu_cli's small pieces: the child's environment, commands, units."""

import sys

import pytest

from nspy_tutorial import ncu_cli


def test_child_environment_drops_the_profiler_injection_variables(monkeypatch):
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/x/libcupti.so")
    monkeypatch.setenv("NV_COMPUTE_PROFILER_IN_PROCESS", "1")
    monkeypatch.setenv("KEEP_ME", "yes")
    env = ncu_cli.child_environment()
    assert "NVTX_INJECTION64_PATH" not in env
    assert "NV_COMPUTE_PROFILER_IN_PROCESS" not in env
    assert env["KEEP_ME"] == "yes"


def test_command_text_quotes_what_a_shell_would_split():
    assert ncu_cli.command_text(["ncu", "--nvtx-include", "x * 2/", "python3"]) == "ncu --nvtx-include 'x * 2/' python3"


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


# --------------------------------------------------------------------------
# The clock reset after a stop that needed SIGKILL (issue 30 §1)
# --------------------------------------------------------------------------

HELP_2025_3_1 = """\
  --cache-control arg (=all)            Control the behavior of the GPU caches during profiling. Allowed values:
                                          all
                                          none
  --clock-control arg (=base)           Control the behavior of the GPU clocks during profiling. Allowed values:
                                          base
                                          (Lock GPU clocks to base)
                                          none
                                          (Don't lock clocks)
                                          reset
                                          (Reset GPU clocks and exit)
  --pipeline-boost-state arg (=stable)  Control the Tensor Core boost state. Setting stable Tensor Core boosting is
"""  # `ncu --help` of 2025.3.1 on the H200 (/work/probe-data/ncu-help.txt, lines 208-218)

HELP_WITHOUT_RESET = """\
  --clock-control arg (=base)           Control the behavior of the GPU clocks during profiling. Allowed values:
                                          base
                                          none
  --reset-something                     An option elsewhere that says reset
                                          reset
"""  # SYNTHETIC: an ncu whose --clock-control has no reset (whether Colab's 2025.1.1 has it is unknown)

FAKE_NCU = """#!/bin/sh
echo "$*" >> "$FAKE_NCU_CALLS"
case "$1" in
  --help) cat "$FAKE_NCU_HELP" ;;
  --clock-control) echo "==PROF== GPU clocks reset" ;;
  *) trap '' INT; sleep 120 ;;
esac
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """An executable named ncu: ``--help`` prints $FAKE_NCU_HELP, ``--clock-control reset`` says it reset, anything
    else is a profile that ignores SIGINT. Every call is logged; the grace is 1 s."""
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(0o755)
    (tmp_path / "help").write_text(HELP_2025_3_1)
    monkeypatch.setenv("FAKE_NCU_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_NCU_HELP", str(tmp_path / "help"))
    monkeypatch.setattr(ncu_cli, "_HELP", {})
    monkeypatch.setattr(ncu_cli.lifetime, "GRACE_SECONDS", 1.0)
    return ncu


def calls(fake_ncu) -> list[str]:
    path = fake_ncu.parent / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_reset_is_read_from_the_clock_control_option_of_the_help(fake_ncu):
    assert ncu_cli.has_clock_reset(str(fake_ncu))
    (fake_ncu.parent / "help").write_text(HELP_WITHOUT_RESET)
    ncu_cli._HELP.clear()
    assert not ncu_cli.has_clock_reset(str(fake_ncu))


def test_the_help_is_read_once_per_ncu(fake_ncu):
    ncu_cli.has_clock_reset(str(fake_ncu))
    ncu_cli.has_clock_reset(str(fake_ncu))
    assert calls(fake_ncu) == ["--help"]


def test_reset_clocks_runs_the_reset_and_returns_what_it_printed(fake_ncu):
    assert ncu_cli.reset_clocks(str(fake_ncu)) == "==PROF== GPU clocks reset"
    assert calls(fake_ncu) == ["--help", "--clock-control reset"]


def test_reset_clocks_on_an_ncu_without_it_is_a_clear_error_that_runs_nothing(fake_ncu):
    (fake_ncu.parent / "help").write_text(HELP_WITHOUT_RESET)
    with pytest.raises(ncu_cli.NcuCliError, match="has no --clock-control reset .*a new machine"):
        ncu_cli.reset_clocks(str(fake_ncu))
    assert calls(fake_ncu) == ["--help"]


def test_an_ncu_that_had_to_be_killed_is_followed_by_a_reset_and_one_line_saying_so(fake_ncu, capsys):
    with pytest.raises(ncu_cli.NcuCliError, match="ran longer than 1 s"):
        ncu_cli.run([str(fake_ncu), "--metrics", "x", sys.executable, "kernels.py"], timeout=1)
    assert calls(fake_ncu)[1:] == ["--help", "--clock-control reset"]
    assert capsys.readouterr().out == (
        "ncu was still running 1 s after SIGINT and was killed (clocks may be locked); "
        f"`{fake_ncu} --clock-control reset`: ==PROF== GPU clocks reset\n")


def test_where_the_ncu_has_no_reset_the_line_says_so_and_what_clears_a_lock(fake_ncu, capsys):
    (fake_ncu.parent / "help").write_text(HELP_WITHOUT_RESET)
    ncu_cli.after_forced_stop([[str(fake_ncu), "--metrics", "x"]])
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and "has no --clock-control reset" in line and "new runtime" in line
    assert "--clock-control reset" not in calls(fake_ncu)


def test_no_reset_after_a_stop_that_needed_no_sigkill_or_killed_no_ncu(fake_ncu, capsys):
    ncu_cli.after_forced_stop([[sys.executable, "script.py"], ["/bin/sh", "-c", "sleep 1"]])
    ncu_cli.run([str(fake_ncu), "--help"])  # an ncu that exits by itself
    assert capsys.readouterr().out == "" and calls(fake_ncu) == ["--help"]
