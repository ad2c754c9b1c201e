"""The results card: the runner's pytest plug-in (``-p nspy_tutorial.card --nspy-card DIR --nspy-progress-fd FD``)
that points ``NSPY_TUTORIAL_RESULTS`` at one records file per notebook, prints a progress line to FD before and
after each, and at the end writes ``DIR/results.json`` and ``DIR/results.md`` (not when the run was interrupted)."""

import datetime as dt
import json
import os
import platform
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from nspy_tutorial.sections import CC_NEED, FAILED, OK, RESULTS_VAR, SKIPPED, STATUSES, SectionRecord, first_line

NEED_LABELS = {"gpu": "no GPU", "profiler": "no profiler backend", "ncu": "no Nsight Compute backend",
               "ncu-cli": "no ncu command line", "cupti": "no cupti-python", "triton": "no Triton",
               "counters": "GPU counters reserved to administrators"}


def now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def read_section_records(path: Path) -> list[SectionRecord]:
    """The records in a JSON-lines file, the last per section (a re-run cell counts); others are warned of."""
    latest: dict[str, SectionRecord] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines() if path.exists() else [], 1):
        try:
            record = SectionRecord(**json.loads(line))
        except (ValueError, TypeError):  # not JSON, or not a record's fields
            if line.strip():
                print(f"warning: {path.name}:{number}: not a section record, ignored", file=sys.stderr)
            continue
        latest[record.section] = record
    return list(latest.values())


def notebook_entry(name: str, seconds: float, sections: list[SectionRecord], error: str | None = None,
                   cell: int | None = None) -> dict[str, Any]:
    """One notebook on the card: OK when every cell ran and no section FAILED."""
    counts = Counter(s.status for s in sections)
    return {"notebook": name, "status": FAILED if error or counts[FAILED] else OK, "seconds": round(seconds, 1),
            "error": error, "cell": cell, "counts": {status: counts[status] for status in STATUSES},
            "sections": [asdict(s) for s in sections]}


def need_label(needs: str | None) -> str:
    """Why a section was skipped, in a few words, from the need it lacked."""
    if CC_NEED.fullmatch(needs or ""):
        return f"GPU below compute capability {needs[2:]}"
    return NEED_LABELS.get(needs, f"no {needs}") if needs else "other reasons"


def headline(entries: list[dict[str, Any]]) -> str:
    """What ran (``3 sections ran OK, 23 skipped (21 no GPU, 2 other reasons), 0 failed``); any error's stop."""
    sections = [s for entry in entries for s in entry["sections"]]
    counts = Counter(s["status"] for s in sections)
    skipped = Counter(need_label(s["needs"]) for s in sections if s["status"] == SKIPPED).most_common()
    why = f" ({', '.join(f'{n} {label}' if len(skipped) > 1 else label for label, n in skipped)})" if skipped else ""
    stopped = [(e["notebook"], e["cell"]) for e in entries if e["error"] is not None]
    failed = plural(counts[FAILED], "section") if stopped else str(counts[FAILED])
    text = f"{plural(counts[OK], 'section')} ran OK, {counts[SKIPPED]} skipped{why}, {failed} failed"
    if len(stopped) == 1:
        where = f" in cell {stopped[0][1]}" if stopped[0][1] is not None else ""
        text += f"; 1 of {plural(len(entries), 'notebook')} stopped by an error{where} ({stopped[0][0]})"
    elif stopped:
        where = ", ".join(name + (f" cell {cell}" if cell is not None else "") for name, cell in stopped)
        text += f"; {len(stopped)} of {len(entries)} notebooks stopped by an error ({where})"
    return text


def build_card(entries: list[dict[str, Any]], started_at: str, finished_at: str) -> dict[str, Any]:
    """The results card as plain data, ready for JSON and for :func:`card_markdown`."""
    return {"started_at": started_at, "finished_at": finished_at, "headline": headline(entries),
            "machine": {"platform": platform.platform(), "python": platform.python_version()},
            "totals": {"notebooks": len(entries), "notebooks_ok": sum(e["status"] == OK for e in entries),
                       "notebooks_failed": sum(e["status"] != OK for e in entries),
                       "sections": {status: sum(e["counts"][status] for e in entries) for status in STATUSES},
                       "seconds": round(sum(e["seconds"] for e in entries), 1)},
            "notebooks": entries}


def merge_cards(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """A run of some notebooks (``later``) over an earlier card: the notebooks it redid replace their rows, the
    others' stay, in notebook order; the headline counts them all and names what this run redid."""
    redone = [e["notebook"] for e in later["notebooks"]]
    kept = [e for e in earlier["notebooks"] if e["notebook"] not in redone]
    if not kept:
        return later
    entries = sorted(kept + later["notebooks"], key=lambda e: (int(e["notebook"].split("_")[0]), e["notebook"]))
    merged = build_card(entries, later["started_at"], later["finished_at"])  # (names are NN_*: runner.find_notebooks)
    merged["headline"] += (f"; this run redid {', '.join(redone)}, {plural(len(kept), 'notebook')} kept from the run "
                           f"of {earlier['started_at']}")
    return {**merged, "redone": redone, "kept_from": earlier["started_at"]}


def cell_text(value: str | None) -> str:
    """Text for one Markdown table cell: the whole first line, pipes escaped."""
    return first_line(value or "", limit=sys.maxsize).replace("|", "\\|")


EMPTY = "—"  # what the card shows for a value it does not have: never "None", "nan" or a blank cell
SEE_ABOVE = "(see above)"


def shown(value: str | None) -> str:
    """A table cell's text, or an em dash where the value is missing, blank, None or NaN (also as text)."""
    text = cell_text(value).strip()
    return EMPTY if text.lower() in ("", "none", "nan", "<na>", "null") else text


def shown_status(entry: dict[str, Any]) -> str:
    """The notebook's status as the card says it: OK/FAILED, or "nothing ran: no GPU" when every section skipped."""
    sections = entry["sections"]
    if entry["error"] or not sections or any(s["status"] != SKIPPED for s in sections):
        return entry["status"]
    labels = dict.fromkeys(need_label(s["needs"]) for s in sections)  # in order, once each
    return f"nothing ran: {', '.join(labels)}"


def shared_skip(sections: list[dict[str, Any]]) -> tuple[str, str | None, int] | None:
    """The reason and remedy two or more of a notebook's skipped sections share (the commonest), and how many."""
    pairs = Counter((s["reason"], s["remedy"]) for s in sections if s["status"] == SKIPPED and s["reason"])
    if not pairs:
        return None
    (reason, remedy), count = pairs.most_common(1)[0]
    return (reason, remedy, count) if count > 1 else None


def section_rows(sections: list[dict[str, Any]]) -> list[str]:
    """A notebook's table of sections; a reason shared by several skips is said once, above it."""
    if not sections:
        return ["_No section records._"]
    shared, lines = shared_skip(sections), []
    if shared:
        reason, remedy, count = shared
        which = f"All {count} sections" if count == len(sections) else f"{count} of {len(sections)} sections"
        lines += [f"**{which} below: SKIPPED** — {shown(reason)}; **what to do:** {shown(remedy)}", ""]
    lines += ["| Section | Status | Result or reason | Remedy |", "|---|---|---|---|"]
    for s in sections:
        detail, remedy = (s["result"], None) if s["status"] == OK else (s["reason"], s["remedy"])
        detail, remedy = shown(detail), shown(remedy)
        if shared and s["status"] == SKIPPED:
            reason_above, remedy_above = cell_text(shared[0]), shown(shared[1])
            quoted = len(reason_above) >= 40  # long enough that it is the reason, not a word of another
            detail = SEE_ABOVE if detail == reason_above else detail.replace(reason_above, SEE_ABOVE) if quoted else detail
            remedy = SEE_ABOVE if remedy == remedy_above and remedy != EMPTY else remedy
        lines.append(f"| {shown(s['section'])} | {s['status']} | {detail} | {remedy} |")
    return lines


def card_markdown(card: dict[str, Any]) -> str:
    """The card to read: headline, one row per notebook, a table per notebook, skip reasons."""
    totals, entries = card["totals"], card["notebooks"]
    idle = sum(shown_status(e).startswith("nothing ran") for e in entries)
    lines = ["# nspy-tutorial results", "", f"**{card['headline']}**", "",
             f"- Notebooks: {totals['notebooks_ok']} of {totals['notebooks']} without a FAILED section"
             + (f" ({idle} of them ran nothing)" if idle else "") + f", {totals['seconds']:.1f} s",
             f"- When: {card['started_at']} to {card['finished_at']}",
             f"- Machine: {card['machine']['platform']}, Python {card['machine']['python']}", "",
             "| Notebook | Status | OK | SKIPPED | FAILED | Time (s) | Error |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {e['notebook']} | {shown_status(e)} | {' | '.join(str(e['counts'][s]) for s in STATUSES)} "
              f"| {e['seconds']:.1f} | {shown(e['error'])} |" for e in entries]
    for e in entries:
        lines += ["", f"## {e['notebook']} — {shown_status(e)}", ""]
        lines += [f"**Stopped by an error:** {shown(e['error'])}", ""] if e["error"] else []
        lines += section_rows(e["sections"])
    reasons = Counter(s["reason"] or "no reason given" for e in entries for s in e["sections"]
                      if s["status"] == SKIPPED)
    if reasons:
        lines += ["", "## Why sections were skipped", ""]
        lines += [f"- {shown(reason)} — {plural(count, 'section')}" for reason, count in reasons.most_common()]
    return "\n".join(lines).rstrip() + "\n"


def stop_reason(excinfo: pytest.ExceptionInfo, path: Path, timeout: int) -> tuple[str, int | None]:
    """Why nbmake stopped a notebook, in one line, and the cell (1-based) it stopped in, if known."""
    result = excinfo.value.args[0] if excinfo.value.args else None
    error, text = getattr(result, "error", None), first_line(str(excinfo.value))
    if excinfo.typename == "DeadKernelError":
        return f"the kernel died ({text})", None
    if error is None or not hasattr(result, "nb"):  # not a cell's error, e.g. nbformat's NotJSONError
        return f"cannot read {path.name}: {excinfo.typename}: {text}", None
    index, cells = error.failing_cell_index, result.nb.cells
    where = f'cell {index + 1} of {len(cells)} ("{first_line(cells[index].source, 60)}"): '
    shown = [o for o in cells[index].get("outputs", []) if o.get("output_type") == "error"]
    if error.summary.startswith("A cell timed out") or not shown:  # nbclient's CellTimeoutError
        return f"{where}still running after {timeout} s (--timeout); the kernel was stopped", index + 1
    return f"{where}{shown[0]['ename']}: {first_line(shown[0]['evalue'])}", index + 1


class Card:
    """The plug-in's state: the progress stream, the card's folder, one card entry per notebook."""

    def __init__(self, config: pytest.Config) -> None:
        self.out, self.timeout = config.getoption("nspy_card"), config.getoption("nbmake_timeout")
        self.progress = os.fdopen(config.getoption("nspy_progress_fd"), "w", buffering=1)
        self.entries: list[dict[str, Any]] = []
        self.started_at = now()
        self.label = ""  # the running notebook's progress line, e.g. "[2/10] 02_first_profile ..."

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.label = f"[{len(self.entries) + 1}/{item.session.testscollected}] {item.path.stem} ..."
        print(self.label, file=self.progress)
        os.environ[RESULTS_VAR] = str(self.out / f"{item.path.stem}.jsonl")  # the kernel nbmake starts inherits it

    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> None:
        if call.when == "call":
            error, cell = stop_reason(call.excinfo, item.path, self.timeout) if call.excinfo else (None, None)
            records = read_section_records(Path(os.environ[RESULTS_VAR]))  # what setup pointed the kernel at
            entry = notebook_entry(item.path.stem, call.duration, records, error, cell)
            counts = ", ".join(f"{entry['counts'][status]} {status}" for status in STATUSES)
            done = f"FAILED after {entry['seconds']:.1f} s: {counts}; {error}" if error else \
                f"done in {entry['seconds']:.1f} s: {counts}"
            print(f"{self.label} {done}", file=self.progress)
            self.entries.append(entry)

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        if exitstatus != pytest.ExitCode.INTERRUPTED:
            card = build_card(self.entries, self.started_at, now())
            (self.out / "results.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
            (self.out / "results.md").write_text(card_markdown(card), encoding="utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--nspy-card", type=Path, help="write the results card of this nbmake run into this folder")
    parser.addoption("--nspy-progress-fd", type=int, help="file descriptor for the progress lines")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Card(config), "nspy-card")
