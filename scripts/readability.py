"""Report the printed output of executed notebooks that a learner cannot read at a glance.

Reads every executed notebook of a run and reports, per notebook and section:

* every printed line longer than 120 characters (stdout, stderr, and the plain text of a cell's
  result), as Jupyter shows it: ANSI colour codes removed, a carriage return's overwrite applied;
* every printed table wider than 8 columns: pandas' ``to_string``/``print(df)`` layout, its
  columns counted from the header line (index levels included; a table pandas wrapped into
  several blocks counted whole; ``[n rows x m columns]`` believed where pandas printed it), and
  HTML tables (a DataFrame as a cell's last value), counted from their first header row.

Tracebacks (error outputs) are not lesson output and are not read. A section is found by the
banner the section guard prints (a rule of ``=``, the title, a rule); output of a cell that
prints none is reported under its cell number.

Usage: python scripts/readability.py RUN_DIR [--width 120] [--columns 8]

RUN_DIR is the folder ``nspy-tutorial run --out RUN_DIR`` wrote (its ``notebooks/`` holds the
executed copies), a folder of executed notebooks (``pytest --nbmake --overwrite``), or one or more
``.ipynb`` files. Exit status: 0 when nothing is too wide, 1 when something is, 2 when there is
nothing to read (no notebook, or none with outputs: were they executed?).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import nbformat

WIDTH, COLUMNS = 120, 8
RULE = "=" * 78  # nspy_tutorial.display.banner's rule
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FOOTER = re.compile(r"^\s*\[(\d+) rows x (\d+) columns\]\s*$")
EXCERPT = 90


@dataclass(frozen=True)
class Finding:
    """One thing too wide: ``kind`` is "line" (``size`` characters) or "table" (``size`` columns)."""

    notebook: str
    section: str
    kind: str
    size: int
    text: str


def shown_lines(text: str) -> list[str]:
    """The lines of an output as Jupyter shows them: colour codes gone, each carriage return's overwrite applied."""
    return [ANSI.sub("", line).rsplit("\r", 1)[-1] for line in text.split("\n")]


def _runs(line: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each run of non-space characters of ``line[start:end]``, end exclusive."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", line[:end]) if m.start() >= start]


def _blank(rows: list[str], start: int, end: int) -> bool:
    """True when every row has only spaces in ``[start, end)``."""
    return all(not row[start:end].strip() for row in rows)


def _splits_words(rows: list[str], gap: int) -> bool:
    """True when some row has a letter on both sides of position ``gap``: a space inside text, not a gutter."""
    return any(0 < gap < len(row) - 1 and row[gap - 1].isalpha() and row[gap + 1].isalpha() for row in rows)


def table_shape(block: list[str]) -> tuple[int, int]:
    """(index levels, columns) of one pandas ``to_string`` block: its header line, then rows of the same width.

    pandas right-aligns each column's name and values, so a header word ends a column's name where every row
    has a space just after it and some row has a value in the span it closes; otherwise it is one word of a
    longer name ("% of datasheet" over "88.7"). Names one space apart (``index=False``) are one name where a
    row has letters on both sides of that space ("in words" over "tens of us"). A span whose rows all repeat the header's text is not a column
    but lines printed with one format ("warm  6.2 us" over "warm 237.9 us"), and is not counted. The index is
    what left-aligned rows hold left of the first name, before a gutter (levels: split where the rows and the
    names line pandas prints under the header of a named index both have gutters; unnamed: one). (0, 0) when
    the block does not read as a table.
    """
    header, rows = block[0].rstrip().removesuffix("\\").rstrip(), block[1:]
    words = _runs(header)
    if not words or not rows:
        return 0, 0
    first = words[0][0]
    names = rows[0] if len(rows) > 1 and rows[0].strip() and _blank(rows[:1], first, len(rows[0])) else None
    rows = rows[1:] if names else rows
    gutters = [p for p in range(first) if _blank(rows, p, p + 1)]
    index_end = max((g for g in gutters if not _blank(rows, 0, g)), default=None)  # a gutter with values left of it
    left_aligned = len({len(row) - len(row.lstrip()) for row in rows}) == 1  # labels are; index=False values not
    if index_end is None or not (names or left_aligned):
        index_end, index = None, 0
    elif names:  # levels: the names line's words, two levels where the rows have a gutter between them too
        named = _runs(names, 0, index_end)
        index = 1 + sum(any(_blank(rows, g, g + 1) for g in range(end, nxt)) for (_, end), (nxt, _) in zip(named, named[1:]))
    else:
        index = 1
    spans, start = [], 0 if index_end is None else index_end + 1
    for (_, end), (nxt, _) in zip(words, words[1:]):
        gutter, filled = _blank(rows, end, end + 1), not _blank(rows, start, end)
        if gutter and filled and (nxt - end > 1 or not _splits_words(rows, end)):
            spans.append((start, end))
            start = nxt
    spans.append((start, len(header)))
    columns = sum(any(row[a:b].strip() != header[a:b].strip() for row in rows) for a, b in spans)
    return (index, columns) if columns > 1 or (index and columns) else (0, 0)


def _block_end(lines: list[str], i: int) -> int:
    """The end (exclusive) of the run of non-blank lines from ``i`` that are as long as line ``i``."""
    j = i + 1
    while j < len(lines) and lines[j].strip() and len(lines[j]) == len(lines[i]):
        j += 1
    return j


def text_tables(lines: list[str]) -> list[tuple[int, int]]:
    """(line index, columns with the index) of each pandas table in ``lines``; one pandas wrapped counts whole."""
    found, i = [], 0
    while i < len(lines):
        j = _block_end(lines, i)
        index, columns = table_shape(lines[i:j]) if j - i >= 2 and lines[i].strip() else (0, 0)
        if not columns:
            i += 1
            continue
        start = i
        while lines[i].rstrip().endswith("\\") and j + 1 < len(lines):  # wrapped: the next block follows a blank line
            i = j + 1
            j = _block_end(lines, i)
            more = table_shape(lines[i:j])[1]
            if not more:
                break
            columns += more
        footer = next((FOOTER.match(line) for line in lines[j:j + 2] if FOOTER.match(line)), None)
        if footer:  # pandas left columns out ("..."): it says how many there are
            columns = max(columns, int(footer[2]))
        found.append((start, index + columns))
        i = j
    return found


class _FirstHeaderRow(HTMLParser):
    """Counts the cells of the first row of each ``<table>``'s ``<thead>`` (pandas: index first, then columns)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[int] = []
        self._state = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self._state = "table"
        elif tag == "tr" and self._state == "table":
            self._state, self._cells = "row", 0
        elif tag in ("th", "td") and self._state == "row":
            self._cells += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._state == "row":
            self.tables.append(self._cells)
            self._state = None


def html_tables(html: str) -> list[int]:
    parser = _FirstHeaderRow()
    parser.feed(html)
    return parser.tables


def output_texts(cell: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """("text", ...) or ("html", ...) for each output of a code cell a reader sees as text or a table."""
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(("text", output.get("text", "")))
        elif output.get("output_type") in ("execute_result", "display_data"):
            data = output.get("data", {})
            if "text/html" in data:
                texts.append(("html", data["text/html"]))
            elif "text/plain" in data and not any(key.startswith("image/") for key in data):
                texts.append(("text", data["text/plain"]))
    return [(kind, "".join(text) if isinstance(text, list) else text) for kind, text in texts]


def excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= EXCERPT else text[:EXCERPT - 1] + "…"


def notebook_findings(path: Path, width: int = WIDTH, columns: int = COLUMNS) -> list[Finding]:
    """Everything too wide in one executed notebook, in the order it was printed."""
    found = []
    for number, cell in enumerate(nbformat.read(path, as_version=4).cells, 1):
        section = f"cell {number} (no section)"
        for kind, text in output_texts(cell) if cell.cell_type == "code" else []:
            if kind == "html":
                found += [Finding(path.stem, section, "table", n, "an HTML table") for n in html_tables(text)
                          if n > columns]
                continue
            lines, labels = shown_lines(text), []
            for i, line in enumerate(lines):
                if line == RULE and i + 2 < len(lines) and lines[i + 2] == RULE:
                    section = lines[i + 1].strip()
                labels.append(section)
            wide = {i: Finding(path.stem, labels[i], "table", n, excerpt(lines[i]))
                    for i, n in text_tables(lines) if n > columns}
            for i, line in enumerate(lines):
                found += [wide[i]] if i in wide else []
                if len(line) > width:
                    found.append(Finding(path.stem, labels[i], "line", len(line), excerpt(line)))
    return found


def notebooks(paths: list[Path]) -> list[Path]:
    """The executed notebooks named by the command line (a run folder, a folder of notebooks, or files)."""
    found = []
    for path in paths:
        if path.is_dir():
            folder = path / "notebooks" if (path / "notebooks").is_dir() else path
            found += sorted(folder.glob("*.ipynb"))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
    return found


def executed(path: Path) -> bool:
    return any(cell.get("outputs") for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def report(findings: list[Finding], width: int, columns: int) -> list[str]:
    """The report's lines: per notebook, per section, each finding; then one summary line."""
    lines, where = [], None
    for f in findings:
        if (f.notebook, f.section) != where:
            lines += [f.notebook] if where is None or where[0] != f.notebook else []
            lines.append(f"  [{f.section}]")
            where = (f.notebook, f.section)
        what = f"line of {f.size} characters" if f.kind == "line" else f"table of {f.size} columns"
        lines.append(f"    {what}: {f.text}")
    long_lines = sum(f.kind == "line" for f in findings)
    tables = len(findings) - long_lines
    notebooks = len({f.notebook for f in findings})
    lines.append(f"{_plural(long_lines, 'printed line')} over {width} characters, {_plural(tables, 'table')} over "
                 f"{columns} columns, in {_plural(notebooks, 'notebook')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR",
                        help="nspy-tutorial run's --out folder, a folder of executed notebooks, or .ipynb files")
    parser.add_argument("--width", type=int, default=WIDTH, help="longest printed line allowed (characters)")
    parser.add_argument("--columns", type=int, default=COLUMNS, help="widest printed table allowed (columns)")
    args = parser.parse_args(argv)
    paths = notebooks(args.paths)
    ran = [path for path in paths if executed(path)]
    for path in sorted(set(paths) - set(ran)):
        print(f"warning: {path} has no outputs (was it executed?): not read", file=sys.stderr)
    if not ran:
        print(f"no executed notebook under {', '.join(map(str, args.paths))}: give the folder "
              "`nspy-tutorial run --out` wrote, or executed .ipynb files", file=sys.stderr)
        return 2
    findings = [f for path in ran for f in notebook_findings(path, args.width, args.columns)]
    print("\n".join(report(findings, args.width, args.columns)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
