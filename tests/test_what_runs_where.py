"""What runs where: one test per machine a reader can have (the README's table of that name).

Each row is set up with fakes that behave as the real thing does on such a machine: NVML's
driver and the CUDA version it supports, ncu executables that answer ``--version`` and, in
launch mode, either profile the kernel or print the real failure text, and probe children (the
Nsight Compute and CUPTI backends) that return a row, fail the same way, or hang. Then
``setup`` runs as a notebook's first cell does, and the test checks that the banner, 01 §10's
plan (``ENV.plan()``) and the first profiling section (``ENV.require``) say the same true thing.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from nspy_tutorial import backend, bootstrap, environment, probe, sections
from nspy_tutorial.backend import CuptiLibrary, NcuInstall
from nspy_tutorial.environment import banner_lines
from nspy_tutorial.gpu_facts import DeviceFacts
from nspy_tutorial.sections import Skip

DRIVER_REFUSED = "==ERROR== Cuda driver is not compatible with Nsight Compute"
COUNTERS = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
CUPTI_FAILS = "NSPY_PROBE failed cuptiError: ERROR_INVALID_PARAMETER (1)"
R580, R550 = ("580.82.07", (13, 0)), ("550.54.15", (12, 4))
OLD, NEW = "2025.1.1", "2026.3.1"

FAKE_CHILD = textwrap.dedent("""\
    import os, sys, time
    what = os.environ["FAKE_" + sys.argv[1].upper()]
    if what == "hang":
        time.sleep(600)
    print("NSPY_PROBE ok x + 1: 2.0 us under " + sys.argv[1].upper() if what == "ok" else what)
    sys.exit(0 if what == "ok" else 1)
""")


def fake_ncu(folder: Path, version: str, launch: str) -> NcuInstall:
    """An ncu that reports ``version`` and, in launch mode, profiles the kernel ("ok") or prints ``launch``."""
    path = folder / version / "ncu"
    version_tuple = tuple(int(p) for p in f"{version}.0".split("."))
    if path.exists():  # the same machine again: the same file
        return NcuInstall(str(path), version_tuple)
    path.parent.mkdir(parents=True)
    row = '"0","vectorized_elementwise_kernel","gpu__time_duration.sum","nsecond","2048"'
    path.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && echo 'Version {version}.0' && exit 0\n"
                    + (f"echo '{row}'\nexit 0\n" if launch == "ok" else f"echo '{launch}'\nexit 1\n"))
    path.chmod(0o755)
    return NcuInstall(str(path), version_tuple)


# name: (driver, {ncu version: its launch-mode behaviour}, the Nsight Compute backend's probe, CUPTI's probe)
ROWS = {
    "driver below R580": (R550, {OLD: "ok"}, None, None),
    "R580, an ncu that refuses the driver": (R580, {NEW: DRIVER_REFUSED, OLD: "ok"}, DRIVER_REFUSED, "ok"),
    "R580, an ncu that works": (R580, {NEW: "ok", OLD: "ok"}, "ok", "ok"),
    "no ncu >= 2026.2.1, an older one": (R580, {OLD: "ok"}, None, "ok"),
    "the CUPTI probe fails": (R580, {OLD: "ok"}, None, CUPTI_FAILS),
    "counters reserved for administrators": (R580, {NEW: COUNTERS}, COUNTERS, "ok"),
    "the Nsight Compute backend's probe hangs": (R580, {NEW: "ok"}, "hang", "ok"),
}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    bootstrap._ENV = None
    monkeypatch.setenv("NSPY_NCU_INIT_AT_IMPORT", "0")
    for name in ("NSPY_TUTORIAL_BACKEND", "COLAB_RELEASE_TAG", "NSPY_TUTORIAL_REQUIRE"):
        monkeypatch.delenv(name, raising=False)
    yield
    bootstrap._ENV = None


def machine(monkeypatch, tmp_path: Path, row: str, colab: bool = False) -> environment.Environment:
    """``setup`` on the machine of ``row``."""
    (driver, cuda), ncus, ncu_probe, cupti_probe = ROWS[row]
    installs = [fake_ncu(tmp_path / "ncus", version, launch) for version, launch in ncus.items()]
    (tmp_path / "child.py").write_text(FAKE_CHILD)
    monkeypatch.setattr(probe, "CHILD", [sys.executable, str(tmp_path / "child.py")])
    monkeypatch.setattr(probe, "TIMEOUT", 3)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_NCU", ncu_probe or "NSPY_PROBE failed the test did not expect this probe")
    monkeypatch.setenv("FAKE_CUPTI", cupti_probe or "NSPY_PROBE failed the test did not expect this probe")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: bootstrap.Gpu("Tesla T4", driver, cuda, None))
    monkeypatch.setattr(bootstrap, "on_colab", lambda: colab)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: installs)
    monkeypatch.setattr(backend, "find_cupti_library", lambda *a, **k: CuptiLibrary("/fake/libcupti.so.13", (13, 4, 92)))
    monkeypatch.setattr(backend, "cupti_python_available", lambda: True)
    monkeypatch.setattr(bootstrap, "load", lambda chosen, tool: (chosen, None))  # no GPU to load it on here
    monkeypatch.setattr(bootstrap, "device_facts", lambda: DeviceFacts("Tesla T4", (7, 5), 40, 4 << 20, 15 << 30, 1590,
                                                                         5001))
    return bootstrap.setup("02_first_profile")


def said(env: environment.Environment, need: str) -> tuple[str, str, str]:
    """(the banner, the plan's line for ``need``, the Skip of a section requiring it, or "runs")."""
    plan = next(why for label, _, why in env.plan() if label.startswith(need + " ") or label == need)
    try:
        env.require(need)
        skip = "runs"
    except Skip as exc:
        skip = f"{exc.reason} -> {exc.remedy}"
    return "\n".join(banner_lines(env)), plan, skip


def test_driver_below_r580_tries_no_cuda_13_tool_and_says_the_driver_is_why(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "driver below R580")
    banner, plan, skip = said(env, "profiler")
    assert env.backend is None
    assert "driver       550.54.15 (supports CUDA 12.4)" in banner
    why = "needs a driver for CUDA 13 (R580 or newer); driver 550.54.15 supports CUDA 12.4"
    assert f"Nsight Compute >= 2026.2.1 {why}" in banner and f"CUPTI 13.4 {why}" in banner
    assert plan == skip and why in skip and environment.DRIVER_REMEDY[False] in skip
    assert env.ncu_path.endswith(f"{OLD}/ncu") and said(env, "ncu-cli")[2] == "runs"


def test_driver_below_r580_on_colab_downloads_nothing(monkeypatch, tmp_path):
    installs_run = []
    monkeypatch.setattr(bootstrap, "install_on_colab", lambda *a: installs_run.append(a) or "no")
    env = machine(monkeypatch, tmp_path, "driver below R580", colab=True)
    assert installs_run == [] and environment.DRIVER_REMEDY[True] in said(env, "profiler")[2]


def test_an_ncu_that_refuses_the_driver_leaves_cupti_and_the_older_ncus_command_line(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "R580, an ncu that refuses the driver")
    banner, plan, skip = said(env, "ncu")
    assert env.backend == "cupti" and env.ncu_path.endswith(f"{OLD}/ncu")
    assert banner.count(DRIVER_REFUSED) >= 2  # the backend's probe and the new ncu's launch-mode probe
    assert DRIVER_REFUSED in plan and plan == skip and environment.DRIVER_REMEDY[False] in skip
    assert said(env, "profiler")[2] == said(env, "ncu-cli")[2] == "runs"


def test_an_ncu_that_works_is_the_backend_and_the_command_line(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "R580, an ncu that works")
    banner, _, _ = said(env, "ncu")
    assert env.backend == "ncu" and env.ncu_path.endswith(f"{NEW}/ncu")
    assert "backend      ncu -- the Nsight Compute backend profiled a kernel in a child process" in banner
    assert all(said(env, need)[2] == "runs" for need in ("gpu", "profiler", "ncu", "ncu-cli"))
    assert "CUPTI backend with" not in banner  # the first that works is taken


def test_only_an_older_ncu_gives_cupti_and_its_command_line_and_says_the_version(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "no ncu >= 2026.2.1, an older one")
    banner, plan, skip = said(env, "ncu")
    assert env.backend == "cupti" and env.ncu_path.endswith(f"{OLD}/ncu")
    why = f"is {OLD}.0; nsight-python needs 2026.2.1.0 or newer"
    assert why in banner and why in plan and plan == skip and environment.NCU_REMEDY in skip


def test_a_failing_cupti_probe_leaves_no_backend_and_names_both_reasons(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "the CUPTI probe fails")
    banner, plan, skip = said(env, "profiler")
    assert env.backend is None
    assert "cuptiError: ERROR_INVALID_PARAMETER (1)" in banner and plan == skip
    assert "Nsight Compute: not tried" in skip and "CUPTI: it failed in a child process: cuptiError" in skip
    assert said(env, "ncu-cli")[2] == "runs"


def test_counters_reserved_for_administrators_skip_the_counter_sections_with_need_counters(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "counters reserved for administrators")
    banner, plan, skip = said(env, "ncu-cli")
    assert env.backend == "cupti" and env.ncu_path is None
    assert "ERR_NVGPUCTRPERM" in banner and plan == skip and sections.COUNTERS_REMEDY in skip
    with pytest.raises(Skip) as cli:
        env.require("ncu-cli")
    with pytest.raises(Skip) as ncu:
        env.require("ncu")
    assert cli.value.needs == ncu.value.needs == "counters"


def test_a_probe_that_hangs_is_a_failure_and_the_next_backend_is_tried(monkeypatch, tmp_path):
    env = machine(monkeypatch, tmp_path, "the Nsight Compute backend's probe hangs")
    banner, plan, _ = said(env, "ncu")
    assert env.backend == "cupti" and "no answer within 3 s: the probe hung" in banner and "hung" in plan


def test_a_second_setup_on_the_same_machine_reads_the_kept_probes(monkeypatch, tmp_path):
    machine(monkeypatch, tmp_path, "R580, an ncu that refuses the driver")
    bootstrap._ENV = None
    env = machine(monkeypatch, tmp_path, "R580, an ncu that refuses the driver")
    assert all("kept from an earlier probe on this machine" in line for line in env.probes)


def test_cupti_forced_is_not_a_reason_to_probe_nsight_compute(monkeypatch, tmp_path):
    monkeypatch.setenv("NSPY_TUTORIAL_BACKEND", "cupti")
    env = machine(monkeypatch, tmp_path, "R580, an ncu that works")
    assert env.backend == "cupti" and "not tried: NSPY_TUTORIAL_BACKEND=cupti" in said(env, "ncu")[2]


# --- the nsys column: which tool draws 07 §5's timeline on each machine -------------------------

README = Path(__file__).resolve().parents[1] / "README.md"
NSYS_ROWS = {  # a row of the README's table (its first words) -> what its nsys cell must say
    "driver below R580": ("Colab: installed by 01 §6b and 07 §5", backend.NSYS_PACKAGE, "`torch.profiler`"),
    "R580+, an ncu ≥ 2026.2.1 that refuses the driver": ("the one installed", "`torch.profiler`"),
    "R580+, an ncu ≥ 2026.2.1 that works": ("Colab: installed by 01 §6b and 07 §5", backend.NSYS_PACKAGE),
    "no ncu ≥ 2026.2.1, an older one (the project's H200 test machine)": ("none", "`torch.profiler`"),
    "the CUPTI try fails": ("the one installed", "`torch.profiler`"),
    "GPU counters reserved for administrators": ("the one installed", "`torch.profiler`"),
    "a try hangs": ("the one installed", "`torch.profiler`"),
    "no GPU (CI)": ("07 §5 SKIPPED: needs a GPU",),
}


def what_runs_where() -> tuple[list[str], list[list[str]]]:
    """The README's "What runs where" table: its header and rows, as cells."""
    text = README.read_text(encoding="utf-8").split("### What runs where", 1)[1]
    lines = [line for line in text.split("\n\n", 3)[2].splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
    return cells[0], cells[2:]


def test_the_table_has_an_nsys_column_and_every_row_fills_it():
    header, rows = what_runs_where()
    assert header[4] == "`nsys` (07 §5's timeline)" and header[-1] == "what the reader sees"
    assert all(len(row) == len(header) for row in rows)
    assert len(rows) == len(NSYS_ROWS)


@pytest.mark.parametrize("row", sorted(NSYS_ROWS))
def test_the_nsys_cell_says_who_draws_the_timeline_on_that_machine(row):
    _, rows = what_runs_where()
    (cells,) = [cells for cells in rows if cells[0].startswith(row)]
    for words in NSYS_ROWS[row]:
        assert words in cells[4], (row, words)


def test_without_nsys_the_timeline_is_drawn_by_torch_profiler_in_a_child(tmp_path, monkeypatch, capsys):
    """The cell's branch where nsys is missing: capture runs ``python -m nspy_tutorial.timeline``, not nsys."""
    from nspy_tutorial import ncu_cli, timeline

    monkeypatch.setattr(backend, "NSYS_PLACES", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fusion_kernels.py").write_text("")
    ran = []
    monkeypatch.setattr(ncu_cli, "run", lambda cmd, timeout, error: ran.append(cmd) or "")
    monkeypatch.setattr(timeline, "read_kineto", lambda path: path)
    assert backend.find_nsys() is None
    assert timeline.capture("fusion_kernels.py", "trace", [(8, 4096)], nsys=backend.find_nsys()) == "trace-timeline.json"
    assert ran == [[sys.executable, "-m", "nspy_tutorial.timeline", "fusion_kernels.py", "trace", "[[8,4096]]", "1",
                    "trace-timeline.json"]]
    print(backend.nsys_missing(on_colab=False))
    assert backend.NSYS_PAGE in capsys.readouterr().out
