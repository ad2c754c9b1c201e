"""Notebook 01's own functions and its child programs, on a CPU.

* Section 10 reads what a fresh ``import nsight`` did from the child's last line; a child that
  crashed must read as a failure, so the claims cannot pass on empty output (issue 14.7).
* Section 8 says which libcupti torch will load from ``torch.version.cuda``, read without
  importing torch: checked with fake CUDA 12 and CUDA 13 torches (issue 14.3).
* Section 5's line says where the ncu came from, also when there is none (issue 15.4).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from notebook_code import functions, import_module

from nspy_tutorial import ncu_cli

STEM = "01_install_ncu"


@pytest.fixture(scope="module")
def nb():
    return functions(STEM, "tool_and_error", "torch_cuda_version", "torch_libcupti", "where_ncu_came_from",
                     importlib=importlib, os=os, subprocess=subprocess)


def finished(returncode: int, stdout: str, stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["python"], returncode, stdout, stderr)


def test_a_crashed_or_garbled_child_reads_as_no_answer(nb):
    assert nb.tool_and_error(finished(1, "", "Traceback ...\nImportError: no nsight")) is None
    assert nb.tool_and_error(finished(0, "")) is None  # empty output used to satisfy the default-import claim
    assert nb.tool_and_error(finished(0, "None NCUNotAvailableError extra")) is None
    assert nb.tool_and_error(finished(0, "a warning first\nNCU None\n")) == "NCU None"


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_import_child_prints_the_line_section_10_expects(nb, tmp_path, value):
    module = import_module(STEM, "import_order", tmp_path)
    env = {**ncu_cli.child_environment(), "NSPY_NCU_INIT_AT_IMPORT": value}
    child = subprocess.run([sys.executable, module.__file__, "import-nsight"], env=env, capture_output=True,
                           text=True, timeout=300)
    seen = nb.tool_and_error(child)
    if value == "0":
        assert seen == "None None", child.stderr
    elif shutil.which("ncu") is None:
        assert seen == "None NCUNotAvailableError", child.stderr
    else:
        assert seen == "NCU None" or (seen or "").startswith("None "), child.stderr


@pytest.mark.parametrize("cuda", ["12.6", "13.0", None])
def test_torch_cuda_version_is_read_without_importing_torch(nb, tmp_path, monkeypatch, cuda):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('importing torch would load its libcupti')\n")
    (fake / "version.py").write_text(f"from typing import Optional\n\ncuda: Optional[str] = {cuda!r}\n")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert nb.torch_cuda_version() == cuda
    assert "torch" not in sys.modules


def test_what_torchs_cuda_version_means_for_the_preload(nb):
    assert "libcupti.so.13 too" in nb.torch_libcupti("13.0")
    assert "libcupti.so.12, another name" in nb.torch_libcupti("12.6")
    assert "no libcupti" in nb.torch_libcupti(None)


def test_section_5_says_where_ncu_came_from_in_each_case(nb):
    assert nb.where_ncu_came_from({}, [], []) == "no nsight-compute-* package installed; no ncu on this machine"
    assert nb.where_ncu_came_from({}, [], ["/usr/local/cuda/bin/ncu"]) == (
        "no nsight-compute-* package installed; /usr/local/cuda/bin/ncu came another way (e.g. the CUDA toolkit)")
    both = nb.where_ncu_came_from({"nsight-compute-2026.3.1": "/opt/nvidia/nsight-compute/2026.3.1/ncu"},
                                  ["nsight-compute-2026.3.1"], ["/usr/local/cuda/bin/ncu"])
    assert both.startswith("nsight-compute-2026.3.1: /opt/") and "cuda/bin/ncu came another way" in both
    assert nb.where_ncu_came_from({}, ["nsight-compute-2025.1.0"], []) == (
        "nsight-compute-2025.1.0: no ncu in its files; no ncu on this machine")
