"""The README's table of what each section needs ("Which sections run, by what the machine has"), as data.

A row's first cell names one notebook and some of its sections, by the names their ``nt.section(...)``
gives them without the number in front: ``04 · "Warm vs cold L2 by hand"`` (several: each in double
quotes, commas between), or ``02 · every section``, or ``05 · the other sections`` (those no other row
of that notebook names), a note in brackets after either if need be. Its *no GPU* cell says ``runs``
or ``SKIPPED``. So the table names no section numbers, which move whenever a notebook is rewritten,
and two checks keep it true:

* ``tests/test_readme.py``: every section of every notebook is in exactly one row, and every name in
  the table is a section's;
* ``notebooks/conftest.py``: on a machine without a GPU, the sections that end OK are exactly those
  whose row says ``runs`` there (the suite runs every notebook that way in CI).

Loaded by path (``importlib``) from both, as ``notebooks/conftest.py`` cannot import from ``tests/``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

HEADER = re.compile(r"^\| Notebook · sections \| needs \| no GPU \|")
FIRST_CELL = re.compile(r"^\| (?P<number>\d\d) · (?P<what>[^|]+?) \|")
QUOTED = re.compile(r'"([^"]+)"')
EVERY, OTHERS = "every section", "the other sections"
NO_GPU = ("runs", "SKIPPED")
REMEDY = "edit README.md's table of what each section needs (its first and third columns)"


class Row(NamedTuple):
    """One row: a notebook number, the sections it names (or EVERY/OTHERS), what they do without a GPU."""

    number: str
    names: tuple[str, ...]
    no_gpu: str
    line: int


def bare(name: str) -> str:
    """A section's name without its number: "2b. The full report" -> "The full report"."""
    return re.sub(r"^\w+\.\s+", "", name.strip())


def rows(readme: str) -> list[Row]:
    """The table's rows; a ValueError naming the line for a row that does not read."""
    lines, found, inside = readme.splitlines(), [], False
    for number, line in enumerate(lines, 1):
        if HEADER.match(line):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if not inside or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        match = FIRST_CELL.match(line)
        names = tuple(QUOTED.findall(match["what"])) if match else ()
        if match and not names and match["what"].startswith((EVERY, OTHERS)):  # a note in brackets may follow
            names = (EVERY if match["what"].startswith(EVERY) else OTHERS,)
        no_gpu = cells[2].split()[0] if len(cells) > 2 and cells[2] else ""
        if not match or not names or no_gpu not in NO_GPU:
            raise ValueError(f"README.md:{number}: a row reads `NN · \"Section name\", ...` (or `NN · {EVERY}`, "
                             f"`NN · {OTHERS}`) | needs | runs or SKIPPED | ...; this one does not: {line[:80]}")
        found.append(Row(match["number"], names, no_gpu, number))
    if not found:
        raise ValueError("README.md has no table of what each section needs (a header `| Notebook · sections | "
                         "needs | no GPU | ...`)")
    return found


def no_gpu_by_section(readme: str, number: str, sections: list[str]) -> tuple[dict[str, str], list[str]]:
    """What the table says each of a notebook's sections does without a GPU, and what does not add up."""
    mine = [row for row in rows(readme) if row.number == number]
    by_bare = {bare(name): name for name in sections}
    said: dict[str, list[str]] = {name: [] for name in sections}
    problems = []
    for row in mine:
        for name in row.names:
            if name in (EVERY, OTHERS):
                continue
            if name not in by_bare:
                problems.append(f'README.md:{row.line}: "{name}" is no section of notebook {number} '
                                f"(its sections: {', '.join(map(bare, sections))})")
            else:
                said[by_bare[name]].append(row.no_gpu)
    for row in mine:
        if row.names == (EVERY,):
            for name in sections:
                said[name].append(row.no_gpu)
        elif row.names == (OTHERS,):
            for name in [n for n in sections if not said[n]]:
                said[name].append(row.no_gpu)
    if not mine:
        problems.append(f"README.md's table has no row for notebook {number}")
    problems += [f'notebook {number}: section "{bare(name)}" is in no row of README.md\'s table' for name, s in
                 said.items() if not s and mine]
    problems += [f'notebook {number}: section "{bare(name)}" is in {len(s)} rows of README.md\'s table' for name, s
                 in said.items() if len(s) > 1]
    return {name: s[0] for name, s in said.items() if len(s) == 1}, problems


def no_gpu_problems(readme: str, number: str, records: list) -> list[str]:
    """Where a run without a GPU disagrees with the table's no-GPU column for one notebook's sections."""
    said, problems = no_gpu_by_section(readme, number, [r.section for r in records])
    for r in records:
        expected = said.get(r.section)
        if expected == "runs" and r.status != "OK":
            problems.append(f'"{bare(r.section)}": README.md says it runs without a GPU, but it ended {r.status} '
                            f"({r.reason})")
        elif expected == "SKIPPED" and r.status == "OK":
            problems.append(f'"{bare(r.section)}": ended OK without a GPU, but README.md says SKIPPED there')
    return [f"{problem}; {REMEDY}" for problem in problems]
