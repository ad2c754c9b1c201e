"""Write the README's "What you will see" part from an executed run: figures, card, captions.

Usage::

    nspy-tutorial run --out results           # on a GPU machine, the whole series
    python scripts/readme_figures.py results  # then commit docs/ and README.md

RUN is the folder ``nspy-tutorial run --out RUN`` wrote: ``results.json`` and the executed
notebooks in ``notebooks/``. The script writes, and never anything by hand:

* ``docs/<name>.png`` for each entry of :data:`FIGURES`: the image a notebook drew, copied
  byte for byte from the executed notebook's output;
* ``docs/results-table.md``: the run's results card (headline, one row per notebook, every
  section's status and one-line result), as ``nspy-tutorial`` writes ``results.md``;
* the part of ``README.md`` between :data:`START` and :data:`END`: the headline, links to
  the figures and the card, each figure captioned with the GPU, the backend and the date of
  the run, read from the run (``results.json`` and the environment banner each executed
  notebook printed).

Which image: a figure is named by its notebook's number and a word of its section's name
(default "plot"; the notebooks call these sections "4. The roofline plot", "Plot: ..."). In
the executed notebook, a section's cells run from the cell that opens it (the one whose
source holds its name, or whose output holds its banner) to the cell that opens the next
section of the run's records; the figure is the last PNG output in the first matching
section that has one. A notebook that renames its plot section keeps the word "plot" in
the name, or FIGURES below changes with it. A figure that cannot be found is an error that
names the sections it looked at, and nothing is written.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's nspy_tutorial, also when run from elsewhere

from nspy_tutorial.card import card_markdown  # noqa: E402
from nspy_tutorial.display import WIDTH  # noqa: E402  (after the path)

START = "<!-- what-you-will-see: start. Written by scripts/readme_figures.py from a recorded run; do not edit. -->"
END = "<!-- what-you-will-see: end -->"
BACKENDS = {"ncu": "the Nsight Compute backend", "cupti": "the CUPTI backend", "none": "no profiler backend"}


@dataclasses.dataclass(frozen=True)
class Figure:
    file: str  # under docs/
    notebook: str  # the number, e.g. "06"
    word: str  # a word of the section's name, any case
    what: str  # one sentence: what the figure shows (no measured number)


FIGURES = (
    Figure("roofline.png", "06", "plot",
           "Each kernel and operation the tables judge, in FLOP per SM cycle against the roof it is judged by: "
           "compute roofs as clock-free lines, the memory roof as a band over the SM clocks the kernels ran, a dash "
           "at each one's roof; triangles above their roof; the datasheet's per-cycle roofs in thin grey."),
    Figure("timeline.png", "07", "plot",
           "Timelines of GELU by hand, eager and compiled, on a small and a large input: the CPU's CUDA calls on "
           "one lane, the GPU's kernels on the other, each range's GPU busy % in its title, drawn by Nsight Systems "
           "where installed, else torch.profiler."),
    Figure("cupti-vs-ncu.png", "09", "plot",
           "Nsight Compute's extra time per kernel over the CUPTI backend without the cache flush "
           "(cache_control='none', clocks free), in us on a linear axis with a line at zero against the kernel's "
           "length, each with its Welch 95 % interval; the fit (a cost per kernel plus a share of the length) "
           "with its 95 % band and its verdicts in the legend, and the most the clock could add."),
)


class FigureError(Exception):
    """The run lacks what a figure or a caption needs; nothing was written."""


@dataclasses.dataclass(frozen=True)
class Found:
    figure: Figure
    notebook: str  # the stem, e.g. "06_roofline"
    section: str
    png: bytes
    machine: str  # GPU, backend and date, for the caption


def load_run(run: Path) -> tuple[dict, dict[str, Path]]:
    """The card (results.json) and the executed notebooks by stem."""
    card_file = run / "results.json"
    if not card_file.is_file():
        raise FigureError(f"{card_file} not found: pass the folder `nspy-tutorial run --out` wrote")
    card = json.loads(card_file.read_text(encoding="utf-8"))
    executed = {path.stem: path for path in sorted((run / "notebooks").glob("*.ipynb"))}
    return card, executed


def text_of(cell: nbformat.NotebookNode) -> str:
    """What a cell printed: its stream outputs and the plain text of its results."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "text/plain" in output.get("data", {}):
            parts.append(output["data"]["text/plain"])
    return "".join(parts)


def opens(cell: nbformat.NotebookNode, name: str) -> bool:
    """Does this cell open the section ``name`` (its source names it, or its output shows its banner)?"""
    rule = "=" * WIDTH
    return name in cell.get("source", "") or f"{rule}\n{name}\n{rule}" in text_of(cell)


def section_cells(notebook: nbformat.NotebookNode, names: list[str]) -> dict[str, list[nbformat.NotebookNode]]:
    """Each recorded section's cells: from the cell that opens it to the one that opens the next section."""
    starts = []
    for name in names:
        index = next((i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code" and opens(cell, name)),
                     None)
        if index is not None:
            starts.append((index, name))
    starts.sort()
    bounds = [index for index, _ in starts] + [len(notebook.cells)]
    return {name: notebook.cells[index:bounds[k + 1]] for k, (index, name) in enumerate(starts)}


def pngs(cells: list[nbformat.NotebookNode]) -> list[bytes]:
    """The PNG images these cells output, in order."""
    found = []
    for cell in cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get("image/png")
            if data:
                found.append(base64.b64decode("".join(data) if isinstance(data, list) else data))
    return found


def banner_value(text: str, label: str) -> str | None:
    """A value of the environment banner (``GPU``, ``backend``, ``ncu CLI``, ``nsight``): the text after its label."""
    match = re.search(rf"^\s*{label} {{2,}}(\S.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def machine(notebook: nbformat.NotebookNode, started_at: str) -> str:
    """From the banner: "NVIDIA H200 with the CUPTI backend and the ncu 2025.3.1.0 command line (nsight-python 1.1.0,
    cupti-python 13.4.0), 2026-05-03"."""
    printed = "".join(text_of(cell) for cell in notebook.cells)
    gpu = banner_value(printed, "GPU")
    backend = banner_value(printed, "backend")
    if gpu is None or backend is None:
        raise FigureError("no environment banner (GPU, backend lines) in the executed notebook")
    gpu = "a machine without a GPU" if gpu.startswith("none") else gpu.split("  (")[0]
    name = backend.split(" -- ")[0].strip()
    text = f"{gpu} with {BACKENDS.get(name, f'the {name} backend')}"
    ncu = (banner_value(printed, "ncu CLI") or "none").split()[0]
    if name != "ncu" and ncu not in ("none", "-"):
        text += f" and the ncu {ncu} command line"
    versions = banner_value(printed, "nsight")
    if versions:
        text += f" ({versions})"
    return f"{text}, {started_at[:10]}"


def find_figures(card: dict, executed: dict[str, Path], figures: tuple[Figure, ...] = FIGURES) -> list[Found]:
    """Every figure of ``figures`` from the run, or :class:`FigureError` naming what is missing."""
    found, problems = [], []
    by_number = {entry["notebook"].split("_", 1)[0]: entry for entry in card["notebooks"]}
    for figure in figures:
        entry = by_number.get(figure.notebook)
        if entry is None or entry["notebook"] not in executed:
            problems.append(f"{figure.file}: notebook {figure.notebook} is not in this run")
            continue
        notebook = nbformat.read(executed[entry["notebook"]], as_version=4)
        cells = section_cells(notebook, [s["section"] for s in entry["sections"]])
        matching = [name for name in cells if figure.word.lower() in name.lower()]
        hit = next(((name, pngs(cells[name])[-1]) for name in matching if pngs(cells[name])), None)
        if hit is None:
            looked = "; ".join(f"{name!r} ({len(pngs(cells[name]))} images)" for name in matching) or "none"
            problems.append(f"{figure.file}: no image in a section of {entry['notebook']} named with "
                            f"{figure.word!r}; sections looked at: {looked}")
            continue
        try:
            found.append(Found(figure, entry["notebook"], hit[0], hit[1], machine(notebook, card["started_at"])))
        except FigureError as error:
            problems.append(f"{figure.file}: {entry['notebook']}: {error}")
    if problems:
        raise FigureError("\n".join(problems))
    return found


def card_table(card: dict) -> str:
    """docs/results-table.md: the card as the runner writes it, marked as generated."""
    note = "<!-- Written by scripts/readme_figures.py from the run's results.json; do not edit. -->\n"
    return note + card_markdown(card)


def readme_part(card: dict, found: list[Found], docs: str) -> str:
    """The generated Markdown between START and END (``docs``: the docs folder, relative to the README)."""
    first = found[0].machine if found else card["started_at"][:10]
    numbers = [entry["notebook"].split("_", 1)[0] for entry in card["notebooks"]]
    every = sorted(path.name.split("_", 1)[0] for path in (ROOT / "notebooks").glob("[0-9]*_*.ipynb"))
    command = "nspy-tutorial run" + ("" if sorted(numbers) == every else f" --only {' '.join(numbers)}")
    lines = [
        START,
        f"A recorded run of `{command}` on {first}: **{card['headline']}**. "
        f"Every section's status and one-line result: [{docs}/results-table.md]({docs}/results-table.md).",
        "",
    ]
    for hit in found:
        lines += [
            f"![{hit.notebook} · {hit.section}]({docs}/{hit.figure.file})",
            "",
            f"**{hit.notebook} · {hit.section}.** {hit.figure.what} Recorded on {hit.machine}.",
            "",
        ]
    return "\n".join(lines + [END])


def replace_part(readme: str, part: str) -> str:
    """``readme`` with the text from START to END replaced by ``part``; both markers must be there once."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise FigureError(f"the README must hold the two markers once each, in order:\n  {START}\n  {END}")
    head, rest = readme.split(START)
    return head + part + rest.split(END, 1)[1]


def write(run: Path, docs: Path, readme: Path) -> list[Found]:
    """Read the run, then write the figures, the card and the README part (nothing if anything is missing)."""
    card, executed = load_run(run)
    found = find_figures(card, executed)
    relative = Path(os.path.relpath(docs, readme.parent)).as_posix()
    text = replace_part(readme.read_text(encoding="utf-8"), readme_part(card, found, relative))
    docs.mkdir(parents=True, exist_ok=True)
    for hit in found:
        (docs / hit.figure.file).write_bytes(hit.png)
    (docs / "results-table.md").write_text(card_table(card), encoding="utf-8")
    readme.write_text(text, encoding="utf-8")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the folder `nspy-tutorial run --out` wrote")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go (default: docs/)")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the README to update")
    args = parser.parse_args(argv)
    try:
        found = write(args.run, args.docs, args.readme)
    except FigureError as error:
        print(f"readme_figures: {error}", file=sys.stderr)
        return 1
    for hit in found:
        print(f"{args.docs / hit.figure.file}: {hit.notebook} · {hit.section} ({len(hit.png)} bytes)")
    print(f"{args.docs / 'results-table.md'}; {args.readme} between its what-you-will-see markers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
