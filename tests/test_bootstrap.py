"""Specification of the bootstrap (``nspy_tutorial.bootstrap``) on a CPU-only machine.

Hardware is faked: ``probe_gpu``, ``backend.find_ncu_installs``, NVML and torch are
replaced where a test needs a GPU or ncu; ``setup`` itself runs for real with no GPU.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

from nspy_tutorial import backend, bootstrap, sections
from nspy_tutorial.backend import NcuInstall
from nspy_tutorial.bootstrap import CudaAlreadyInitialised, Environment, banner_lines, decide_ncu
from nspy_tutorial.gpu_facts import DeviceFacts, datasheet_for
from nspy_tutorial.sections import Skip

OLD_NCU = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
NEW_NCU = NcuInstall("/opt/nvidia/nsight-compute/2026.2.1/ncu", (2026, 2, 1, 0))
NO_GPU = (None, None, "no NVIDIA driver or GPU found (test)")


@pytest.fixture(autouse=True)
def fresh_bootstrap(monkeypatch: pytest.MonkeyPatch):
    """No cached Environment; environment variables setup() reads or writes restored."""
    old_notebook = sections._NOTEBOOK["name"]
    bootstrap._ENV = bootstrap._PENDING = None
    # setenv first so that monkeypatch restores (or removes) what setup() writes.
    monkeypatch.setenv("NSPY_NCU_INIT_AT_IMPORT", "0")
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    for name in ("NSPY_TUTORIAL_BACKEND", "COLAB_RELEASE_TAG", "NSPY_TUTORIAL_STRICT", "NSPY_TUTORIAL_REQUIRE"):
        monkeypatch.delenv(name, raising=False)
    yield
    bootstrap._ENV = bootstrap._PENDING = None
    sections.set_notebook(old_notebook)


def facts(name: str = "Tesla T4", cc: tuple[int, int] = (7, 5)) -> DeviceFacts:
    return DeviceFacts(
        name=name,
        compute_capability=cc,
        sm_count=40,
        l2_bytes=4 * 2**20,
        memory_bytes=15 * 2**30,
        max_sm_clock_mhz=1590,
        max_mem_clock_mhz=5001,
    )


def make_env(**overrides: object) -> Environment:
    """An Environment with a GPU and the Nsight Compute backend, unless overridden."""
    fields: dict[str, object] = dict(
        notebook="99_test",
        on_colab=False,
        gpu_name="Tesla T4",
        gpu_problem=None,
        driver="580.00",
        ncu_path=NEW_NCU.path,
        ncu_version=NEW_NCU.version,
        backend="ncu",
        backend_reason="Nsight Compute loaded at `import nsight`",
        ncu_problem=None,
        cupti_problem="cupti-python is not installed",
        facts=facts(),
        datasheet=None,
    )
    fields.update(overrides)
    return Environment(**fields)  # type: ignore[arg-type]


def run_setup_without_gpu(monkeypatch: pytest.MonkeyPatch, notebook: str = "01_first") -> Environment:
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: NO_GPU)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [])
    return bootstrap.setup(notebook)


# --------------------------------------------------------------------------
# decide_ncu
# --------------------------------------------------------------------------


def test_decide_ncu_without_gpu_says_no_gpu_but_still_reports_the_ncu_found():
    assert decide_ncu([OLD_NCU], has_gpu=False) == (OLD_NCU, "no GPU")


def test_decide_ncu_without_any_ncu_says_where_it_looked():
    chosen, problem = decide_ncu([], has_gpu=True)
    assert chosen is None
    assert problem == "no ncu on PATH or under /opt/nvidia/nsight-compute"


def test_decide_ncu_with_too_old_ncu_names_its_path_and_both_versions():
    chosen, problem = decide_ncu([OLD_NCU], has_gpu=True)
    assert chosen == OLD_NCU
    assert problem is not None
    assert OLD_NCU.path in problem
    assert "2025.3.1.0" in problem
    assert "2026.2.1.0" in problem


def test_decide_ncu_with_a_new_enough_ncu_has_no_problem():
    assert decide_ncu([OLD_NCU, NEW_NCU], has_gpu=True) == (NEW_NCU, None)


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
    make_env(backend="cupti").require("profiler", also=("cupti", "triton"))  # no Skip: the section decides
    make_env().require_compute_capability((7, 0), "torch.compile", also="triton")


def test_an_unknown_need_in_also_raises_value_error():
    with pytest.raises(ValueError, match="'tritno'"):
        make_env(**NO_GPU_ENV).require("profiler", also="tritno")


@pytest.mark.parametrize(
    ("overrides", "need", "lacks"),
    [
        (NO_GPU_ENV, "gpu", ("gpu",)),
        (NO_GPU_ENV, "profiler", ("gpu", "profiler")),
        (NO_GPU_ENV, "ncu", ("gpu", "profiler", "ncu", "counters")),
        (NO_GPU_ENV, "ncu-cli", ("gpu", "ncu-cli", "counters")),
        ({**NO_GPU_ENV, "ncu_path": OLD_NCU.path}, "ncu-cli", ("gpu", "counters")),  # an ncu, but nothing to profile
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
    assert sorted(env.lacks(need)) == sorted(lacks)


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
    sections.reset()
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
    sections.reset()


def test_a_need_the_section_does_not_have_stays_skipped_without_a_gpu(monkeypatch):
    env = run_setup_without_gpu(monkeypatch)
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu,cc8.0")
    sections.reset()
    with sections.section("1. Needs a profiler") as s:
        env.require("profiler")
        s.result = "ran"
    assert [r.status for r in sections.records()] == ["SKIPPED"]
    sections.reset()


# --------------------------------------------------------------------------
# Probing without CUDA
# --------------------------------------------------------------------------


def fake_torch(initialised: bool) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialised)  # type: ignore[attr-defined]
    return torch


@pytest.mark.parametrize("initialised", [True, False])
def test_cuda_already_initialised_asks_the_imported_torch(monkeypatch, initialised):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(initialised))
    assert bootstrap.cuda_already_initialised() is initialised


def test_cuda_is_not_initialised_when_torch_is_not_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert bootstrap.cuda_already_initialised() is False


def fake_pynvml(count: int = 1, init_error: Exception | None = None) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")

    def init() -> None:
        if init_error is not None:
            raise init_error

    nvml.nvmlInit = init  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetName = lambda handle: b"Tesla T4"  # type: ignore[attr-defined]
    nvml.nvmlSystemGetDriverVersion = lambda: "580.00"  # type: ignore[attr-defined]
    return nvml


def test_probe_gpu_reads_name_and_driver_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert bootstrap.probe_gpu() == ("Tesla T4", "580.00", None)


def test_probe_gpu_names_the_gpu_cuda_visible_devices_picks_not_nvml_device_0(monkeypatch):
    nvml = fake_pynvml(count=2)
    nvml.nvmlDeviceGetName = lambda handle: [b"NVIDIA A100-SXM4-80GB", b"NVIDIA H100 80GB HBM3"][handle[1]]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert bootstrap.probe_gpu()[0] == "NVIDIA H100 80GB HBM3"


def test_probe_gpu_with_no_device_says_nvml_sees_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    assert bootstrap.probe_gpu() == (None, None, "NVML sees no GPU")


def test_probe_gpu_without_a_driver_reports_the_error_instead_of_raising(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=OSError("libnvidia-ml.so.1 missing")))
    name, driver, problem = bootstrap.probe_gpu()
    assert (name, driver) == (None, None)
    assert problem is not None and "OSError: libnvidia-ml.so.1 missing" in problem


def test_on_colab_is_read_from_the_colab_release_tag(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert bootstrap.on_colab() is False
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20250101")
    assert bootstrap.on_colab() is True


# --------------------------------------------------------------------------
# setup()
# --------------------------------------------------------------------------


def test_setup_refuses_when_cuda_is_already_initialised(monkeypatch):
    monkeypatch.setattr(bootstrap, "cuda_already_initialised", lambda: True)
    probed = []
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: probed.append(1) or NO_GPU)
    with pytest.raises(CudaAlreadyInitialised, match="Restart"):
        bootstrap.setup("01_first")
    assert probed == []
    assert bootstrap._ENV is None


def test_setup_without_gpu_returns_an_environment_with_no_backend(monkeypatch, capsys):
    env = run_setup_without_gpu(monkeypatch)
    assert env.notebook == "01_first"
    assert env.has_gpu is False
    assert env.gpu_problem == NO_GPU[2]
    assert env.backend is None
    assert env.cupti_problem == "no GPU"
    assert env.ncu_problem
    assert env.facts is None and env.datasheet is None
    out = capsys.readouterr().out
    assert "nvidia-smi" in out and "Change runtime type" not in out


def test_setup_without_gpu_tells_nsight_not_to_load_nsight_compute(monkeypatch):
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    run_setup_without_gpu(monkeypatch)
    assert os.environ["NSPY_NCU_INIT_AT_IMPORT"] == "0"


def test_setup_without_gpu_banner_lines_give_the_remedy_for_where_the_reader_is(monkeypatch):
    env = run_setup_without_gpu(monkeypatch)
    lines = banner_lines(env)
    assert lines[0] == f"GPU          none -- {NO_GPU[2]}"
    assert lines[1].strip() == bootstrap.LOCAL_GPU_HINT
    assert any(line.startswith("backend      none") for line in lines)
    env.on_colab = True
    assert banner_lines(env)[1].strip() == bootstrap.COLAB_GPU_HINT


def test_setup_works_in_the_notebooks_own_folder_and_the_banner_names_it(monkeypatch, tmp_path):
    monkeypatch.setenv("NSPY_TUTORIAL_WORKDIR", str(tmp_path))
    env = run_setup_without_gpu(monkeypatch)
    assert env.workdir == tmp_path / env.notebook
    assert os.getcwd() == str(env.workdir)
    assert f"work folder  {env.workdir}  (every file this notebook writes goes here)" in banner_lines(env)


def fake_torch_build(cuda: str | None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(cuda=cuda)  # type: ignore[attr-defined]
    return torch


@pytest.mark.parametrize(
    ("cuda", "has_gpu", "text"),
    [
        (None, False, "(a CPU-only build: it cannot use a GPU)"),
        ("13.0", False, "(built for CUDA 13.0; unused here: no NVIDIA GPU or driver)"),
        ("13.0", True, "(CUDA 13.0)"),
    ],
)
def test_banner_says_what_torchs_cuda_means_here(monkeypatch, cuda, has_gpu, text):
    monkeypatch.setitem(sys.modules, "torch", fake_torch_build(cuda))
    env = make_env() if has_gpu else make_env(gpu_problem="NVML sees no GPU", facts=None, backend=None)
    driver_line = next(line for line in banner_lines(env) if line.startswith("driver"))
    assert driver_line.endswith(text)
    assert "CUDA -" not in driver_line


@pytest.mark.parametrize("value", ["cupti", "CUPTI", " Cupti ", ""])
def test_backend_choice_accepts_cupti_or_nothing(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_BACKEND", value)
    assert bootstrap.backend_choice() == value.strip().lower()


@pytest.mark.parametrize("value", ["bogus", "ncu2", "nsys"])
def test_setup_rejects_an_unknown_backend_naming_the_valid_ones(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_BACKEND", value)
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: pytest.fail("setup went on to probe the GPU"))
    with pytest.raises(sections.SettingError) as raised:
        bootstrap.setup("01_first")
    assert f"NSPY_TUTORIAL_BACKEND={value!r}" in str(raised.value)
    assert "valid: cupti" in str(raised.value) and "unset/empty" in str(raised.value)
    assert bootstrap._ENV is None


def test_setup_names_the_notebook_for_the_section_records(monkeypatch):
    run_setup_without_gpu(monkeypatch, "07_memory")
    assert sections._NOTEBOOK["name"] == "07_memory"


def test_setup_twice_returns_the_same_environment_renamed(monkeypatch, capsys):
    first = run_setup_without_gpu(monkeypatch, "01_first")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: pytest.fail("setup probed the GPU again"))
    second = bootstrap.setup("02_second")
    assert second is first
    assert second.notebook == "02_second"
    assert sections._NOTEBOOK["name"] == "02_second"
    assert "Environment  (02_second)" in capsys.readouterr().out


def test_setup_with_cupti_forced_says_nsight_compute_was_not_tried(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_BACKEND", "CUPTI")
    env = run_setup_without_gpu(monkeypatch)
    assert env.ncu_problem == "not tried: NSPY_TUTORIAL_BACKEND=cupti"
    assert env.backend is None


# --------------------------------------------------------------------------
# banner_lines
# --------------------------------------------------------------------------


def test_banner_lines_for_an_unknown_gpu_say_peaks_unknown():
    env = make_env(gpu_name="NVIDIA Future GPU", facts=facts("NVIDIA Future GPU", (12, 0)), datasheet=None)
    lines = banner_lines(env)
    assert lines[0].startswith("GPU          NVIDIA Future GPU  (compute capability 12.0, 40 SMs, L2 4 MB, 15 GiB)")
    assert any("not in the table: peaks unknown" in line for line in lines)


def test_banner_lines_for_a_known_gpu_give_its_datasheet_peaks():
    env = make_env(datasheet=datasheet_for("Tesla T4"))
    lines = banner_lines(env)
    datasheet_line = next(line for line in lines if line.startswith("datasheet"))
    assert "T4: fp32 8.1, tf32 n/a, fp16 65, bf16 n/a TFLOP/s, 320 GB/s" in datasheet_line


def test_banner_lines_show_the_ncu_version_path_and_backend():
    lines = banner_lines(make_env())
    assert f"ncu          2026.2.1.0  {NEW_NCU.path}" in lines
    assert "backend      ncu -- Nsight Compute loaded at `import nsight`" in lines


# --------------------------------------------------------------------------
# setup(steps="manual") and setup.finish(): notebook 01 does the steps in its cells
# --------------------------------------------------------------------------


def fake_nsight(active: str | None, load_error: Exception | None = None) -> dict[str, types.ModuleType]:
    """sys.modules entries for an imported nsight whose active tool is ``active``."""
    nsight = types.ModuleType("nsight")
    tool = types.SimpleNamespace(NCU="ncu", CUPTI="cupti")
    nsight.Tool = tool  # type: ignore[attr-defined]
    nsight.get_active_tool = lambda: {"ncu": tool.NCU, "cupti": tool.CUPTI, None: None}[active]  # type: ignore[attr-defined]
    collection = types.ModuleType("nsight.collection")
    ncu = types.ModuleType("nsight.collection.ncu")
    ncu.injection_load_error = load_error  # type: ignore[attr-defined]
    collection.ncu = ncu  # type: ignore[attr-defined]
    return {"nsight": nsight, "nsight.collection": collection, "nsight.collection.ncu": ncu}


def test_setup_rejects_unknown_steps(monkeypatch):
    with pytest.raises(ValueError, match="'all'"):
        bootstrap.setup("01_first", steps="all")


def test_manual_setup_only_probes_and_prints_no_banner(monkeypatch, capsys):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab")  # even on Colab: nothing is installed
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("Tesla T4", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU])
    forbidden = lambda *a, **k: pytest.fail("manual setup must not install, preload or read device facts")
    monkeypatch.setattr(bootstrap, "install_ncu_on_colab", forbidden)
    monkeypatch.setattr(backend, "preload_cupti", forbidden)
    monkeypatch.setattr(backend, "put_first_on_path", forbidden)
    monkeypatch.setattr(bootstrap, "device_facts", forbidden)
    env = bootstrap.setup("01_install_ncu", steps="manual")
    out = capsys.readouterr().out
    assert env.has_gpu and env.backend is None and env.facts is None
    assert env.ncu_path == OLD_NCU.path and "2025.3.1.0" in (env.ncu_problem or "")
    assert "Environment  (" not in out and "probed only" in out
    assert "NSPY_NCU_INIT_AT_IMPORT" not in os.environ  # not even this: the notebook decides
    assert bootstrap._ENV is None and bootstrap._PENDING is env


def test_setup_with_only_an_old_ncu_does_not_let_nsight_try_it(monkeypatch):
    """nsight-python's attempt would only fail (ncu older than 2026.2.1) and costs a second per import."""
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("NVIDIA H200", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU])
    monkeypatch.setattr(backend, "cupti_python_available", lambda: False)
    for name, module in fake_nsight(None).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts("NVIDIA H200", (9, 0)))
    env = bootstrap.setup("02_first_profile")
    assert os.environ["NSPY_NCU_INIT_AT_IMPORT"] == "0"
    assert env.backend is None
    assert env.ncu_problem == (f"{OLD_NCU.path} is 2025.3.1.0; nsight-python needs 2026.2.1.0 or newer; "
                               "not tried at `import nsight`")


def test_setup_with_a_new_ncu_lets_nsight_load_it_at_import(monkeypatch):
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("Tesla T4", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [NEW_NCU])
    monkeypatch.setattr(backend, "put_first_on_path", lambda directory: None)
    for name, module in fake_nsight("ncu").items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts())
    env = bootstrap.setup("02_first_profile")
    assert "NSPY_NCU_INIT_AT_IMPORT" not in os.environ
    assert (env.backend, env.ncu_problem) == ("ncu", None)


def test_finish_without_manual_setup_says_what_to_call():
    with pytest.raises(RuntimeError, match='steps="manual"'):
        bootstrap.setup.finish()


def test_finish_with_a_gpu_refuses_before_nsight_is_imported(monkeypatch):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("Tesla T4", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [])
    bootstrap.setup("01_install_ncu", steps="manual")
    monkeypatch.delitem(sys.modules, "nsight", raising=False)
    with pytest.raises(RuntimeError, match="import nsight"):
        bootstrap.setup.finish()


def test_finish_records_the_cupti_backend_the_cells_activated(monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("NVIDIA H200", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU])
    bootstrap.setup("01_install_ncu", steps="manual")
    capsys.readouterr()
    error = RuntimeError("NVIDIA Nsight Compute 2026.2.1.0 or later is required, but found 2025.3.1.0.\nmore")
    for name, module in fake_nsight("cupti", error).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts("NVIDIA H200", (9, 0)))
    env = bootstrap.setup.finish()
    out = capsys.readouterr().out
    assert env.backend == "cupti" and env.cupti_problem is None
    assert env.ncu_problem == "NVIDIA Nsight Compute 2026.2.1.0 or later is required, but found 2025.3.1.0."
    assert "CUPTI backend active" in env.backend_reason
    assert env.facts is not None and env.datasheet is not None and env.datasheet.gpu == "H200 SXM"
    assert out.count("Environment  (01_install_ncu)") == 1
    assert bootstrap._ENV is env and bootstrap._PENDING is None


def test_finish_records_nsight_compute_when_it_loaded(monkeypatch):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("Tesla T4", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [NEW_NCU])
    bootstrap.setup("01_install_ncu", steps="manual")
    for name, module in fake_nsight("ncu").items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts())
    env = bootstrap.setup.finish()
    assert (env.backend, env.ncu_problem, env.ncu_path) == ("ncu", None, NEW_NCU.path)


def test_finish_says_nsight_compute_was_not_tried_with_init_at_import_0(monkeypatch):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: ("Tesla T4", "580.00", None))
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [NEW_NCU])
    monkeypatch.setattr(backend, "cupti_python_available", lambda: True)
    monkeypatch.setattr(backend, "find_cupti_library", lambda: backend.CuptiLibrary("/x/libcupti.so.13", (13, 4, 0)))
    bootstrap.setup("01_install_ncu", steps="manual")
    for name, module in fake_nsight(None).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts())
    env = bootstrap.setup.finish()  # the fixture set NSPY_NCU_INIT_AT_IMPORT=0
    assert env.backend is None
    assert env.ncu_problem == "not tried: NSPY_NCU_INIT_AT_IMPORT=0 at `import nsight`"
    assert env.cupti_problem == "not activated: nsight.activate(nsight.Tool.CUPTI) was not called"


def test_finish_without_gpu_gives_no_backend_and_the_remedy_for_where_the_reader_is(monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: NO_GPU)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [])
    bootstrap.setup("01_install_ncu", steps="manual")
    env = bootstrap.setup.finish()
    assert env.backend is None and env.cupti_problem == "no GPU" and env.facts is None
    assert bootstrap.gpu_remedy(env.on_colab) in capsys.readouterr().out


def test_manual_setup_again_after_finish_returns_the_environment_without_a_banner(monkeypatch, capsys):
    env = run_setup_without_gpu(monkeypatch, "01_install_ncu")
    capsys.readouterr()
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: pytest.fail("probed again"))
    assert bootstrap.setup("01_install_ncu", steps="manual") is env
    out = capsys.readouterr().out
    assert "Environment  (" not in out and "already set up" in out


# --------------------------------------------------------------------------
# warm_up: the runner's head start on setup (in a fresh interpreter each, as in a new kernel)
# --------------------------------------------------------------------------

WARM_THEN_SETUP = """
import contextlib, io, json, sys
from nspy_tutorial import bootstrap
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    loaded = bootstrap.warm_up() if sys.argv[1] == "warm" else []
import torch
cuda_started = torch.cuda.is_initialized()
with contextlib.redirect_stdout(io.StringIO()):
    env = bootstrap.setup("02_first_profile")
print(json.dumps({"loaded": loaded, "printed": printed.getvalue(), "cuda_started_by_warm_up": cuda_started,
                  "banner": [line for line in bootstrap.banner_lines(env) if not line.startswith("work folder")],
                  "again": bootstrap.warm_up()}))
"""


def in_a_fresh_interpreter(tmp_path, *argv: str, **env: str) -> dict:
    import json
    import subprocess

    environment = {k: v for k, v in os.environ.items() if k not in ("COLAB_RELEASE_TAG", "NSPY_NCU_INIT_AT_IMPORT")}
    environment.update({"NSPY_TUTORIAL_WORKDIR": str(tmp_path), **env})
    done = subprocess.run([sys.executable, "-c", WARM_THEN_SETUP, *argv], capture_output=True, text=True,
                          env=environment, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_warm_up_imports_nsight_torch_and_the_notebook_libraries_silently_without_starting_cuda(tmp_path):
    found = in_a_fresh_interpreter(tmp_path, "warm")
    assert found["loaded"][:2] == ["nsight", "torch"] and "matplotlib.pyplot" in found["loaded"]
    assert found["printed"] == "" and found["cuda_started_by_warm_up"] is False


def test_setup_after_warm_up_finds_what_setup_alone_finds(tmp_path):
    assert in_a_fresh_interpreter(tmp_path, "warm")["banner"] == in_a_fresh_interpreter(tmp_path, "cold")["banner"]


def test_warm_up_does_nothing_once_the_kernel_is_set_up(tmp_path):
    assert in_a_fresh_interpreter(tmp_path, "cold")["again"] == []


def test_warm_up_leaves_colab_to_the_setup_cell_which_may_install_ncu_first(tmp_path):
    assert in_a_fresh_interpreter(tmp_path, "warm", COLAB_RELEASE_TAG="test")["loaded"] == []
