"""The versions the series is pinned to are the ones its recorded run used, and they live in one place.

pyproject.toml pins them (``==``); the Colab setup reads the same pins (``backend.pins``) for the
packages it installs itself; the README's recorded run (written by ``scripts/readme_figures.py``
from the run's banner) names the versions that run had installed.
"""

from __future__ import annotations

import re
from pathlib import Path

from nspy_tutorial import backend

ROOT = Path(__file__).resolve().parents[1]
PINNED = ("nsight-python", "ncu-report", "cupti-python", "nvidia-cuda-cupti")


def recorded_versions() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    part = readme.split("<!-- what-you-will-see: start")[1].split("<!-- what-you-will-see: end")[0]
    first = part.split("\n\n")[0]
    return dict(re.findall(r"\b([a-z][a-z-]+) (\d+\.\d+\.\d+(?:\.\d+)?)\b(?=[,)])", first))


def test_pyproject_pins_each_package_the_recorded_runs_depend_on_exactly():
    assert set(PINNED) <= set(backend.pins())


def test_the_readmes_recorded_run_used_the_pinned_versions():
    recorded = recorded_versions()
    assert {name: recorded.get(name) for name in PINNED} == {name: backend.pins()[name] for name in PINNED}


def test_colab_installs_cupti_at_the_pinned_versions():
    command = backend.cupti_install_command()
    assert f"cupti-python=={backend.pins()['cupti-python']}" in command
    assert f"nvidia-cuda-cupti=={backend.pins()['nvidia-cuda-cupti']}" in command
