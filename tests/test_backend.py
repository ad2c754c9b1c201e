"""Specification of finding the profiling tools (``nspy_tutorial.backend``).

Nothing here needs a GPU: ncu installs are fake scripts that print a version line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nspy_tutorial import backend
from nspy_tutorial.backend import CuptiLibrary, NcuInstall, choose_ncu, cupti_problem, parse_ncu_version

NCU_VERSION_OUTPUT = (
    "NVIDIA (R) Nsight Compute Command Line Profiler\n"
    "Copyright (c) 2018-2025 NVIDIA Corporation\n"
    "Version 2025.3.1.0 (build 36398880) (public-release)\n"
)


def fake_ncu(folder: Path, version: str | None, executable: bool = True) -> Path:
    """An ``ncu`` script in ``folder`` that prints ``Version <version>``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ncu"
    line = f"Version {version} (build 1) (public-release)" if version else "no version here"
    script.write_text(f"#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho '{line}'\n")
    script.chmod(0o755 if executable else 0o644)
    return script


# --------------------------------------------------------------------------
# Versions
# --------------------------------------------------------------------------


def test_parse_ncu_version_reads_real_ncu_output():
    assert parse_ncu_version(NCU_VERSION_OUTPUT) == (2025, 3, 1, 0)


def test_parse_ncu_version_pads_a_three_part_version():
    assert parse_ncu_version("Version 2026.2.1") == (2026, 2, 1, 0)


@pytest.mark.parametrize("output", ["", "command not found", "Version unknown", "ncu: error while loading"])
def test_parse_ncu_version_of_garbage_is_none(output):
    assert parse_ncu_version(output) is None


@pytest.mark.parametrize(
    ("version", "new_enough"),
    [
        ((2026, 2, 1, 0), True),  # exactly the minimum
        ((2026, 2, 0, 9), False),
        ((2025, 3, 1, 0), False),
        ((2026, 2, 1, 1), True),
        ((2027, 1, 0, 0), True),
        (None, False),
    ],
)
def test_ncu_install_is_new_enough_from_the_minimum_version_on(version, new_enough):
    assert backend.MIN_NCU_VERSION == (2026, 2, 1, 0)
    assert NcuInstall("/x/ncu", version).new_enough is new_enough


@pytest.mark.parametrize(("version", "text"), [((2026, 2, 1, 0), "2026.2.1.0"), ((13, 4), "13.4"), (None, "unknown")])
def test_version_text(version, text):
    assert backend.version_text(version) == text


def test_ncu_version_runs_the_executable(tmp_path):
    script = fake_ncu(tmp_path, "2026.3.0.0")
    assert backend.ncu_version(str(script)) == (2026, 3, 0, 0)


def test_ncu_version_of_a_missing_executable_is_none(tmp_path):
    assert backend.ncu_version(str(tmp_path / "nowhere" / "ncu")) is None


# --------------------------------------------------------------------------
# choose_ncu
# --------------------------------------------------------------------------


def test_choose_ncu_prefers_the_newest_new_enough_install():
    on_path = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
    newer = NcuInstall("/opt/nvidia/nsight-compute/2026.2.1/ncu", (2026, 2, 1, 0))
    newest = NcuInstall("/opt/nvidia/nsight-compute/2026.3.0/ncu", (2026, 3, 0, 0))
    assert choose_ncu([on_path, newest, newer]) == newest


def test_choose_ncu_falls_back_to_the_first_install_when_none_is_new_enough():
    on_path = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
    other = NcuInstall("/opt/nvidia/nsight-compute/2025.4.0/ncu", (2025, 4, 0, 0))
    assert choose_ncu([on_path, other]) == on_path


def test_choose_ncu_of_no_installs_is_none():
    assert choose_ncu([]) is None


# --------------------------------------------------------------------------
# find_ncu_installs
# --------------------------------------------------------------------------


def test_find_ncu_installs_lists_the_path_ncu_first_then_the_search_root(tmp_path, monkeypatch):
    on_path = fake_ncu(tmp_path / "bin", "2025.3.1.0")
    root = tmp_path / "nsight-compute"
    newer = fake_ncu(root / "2026.2.1", "2026.2.1.0")
    older = fake_ncu(root / "2025.1.0", "2025.1.0.0")
    monkeypatch.setenv("PATH", str(on_path.parent))
    installs = backend.find_ncu_installs(str(root))
    assert installs == [
        NcuInstall(os.path.realpath(on_path), (2025, 3, 1, 0)),
        NcuInstall(os.path.realpath(older), (2025, 1, 0, 0)),
        NcuInstall(os.path.realpath(newer), (2026, 2, 1, 0)),
    ]
    assert choose_ncu(installs).path == os.path.realpath(newer)


def test_find_ncu_installs_lists_an_install_reached_twice_once(tmp_path, monkeypatch):
    root = tmp_path / "nsight-compute"
    real = fake_ncu(root / "2026.2.1", "2026.2.1.0")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").symlink_to(real)
    monkeypatch.setenv("PATH", str(bin_dir))
    installs = backend.find_ncu_installs(str(root))
    assert installs == [NcuInstall(os.path.realpath(real), (2026, 2, 1, 0))]


def test_find_ncu_installs_skips_a_non_executable_candidate(tmp_path, monkeypatch):
    root = tmp_path / "nsight-compute"
    fake_ncu(root / "broken", "2026.2.1.0", executable=False)
    good = fake_ncu(root / "2026.2.1", "2026.2.1.0")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert backend.find_ncu_installs(str(root)) == [NcuInstall(os.path.realpath(good), (2026, 2, 1, 0))]


def test_find_ncu_installs_with_nothing_anywhere_is_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert backend.find_ncu_installs(str(tmp_path / "no-root")) == []


def test_find_ncu_installs_keeps_an_install_whose_version_cannot_be_read(tmp_path, monkeypatch):
    mute = fake_ncu(tmp_path / "bin", None)
    monkeypatch.setenv("PATH", str(mute.parent))
    assert backend.find_ncu_installs(str(tmp_path / "no-root")) == [NcuInstall(os.path.realpath(mute), None)]


# --------------------------------------------------------------------------
# cupti_problem
# --------------------------------------------------------------------------


def test_cupti_problem_without_cupti_python():
    library = CuptiLibrary("/site/nvidia/cu13/lib/libcupti.so.13", (13, 4, 0))
    assert cupti_problem(library, python_available=False) == "cupti-python is not installed"


def test_cupti_problem_without_a_libcupti():
    problem = cupti_problem(None, python_available=True)
    assert problem is not None and "no libcupti" in problem


def test_cupti_problem_with_a_too_old_libcupti_names_its_version_path_and_the_minimum():
    library = CuptiLibrary("/site/nvidia/cu13/lib/libcupti.so.13", (13, 0, 85))
    problem = cupti_problem(library, python_available=True)
    assert problem is not None
    assert "13.0.85" in problem
    assert "/site/nvidia/cu13/lib/libcupti.so.13" in problem
    assert "13.4+" in problem


@pytest.mark.parametrize("version", [(13, 4), (13, 4, 1), (13, 5, 0), (14, 0, 0)])
def test_cupti_problem_with_a_new_enough_libcupti_is_none(version):
    library = CuptiLibrary("/site/nvidia/cu13/lib/libcupti.so.13", version)
    assert cupti_problem(library, python_available=True) is None


def test_installer_path_points_at_the_packaged_script():
    path = backend.installer_path()
    assert path.name == "install_ncu.sh"
    assert path.parent.name == "resources"
    assert path.is_file()


def test_find_cupti_library_can_search_a_pip_target_folder(tmp_path):
    lib = tmp_path / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    info = tmp_path / "nvidia_cuda_cupti-13.4.92.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-cupti\nVersion: 13.4.92\n")
    (info / "RECORD").write_text("nvidia/cu13/lib/libcupti.so.13,,\n")
    found = backend.find_cupti_library([str(tmp_path)])
    assert found is not None
    assert found.path == str(lib) and found.version == (13, 4, 92)
