"""Setup's reading of the SM clock: free or held, judged from what the clock does while the GPU is idle.

The samples are real: nvidia-smi's SM clock every 200 ms through two recorded strict runs of the series on the
H200 (tests/fixtures/clock/), one on a fresh machine (idles at 345 MHz, boosts to 1,980) and one after a killed
ncu had left the clock locked at 1,500 MHz. They are replayed through a fake NVML.
"""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest

from nspy_tutorial import clock

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "clock"
MAX_MHZ = 1980
IDLE_MIB = 4  # memory used by no process (or none): the GPU idle


def recorded(name: str) -> list[tuple[int, int]]:
    """(SM clock MHz, utilisation %) per sample: utilisation 0 where no process held memory, else 100."""
    with open(FIXTURES / f"{name}.csv", encoding="utf-8") as handle:
        rows = [[field.strip() for field in row] for row in csv.reader(handle)]
    return [(int(row[3]), 0 if int(row[1]) <= IDLE_MIB else 100) for row in rows]


def idle_windows(samples: list[tuple[int, int]], size: int = 5) -> list[list[tuple[int, int]]]:
    """Every run of ``size`` consecutive idle samples (one second at nvidia-smi's 200 ms)."""
    return [samples[i:i + size] for i in range(len(samples) - size + 1)
            if all(util == 0 for _, util in samples[i:i + size])]


class FakeNvml:
    """Just what read_clock_state asks of pynvml, answering from a list of samples (repeating the last)."""

    NVML_CLOCK_SM = 0

    def __init__(self, samples, app=(1980, 1980), power=(700_000, 700_000), fail=None):
        self.samples, self.app, self.power, self.fail, self.read = list(samples), app, power, fail, 0

    def nvmlInit(self):
        if self.fail:
            raise self.fail

    def nvmlDeviceGetHandleByIndex(self, index):
        return "gpu0"

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return MAX_MHZ

    def _now(self):
        return self.samples[min(self.read, len(self.samples) - 1)]

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self._now()[0]

    def nvmlDeviceGetUtilizationRates(self, handle):
        value = self._now()[1]
        self.read += 1
        return SimpleNamespace(gpu=value)

    def nvmlDeviceGetApplicationsClock(self, handle, kind):
        return self.app[0]

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, kind):
        return self.app[1]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self.power[0]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self.power[1]


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(clock, "INTERVAL", 0.0)
    monkeypatch.setattr(clock, "SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(clock, "LONGEST_SECONDS", 0.0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_every_idle_second_of_the_fresh_machine_reads_free():
    windows = idle_windows(recorded("h200-normal"))
    assert len(windows) > 100
    assert {clock.classify(window, MAX_MHZ) for window in windows} == {"free"}


def test_every_idle_second_of_the_locked_machine_reads_held():
    windows = idle_windows(recorded("h200-clock-capped"))
    assert len(windows) > 100
    assert {clock.classify(window, MAX_MHZ) for window in windows} == {"held"}


def test_a_gpu_that_lingers_at_its_boost_clock_after_work_is_not_called_held():
    after_burst = [(1980, 0)] * 10  # the fresh machine stays at 1,980 MHz about 2 s after each notebook
    assert clock.classify(after_burst, MAX_MHZ) == "free"
    assert clock.classify(after_burst + [(405, 0), (345, 0)], MAX_MHZ) == "free"


def test_a_gpu_in_use_by_another_process_is_not_judged():
    assert clock.classify([(345, 0), (1980, 37), (1980, 0)], MAX_MHZ) == "busy"


def test_setup_reads_the_fresh_machine_as_free_with_its_range():
    state = clock.read_clock_state(FakeNvml(recorded("h200-normal")[:5]))
    assert state.state == "free" and state.held_mhz is None and state.ratio is None
    assert state.lines()[0] == "free: idles at 345-345 MHz, boosts to 1,980 MHz"


def test_setup_reads_the_locked_machine_as_held_and_says_what_that_does_to_the_figures():
    state = clock.read_clock_state(FakeNvml(recorded("h200-clock-capped")[:5]))
    assert state.state == "held" and state.held_mhz == 1500
    assert state.ratio == pytest.approx(1500 / 1980)
    text = state.line()
    assert "HELD at 1,500 MHz even idle (76% of its 1,980 MHz)" in text
    assert "under the datasheet by about that ratio" in text and "--clock-control reset" in text
    assert all(len(line) <= 120 - 15 for line in state.lines())  # the banner indents them by 15


def test_a_lowered_applications_clock_and_a_power_cap_are_named_beside_the_state():
    state = clock.read_clock_state(FakeNvml([(345, 0)], app=(1410, 1980), power=(300_000, 700_000)))
    assert state.state == "free"
    assert "applications clock set to 1,410 of 1,980 MHz" in state.line()
    assert "power capped at 300 W of its default 700 W" in state.line()


def test_cupti_reporting_a_lock_makes_the_state_held_even_where_the_idle_clock_did_not_show_it(monkeypatch):
    monkeypatch.setattr(clock, "cupti_status", lambda path: "LOCKED")
    state = clock.read_clock_state(FakeNvml([(345, 0)]), cupti_path="/some/libcupti.so.13")
    assert state.state == "held" and state.held_mhz is None and state.ratio is None  # the clock it holds: unknown
    assert state.line().startswith("HELD, says CUPTI's clock-control status (LOCKED), though the SM clock sampled 345")


def test_cupti_reporting_boost_leaves_a_free_clock_free(monkeypatch):
    monkeypatch.setattr(clock, "cupti_status", lambda path: "BOOST_ENABLED")
    state = clock.read_clock_state(FakeNvml([(345, 0)]), cupti_path="/some/libcupti.so.13")
    assert state.state == "free"


def test_no_nvml_gives_unknown_with_the_reason():
    state = clock.read_clock_state(FakeNvml([(345, 0)], fail=RuntimeError("NVML Shared Library Not Found")))
    assert state.state == "unknown" and "NVML Shared Library Not Found" in state.line()


def test_a_cupti_child_that_fails_says_why_instead_of_a_status(monkeypatch):
    done = SimpleNamespace(returncode=1, stdout="", stderr="Traceback ...\nOSError: libcupti.so.13: cannot open")
    monkeypatch.setattr(clock.subprocess, "run", lambda *a, **k: done)
    assert clock.cupti_status("/nowhere/libcupti.so.13") == "not read: OSError: libcupti.so.13: cannot open"


def test_the_record_for_the_evidence_folder_holds_the_state_and_its_line():
    record = clock.read_clock_state(FakeNvml(recorded("h200-clock-capped")[:5])).record()
    assert record["state"] == "held" and record["idle_mhz"] == (1500, 1500) and record["line"].startswith("HELD")


def test_setup_waits_out_the_boost_clock_that_lingers_after_work_and_reads_where_it_idles(monkeypatch):
    monkeypatch.setattr(clock, "LONGEST_SECONDS", 60.0)  # the samples end the wait, not the clock on the wall
    state = clock.read_clock_state(FakeNvml([(1980, 0)] * 10 + [(405, 0), (345, 0)]))
    assert state.state == "free" and state.idle_mhz == (345, 1980)
    assert state.lines()[0] == "free: idles at 345-1,980 MHz, boosts to 1,980 MHz"
