# %% [markdown]
# # 01 · Install Nsight Compute, import nsight first, pick a backend
#
# **What you will learn**
# - which GPU and which Nsight Compute (`ncu`) this machine has, and why nsight-python
#   1.1 needs **ncu 2026.2.1 or newer** for its Nsight Compute backend;
# - how to install a current Nsight Compute *next to* the preinstalled one with `apt-get`,
#   find it with `dpkg -L`, and put it first on `PATH`;
# - the other backend, CUPTI: why it needs a libcupti newer than PyTorch's, and how to
#   load that one first with `ctypes`;
# - what `import nsight` does, how to read which tool it loaded
#   (`nsight.get_active_tool()`, `injection_load_error`), how to switch to CUPTI
#   (`nsight.activate`), and what `NSPY_NCU_INIT_AT_IMPORT=0` changes;
# - why `import nsight` must come before anything starts CUDA -- demonstrated.
#
# Every later notebook's first cell does all of this in one call, `nt.setup(...)`. Here
# you do it by hand, one cell per step, in the order that matters: install → `PATH` →
# libcupti → `import nsight` → only then torch and CUDA. The setup cell below therefore
# only *looks* (GPU, ncu); it installs, loads and imports nothing.
#
# | backend | needs | gives |
# |---|---|---|
# | Nsight Compute (`nsight.Tool.NCU`) | ncu ≥ 2026.2.1 on `PATH`, loaded before CUDA | any metric, cache/clock control, replay |
# | CUPTI (`nsight.Tool.CUPTI`, experimental) | `nsight-python[cupti]`, libcupti ≥ 13.4 | kernel durations only |
#
# On Colab (you are root there) section 3 installs Nsight Compute for real; anywhere
# else it shows the plan and the command to run. Sections that cannot run here are
# SKIPPED with the reason and what to do.

# %%
{{SETUP_MANUAL}}

# %%
import ctypes
import glob
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

from nspy_tutorial import backend, ncu_cli

MIN_NCU = (2026, 2, 1, 0)  # what nsight-python 1.1 checks; section 7 reads it from nsight itself
FORCE_CUPTI = os.environ.get("NSPY_TUTORIAL_BACKEND", "").lower() == "cupti"  # skip Nsight Compute on purpose
DPKG_NCU: dict[str, str] = {}  # package -> ncu launcher, filled by section 4
NEED_CUPTI = PRELOADED = False  # set by section 6


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Print a command exactly as it runs, then run it."""
    print(f"$ {shlex.join(cmd)}")
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def find_ncus() -> list[tuple[str, tuple[int, ...] | None]]:
    """Every ncu launcher we can find -- the one on PATH, then /opt/nvidia/nsight-compute/*/ncu --
    with the version its `--version` reports."""
    found = []
    on_path = shutil.which("ncu")
    for path in ([on_path] if on_path else []) + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")):
        real = os.path.realpath(path)
        if real not in [p for p, _ in found]:
            out = subprocess.run([real, "--version"], capture_output=True, text=True, timeout=60).stdout
            found.append((real, backend.parse_ncu_version(out)))
    return found


def version_text(version) -> str:
    return ".".join(map(str, version)) if version else "unknown"

# %% [markdown]
# ## 1. The GPU
#
# `nvidia-smi` talks to the driver through NVML, like the setup cell did: it names the
# GPU without starting CUDA in this process.

# %%
with nt.section("1. The GPU") as s:
    ENV.require("gpu")
    smi = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv"])
    print(textwrap.indent(smi.stdout.strip(), "  "))
    s.result = f"{ENV.gpu_name}, driver {ENV.driver}"

# %% [markdown]
# ## 2. Which `ncu` is installed, and how new
#
# nsight-python finds `ncu` the way a shell does: `shutil.which("ncu")`, the first one
# on `PATH`. NVIDIA's packages also install versioned copies under
# `/opt/nvidia/nsight-compute/<version>/`, often not on `PATH`. We look in both places
# and ask each one `ncu --version`.

# %%
with nt.section("2. The ncu installs on this machine") as s:
    print(f'shutil.which("ncu") -> {shutil.which("ncu")}')
    INSTALLS = find_ncus()
    for path, version in INSTALLS:
        verdict = "new enough" if version and version >= MIN_NCU else "too old for nsight-python's Nsight Compute backend"
        print(f"$ {path} --version   -> {version_text(version)} ({verdict})")
    if not INSTALLS:
        print("no ncu on PATH or under /opt/nvidia/nsight-compute")
    newest = max((v for _, v in INSTALLS if v), default=None)
    ready = newest is not None and newest >= MIN_NCU
    s.result = ("no ncu found" if not INSTALLS else f"{len(INSTALLS)} ncu found, newest {version_text(newest)}: "
                + ("new enough for the Nsight Compute backend" if ready else f"none is {version_text(MIN_NCU)} or newer"))

# %% [markdown]
# ## 3. Installing a current Nsight Compute beside the old one
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
# On **Colab** (root, a GPU, no new-enough ncu) this cell runs exactly those commands and
# prints them. If apt cannot install either version, it runs `scripts/install_ncu.sh`,
# which downloads the `.deb` from NVIDIA's repository index and `dpkg -i`s it, and
# prints what it did. **Anywhere else** nothing is installed for you: the cell runs the
# script's `--dry-run` (it says what it would do and changes nothing) and prints the
# command to run yourself. The script's exit codes name each obstacle: not root (3), no
# apt/dpkg (4), no network (5), no new-enough package (6), unsupported architecture (7).

# %%
VERSIONS = ["2026.3.1", "2026.2.1"]  # nsight-compute-<version> packages to try, newest first
INSTALLER = backend.installer_path()  # scripts/install_ncu.sh in a checkout links to it

with nt.section("3. Install a current ncu (Colab) or show the plan") as s:
    have = [p for p, v in find_ncus() if v and v >= MIN_NCU]
    script_env = {**os.environ, "NCU_VERSIONS": " ".join(VERSIONS)}
    can_install = ENV.on_colab and ENV.has_gpu and os.geteuid() == 0 and shutil.which("apt-get")
    if have:
        s.result = f"nothing to install: {have[0]} is new enough"
    elif can_install:
        print(f"  exit {run(['apt-get', 'update', '-qq']).returncode}")
        installed = None
        for version in VERSIONS:
            done = run(["apt-get", "install", "-y", "-qq", f"nsight-compute-{version}"])
            print(f"  exit {done.returncode}")
            if done.returncode == 0:
                installed = f"nsight-compute-{version}"
                break
        if installed is None:  # apt could not: the script downloads NVIDIA's .deb and dpkg -i's it
            done = run(["bash", str(INSTALLER)], env=script_env)
            print(textwrap.indent(done.stderr.strip(), "  "))
            nt.claim(done.returncode == 0, "install_ncu.sh installed a new-enough ncu", f"exit {done.returncode}")
            installed = f"with install_ncu.sh into {done.stdout.strip().splitlines()[-1]}"
        s.result = f"installed {installed}"
    else:
        done = run(["bash", str(INSTALLER), "--dry-run"], env=script_env)
        print(textwrap.indent(done.stderr.strip(), "  "))
        nt.claim(done.returncode == 0, "the installer's dry run succeeds and changes nothing", f"exit {done.returncode}")
        print("\nTo install it yourself, as root (then restart the kernel and run this notebook again):")
        print(f"  sudo apt-get update && sudo apt-get install -y nsight-compute-{VERSIONS[0]}")
        print(f"  or, with the download fallback:  sudo bash {INSTALLER}")
        why = "not on Colab" if not ENV.on_colab else "no GPU" if not ENV.has_gpu else "not root or no apt-get"
        s.result = f"dry run only ({why}): run `sudo bash {INSTALLER}` to install nsight-compute-{VERSIONS[0]}"

# %% [markdown]
# ## 4. Where the package put `ncu`: `dpkg -L`
#
# Don't guess the install path: ask the package manager for the package's files and
# keep the launcher, `dpkg -L nsight-compute-<version> | grep /ncu$`. (The package also
# carries per-architecture copies deeper down; the launcher is the shortest path.)

# %%
def where_ncu_came_from(dpkg_ncu: dict[str, str], packages: list[str], others: list[str]) -> str:
    """Section 4's line: each package's ncu, then any ncu found that no package lists."""
    found = ([f"{p}: {path}" for p, path in dpkg_ncu.items()] or [f"{p}: no ncu in its files" for p in packages]
             or ["no nsight-compute-* package installed"])
    if others:
        found.append(f"{', '.join(others)} came another way (e.g. the CUDA toolkit)")
    elif not dpkg_ncu:
        found.append("no ncu on this machine")
    return "; ".join(found)


with nt.section("4. Find ncu with dpkg -L") as s:
    if shutil.which("dpkg-query") is None:
        raise nt.Skip("no dpkg here: this is not a Debian/Ubuntu system",
                      "look for ncu under /opt/nvidia/nsight-compute/<version>/ or in your package manager's file list")
    listed = run(["dpkg-query", "-W", "-f", "${Package} ${Status};", "nsight-compute-*"])  # which are installed
    packages = [entry.split()[0] for entry in listed.stdout.split(";") if entry.strip().endswith(" installed")]
    print(f"  installed: {packages or 'no nsight-compute-* package'}")
    DPKG_NCU = {}
    for package in packages:
        files = run(["dpkg", "-L", package]).stdout.splitlines()
        launchers = sorted((f for f in files if f.endswith("/ncu") and os.path.isfile(f) and os.access(f, os.X_OK)),
                           key=len)
        print(f"  | grep /ncu$  -> {launchers or 'no ncu in this package'}")
        if launchers:
            DPKG_NCU[package] = launchers[0]
    listed = {os.path.realpath(path) for path in DPKG_NCU.values()}
    s.result = where_ncu_came_from(DPKG_NCU, packages, [p for p, _ in find_ncus() if p not in listed])

# %% [markdown]
# ## 5. `PATH`: put the new `ncu` first
#
# nsight-python runs whatever `shutil.which("ncu")` returns, so the new ncu's directory
# goes to the **front** of `PATH`. The old ncu is not removed, only shadowed (it stays
# useful for the command line, notebook 04). If there is no new-enough ncu, `PATH` stays
# as it is, and `import nsight` (section 7) will report why Nsight Compute did not load.

# %%
with nt.section("5. The new ncu first on PATH") as s:
    print(f'before: shutil.which("ncu") -> {shutil.which("ncu")}')
    candidates = find_ncus() + [(p, backend.ncu_version(p)) for p in DPKG_NCU.values()]
    good = sorted((v, p) for p, v in candidates if v and v >= MIN_NCU)
    if good:
        ncu_dir = os.path.dirname(good[-1][1])
        if os.environ["PATH"].split(os.pathsep)[0] != ncu_dir:
            os.environ["PATH"] = ncu_dir + os.pathsep + os.environ["PATH"]
        print(f'os.environ["PATH"] = {ncu_dir!r} + os.pathsep + os.environ["PATH"]')
        print(f'after:  shutil.which("ncu") -> {shutil.which("ncu")}')
        nt.claim(os.path.realpath(shutil.which("ncu")) == good[-1][1],
                 "the ncu nsight-python will run is the newest new-enough one", good[-1][1])
    else:
        print(f"no ncu >= {version_text(MIN_NCU)}: PATH unchanged")
    which = shutil.which("ncu")
    s.result = f"ncu on PATH: {which or 'none'}" + (f" ({version_text(backend.ncu_version(which))})" if which else "")

# %% [markdown]
# ## 6. The CUPTI route: load libcupti 13.4+ before torch does
#
# Without a new-enough ncu, nsight-python's experimental **CUPTI backend** still measures
# kernel durations. It needs `pip install "nsight-python[cupti]"` (cupti-python), and
# cupti-python needs **libcupti 13.4 or newer**, which it asks for as `libcupti.so.13`.
# PyTorch brings its own libcupti, named after the CUDA major version torch was built for
# (`torch.version.cuda`):
#
# - a **CUDA 13** torch asks for `libcupti.so.13` too -- the same name, usually an older
#   library. The first one loaded into the process wins. So before anything imports torch,
#   load the new one *globally*: `ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)`; when torch
#   and cupti-python later ask for `libcupti.so.13`, the loader hands them the one already
#   there. (Without this, on the project's test machine, activating CUPTI failed with
#   `ERROR_INVALID_PARAMETER` from `subscribe_v2`.)
# - a **CUDA 12** torch asks for `libcupti.so.12`, another name: the load order no longer
#   decides anything, and once torch is imported the process holds two CUPTI libraries --
#   torch's own (for `torch.profiler`) and the new one, which the preload makes sure is the
#   one cupti-python gets. Notebook 09 shows what `torch.profiler` sees beside nsight's
#   CUPTI backend.
#
# The cell reads `torch.version.cuda` from torch's `version.py` -- without importing torch,
# which would load torch's libcupti -- and says which case this machine is. The step is
# needed only when Nsight Compute will not load (no ncu ≥ 2026.2.1 on `PATH`), or when you
# force CUPTI with `NSPY_TUTORIAL_BACKEND=cupti`. The check reads `/proc/self/maps`: which
# libcupti files this process has really mapped.

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
        "torch_version_only", os.path.join(os.path.dirname(torch_spec.origin), "version.py"))
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


with nt.section("6. Preload libcupti 13.4+ for the CUPTI backend") as s:
    ENV.require("gpu")
    torch_cuda = torch_cuda_version()
    print(f"torch.version.cuda -> {torch_cuda!r}: {torch_libcupti(torch_cuda)}")
    which = shutil.which("ncu")
    ncu_ready = which is not None and (backend.ncu_version(which) or ()) >= MIN_NCU
    NEED_CUPTI = FORCE_CUPTI or not ncu_ready
    if not NEED_CUPTI:
        s.result = f"not needed: {which} is new enough, so `import nsight` will load Nsight Compute"
    else:
        nt.claim("torch" not in sys.modules, "torch is not imported yet, so it has not loaded its own libcupti")
        lib = backend.find_cupti_library()  # the newest libcupti among the installed nvidia-cuda-cupti wheels
        problem = backend.cupti_problem(lib, importlib.util.find_spec("cupti") is not None)
        if problem:
            raise nt.Skip(f"the CUPTI backend cannot run: {problem}",
                          "pip install 'nsight-python[cupti]' (the README shows how to install it beside torch), "
                          "then restart the kernel", needs="profiler")
        print(f"newest libcupti in a wheel: {lib.path} ({version_text(lib.version)})")
        print(f"ctypes.CDLL({lib.path!r}, mode=ctypes.RTLD_GLOBAL)")
        ctypes.CDLL(lib.path, mode=ctypes.RTLD_GLOBAL)
        PRELOADED = True
        loaded = mapped_libcupti()
        print(f"libcupti mapped into this process: {loaded}")
        nt.claim(os.path.realpath(lib.path) in loaded, "the new libcupti is loaded, before torch")
        s.result = f"preloaded libcupti {version_text(lib.version)} ({os.path.basename(lib.path)}) before torch"

# %% [markdown]
# ## 7. `import nsight`, and which tool it loaded
#
# `import nsight` tries to load Nsight Compute right away (it must attach before CUDA
# starts). If that fails -- no ncu on `PATH`, or one older than 2026.2.1 -- the import
# still succeeds: nsight keeps the error in `nsight.collection.ncu.injection_load_error`
# and `nsight.get_active_tool()` stays `None`. Then you pick the CUPTI backend yourself
# with `nsight.activate(nsight.Tool.CUPTI)`. Only one tool can be active per process.
#
# `NSPY_NCU_INIT_AT_IMPORT=0` in the environment tells `import nsight` not to try Nsight
# Compute at all; this cell sets it only when you asked for CUPTI with
# `NSPY_TUTORIAL_BACKEND=cupti`. Section 8 shows the difference in fresh processes.

# %%
with nt.section("7. import nsight and choose the backend") as s:
    if FORCE_CUPTI:
        os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"
        print('NSPY_TUTORIAL_BACKEND=cupti: os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"')
    import nsight
    from nsight.collection import ncu as nsight_ncu

    print(f"import nsight  (nsight-python {nsight.__version__})")
    print(f"nsight.get_active_tool()                     -> {nsight.get_active_tool()}")
    print(f"nsight.collection.ncu.injection_load_error   -> {nsight_ncu.injection_load_error!r}")
    nt.claim(tuple(nsight_ncu.MIN_NCU_VERSION) == MIN_NCU, "nsight-python itself requires ncu 2026.2.1 or newer",
             f"nsight_ncu.MIN_NCU_VERSION = {nsight_ncu.MIN_NCU_VERSION}")
    if nsight.get_active_tool() is None and NEED_CUPTI and PRELOADED:
        print("nsight.activate(nsight.Tool.CUPTI)")
        nsight.activate(nsight.Tool.CUPTI)
        print(f"nsight.get_active_tool()                     -> {nsight.get_active_tool()}")
        nt.claim(nsight.get_active_tool() == nsight.Tool.CUPTI, "the CUPTI backend is active")
    active, error = nsight.get_active_tool(), nsight_ncu.injection_load_error
    s.result = f"active tool: {active.name if active else 'none'}" + (
        f"; Nsight Compute did not load: {str(error).splitlines()[0]}" if error else "")

# %% [markdown]
# Everything the later notebooks' setup cell does in one call is now done. The next cell
# records the result -- which ncu, which tool nsight activated and why the other one did
# not -- then reads the GPU's own numbers (the first time this notebook starts CUDA,
# after nsight) and prints the environment banner every later notebook prints.

# %%
ENV = nt.setup.finish()

# %% [markdown]
# ## 8. `NSPY_NCU_INIT_AT_IMPORT=0`, in fresh processes
#
# Sections 8 and 9 each start a fresh Python, because what they show happens only once, at
# a process's start. The next cell writes both programs to one file with `%%writefile`:
# `import_nsight` imports nsight and prints which tool it loaded and the type of any load
# error; `cuda_before_setup` (section 9) starts CUDA and only then calls the tutorial's setup.
#
# Here two children run `import_nsight`: one with the default, one with
# `NSPY_NCU_INIT_AT_IMPORT=0`. (They get this process's `PATH`, without the profiler
# variables nsight set here.) By default the import either loads Nsight Compute or keeps
# the error; with `=0` it must do neither -- and a child that crashed shows neither, so the
# check wants the child's own printed line.

# %% writefile import_order.py
"""Two programs for a fresh process (notebook 01): what `import nsight` does at start-up
(section 8), and the tutorial's setup called after CUDA has started (section 9)."""
import sys


def import_nsight() -> None:
    """Import nsight; print the tool it loaded and the type of the error it kept (None: none)."""
    import nsight
    from nsight.collection import ncu

    tool, error = nsight.get_active_tool(), ncu.injection_load_error
    print(tool.name if tool else None, type(error).__name__ if error else None)


def cuda_before_setup() -> None:
    """Start CUDA first, then call the setup -- which must refuse."""
    import torch

    torch.cuda.init()  # CUDA starts first ...
    import nspy_tutorial as nt

    nt.setup("wrong_order")  # ... so this must refuse


PROGRAMS = {"import-nsight": import_nsight, "cuda-before-setup": cuda_before_setup}

if __name__ == "__main__":  # python import_order.py import-nsight | cuda-before-setup
    PROGRAMS[sys.argv[1]]()

# %%
import import_order  # the file the cell above wrote; importing it runs neither program


def tool_and_error(child: subprocess.CompletedProcess) -> str | None:
    """The child's last line, "<tool> <error type>"; None if it failed or printed something else."""
    words = (child.stdout.strip().splitlines() or [""])[-1].split()
    return " ".join(words) if child.returncode == 0 and len(words) == 2 else None


with nt.section("8. NSPY_NCU_INIT_AT_IMPORT=0 in a child process") as s:
    seen, started = {}, {}
    for value in ("1", "0"):  # both children at once: each spends seconds importing torch and nsight
        child_env = {**ncu_cli.child_environment(), "NSPY_NCU_INIT_AT_IMPORT": value}
        cmd = [sys.executable, import_order.__file__, "import-nsight"]
        print(f"$ NSPY_NCU_INIT_AT_IMPORT={value} {shlex.join(cmd)}")
        started[value] = subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for value, process in started.items():
        out, err = process.communicate(timeout=300)
        child = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        seen[value] = tool_and_error(child)
        print(f"  NSPY_NCU_INIT_AT_IMPORT={value}: exit {child.returncode}; tool, load error -> "
              f"{seen[value] or child.stderr.strip().splitlines()[-1:]}")
    nt.claim(seen["0"] == "None None", "with NSPY_NCU_INIT_AT_IMPORT=0, import nsight loads no tool and tries nothing",
             str(seen["0"]))
    kept_error = seen["1"] is not None and seen["1"].startswith("None ") and seen["1"] != "None None"
    nt.claim(seen["1"] == "NCU None" or kept_error,
             "by default, import nsight tries Nsight Compute: it loads it, or keeps the error", str(seen["1"]))
    s.result = f"tool and load error: default {seen['1']}, with =0 {seen['0']}"

# %% [markdown]
# ## 9. Why `import nsight` must come first
#
# Nsight Compute profiles by injecting itself into the CUDA driver when CUDA starts in
# the process; `import nsight` prepares that. If torch has already initialised CUDA, it
# is too late (nsight's docs: profiling then fails, commonly with
# `NV_INJ_ERROR_NOT_INITIALIZED`), and the only remedy is a fresh process. The
# tutorial's `nt.setup` therefore refuses outright when CUDA is already initialised. A
# child process running `cuda_before_setup` from the file above -- CUDA first, `setup`
# second -- shows it.

# %%
with nt.section("9. The import order, demonstrated") as s:
    ENV.require("gpu")
    child = run([sys.executable, import_order.__file__, "cuda-before-setup"], env=ncu_cli.child_environment(),
                timeout=300)
    last = (child.stderr.strip().splitlines() or [""])[-1]
    print(f"  exit code {child.returncode}; last line:\n  {last}")
    nt.claim(child.returncode != 0 and "CudaAlreadyInitialised" in last,
             "setup refuses to run after CUDA has been initialised")
    s.result = "setup after torch.cuda.init() is refused with CudaAlreadyInitialised"

# %% [markdown]
# ## 10. A smoke test of the chosen backend
#
# Now torch may come in. One tiny kernel under `@nsight.analyze.kernel`: if this works,
# the later notebooks' profiling sections will run. `verbosity=SILENT` keeps nsight
# quiet here (notebook 02 shows what it prints by default); the line above the result
# says which rules the measurement followed.

# %%
with nt.section("10. Smoke test: profile one kernel") as s:
    ENV.require("profiler")
    import torch

    @nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)
    def smoke(n: int) -> None:
        x = torch.ones(n, device="cuda")
        with nsight.annotate("x + 1"):
            _ = x + 1

    r = smoke(1 << 20).to_dataframe().iloc[0]
    print(nt.rules(ENV.backend))
    nt.claim(r["AvgValue"] > 0 and r["NumRuns"] == 3, "the profile returned three positive durations")
    s.result = f"{ENV.backend} backend: x + 1 on 1M floats took {r['AvgValue'] / 1e3:.1f} us"

# %% [markdown]
# ## 11. What the later notebooks will run here
#
# Each later section states what it needs; here is what *this* machine provides.

# %%
with nt.section("11. What the later notebooks will run here") as s:
    need = {"gpu": ENV.has_gpu, "profiler (any backend)": ENV.backend is not None,
            "ncu (Nsight Compute backend)": ENV.backend == "ncu", "ncu-cli (any ncu, on a script)": ENV.ncu_path is not None}
    for k, v in need.items():
        print(f"  {k:32s} {'yes' if v else 'no -> those sections will be SKIPPED'}")
    s.result = f"backend {ENV.backend or 'none'}: {ENV.backend_reason}"

# %% [markdown]
# ## Takeaways
#
# - nsight-python 1.1's Nsight Compute backend needs ncu ≥ 2026.2.1, found on `PATH`.
#   Install `nsight-compute-<version>` beside the old one, find it with `dpkg -L`, put its
#   directory first on `PATH`.
# - `import nsight` before anything touches CUDA -- in a notebook, before `import torch`.
#   It loads Nsight Compute or records why not (`injection_load_error`); read
#   `nsight.get_active_tool()` rather than assuming.
# - No new ncu? Load libcupti 13.4+ globally *before torch*, then
#   `nsight.activate(nsight.Tool.CUPTI)`: kernel durations, no counters. The old `ncu`
#   still profiles scripts from the command line (notebook 04).
#
# ## Try it
#
# - Restart the kernel and, before section 7, run
#   `os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"`: section 7 then shows no tool and no
#   `injection_load_error` -- nsight did not even look for ncu -- and the banner says so.
# - Restart, run `import torch` right after the setup cell, then sections 6 and 7: section
#   6 refuses (torch came first), and on a machine whose torch ships an older libcupti,
#   activating CUPTI is where it would have broken.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [Tools: `activate`, `get_active_tool`, NCU vs CUPTI](https://docs.nvidia.com/nsight-python/tools.html) ·
# [Runtime requirements and import ordering](https://docs.nvidia.com/nsight-python/installation/runtime_requirements.html) ·
# [Installing from PyPI (the `cupti` extra)](https://docs.nvidia.com/nsight-python/installation/installation_from_pypi.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary();
