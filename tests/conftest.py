"""Shared setup of the unit tests (the notebooks' own, under nbmake, is ``notebooks/conftest.py``).

Unit tests that depend on the ``NSPY_TUTORIAL_*`` variables set or remove them themselves
(monkeypatch). Every unit test gets its own work-folder root, and the working directory,
``sys.path`` and ``tempfile``'s folder that ``setup()`` changes are put back afterwards.
"""

import os
import sys
import tempfile

import pytest


@pytest.fixture(autouse=True)
def _own_work_folder(tmp_path, monkeypatch):
    from nspy_tutorial import sections as workdir

    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path / "work"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    # setenv first, so that undo restores TMPDIR as it was, unset included (a bare delenv of an
    # unset variable records nothing, and a TMPDIR that sections.enter_workdir() set would outlive the test)
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", ""))
    if not os.environ["TMPDIR"]:
        monkeypatch.delenv("TMPDIR")
    monkeypatch.chdir(os.getcwd())
    monkeypatch.setattr(workdir, "_ROOT", {})  # the root is fixed at first use: each test finds its own
