# %% [markdown]
# # 01 · Install Nsight Compute, import nsight first, pick a backend
#
# **What you will learn**
# - which GPU and which Nsight Compute (`ncu`) this machine has, and why nsight-python
#   1.1 needs **ncu 2026.2.1 or newer** for its Nsight Compute backend;
# - how to install a current Nsight Compute *next to* the preinstalled one, and how it
#   gets onto `PATH`;
# - nsight-python and its `cupti` extra: the experimental CUPTI backend, and why it
#   needs a newer libcupti than PyTorch ships;
# - why `import nsight` must come before anything starts CUDA -- demonstrated;
# - what the rest of the series assumes, printed as one environment banner.
#
# On Colab the setup cell below does the installing (once per
# session). Elsewhere nothing is installed for you: you get the facts and the commands.
#
# Two backends, one choice made for you by `nt.setup`:
#
# | backend | needs | gives |
# |---|---|---|
# | Nsight Compute (`nsight.Tool.NCU`) | ncu ≥ 2026.2.1, loaded before CUDA | any metric, cache/clock control, replay |
# | CUPTI (`nsight.Tool.CUPTI`, experimental) | `nsight-python[cupti]`, libcupti ≥ 13.4 | kernel durations only |
#
# If neither is available the profiling sections are SKIPPED, each with the reason and
# what to do.

# %%
{{SETUP}}

# %%
import os
import shutil
import subprocess
import sys
import textwrap

from nspy_tutorial import backend

# %% [markdown]
# ## 1. The GPU and the Nsight Compute it came with
#
# NVML names the GPU without starting CUDA. Then every `ncu` we can find: the one on
# `PATH` and any under `/opt/nvidia/nsight-compute/<version>/`, where NVIDIA's packages
# install it.

# %%
with nt.section("1. The GPU and the preinstalled ncu") as s:
    ENV.require("gpu")
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                          "--format=csv"], capture_output=True, text=True).stdout)
    installs = backend.find_ncu_installs()
    for i in installs:
        verdict = "new enough" if i.new_enough else "too old for nsight-python's NCU backend"
        print(f"  {i.path}: {backend.version_text(i.version)} ({verdict})")
    if not installs:
        print("  no ncu found")
    newest = max((i.version for i in installs if i.version), default=None)
    s.result = f"{ENV.gpu_name}; {len(installs)} ncu found, newest {backend.version_text(newest)}"

# %% [markdown]
# ## 2. Installing a current Nsight Compute beside it
#
# `scripts/install_ncu.sh` (shipped in the package) does what a careful person would:
#
# 1. if an ncu ≥ 2026.2.1 is already on `PATH` or under `/opt/nvidia/nsight-compute/`,
#    install nothing;
# 2. else `apt-get install nsight-compute-<version>`, newest first -- Colab's image
#    already carries NVIDIA's CUDA apt repository;
# 3. else download the `.deb` from NVIDIA's repository for this distribution and
#    `dpkg -i` it;
# 4. ask `dpkg -L` where the `ncu` launcher went (no assumed path) and print that
#    directory as the last line, for the caller to put first on `PATH`.
#
# It exits with a distinct code and a one-line reason for: not root (3), no apt/dpkg
# (4), no network (5), no new-enough package (6), unsupported architecture (7).
# Here we run it with `--dry-run`: it says what it would do and changes nothing. (On
# Colab `nt.setup` already ran it for real if it was needed.)

# %%
with nt.section("2. Install plan for a current ncu (dry run)") as s:
    from nsight.collection import ncu as nsight_ncu

    nt.claim(tuple(nsight_ncu.MIN_NCU_VERSION) == backend.MIN_NCU_VERSION,
             "nsight-python itself requires ncu 2026.2.1 or newer", f"nsight says {nsight_ncu.MIN_NCU_VERSION}")
    script = backend.installer_path()
    done = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True)
    print(textwrap.indent(done.stderr.strip(), "  "))
    nt.claim(done.returncode == 0, "the installer's dry run succeeds and changes nothing", f"exit {done.returncode}")
    ready = done.stdout.strip().splitlines()
    s.result = (f"a new-enough ncu is installed at {ready[-1]}" if ready
                else (done.stderr.strip().splitlines() or ["(no plan printed)"])[0][:140])

# %% [markdown]
# ## 3. PATH: which ncu nsight-python will use
#
# nsight-python finds `ncu` through `PATH` (`shutil.which("ncu")`). The setup cell puts
# the newest new-enough ncu's directory first, so the preinstalled older one is not
# removed, only shadowed.

# %%
with nt.section("3. The ncu on PATH") as s:
    ENV.require("gpu")
    which = shutil.which("ncu")
    print(f"  shutil.which('ncu') -> {which}")
    print(f"  PATH starts with: {os.environ['PATH'].split(os.pathsep)[:3]}")
    if ENV.backend == "ncu":
        nt.claim(which and backend.ncu_version(which) >= backend.MIN_NCU_VERSION,
                 "with the Nsight Compute backend active, the ncu on PATH is new enough")
    s.result = f"ncu on PATH: {which} ({backend.version_text(backend.ncu_version(which)) if which else 'none'})"

# %% [markdown]
# ## 4. nsight-python, and the `cupti` extra
#
# `pip install nsight-python` brings the Nsight Compute backend's Python side (it reads
# reports with `ncu-report`). `pip install "nsight-python[cupti]"` adds `cupti-python`
# for the experimental CUPTI backend, which needs **libcupti 13.4+** -- newer than the one
# PyTorch is pinned to. The original tutorial installed it into a separate folder used by
# a child process. We load it in-process instead: `nt.setup` finds the newest libcupti
# among the installed `nvidia-cuda-cupti` wheels and loads it with `RTLD_GLOBAL` *before*
# torch loads its own; torch's request for the same soname then resolves to it. (Without
# that, activation fails with `ERROR_INVALID_PARAMETER` from `subscribe_v2`.)
#
# The check reads `/proc/self/maps` to see which libcupti this process really loaded.

# %%
with nt.section("4. nsight-python, cupti-python and the libcupti in this process") as s:
    ENV.require("gpu")
    from importlib.metadata import PackageNotFoundError, version

    for name in ("nsight-python", "cupti-python", "ncu-report", "nvidia-cuda-cupti", "torch"):
        try:
            print(f"  {name:18s} {version(name)}")
        except PackageNotFoundError:
            print(f"  {name:18s} not installed")
    lib = backend.find_cupti_library()
    print(f"  newest libcupti in a wheel: {lib.path if lib else None} ({backend.version_text(lib.version) if lib else '-'})")
    with open("/proc/self/maps") as maps:
        loaded = sorted({line.split()[-1] for line in maps if "libcupti" in line})
    print(f"  libcupti mapped into this process: {loaded or 'none'}")
    if ENV.backend == "cupti":
        nt.claim(lib is not None and lib.path in loaded, "the CUPTI backend runs on the preloaded libcupti 13.4+")
    s.result = f"backend {ENV.backend}; libcupti loaded: {[os.path.basename(p) for p in loaded] or 'none'}"

# %% [markdown]
# ## 5. Why `import nsight` must come first
#
# Nsight Compute profiles by injecting itself into the CUDA driver when CUDA starts in
# this process; `import nsight` loads it. If torch has already initialised CUDA, it is
# too late: the only remedy is a fresh process. `nt.setup` therefore refuses outright
# when CUDA is already initialised, instead of letting every profile fail later. We show
# that in a child process that initialises CUDA first and calls `setup` second.

# %%
WRONG_ORDER = textwrap.dedent('''
    import torch
    torch.cuda.init()          # CUDA starts first ...
    import nspy_tutorial as nt
    nt.setup("wrong_order")    # ... so this must refuse
''')

with nt.section("5. The import order, demonstrated") as s:
    ENV.require("gpu")
    child = subprocess.run([sys.executable, "-c", WRONG_ORDER], capture_output=True, text=True, timeout=300)
    last = (child.stderr.strip().splitlines() or [""])[-1]
    print(f"  child exit code {child.returncode}; last line:\n  {last}")
    nt.claim(child.returncode != 0 and "CudaAlreadyInitialised" in last,
             "setup refuses to run after CUDA has been initialised")
    s.result = "setup after CUDA init is refused: " + last.split(":", 1)[-1].strip()[:80]

# %% [markdown]
# ## 6. A ten-second smoke test of the chosen backend
#
# One tiny kernel under `@nsight.analyze.kernel`: if this works, the later notebooks'
# profiling sections will run.

# %%
with nt.section("6. Smoke test: profile one kernel") as s:
    ENV.require("profiler")
    import nsight
    import torch

    @nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT)
    def smoke(n: int) -> None:
        x = torch.ones(n, device="cuda")
        with nsight.annotate("x + 1"):
            _ = x + 1

    r = smoke(1 << 20).to_dataframe().iloc[0]
    nt.claim(r["AvgValue"] > 0 and r["NumRuns"] == 3, "the profile returned three positive durations")
    s.result = f"{ENV.backend} backend: x + 1 on 1M floats took {r['AvgValue'] / 1e3:.1f} us"

# %% [markdown]
# ## 7. What the rest of the series assumes
#
# Every notebook starts with the same setup cell and prints this banner. Sections say
# what they need; here is what *this* machine will run.

# %%
with nt.section("7. What the later notebooks will run here") as s:
    nt.bootstrap.print_banner(ENV)
    need = {"gpu": ENV.has_gpu, "profiler (any backend)": ENV.backend is not None,
            "ncu (Nsight Compute backend)": ENV.backend == "ncu", "ncu command line": ENV.ncu_path is not None}
    for k, v in need.items():
        print(f"  {k:30s} {'yes' if v else 'no -> those sections will be SKIPPED'}")
    s.result = f"backend {ENV.backend or 'none'}: {ENV.backend_reason[:110]}"

# %% [markdown]
# ## Takeaways
#
# - nsight-python 1.1's Nsight Compute backend needs ncu ≥ 2026.2.1, found on `PATH`.
#   Install it beside the old one; don't remove the system's.
# - `import nsight` before anything touches CUDA. In a notebook: first cell, always.
# - No new ncu? The CUPTI backend still measures kernel durations, and the `ncu`
#   command line still profiles scripts (notebook 04 shows both).

# %%
nt.summary();
