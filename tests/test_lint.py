"""``ruff check .`` with the project's configuration (pyproject.toml, ``[tool.ruff]``).

The configuration knows the notebook sources: ``nt`` and ``ENV`` come from the setup cell
the builder writes, and their cells import where the lesson needs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lessons_are_formatted_by_ruff_at_100_columns():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "notebooks/src"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, "run `ruff format notebooks/src`:\n" + done.stdout + done.stderr
