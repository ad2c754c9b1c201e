"""One folder per notebook for every file it writes.

A notebook writes its kernels module (``%%writefile``), ``ncu`` reports, nsight-python's
CSVs and temporary files. :func:`enter` gives the notebook one folder for all of them and
makes it the working directory, so ``%%writefile roofline_kernels.py`` lands there and
``import roofline_kernels`` finds it. Python's temporary files (``tempfile``, which
nsight-python uses when no ``output_prefix`` is given) go to its ``tmp/`` subfolder, so a
run leaves nothing in ``/tmp``.

The folder is ``$NSPY_TUTORIAL_WORKDIR/<notebook>`` when the variable is set (the runner
sets it to a scratch folder it removes afterwards; the tests do the same), otherwise
``./nspy_work/<notebook>`` next to where the notebook runs (in Colab: ``/content``). A folder
that cannot be made there is a :class:`~nspy_tutorial.sections.SettingError` naming the variable.
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
        value = os.environ.get(WORKDIR_VAR, "").strip()
        _ROOT["root"] = Path(value or DEFAULT_ROOT).expanduser().resolve()
    return _ROOT["root"]


def enter(notebook: str) -> Path:
    """Create ``<root>/<notebook>`` (and its ``tmp/``), make it the working directory, return it.

    Also puts the folder first on ``sys.path`` (so a module written there imports) and
    points ``tempfile`` at its ``tmp/``. Calling it again is harmless.
    """
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
