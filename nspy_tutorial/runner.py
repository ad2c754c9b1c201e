"""Run the tutorial notebooks headless and write a results card.

Usage::

    nspy-tutorial run [--notebooks-dir notebooks] [--out results]
                      [--only 02 05 ...] [--timeout 1800]

Each notebook is executed in its own Jupyter kernel. The notebooks' section
guards append one JSON line per section to the file named by the environment
variable ``NSPY_TUTORIAL_RESULTS``; the runner points that variable at a fresh
file per notebook, reads the records back, and summarises everything in
``<out>/results.json`` and ``<out>/results.md`` next to executed copies of the
notebooks in ``<out>/notebooks/``.

The output folder is written atomically: everything goes into a sibling
``<out>.partial-<pid>`` folder that replaces ``<out>`` only once the run is
complete, so an interrupted run never leaves a half-written card behind.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from nspy_tutorial.sections import STATUSES, SectionRecord

RESULTS_ENV_VAR = "NSPY_TUTORIAL_RESULTS"
NOTEBOOK_NAME = re.compile(r"^(\d+)_.+\.ipynb$")
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class RunnerError(Exception):
    """A problem with the command line or the folders, reported without a traceback."""


@dataclass
class NotebookResult:
    """The outcome of executing one notebook.

    ``status`` is "OK" only when every cell ran and no section FAILED, because
    a skipped section is an expected outcome (e.g. no GPU) but a failed one is not.
    """

    notebook: str
    status: str
    seconds: float
    error: str | None = None
    sections: list[SectionRecord] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Number of sections per status, with all three statuses present."""
        counter = Counter(section.status for section in self.sections)
        return {status: counter.get(status, 0) for status in STATUSES}


# --------------------------------------------------------------------------
# Finding notebooks
# --------------------------------------------------------------------------


def notebook_number(path: Path) -> int:
    """The numeric prefix of a notebook file name, e.g. 2 for ``02_first_profile.ipynb``."""
    match = NOTEBOOK_NAME.match(path.name)
    if match is None:
        raise ValueError(f"not a tutorial notebook name: {path.name}")
    return int(match.group(1))


def find_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Return the ``NN_*.ipynb`` notebooks in numeric order, optionally only some.

    ``only`` holds number prefixes such as "1" or "01"; they are compared as
    numbers so that both spellings work. A value that matches no notebook is an
    error naming the available numbers, so a typo never silently runs nothing.
    """
    if not notebooks_dir.is_dir():
        raise RunnerError(f"notebooks folder not found: {notebooks_dir}")
    notebooks = sorted(
        (path for path in notebooks_dir.iterdir() if NOTEBOOK_NAME.match(path.name)),
        key=lambda path: (notebook_number(path), path.name),
    )
    if not notebooks:
        raise RunnerError(f"no NN_*.ipynb notebooks in {notebooks_dir}")
    if not only:
        return notebooks
    return select_notebooks(notebooks, only)


def select_notebooks(notebooks: list[Path], only: list[str]) -> list[Path]:
    """Keep the notebooks whose number is listed in ``only``; reject unknown numbers."""
    available = {notebook_number(path) for path in notebooks}
    wanted: set[int] = set()
    unknown: list[str] = []
    for value in only:
        if value.isdigit() and int(value) in available:
            wanted.add(int(value))
        else:
            unknown.append(value)
    if unknown:
        names = ", ".join(path.name.split("_", 1)[0] for path in notebooks)
        raise RunnerError(
            f"--only {' '.join(unknown)}: no such notebook number; available: {names}"
        )
    return [path for path in notebooks if notebook_number(path) in wanted]


# --------------------------------------------------------------------------
# Section records
# --------------------------------------------------------------------------


def parse_section_record(line: str) -> SectionRecord | None:
    """Turn one JSON line into a SectionRecord, or None if it is not a valid record."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    if not isinstance(data.get("section"), str) or data.get("status") not in STATUSES:
        return None
    return SectionRecord(
        notebook=str(data.get("notebook", "")),
        section=data["section"],
        status=data["status"],
        result=optional_text(data.get("result")),
        reason=optional_text(data.get("reason")),
        remedy=optional_text(data.get("remedy")),
        seconds=float(data.get("seconds") or 0.0),
    )


def optional_text(value: Any) -> str | None:
    """``None`` stays ``None``; anything else becomes its string form."""
    return None if value is None else str(value)


def read_section_records(path: Path) -> list[SectionRecord]:
    """Read a JSON-lines records file; the last record per (notebook, section) wins.

    A section is recorded again when its cell is re-run, and the latest run is
    the one that counts. Sections keep the position of their first record, so
    the card lists them in notebook order. Unreadable lines are skipped with a
    warning rather than failing the whole card.
    """
    if not path.exists():
        return []
    latest: dict[tuple[str, str], SectionRecord] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = parse_section_record(line)
        if record is None:
            print(f"warning: {path.name}:{number}: not a section record, ignored", file=sys.stderr)
            continue
        latest[(record.notebook, record.section)] = record
    return list(latest.values())


# --------------------------------------------------------------------------
# Executing one notebook
# --------------------------------------------------------------------------


def error_summary(error: Exception) -> str:
    """One line describing why a notebook stopped, e.g. ``ZeroDivisionError: division by zero``."""
    if isinstance(error, CellExecutionError):
        text = f"{error.ename}: {error.evalue}"
    else:
        text = f"{type(error).__name__}: {error}"
    lines = text.strip().splitlines()
    return lines[0] if lines else type(error).__name__


def run_client(notebook: nbformat.NotebookNode, notebooks_dir: Path, timeout: int) -> str | None:
    """Execute ``notebook`` in place; return None on success or a one-line error.

    The kernel runs in the notebooks folder so that relative paths inside the
    notebooks behave as they do when a reader opens them in Jupyter.
    """
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebooks_dir)}},
    )
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
        return error_summary(error)
    return None


def execute_notebook(
    path: Path, executed_dir: Path, records_dir: Path, timeout: int
) -> NotebookResult:
    """Execute one notebook headless, save the executed copy, and collect its sections.

    ``NSPY_TUTORIAL_RESULTS`` is set in this process's environment so the kernel
    inherits it, and restored afterwards. The executed copy is saved even when a
    cell fails, because the partial outputs are what a reader needs to debug it.
    """
    records_file = records_dir / f"{path.stem}.jsonl"
    notebook = nbformat.read(path, as_version=4)
    previous = os.environ.get(RESULTS_ENV_VAR)
    os.environ[RESULTS_ENV_VAR] = str(records_file)
    started = time.monotonic()
    try:
        error = run_client(notebook, path.parent.resolve(), timeout)
    finally:
        seconds = time.monotonic() - started
        restore_env(RESULTS_ENV_VAR, previous)
        nbformat.write(notebook, executed_dir / path.name)
    sections = read_section_records(records_file)
    failed = error is not None or any(s.status == "FAILED" for s in sections)
    return NotebookResult(
        notebook=path.stem,
        status="FAILED" if failed else "OK",
        seconds=round(seconds, 1),
        error=error,
        sections=sections,
    )


def restore_env(name: str, value: str | None) -> None:
    """Put an environment variable back to ``value`` (unset it when None)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# --------------------------------------------------------------------------
# The results card
# --------------------------------------------------------------------------


def now_text() -> str:
    """The current local time as ISO 8601 with offset, to the second."""
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def build_card(results: list[NotebookResult], started_at: str, finished_at: str) -> dict[str, Any]:
    """The results card as plain data, ready for JSON and for the Markdown writer."""
    section_totals: Counter[str] = Counter()
    for result in results:
        section_totals.update(result.counts())
    return {
        "started_at": started_at,
        "finished_at": finished_at,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "totals": {
            "notebooks": len(results),
            "notebooks_ok": sum(r.status == "OK" for r in results),
            "notebooks_failed": sum(r.status != "OK" for r in results),
            "sections": {status: section_totals.get(status, 0) for status in STATUSES},
            "seconds": round(sum(r.seconds for r in results), 1),
        },
        "notebooks": [notebook_entry(result) for result in results],
    }


def notebook_entry(result: NotebookResult) -> dict[str, Any]:
    """One notebook's part of the card."""
    return {
        "notebook": result.notebook,
        "status": result.status,
        "seconds": result.seconds,
        "error": result.error,
        "counts": result.counts(),
        "sections": [asdict(section) for section in result.sections],
    }


def counts_text(counts: dict[str, int]) -> str:
    """Section counts as text, e.g. ``3 OK, 1 SKIPPED, 0 FAILED``."""
    return ", ".join(f"{counts[status]} {status}" for status in STATUSES)


def table_text(value: str | None) -> str:
    """Make text safe for one Markdown table cell: first line only, pipes escaped."""
    if not value:
        return ""
    first_line = value.strip().splitlines()[0] if value.strip() else ""
    return first_line.replace("|", "\\|")


def section_row(section: dict[str, Any]) -> str:
    """One Markdown table row: the result for OK sections, else reason and remedy."""
    if section["status"] == "OK":
        detail, remedy = section["result"], None
    else:
        detail, remedy = section["reason"], section["remedy"]
    return (
        f"| {table_text(section['section'])} | {section['status']} "
        f"| {table_text(detail)} | {table_text(remedy)} |"
    )


def notebook_markdown(entry: dict[str, Any]) -> list[str]:
    """The Markdown lines for one notebook: heading, counts, error, section table."""
    lines = [
        f"## {entry['notebook']} — {entry['status']}",
        "",
        f"{counts_text(entry['counts'])} in {entry['seconds']:.1f} s",
        "",
    ]
    if entry["error"]:
        lines += [f"**Stopped by an error:** `{entry['error']}`", ""]
    if not entry["sections"]:
        return lines + ["_No section records._", ""]
    lines += ["| Section | Status | Result or reason | Remedy |", "|---|---|---|---|"]
    lines += [section_row(section) for section in entry["sections"]]
    return lines + [""]


def overview_markdown(card: dict[str, Any]) -> list[str]:
    """One summary row per notebook, so a long run can be judged at a glance."""
    lines = [
        "| Notebook | Status | OK | SKIPPED | FAILED | Time (s) | Error |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in card["notebooks"]:
        counts = entry["counts"]
        lines.append(
            f"| {entry['notebook']} | {entry['status']} | {counts['OK']} | {counts['SKIPPED']} "
            f"| {counts['FAILED']} | {entry['seconds']:.1f} | {table_text(entry['error'])} |"
        )
    return lines + [""]


def skip_reasons_markdown(card: dict[str, Any]) -> list[str]:
    """A "Why sections were skipped" list grouping identical reasons, most common first."""
    reasons = Counter(
        section["reason"] or "no reason given"
        for entry in card["notebooks"]
        for section in entry["sections"]
        if section["status"] == "SKIPPED"
    )
    if not reasons:
        return []
    lines = ["## Why sections were skipped", ""]
    for reason, count in reasons.most_common():
        noun = "section" if count == 1 else "sections"
        lines.append(f"- {table_text(reason)} — {count} {noun}")
    return lines + [""]


def write_card_markdown(card: dict[str, Any], path: Path) -> None:
    """Write the human-readable card: header, overview, one table per notebook, skip reasons."""
    totals = card["totals"]
    machine = card["machine"]
    lines = [
        "# nspy-tutorial results",
        "",
        f"- When: {card['started_at']} to {card['finished_at']}",
        f"- Machine: {machine['platform']}, Python {machine['python']}",
        f"- Notebooks: {totals['notebooks_ok']} of {totals['notebooks']} OK in {totals['seconds']:.1f} s",
        f"- Sections: {counts_text(totals['sections'])}",
        "",
    ]
    lines += overview_markdown(card)
    for entry in card["notebooks"]:
        lines += notebook_markdown(entry)
    lines += skip_reasons_markdown(card)
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def write_card_json(card: dict[str, Any], path: Path) -> None:
    """Write the machine-readable card."""
    path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------
# The output folder
# --------------------------------------------------------------------------


def partial_dir_for(out: Path) -> Path:
    """The temporary sibling folder a run writes into before it replaces ``out``."""
    return out.parent / f"{out.name}.partial-{os.getpid()}"


def check_out_dir(out: Path) -> None:
    """Refuse to replace a folder that is not a previous results folder.

    The run deletes the old ``out`` at the end; this guard stops a mistyped
    ``--out`` (say, the project folder) from being wiped.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise RunnerError(f"--out {out} exists and is not a folder")
    if any(out.iterdir()) and not (out / "results.json").exists():
        raise RunnerError(
            f"--out {out} exists and does not look like a results folder "
            "(no results.json); refusing to replace it"
        )


def replace_dir(partial: Path, out: Path) -> None:
    """Swap the finished partial folder into place of ``out``."""
    if out.exists():
        shutil.rmtree(out)
    os.replace(partial, out)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def progress_end(result: NotebookResult) -> str:
    """The end-of-notebook part of a progress line."""
    summary = counts_text(result.counts())
    if result.error:
        return f"FAILED after {result.seconds:.1f} s: {summary}; {result.error}"
    return f"done in {result.seconds:.1f} s: {summary}"


def run_all(notebooks: list[Path], partial: Path, timeout: int) -> list[NotebookResult]:
    """Execute the notebooks in order, printing one line before and after each."""
    executed_dir = partial / "notebooks"
    executed_dir.mkdir(parents=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="nspy-tutorial-records-") as records:
        for index, path in enumerate(notebooks, 1):
            label = f"[{index}/{len(notebooks)}] {path.stem} ..."
            print(label, flush=True)
            result = execute_notebook(path, executed_dir, Path(records), timeout)
            print(f"{label} {progress_end(result)}", flush=True)
            results.append(result)
    return results


def run(notebooks_dir: Path, out: Path, only: list[str] | None, timeout: int) -> int:
    """Run the notebooks, write the card, and return the exit code.

    Everything is written to a partial folder first; it replaces ``out`` only
    after the card is complete, and is removed if anything goes wrong.
    """
    notebooks = find_notebooks(notebooks_dir, only)
    out = out.resolve()
    check_out_dir(out)
    partial = partial_dir_for(out)
    shutil.rmtree(partial, ignore_errors=True)
    started_at = now_text()
    try:
        results = run_all(notebooks, partial, timeout)
        card = build_card(results, started_at, now_text())
        write_card_json(card, partial / "results.json")
        write_card_markdown(card, partial / "results.md")
        replace_dir(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(f"Results card: {out / 'results.md'} (data: {out / 'results.json'})")
    return EXIT_OK if all(r.status == "OK" for r in results) else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    """The command line: one ``run`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="nspy-tutorial",
        description="Run the nspy-tutorial notebooks and write a results card.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="execute the notebooks headless")
    run_parser.add_argument(
        "--notebooks-dir",
        type=Path,
        default=Path("notebooks"),
        help="folder holding NN_*.ipynb (default: notebooks)",
    )
    run_parser.add_argument(
        "--out",
        type=Path,
        default=Path("results"),
        help="output folder, replaced at the end of the run (default: results)",
    )
    run_parser.add_argument(
        "--only", nargs="+", metavar="NN", help="run only these notebook numbers, e.g. --only 02 05"
    )
    run_parser.add_argument(
        "--timeout", type=int, default=1800, help="seconds allowed per cell (default: 1800)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nspy-tutorial`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return run(args.notebooks_dir, args.out, args.only, args.timeout)
    except RunnerError as error:
        print(f"nspy-tutorial: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\nInterrupted; {args.out} was left as it was.", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
