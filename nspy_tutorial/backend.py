"""Finding the profiling tools without starting CUDA: the ncu installs and their versions, the newest
libcupti, and the exact versions the series pins. Setup decides with these before ``import nsight``."""

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

MIN_NCU_VERSION = (2026, 2, 1, 0)  # nsight-python 1.1 attaches Nsight Compute in-process: this ncu or newer
MIN_CUPTI_VERSION = (13, 4)  # its CUPTI backend needs cupti-python 13.4, which needs libcupti 13.4+
NCU_SEARCH_ROOT = "/opt/nvidia/nsight-compute"
CUPTI_PACKAGES = ("cupti-python", "nvidia-cuda-cupti", "pyelftools")


def version_text(version: tuple[int, ...] | None) -> str:
    return "unknown" if version is None else ".".join(str(p) for p in version)


def installed(name: str) -> str | None:
    """The installed version of the Python package ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_ncu_version(output: str) -> tuple[int, ...] | None:
    """``Version 2026.3.1.0`` in ``ncu --version``'s output, as four numbers."""
    match = re.search(r"Version\s+(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?", output)
    return None if match is None else tuple(int(x) if x is not None else 0 for x in match.groups())


def ncu_version(path: str) -> tuple[int, ...] | None:
    """What ``<path> --version`` says; None if it cannot run or says no version."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ncu_version(done.stdout)


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
    paths = [os.path.realpath(shutil.which("ncu"))] if shutil.which("ncu") else []
    for candidate in sorted(glob.glob(os.path.join(search_root, "*", "ncu"))):
        real = os.path.realpath(candidate)
        if real not in paths and os.access(real, os.X_OK):
            paths.append(real)
    return [NcuInstall(p, ncu_version(p)) for p in paths]


def choose_ncu(installs: list[NcuInstall]) -> NcuInstall | None:
    """The newest new-enough ncu, else the one on PATH (to report its version), else None."""
    good = [i for i in installs if i.new_enough]
    return max(good, key=lambda i: i.version or ()) if good else (installs[0] if installs else None)


@dataclasses.dataclass(frozen=True)
class CuptiLibrary:
    """A libcupti shared library shipped in an nvidia-cuda-cupti wheel."""

    path: str
    version: tuple[int, ...]


def find_cupti_library(paths: list[str] | None = None) -> CuptiLibrary | None:
    """The newest libcupti of the nvidia-cuda-cupti wheels installed (or under ``paths``): torch's is older."""
    found = []
    for dist in importlib.metadata.distributions(path=paths) if paths else importlib.metadata.distributions():
        if not (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("nvidia-cuda-cupti"):
            continue
        for file in dist.files or []:
            path = str(dist.locate_file(file))
            if re.search(r"/libcupti\.so(\.\d+)*$", "/" + str(file)) and os.path.exists(path):
                found.append(CuptiLibrary(path, tuple(int(p) for p in re.findall(r"\d+", dist.version)[:3])))
    return max(found, key=lambda library: library.version, default=None)


def cupti_python_available() -> bool:
    return importlib.util.find_spec("cupti") is not None


def cupti_problem(library: CuptiLibrary | None, python_available: bool) -> str | None:
    """Why the CUPTI backend cannot be used, or None if its prerequisites are there."""
    if not python_available:
        return "cupti-python is not installed"
    if library is None:
        return "no libcupti from an nvidia-cuda-cupti wheel was found"
    if library.version[:2] < MIN_CUPTI_VERSION:
        return (f"the newest libcupti found is {version_text(library.version)} ({library.path}); the CUPTI backend "
                f"needs {version_text(MIN_CUPTI_VERSION)}+")
    return None


def preload_cupti(library: CuptiLibrary) -> None:
    """Load ``library`` globally before torch loads its own: a CUDA 13 torch then uses this one (two failed
    CUPTI's activation with ERROR_INVALID_PARAMETER); a CUDA 12 torch loads its libcupti.so.12 beside it."""
    ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL)


def pins() -> dict[str, str]:
    """pyproject.toml's ``==`` pins (the versions the recorded runs used), from the package's metadata or the clone."""
    try:
        lines = importlib.metadata.requires("nspy-tutorial") or []
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        lines = re.findall(r'"([^"]+)"', pyproject.read_text(encoding="utf-8")) if pyproject.exists() else []
    pinned = (re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", line) for line in lines)
    return {match[1].lower(): match[2] for match in pinned if match}


def cache_dir() -> Path:
    """What the series keeps per machine: ``$XDG_CACHE_HOME/nspy-tutorial`` (default ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nspy-tutorial"


def cupti_install_command() -> list[str]:
    """pip installs cupti-python and libcupti 13.4, pinned, into a folder of their own: Colab's CUDA 12 stays."""
    versions = pins()
    wanted = [f"{name}=={versions[name]}" if name in versions else name for name in CUPTI_PACKAGES]
    return [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(cache_dir() / "cupti"), *wanted]


def use_cupti_target() -> tuple[CuptiLibrary | None, str | None]:
    """:func:`cupti_install_command`'s folder on this process's path and its children's; (its libcupti, or why not)."""
    folder = str(cache_dir() / "cupti")
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


# Nsight Systems (nsys): 07's timeline uses it where it is installed, torch.profiler where it is not.
NSYS_PACKAGE = "nsight-systems-2026.1.3"  # pinned: what NVIDIA's own Colab notebooks (accelerated-computing-hub) install
NSYS_PAGE = "https://developer.nvidia.com/nsight-systems/get-started"
NSYS_PLACES = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
               "/usr/local/cuda/bin/nsys")  # apt's versioned folders, and the CUDA toolkit's


def find_nsys() -> str | None:
    """The nsys on PATH, else the newest in :data:`NSYS_PLACES` (by the version in its path), else None."""
    if shutil.which("nsys"):
        return shutil.which("nsys")
    found = [path for place in NSYS_PLACES for path in glob.glob(place) if os.access(path, os.X_OK)]
    return max(found, key=lambda path: [int(n) for n in re.findall(r"\d+", path)], default=None)


def nsys_version(path: str) -> str:
    """What ``<path> --version`` says (``NVIDIA Nsight Systems version 2025.3.1.90-...``), or "unknown"."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"version\s+(\d[\w.-]*)", done.stdout, flags=re.I)
    return match.group(1) if match else "unknown"


def nsys_missing(on_colab: bool) -> str:
    """Where nsys is missing: who draws the timeline instead, and how to install nsys (lines of <= 120 characters)."""
    how = ([f"on Colab: apt-get install -y {NSYS_PACKAGE}", "(NVIDIA's apt repository is configured there; apt prints "
            "the download size before it downloads)"] if on_colab else
           [f"NVIDIA's installers at {NSYS_PAGE}", f"or, where NVIDIA's CUDA apt repository is configured: "
            f"sudo apt-get install -y {NSYS_PACKAGE}"])
    return "\n  ".join(["no nsys on PATH or under /opt/nvidia/nsight-systems: torch.profiler draws the timeline instead",
                        "to draw it with Nsight Systems, install it:", *how])
