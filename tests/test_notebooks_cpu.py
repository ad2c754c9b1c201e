"""Execute every notebook through the real runner on this machine, once, and judge the card.

Written for the CPU-only CI machine: there every GPU section must end SKIPPED with a
reason that names the missing GPU and a remedy, and nothing may fail. On a machine with
a GPU the same run must still end without a FAILED section; only the no-GPU wording
test is skipped there.

The run is ``nspy-tutorial run`` itself (``runner.main``) in strict mode, shared by all
tests of this module (about 20 s on a CPU).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nspy_tutorial import runner
from nspy_tutorial.bootstrap import gpu_remedy, on_colab, probe_gpu

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = ROOT / "notebooks"
NOTEBOOKS = runner.find_notebooks(NOTEBOOKS_DIR)
REQUIRE_CALLS = {"require", "require_compute_capability"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run all notebooks once: exit code, card, executed notebooks and the runner's output."""
    out = tmp_path_factory.mktemp("nspy-run") / "results"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NSPY_TUTORIAL_STRICT", "1")
        # A required backend this machine lacks turns skips into failures; this test
        # judges the plain run, so requirements are left to the GPU workflow.
        env.delenv("NSPY_TUTORIAL_REQUIRE", raising=False)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = runner.main(["run", "--notebooks-dir", str(NOTEBOOKS_DIR), "--out", str(out)])
    card_file = out / "results.json"
    return {
        "code": code,
        "card": json.loads(card_file.read_text()) if card_file.exists() else None,
        "executed": {p.stem: nbformat.read(p, as_version=4) for p in sorted((out / "notebooks").glob("*.ipynb"))},
        "log": stdout.getvalue() + stderr.getvalue(),
    }


@pytest.fixture(scope="module")
def card(run: dict[str, Any]) -> dict[str, Any]:
    assert run["card"] is not None, f"the runner wrote no results.json\n{run['log']}"
    return run["card"]


def all_sections(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [section for entry in card["notebooks"] for section in entry["sections"]]


def gpu_sections(nb: nbformat.NotebookNode) -> list[str]:
    """Names of the sections whose body calls ``ENV.require...`` (every need includes a GPU)."""
    names = []
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.startswith("%%"):  # a cell magic (%%writefile) holds no section
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if not isinstance(node, ast.With):
                continue
            name = section_name(node)
            if name is not None and any(is_require_call(inner) for inner in ast.walk(node)):
                names.append(name)
    return names


def section_name(node: ast.With) -> str | None:
    """The literal name in ``with nt.section("name")``, or None for any other ``with``."""
    for item in node.items:
        call = item.context_expr
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "section"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            return call.args[0].value
    return None


def is_require_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in REQUIRE_CALLS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ENV"
    )


def test_run_exits_0(run):
    assert run["code"] == runner.EXIT_OK, run["log"]


def test_card_lists_every_notebook(card):
    assert [entry["notebook"] for entry in card["notebooks"]] == [p.stem for p in NOTEBOOKS]


def test_every_notebook_in_card_is_ok(card):
    bad = {e["notebook"]: (e["status"], e["error"]) for e in card["notebooks"] if e["status"] != "OK"}
    assert bad == {}


def test_every_section_is_ok_or_skipped(card):
    bad = [(s["notebook"], s["section"], s["status"], s["reason"]) for s in all_sections(card)
           if s["status"] not in ("OK", "SKIPPED")]
    assert bad == []


def test_every_skipped_section_has_reason_and_remedy(card):
    bad = [(s["notebook"], s["section"]) for s in all_sections(card)
           if s["status"] == "SKIPPED" and not ((s["reason"] or "").strip() and (s["remedy"] or "").strip())]
    assert bad == []


def test_without_gpu_gpu_sections_skip_naming_the_gpu_and_the_remedy_for_this_machine(card, run):
    name, _, problem = probe_gpu()
    if problem is None:
        pytest.skip(f"NVML finds a GPU ({name}): GPU sections run here instead of skipping")
    by_key = {(s["notebook"], s["section"]): s for s in all_sections(card)}
    expected = [(stem, section) for stem, nb in run["executed"].items() for section in gpu_sections(nb)]
    assert expected, "no section calls ENV.require...: nothing to check"
    bad = []
    for key in expected:
        record = by_key.get(key)
        if record is None:
            bad.append((*key, "not recorded"))
        elif record["status"] != "SKIPPED":
            bad.append((*key, record["status"]))
        elif "needs a GPU" not in (record["reason"] or ""):
            bad.append((*key, f"reason: {record['reason']}"))
        elif record["remedy"] != gpu_remedy(on_colab()):
            bad.append((*key, f"remedy: {record['remedy']}"))
    assert bad == []


def test_no_error_output_or_traceback_in_executed_notebooks(run):
    assert run["executed"], f"no executed notebooks were written\n{run['log']}"
    bad = []
    for stem, nb in run["executed"].items():
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    bad.append((stem, index, f"{output.ename}: {output.evalue}"))
                elif output.output_type == "stream" and "Traceback" in output.text:
                    bad.append((stem, index, f"Traceback in {output.name}"))
    assert bad == []


def test_every_notebook_recorded_a_section(card):
    empty = [entry["notebook"] for entry in card["notebooks"] if not entry["sections"]]
    assert empty == []


def test_without_gpu_every_skip_is_counted_under_no_gpu_even_a_section_that_needs_an_earlier_one(card):
    """A section that depends on an earlier one is counted under the earlier one's reason (issue 15.3)."""
    name, _, problem = probe_gpu()
    if problem is None:
        pytest.skip(f"NVML finds a GPU ({name})")
    other = [(s["notebook"], s["section"], s["needs"]) for s in all_sections(card)
             if s["status"] == "SKIPPED" and s["needs"] != "gpu"]
    assert other == [] and card["headline"].split(" skipped ")[1].startswith("(no GPU)"), card["headline"]
