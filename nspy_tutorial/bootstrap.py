"""The one call in every notebook's first code cell: ``ENV = setup("NN_topic")``.

Order matters, so it is all here:

1. Refuse if CUDA is already initialised (then Nsight Compute could not attach).
2. Look for a GPU through NVML (which does not initialise CUDA).
3. Find the newest ncu; on Colab, install a new-enough one if needed (install_ncu.sh).
4. If that ncu cannot carry nsight-python's Nsight Compute backend but the CUPTI
   backend can run, load the newer libcupti *now*, before torch can load its own.
5. ``import nsight`` -- Nsight Compute is loaded at import -- and read what happened.
6. If Nsight Compute did not load, activate the CUPTI backend (durations only).
7. Only then touch CUDA (torch) to read the device's facts, and print one banner.

Calling ``setup`` again in the same kernel is harmless: it reprints the banner.

Notebook 01 teaches these steps, so there the reader runs them as cells:
``setup("01_install_ncu", steps="manual")`` only does steps 1-3 without installing
(it probes: GPU, ncu installs) and touches nothing else; the notebook's cells install,
put ncu on PATH, preload libcupti, ``import nsight`` and activate a backend in the
open; then ``setup.finish()`` reads what they did (active tool, ncu, libcupti), reads
the device's facts and prints the banner once.
``NSPY_TUTORIAL_BACKEND=cupti`` skips Nsight Compute and goes straight to CUPTI.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

from nspy_tutorial import backend, nvml_device, sections, workdir
from nspy_tutorial.display import banner
from nspy_tutorial.gpu_facts import Datasheet, DeviceFacts, datasheet_for, device_facts
from nspy_tutorial.sections import SettingError, Skip, first_line

COLAB_GPU_HINT = "in Colab: Runtime -> Change runtime type -> T4 GPU, then run the notebook again"
LOCAL_GPU_HINT = (
    "run on a machine with an NVIDIA GPU and its driver (`nvidia-smi` should list the GPU), "
    "or open the notebook in Colab with a T4 runtime"
)
BACKEND_VAR = "NSPY_TUTORIAL_BACKEND"
BACKEND_CHOICES = ("cupti",)  # or unset/empty: Nsight Compute if it loads, else CUPTI
NCU_REMEDY = (
    "install Nsight Compute >= 2026.2.1 next to the old one (as root: "
    "`bash scripts/install_ncu.sh`; on Colab, notebook 01 does it), then restart the kernel"
)


class CudaAlreadyInitialised(RuntimeError):
    """CUDA started before ``import nsight``; Nsight Compute can no longer attach."""


@dataclasses.dataclass
class Environment:
    """What the bootstrap found and chose; sections ask it what they may run."""

    notebook: str
    on_colab: bool
    gpu_name: str | None
    gpu_problem: str | None  # why there is no usable GPU
    driver: str | None
    ncu_path: str | None
    ncu_version: tuple[int, ...] | None
    backend: str | None  # "ncu", "cupti" or None
    backend_reason: str
    ncu_problem: str | None  # why nsight-python's Nsight Compute backend is not active
    cupti_problem: str | None  # why the CUPTI backend is not active (if it is not)
    facts: DeviceFacts | None = None
    datasheet: Datasheet | None = None
    workdir: Path | None = None  # every file this notebook writes goes here (nspy_tutorial.workdir)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_problem is None

    def lacks(self, what: str) -> list[str]:
        """Every need that a section requiring ``what`` lacks here (empty: it can run).

        Every need includes a GPU, so without one a section lacks "gpu" and also what it
        asked for: the Nsight Compute backend ("ncu") is a profiler backend, and the ncu
        sections ("ncu", "ncu-cli") read the GPU's performance counters ("counters").
        """
        if what not in ("gpu", "profiler", "ncu", "ncu-cli"):
            raise ValueError(f"require(): unknown need {what!r}; use gpu, profiler, ncu or ncu-cli")
        missing = [] if self.has_gpu else ["gpu"]
        if what in ("profiler", "ncu") and self.backend is None:
            missing.append("profiler")
        if what == "ncu" and self.backend != "ncu":
            missing.append("ncu")
        if what == "ncu-cli" and self.ncu_path is None:
            missing.append("ncu-cli")
        if what in ("ncu", "ncu-cli") and not self.has_gpu:
            missing.append("counters")
        return missing

    def _without_gpu(self, also: str | tuple[str, ...]) -> list[str]:
        """The needs in ``also`` that are missing because there is no GPU (none with one)."""
        needs = [also] if isinstance(also, str) else list(also)
        unknown = [need for need in needs if need not in sections.NEEDS]
        if unknown:
            raise ValueError(f"require(): unknown need(s) {unknown} in also=; use {', '.join(sections.NEEDS)}")
        return [] if self.has_gpu else needs

    def require(self, what: str, also: str | tuple[str, ...] = ()) -> None:
        """Raise :class:`Skip` unless ``what`` is available.

        ``what`` is one of ``"gpu"``, ``"profiler"`` (any nsight-python backend),
        ``"ncu"`` (the Nsight Compute backend: hardware counters, cache and clock
        control), ``"ncu-cli"`` (any ncu executable, for launch-mode runs). The Skip names
        the first missing need (the reason given) and every other one (:meth:`lacks`).
        ``also`` names needs the section checks later itself (``"cupti"``, ``"triton"``):
        without a GPU they are missing too, so ``NSPY_TUTORIAL_REQUIRE`` enforces them there.
        """
        missing = self.lacks(what) + self._without_gpu(also)
        if not missing:
            return
        first = "gpu" if "gpu" in missing else what  # the reason the section gives
        needs = (first, *(need for need in missing if need != first))
        if not self.has_gpu:
            raise Skip(f"needs a GPU: {self.gpu_problem}", gpu_remedy(self.on_colab), needs=needs)
        if what == "profiler":
            raise Skip(
                "needs an nsight-python backend; Nsight Compute: "
                f"{self.ncu_problem}; CUPTI: {self.cupti_problem}",
                NCU_REMEDY + ", or `pip install 'nsight-python[cupti]'` for durations only",
                needs=needs,
            )
        if what == "ncu":
            raise Skip(
                f"needs nsight-python's Nsight Compute backend; the active backend is "
                f"{self.backend or 'none'} because Nsight Compute did not load: {self.ncu_problem}",
                NCU_REMEDY,
                needs=needs,
            )
        raise Skip("needs the ncu command-line tool, and none was found", NCU_REMEDY, needs=needs)

    def require_compute_capability(self, minimum: tuple[int, int], feature: str,
                                   also: str | tuple[str, ...] = ()) -> None:
        """Raise :class:`Skip` unless the GPU's compute capability is at least ``minimum``.

        Without a GPU the Skip lacks both "gpu" and the capability (``cc8.0``), and the
        needs in ``also`` (as in :meth:`require`).
        """
        need = f"cc{minimum[0]}.{minimum[1]}"
        if not self.has_gpu:
            raise Skip(f"needs a GPU: {self.gpu_problem}", gpu_remedy(self.on_colab),
                       needs=("gpu", need, *self._without_gpu(also)))
        assert self.facts is not None
        have = self.facts.compute_capability
        if have < minimum:
            raise Skip(
                f"{feature} needs compute capability >= {minimum[0]}.{minimum[1]}; "
                f"this {self.gpu_name} is {have[0]}.{have[1]}",
                "run on an Ampere-or-newer GPU (A100, L4, A10G, H100, ...) to see it",
                needs=need,
            )


_ENV: Environment | None = None
_PENDING: Environment | None = None  # setup(steps="manual") before setup.finish()


def on_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def gpu_remedy(colab: bool) -> str:
    """What to do without a GPU, where the reader is: Colab's runtime menu, or a GPU machine."""
    return COLAB_GPU_HINT if colab else LOCAL_GPU_HINT


def backend_choice() -> str:
    """``NSPY_TUTORIAL_BACKEND`` lower-cased: "" (automatic) or "cupti"; anything else is an error."""
    value = os.environ.get(BACKEND_VAR, "")
    choice = value.strip().lower()
    if choice and choice not in BACKEND_CHOICES:
        raise SettingError(
            f"{BACKEND_VAR}={value!r} is not a backend choice; valid: cupti (skip Nsight Compute), "
            "or unset/empty (Nsight Compute if it loads, else CUPTI)"
        )
    return choice


def cuda_already_initialised() -> bool:
    """True if torch has initialised CUDA in this process (only torch is checked)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def probe_gpu() -> tuple[str | None, str | None, str | None]:
    """(name, driver, problem) from NVML, which does not initialise CUDA."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None, None, "NVML sees no GPU"
        handle = nvml_device.handle(pynvml)  # CUDA's device 0, which is not always NVML's
        name = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return _text(name), _text(driver), None
    except Exception as exc:  # no driver, no library, no device
        return None, None, f"no NVIDIA driver or GPU found ({type(exc).__name__}: {exc})"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def install_ncu_on_colab() -> str | None:
    """Run install_ncu.sh; return its last stdout line (the ncu directory) or None."""
    script = backend.installer_path()
    print(f"  installing Nsight Compute with {script} (apt-get; output in /tmp/nspy_ncu_install.log) ...")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  install_ncu.sh exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else None


def decide_ncu(installs: list[backend.NcuInstall], has_gpu: bool) -> tuple[backend.NcuInstall | None, str | None]:
    """The ncu to use and, if nsight-python's NCU backend cannot use it, why not."""
    chosen = backend.choose_ncu(installs)
    if not has_gpu:
        return chosen, "no GPU"
    if chosen is None:
        return None, "no ncu on PATH or under /opt/nvidia/nsight-compute"
    if not chosen.new_enough:
        return chosen, (
            f"{chosen.path} is {backend.version_text(chosen.version)}; nsight-python needs "
            f"{backend.version_text(backend.MIN_NCU_VERSION)} or newer"
        )
    return chosen, None


STEPS = ("auto", "manual")


def setup(notebook: str, *, steps: str = "auto") -> Environment:
    """Prepare this kernel for profiling and print the environment banner.

    ``steps="manual"`` (notebook 01) only probes -- GPU through NVML, the ncu installs --
    and returns a provisional Environment without a backend; the notebook's cells then
    do the install, PATH, libcupti and ``import nsight`` steps themselves, and
    ``setup.finish()`` records the result.
    """
    global _ENV, _PENDING
    if steps not in STEPS:
        raise ValueError(f"setup(): steps must be one of {', '.join(STEPS)}, got {steps!r}")
    sections.set_notebook(notebook)
    folder = workdir.enter(notebook)
    if _ENV is not None:
        _ENV.notebook, _ENV.workdir = notebook, folder
        if steps == "manual":
            print(f"  already set up in this kernel (backend {_ENV.backend or 'none'}); "
                  "the cells below check each step again and setup.finish() reprints the banner")
        else:
            print_banner(_ENV)
        return _ENV
    if cuda_already_initialised():
        raise CudaAlreadyInitialised(
            "CUDA is already initialised in this kernel, so Nsight Compute can no longer "
            "attach. Restart the kernel (Colab: Runtime -> Restart session) and run the "
            "setup cell before anything that touches the GPU."
        )
    backend_choice()  # a mistyped NSPY_TUTORIAL_BACKEND fails here, before anything slow
    colab = on_colab()
    gpu_name, driver, gpu_problem = probe_gpu()
    installs = backend.find_ncu_installs()
    chosen, ncu_problem = decide_ncu(installs, gpu_problem is None)
    if steps == "manual":
        _PENDING = Environment(
            notebook=notebook,
            on_colab=colab,
            gpu_name=gpu_name,
            gpu_problem=gpu_problem,
            driver=driver,
            ncu_path=chosen.path if chosen else None,
            ncu_version=chosen.version if chosen else None,
            backend=None,
            backend_reason="not chosen yet: the cells of this notebook load it, then setup.finish() records it",
            ncu_problem=ncu_problem,
            cupti_problem="not activated yet",
            workdir=folder,
        )
        print_probe(_PENDING, installs)
        return _PENDING
    if colab and gpu_problem is None and (chosen is None or not chosen.new_enough):
        directory = install_ncu_on_colab()
        if directory:
            backend.put_first_on_path(directory)
            chosen, ncu_problem = decide_ncu(backend.find_ncu_installs(), True)
    forced_cupti, want_cupti, cupti_problem = _load_nsight(chosen, gpu_problem, ncu_problem)
    import nsight
    from nsight.collection import ncu as nsight_ncu

    active = nsight.get_active_tool()
    chosen_backend: str | None = None
    if active == nsight.Tool.NCU:
        chosen_backend, reason = "ncu", "Nsight Compute loaded at `import nsight`"
        ncu_problem = None
    else:
        if forced_cupti:
            ncu_problem = "not tried: NSPY_TUTORIAL_BACKEND=cupti"
        elif nsight_ncu.injection_load_error is not None:
            ncu_problem = first_line(str(nsight_ncu.injection_load_error))
        elif ncu_problem is not None and gpu_problem is None:
            ncu_problem = f"{ncu_problem}; not tried at `import nsight`"
        reason = f"Nsight Compute is not active ({ncu_problem})"
        if want_cupti and cupti_problem is None:
            try:
                nsight.activate(nsight.Tool.CUPTI)
                chosen_backend = "cupti"
                reason += "; CUPTI backend active (kernel durations only)"
            except Exception as exc:
                cupti_problem = f"activation failed: {type(exc).__name__}: {first_line(str(exc))}"
        if chosen_backend is None:
            reason += f"; CUPTI not active ({cupti_problem})"

    env = Environment(
        notebook=notebook,
        on_colab=colab,
        gpu_name=gpu_name,
        gpu_problem=gpu_problem,
        driver=driver,
        ncu_path=chosen.path if chosen else None,
        ncu_version=chosen.version if chosen else None,
        backend=chosen_backend,
        backend_reason=reason,
        ncu_problem=ncu_problem,
        cupti_problem=None if chosen_backend == "cupti" else cupti_problem,
        workdir=folder,
    )
    return _complete(env)


def _load_nsight(chosen: backend.NcuInstall | None, gpu_problem: str | None,
                 ncu_problem: str | None) -> tuple[bool, bool, str | None]:
    """Steps 4 and 5: a new-enough ``chosen`` ncu first on PATH (where nsight looks), the libcupti
    preload where CUPTI will be wanted, then ``import nsight``.

    Returns (CUPTI forced by NSPY_TUTORIAL_BACKEND, CUPTI wanted, why CUPTI cannot run or None).
    Nothing here starts CUDA or prints; :func:`warm_up` runs it too, ahead of :func:`setup`.
    """
    if chosen is not None and chosen.new_enough:
        backend.put_first_on_path(os.path.dirname(chosen.path))
    forced_cupti = backend_choice() == "cupti"
    library = backend.find_cupti_library()
    cupti_problem = backend.cupti_problem(library, backend.cupti_python_available())
    if gpu_problem is not None:
        cupti_problem = "no GPU"
    want_cupti = gpu_problem is None and (ncu_problem is not None or forced_cupti)
    if want_cupti and cupti_problem is None and library is not None:
        backend.preload_cupti(library)  # before torch can load its older libcupti
    if gpu_problem is not None or forced_cupti or ncu_problem is not None:
        # Nothing for nsight to load (no GPU, CUPTI asked for, or no ncu new enough): it would
        # only fail, and trying costs a second at every `import nsight`.
        os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"

    import nsight  # noqa: F401 -- Nsight Compute is loaded here, before anything starts CUDA

    return forced_cupti, want_cupti, cupti_problem


# What the setup cell and the import cell after it load, besides nsight (see warm_up).
WARM_MODULES = ("torch", "numpy", "pandas", "scipy.stats", "matplotlib.pyplot")


def warm_up() -> list[str]:
    """The slow, CUDA-free part of :func:`setup`, done before the notebook runs (runner plumbing).

    The runner starts the next notebook's kernel while the current notebook runs; this is
    the code it runs there first: setup's steps 2-5 (GPU through NVML, the ncu installs,
    the libcupti preload, ``import nsight``), by the same code and in the same order, then
    the imports of :data:`WARM_MODULES`, none of which starts CUDA. The notebook's own setup
    cell then runs every step again, finds the modules loaded, and starts CUDA as usual: the
    same state, a few seconds sooner. Nothing is printed. It does nothing where the order is
    the lesson or could differ: once set up, once CUDA or nsight is loaded, on Colab (which
    may install ncu first). Returns the modules it imported; one that fails to import is left
    to the notebook, which reports it.
    """
    if _ENV is not None or _PENDING is not None or on_colab() or cuda_already_initialised() or "nsight" in sys.modules:
        return []
    _, _, gpu_problem = probe_gpu()
    chosen, ncu_problem = decide_ncu(backend.find_ncu_installs(), gpu_problem is None)
    _load_nsight(chosen, gpu_problem, ncu_problem)
    loaded = ["nsight"]
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        loaded.append(name)
    return loaded


def _complete(env: Environment) -> Environment:
    """Read the device's facts (the first CUDA use, after nsight), keep and print ``env``."""
    global _ENV, _PENDING
    if env.has_gpu:
        env.facts = device_facts()
        env.datasheet = datasheet_for(env.facts.name)
    _ENV, _PENDING = env, None
    print_banner(env)
    return env


def print_probe(env: Environment, installs: list[backend.NcuInstall]) -> None:
    """The few lines ``setup(steps="manual")`` prints: what it found, and that it did nothing else."""
    found = ", ".join(f"{i.path} ({backend.version_text(i.version)})" for i in installs) or "none"
    print(f"setup({env.notebook!r}, steps='manual'): probed only, nothing installed, loaded or imported")
    print(f"  GPU (NVML, CUDA not started): {env.gpu_name or 'none -- ' + str(env.gpu_problem)}")
    print(f"  ncu found: {found}")
    print(f"  work folder (every file this notebook writes): {env.workdir}")
    print("  The cells below take each step in the open; setup.finish() records what they did "
          "and prints the environment banner.")


def finish() -> Environment:
    """Record what notebook 01's cells did and print the environment banner (once).

    Reads, without changing anything: the ncu installs (after the install and PATH
    cells), nsight-python's active tool and why Nsight Compute did not load, and why
    the CUPTI backend is not active when it is not. Then the device's facts.
    """
    base = _PENDING or _ENV
    if base is None:
        raise RuntimeError('setup.finish(): call nt.setup("01_install_ncu", steps="manual") first')
    if base.has_gpu and "nsight" not in sys.modules:
        raise RuntimeError(
            "setup.finish(): `import nsight` has not run yet; run the cell that imports it "
            "first (reading the device's facts starts CUDA, which must come after nsight)"
        )
    chosen, ncu_problem = decide_ncu(backend.find_ncu_installs(), base.has_gpu)
    library = backend.find_cupti_library()
    cupti_problem = backend.cupti_problem(library, backend.cupti_python_available())
    if not base.has_gpu:
        cupti_problem = "no GPU"
    chosen_backend, reason, ncu_problem, cupti_problem = _read_backend(ncu_problem, cupti_problem)
    env = dataclasses.replace(
        base,
        ncu_path=chosen.path if chosen else None,
        ncu_version=chosen.version if chosen else None,
        backend=chosen_backend,
        backend_reason=reason,
        ncu_problem=ncu_problem,
        cupti_problem=cupti_problem,
        facts=None,
        datasheet=None,
    )
    return _complete(env)


def _read_backend(ncu_problem: str | None, cupti_problem: str | None) -> tuple[str | None, str, str | None, str | None]:
    """(backend, reason, ncu_problem, cupti_problem) from nsight's state in this process."""
    nsight = sys.modules.get("nsight")
    if nsight is None:
        return None, "nsight is not imported", ncu_problem, cupti_problem
    from nsight.collection import ncu as nsight_ncu

    active = nsight.get_active_tool()
    if active == nsight.Tool.NCU:
        return "ncu", "Nsight Compute loaded at `import nsight`", None, cupti_problem
    if nsight_ncu.injection_load_error is not None:
        ncu_problem = first_line(str(nsight_ncu.injection_load_error))
    elif os.environ.get("NSPY_NCU_INIT_AT_IMPORT") == "0":
        ncu_problem = "not tried: NSPY_NCU_INIT_AT_IMPORT=0 at `import nsight`"
    reason = f"Nsight Compute is not active ({ncu_problem})"
    if active == nsight.Tool.CUPTI:
        return "cupti", reason + "; CUPTI backend active (kernel durations only)", ncu_problem, None
    if cupti_problem is None:
        cupti_problem = "not activated: nsight.activate(nsight.Tool.CUPTI) was not called"
    return None, reason + f"; CUPTI not active ({cupti_problem})", ncu_problem, cupti_problem


setup.finish = finish  # type: ignore[attr-defined]


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def banner_lines(env: Environment) -> list[str]:
    """The environment banner as lines (separate from printing, for tests)."""
    lines = []
    if env.has_gpu and env.facts is not None:
        f = env.facts
        lines.append(
            f"GPU          {f.name}  (compute capability {f.compute_capability[0]}.{f.compute_capability[1]}, "
            f"{f.sm_count} SMs, L2 {f.l2_mb:.0f} MB, {f.memory_bytes / 2**30:.0f} GiB)"
        )
        lines.append(f"clocks       max SM {f.max_sm_clock_mhz} MHz, max memory {f.max_mem_clock_mhz} MHz (NVML)")
        sheet = env.datasheet
        if sheet is None:
            lines.append("datasheet    this GPU is not in the table: peaks unknown, use measured ceilings")
        else:
            lines.append(
                f"datasheet    {sheet.gpu}: fp32 {sheet.fp32_tflops}, tf32 {sheet.tf32_tflops}, "
                f"fp16 {sheet.fp16_tflops}, bf16 {sheet.bf16_tflops} TFLOP/s, {sheet.mem_bandwidth_gbs} GB/s"
            )
    else:
        lines.append(f"GPU          none -- {env.gpu_problem}")
        lines.append(f"             {gpu_remedy(env.on_colab)}")
    lines.append(f"driver       {env.driver or '-'}   torch {_package_version('torch')} ({torch_cuda_text(env)})")
    lines.append(
        f"nsight       nsight-python {_package_version('nsight-python')}, "
        f"cupti-python {_package_version('cupti-python')}"
    )
    lines.append(f"ncu          {backend.version_text(env.ncu_version) if env.ncu_path else '-'}  {env.ncu_path or ''}")
    lines.append(f"backend      {env.backend or 'none'} -- {env.backend_reason}")
    lines.append(f"python       {platform.python_version()}  colab: {env.on_colab}")
    if env.workdir is not None:
        lines.append(f"work folder  {env.workdir}  (every file this notebook writes goes here)")
    return lines


def torch_cuda_text(env: Environment) -> str:
    """Which CUDA torch was built for, and what that means on this machine."""
    try:
        import torch  # after `import nsight` (setup); importing torch does not start CUDA
    except ImportError:
        return "not importable"
    cuda = torch.version.cuda
    if cuda is None:
        return "a CPU-only build: it cannot use a GPU"
    if not env.has_gpu:
        return f"built for CUDA {cuda}; unused here: no NVIDIA GPU or driver"
    return f"CUDA {cuda}"


def print_banner(env: Environment) -> None:
    banner(f"Environment  ({env.notebook})")
    for line in banner_lines(env):
        print("  " + line)
