"""The helper package stays thin: a size, no import cycle, and nothing only the tests use.

* at most :data:`MAX_TOTAL` lines of Python in ``nspy_tutorial/`` and :data:`MAX_MODULE` in any
  one module, counted as ``wc -l`` counts them (every line);
* no cycle among the package's own imports (a module-level or a deferred import alike);
* no function, method or class of the package that only the tests name: every one is named by
  the package itself (outside its own definition), a notebook source, a script, or an entry
  point (pyproject's console script, pytest's ``pytest_*`` hooks in the card plug-in).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nspy_tutorial"
MAX_TOTAL = 2850  # 2,000 at #21; then the clock state (#30), the timeline readers (#31), lessons kept (#33), the card
MAX_MODULE = 350


def modules() -> dict[str, Path]:
    return {path.stem: path for path in sorted(PACKAGE.glob("*.py"))}


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")  # what `wc -l` prints


def imported_modules(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nspy_tutorial"):
            if node.module == "nspy_tutorial":
                found |= {alias.name for alias in node.names}
            else:
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("nspy_tutorial.")}
    return found & set(modules()) - {path.stem}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (each as the path that closes it)."""
    found, state = [], {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return found


def definitions() -> set[tuple[str, str]]:
    """Every function, method and class the package defines, as (module, name)."""
    found = set()
    for stem, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add((stem, node.name))
    return found


def names_used(path: Path) -> set[str]:
    """Names a module's code uses: variables, attributes, and strings that are one identifier
    (``__init__``'s lazy ``_HOME`` table names its functions as strings). Definitions, comments and
    docstrings do not count."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            used.add(node.value)
        elif isinstance(node, ast.alias):
            used.add(node.name.split(".")[-1])
    return used


def used_outside_tests(name: str, package_names: set[str]) -> bool:
    """Used by the package's own code, or by a notebook or script through the package
    (``nt.name``, ``module.name``, ``from nspy_tutorial... import name``), or named in pyproject."""
    if name.startswith("__") or name.startswith("pytest_") or name in package_names:  # hooks, or used
        return True
    through_package = re.compile(rf"\.{re.escape(name)}\b|^from nspy_tutorial\S* import (?:\([^)]*|.*)\b{re.escape(name)}\b",
                                 re.M)  # an import on one line, or in parentheses over several
    outside = [*(ROOT / "notebooks" / "src").glob("*.py"), *(ROOT / "scripts").glob("*.py")]
    return (any(through_package.search(path.read_text(encoding="utf-8")) for path in outside)
            or re.search(rf"\b{re.escape(name)}\b", (ROOT / "pyproject.toml").read_text(encoding="utf-8")) is not None)


def test_the_package_stays_within_its_line_budget():
    sizes = {stem: lines(path) for stem, path in modules().items()}
    assert sum(sizes.values()) <= MAX_TOTAL, sizes


def test_no_module_has_more_than_350_lines():
    too_long = {stem: lines(path) for stem, path in modules().items() if lines(path) > MAX_MODULE}
    assert too_long == {}


def test_the_packages_imports_have_no_cycle():
    graph = {stem: imported_modules(path) for stem, path in modules().items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_nothing_in_the_package_is_used_only_by_the_tests():
    package_names = set().union(*(names_used(path) for path in modules().values()))
    only_tests = sorted(f"{module}.{name}" for module, name in definitions()
                        if not used_outside_tests(name, package_names))
    assert only_tests == []
