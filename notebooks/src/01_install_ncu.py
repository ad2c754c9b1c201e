# %% [markdown]
# # 01 · Get going: the GPU, nsight-python, Nsight Compute, and a backend that works
#
# **What you will learn**
# - which GPU and driver this machine has, and why the driver's CUDA version comes first;
# - how to install nsight-python at the version this series was recorded with, and a current
#   Nsight Compute (`ncu`) *next to* the preinstalled one;
# - why to **try each profiler backend in a child process before committing to one**: loading
#   one cannot be undone in a process, and each can fail for reasons no version number
#   predicts;
# - what `import nsight` does, which backend needs it *before* CUDA starts and why, and how to
#   switch to the CUPTI backend;
# - what the later notebooks will run on this machine.
#
# nsight-python has two backends:
#
# | backend | needs | gives |
# |---|---|---|
# | Nsight Compute (`nsight.Tool.NCU`) | ncu ≥ 2026.2.1 on `PATH`, loaded before CUDA, a driver it accepts | any metric, cache/clock control, replay |
# | CUPTI (`nsight.Tool.CUPTI`, experimental) | `nsight-python[cupti]`, libcupti ≥ 13.4, a driver for CUDA 13 (R580+) | kernel durations only |
#
# Every later notebook's first cell does all of this in one call, `nt.setup(...)`. Here you
# take the steps by hand, in the order that matters: install → `PATH` → try each backend in a
# child → libcupti → `import nsight` → only then torch and CUDA. The setup cell below therefore
# only *looks* (GPU, driver, ncu) and installs, tries, loads and imports no profiling tool (on
# Colab it pip-installs this tutorial's package). On Colab each notebook runs in a fresh
# runtime: the later notebooks' setup cells install what they need themselves.

# %%
{{SETUP_MANUAL}}

# %%
import ctypes
import glob
import importlib.metadata
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

from nspy_tutorial import backend, lifetime, probe

MIN_NCU = (2026, 2, 1, 0)  # what nsight-python 1.1 checks; section 8 reads it from nsight itself
CUDA13 = (13, 0)  # CUDA 13 tools (CUPTI 13.4, Nsight Compute 2026.x) need a driver for CUDA 13
FORCE_CUPTI = os.environ.get("NSPY_TUTORIAL_BACKEND", "").lower() == "cupti"  # skip Nsight Compute
PINS = backend.pins()  # pyproject.toml's exact versions: what this series was recorded with
NEW_NCU = None  # the newest ncu >= MIN_NCU (section 5)
CHOSEN = None  # the backend a child showed working: "ncu" or "cupti" (section 6)


def run(cmd: list[str], echo: bool = False, env=None) -> subprocess.CompletedProcess:
    """Print a command and run it in the foreground (``echo``: its lines as they come); its process
    tree ends with the cell."""
    print(f"$ {shlex.join(cmd)}")
    code, output = lifetime.run(cmd, env or dict(os.environ), 1200, echo=echo)
    return subprocess.CompletedProcess(cmd, code, output, "")


def find_ncus() -> list[tuple[str, tuple[int, ...] | None]]:
    """Every ncu on PATH or under /opt/nvidia/nsight-compute/<version>/ (where NVIDIA's package
    puts it), with the version it reports."""
    found = []
    on_path = [shutil.which("ncu")] if shutil.which("ncu") else []
    for path in on_path + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")):
        real = os.path.realpath(path)
        if real not in [p for p, _ in found]:
            out = subprocess.run([real, "--version"], capture_output=True, text=True, timeout=60)
            found.append((real, backend.parse_ncu_version(out.stdout)))
    return found


# %% [markdown]
# ## 1. The GPU and its driver
#
# `nvidia-smi` talks to the driver through NVML, like the setup cell did: it names the GPU
# without starting CUDA in this process. NVML also says which CUDA version the **driver**
# supports -- not the toolkit's, not torch's. Both of nsight-python's backends, at the versions
# it needs, are CUDA 13 tools, and CUDA 13 tools need a driver for CUDA 13: the R580 branch or
# newer. A driver cannot be changed from inside a notebook (on Colab, not at all), so this is
# the first fact to know.

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
        + ("enough" if enough else "too old")
        + " for CUDA 13 tools (CUPTI 13.4, Nsight Compute 2026.x)"
    )
    s.result = f"{ENV.gpu_name}, driver {ENV.driver} (CUDA {cuda})"

# %% [markdown]
# ## 2. nsight-python, at the version the series was recorded with
#
# `pip install nsight-python` gives the newest release; this series pins the exact versions its
# recorded runs used (`pyproject.toml`), because a release can change behaviour the notebooks
# rely on (1.1.1, for one, raises where 1.1.0 returned an empty table). The **`[cupti]` extra**
# adds cupti-python, which needs libcupti 13.4 (the `nvidia-cuda-cupti` wheel) -- newer than the
# one a CUDA 12 PyTorch ships. On Colab it goes into a folder of its own (`pip install --no-deps
# --target`), so Colab's own CUDA 12 packages stay as they are; the setup cell does that when
# CUPTI is needed. On Colab this cell runs the pinned install; elsewhere it prints it.

# %%
with nt.section("2. nsight-python, pinned") as s:
    pin = PINS.get("nsight-python")
    cmd = [sys.executable, "-m", "pip", "install", "-q", f"nsight-python=={pin}"]
    if ENV.on_colab:
        nt.claim(run(cmd, echo=True).returncode == 0, f"pip installed nsight-python=={pin}")
    else:
        print(f"to install what the series was recorded with:\n  {shlex.join(cmd)}")
    print(f"the CUPTI extra, beside the rest:\n  {shlex.join(backend.cupti_install_command())}")
    have = importlib.metadata.version("nsight-python")
    s.result = f"nsight-python {have}" + (
        "" if have == pin else f" (recorded with {pin}; 1.1.x is tolerated)"
    )

# %% [markdown]
# ## 3. Which `ncu` is installed, and how new
#
# nsight-python finds `ncu` the way a shell does: `shutil.which("ncu")`, the first one on
# `PATH`. NVIDIA's packages also install versioned copies under
# `/opt/nvidia/nsight-compute/<version>/`, often not on `PATH`. We look in both places and ask
# each one `ncu --version`.

# %%
with nt.section("3. The ncu installs on this machine") as s:
    print(f'shutil.which("ncu") -> {shutil.which("ncu")}')
    INSTALLS = find_ncus()
    for path, version in INSTALLS:
        fits = (
            "new enough"
            if version and version >= MIN_NCU
            else "too old for the Nsight Compute backend"
        )
        print(f"$ {path} --version   -> {backend.version_text(version)} ({fits})")
    newest = max((v for _, v in INSTALLS if v), default=None)
    s.result = (
        f"{len(INSTALLS)} ncu found, newest {backend.version_text(newest)}"
        + (
            ""
            if newest and newest >= MIN_NCU
            else f": none is {backend.version_text(MIN_NCU)} or newer"
        )
        if INSTALLS
        else "no ncu on PATH or under /opt/nvidia/nsight-compute"
    )

# %% [markdown]
# ## 4. Installing a current Nsight Compute beside the old one
#
# Nsight Compute ships as the Debian package `nsight-compute-<version>` in NVIDIA's CUDA apt
# repository (Colab's image has that repository configured). It installs under
# `/opt/nvidia/nsight-compute/<version>/` -- where section 3 looks -- and leaves the old ncu
# alone:
#
# ```
# apt-get update
# apt-get install -y nsight-compute-2026.3.1     # or 2026.2.1: newest first
# ```
#
# It is a download of a few hundred megabytes: apt's first lines say how much before it starts.
# On **Colab** (root, a GPU whose driver supports CUDA 13) this cell runs exactly those
# commands, and if apt cannot, `scripts/install_ncu.sh`, which fetches the `.deb` from NVIDIA's
# repository index and installs it with apt. **Elsewhere, with a GPU**, nothing is installed for
# you: the cell runs the script's `--dry-run` and prints the command to run as root. Where an
# install could not help -- no GPU to profile, or a driver too old for CUDA 13 -- the cell says
# that instead, and what would.


# %%
def install_step(have, has_gpu: bool, driver_ok: bool, on_colab: bool, can_install: bool):
    """What section 4 does on this machine: ("install", "") on Colab as root, ("plan", what to run)
    where you could install it yourself, ("none", why) where there is nothing to install or it would
    not help."""
    if have:
        return "none", f"nothing to install: {have} is new enough"
    if not has_gpu:
        return (
            "none",
            "nothing installed: no GPU here to profile; in Colab with a T4 runtime this cell installs it",
        )
    if not driver_ok:
        fix = (
            "a Colab runtime cannot change it"
            if on_colab
            else "update it to R580+, then restart the kernel"
        )
        return (
            "none",
            f"nothing installed: Nsight Compute 2026.2.1+ needs a driver for CUDA 13; {fix}",
        )
    if on_colab and can_install:
        return "install", ""
    return (
        "plan",
        f"nothing installed here; as root: sudo bash {INSTALLER}, then restart the kernel",
    )


VERSIONS = ["2026.3.1", "2026.2.1"]  # nsight-compute-<version> packages to try, newest first
INSTALLER = backend.installer_path()  # scripts/install_ncu.sh in a checkout links to it
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=120"]  # waits for a held dpkg lock

with nt.section("4. Install a current ncu (Colab) or show the plan") as s:
    have = [p for p, v in find_ncus() if v and v >= MIN_NCU]
    script_env = {
        **os.environ,
        "NCU_VERSIONS": " ".join(VERSIONS),
        "DEBIAN_FRONTEND": "noninteractive",
    }
    driver_ok = ENV.driver_cuda is None or ENV.driver_cuda >= CUDA13
    root_apt = os.geteuid() == 0 and shutil.which("apt-get") is not None
    step, why = install_step(
        have[0] if have else None, ENV.has_gpu, driver_ok, ENV.on_colab, root_apt
    )
    installed = None
    if step == "install":
        run([*APT, "update", "-q"], echo=True, env=script_env)
        for version in VERSIONS:
            done = run(
                [*APT, "install", "-y", "-q", f"nsight-compute-{version}"],
                echo=True,
                env=script_env,
            )
            if done.returncode == 0:
                installed = f"nsight-compute-{version}"
                break
        if installed is None:  # apt could not: the script downloads NVIDIA's .deb and installs it
            done = run(["bash", str(INSTALLER)], echo=True, env=script_env)
            nt.claim(
                done.returncode == 0,
                "install_ncu.sh installed a new-enough ncu",
                f"exit {done.returncode}",
            )
            installed = (
                f"nsight-compute with install_ncu.sh into {done.stdout.strip().splitlines()[-1]}"
            )
        why = f"installed {installed}"
    elif step == "plan":
        done = run(["bash", str(INSTALLER), "--dry-run"], echo=True, env=script_env)
        nt.claim(
            done.returncode == 0,
            "the installer's dry run succeeds and changes nothing",
            f"exit {done.returncode}",
        )
    print(textwrap.fill(why, 116, initial_indent="  ", subsequent_indent="    "))
    s.result = why

# %% [markdown]
# ## 5. `PATH`: put the new `ncu` first
#
# nsight-python runs whatever `shutil.which("ncu")` returns, so the new ncu's directory goes to
# the **front** of `PATH`. The old ncu is not removed, only shadowed (it stays useful for the
# command line, notebook 04). If there is no new-enough ncu, `PATH` stays as it is.

# %%
with nt.section("5. The new ncu first on PATH") as s:
    print(f'before: shutil.which("ncu") -> {shutil.which("ncu")}')
    good = sorted((v, p) for p, v in find_ncus() if v and v >= MIN_NCU)
    NEW_NCU = good[-1][1] if good else None
    if NEW_NCU:
        folder = os.path.dirname(NEW_NCU)
        if os.environ["PATH"].split(os.pathsep)[0] != folder:
            os.environ["PATH"] = folder + os.pathsep + os.environ["PATH"]
        print(f'os.environ["PATH"] = {folder!r} + os.pathsep + os.environ["PATH"]')
        print(f'after:  shutil.which("ncu") -> {shutil.which("ncu")}')
        nt.claim(
            os.path.realpath(shutil.which("ncu")) == NEW_NCU,
            "nsight-python will run the newest ncu",
            NEW_NCU,
        )
    else:
        print(f"no ncu >= {backend.version_text(MIN_NCU)}: PATH unchanged")
    which = shutil.which("ncu")
    s.result = (
        f"ncu on PATH: {which} ({backend.version_text(backend.ncu_version(which))})"
        if which
        else "no ncu"
    )

# %% [markdown]
# ## 5b. Nsight Systems (`nsys`): the whole program's timeline
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

with nt.section("5b. Nsight Systems: find nsys, or install it (Colab)") as s:
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
# ## 6. Try each backend in a child process before committing to one
#
# Loading Nsight Compute into a process, or activating CUPTI in it, cannot be undone there, and
# either can fail on a given machine for reasons no version number predicts: an ncu that
# refuses the driver (`==ERROR== Cuda driver is not compatible with Nsight Compute`),
# performance counters reserved to administrators (`ERR_NVGPUCTRPERM`), a libcupti the driver
# is too old for, a hang. So each candidate first profiles one tiny kernel in a **fresh
# Python**, best first -- the Nsight Compute backend with the new ncu, then CUPTI -- and only
# one whose child returned a real row is loaded here (sections 7 and 8). `probe.try_candidate`
# runs the command printed below under a timeout and reads its one result line; the outcome is
# kept per machine (`~/.cache/nspy-tutorial/probes.json`), so a second try of the same tool is
# read back, not run -- delete the file to try again.

# %%
with nt.section("6. Try each backend in a child process") as s:
    ENV.require("gpu")
    machine = probe.machine_key(ENV.gpu_name, ENV.driver)
    library = backend.find_cupti_library()  # found, not loaded
    candidates = [("ncu", NEW_NCU)] if NEW_NCU and not FORCE_CUPTI else []
    if library and (ENV.driver_cuda or CUDA13) >= CUDA13 and backend.cupti_python_available():
        candidates.append(("cupti", library.path))
    tried = []
    for candidate, tool in candidates:
        print(f"$ {shlex.join(probe.command(candidate, tool))}")
        tried.append(probe.try_candidate(candidate, tool, machine))
        print(f"  {candidate}: {tried[-1].line()}")
        if tried[-1].ok:
            CHOSEN = candidate
            break
    failed = "".join(f"; {o.candidate} failed: {o.detail}" for o in tried if not o.ok)
    s.result = (
        f"{CHOSEN or 'no backend'} works here{failed}" if candidates else "no candidate to try here"
    )

# %% [markdown]
# ## 7. The CUPTI route: load libcupti 13.4+ before torch does
#
# If CUPTI is the backend that worked, it needs cupti-python, and cupti-python needs **libcupti
# 13.4 or newer**, which it asks for as `libcupti.so.13`. PyTorch brings its own libcupti: a
# CUDA 13 torch asks for `libcupti.so.13` too -- the same name, usually an older library -- and
# the first one loaded into a process wins. So before anything imports torch, load the new one
# *globally*: `ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)`; when torch and cupti-python later ask
# for `libcupti.so.13`, the loader hands them the one already there. (A CUDA 12 torch loads
# `libcupti.so.12`, another name: there the preload only makes sure cupti-python gets the new
# one.) The check reads `/proc/self/maps`: which libcupti files this process has really mapped.


# %%
def mapped_libcupti() -> list[str]:
    with open("/proc/self/maps") as maps:
        return sorted({os.path.realpath(line.split()[-1]) for line in maps if "libcupti" in line})


with nt.section("7. Preload libcupti 13.4+ for the CUPTI backend") as s:
    ENV.require("gpu")
    if CHOSEN != "cupti":
        s.result = f"not needed: the backend that worked is {CHOSEN or 'none'}"
    else:
        nt.claim(
            "torch" not in sys.modules,
            "torch is not imported yet, so it has not loaded its libcupti",
        )
        print(f"ctypes.CDLL({library.path!r}, mode=ctypes.RTLD_GLOBAL)")
        ctypes.CDLL(library.path, mode=ctypes.RTLD_GLOBAL)
        print(f"libcupti mapped into this process: {mapped_libcupti()}")
        nt.claim(
            os.path.realpath(library.path) in mapped_libcupti(),
            "the new libcupti is loaded, before torch",
        )
        s.result = f"preloaded libcupti {backend.version_text(library.version)} before torch"

# %% [markdown]
# ## 8. `import nsight`, and the backend that worked
#
# **Which backend needs `import nsight` before CUDA, and why.** The *Nsight Compute* backend
# attaches at `import nsight`: the import loads Nsight Compute's injection library into this
# process, and that library hooks into the CUDA driver when CUDA starts. If torch has already
# started CUDA, it is too late (nsight's docs: profiling then fails, commonly with
# `NV_INJ_ERROR_NOT_INITIALIZED`), and only a fresh process helps. The *CUPTI* backend
# subscribes to CUDA's callbacks when you call `nsight.activate(nsight.Tool.CUPTI)`, and works
# after CUDA has started; what it needs first is the right libcupti (section 7). Setup cannot
# know which backend will work before it has tried them, so every notebook's setup cell comes
# before anything that touches the GPU, and it refuses to run after CUDA has started
# (`CudaAlreadyInitialised`): the Nsight Compute backend's rule, kept for both so one setup cell
# fits every machine.
#
# If the Nsight Compute library fails to load, the import still succeeds: nsight keeps the error
# in `nsight.collection.ncu.injection_load_error` and `nsight.get_active_tool()` stays `None`.
# `NSPY_NCU_INIT_AT_IMPORT=0` tells `import nsight` not to try at all: this cell sets it unless
# the Nsight Compute backend is the one that worked in section 6, then activates CUPTI if that
# is the one. Only one tool can be active in a process.

# %%
with nt.section("8. import nsight and activate the backend that worked") as s:
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
        f"nsight-python needs ncu {backend.version_text(MIN_NCU)}+",
    )
    if CHOSEN == "cupti":
        print("nsight.activate(nsight.Tool.CUPTI)")
        nsight.activate(nsight.Tool.CUPTI)
    active = nsight.get_active_tool()
    error = nsight_ncu.injection_load_error
    if error is not None:
        loaded = f"failed to load: {type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
    else:
        loaded = "loaded" if CHOSEN == "ncu" else "not tried (NSPY_NCU_INIT_AT_IMPORT=0)"
    print(f"nsight.get_active_tool() -> {active}")
    print(
        textwrap.fill(
            f"Nsight Compute (injection_load_error): {loaded}", 116, subsequent_indent="  "
        )
    )
    nt.claim(
        (active.name.lower() if active else None) == CHOSEN,
        "the tool active here is the one that worked in the child",
        f"{active} vs {CHOSEN}",
    )
    s.result = f"active tool: {active.name if active else 'none'}; Nsight Compute {loaded}"

# %% [markdown]
# Everything the later notebooks' setup cell does in one call is now done by hand. The next cell
# makes that call, as every later notebook does. It finds section 6's tries kept on disk (its
# banner says "kept from an earlier probe"), and activating the tool already active does
# nothing. What it adds: the ncu command line (the newest ncu that profiles a kernel in launch
# mode, tried the same way), the SM clock watched for a second before anything is measured,
# and the GPU's own numbers -- the first time this notebook starts CUDA, after nsight -- then
# the banner every later notebook prints.

# %%
ENV = nt.setup("01_install_ncu")

# %% [markdown]
# ## 9. A smoke test of the chosen backend
#
# The setup call above started CUDA after nsight, so torch may now be used freely. One tiny
# kernel under `@nsight.analyze.kernel`: if this works, the later notebooks' sections that need
# a backend will run. `verbosity=SILENT` keeps nsight quiet here (notebook 02 shows what it
# prints by default); the line above the result says which rules the measurement followed.

# %%
with nt.section("9. Smoke test: profile one kernel") as s:
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
# ## 10. What the later notebooks will run here
#
# Each later section states what it needs. Here is what *this* machine provides -- what will
# run, and for each need that is missing, what those sections will say when they are skipped
# and what to do -- with the SM clock setup found: a clock held below its maximum lowers every
# figure the series measures, and the banner of every notebook says so.

# %%
SHORT = {  # the same, in the section's one-line result
    "profiler": "durations",
    "ncu": "counters in-process",
    "ncu-cli": "counters via the ncu command line",
}
UNLOCKS = {  # what each need lets the later notebooks do
    "gpu": "work on the GPU: torch on CUDA, NVML's clock readings",
    "profiler": "kernel durations: every @nsight.analyze.kernel profile of the series",
    "ncu": "counters in this process (nsight-python's Nsight Compute backend, cache and clock control)",
    "ncu-cli": "counters through the ncu command line on a script (where the backend cannot count)",
}


def what_runs(plan: list[tuple[str, bool, str]]) -> str:
    """Section 10's result from ENV.plan(): what will run here, and which needs are missing."""
    met = {label.split()[0]: ok for label, ok, _ in plan}
    if not met["gpu"]:
        return "no GPU: only the sections that need none run (the tools' defaults, docs, this install plan)"
    runs = [what for need, what in SHORT.items() if met[need]]
    lacks = [what for need, what in SHORT.items() if not met[need]]
    return (
        "runs here: "
        + (", ".join(runs) or "no profiling")
        + (f"; not here: {', '.join(lacks)}" if lacks else "")
    )


with nt.section("10. What the later notebooks will run here") as s:
    for label, met, why in ENV.plan():
        said = f"yes  {UNLOCKS[label.split()[0]]} ({why})" if met else f"no   {why}"
        print(
            textwrap.fill(f"{label:34}{said}", 118, initial_indent="  ", subsequent_indent=" " * 41)
        )
    for i, line in enumerate(ENV.clock.lines() if ENV.clock else ["not read: no GPU"]):
        print(f"  {'SM clock' if i == 0 else '':10}{line}")
    s.result = what_runs(ENV.plan())

# %% [markdown]
# ## Takeaways
#
# - Read the driver's CUDA version (NVML) first: both of nsight-python's backends are CUDA 13
#   tools. Install `nsight-compute-<version>` beside the old ncu and put its directory first on
#   `PATH`.
# - Try a backend in a child process before the notebook's own process commits to it: the
#   child's first error line is the truth a version check cannot give.
# - The Nsight Compute backend attaches at `import nsight`, so `import nsight` comes before
#   anything touches CUDA; read `nsight.get_active_tool()` rather than assuming.
# - No working Nsight Compute backend? Load libcupti 13.4+ globally *before torch*, then
#   `nsight.activate(nsight.Tool.CUPTI)`: kernel durations, no counters. An older `ncu` still
#   profiles scripts from the command line (notebook 04).
#
# ## Try it
#
# - Restart the kernel, run `import torch; torch.cuda.init()` right after the setup cell, then
#   the last setup call (`nt.setup("01_install_ncu")`): it refuses with `CudaAlreadyInitialised`
#   and says to restart -- the rule of section 8.
# - Where section 6 found the Nsight Compute backend working: restart, and before section 8 run
#   `os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"`. Section 8 then shows no tool at all -- nsight
#   did not even look for ncu -- and its check that the tool that worked is active fails.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [Tools: `activate`, `get_active_tool`, NCU vs CUPTI](https://docs.nvidia.com/nsight-python/tools.html) ·
# [Runtime requirements and import ordering](https://docs.nvidia.com/nsight-python/installation/runtime_requirements.html) ·
# [Installing from PyPI (the `cupti` extra)](https://docs.nvidia.com/nsight-python/installation/installation_from_pypi.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
