"""Specification of :class:`nspy_tutorial.environment.Environment`: what a section may run, and the banner.

Environments are built by hand here (``make_env``); how ``setup`` fills one in on each kind of
machine is ``test_what_runs_where.py``.
"""

from __future__ import annotations

import sys
import types

import pytest

from nspy_tutorial import bootstrap, environment, sections
from nspy_tutorial.backend import NcuInstall
from nspy_tutorial.environment import Environment, banner_lines
from nspy_tutorial.gpu_facts import DeviceFacts, datasheet_for
from nspy_tutorial.sections import Skip

OLD_NCU = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
NEW_NCU = NcuInstall("/opt/nvidia/nsight-compute/2026.2.1/ncu", (2026, 2, 1, 0))
NO_GPU = bootstrap.Gpu(None, None, None, "no NVIDIA driver or GPU found (test)")


@pytest.fixture(autouse=True)
def fresh_bootstrap(monkeypatch: pytest.MonkeyPatch):
    bootstrap._ENV = None
    monkeypatch.setenv("NSPY_NCU_INIT_AT_IMPORT", "0")
    for name in ("NSPY_TUTORIAL_BACKEND", "COLAB_RELEASE_TAG", "NSPY_TUTORIAL_STRICT", "NSPY_TUTORIAL_REQUIRE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sections, "_RECORDS", {})
    yield
    bootstrap._ENV = None


def facts(name: str = "Tesla T4", cc: tuple[int, int] = (7, 5)) -> DeviceFacts:
    return DeviceFacts(name=name, compute_capability=cc, sm_count=40, l2_bytes=4 * 2**20, memory_bytes=15 * 2**30,
                       max_sm_clock_mhz=1590, max_mem_clock_mhz=5001)


def make_env(**overrides: object) -> Environment:
    """An Environment with a GPU, the Nsight Compute backend and its ncu command line, unless overridden."""
    fields: dict[str, object] = dict(
        notebook="99_test", on_colab=False, gpu_name="Tesla T4", gpu_problem=None, driver="580.82.07",
        driver_cuda=(13, 0), ncu_path=NEW_NCU.path, ncu_version=NEW_NCU.version, backend="ncu",
        backend_reason="the Nsight Compute backend profiled a kernel in a child process", ncu_problem=None,
        cupti_problem="cupti-python is not installed", facts=facts(), datasheet=None)
    fields.update(overrides)
    return Environment(**fields)  # type: ignore[arg-type]


def run_setup_without_gpu(monkeypatch: pytest.MonkeyPatch, notebook: str = "01_first") -> Environment:
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: NO_GPU)
    monkeypatch.setattr(bootstrap.backend, "find_ncu_installs", lambda *a, **k: [])
    return bootstrap.setup(notebook)


# --------------------------------------------------------------------------
# Environment.require
# --------------------------------------------------------------------------


def test_require_gpu_without_gpu_on_colab_skips_with_the_change_runtime_type_remedy():
    env = make_env(on_colab=True, gpu_name=None, gpu_problem="NVML sees no GPU", facts=None, backend=None)
    with pytest.raises(Skip) as skipped:
        env.require("gpu")
    assert skipped.value.needs == "gpu"
    assert "NVML sees no GPU" in skipped.value.reason
    assert "Change runtime type" in skipped.value.remedy


def test_require_gpu_without_gpu_outside_colab_points_at_a_gpu_machine_not_the_colab_menu():
    env = make_env(on_colab=False, gpu_name=None, gpu_problem="NVML sees no GPU", facts=None, backend=None)
    with pytest.raises(Skip) as skipped:
        env.require("gpu")
    assert "Runtime ->" not in skipped.value.remedy
    assert "NVIDIA GPU" in skipped.value.remedy and "nvidia-smi" in skipped.value.remedy


@pytest.mark.parametrize("need", ["profiler", "ncu", "ncu-cli"])
def test_every_need_without_gpu_skips_as_needing_a_gpu(need):
    env = make_env(gpu_problem="NVML sees no GPU", backend=None, ncu_path=None)
    with pytest.raises(Skip) as skipped:
        env.require(need)
    assert skipped.value.needs == "gpu"


def test_require_profiler_without_backend_skips_naming_both_backends_problems():
    env = make_env(backend=None, ncu_problem="ncu too old", cupti_problem="cupti-python is not installed")
    with pytest.raises(Skip) as skipped:
        env.require("profiler")
    assert skipped.value.needs == "profiler"
    assert "ncu too old" in skipped.value.reason
    assert "cupti-python is not installed" in skipped.value.reason


def test_require_profiler_with_the_cupti_backend_passes():
    make_env(backend="cupti", ncu_problem="ncu too old").require("profiler")


def test_require_ncu_with_the_cupti_backend_skips_naming_why_nsight_compute_did_not_load():
    why = "/usr/local/cuda/bin/ncu is 2025.3.1.0; nsight-python needs 2026.2.1.0 or newer"
    env = make_env(backend="cupti", ncu_problem=why, cupti_problem=None)
    with pytest.raises(Skip) as skipped:
        env.require("ncu")
    assert skipped.value.needs == "ncu"
    assert "the active backend is cupti" in skipped.value.reason
    assert why in skipped.value.reason
    assert "2026.2.1" in skipped.value.remedy


def test_require_ncu_with_the_ncu_backend_passes():
    env = make_env(backend="ncu")
    env.require("gpu")
    env.require("profiler")
    env.require("ncu")
    env.require("ncu-cli")


def test_require_ncu_cli_without_any_ncu_skips():
    env = make_env(backend="cupti", ncu_path=None, ncu_version=None)
    with pytest.raises(Skip) as skipped:
        env.require("ncu-cli")
    assert skipped.value.needs == "ncu-cli"


def test_require_an_unknown_need_raises_value_error():
    with pytest.raises(ValueError, match="'tpu'"):
        make_env().require("tpu")


def test_require_compute_capability_on_an_older_device_skips_naming_both_capabilities():
    env = make_env(gpu_name="Tesla T4", facts=facts("Tesla T4", (7, 5)))
    with pytest.raises(Skip) as skipped:
        env.require_compute_capability((8, 0), "TF32")
    reason = skipped.value.reason
    assert "TF32" in reason
    assert ">= 8.0" in reason
    assert "7.5" in reason
    assert skipped.value.needs == "cc8.0"


@pytest.mark.parametrize(("name", "cc"), [("NVIDIA H200", (9, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0))])
def test_require_compute_capability_at_or_above_the_minimum_passes(name, cc):
    env = make_env(gpu_name=name, facts=facts(name, cc))
    env.require_compute_capability((8, 0), "TF32")


def test_require_compute_capability_without_gpu_skips_as_needing_a_gpu():
    env = make_env(gpu_problem="NVML sees no GPU", facts=None)
    with pytest.raises(Skip) as skipped:
        env.require_compute_capability((8, 0), "TF32")
    assert skipped.value.needs == "gpu"
    assert skipped.value.lacks == ("gpu", "cc8.0")


NO_GPU_ENV = dict(gpu_name=None, gpu_problem="NVML sees no GPU", facts=None, backend=None, ncu_path=None)


def test_needs_a_section_checks_itself_are_missing_too_without_a_gpu():
    env = make_env(**NO_GPU_ENV)
    with pytest.raises(Skip) as skipped:
        env.require("profiler", also="cupti")
    assert skipped.value.lacks == ("gpu", "profiler", "cupti")
    with pytest.raises(Skip) as skipped:
        env.require_compute_capability((7, 0), "torch.compile", also="triton")
    assert skipped.value.lacks == ("gpu", "cc7.0", "triton")


def test_needs_a_section_checks_itself_are_left_to_it_on_a_gpu():
    make_env(backend="cupti").require("profiler", also="cupti")  # no Skip: the section decides
    make_env().require_compute_capability((7, 0), "torch.compile", also="triton")


@pytest.mark.parametrize(
    ("overrides", "need", "lacks"),
    [
        (NO_GPU_ENV, "gpu", ("gpu",)),
        (NO_GPU_ENV, "profiler", ("gpu", "profiler")),
        (NO_GPU_ENV, "ncu", ("gpu", "profiler", "ncu", "counters")),
        (NO_GPU_ENV, "ncu-cli", ("gpu", "ncu-cli", "counters")),
        ({**NO_GPU_ENV, "ncu_path": OLD_NCU.path}, "ncu-cli", ("gpu", "ncu-cli", "counters")),  # nothing to profile
        (dict(backend=None), "ncu", ("ncu", "profiler")),  # the reason stays "ncu", as the card groups it
        (dict(backend=None), "profiler", ("profiler",)),
        (dict(backend="cupti"), "ncu", ("ncu",)),
        (dict(backend="cupti", ncu_path=None), "ncu-cli", ("ncu-cli",)),
    ],
)
def test_a_skip_names_every_need_the_section_lacks_the_reason_first(overrides, need, lacks):
    env = make_env(**overrides)
    with pytest.raises(Skip) as skipped:
        env.require(need)
    assert skipped.value.lacks == lacks
    assert skipped.value.needs == lacks[0]


@pytest.mark.parametrize(
    ("required", "section_needs"),
    [("ncu", "ncu"), ("profiler", "profiler"), ("cc8.0", "cc8.0"), ("counters", "ncu-cli"), ("gpu", "ncu"),
     ("triton", "triton"), ("cupti", "cupti")],
)
def test_a_required_need_fails_the_section_without_a_gpu_too(monkeypatch, capsys, required, section_needs):
    """The issue: NSPY_TUTORIAL_REQUIRE=cc8.0, ncu or profiler passed with every section SKIPPED for `gpu`."""
    env = run_setup_without_gpu(monkeypatch)
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", required)
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with pytest.raises(sections.ClaimFailed, match=f"required `{required}` is missing: needs a GPU"):
        with sections.section("1. Needs it") as s:
            if section_needs.startswith("cc"):
                env.require_compute_capability((8, 0), "TF32")
            elif section_needs == "triton":  # 07: torch.compile needs Triton on cc >= 7.0
                env.require_compute_capability((7, 0), "torch.compile", also="triton")
            elif section_needs == "cupti":  # 09: CUPTI in this process or in a child
                env.require("profiler", also="cupti")
            else:
                env.require(section_needs)
            s.result = "ran"
    (record,) = sections.records()
    assert (record.status, record.needs) == ("FAILED", "gpu")


def test_a_need_the_section_does_not_have_stays_skipped_without_a_gpu(monkeypatch):
    env = run_setup_without_gpu(monkeypatch)
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu,cc8.0")
    with sections.section("1. Needs a profiler") as s:
        env.require("profiler")
        s.result = "ran"
    assert [r.status for r in sections.records()] == ["SKIPPED"]



def fake_torch_build(cuda: str | None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(cuda=cuda)  # type: ignore[attr-defined]
    return torch


@pytest.mark.parametrize(
    ("cuda", "has_gpu", "text"),
    [
        (None, False, "(a CPU-only build: it cannot use a GPU)"),
        ("13.0", True, "(CUDA 13.0)"),
    ],
)
def test_banner_says_what_torchs_cuda_means_here(monkeypatch, cuda, has_gpu, text):
    monkeypatch.setitem(sys.modules, "torch", fake_torch_build(cuda))
    env = make_env() if has_gpu else make_env(gpu_problem="NVML sees no GPU", facts=None, backend=None)
    driver_line = next(line for line in banner_lines(env) if line.startswith("driver"))
    assert driver_line.endswith(text)
    assert "CUDA -" not in driver_line


# --------------------------------------------------------------------------
# banner_lines
# --------------------------------------------------------------------------


def test_banner_lines_for_an_unknown_gpu_say_peaks_unknown():
    env = make_env(gpu_name="NVIDIA Future GPU", facts=facts("NVIDIA Future GPU", (12, 0)), datasheet=None)
    lines = banner_lines(env)
    assert lines[0].startswith("GPU          NVIDIA Future GPU  (compute capability 12.0, 40 SMs, L2 4 MB, 15 GiB)")
    assert any("not in the table: peaks unknown" in line for line in lines)


def test_banner_lines_give_the_l2_and_the_memory_in_binary_units():
    h200 = DeviceFacts("NVIDIA H200", (9, 0), 132, 60 * 2**20, 141 * 2**30, 1980, 3201)
    assert "L2 60 MB, 141 GiB" in banner_lines(make_env(gpu_name="NVIDIA H200", facts=h200))[0]


def test_banner_lines_for_a_known_gpu_give_its_datasheet_peaks():
    env = make_env(datasheet=datasheet_for("Tesla T4"))
    lines = banner_lines(env)
    datasheet_line = next(line for line in lines if line.startswith("datasheet"))
    assert "T4: fp32 8.1, tf32 n/a, fp16 65, bf16 n/a TFLOP/s, 320 GB/s" in datasheet_line


def test_banner_lines_show_the_backend_the_ncu_command_line_and_the_driver_with_its_cuda():
    lines = banner_lines(make_env(probes=["Nsight Compute backend with x: works: x + 1: 2.0 us (1.0 s)"]))
    assert f"ncu CLI      2026.2.1.0  {NEW_NCU.path}" in lines
    assert "backend      ncu -- the Nsight Compute backend profiled a kernel in a child process" in lines
    assert "  tried      Nsight Compute backend with x: works: x + 1: 2.0 us (1.0 s)" in lines
    assert any(line.startswith("driver       580.82.07 (supports CUDA 13.0)") for line in lines)


def test_banner_lines_say_why_there_is_no_ncu_command_line():
    lines = banner_lines(make_env(ncu_path=None, ncu_version=None, cli_problem="/x/ncu: ==ERROR== oops"))
    assert "ncu CLI      none -- /x/ncu: ==ERROR== oops" in lines




def test_the_plan_says_per_need_what_a_section_would_say():
    env = make_env(backend="cupti", ncu_problem="not tried: NSPY_TUTORIAL_BACKEND=cupti", ncu_path=None,
                   cli_problem="no ncu on PATH or under /opt/nvidia/nsight-compute")
    plan = {label.split()[0]: (met, why) for label, met, why in env.plan()}
    assert plan["gpu"] == (True, "Tesla T4") and plan["profiler"] == (True, "cupti")
    with pytest.raises(Skip) as ncu:
        env.require("ncu")
    assert plan["ncu"] == (False, f"{ncu.value.reason} -> {ncu.value.remedy}")
    assert plan["ncu-cli"][0] is False and "no ncu on PATH" in plan["ncu-cli"][1]


@pytest.mark.parametrize(("problem", "remedy", "need"), [
    ("it failed in a child process: ==ERROR== Cuda driver is not compatible with Nsight Compute",
     environment.DRIVER_REMEDY[False], None),
    ("it failed in a child process: ==ERROR== ERR_NVGPUCTRPERM - no permission", sections.COUNTERS_REMEDY, "counters"),
    ("not tried: the newest ncu here, /x/ncu, is 2025.3.1.0; nsight-python needs 2026.2.1.0 or newer",
     environment.NCU_REMEDY, None),
])
def test_the_remedy_fits_the_reason_the_tool_failed(problem, remedy, need):
    assert environment.remedy(problem, False, environment.NCU_REMEDY) == (remedy, need)


def test_on_colab_a_driver_problem_says_the_driver_cannot_be_changed_from_a_notebook():
    fix, _ = environment.remedy("CUPTI 13.4 needs a driver for CUDA 13", True, environment.CUPTI_REMEDY)
    assert "cannot change the NVIDIA driver" in fix
