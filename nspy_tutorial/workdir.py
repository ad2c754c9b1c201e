"""One folder per notebook for every file it writes (its kernels module, reports, CSVs, temporary files).

The folder is ``$NSPY_TUTORIAL_WORKDIR/<notebook>`` when the variable is set (the runner and the
tests set a scratch folder they remove), else ``./nspy_work/<notebook>`` where the notebook runs (in
Colab: ``/content``); one that cannot be made is a ``SettingError`` naming the variable.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from nspy_tutorial.sections import SettingError

WORKDIR_VAR = "NSPY_TUTORIAL_WORKDIR"
DEFAULT_ROOT = "nspy_work"
_ROOT: dict[str, Path] = {}


def root() -> Path:
    """The folder that holds one work folder per notebook (absolute, fixed at first use)."""
    if "root" not in _ROOT:
        _ROOT["root"] = Path(os.environ.get(WORKDIR_VAR, "").strip() or DEFAULT_ROOT).expanduser().resolve()
    return _ROOT["root"]


def enter(notebook: str) -> Path:
    """Make ``<root>/<notebook>`` the working directory and first on ``sys.path`` (so
    ``%%writefile kernels.py`` lands there and imports), with ``tempfile`` and child processes
    writing to its ``tmp/`` (nothing left in ``/tmp``); return it. Calling it again is harmless."""
    if not notebook or os.sep in notebook or notebook in (".", ".."):
        raise ValueError(f"work folder: {notebook!r} is not a notebook name such as '06_roofline'")
    path = root() / notebook
    tmp = path / "tmp"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        value = os.environ.get(WORKDIR_VAR, "")
        setting = f"{WORKDIR_VAR}={value!r}" if value.strip() else f"{WORKDIR_VAR} is unset, so ./{DEFAULT_ROOT}"
        raise SettingError(f"{setting}: cannot make the work folder {tmp} ({error.strerror or error}); set "
                           f"{WORKDIR_VAR} to a folder you can write to") from None
    os.chdir(path)
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    tempfile.tempdir = str(tmp)
    os.environ["TMPDIR"] = str(tmp)  # child processes (ncu, Python scripts) too
    return path
