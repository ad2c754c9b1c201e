"""Specification of ``nspy_tutorial.bootstrap.setup`` on a CPU-only machine.

Hardware is faked: ``probe_gpu``, ``backend.find_ncu_installs``, NVML, torch and nsight are
replaced where a test needs a GPU or ncu; ``setup`` itself runs for real with no GPU. Which
backend setup chooses on each kind of machine, by trying each in a child process, is
``test_what_runs_where.py``.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

from nspy_tutorial import backend, bootstrap, environment, probe, sections
from nspy_tutorial.backend import NcuInstall
from nspy_tutorial.bootstrap import CudaAlreadyInitialised
from nspy_tutorial.environment import banner_lines
from nspy_tutorial.gpu_facts import DeviceFacts

OLD_NCU = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
NEW_NCU = NcuInstall("/opt/nvidia/nsight-compute/2026.2.1/ncu", (2026, 2, 1, 0))
NO_GPU = bootstrap.Gpu(None, None, None, "no NVIDIA driver or GPU found (test)")
T4 = bootstrap.Gpu("Tesla T4", "580.82.07", (13, 0), None)


@pytest.fixture(autouse=True)
def fresh_bootstrap(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """No cached Environment; environment variables setup() reads or writes restored; probes kept in tmp."""
    old_notebook = sections._NOTEBOOK["name"]
    bootstrap._ENV = None
    monkeypatch.setenv("NSPY_NCU_INIT_AT_IMPORT", "0")
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("NSPY_TUTORIAL_BACKEND", "COLAB_RELEASE_TAG", "NSPY_TUTORIAL_STRICT", "NSPY_TUTORIAL_REQUIRE",
                 "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
    yield
    bootstrap._ENV = None
    sections.set_notebook(old_notebook)


def facts(name: str = "Tesla T4", cc: tuple[int, int] = (7, 5)) -> DeviceFacts:
    return DeviceFacts(name=name, compute_capability=cc, sm_count=40, l2_bytes=4 * 2**20, memory_bytes=15 * 2**30,
                       max_sm_clock_mhz=1590, max_mem_clock_mhz=5001)


def run_setup_without_gpu(monkeypatch: pytest.MonkeyPatch, notebook: str = "01_first"):
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: NO_GPU)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [])
    return bootstrap.setup(notebook)


def fake_nsight(active: str | None, load_error: Exception | None = None,
                activate_error: Exception | None = None) -> dict[str, types.ModuleType]:
    """sys.modules entries for an imported nsight whose active tool is ``active``."""
    nsight = types.ModuleType("nsight")
    tool = types.SimpleNamespace(NCU=types.SimpleNamespace(name="NCU"), CUPTI=types.SimpleNamespace(name="CUPTI"))
    state = {"active": {"ncu": tool.NCU, "cupti": tool.CUPTI, None: None}[active]}

    def activate(which):
        if activate_error is not None:
            raise activate_error
        state["active"] = which

    nsight.Tool = tool  # type: ignore[attr-defined]
    nsight.get_active_tool = lambda: state["active"]  # type: ignore[attr-defined]
    nsight.activate = activate  # type: ignore[attr-defined]
    collection = types.ModuleType("nsight.collection")
    ncu = types.ModuleType("nsight.collection.ncu")
    ncu.injection_load_error = load_error  # type: ignore[attr-defined]
    collection.ncu = ncu  # type: ignore[attr-defined]
    return {"nsight": nsight, "nsight.collection": collection, "nsight.collection.ncu": ncu}


def use_nsight(monkeypatch, *args, **kwargs) -> None:
    for name, module in fake_nsight(*args, **kwargs).items():
        monkeypatch.setitem(sys.modules, name, module)


# --------------------------------------------------------------------------
# Probing without CUDA
# --------------------------------------------------------------------------


def fake_torch(initialised: bool) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: initialised)  # type: ignore[attr-defined]
    torch.version = types.SimpleNamespace(cuda="13.0")  # type: ignore[attr-defined]
    return torch


def fake_pynvml(count: int = 1, init_error: Exception | None = None) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")

    def init() -> None:
        if init_error is not None:
            raise init_error

    nvml.nvmlInit = init  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: count  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetName = lambda handle: b"Tesla T4"  # type: ignore[attr-defined]
    nvml.nvmlSystemGetDriverVersion = lambda: "580.82.07"  # type: ignore[attr-defined]
    nvml.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000  # type: ignore[attr-defined]
    return nvml


def test_probe_gpu_reads_name_and_driver_from_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert bootstrap.probe_gpu() == bootstrap.Gpu("Tesla T4", "580.82.07", (13, 0), None)


def test_probe_gpu_names_the_gpu_cuda_visible_devices_picks_not_nvml_device_0(monkeypatch):
    nvml = fake_pynvml(count=2)
    nvml.nvmlDeviceGetName = lambda handle: [b"NVIDIA A100-SXM4-80GB", b"NVIDIA H100 80GB HBM3"][handle[1]]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert bootstrap.probe_gpu().name == "NVIDIA H100 80GB HBM3"


def test_probe_gpu_with_no_device_says_nvml_sees_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    assert bootstrap.probe_gpu() == bootstrap.Gpu(None, None, None, "NVML sees no GPU")


def test_probe_gpu_without_a_driver_reports_the_error_instead_of_raising(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=OSError("libnvidia-ml.so.1 missing")))
    gpu = bootstrap.probe_gpu()
    assert (gpu.name, gpu.driver) == (None, None)
    assert gpu.problem is not None and "OSError: libnvidia-ml.so.1 missing" in gpu.problem


def test_on_colab_is_read_from_the_colab_release_tag(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert bootstrap.on_colab() is False
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20250101")
    assert bootstrap.on_colab() is True




def test_the_cuda_version_the_driver_supports_is_read_from_nvml(monkeypatch):
    nvml = fake_pynvml()
    nvml.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert bootstrap.probe_gpu().driver_cuda == (12, 4)


def gpu_env(gpu: bootstrap.Gpu = T4, colab: bool = False) -> environment.Environment:
    """The Environment setup starts from on a machine with ``gpu``."""
    return environment.Environment(notebook="01_first", on_colab=colab, gpu_name=gpu.name, gpu_problem=gpu.problem,
                                   driver=gpu.driver, driver_cuda=gpu.driver_cuda)


@pytest.mark.parametrize(("cuda", "ruled_out"), [((12, 4), True), ((12, 8), True), ((13, 0), False), ((13, 1), False),
                                                 (None, False)])
def test_a_driver_below_cuda_13_rules_out_the_cuda_13_tools_and_says_so(cuda, ruled_out):
    problem = bootstrap.driver_problem(gpu_env(bootstrap.Gpu("Tesla T4", "550.54.15", cuda, None)), "CUPTI 13.4")
    assert (problem is not None) is ruled_out
    if ruled_out:
        assert problem == (f"CUPTI 13.4 needs a driver for CUDA 13 (R580 or newer); driver 550.54.15 supports "
                           f"CUDA {cuda[0]}.{cuda[1]}")


# --------------------------------------------------------------------------
# setup()
# --------------------------------------------------------------------------


def test_setup_refuses_when_the_imported_torch_has_started_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(True))
    probed = []
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: probed.append(1) or NO_GPU)
    with pytest.raises(CudaAlreadyInitialised, match="Restart"):
        bootstrap.setup("01_first")
    assert probed == []
    assert bootstrap._ENV is None


def test_setup_goes_on_when_torch_is_imported_but_has_not_started_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(False))
    assert run_setup_without_gpu(monkeypatch) is bootstrap._ENV


def test_setup_without_gpu_returns_an_environment_with_no_backend(monkeypatch, capsys):
    env = run_setup_without_gpu(monkeypatch)
    assert env.notebook == "01_first"
    assert env.has_gpu is False
    assert env.gpu_problem == NO_GPU.problem
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
    assert lines[0] == f"GPU          none -- {NO_GPU.problem}"
    assert lines[1].strip() == environment.GPU_REMEDY[False]
    assert any(line.startswith("backend      none") for line in lines)
    env.on_colab = True
    assert banner_lines(env)[1].strip() == environment.GPU_REMEDY[True]


def test_setup_works_in_the_notebooks_own_folder_and_the_banner_names_it(monkeypatch, tmp_path):
    monkeypatch.setenv("NSPY_TUTORIAL_WORKDIR", str(tmp_path))
    env = run_setup_without_gpu(monkeypatch)
    assert env.workdir == tmp_path / env.notebook
    assert os.getcwd() == str(env.workdir)
    assert f"work folder  {env.workdir}  (every file this notebook writes goes here)" in banner_lines(env)


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



# --------------------------------------------------------------------------
# load(): only the chosen backend is loaded in the notebook's process
# --------------------------------------------------------------------------


def test_loading_cupti_preloads_its_libcupti_keeps_nsight_compute_away_and_activates_it(monkeypatch):
    preloaded = []
    monkeypatch.setattr(backend, "preload_cupti", preloaded.append)
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    use_nsight(monkeypatch, None)
    library = backend.CuptiLibrary("/x/libcupti.so.13", (13, 4, 92))
    assert bootstrap.load("cupti", library) == ("cupti", None)
    assert preloaded == [library] and os.environ["NSPY_NCU_INIT_AT_IMPORT"] == "0"
    assert sys.modules["nsight"].get_active_tool().name == "CUPTI"


@pytest.mark.parametrize("path, then", [
    ("/usr/bin:/bin", "/usr/bin:/bin"),  # a new folder goes first
    ("/usr/bin:/opt/nvidia/nsight-compute/2026.2.1:/bin:/opt/nvidia/nsight-compute/2026.2.1", "/usr/bin:/bin"),  # moved
    ("", ""),  # no empty entry added
])
def test_loading_nsight_compute_puts_its_ncu_first_once_and_lets_import_nsight_attach_it(monkeypatch, path, then):
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    use_nsight(monkeypatch, "ncu")
    assert bootstrap.load("ncu", NEW_NCU) == ("ncu", None)
    assert bootstrap.load("ncu", NEW_NCU) == ("ncu", None)  # twice: still once on PATH
    assert os.environ["PATH"] == ":".join(filter(None, ["/opt/nvidia/nsight-compute/2026.2.1", then]))
    assert "NSPY_NCU_INIT_AT_IMPORT" not in os.environ


def test_a_backend_that_worked_in_the_child_but_not_here_is_reported_not_used(monkeypatch):
    monkeypatch.setattr(backend, "preload_cupti", lambda library: None)
    use_nsight(monkeypatch, None, activate_error=RuntimeError("cuptiError: ERROR_INVALID_PARAMETER (1)\nmore"))
    chosen, problem = bootstrap.load("cupti", backend.CuptiLibrary("/x/libcupti.so.13", (13, 4, 92)))
    assert chosen is None
    assert problem == "worked in a child process but not here: RuntimeError: cuptiError: ERROR_INVALID_PARAMETER (1)"


def test_with_no_backend_chosen_nsight_loads_nothing(monkeypatch):
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    use_nsight(monkeypatch, None)
    assert bootstrap.load(None, None) == (None, None) and os.environ["NSPY_NCU_INIT_AT_IMPORT"] == "0"


# --------------------------------------------------------------------------
# Colab: what is installed, and when nothing is
# --------------------------------------------------------------------------


def test_on_colab_without_a_new_enough_ncu_setup_installs_one_with_the_script_and_says_so(monkeypatch):
    ran = []
    monkeypatch.setattr(bootstrap, "install_on_colab", lambda what, cmd, size: ran.append((what, cmd)) or None)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU, NEW_NCU])
    found = bootstrap.colab_installs(gpu_env(colab=True), [OLD_NCU], forced_cupti=False)
    assert [what for what, _ in ran] == ["Nsight Compute >= 2026.2.1"] and ran[0][1][-1].endswith("install_ncu.sh")
    assert found == [OLD_NCU, NEW_NCU]


def test_on_colab_a_new_enough_ncu_is_not_installed_again(monkeypatch):
    monkeypatch.setattr(bootstrap, "install_on_colab", lambda *a: pytest.fail("installed again"))
    assert bootstrap.colab_installs(gpu_env(colab=True), [NEW_NCU], forced_cupti=False) == [NEW_NCU]


def test_on_colab_cupti_is_installed_beside_colabs_own_packages_when_missing(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(bootstrap, "install_on_colab", lambda what, cmd, size: ran.append(cmd) or None)
    monkeypatch.setattr(backend, "find_cupti_library", lambda *a, **k: None)
    monkeypatch.setattr(backend, "cupti_python_available", lambda: False)
    library, problem = bootstrap.cupti_candidate(gpu_env(colab=True))
    (cmd,) = ran
    assert cmd[cmd.index("--target") + 1] == str(backend.cache_dir() / "cupti") and "--no-deps" in cmd
    assert f"cupti-python=={backend.pins()['cupti-python']}" in cmd
    assert library is None and problem.startswith("cupti-python is not installed (looked in")


def test_install_on_colab_runs_in_the_foreground_and_says_what_and_how_big_before(capsys):
    assert bootstrap.install_on_colab("a thing", [sys.executable, "-c", "print('step 1')"], "about 1 MB") is None
    out = capsys.readouterr().out
    assert out.index("installing a thing: about 1 MB") < out.index("    step 1")


def test_a_failed_install_on_colab_is_named_with_its_error(capsys):
    problem = bootstrap.install_on_colab("a thing", [sys.executable, "-c", "import sys; print('E: no'); sys.exit(3)"],
                                         "1 MB")
    assert problem == "the install of a thing exited 3: E: no"


# --------------------------------------------------------------------------
# setup(steps="manual"), the cells' own steps, then setup(): notebook 01
# --------------------------------------------------------------------------


def test_manual_setup_only_looks(monkeypatch, capsys):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab")  # even on Colab: nothing is installed
    monkeypatch.delenv("NSPY_NCU_INIT_AT_IMPORT")
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: T4)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU])
    forbidden = lambda *a, **k: pytest.fail("manual setup must not install, try, preload or read device facts")
    for owner, name in ((bootstrap, "install_on_colab"), (probe, "try_candidate"), (backend, "preload_cupti"),
                        (bootstrap, "device_facts")):
        monkeypatch.setattr(owner, name, forbidden)
    path = os.environ["PATH"]
    env = bootstrap.setup("01_install_ncu", steps="manual")
    out = capsys.readouterr().out
    assert env.has_gpu and env.backend is None and env.facts is None and os.environ["PATH"] == path
    assert "Environment  (" not in out and "looked only" in out and OLD_NCU.path in out
    assert "NSPY_NCU_INIT_AT_IMPORT" not in os.environ  # not even this: the notebook decides
    assert bootstrap._ENV is None


CUPTI_CHILD = """\
import os, sys
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\\n")
print("NSPY_PROBE ok x + 1: 2.0 us under CUPTI")
"""


def test_setup_after_the_cells_own_steps_reuses_their_probe_and_their_active_tool(monkeypatch, tmp_path, capsys):
    (tmp_path / "child.py").write_text(CUPTI_CHILD)
    (tmp_path / "libcupti.so.13").write_bytes(b"")
    library = backend.CuptiLibrary(str(tmp_path / "libcupti.so.13"), (13, 4, 92))
    monkeypatch.setattr(probe, "CHILD", [sys.executable, str(tmp_path / "child.py")])
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    monkeypatch.setattr(bootstrap, "probe_gpu", lambda: T4)
    monkeypatch.setattr(backend, "find_ncu_installs", lambda *a, **k: [OLD_NCU])
    monkeypatch.setattr(backend, "find_cupti_library", lambda *a, **k: library)
    monkeypatch.setattr(backend, "cupti_python_available", lambda: True)
    monkeypatch.setattr(backend, "preload_cupti", lambda library: None)
    monkeypatch.setattr(bootstrap, "choose_cli", lambda env, installs: None)
    monkeypatch.setattr(bootstrap, "device_facts", lambda: facts())
    looked = bootstrap.setup("01_install_ncu", steps="manual")
    tried = probe.try_candidate("cupti", library.path, probe.machine_key(looked.gpu_name, looked.driver))  # section 7
    use_nsight(monkeypatch, "cupti")  # section 9: import nsight, nsight.activate(nsight.Tool.CUPTI)
    capsys.readouterr()
    env = bootstrap.setup("01_install_ncu")
    assert tried.ok and (tmp_path / "calls").read_text().splitlines() == [f"cupti {library.path}"]  # probed once
    assert env.backend == "cupti" and bootstrap._ENV is env
    assert "kept from an earlier probe on this machine" in capsys.readouterr().out
    assert env.ncu_problem == (f"not tried: the newest ncu here, {OLD_NCU.path}, is 2025.3.1.0; nsight-python needs "
                               "2026.2.1.0 or newer")
