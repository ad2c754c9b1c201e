"""The section guard: every notebook section ends OK, SKIPPED or FAILED, honestly.

A section is a ``with`` block::

    with section("2. Profile one kernel") as s:
        ENV.require("profiler")          # raises Skip: the section is SKIPPED
        ...                              # any other exception: FAILED
        s.result = "fp32 2048 matmul 1.23 ms"   # the one-line OK result

* OK      -- the block finished; ``s.result`` is its one-line result (required).
* SKIPPED -- the block raised :class:`Skip` (an explicit precondition such as
  "needs a GPU"), with a reason and a remedy.
* FAILED  -- anything else; the traceback is printed.

Environment variables (read at each section's start and end, so a notebook need not
restart; a value they do not understand raises :class:`SettingError` there, so a typo
fails the cell loudly instead of being ignored):

* ``NSPY_TUTORIAL_STRICT=1``: a FAILED section re-raises, so nbmake/nbclient fail.
  Spellings: 1/0, true/false, yes/no, on/off (any case), or empty (off).
* ``NSPY_TUTORIAL_RESULTS=<file>``: every section appends one JSON line
  (notebook, section, status, result, reason, remedy, needs, seconds).
* ``NSPY_TUTORIAL_REQUIRE=ncu``: a section skipped while the Nsight Compute backend is
  missing counts as a failure (for a GPU runner that must have it), also when it lacked
  something else first, such as the GPU (see :class:`Skip`). Comma-separated needs:
  gpu, profiler, ncu, ncu-cli, cupti, triton, counters, cc<major>.<minor> (e.g. cc8.0).

An exception whose text carries ``ERR_NVGPUCTRPERM`` (performance counters reserved to
administrators) ends the section SKIPPED with need ``counters`` and what to do, whichever
tool raised it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import traceback
from types import TracebackType

from nspy_tutorial.display import banner

OK, SKIPPED, FAILED = "OK", "SKIPPED", "FAILED"
STATUSES = (OK, SKIPPED, FAILED)

STRICT_VAR = "NSPY_TUTORIAL_STRICT"
REQUIRE_VAR = "NSPY_TUTORIAL_REQUIRE"
RESULTS_VAR = "NSPY_TUTORIAL_RESULTS"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")
# What ``Environment.require`` and ``require_compute_capability`` put in ``Skip.needs``.
NEEDS = ("gpu", "profiler", "ncu", "ncu-cli", "cupti", "triton", "counters")
# The most common Nsight Compute failure on shared machines: the driver lets only administrators
# read the GPU's performance counters. Whichever tool meets it (nsight-python's Nsight Compute
# backend or the ncu command line), its error text carries this code; the section is then
# SKIPPED with need "counters" and this remedy, not FAILED.
COUNTERS_CODE = "ERR_NVGPUCTRPERM"
COUNTERS_REMEDY = (
    "ask an administrator to allow GPU performance counters for all users (driver module option "
    "`NVreg_RestrictProfilingToAdminUsers=0`, see https://developer.nvidia.com/ERR_NVGPUCTRPERM), "
    "or run as root; the CUPTI backend's kernel durations still work without it"
)
CC_NEED = re.compile(r"cc\d+\.\d+")


class SettingError(ValueError):
    """An ``NSPY_TUTORIAL_*`` environment variable holds a value it does not accept."""


class Skip(Exception):
    """Raised inside a section when a precondition is not met.

    ``needs`` names what is missing: one need, or every need the section lacks, the one it
    lacked first first (``("gpu", "ncu")``: an Nsight Compute section on a machine without a
    GPU). ``Skip.needs`` is that first need: it is recorded and the results card groups skips
    by it. ``Skip.lacks`` is all of them: ``NSPY_TUTORIAL_REQUIRE`` turns the skip into a
    failure when any of them is required, so a required need is enforced whatever the section
    lacked first. The needs in :data:`NEEDS` and ``cc<major>.<minor>`` can be required
    (``"cupti"``: cupti-python for a child process while Nsight Compute holds this one;
    ``"triton"``: torch.compile); any other word is only recorded.
    """

    def __init__(self, reason: str, remedy: str, needs: str | tuple[str, ...] = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.remedy = remedy
        self.lacks: tuple[str, ...] = tuple(need for need in ((needs,) if isinstance(needs, str) else needs) if need)
        self.needs = self.lacks[0] if self.lacks else ""


def counters_skip(exc: BaseException) -> BaseException:
    """``exc`` as a :class:`Skip` (need ``counters``) if it reports ERR_NVGPUCTRPERM, else ``exc``."""
    text = str(exc)
    if isinstance(exc, Skip) or COUNTERS_CODE not in text:
        return exc
    line = next(line.strip() for line in text.splitlines() if COUNTERS_CODE in line)
    return Skip(f"this machine reserves the GPU's performance counters to administrators: {first_line(line)}",
                COUNTERS_REMEDY, needs="counters")


def needs(value, section: str, need: str = "profiler"):
    """``value``, made by an earlier section (``section``: its number, e.g. ``"1"``, ``"2b"``).

    When it is None, the section that needs it is SKIPPED with that section's own outcome as
    reason, its remedy, and its need (so a section after one skipped for want of a GPU is
    counted under "gpu" too); ``need`` is the need when the earlier one recorded none.
    """
    if value is not None:
        return value
    earlier = next((r for r in records() if r.section.startswith(section + ".")), None)
    if earlier is None:
        raise Skip(f"needs section {section}'s result; section {section} has not run", f"run section {section} first",
                   needs=need)
    raise Skip(f"needs section {section}'s result; section {section}: {earlier.status}, {earlier.reason}",
               earlier.remedy or f"run section {section} first", needs=earlier.needs or need)


class ClaimFailed(AssertionError):
    """A statement the notebook's prose makes no longer holds on the reader's data."""


def claim(condition: object, statement: str, evidence: str = "") -> None:
    """Check a claim the prose makes; raise :class:`ClaimFailed` naming it if false.

    Prints ``check: <statement>`` when it holds, so the reader sees what was verified.
    """
    if not condition:
        detail = f" ({evidence})" if evidence else ""
        raise ClaimFailed(f"claim no longer holds: {statement}{detail}")
    print(f"  check: {statement}" + (f" ({evidence})" if evidence else ""))


@dataclasses.dataclass
class SectionRecord:
    """How one section ended; one JSON line in the results file."""

    notebook: str
    section: str
    status: str
    result: str | None = None
    reason: str | None = None
    remedy: str | None = None
    needs: str | None = None  # for a skip: what was missing ("gpu", "ncu", "cc8.0", ...)
    seconds: float = 0.0


# Records of this kernel's sections, in the order they first ran (a re-run replaces).
_RECORDS: dict[str, SectionRecord] = {}
_NOTEBOOK = {"name": "notebook"}


def set_notebook(name: str) -> None:
    """Name the notebook whose sections are being recorded (called by ``setup``)."""
    _NOTEBOOK["name"] = name


def records() -> list[SectionRecord]:
    """The records of the sections run so far in this kernel."""
    return list(_RECORDS.values())


def reset() -> None:
    """Forget all records (for tests)."""
    _RECORDS.clear()


def strict() -> bool:
    """``NSPY_TUTORIAL_STRICT`` as a yes/no; :class:`SettingError` for any other spelling."""
    value = os.environ.get(STRICT_VAR, "")
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SettingError(
        f"{STRICT_VAR}={value!r} is not a yes/no value; use 1/0, true/false, yes/no or "
        "on/off (any case), or leave it empty for off"
    )


def required() -> set[str]:
    """The needs listed in ``NSPY_TUTORIAL_REQUIRE``; :class:`SettingError` for an unknown one."""
    value = os.environ.get(REQUIRE_VAR, "")
    needs = {part.strip().lower() for part in value.split(",") if part.strip()}
    unknown = sorted(need for need in needs if need not in NEEDS and not CC_NEED.fullmatch(need))
    if unknown:
        raise SettingError(
            f"{REQUIRE_VAR}={value!r}: unknown need {', '.join(map(repr, unknown))}; valid needs: "
            f"{', '.join(NEEDS)}, cc<major>.<minor> (e.g. cc8.0), comma-separated"
        )
    return needs


def check_settings() -> None:
    """Raise :class:`SettingError` if a variable the guard reads holds a value it does not accept."""
    strict()
    required()


def first_line(text: str, limit: int = 200) -> str:
    """The first line of ``text`` for a one-line reason, never cut inside a word.

    A line longer than ``limit`` is cut at the last space that keeps it within
    ``limit`` characters and ends with "..."; a line without such a space is kept whole.
    """
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    if len(line) <= limit:
        return line
    head = line[: limit - 3]
    if line[len(head)] != " ":
        if " " not in head:
            return line
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + "..."


class section:
    """Context manager that runs one notebook section and records how it ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.result: str | None = None
        self.status: str | None = None
        self._start = 0.0

    def __enter__(self) -> "section":
        check_settings()  # a mistyped variable fails here, before the section's work
        banner(self.name)
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        seconds = time.perf_counter() - self._start
        if exc_type is not None and not issubclass(exc_type, Exception):
            return False  # KeyboardInterrupt, SystemExit: never swallowed
        record = SectionRecord(_NOTEBOOK["name"], self.name, OK, seconds=round(seconds, 3))
        reraise = False
        if exc is None:
            if not self.result:
                record.status = FAILED
                record.reason = "the section finished without setting its one-line result"
                record.remedy = "set `s.result = ...` at the end of the section"
                reraise = strict()
            else:
                record.result = self.result
        else:
            exc = counters_skip(exc)
        if exc is None:
            pass
        elif isinstance(exc, Skip):
            record.reason, record.remedy, record.needs = exc.reason, exc.remedy, exc.needs or None
            missing = [need for need in exc.lacks if need.lower() in required()]
            if missing:
                record.status = FAILED
                record.reason = f"required `{missing[0]}` is missing: {exc.reason}"
                reraise = strict()
            else:
                record.status = SKIPPED
        else:
            record.status = FAILED
            record.reason = f"{type(exc).__name__}: {first_line(str(exc))}"
            record.remedy = "see the traceback above"
            traceback.print_exception(exc_type, exc, tb, limit=6)
            reraise = strict()
        self.status = record.status
        _RECORDS[self.name] = record
        _print_outcome(record)
        _append_to_results_file(record)
        if reraise and exc is None:
            raise ClaimFailed(f"{self.name}: {record.reason}")
        if reraise and isinstance(exc, Skip):
            raise ClaimFailed(f"{self.name}: {record.reason}") from exc
        return not reraise


def _print_outcome(record: SectionRecord) -> None:
    if record.status == OK:
        print(f"\n[OK] {record.result}  ({record.seconds:.1f} s)")
    elif record.status == SKIPPED:
        print(f"\n[SKIPPED] {record.reason}\n          what to do: {record.remedy}")
    else:
        print(f"\n[FAILED] {record.reason}\n         {record.remedy}")


def _append_to_results_file(record: SectionRecord) -> None:
    path = os.environ.get(RESULTS_VAR)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(dataclasses.asdict(record)) + "\n")


def summary() -> list[SectionRecord]:
    """Print every section's status and result line; return the records.

    In strict mode a notebook that recorded a FAILED section raises here too, so a
    failure that was somehow not re-raised still fails the run.
    """
    banner(f"SUMMARY  {_NOTEBOOK['name']}")
    recs = records()
    for rec in recs:
        line = rec.result if rec.status == OK else f"{rec.reason} -> {rec.remedy}"
        print(f"  {rec.status:<8s} {rec.section}\n           {line}")
    counts = {s: sum(r.status == s for r in recs) for s in (OK, SKIPPED, FAILED)}
    print(f"\n  {counts[OK]} OK, {counts[SKIPPED]} SKIPPED, {counts[FAILED]} FAILED")
    if strict() and counts[FAILED]:
        raise ClaimFailed(f"{counts[FAILED]} section(s) FAILED in {_NOTEBOOK['name']}")
    return recs
