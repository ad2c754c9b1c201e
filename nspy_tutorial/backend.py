"""Finding the profiling tools: which ncu is there, how new, and where a new libcupti is.

Everything here inspects the machine without initialising CUDA, so the bootstrap can
decide on a backend *before* ``import nsight`` (which must precede CUDA).
The decisions themselves are plain functions of what was found, so they can be tested
without a GPU.
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# nsight-python 1.1 attaches Nsight Compute to the running process; that needs this ncu.
MIN_NCU_VERSION = (2026, 2, 1, 0)
# nsight-python's CUPTI backend needs cupti-python 13.4, which needs libcupti 13.4+.
MIN_CUPTI_VERSION = (13, 4)
NCU_SEARCH_ROOT = "/opt/nvidia/nsight-compute"


def version_text(version: tuple[int, ...] | None) -> str:
    return "unknown" if version is None else ".".join(str(p) for p in version)


def parse_ncu_version(output: str) -> tuple[int, ...] | None:
    """Read ``Version 2026.3.1.0`` (four numbers) out of ``ncu --version`` output."""
    match = re.search(r"Version\s+(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?", output)
    if match is None:
        return None
    return tuple(int(x) if x is not None else 0 for x in match.groups())


def ncu_version(path: str) -> tuple[int, ...] | None:
    """Run ``<path> --version``; None if it cannot run or says no version."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ncu_version(out)


@dataclasses.dataclass(frozen=True)
class NcuInstall:
    """One ncu launcher and its version."""

    path: str
    version: tuple[int, ...] | None

    @property
    def new_enough(self) -> bool:
        return self.version is not None and self.version >= MIN_NCU_VERSION


def find_ncu_installs(search_root: str = NCU_SEARCH_ROOT) -> list[NcuInstall]:
    """The ncu on PATH first, then every ``<search_root>/*/ncu``, each once."""
    paths: list[str] = []
    on_path = shutil.which("ncu")
    if on_path:
        paths.append(os.path.realpath(on_path))
    for candidate in sorted(glob.glob(os.path.join(search_root, "*", "ncu"))):
        real = os.path.realpath(candidate)
        if real not in paths and os.access(real, os.X_OK):
            paths.append(real)
    return [NcuInstall(p, ncu_version(p)) for p in paths]


def choose_ncu(installs: list[NcuInstall]) -> NcuInstall | None:
    """The newest new-enough ncu, else the one on PATH (to report its version), else None."""
    good = [i for i in installs if i.new_enough]
    if good:
        return max(good, key=lambda i: i.version or ())
    return installs[0] if installs else None


def put_first_on_path(directory: str) -> None:
    """Prepend ``directory`` to PATH (once): nsight-python looks ``ncu`` up on PATH."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if parts and parts[0] == directory:
        return
    os.environ["PATH"] = os.pathsep.join([directory] + [p for p in parts if p != directory])


@dataclasses.dataclass(frozen=True)
class CuptiLibrary:
    """A libcupti shared library shipped in an nvidia-cuda-cupti wheel."""

    path: str
    version: tuple[int, ...]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def find_cupti_library(paths: list[str] | None = None) -> CuptiLibrary | None:
    """The newest libcupti from any installed nvidia-cuda-cupti distribution.

    Several can be installed at once (torch pins an older one; nsight-python's
    ``[cupti]`` extra wants 13.4+), so look at every distribution's files rather
    than at whatever the dynamic loader would find first. ``paths`` searches those
    folders instead of this process's ``sys.path`` (a ``pip install --target`` folder).
    """
    best: CuptiLibrary | None = None
    found_in = importlib.metadata.distributions(path=paths) if paths else importlib.metadata.distributions()
    for dist in found_in:
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.startswith("nvidia-cuda-cupti"):
            continue
        for file in dist.files or []:
            if re.search(r"/libcupti\.so(\.\d+)*$", "/" + str(file)):
                path = str(dist.locate_file(file))
                if os.path.exists(path):
                    found = CuptiLibrary(path, _version_tuple(dist.version))
                    if best is None or found.version > best.version:
                        best = found
    return best


def cupti_python_available() -> bool:
    """Whether the ``cupti`` module (cupti-python) can be imported."""
    return importlib.util.find_spec("cupti") is not None


def cupti_problem(library: CuptiLibrary | None, python_available: bool) -> str | None:
    """Why the CUPTI backend cannot be used, or None if its prerequisites are there."""
    if not python_available:
        return "cupti-python is not installed"
    if library is None:
        return "no libcupti from an nvidia-cuda-cupti wheel was found"
    if library.version[:2] < MIN_CUPTI_VERSION:
        return (
            f"the newest libcupti found is {version_text(library.version)} "
            f"({library.path}); the CUPTI backend needs {version_text(MIN_CUPTI_VERSION)}+"
        )
    return None


def preload_cupti(library: CuptiLibrary) -> None:
    """Load ``library`` (libcupti 13.4+, ``libcupti.so.13``) globally before torch loads its own.

    torch links libcupti by soname, ``libcupti.so.<major of torch.version.cuda>``. For a
    CUDA 13 torch that is ``libcupti.so.13``: once the newer copy with that soname is loaded
    with RTLD_GLOBAL, torch's request resolves to it, and the process holds one libcupti.
    Without this, nsight's CUPTI activation fails with ``ERROR_INVALID_PARAMETER`` from
    ``subscribe_v2`` (measured on the project's GPU test machine, torch cu130). A CUDA 12
    torch asks for ``libcupti.so.12``, which this library cannot stand in for: torch then
    loads its own beside it, and the process holds two libcupti (nsight's CUPTI backend
    uses this one; ``torch.profiler`` torch's). Not measured on the test machine.
    """
    ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL)


def pins() -> dict[str, str]:
    """The exact versions the recorded runs used, from one place: pyproject.toml's ``==`` pins (the
    dependencies and the ``cupti`` extra), read from the installed package's metadata or the clone."""
    try:
        lines = importlib.metadata.requires("nspy-tutorial") or []
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        lines = re.findall(r'"([^"]+)"', pyproject.read_text(encoding="utf-8")) if pyproject.exists() else []
    pinned = (re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", line) for line in lines)
    return {match[1].lower(): match[2] for match in pinned if match}


CUPTI_PACKAGES = ("cupti-python", "nvidia-cuda-cupti", "pyelftools")


def cupti_target() -> Path:
    """Where Colab's CUPTI packages go: beside its own CUDA 12 packages, which stay untouched."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nspy-tutorial" / "cupti"


def cupti_install_command() -> list[str]:
    """pip installs cupti-python and libcupti 13.4 (the pinned versions) into :func:`cupti_target` alone."""
    versions = pins()
    wanted = [f"{name}=={versions[name]}" if name in versions else name for name in CUPTI_PACKAGES]
    return [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(cupti_target()), *wanted]


def use_cupti_target() -> tuple[CuptiLibrary | None, str | None]:
    """Put :func:`cupti_target` on this process's path and its children's; (its libcupti, or why not usable)."""
    folder = str(cupti_target())
    if not os.path.isdir(os.path.join(folder, "cupti")):
        return None, f"cupti-python is not installed (looked in {folder})"
    if folder not in sys.path:
        sys.path.insert(0, folder)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
        importlib.invalidate_caches()
    library = find_cupti_library([folder])
    return library, cupti_problem(library, True)


def installer_path() -> Path:
    """The packaged install_ncu.sh (scripts/install_ncu.sh in a checkout links to it)."""
    return Path(__file__).with_name("resources") / "install_ncu.sh"
