"""``pytest --nbmake`` on notebooks next to ``notebooks/conftest.py``, run alone: strict, in a temporary
work folder, and each notebook's section records judged (a copy of the conftest beside fake notebooks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
WHERE = """import nspy_tutorial as nt
from nspy_tutorial import sections
open({log!r}, "w").write(str(sections.enter_workdir("01_fails")))"""


def write_notebook(path: Path, *sources: str) -> None:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)


def test_a_notebook_run_alone_is_strict_works_in_a_temporary_folder_and_has_its_skips_judged(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / "conftest.py", folder / "conftest.py")
    log = tmp_path / "workdir.log"
    write_notebook(folder / "01_fails.ipynb", WHERE.format(log=str(log)),
                   "with nt.section('1. Fails') as s:\n    raise ValueError('on purpose')")
    write_notebook(folder / "02_no_remedy.ipynb", "import nspy_tutorial as nt",
                   "with nt.section('1. Skips') as s:\n    raise nt.Skip('needs something', '')")
    env = {key: value for key, value in os.environ.items() if not key.startswith("NSPY_TUTORIAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbmake", str(folder)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    # without strict mode the section guard would record the error and the notebook pass
    assert "FAILED notebooks/01_fails.ipynb::01_fails.ipynb" in done.stdout and "on purpose" in done.stdout
    assert "02_no_remedy.ipynb: 1. Skips: SKIPPED without a reason and a remedy" in done.stdout
    work = Path(log.read_text())
    assert tmp_path not in work.parents and not work.exists(), "the work folder is a temporary one, removed at the end"
