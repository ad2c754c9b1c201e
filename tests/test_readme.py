"""The README, read by a newcomer: its table of what each section needs names real sections, all of them.

The table names sections by name, not number (numbers move when a notebook is rewritten); its
*no GPU* column is checked against a real run without a GPU by notebooks/conftest.py. Here: every
name is a section of that notebook, every section is in exactly one row, and a table that is wrong
in each of those ways is caught (tests/readme_sections.py reads it).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial.sections import SectionRecord

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
spec = importlib.util.spec_from_file_location("readme_sections", ROOT / "tests" / "readme_sections.py")
readme_sections = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_sections)
SECTION_NAME = re.compile(r"""\bnt\.section\(\s*(?P<q>["'])(?P<name>.*?)(?P=q)\s*\)""")

TABLE = """\
| Notebook · sections | needs | no GPU | a | b |
|---|---|---|---|---|
| 01 · "Look around", "Plan" | – | runs | runs | runs |
| 01 · the other sections (the measuring ones) | `profiler` | SKIPPED | runs | runs |
| 02 · every section | `profiler` | SKIPPED | runs | runs |

After the table.
"""
SECTIONS = {"01": ["1. Look around", "2. Measure", "2b. Measure again", "3. Plan"], "02": ["1. A", "2. B"]}


def notebook_sections() -> dict[str, list[str]]:
    """Each notebook's section names, from the generated notebooks' code."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        found[path.name[:2]] = [m["name"] for m in SECTION_NAME.finditer(code)]
    return found


def record(name: str, status: str) -> SectionRecord:
    return SectionRecord(notebook="01_a", section=name, status=status, reason="needs a GPU: none" if
                         status == "SKIPPED" else None, seconds=0.1)


def test_every_section_of_every_notebook_is_in_exactly_one_row_under_its_own_name():
    readme = README.read_text(encoding="utf-8")
    problems = [p for number, names in notebook_sections().items()
                for p in readme_sections.no_gpu_by_section(readme, number, names)[1]]
    assert problems == []


def test_every_row_is_for_a_notebook_that_exists():
    numbers = set(notebook_sections())
    assert [row.line for row in readme_sections.rows(README.read_text(encoding="utf-8"))
            if row.number not in numbers] == []


def test_the_readme_names_no_section_by_its_number():
    """Numbers move when a notebook is rewritten; names are checked. ("What runs where" has its own owner.)"""
    readme = README.read_text(encoding="utf-8")
    head, _, rest = readme.partition("### What runs where")
    text = head + rest[rest.index("\n#"):]  # that subsection's table left out
    assert re.findall(r"\b\d\d ?(?:·|§) ?\d+[a-z]?\b|§ ?\d+", text) == []


def test_a_table_row_lists_names_the_other_sections_and_what_runs_without_a_gpu():
    said, problems = readme_sections.no_gpu_by_section(TABLE, "01", SECTIONS["01"])
    assert problems == []
    assert said == {"1. Look around": "runs", "2. Measure": "SKIPPED", "2b. Measure again": "SKIPPED",
                    "3. Plan": "runs"}
    assert readme_sections.no_gpu_by_section(TABLE, "02", SECTIONS["02"])[0] == {"1. A": "SKIPPED",
                                                                                "2. B": "SKIPPED"}


def test_a_name_that_is_no_section_is_caught_with_the_sections_it_could_be():
    problems = readme_sections.no_gpu_by_section(TABLE.replace('"Plan"', '"Planning"'), "01", SECTIONS["01"])[1]
    assert problems == ['README.md:3: "Planning" is no section of notebook 01 (its sections: Look around, Measure, '
                        'Measure again, Plan)']


def test_a_section_no_row_names_is_caught():
    table = TABLE.replace("| 01 · the other sections (the measuring ones) | `profiler` | SKIPPED | runs | runs |\n", "")
    problems = readme_sections.no_gpu_by_section(table, "01", SECTIONS["01"])[1]
    assert problems == ['notebook 01: section "Measure" is in no row of README.md\'s table',
                        'notebook 01: section "Measure again" is in no row of README.md\'s table']


def test_a_section_in_two_rows_is_caught():
    table = TABLE.replace('| 02 · every section', '| 01 · "Plan" | – | runs | x | x |\n| 02 · every section')
    assert readme_sections.no_gpu_by_section(table, "01", SECTIONS["01"])[1] == [
        'notebook 01: section "Plan" is in 2 rows of README.md\'s table']


def test_a_notebook_without_a_row_is_caught():
    assert readme_sections.no_gpu_by_section(TABLE, "11", ["1. Your function"])[1] == [
        "README.md's table has no row for notebook 11"]


@pytest.mark.parametrize("row", ['| 03 · Look around | – | runs | x | x |', '| 03 · "Look" | – | maybe | x | x |',
                                 '| 3 · "Look" | – | runs | x | x |'])
def test_a_row_that_does_not_read_is_an_error_naming_its_line(row):
    with pytest.raises(ValueError, match=r"README.md:6: a row reads"):
        readme_sections.rows(TABLE.replace("After the table.", "").replace("\n\n", f"\n{row}\n", 1))


def test_a_no_gpu_run_that_disagrees_with_the_column_is_named_with_the_fix():
    records = [record("1. Look around", "SKIPPED"), record("2. Measure", "OK"), record("2b. Measure again", "SKIPPED"),
               record("3. Plan", "OK")]
    assert readme_sections.no_gpu_problems(TABLE, "01", records) == [
        '"Look around": README.md says it runs without a GPU, but it ended SKIPPED (needs a GPU: none); '
        + readme_sections.REMEDY,
        '"Measure": ended OK without a GPU, but README.md says SKIPPED there; ' + readme_sections.REMEDY]


def test_a_no_gpu_run_that_agrees_with_the_column_has_no_problem():
    records = [record("1. Look around", "OK"), record("2. Measure", "SKIPPED"), record("2b. Measure again", "SKIPPED"),
               record("3. Plan", "OK")]
    assert readme_sections.no_gpu_problems(TABLE, "01", records) == []


def test_the_recorded_no_gpu_run_agrees_with_the_readme():
    """The card kept from a run without a GPU (tests/fixtures/card/): what ended OK is what the README says runs."""
    import json

    readme = README.read_text(encoding="utf-8")
    data = json.loads((ROOT / "tests" / "fixtures" / "card" / "no-gpu" / "results.json").read_text(encoding="utf-8"))
    current = notebook_sections()
    problems = [p for entry in data["notebooks"] if [s["section"] for s in entry["sections"]] ==
                current.get(entry["notebook"][:2])  # a notebook whose sections changed since: conftest checks it
                for p in readme_sections.no_gpu_problems(
                    readme, entry["notebook"][:2], [SectionRecord(**s) for s in entry["sections"]])]
    assert problems == []
