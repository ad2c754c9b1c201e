"""The source distribution: an SPDX license with its file, and everything its own tests need.

The sdist is built with setuptools' PEP 517 backend (what ``pip`` and ``python -m build``
call), once per test session, into a temporary folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("sdist")
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    archive = out / done.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        tar.extractall(out, filter="data")
    return {
        "log": done.stdout + done.stderr,
        "files": {name.split("/", 1)[1] for name in names if "/" in name},
        "tree": out / top,
    }


def project_files(folder: str) -> set[str]:
    """The files under ``folder`` of this checkout, without caches."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and ".ipynb_checkpoints" not in path.parts
    }


def test_license_is_an_spdx_string_with_its_file_and_no_deprecation(sdist):
    assert "deprecated" not in sdist["log"].lower(), sdist["log"]
    pkg_info = (sdist["tree"] / "PKG-INFO").read_text()
    assert "License-Expression: Apache-2.0" in pkg_info
    assert "License-File: LICENSE" in pkg_info
    assert "Apache License" in (sdist["tree"] / "LICENSE").read_text()


@pytest.mark.parametrize("folder", ["notebooks", "scripts", "tests", "nspy_tutorial"])
def test_sdist_carries_every_file_its_tests_read(sdist, folder):
    missing = project_files(folder) - sdist["files"]
    assert missing == set()


def test_the_sdists_own_static_tests_pass_in_the_unpacked_tree(sdist):
    tree = sdist["tree"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "tests/test_notebooks_static.py", "tests/test_gpu_facts.py", "tests/test_install_ncu.py"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_run_command_needs_only_the_base_install():
    """`pip install -e .` then `nspy-tutorial run` (the README's first command): pytest and nbmake come with it."""
    block = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    base = {re.split(r"[<>=\[ ;]", requirement)[0].lower() for requirement in re.findall(r'^\s*"([^"]+)"', block, re.M)}
    runner = (ROOT / "nspy_tutorial" / "runner.py").read_text(encoding="utf-8")
    assert '"-p", "nbmake.pytest_plugin"' in runner and '"-m", "pytest"' in runner
    assert {"pytest", "nbmake"} <= base
