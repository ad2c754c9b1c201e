"""Static checks over the committed notebooks (notebooks/NN_topic.ipynb); nothing is executed.

The notebooks are generated from notebooks/src/NN_topic.py by scripts/build_notebooks.py.
These tests pin what every generated notebook must be: valid, canonical, committed
without outputs, ready for Colab's T4, opening with its badge and learning goals, then
the setup cell, and closing with the summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
NAME = re.compile(r"^(\d\d)_[a-z0-9_]+\.ipynb$")
BADGE_LINK = re.compile(
    r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]"
    r"\((https://colab\.research\.google\.com/github/[^)\s]+)\)"
)
SECTION_CALL = re.compile(r"\bnt\.section\(")
SECTION_NAME = re.compile(r"""\bnt\.section\(\s*(?P<q>["'])(?P<name>.*?)(?P=q)\s*\)""")
SETUP_CALL = re.compile(r"\bnt\.setup\(")
TORCH_IMPORT = re.compile(r"^\s*(import\s+torch\b|from\s+torch\b)", re.MULTILINE)
SUMMARY_CALL = re.compile(r"\bnt\.summary\(\)")

each_notebook = pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def first_markdown(nb: nbformat.NotebookNode) -> str:
    return next(cell.source for cell in nb.cells if cell.cell_type == "markdown")


def test_at_least_one_notebook_exists():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOKS_DIR}"


@each_notebook
def test_is_valid_nbformat_4(path):
    nb = read(path)
    assert nb.nbformat == 4
    nbformat.validate(nb)


@each_notebook
def test_file_is_canonical_nbformat(path):
    text = path.read_text(encoding="utf-8")
    assert text == nbformat.writes(read(path)) + "\n", (
        f"{path.name} is not in canonical form; regenerate it: python scripts/build_notebooks.py"
    )


@each_notebook
def test_committed_without_outputs(path):
    dirty = [
        i
        for i, cell in enumerate(read(path).cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert dirty == [], f"{path.name}: code cells {dirty} carry outputs or an execution count"


@each_notebook
def test_has_colab_gpu_metadata(path):
    meta = read(path).metadata
    assert meta.get("accelerator") == "GPU"
    assert meta.get("colab", {}).get("gpuType") == "T4"
    assert meta.get("kernelspec", {}).get("name") == "python3"


@each_notebook
def test_first_cell_is_markdown_with_colab_badge_for_this_file(path):
    first = read(path).cells[0]
    assert first.cell_type == "markdown"
    match = BADGE_LINK.search(first.source)
    assert match, f"{path.name}: no Open-in-Colab badge in the first cell"
    assert match.group(1).endswith(f"notebooks/{path.name}"), f"badge links to {match.group(1)}"


@each_notebook
def test_first_markdown_cell_says_what_you_will_learn(path):
    assert "What you will learn" in first_markdown(read(path))


@each_notebook
def test_first_code_cell_is_setup_for_this_notebook(path):
    cells = code_cells(read(path))
    assert cells, f"{path.name} has no code cells"
    assert f'nt.setup("{path.stem}")' in cells[0].source, (
        f"{path.name}: the first code cell must call nt.setup(\"{path.stem}\")"
    )


@each_notebook
def test_no_code_cell_before_the_setup_cell(path):
    cells = code_cells(read(path))
    with_setup = [i for i, cell in enumerate(cells) if SETUP_CALL.search(cell.source)]
    assert with_setup, f"{path.name}: no code cell calls nt.setup("
    assert with_setup[0] == 0, f"{path.name}: {with_setup[0]} code cell(s) run before the setup cell"


@each_notebook
def test_setup_cell_does_not_import_torch_before_setup(path):
    cells = code_cells(read(path))
    setup_cell = next((cell.source for cell in cells if SETUP_CALL.search(cell.source)), "")
    before = setup_cell[: SETUP_CALL.search(setup_cell).start()] if setup_cell else ""
    assert not TORCH_IMPORT.search(before), f"{path.name}: torch is imported before nt.setup()"


def test_names_match_nn_topic_pattern():
    bad = [p.name for p in NOTEBOOKS if not NAME.match(p.name)]
    assert bad == [], f"notebook names must match {NAME.pattern}: {bad}"


def test_numbered_from_01_without_gaps_or_duplicates():
    numbers = sorted(int(p.name[:2]) for p in NOTEBOOKS if NAME.match(p.name))
    assert numbers == list(range(1, len(numbers) + 1)), f"numbers found: {numbers}"


@each_notebook
def test_last_code_cell_calls_summary(path):
    cells = code_cells(read(path))
    assert cells and SUMMARY_CALL.search(cells[-1].source), f"{path.name}: last code cell must call nt.summary()"


@each_notebook
def test_section_names_are_unique_literals(path):
    sources = "\n".join(cell.source for cell in code_cells(read(path)))
    names = [m.group("name") for m in SECTION_NAME.finditer(sources)]
    assert len(names) == len(SECTION_CALL.findall(sources)), (
        f"{path.name}: every nt.section( must be given its name as a string literal"
    )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == [], f"{path.name}: section names used more than once: {duplicates}"


def test_generated_notebooks_in_sync_with_sources():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_notebooks.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
