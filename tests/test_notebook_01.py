"""Notebook 01's own functions and cells, on a CPU.

* Section 4 says what it does on each machine, and never advises an install that cannot help: without a GPU it
  points to Colab, not to ``sudo bash install_ncu.sh`` (issue 32's newcomer card); with a driver below R580 it says
  the driver is why.
* Section 10 lists what the later notebooks will run here, not only what they will not, and shows setup's clock
  line; its words agree with ``ENV.plan()`` on the machines of tests/test_what_runs_where.py.
* Section 8 says in words what ``import nsight`` did with Nsight Compute, never a bare ``None None``.
"""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
from types import SimpleNamespace

import pytest
from notebook_code import functions, source

from nspy_tutorial.clock import ClockState
from nspy_tutorial.environment import Environment

STEM = "01_install_ncu"
INSTALLER = "/clone/nspy_tutorial/resources/install_ncu.sh"


@pytest.fixture(scope="module")
def nb():
    text = source(STEM)
    unlocks = re.search(r"^SHORT = .*?^}\n", text, flags=re.M | re.S).group(0)
    namespace = {"INSTALLER": INSTALLER}
    exec(unlocks, namespace)
    return functions(STEM, "install_step", "what_runs", **namespace)


# --- section 4 --------------------------------------------------------------------------------

def test_section_4_installs_only_on_colab_as_root_with_a_gpu_and_a_cuda_13_driver(nb):
    assert nb.install_step(None, True, True, True, True) == ("install", "")


def test_section_4_without_a_gpu_points_to_colab_and_not_to_an_install_that_cannot_help(nb):
    step, why = nb.install_step(None, False, True, False, True)
    assert step == "none" and "sudo" not in why and "in Colab with a T4 runtime this cell installs it" in why


def test_section_4_with_a_driver_below_r580_says_the_driver_is_why(nb):
    for colab, fix in ((True, "a Colab runtime cannot change it"), (False, "update it to R580+")):
        step, why = nb.install_step(None, True, False, colab, True)
        assert step == "none" and "needs a driver for CUDA 13" in why and fix in why and "sudo" not in why


def test_section_4_elsewhere_shows_the_plan_and_the_command_to_run_as_root(nb):
    assert nb.install_step(None, True, True, False, False) == (
        "plan", f"nothing installed here; as root: sudo bash {INSTALLER}, then restart the kernel")


def test_section_4_with_a_new_enough_ncu_installs_nothing(nb):
    assert nb.install_step("/opt/nvidia/nsight-compute/2026.3.1/ncu", True, True, True, True) == (
        "none", "nothing to install: /opt/nvidia/nsight-compute/2026.3.1/ncu is new enough")


# --- section 10 -------------------------------------------------------------------------------

def environment(**fields) -> Environment:
    base = dict(notebook=STEM, on_colab=False, gpu_name="NVIDIA H200", gpu_problem=None, driver="580.159.04",
                driver_cuda=(13, 0))
    return Environment(**{**base, **fields})


OLD_NCU = "not tried: the newest ncu here, /usr/local/cuda/bin/ncu, is 2025.3.1.0; nsight-python needs 2026.2.1.0 or newer"
MACHINES = {  # the rows of test_what_runs_where.py, as setup leaves ENV
    "no GPU": environment(gpu_name=None, gpu_problem="no NVIDIA driver or GPU found", driver=None, driver_cuda=None,
                          backend_reason="no GPU", ncu_problem="no GPU", cupti_problem="no GPU", cli_problem="no GPU"),
    "an older ncu (the H200 test machine)": environment(backend="cupti", ncu_problem=OLD_NCU,
                                                         ncu_path="/usr/local/cuda/bin/ncu"),
    "an ncu that works": environment(backend="ncu", ncu_path="/opt/nvidia/nsight-compute/2026.3.1/ncu"),
    "the CUPTI probe fails": environment(ncu_problem=OLD_NCU, cupti_problem="it failed in a child process: cuptiError",
                                         ncu_path="/usr/local/cuda/bin/ncu"),
    "counters reserved": environment(backend="cupti", ncu_problem="ERR_NVGPUCTRPERM",
                                     cli_problem="ERR_NVGPUCTRPERM"),
}
SAYS = {
    "no GPU": "no GPU: only the sections that need none run (the tools' defaults, docs, this install plan)",
    "an older ncu (the H200 test machine)": "runs here: durations, counters via the ncu command line; not here: "
                                            "counters in-process",
    "an ncu that works": "runs here: durations, counters in-process, counters via the ncu command line",
    "the CUPTI probe fails": "runs here: counters via the ncu command line; not here: durations, counters in-process",
    "counters reserved": "runs here: durations; not here: counters in-process, counters via the ncu command line",
}


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_section_10_says_what_will_run_here_not_only_what_will_not(nb, machine):
    assert nb.what_runs(MACHINES[machine].plan()) == SAYS[machine]


def run_section_10(env: Environment) -> tuple[str, str]:
    """Section 10's code cell (its dictionaries, what_runs and the section) on ``env``: (printed, result)."""
    text = source(STEM)
    after = text[text.index("# ## 10. "):]
    cell = re.search(r"^# %%\n(.*?)(?=^# %%)", after, flags=re.M | re.S).group(1)
    result = SimpleNamespace(result=None)

    @contextlib.contextmanager
    def section(name):
        yield result

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell, "section 10", "exec"), dict(nt=SimpleNamespace(section=section), ENV=env, textwrap=textwrap))
    return out.getvalue(), result.result


def test_section_10_shows_setups_clock_line_and_keeps_its_lines_readable():
    env = MACHINES["an older ncu (the H200 test machine)"]
    env.clock = ClockState("held", (1500, 1500), 1980)
    printed, result = run_section_10(env)
    assert "SM clock" in printed and "HELD at 1,500 MHz even idle" in printed
    assert "durations" in result and max(len(line) for line in printed.splitlines()) <= 120
    assert re.search(r"profiler \(either backend\) +yes  kernel durations", printed)
    assert "install Nsight Compute >= 2026.2.1" in " ".join(printed.split())  # the ncu row's remedy, wrapped


def test_section_10_without_a_gpu_says_the_clock_was_not_read():
    printed, result = run_section_10(MACHINES["no GPU"])
    assert "not read: no GPU" in printed and result.startswith("no GPU: only the sections that need none run")


# --- what 01 no longer does ----------------------------------------------------------------------

def test_01_says_which_backend_needs_import_nsight_before_cuda_and_runs_no_child_to_show_the_opposite():
    text = source(STEM)
    assert "The *Nsight Compute* backend\n# attaches at `import nsight`" in text
    assert "cuda_first" not in text and "import_order" not in text and "dpkg -L" not in text
