"""Shared test setup.

Strict mode for every notebook this pytest session executes: nbmake (``pytest --nbmake``)
starts each notebook's kernel with this process's environment, and with
``NSPY_TUTORIAL_STRICT=1`` a section that ends FAILED re-raises, so the notebook -- and
the test run -- fails instead of printing ``[FAILED]`` and carrying on. ``setdefault``:
an explicit ``NSPY_TUTORIAL_STRICT=0`` from the caller still wins.

The notebooks' work folders (``NSPY_TUTORIAL_WORKDIR``, see nspy_tutorial.workdir) go to a
temporary folder removed when the session ends, never into the repository.

Unit tests that depend on the variables set or remove them themselves (monkeypatch). Every
unit test gets its own work-folder root, and the working directory, ``sys.path`` and
``tempfile``'s folder that ``setup()`` changes are put back afterwards.
"""

import atexit
import os
import shutil
import sys
import tempfile

import pytest

os.environ.setdefault("NSPY_TUTORIAL_STRICT", "1")
_SESSION_WORK = tempfile.mkdtemp(prefix="nspy-tests-work-")
atexit.register(shutil.rmtree, _SESSION_WORK, ignore_errors=True)
os.environ.setdefault("NSPY_TUTORIAL_WORKDIR", _SESSION_WORK)


@pytest.fixture(autouse=True)
def _own_work_folder(tmp_path, monkeypatch):
    from nspy_tutorial import workdir

    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path / "work"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    # setenv first, so that undo restores TMPDIR as it was, unset included (a bare delenv of an
    # unset variable records nothing, and a TMPDIR that workdir.enter() set would outlive the test)
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", ""))
    if not os.environ["TMPDIR"]:
        monkeypatch.delenv("TMPDIR")
    monkeypatch.chdir(os.getcwd())
    workdir.reset()
    yield
    workdir.reset()
