"""``ENV = setup("NN_topic")``, every notebook's first code cell. In order: refuse if CUDA already started;
the GPU and driver from NVML; the ncu installs (on Colab a new-enough one installed first); each backend
tried in a child process (:mod:`probe`), best first; only the one that worked loaded here; then CUDA starts
and one banner is printed. Notebook 01 first only looks (``steps="manual"``), takes the steps as cells, then
calls ``setup`` as every notebook does: the probes its cells ran are kept, so they are not run again."""

import collections
import os
import subprocess
import sys

from nspy_tutorial import backend, lifetime, probe, sections
from nspy_tutorial.clock import read_clock_state
from nspy_tutorial.environment import DRIVER_REMEDY, Environment, print_banner
from nspy_tutorial.gpu_facts import datasheet_for, device_facts, nvml_handle
from nspy_tutorial.sections import SettingError, first_line

BACKEND_VAR = "NSPY_TUTORIAL_BACKEND"
CUDA13_DRIVER = (13, 0)  # CUDA 13 tools (CUPTI 13.4, Nsight Compute 2026.x) need a driver for it: R580+
INSTALL_TIMEOUT = 1200  # seconds for the Colab installs
NEW_NCU = "Nsight Compute >= 2026.2.1"  # what nsight-python's Nsight Compute backend needs


# What NVML says, without starting CUDA: name, driver, the CUDA it supports, and why there is no usable GPU.
Gpu = collections.namedtuple("Gpu", "name driver driver_cuda problem")


class CudaAlreadyInitialised(RuntimeError):
    """CUDA started before ``import nsight``; Nsight Compute can no longer attach."""


_ENV: Environment | None = None


def on_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def backend_choice() -> str:
    """``NSPY_TUTORIAL_BACKEND`` lower-cased: "" (automatic) or "cupti"; anything else is an error."""
    value = os.environ.get(BACKEND_VAR, "")
    if value.strip().lower() not in ("", "cupti"):
        raise SettingError(f"{BACKEND_VAR}={value!r} is not a backend choice; valid: cupti (skip Nsight Compute), "
                           "or unset/empty (Nsight Compute if it works here, else CUPTI)")
    return value.strip().lower()


def probe_gpu() -> Gpu:
    """The GPU CUDA will use, its driver and the CUDA version the driver supports, from NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return Gpu(None, None, None, "NVML sees no GPU")
        name = pynvml.nvmlDeviceGetName(nvml_handle(pynvml))  # CUDA's device 0, not always NVML's
        driver, cuda = pynvml.nvmlSystemGetDriverVersion(), pynvml.nvmlSystemGetCudaDriverVersion_v2()
        name, driver = (v.decode() if isinstance(v, bytes) else v for v in (name, driver))
        return Gpu(name, driver, (cuda // 1000, cuda % 1000 // 10), None)
    except Exception as exc:  # no driver, no library, no device
        return Gpu(None, None, None, f"no NVIDIA driver or GPU found ({type(exc).__name__}: {exc})")


def driver_problem(env: Environment, tool: str) -> str | None:
    """Why this driver rules out ``tool`` (a CUDA 13 tool, needing R580 or newer), or None."""
    if env.driver_cuda is None or env.driver_cuda >= CUDA13_DRIVER:
        return None
    return (f"{tool} needs a driver for CUDA {CUDA13_DRIVER[0]} (R580 or newer); driver {env.driver} supports "
            f"CUDA {env.driver_cuda[0]}.{env.driver_cuda[1]}")


def install_on_colab(what: str, cmd: list[str], size: str) -> str | None:
    """Run an install in the foreground, its output shown as it comes; None, or why it failed."""
    print(f"  installing {what}: {size}; output below as it comes\n  $ {' '.join(cmd)}")
    try:
        code, output = lifetime.run(cmd, dict(os.environ), INSTALL_TIMEOUT, echo=True)
    except subprocess.TimeoutExpired:
        return f"the install of {what} ran over {INSTALL_TIMEOUT} s and was stopped"
    return None if code == 0 else f"the install of {what} exited {code}: {probe.first_error(output)}"


def colab_installs(env: Environment, installs: list[backend.NcuInstall],
                   forced_cupti: bool) -> list[backend.NcuInstall]:
    """On Colab: an ncu >= 2026.2.1 beside the preinstalled one unless one is there or the driver rules it out."""
    if forced_cupti or any(i.new_enough for i in installs):
        return installs
    problem = driver_problem(env, NEW_NCU)
    if problem:
        print(f"  not installing {NEW_NCU}: {problem}; {DRIVER_REMEDY[True]}")
        return installs
    problem = install_on_colab(NEW_NCU, ["bash", str(backend.installer_path())],
                               "the script says the download size first (a few hundred MB; about a minute or two)")
    if problem:
        print(f"  {problem}; the ncu already here stays in use")
    return backend.find_ncu_installs()  # load() puts the one chosen first on PATH


def ncu_backend_candidate(env: Environment, installs: list[backend.NcuInstall],
                          forced_cupti: bool) -> tuple[backend.NcuInstall | None, str | None]:
    """The ncu to try the Nsight Compute backend with, or why there is none to try."""
    if forced_cupti:
        return None, f"not tried: {BACKEND_VAR}=cupti"
    newest, problem = backend.choose_ncu(installs), driver_problem(env, NEW_NCU)
    if newest is not None and newest.new_enough:
        return newest, None
    if problem:
        return None, f"not tried: {problem}"
    if newest is None:
        return None, "not tried: no ncu on PATH or under /opt/nvidia/nsight-compute"
    return None, (f"not tried: the newest ncu here, {newest.path}, is {backend.version_text(newest.version)}; "
                  f"nsight-python needs {backend.version_text(backend.MIN_NCU_VERSION)} or newer")


def cupti_candidate(env: Environment) -> tuple[backend.CuptiLibrary | None, str | None]:
    """The libcupti to try the CUPTI backend with (on Colab, installed first), or why there is none."""
    problem = driver_problem(env, "CUPTI 13.4")
    if problem:
        return None, f"not tried: {problem}"
    library = backend.find_cupti_library()
    problem = backend.cupti_problem(library, backend.cupti_python_available())
    if problem and env.on_colab:
        failed = install_on_colab("cupti-python and libcupti 13.4 (beside Colab's own CUDA 12 packages)",
                                  backend.cupti_install_command(), "about 10 MB")
        library, problem = backend.use_cupti_target()
        problem = failed or problem
    return (None, problem) if problem else (library, None)


def try_backends(env: Environment, installs: list[backend.NcuInstall], forced_cupti: bool) -> object:
    """Step 4, into ``env``: the Nsight Compute backend, else CUPTI; what to load: the ncu, the libcupti or None."""
    ncu, env.ncu_problem = ncu_backend_candidate(env, installs, forced_cupti)
    if ncu is not None:
        tried = probe.try_candidate("ncu", ncu.path, probe.machine_key(env.gpu_name, env.driver))
        env.probes.append(f"Nsight Compute backend with {ncu.path}: {tried.line()}")
        if tried.ok:
            env.backend, env.backend_reason = "ncu", "the Nsight Compute backend profiled a kernel in a child process"
            return ncu
        env.ncu_problem = f"it failed in a child process: {tried.detail}"
    library, env.cupti_problem = cupti_candidate(env)
    env.backend_reason = f"Nsight Compute backend {env.ncu_problem}; "
    if library is not None:
        tried = probe.try_candidate("cupti", library.path, probe.machine_key(env.gpu_name, env.driver))
        env.probes.append(f"CUPTI backend with {library.path}: {tried.line()}")
        if tried.ok:
            env.backend = "cupti"
            env.backend_reason += "the CUPTI backend profiled a kernel in a child process (kernel durations only)"
            return library
        env.cupti_problem = f"it failed in a child process: {tried.detail}"
    env.backend_reason += f"CUPTI backend {env.cupti_problem}"
    return None


def choose_cli(env: Environment, installs: list[backend.NcuInstall]) -> None:
    """The ncu command line into ``env``: the newest ncu that profiles a kernel in launch mode, or why none."""
    failed = [] if installs else ["no ncu on PATH or under /opt/nvidia/nsight-compute"]
    machine = probe.machine_key(env.gpu_name, env.driver)
    for install in sorted(installs, key=lambda i: i.version or (), reverse=True):
        tried = probe.try_candidate("ncu-cli", install.path, machine)
        env.probes.append(f"ncu command line {install.path} ({backend.version_text(install.version)}): {tried.line()}")
        if tried.ok:
            env.ncu_path, env.ncu_version = install.path, install.version
            return
        failed.append(f"{install.path}: {tried.detail}")
    env.cli_problem = "; ".join(failed)


def load(chosen: str | None, tool: object) -> tuple[str | None, str | None]:
    """Step 5: load the chosen backend in this process; (backend, why it did not load here)."""
    if chosen == "ncu":  # nsight-python looks ncu up on PATH: this one first, once
        folder = os.path.dirname(tool.path)
        rest = [part for part in os.environ.get("PATH", "").split(os.pathsep) if part and part != folder]
        os.environ["PATH"] = os.pathsep.join([folder, *rest])
    else:  # nothing for nsight to attach: it would only fail, or load what was not chosen
        os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"
        if chosen == "cupti":
            backend.preload_cupti(tool)  # before torch can load its older libcupti
    import nsight  # Nsight Compute attaches here, before anything starts CUDA
    from nsight.collection import ncu as nsight_ncu

    if chosen == "ncu" and nsight.get_active_tool() != nsight.Tool.NCU:
        return None, f"loaded in a child process but not here: {first_line(str(nsight_ncu.injection_load_error))}"
    if chosen == "cupti":
        try:
            nsight.activate(nsight.Tool.CUPTI)
        except Exception as exc:
            return None, f"worked in a child process but not here: {type(exc).__name__}: {first_line(str(exc))}"
    return chosen, None


def setup(notebook: str, *, steps: str = "auto") -> Environment:
    """Prepare this kernel for profiling and print the banner; ``steps="manual"`` (notebook 01) only looks."""
    global _ENV
    sections.set_notebook(notebook)
    folder = sections.enter_workdir(notebook)
    if _ENV is not None:
        _ENV.notebook, _ENV.workdir = notebook, folder
        print_banner(_ENV)
        return _ENV
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise CudaAlreadyInitialised(
            "CUDA is already initialised in this kernel: nsight-python's Nsight Compute backend could no longer attach, "
            "and torch may already hold its own libcupti, so setup refuses whichever backend would be chosen. Restart "
            "the kernel (Colab: Runtime -> Restart session) and run the setup cell before anything that touches the GPU.")
    forced_cupti = backend_choice() == "cupti"  # a mistyped NSPY_TUTORIAL_BACKEND fails here, before anything slow
    gpu, installs = probe_gpu(), backend.find_ncu_installs()
    env = Environment(notebook=notebook, on_colab=on_colab(), gpu_name=gpu.name, gpu_problem=gpu.problem,
                      driver=gpu.driver, driver_cuda=gpu.driver_cuda, workdir=folder)
    if steps == "manual":
        env.backend_reason = "not chosen yet: the cells of this notebook do it, then setup() in auto mode"
        found = ", ".join(f"{i.path} ({backend.version_text(i.version)})" for i in installs) or "none"
        print(f"setup({notebook!r}, steps='manual'): looked only, nothing installed, tried, loaded or imported\n"
              f"  GPU (NVML, CUDA not started): {gpu.name or 'none -- ' + str(gpu.problem)}, driver {gpu.driver}\n"
              f"  ncu found: {found}\n  work folder (every file this notebook writes): {folder}")
        return env
    if env.has_gpu and env.on_colab:
        installs = colab_installs(env, installs, forced_cupti)
    tool = try_backends(env, installs, forced_cupti) if env.has_gpu else None
    if env.has_gpu:  # before CUDA starts here; CUPTI's status where a libcupti 13.4 and cupti-python are here
        library = backend.find_cupti_library()
        usable = backend.cupti_problem(library, backend.cupti_python_available()) is None
        env.clock = read_clock_state(cupti_path=library.path if usable else None)
    chosen = env.backend
    env.backend, problem = load(chosen, tool)
    if problem:
        env.backend_reason += f"; but {problem}"
        setattr(env, "ncu_problem" if chosen == "ncu" else "cupti_problem", problem)
    if env.has_gpu:  # the ncu command line and the device's facts: the first CUDA use, after nsight
        choose_cli(env, installs)
        env.facts = device_facts()
        env.datasheet = datasheet_for(env.facts.name)
    else:
        env.backend_reason = env.ncu_problem = env.cupti_problem = env.cli_problem = "no GPU"
        newest = backend.choose_ncu(installs)
        env.ncu_path, env.ncu_version = (newest.path, newest.version) if newest else (None, None)
    _ENV = env
    print_banner(env)
    return env


def install_nsys() -> str | None:
    """Colab has NVIDIA's apt repository but no nsys: apt-get update, then the pinned Nsight Systems, non-interactive,
    apt's lines shown as they come (it prints the download size first); None, or why it failed. Run it again: apt
    finds the package installed and does nothing."""
    apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-o", "DPkg::Lock::Timeout=120", "-y", "-q"]
    steps = (("apt's package lists", ["update"], "a refresh, nothing installed yet"),
             (backend.NSYS_PACKAGE, ["install", backend.NSYS_PACKAGE], "apt prints the download size first"))
    for what, step, size in steps:
        problem = install_on_colab(what, [*apt, *step], size)
        if problem:
            return problem
    return None
