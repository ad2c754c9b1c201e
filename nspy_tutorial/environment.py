"""``ENV``: what setup found and chose, what each section may run (:meth:`Environment.require`: a missing
need ends the section SKIPPED with setup's real reason and the remedy that fits it), and the banner."""

import dataclasses
import platform
from pathlib import Path

from nspy_tutorial import backend
from nspy_tutorial.clock import ClockState
from nspy_tutorial.display import banner, say
from nspy_tutorial.gpu_facts import Datasheet, DeviceFacts
from nspy_tutorial.sections import COUNTERS_CODE, COUNTERS_REMEDY, Skip

GPU_REMEDY = {True: "in Colab: Runtime -> Change runtime type -> T4 GPU, then run the notebook again",
              False: "run on a machine with an NVIDIA GPU and its driver (`nvidia-smi` should list the GPU), "
                     "or open the notebook in Colab with a T4 runtime"}  # by on_colab, as DRIVER_REMEDY
NCU_REMEDY = (f"install Nsight Compute >= 2026.2.1 next to the old one (as root: `sudo bash {backend.installer_path()}`; "
              "on Colab the setup cell does it), then restart the kernel")
CUPTI_REMEDY = "pip install 'nspy-tutorial[cupti]' (the README shows how to install it beside torch), then restart"
DRIVER_REMEDY = {True: "a Colab notebook cannot change the NVIDIA driver: these sections stay skipped on this runtime",
                 False: "update the NVIDIA driver to one this tool supports (its release notes name the minimum; CUDA "
                        "13 tools need R580 or newer), then restart the kernel; until then these sections stay skipped"}
GENERATIONS = {(8, 0): "Ampere or newer: A100, A10G, L4, H100, ...",
               (8, 9): "Ada or Hopper: L4, L40S, RTX 4090, H100, H200, ..."}  # what to run on, by the minimum
NEEDS = {"gpu": "gpu", "profiler": "profiler (either backend)", "ncu": "ncu (the Nsight Compute backend)",
         "ncu-cli": "ncu-cli (ncu on a script)"}  # what a section can require, and plan()'s label for it
LACKED_WITHOUT_GPU = {"gpu": (), "profiler": ("profiler",), "ncu": ("profiler", "ncu", "counters"),
                      "ncu-cli": ("ncu-cli", "counters")}  # no backend, no ncu that works, no counters to read


def remedy(problem: str | None, colab: bool, otherwise: str) -> tuple[str, str | None]:
    """(what to do, the need to record instead of the section's own) for a tool's ``problem``."""
    if COUNTERS_CODE in (problem or ""):
        return COUNTERS_REMEDY, "counters"
    if "driver" in (problem or "").lower():
        return DRIVER_REMEDY[colab], None
    return otherwise, None


@dataclasses.dataclass
class Environment:
    """What setup found (GPU, driver, tools) and chose (backend, ncu command line), and why."""

    notebook: str
    on_colab: bool
    gpu_name: str | None
    gpu_problem: str | None  # why there is no usable GPU
    driver: str | None
    backend: str | None = None  # "ncu", "cupti" or None
    backend_reason: str = ""
    ncu_problem: str | None = None  # why nsight-python's Nsight Compute backend is not active
    cupti_problem: str | None = None  # why the CUPTI backend is not active (if it is not)
    ncu_path: str | None = None  # the ncu command line the fallback sections run: one that passed a probe
    ncu_version: tuple[int, ...] | None = None
    cli_problem: str | None = None  # why there is no such ncu
    driver_cuda: tuple[int, int] | None = None  # the CUDA version the driver supports (NVML)
    probes: list[str] = dataclasses.field(default_factory=list)  # one line per probe, for the banner
    facts: DeviceFacts | None = None
    datasheet: Datasheet | None = None
    workdir: Path | None = None  # every file this notebook writes goes here (sections.enter_workdir)
    clock: ClockState | None = None  # the SM clock before anything was measured: free, or held (and at what)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_problem is None

    def require(self, what: str, also: str = "") -> None:
        """:class:`Skip` unless ``what`` is here: ``gpu``, ``profiler`` (either backend), ``ncu`` (the Nsight Compute
        backend), ``ncu-cli`` (an ncu that works in launch mode); ``also``: a need the section checks later."""
        if what not in NEEDS:
            raise ValueError(f"require(): unknown need {what!r}; use {', '.join(NEEDS)}")
        if not self.has_gpu:
            raise Skip(f"needs a GPU: {self.gpu_problem}", GPU_REMEDY[self.on_colab],
                       needs=("gpu", *LACKED_WITHOUT_GPU[what], also))
        if what == "profiler" and self.backend is None:
            fix, _ = remedy(self.cupti_problem, self.on_colab, CUPTI_REMEDY)
            raise Skip(f"needs an nsight-python backend; Nsight Compute: {self.ncu_problem}; CUPTI: {self.cupti_problem}",
                       fix, needs=what)
        if what == "ncu" and self.backend != "ncu":
            fix, need = remedy(self.ncu_problem, self.on_colab, NCU_REMEDY)
            raise Skip(f"needs nsight-python's Nsight Compute backend; the active backend is {self.backend or 'none'}; "
                       f"Nsight Compute: {self.ncu_problem}", fix, needs=(need, what, "" if self.backend else "profiler"))
        if what == "ncu-cli" and self.ncu_path is None:
            fix, need = remedy(self.cli_problem, self.on_colab, NCU_REMEDY)
            raise Skip(f"needs an ncu command line that works here: {self.cli_problem}", fix, needs=(need, what))

    def require_compute_capability(self, minimum: tuple[int, int], feature: str, also: str = "") -> None:
        """Raise :class:`Skip` unless the GPU's compute capability is at least ``minimum`` (need ``cc8.0``)."""
        need = f"cc{minimum[0]}.{minimum[1]}"
        if not self.has_gpu:
            raise Skip(f"needs a GPU: {self.gpu_problem}", GPU_REMEDY[self.on_colab], needs=("gpu", need, also))
        have = self.facts.compute_capability
        if have < minimum:
            raise Skip(f"{feature} needs compute capability >= {minimum[0]}.{minimum[1]}; this {self.gpu_name} is "
                       f"{have[0]}.{have[1]}", f"run on a GPU of compute capability {minimum[0]}.{minimum[1]} or newer "
                       f"({GENERATIONS.get(minimum, 'a newer generation')}) to see it",
                       needs=need)

    def plan(self) -> list[tuple[str, bool, str]]:
        """(need, met, why) for each need a section can state: what the later notebooks will run here."""
        rows = []
        for need, label in NEEDS.items():
            try:
                self.require(need)
                rows.append((label, True, {"gpu": self.gpu_name, "profiler": self.backend, "ncu": "loaded",
                                           "ncu-cli": self.ncu_path}[need] or ""))
            except Skip as skip:
                rows.append((label, False, f"{skip.reason} -> {skip.remedy}"))
        return rows


def torch_cuda_text() -> str:
    """Which CUDA torch was built for (none: a CPU-only build)."""
    try:
        import torch  # after `import nsight` (setup); importing torch does not start CUDA
    except ImportError:
        return "not importable"
    if torch.version.cuda is None:
        return "a CPU-only build: it cannot use a GPU"
    return f"CUDA {torch.version.cuda}"


def banner_lines(env: Environment) -> list[str]:
    """The banner as lines: GPU, driver, versions, backend and ncu command line with setup's reasons."""
    lines = []
    if env.has_gpu and env.facts is not None:
        f, sheet = env.facts, env.datasheet
        lines.append(f"GPU          {f.name}  (compute capability {f.compute_capability[0]}.{f.compute_capability[1]}, "
                     f"{f.sm_count} SMs, L2 {f.l2_bytes / 2**20:.0f} MB, {f.memory_bytes / 2**30:.0f} GiB)")
        lines.append(f"clocks       max SM {f.max_sm_clock_mhz} MHz, max memory {f.max_mem_clock_mhz} MHz (NVML)")
        if env.clock is not None:
            lines += [f"{'SM clock' if i == 0 else '':13}{line}" for i, line in enumerate(env.clock.lines())]
        lines.append("datasheet    this GPU is not in the table: peaks unknown, use measured ceilings" if sheet is None
                     else f"datasheet    {sheet.gpu}: fp32 {sheet.fp32_tflops}, tf32 {sheet.tf32_tflops}, fp16 "
                          f"{sheet.fp16_tflops}, bf16 {sheet.bf16_tflops} TFLOP/s, {sheet.mem_bandwidth_gbs} GB/s")
    else:
        lines += [f"GPU          none -- {env.gpu_problem}", f"             {GPU_REMEDY[env.on_colab]}"]
    cuda = f" (supports CUDA {env.driver_cuda[0]}.{env.driver_cuda[1]})" if env.driver_cuda else ""
    torch = f"torch {backend.installed('torch') or 'not installed'} ({torch_cuda_text()})"
    lines.append(f"driver       {env.driver or '-'}{cuda}   {torch}")
    lines.append("nsight       " + ", ".join(f"{name} {backend.installed(name) or 'not installed'}"
                                             for name in backend.pins()))
    lines.append(f"backend      {env.backend or 'none'} -- {env.backend_reason}")
    lines.append(f"ncu CLI      {backend.version_text(env.ncu_version)}  {env.ncu_path}" if env.ncu_path
                 else f"ncu CLI      none -- {env.cli_problem or 'no ncu found'}")
    lines += [f"  tried      {line}" for line in env.probes]
    lines.append(f"python       {platform.python_version()}  colab: {env.on_colab}")
    if env.workdir is not None:
        lines.append(f"work folder  {env.workdir}  (every file this notebook writes goes here)")
    return lines


def print_banner(env: Environment) -> None:
    banner(f"Environment  ({env.notebook})")
    for line in banner_lines(env):
        say(line, "  ", " " * 15)
