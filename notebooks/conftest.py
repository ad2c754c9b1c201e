"""pytest's setup for the notebooks under nbmake (``pytest``, or ``pytest --nbmake notebooks/NN_*.ipynb`` alone).

* Strict mode: ``NSPY_TUTORIAL_STRICT=1`` unless the caller set it, so a FAILED section re-raises
  and the notebook -- and the test run -- fails instead of printing ``[FAILED]`` and carrying on.
* The notebooks' work folders (``NSPY_TUTORIAL_WORKDIR``) go to a temporary folder removed when
  the session ends, never into the repository.
* Each notebook's section records (``NSPY_TUTORIAL_RESULTS``, a file per notebook) are judged
  after it ran: it recorded a section; every SKIPPED section has a reason and a remedy; and on a
  machine without a GPU (unless ``NSPY_TUTORIAL_REQUIRE`` turns such skips into failures) every
  section that calls ``ENV.require...`` is SKIPPED for the missing GPU, with this machine's
  remedy, and counted under need ``gpu`` (also a section that needs an earlier one); and the
  sections that ended OK are those README.md's table of what each section needs marks as running
  without a GPU (``tests/readme_sections.py`` reads it; a copy of this file elsewhere skips that).

``nspy-tutorial run`` does not load this file (it runs copies of the notebooks, ``--noconftest``).
"""

import ast
import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial.bootstrap import on_colab, probe_gpu
from nspy_tutorial.card import read_section_records
from nspy_tutorial.environment import GPU_REMEDY
from nspy_tutorial.sections import RESULTS_VAR, required

os.environ.setdefault("NSPY_TUTORIAL_STRICT", "1")
_SESSION = tempfile.mkdtemp(prefix="nspy-notebooks-")
atexit.register(shutil.rmtree, _SESSION, ignore_errors=True)
os.environ.setdefault("NSPY_TUTORIAL_WORKDIR", str(Path(_SESSION) / "work"))


ROOT = Path(__file__).resolve().parents[1]


def readme_problems(path: Path, records: list) -> list[str]:
    """Where a run without a GPU disagrees with README.md's table (its no-GPU column) for this notebook."""
    helper = ROOT / "tests" / "readme_sections.py"
    if not helper.exists():  # this file copied beside fake notebooks (tests/test_notebooks_conftest.py)
        return []
    spec = importlib.util.spec_from_file_location("readme_sections", helper)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return table.no_gpu_problems((ROOT / "README.md").read_text(encoding="utf-8"), path.name[:2], records)


def records_file(item: pytest.Item) -> Path:
    return Path(_SESSION) / f"{item.path.stem}.jsonl"


def section_name(node: ast.AST) -> str | None:
    """The literal name in ``with nt.section("name")``, or None for any other node."""
    for item in node.items if isinstance(node, ast.With) else []:
        call = item.context_expr
        if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "section" and call.args \
                and isinstance(call.args[0], ast.Constant):
            return call.args[0].value
    return None


def is_require_call(node: ast.AST) -> bool:
    """``ENV.require(...)`` or ``ENV.require_compute_capability(...)``."""
    return isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("require", "require_compute_capability") \
        and getattr(node.func.value, "id", "") == "ENV"


def gpu_sections(path: Path) -> list[str]:
    """Names of the sections whose body calls ``ENV.require...`` (every need includes a GPU)."""
    names = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or cell.source.startswith("%"):  # a magic cell (%%writefile) holds no section
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if section_name(node) and any(is_require_call(inner) for inner in ast.walk(node)):
                names.append(section_name(node))
    return names


def problems(path: Path, records: list, gpu_problem: str | None) -> list[str]:
    """What is wrong with a notebook's records; empty when nothing is."""
    found = [] if records else ["no section recorded"]
    found += [f"{r.section}: SKIPPED without a reason and a remedy" for r in records
              if r.status == "SKIPPED" and not ((r.reason or "").strip() and (r.remedy or "").strip())]
    if gpu_problem is None or required():
        return found
    by_name = {r.section: r for r in records}
    for name in gpu_sections(path):
        r = by_name.get(name)
        if r is None or r.status != "SKIPPED" or "needs a GPU" not in (r.reason or ""):
            found.append(f"{name}: without a GPU it must be SKIPPED for the GPU, not {r and (r.status, r.reason)}")
        elif r.remedy != GPU_REMEDY[on_colab()]:
            found.append(f"{name}: remedy {r.remedy!r} is not this machine's")
    found += [f"{r.section}: skipped without a GPU but counted under need {r.needs!r}" for r in records
              if r.status == "SKIPPED" and r.needs != "gpu"]
    return found + readme_problems(path, records)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.path.suffix == ".ipynb":
        records_file(item).unlink(missing_ok=True)
        os.environ[RESULTS_VAR] = str(records_file(item))  # the kernel nbmake starts inherits it


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if item.path.suffix == ".ipynb":
        os.environ.pop(RESULTS_VAR, None)
        found = problems(item.path, read_section_records(records_file(item)), probe_gpu().problem)
        assert not found, f"{item.path.name}: " + "; ".join(found)
