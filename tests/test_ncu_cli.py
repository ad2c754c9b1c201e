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
