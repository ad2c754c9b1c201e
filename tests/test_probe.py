"""nspy_tutorial.probe: a backend is tried in a child process, and what it said is kept per machine.

The child is a fake script (``probe.CHILD``) and ncu a fake executable: each prints what the
real one prints in the case at hand, so the probe's reading of it is what is tested.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nspy_tutorial import probe

FAKE_CHILD = textwrap.dedent("""\
    import os, sys, time
    what = os.environ.get("FAKE_" + sys.argv[1].upper().replace("-", "_"), "ok")
    with open(os.environ["FAKE_CALLS"], "a") as calls:
        calls.write(" ".join(sys.argv[1:]) + " NSPY_NCU_INIT_AT_IMPORT=" + os.environ["NSPY_NCU_INIT_AT_IMPORT"] + "\\n")
    if what == "hang":
        time.sleep(600)
    if what == "ok":
        print("NSPY_PROBE ok x + 1: 2.0 us under " + sys.argv[1].upper())
        sys.exit(0)
    print(what)
    sys.exit(1)
""")

FAKE_NCU = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = --version ]; then echo "Version 2026.3.1.0 (build 1)"; exit 0; fi
    case "$FAKE_NCU_CLI" in
      ok) echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
          echo '"0","vectorized_elementwise_kernel","gpu__time_duration.sum","nsecond","2048"'; exit 0 ;;
      *) echo "$FAKE_NCU_CLI"; exit 1 ;;
    esac
""")


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "child.py").write_text(FAKE_CHILD)
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(0o755)
    monkeypatch.setattr(probe, "CHILD", [sys.executable, str(tmp_path / "child.py")])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_NCU_CLI", "ok")
    return tmp_path


def calls(fakes: Path) -> list[str]:
    path = fakes / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_child_that_returns_a_row_is_a_working_backend(fakes):
    outcome = probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    assert outcome.ok and outcome.detail == "x + 1: 2.0 us under CUPTI" and not outcome.cached


def test_a_child_that_fails_reports_the_first_line_of_its_real_error(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_CUPTI", "NSPY_PROBE failed cuptiError: ERROR_INVALID_PARAMETER (1)")
    outcome = probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    assert not outcome.ok and outcome.detail == "cuptiError: ERROR_INVALID_PARAMETER (1)"


def test_ncus_own_error_line_wins_over_what_follows_it(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_NCU", "==ERROR== Cuda driver is not compatible with Nsight Compute\nTraceback ...")
    outcome = probe.try_candidate("ncu", str(fakes / "ncu"), "T4|580.82")
    assert not outcome.ok and outcome.detail == "==ERROR== Cuda driver is not compatible with Nsight Compute"


def test_a_child_that_hangs_is_stopped_and_counted_as_failed(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_CUPTI", "hang")
    start = time.monotonic()
    outcome = probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82", timeout=2)
    assert time.monotonic() - start < 10
    assert not outcome.ok and "no answer within 2 s" in outcome.detail


def test_the_ncu_backend_child_gets_the_ncu_first_on_path_and_may_load_it(fakes):
    probe.try_candidate("ncu", str(fakes / "ncu"), "T4|580.82")
    env = probe.environment("ncu", str(fakes / "ncu"))
    assert env["PATH"].split(os.pathsep)[0] == str(fakes) and calls(fakes) == [f"ncu {fakes / 'ncu'} NSPY_NCU_INIT_AT_IMPORT=1"]


def test_the_cupti_child_is_told_not_to_load_nsight_compute(fakes):
    probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    assert calls(fakes) == ["cupti /lib/libcupti.so.13 NSPY_NCU_INIT_AT_IMPORT=0"]


def test_an_ncu_that_profiles_the_kernel_in_launch_mode_works(fakes):
    outcome = probe.try_candidate("ncu-cli", str(fakes / "ncu"), "T4|580.82")
    assert outcome.ok


def test_an_ncu_that_refuses_in_launch_mode_says_why(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_CLI", "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    outcome = probe.try_candidate("ncu-cli", str(fakes / "ncu"), "T4|580.82")
    assert not outcome.ok and outcome.detail.startswith("==ERROR== ERR_NVGPUCTRPERM")


def test_a_second_probe_on_the_same_machine_reads_the_kept_outcome(fakes):
    first = probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    again = probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    assert again.cached and again.detail == first.detail and len(calls(fakes)) == 1
    assert "kept from an earlier probe" in again.line()


def test_another_driver_is_probed_again(fakes):
    probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82")
    probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.95")
    assert len(calls(fakes)) == 2


def test_an_ncu_replaced_in_place_is_probed_again(fakes):
    probe.try_candidate("ncu", str(fakes / "ncu"), "T4|580.82")
    (fakes / "ncu").write_text(FAKE_NCU + "\n# a newer build\n")
    probe.try_candidate("ncu", str(fakes / "ncu"), "T4|580.82")
    assert len(calls(fakes)) == 2


def test_a_hang_is_not_kept(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_CUPTI", "hang")
    probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82", timeout=1)
    monkeypatch.setenv("FAKE_CUPTI", "ok")
    assert probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82").ok


def test_the_ncu_cli_probe_asks_ncu_for_no_clock_lock():
    """A probe that hangs is stopped; an ncu stopped while it holds a clock lock can leave it (lifetime)."""
    cmd = probe.command("ncu-cli", "/usr/local/cuda/bin/ncu")
    assert cmd[0] == "/usr/local/cuda/bin/ncu" and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd.index("--clock-control") < cmd.index(probe.CHILD[0]), "an ncu option, not the child's"


def test_a_hung_probe_is_asked_to_stop_with_sigint_before_it_is_killed(fakes, monkeypatch):
    monkeypatch.setenv("FAKE_CUPTI", "hang")
    monkeypatch.setattr(probe, "CHILD", [sys.executable, "-c", textwrap.dedent(f"""\
        import signal, sys, time
        def stop(*_):
            open({str(fakes / "stopped")!r}, "w").write("SIGINT")
            sys.exit(1)
        signal.signal(signal.SIGINT, stop)
        time.sleep(600)
    """)])
    assert not probe.try_candidate("cupti", "/lib/libcupti.so.13", "T4|580.82", timeout=2).ok
    assert (fakes / "stopped").read_text() == "SIGINT"
