"""Static checks over the committed notebooks (notebooks/NN_topic.ipynb); nothing is executed.

The notebooks are generated from notebooks/src/NN_topic.py by scripts/build_notebooks.py.
These tests pin what every generated notebook must be: valid, canonical, committed
without outputs, ready for Colab's T4, opening with its badge and learning goals, then
the setup cell, and closing with the summary.
"""

from __future__ import annotations

import ast
import importlib.util
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
# Notebook 01 teaches the setup steps, so its setup cell only probes and its cells do the rest.
MANUAL_SETUP = {"01_install_ncu"}
# Helpers a notebook must not import: what they did is the lesson, so the notebook defines it.
RETIRED = {"tflops", "sum_kernels", "profile_per_config", "kernel_counts", "predicted_kernel_count_error"}
DOCS = "https://docs.nvidia.com/nsight-python/"

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
    if path.stem in MANUAL_SETUP:
        call = f'nt.setup("{path.stem}", steps="manual")'
    else:
        call = f'nt.setup("{path.stem}")'
        assert "steps=" not in cells[0].source, f"{path.name}: only notebook 01 does the setup steps by hand"
    assert call in cells[0].source, f"{path.name}: the first code cell must call {call}"


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


def code(path: Path) -> str:
    return "\n".join(cell.source for cell in code_cells(read(path)))


def markdown(path: Path) -> str:
    return "\n".join(cell.source for cell in read(path).cells if cell.cell_type == "markdown")


def python_source(cell: nbformat.NotebookNode) -> str:
    """A code cell's Python: a ``%%writefile NAME.py`` cell's module without the magic line."""
    return cell.source.split("\n", 1)[1] if cell.source.startswith("%%writefile ") else cell.source


def trees(path: Path) -> list[ast.AST]:
    """Each code cell's syntax tree; a %%writefile cell is read as the Python module it writes."""
    return [ast.parse(python_source(cell)) for cell in code_cells(read(path))]


def first_cell_with(cells: list[nbformat.NotebookNode], pattern: str) -> int | None:
    found = [i for i, cell in enumerate(cells) if re.search(pattern, cell.source, re.MULTILINE)]
    return found[0] if found else None


@each_notebook
def test_no_notebook_imports_the_retired_helpers(path):
    bad = []
    for tree in trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nspy_tutorial"):
                bad += [alias.name for alias in node.names if alias.name in RETIRED or alias.name == "profiling"]
                if node.module == "nspy_tutorial.profiling":
                    bad.append(node.module)
            elif isinstance(node, ast.Import):
                bad += [alias.name for alias in node.names if alias.name == "nspy_tutorial.profiling"]
    assert bad == [], f"{path.name} imports {bad}: define what the lesson teaches in the notebook"


@each_notebook
def test_derive_and_combine_functions_are_defined_in_the_notebook(path):
    defined = {node.name for tree in trees(path) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    bad = []
    for tree in trees(path):
        for node in ast.walk(tree):
            for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
                if kw.arg in ("derive_metric", "combine_kernel_metrics"):
                    value = kw.value  # a function of the notebook, or of its %%writefile module (`kernels.add`)
                    name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
                    if not (isinstance(value, ast.Lambda) or name in defined):
                        bad.append(f"{kw.arg}={ast.unparse(kw.value)}")
    assert bad == [], f"{path.name}: {bad} must be functions written in the notebook"


@each_notebook
def test_results_are_not_cut_with_slices(path):
    bad = []
    for tree in trees(path):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "result" for t in node.targets)):
                for inner in ast.walk(node.value):
                    if isinstance(inner, ast.Slice) and inner.upper is not None:
                        bad.append(ast.unparse(node)[:80])
    assert bad == [], f"{path.name}: a result cut by a slice can end mid-word: {bad}"


@each_notebook
def test_every_notebook_that_measures_states_whose_rules(path):
    source = code(path)
    if "nsight.analyze.kernel" in source or "profile_script(" in source:
        assert "nt.rules(" in source, f"{path.name} measures but never prints nt.rules(...)"


@each_notebook
def test_ends_with_try_it_and_the_nsight_python_docs(path):
    text = markdown(path)
    assert re.search(r"^#+ Try it", text, re.MULTILINE), f"{path.name}: no 'Try it' section"
    assert DOCS in text, f"{path.name}: no link to the nsight-python docs ({DOCS})"


def notebook_01() -> Path:
    return NOTEBOOKS_DIR / "01_install_ncu.ipynb"


def test_01_setup_cell_installs_the_helpers_from_the_same_repository_as_the_others():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)  # type: ignore[union-attr]
    assert f"git+https://github.com/{build.REPO}" in code_cells(read(notebook_01()))[0].source


def test_01_does_the_install_and_import_steps_in_its_own_code_cells():
    cells = code_cells(read(notebook_01()))[1:]  # after the setup cell
    steps = ["nvidia-smi", '"pip", "install"', 'shutil.which("ncu")', '"--version"', '"install", "-y"',
             'os.environ["PATH"] =', "probe.try_candidate(",
             "ctypes.CDLL(", "ctypes.RTLD_GLOBAL", "import nsight", "nsight.get_active_tool()", "injection_load_error",
             "nsight.activate(nsight.Tool.CUPTI)", "NSPY_NCU_INIT_AT_IMPORT", 'nt.setup("01_install_ncu")']
    text = "\n".join(cell.source for cell in cells)
    missing = [step for step in steps if step not in text]
    assert missing == [], f"01 must show these steps in code cells: {missing}"


def test_01_tries_the_backends_in_children_before_it_loads_one_here():
    cells = code_cells(read(notebook_01()))
    assert first_cell_with(cells, r"probe\.try_candidate\(") < first_cell_with(cells, r"ctypes\.CDLL\(.*RTLD_GLOBAL") \
        < first_cell_with(cells, r"^\s*import nsight\b")


def test_01_loads_libcupti_before_nsight_and_nsight_before_torch():
    cells = code_cells(read(notebook_01()))
    preload = first_cell_with(cells, r"ctypes\.CDLL\(.*RTLD_GLOBAL")
    nsight = first_cell_with(cells, r"^\s*import nsight\b")
    finish = first_cell_with(cells, r'nt\.setup\("01_install_ncu"\)')
    torch = first_cell_with(cells, TORCH_IMPORT.pattern)
    assert None not in (preload, nsight, finish, torch), (preload, nsight, finish, torch)
    assert preload < nsight < finish < torch, (
        f"01 must preload libcupti (cell {preload}), then import nsight ({nsight}), then record it "
        f"({finish}), and only then import torch ({torch})"
    )


def test_01_prints_the_banner_once():
    text = code(notebook_01())
    assert text.count('nt.setup("01_install_ncu")') == 1  # the look-only call passes steps="manual" and prints none
    assert "print_banner" not in text


def test_readme_lists_every_notebook_with_its_colab_badge():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in NOTEBOOKS if f"blob/main/notebooks/{p.name})" not in readme or f"`{p.stem}`" not in readme]
    assert missing == [], f"README.md's notebooks table lacks {missing}"
    assert "Coming next" not in readme
