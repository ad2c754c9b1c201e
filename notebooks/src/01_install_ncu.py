# %% [markdown]
# # 01 · Install Nsight Compute, import nsight first, pick a backend
#
# **What you will learn**
# - which GPU, driver and Nsight Compute (`ncu`) this machine has, and why nsight-python
#   1.1 needs **ncu 2026.2.1 or newer** for its Nsight Compute backend, and a driver for
#   CUDA 13 for its CUDA 13 tools;
# - how to install nsight-python at the exact version this series was recorded with, and a
#   current Nsight Compute *next to* the preinstalled one (`apt-get`, `dpkg -L`, `PATH`);
# - the other backend, CUPTI: why it needs a libcupti newer than PyTorch's, and how to
#   load that one first with `ctypes`;
# - why to **try a backend in a child process before committing to it**: loading one cannot
#   be undone in a process, and each can fail for reasons no version number predicts;
# - what `import nsight` does, how to read which tool it loaded
#   (`nsight.get_active_tool()`, `injection_load_error`), how to switch to CUPTI
#   (`nsight.activate`), and what `NSPY_NCU_INIT_AT_IMPORT=0` changes;
# - what nsight-python does when CUDA started before it -- run, not just described.
#
# Every later notebook's first cell does all of this in one call, `nt.setup(...)`. Here
# you do it by hand, one cell per step, in the order that matters: install → `PATH` →
# try each backend in a child → libcupti → `import nsight` → only then torch and CUDA. The
# setup cell below therefore only *looks* (GPU, driver, ncu); it installs, tries, loads and
# imports no profiling tool (on Colab it pip-installs this tutorial's package). On Colab each notebook runs in a fresh runtime: the later notebooks' setup cells
# install what they need themselves, so none of them needs this one to have run first.
#
# | backend | needs | gives |
# |---|---|---|
# | Nsight Compute (`nsight.Tool.NCU`) | ncu ≥ 2026.2.1 on `PATH`, loaded before CUDA, a driver it accepts | any metric, cache/clock control, replay |
# | CUPTI (`nsight.Tool.CUPTI`, experimental) | `nsight-python[cupti]`, libcupti ≥ 13.4, a driver for CUDA 13 (R580+) | kernel durations only |
#
# On Colab (you are root there) section 4 installs Nsight Compute for real; anywhere
# else it shows the plan and the command to run. Sections that cannot run here are
# SKIPPED with the reason and what to do.

# %%
{{SETUP_MANUAL}}

# %%
import ctypes
import glob
import importlib.metadata
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

from nspy_tutorial import backend, lifetime, ncu_cli, probe

MIN_NCU = (2026, 2, 1, 0)  # what nsight-python 1.1 checks; section 9 reads it from nsight itself
CUDA13 = (
    13,
    0,
)  # CUDA 13 tools (CUPTI 13.4, Nsight Compute 2026.x) need a driver that supports CUDA 13
FORCE_CUPTI = (
    os.environ.get("NSPY_TUTORIAL_BACKEND", "").lower() == "cupti"
)  # skip Nsight Compute on purpose
PINS = backend.pins()  # pyproject.toml's exact versions: what this series was recorded with
DPKG_NCU: dict[str, str] = {}  # package -> ncu launcher, filled by section 5
TRIED: list[probe.Outcome] = []  # section 7's probes
CHOSEN = None  # the backend a probe showed working: "ncu" or "cupti" (section 7)


def run(
    cmd: list[str], echo: bool = False, timeout: float = 1200, env=None
) -> subprocess.CompletedProcess:
    """Print a command, run it in the foreground (stdout+stderr; ``echo``: shown as it comes); its tree ends with the cell."""
    print(f"$ {shlex.join(cmd)}")
    code, output = lifetime.run(cmd, env or dict(os.environ), timeout, echo=echo)
    return subprocess.CompletedProcess(cmd, code, output, "")


def find_ncus() -> list[tuple[str, tuple[int, ...] | None]]:
    """Every ncu we can find (on PATH, then /opt/nvidia/nsight-compute/*/ncu) with the version it reports."""
    found = []
    on_path = shutil.which("ncu")
    for path in ([on_path] if on_path else []) + sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/ncu")
    ):
        real = os.path.realpath(path)
        if real not in [p for p, _ in found]:
            out = subprocess.run(
                [real, "--version"], capture_output=True, text=True, timeout=60
            ).stdout
            found.append((real, backend.parse_ncu_version(out)))
    return found


# %% [markdown]
# ## 1. The GPU and its driver
#
# `nvidia-smi` talks to the driver through NVML, like the setup cell did: it names the
# GPU without starting CUDA in this process. NVML also says which CUDA version the
# **driver** supports -- not the toolkit's, not torch's. Both of nsight-python's backends,
# at the versions it needs, are CUDA 13 tools (CUPTI 13.4; Nsight Compute 2026.2.1 and newer ship with
# CUDA 13), and CUDA 13 tools need a driver for CUDA 13: the R580 branch or newer. A driver
# cannot be changed from inside a notebook (on Colab, not at all), so this is the first fact
# to know.

# %%
with nt.section("1. The GPU and its driver") as s:
    ENV.require("gpu")
    smi = run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv"]
    )
    print(textwrap.indent(smi.stdout.strip(), "  "))
    cuda = f"{ENV.driver_cuda[0]}.{ENV.driver_cuda[1]}" if ENV.driver_cuda else "unknown"
    enough = ENV.driver_cuda is None or ENV.driver_cuda >= CUDA13
    print(
        f"  NVML: driver {ENV.driver} supports CUDA {cuda}: "
        + (
            "enough for CUDA 13 tools"
            if enough
            else "too old for CUDA 13 tools (CUPTI 13.4, Nsight Compute 2026.x)"
        )
    )
    s.result = f"{ENV.gpu_name}, driver {ENV.driver} (CUDA {cuda})"

# %% [markdown]
# ## 2. nsight-python itself, at the version the series was recorded with
#
# `pip install nsight-python` gives the newest release; this series pins the exact versions
# its recorded runs used (`pyproject.toml`: nsight-python, ncu-report, and for the CUPTI
# backend cupti-python and nvidia-cuda-cupti), because a new release can change behaviour the
# notebooks rely on (1.1.1, for one, no longer writes `collected_info.pkl` and raises where
# 1.1.0 returned an empty table). The **`[cupti]` extra** adds cupti-python, which needs
# libcupti 13.4 (the `nvidia-cuda-cupti` wheel) -- newer than the one a CUDA 12 PyTorch
# ships. On Colab it goes into a folder of its own with `pip install --no-deps --target`, so
# Colab's own CUDA 12 packages stay as they are; the setup cell does that when CUPTI is
# needed, and shows the command. On Colab this cell runs the pinned install (a no-op when the
# setup cell's install already brought it); elsewhere it prints it and leaves your
# environment alone.

# %%
with nt.section("2. nsight-python, pinned") as s:
    pin = PINS.get("nsight-python")
    cmd = [sys.executable, "-m", "pip", "install", "-q", f"nsight-python=={pin}"]
    if ENV.on_colab:
        nt.claim(run(cmd, echo=True).returncode == 0, f"pip installed nsight-python=={pin}")
    else:
        print(f"to install what the series was recorded with:\n  {shlex.join(cmd)}")
    print(
        f"the CUPTI extra, beside the rest (what setup runs on Colab when needed):\n  "
        f"{shlex.join(backend.cupti_install_command())}"
    )
    have = importlib.metadata.version("nsight-python")
    s.result = f"nsight-python {have}" + (
        "" if have == pin else f" (recorded with {pin}; 1.1.x is tolerated)"
    )

# %% [markdown]
# ## 3. Which `ncu` is installed, and how new
#
# nsight-python finds `ncu` the way a shell does: `shutil.which("ncu")`, the first one
# on `PATH`. NVIDIA's packages also install versioned copies under
# `/opt/nvidia/nsight-compute/<version>/`, often not on `PATH`. We look in both places
# and ask each one `ncu --version`.

# %%
with nt.section("3. The ncu installs on this machine") as s:
    print(f'shutil.which("ncu") -> {shutil.which("ncu")}')
    INSTALLS = find_ncus()
    for path, version in INSTALLS:
        verdict = (
            "new enough"
            if version and version >= MIN_NCU
            else "too old for nsight-python's Nsight Compute backend"
        )
        print(f"$ {path} --version   -> {backend.version_text(version)} ({verdict})")
    newest = max((v for _, v in INSTALLS if v), default=None)
    ready = newest is not None and newest >= MIN_NCU
    s.result = (
        "no ncu on PATH or under /opt/nvidia/nsight-compute"
        if not INSTALLS
        else f"{len(INSTALLS)} ncu found, newest {backend.version_text(newest)}: "
        + (
            "new enough for the Nsight Compute backend"
            if ready
            else f"none is {backend.version_text(MIN_NCU)} or newer"
        )
    )

# %% [markdown]
# ## 4. Installing a current Nsight Compute beside the old one
#
# Nsight Compute ships as the Debian package `nsight-compute-<version>` in NVIDIA's
# CUDA apt repository (Colab's image already has that repository configured). It
# installs under `/opt/nvidia/nsight-compute/<version>/` and leaves the old ncu alone:
#
# ```
# apt-get update
# apt-get install -y nsight-compute-2026.3.1     # or 2026.2.1: newest first
# ```
#
# It is a download of a few hundred megabytes: apt's first lines say how much ("Need to get
# ... MB of archives") before it starts, and its lines appear as they come. On **Colab** (root, a GPU whose driver
# supports CUDA 13, no new-enough ncu) this cell runs exactly those commands. If apt cannot
# install either version, it runs `scripts/install_ncu.sh`, which downloads the `.deb` from
# NVIDIA's repository index and installs it with `apt-get install ./file.deb` (with its
# dependencies). **Anywhere else** nothing is installed for you: the cell runs the script's
# `--dry-run` and prints the command to run yourself. The script's exit codes name each
# obstacle: not root (3), no apt/dpkg (4), no network (5), no new-enough package (6),
# unsupported architecture (7), the dpkg lock held by another process (8). A driver too old
# for CUDA 13 (below R580) rules the download out: Nsight Compute 2026.2.1 and newer ship with CUDA 13, whose tools need
# R580 or newer. (If your older driver does run it, install it yourself: section 7's try will say.)

# %%
VERSIONS = ["2026.3.1", "2026.2.1"]  # nsight-compute-<version> packages to try, newest first
INSTALLER = backend.installer_path()  # scripts/install_ncu.sh in a checkout links to it
APT = [
    "apt-get",
    "-o",
    "DPkg::Lock::Timeout=120",
]  # non-interactive (DEBIAN_FRONTEND below), waits for a held lock

with nt.section("4. Install a current ncu (Colab) or show the plan") as s:
    have = [p for p, v in find_ncus() if v and v >= MIN_NCU]
    script_env = {
        **os.environ,
        "NCU_VERSIONS": " ".join(VERSIONS),
        "DEBIAN_FRONTEND": "noninteractive",
    }
    old_driver = ENV.driver_cuda is not None and ENV.driver_cuda < CUDA13
    can_install = ENV.on_colab and ENV.has_gpu and os.geteuid() == 0 and shutil.which("apt-get")
    if have:
        s.result = f"nothing to install: {have[0]} is new enough"
    elif can_install and not old_driver:
        run([*APT, "update", "-q"], echo=True, env=script_env)
        installed = None
        for version in VERSIONS:
            if (
                run(
                    [*APT, "install", "-y", "-q", f"nsight-compute-{version}"],
                    echo=True,
                    env=script_env,
                ).returncode
                == 0
            ):
                installed = f"nsight-compute-{version}"
                break
        if (
            installed is None
        ):  # apt could not: the script downloads NVIDIA's .deb and installs it with apt-get
            done = run(["bash", str(INSTALLER)], echo=True, env=script_env)
            nt.claim(
                done.returncode == 0,
                "install_ncu.sh installed a new-enough ncu",
                f"exit {done.returncode}",
            )
            installed = f"with install_ncu.sh into {done.stdout.strip().splitlines()[-1]}"
        s.result = f"installed {installed}"
    else:
        done = run(["bash", str(INSTALLER), "--dry-run"], echo=True, env=script_env)
        nt.claim(
            done.returncode == 0,
            "the installer's dry run succeeds and changes nothing",
            f"exit {done.returncode}",
        )
        print(
            f"\nTo install it yourself, as root (then restart the kernel and run this notebook again):\n"
            f"  sudo bash {INSTALLER}"
        )
        why = (
            "the driver supports no CUDA 13"
            if old_driver
            else "not on Colab"
            if not ENV.on_colab
            else "no GPU"
            if not ENV.has_gpu
            else "not root or no apt-get"
        )
        s.result = f"nothing installed ({why}): `sudo bash {INSTALLER}` installs nsight-compute-{VERSIONS[0]}"

# %% [markdown]
# ## 5. Where the package put `ncu`: `dpkg -L`
#
# Don't guess the install path: ask the package manager for the package's files and
# keep the launcher, `dpkg -L nsight-compute-<version> | grep /ncu$`. (The package also
# carries per-architecture copies deeper down; the launcher is the shortest path.)


# %%
def where_ncu_came_from(dpkg_ncu: dict[str, str], packages: list[str], others: list[str]) -> str:
    """Section 5's line: each package's ncu, then any ncu found that no package lists."""
    found = (
        [f"{p}: {path}" for p, path in dpkg_ncu.items()]
        or [f"{p}: no ncu in its files" for p in packages]
        or ["no nsight-compute-* package installed"]
    )
    if others:
        found.append(f"{', '.join(others)} came another way (e.g. the CUDA toolkit)")
    elif not dpkg_ncu:
        found.append("no ncu on this machine")
    return "; ".join(found)


with nt.section("5. Find ncu with dpkg -L") as s:
    if shutil.which("dpkg-query") is None:
        raise nt.Skip(
            "no dpkg here: this is not a Debian/Ubuntu system",
            "look for ncu under /opt/nvidia/nsight-compute/<version>/ or in your package manager's file list",
        )
    listed = run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status};", "nsight-compute-*"]
    )  # which are installed
    packages = [
        entry.split()[0]
        for entry in listed.stdout.split(";")
        if entry.strip().endswith(" installed")
    ]
    print(f"  installed: {packages or 'no nsight-compute-* package'}")
    DPKG_NCU = {}
    for package in packages:
        files = run(["dpkg", "-L", package]).stdout.splitlines()
        launchers = sorted(
            (
                f
                for f in files
                if f.endswith("/ncu") and os.path.isfile(f) and os.access(f, os.X_OK)
            ),
            key=len,
        )
        print(f"  | grep /ncu$  -> {launchers or 'no ncu in this package'}")
        if launchers:
            DPKG_NCU[package] = launchers[0]
    listed = {os.path.realpath(path) for path in DPKG_NCU.values()}
    s.result = where_ncu_came_from(
        DPKG_NCU, packages, [p for p, _ in find_ncus() if p not in listed]
    )

# %% [markdown]
# ## 6. `PATH`: put the new `ncu` first
#
# nsight-python runs whatever `shutil.which("ncu")` returns, so the new ncu's directory
# goes to the **front** of `PATH`. The old ncu is not removed, only shadowed (it stays
# useful for the command line, notebook 04). If there is no new-enough ncu, `PATH` stays
# as it is.

# %%
with nt.section("6. The new ncu first on PATH") as s:
    print(f'before: shutil.which("ncu") -> {shutil.which("ncu")}')
    candidates = find_ncus() + [(p, backend.ncu_version(p)) for p in DPKG_NCU.values()]
    good = sorted((v, p) for p, v in candidates if v and v >= MIN_NCU)
    NEW_NCU = good[-1][1] if good else None
    if NEW_NCU:
        ncu_dir = os.path.dirname(NEW_NCU)
        if os.environ["PATH"].split(os.pathsep)[0] != ncu_dir:
            os.environ["PATH"] = ncu_dir + os.pathsep + os.environ["PATH"]
        print(f'os.environ["PATH"] = {ncu_dir!r} + os.pathsep + os.environ["PATH"]')
        print(f'after:  shutil.which("ncu") -> {shutil.which("ncu")}')
        nt.claim(
            os.path.realpath(shutil.which("ncu")) == NEW_NCU,
            "the ncu nsight-python will run is the newest new-enough one",
            NEW_NCU,
        )
    else:
        print(f"no ncu >= {backend.version_text(MIN_NCU)}: PATH unchanged")
    which = shutil.which("ncu")
    s.result = f"ncu on PATH: {which or 'none'}" + (
        f" ({backend.version_text(backend.ncu_version(which))})" if which else ""
    )

# %% [markdown]
# ## 6b. Nsight Systems (`nsys`): the whole program's timeline
#
# Nsight Compute measures one kernel at a time. Nsight Systems (`nsys`) records the whole
# program's timeline -- every CUDA call on the CPU, every kernel on the GPU -- so you see where
# the GPU sits idle; notebook 07 draws one. The series does not need it: where `nsys` is
# missing, 07 draws the same timeline from `torch.profiler`. This cell looks for `nsys` on
# `PATH`, under `/opt/nvidia/nsight-systems/<version>/` and in CUDA's `bin`. On **Colab**, which
# has NVIDIA's apt repository but not the package, it runs `apt-get update`, then
# `apt-get install -y nsight-systems-2026.1.3` (a pinned version), non-interactive, with apt's
# lines as they come: apt says the download size before it downloads, and run again it finds
# the package installed. Anywhere else it prints how to install it.

# %%
from nspy_tutorial import bootstrap

with nt.section("6b. Nsight Systems: find nsys, or install it (Colab)") as s:
    NSYS = backend.find_nsys()
    if NSYS is None and ENV.on_colab:  # NVIDIA's apt repository is there, the package is not
        problem = bootstrap.install_nsys()
        NSYS = backend.find_nsys()
        nt.claim(NSYS is not None, "apt installed Nsight Systems", problem or "yet no nsys found")
    if NSYS is None:
        print(backend.nsys_missing(ENV.on_colab))
        s.result = "no nsys: notebook 07 draws its timeline with torch.profiler"
    else:
        s.result = (
            f"nsys {backend.nsys_version(NSYS)} at {NSYS}: notebook 07 draws its timeline with it"
        )

# %% [markdown]
# ## 7. Try each backend in a child process before committing to one
#
# Loading Nsight Compute into a process, or activating CUPTI in it, cannot be undone there,
# and either can fail on a given machine for reasons no version number predicts: an ncu
# that refuses the driver (`==ERROR== Cuda driver is not compatible with Nsight Compute`),
# performance counters reserved to administrators (`ERR_NVGPUCTRPERM`), a libcupti the
# driver is too old for, a hang. So each candidate first profiles one tiny kernel in a
# **fresh Python**, best first -- the Nsight Compute backend with the new ncu, then CUPTI --
# and only one whose child returned a real row is loaded here (sections 8 and 9).
# `probe.try_candidate` runs `python -m nspy_tutorial.probe <candidate>` (printed below)
# under a timeout and reads its one result line; the outcome is kept on disk per machine
# (`~/.cache/nspy-tutorial/probes.json`), so a second try of the same tool is read back,
# not run -- delete the file to try again. The failed candidates' first error lines are
# what the banner and the later notebooks' skipped sections will quote.

# %%
with nt.section("7. Try each backend in a child process") as s:
    ENV.require("gpu")
    machine = probe.machine_key(ENV.gpu_name, ENV.driver)
    library = backend.find_cupti_library()  # found, not loaded
    candidates = [("ncu", NEW_NCU)] if NEW_NCU and not FORCE_CUPTI else []
    if (
        library
        and (ENV.driver_cuda is None or ENV.driver_cuda >= CUDA13)
        and backend.cupti_python_available()
    ):
        candidates.append(("cupti", library.path))
    for candidate, tool in candidates:
        print(f"$ {shlex.join(probe.command(candidate, tool))}")
        TRIED.append(probe.try_candidate(candidate, tool, machine))
        print(f"  {candidate}: {TRIED[-1].line()}")
        if TRIED[-1].ok:
            CHOSEN = candidate
            break
    failed = "".join(f"; {o.candidate} failed: {o.detail}" for o in TRIED if not o.ok)
    s.result = (
        f"{CHOSEN or 'no backend'} works here{failed}" if candidates else "no candidate to try here"
    )

# %% [markdown]
# ## 8. The CUPTI route: load libcupti 13.4+ before torch does
#
# If CUPTI is the backend that worked, it needs `nsight-python[cupti]` (cupti-python), and
# cupti-python needs **libcupti 13.4 or newer**, which it asks for as `libcupti.so.13`.
# PyTorch brings its own libcupti, named after the CUDA major version torch was built for
# (`torch.version.cuda`):
#
# - a **CUDA 13** torch asks for `libcupti.so.13` too -- the same name, usually an older
#   library. The first one loaded into the process wins. So before anything imports torch,
#   load the new one *globally*: `ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)`; when torch
#   and cupti-python later ask for `libcupti.so.13`, the loader hands them the one already
#   there.
# - a **CUDA 12** torch asks for `libcupti.so.12`, another name: the load order no longer
#   decides anything, and once torch is imported the process holds two CUPTI libraries --
#   torch's own (for `torch.profiler`) and the new one, which the preload makes sure is the
#   one cupti-python gets. Notebook 09 shows what `torch.profiler` sees beside nsight's
#   CUPTI backend.
#
# The cell reads `torch.version.cuda` from torch's `version.py` -- without importing torch,
# which would load torch's libcupti -- and says which case this machine is. The check reads
# `/proc/self/maps`: which libcupti files this process has really mapped.


# %%
def mapped_libcupti() -> list[str]:
    with open("/proc/self/maps") as maps:
        return sorted({os.path.realpath(line.split()[-1]) for line in maps if "libcupti" in line})


def torch_cuda_version() -> str | None:
    """`torch.version.cuda` of the installed torch, read from torch/version.py without importing torch."""
    torch_spec = importlib.util.find_spec("torch")  # finds the package, imports nothing
    if torch_spec is None:
        return None
    version_spec = importlib.util.spec_from_file_location(
        "torch_version_only", os.path.join(os.path.dirname(torch_spec.origin), "version.py")
    )
    version = importlib.util.module_from_spec(version_spec)
    version_spec.loader.exec_module(version)
    return version.cuda


def torch_libcupti(cuda: str | None) -> str:
    """Which libcupti this torch loads, from its torch.version.cuda, and what that means for the preload."""
    major = cuda.split(".")[0] if cuda else None
    if major is None:
        return "this torch loads no libcupti (no CUDA build, or no torch)"
    if major == "13":
        return "torch asks for libcupti.so.13 too: the one loaded first serves both"
    return f"torch loads libcupti.so.{major}, another name: the preloaded libcupti.so.13 is cupti-python's alone"


with nt.section("8. Preload libcupti 13.4+ for the CUPTI backend") as s:
    ENV.require("gpu")
    torch_cuda = torch_cuda_version()
    print(f"torch.version.cuda -> {torch_cuda!r}: {torch_libcupti(torch_cuda)}")
    if CHOSEN != "cupti":
        s.result = f"not needed: the backend that worked is {CHOSEN or 'none'}"
    else:
        nt.claim(
            "torch" not in sys.modules,
            "torch is not imported yet, so it has not loaded its own libcupti",
        )
        print(f"ctypes.CDLL({library.path!r}, mode=ctypes.RTLD_GLOBAL)")
        ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL)
        loaded = mapped_libcupti()
        print(f"libcupti mapped into this process: {loaded}")
        nt.claim(
            os.path.realpath(library.path) in loaded, "the new libcupti is loaded, before torch"
        )
        s.result = f"preloaded libcupti {backend.version_text(library.version)} ({os.path.basename(library.path)}) before torch"

# %% [markdown]
# ## 9. `import nsight`, and the tool that worked
#
# `import nsight` tries to load Nsight Compute right away (it must attach before CUDA
# starts). If that fails the import still succeeds: nsight keeps the error in
# `nsight.collection.ncu.injection_load_error` and `nsight.get_active_tool()` stays `None`.
# `NSPY_NCU_INIT_AT_IMPORT=0` in the environment tells `import nsight` not to try at all:
# this cell sets it unless the Nsight Compute backend is the one that worked in section 7,
# then activates CUPTI with `nsight.activate(nsight.Tool.CUPTI)` if that is the one. Only
# one tool can be active per process.

# %%
with nt.section("9. import nsight and activate the backend that worked") as s:
    if CHOSEN != "ncu":
        os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"
        print(
            'os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"   # Nsight Compute did not work in the child'
        )
    import nsight
    from nsight.collection import ncu as nsight_ncu

    print(f"import nsight  (nsight-python {nsight.__version__})")
    nt.claim(
        tuple(nsight_ncu.MIN_NCU_VERSION) == MIN_NCU,
        f"nsight-python requires ncu {backend.version_text(MIN_NCU)}+",
    )
    if CHOSEN == "cupti":
        print("nsight.activate(nsight.Tool.CUPTI)")
        nsight.activate(nsight.Tool.CUPTI)
    active = nsight.get_active_tool()
    print(f"nsight.get_active_tool()                     -> {active}")
    print(f"nsight.collection.ncu.injection_load_error   -> {nsight_ncu.injection_load_error!r}")
    nt.claim(
        (active.name.lower() if active else None) == CHOSEN,
        "the tool active here is the one that worked in the child",
        f"{active} vs {CHOSEN}",
    )
    s.result = f"active tool: {active.name if active else 'none'}"

# %% [markdown]
# Everything the later notebooks' setup cell does in one call is now done by hand. The next
# cell makes that call, as every later notebook does. It finds what section 7 tried kept on
# disk (its banner line says "kept from an earlier probe"), so nothing is tried twice, and it
# activates the tool section 9 activated, which for the tool already active does nothing.
# What it adds is the ncu command line (the newest ncu that profiles a kernel in launch
# mode, tried the same way: a new try, with its seconds) and the GPU's own numbers -- the
# first time this notebook starts CUDA, after nsight -- then the environment banner every
# later notebook prints.

# %%
ENV = nt.setup("01_install_ncu")

# %% [markdown]
# ## 10. `NSPY_NCU_INIT_AT_IMPORT=0`, in fresh processes
#
# Sections 10 and 11 each start fresh Pythons, because what they show happens only once, at a
# process's start. The next cell writes their programs to one file with `%%writefile`:
# `import_nsight` imports nsight and prints which tool it loaded and the type of any load
# error; `cuda_first` starts CUDA, then imports nsight and profiles one kernel (section 11);
# `cuda_before_setup` starts CUDA and only then calls the tutorial's setup.
#
# Here two children run `import_nsight`, one after the other: one with the default, one with
# `NSPY_NCU_INIT_AT_IMPORT=0`. (They get this process's `PATH`, without the profiler
# variables nsight set here.) By default the import either loads Nsight Compute or keeps
# the error; with `=0` it must do neither -- and a child that crashed shows neither, so the
# check wants the child's own printed line.

# %% writefile import_order.py
"""Programs for a fresh process (notebook 01): what `import nsight` does at start-up (section 10),
and what happens when CUDA starts before nsight -- nsight's own outcome, and the tutorial's setup (11)."""
import os
import sys


def import_nsight() -> None:
    """Import nsight; print the tool it loaded and the type of the error it kept (None: none)."""
    import nsight
    from nsight.collection import ncu

    tool, error = nsight.get_active_tool(), ncu.injection_load_error
    print(tool.name if tool else None, type(error).__name__ if error else None)


def cuda_first() -> None:
    """Start CUDA, then import nsight and profile one kernel with the backend this machine uses."""
    import torch

    torch.cuda.init()  # CUDA starts first (and torch loads its own libcupti) ...
    import nsight  # ... then nsight: Nsight Compute, if allowed, tries to attach only now

    if os.environ.get("NSPY_NCU_INIT_AT_IMPORT") == "0":
        nsight.activate(nsight.Tool.CUPTI)

    @nsight.analyze.kernel(runs=1, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)
    def one(n: int) -> None:
        x = torch.ones(n, device="cuda")
        with nsight.annotate("x + 1"):
            _ = x + 1

    row = (
        one(1 << 16).to_dataframe().iloc[0]
    )  # an error here ends the child with nsight's own message
    print(f"a row: {row['Annotation']} {row['AvgValue'] / 1e3:.1f} us")


def cuda_before_setup() -> None:
    """Start CUDA first, then call the tutorial's setup -- which must refuse."""
    import torch

    torch.cuda.init()
    import nspy_tutorial as nt

    nt.setup("wrong_order")


PROGRAMS = {
    "import-nsight": import_nsight,
    "cuda-first": cuda_first,
    "cuda-before-setup": cuda_before_setup,
}

if __name__ == "__main__":  # python import_order.py import-nsight | cuda-first | cuda-before-setup
    PROGRAMS[sys.argv[1]]()

# %%
import import_order  # the file the cell above wrote; importing it runs no program


def tool_and_error(child: subprocess.CompletedProcess) -> str | None:
    """The child's last line, "<tool> <error type>"; None if it failed or printed something else."""
    words = (child.stdout.strip().splitlines() or [""])[-1].split()
    return " ".join(words) if child.returncode == 0 and len(words) == 2 else None


with nt.section("10. NSPY_NCU_INIT_AT_IMPORT=0 in a child process") as s:
    seen = {}
    for value in ("1", "0"):
        child_env = {**ncu_cli.child_environment(), "NSPY_NCU_INIT_AT_IMPORT": value}
        print(f"NSPY_NCU_INIT_AT_IMPORT={value} ", end="")
        child = run(
            [sys.executable, import_order.__file__, "import-nsight"], env=child_env, timeout=300
        )
        seen[value] = tool_and_error(child)
        print(
            f"  exit {child.returncode}; tool, load error -> {seen[value] or child.stdout.strip().splitlines()[-1:]}"
        )
    nt.claim(
        seen["0"] == "None None",
        "with NSPY_NCU_INIT_AT_IMPORT=0, import nsight loads no tool and tries nothing",
        str(seen["0"]),
    )
    kept_error = (
        seen["1"] is not None and seen["1"].startswith("None ") and seen["1"] != "None None"
    )
    nt.claim(
        seen["1"] == "NCU None" or kept_error,
        "by default, import nsight tries Nsight Compute: it loads it, or keeps the error",
        str(seen["1"]),
    )
    s.result = f"tool and load error: default {seen['1']}, with =0 {seen['0']}"

# %% [markdown]
# ## 11. When CUDA starts before nsight
#
# Nsight Compute profiles by injecting itself into the CUDA driver when CUDA starts in the
# process; `import nsight` prepares that. If torch has already started CUDA, it is too late
# (nsight's docs: profiling then fails, commonly with `NV_INJ_ERROR_NOT_INITIALIZED`), and the
# only remedy is a fresh process. For CUPTI the order matters another way: once torch is
# imported first, the process may already hold torch's own, older libcupti (section 8).
#
# The first child runs `cuda_first` with this machine's backend -- CUDA, then `import nsight`,
# then one profiled kernel -- and prints what nsight-python itself did: a row, or its error.
# Read it against the backend line of the banner above. The second runs `cuda_before_setup`:
# the tutorial's `nt.setup` refuses outright when CUDA is already initialised, with a message
# that says to restart; that is why every notebook's setup cell comes first.

# %%
with nt.section("11. When CUDA starts before nsight") as s:
    ENV.require("profiler")
    first_env = {
        **ncu_cli.child_environment(),
        "NSPY_NCU_INIT_AT_IMPORT": "1" if ENV.backend == "ncu" else "0",
    }
    child = run([sys.executable, import_order.__file__, "cuda-first"], env=first_env, timeout=300)
    outcome = (child.stdout.strip().splitlines() or ["no output"])[
        -1
    ]  # the row, or the error's last line
    unseen = (
        ""
        if ENV.backend == "ncu"
        else "\n  (the Nsight Compute failure the text describes needs that backend)"
    )
    print(
        f"  nsight-python, {ENV.backend} backend, CUDA started first: exit {child.returncode} -> {outcome}{unseen}"
    )
    child = run(
        [sys.executable, import_order.__file__, "cuda-before-setup"],
        env=ncu_cli.child_environment(),
        timeout=300,
    )
    last = (child.stdout.strip().splitlines() or [""])[-1]
    print(f"  tutorial's setup after CUDA: exit {child.returncode}; last line:\n  {last}")
    nt.claim(
        child.returncode != 0 and "CudaAlreadyInitialised" in last,
        "setup refuses to run after CUDA has been initialised",
    )
    s.result = f"CUDA first, {ENV.backend} backend: {outcome}; the tutorial's setup refuses (CudaAlreadyInitialised)"

# %% [markdown]
# ## 12. A smoke test of the chosen backend
#
# The setup call above started CUDA after nsight, so torch may now be used freely. One tiny
# kernel under `@nsight.analyze.kernel`: if this works, the later notebooks' sections that
# need a backend (`profiler`) will run; section 13 lists what else they need. `verbosity=SILENT` keeps nsight
# quiet here (notebook 02 shows what it prints by default); the line above the result
# says which rules the measurement followed.

# %%
with nt.section("12. Smoke test: profile one kernel") as s:
    ENV.require("profiler")
    import torch

    @nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)
    def smoke(n: int) -> None:
        x = torch.ones(n, device="cuda")
        with nsight.annotate("x + 1"):
            _ = x + 1

    r = smoke(1 << 20).to_dataframe().iloc[0]
    print(nt.rules(ENV.backend))
    nt.claim(
        r["AvgValue"] > 0 and r["NumRuns"] == 3,
        "the profile returned a positive mean over its 3 runs",
    )
    s.result = f"{ENV.backend} backend: x + 1 on 1M floats took {r['AvgValue'] / 1e3:.1f} us"

# %% [markdown]
# ## 13. What the later notebooks will run here
#
# Each later section states what it needs; here is what *this* machine provides, and for
# each need that is missing, exactly what those sections will say when they are skipped.

# %%
with nt.section("13. What the later notebooks will run here") as s:
    for need, met, why in ENV.plan():
        print(f"  {need:34s} {'yes' if met else 'no'}  {why}")
    s.result = f"backend {ENV.backend or 'none'}: {ENV.backend_reason}"

# %% [markdown]
# ## Takeaways
#
# - nsight-python 1.1's Nsight Compute backend needs ncu ≥ 2026.2.1, found on `PATH`, and
#   both backends are CUDA 13 tools: read the driver's CUDA version (NVML) first. Install
#   `nsight-compute-<version>` beside the old one, find it with `dpkg -L`, put its directory
#   first on `PATH`.
# - Try a backend in a child process before the notebook's own process commits to it: the
#   child's first error line is the truth a version check cannot give.
# - `import nsight` before anything touches CUDA -- in a notebook, before `import torch`.
#   It loads Nsight Compute or records why not (`injection_load_error`); read
#   `nsight.get_active_tool()` rather than assuming.
# - No working Nsight Compute backend? Load libcupti 13.4+ globally *before torch*, then
#   `nsight.activate(nsight.Tool.CUPTI)`: kernel durations, no counters. An older `ncu`
#   still profiles scripts from the command line (notebook 04).
#
# ## Try it
#
# - Where section 7 found the Nsight Compute backend working: restart the kernel and, before
#   section 9, run `os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"`. Section 9 then shows no
#   `injection_load_error` -- nsight did not even look for ncu -- and no tool at all, and its
#   check that the tool that worked is active fails. (Where CUPTI is the backend, section 9
#   sets this variable itself, so trying it changes nothing.)
# - Restart, run `import torch` right after the setup cell, then sections 8 and 9: section
#   8 refuses (torch came first), and on a machine whose torch ships an older libcupti,
#   activating CUPTI is where it would have broken.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [Tools: `activate`, `get_active_tool`, NCU vs CUPTI](https://docs.nvidia.com/nsight-python/tools.html) ·
# [Runtime requirements and import ordering](https://docs.nvidia.com/nsight-python/installation/runtime_requirements.html) ·
# [Installing from PyPI (the `cupti` extra)](https://docs.nvidia.com/nsight-python/installation/installation_from_pypi.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
