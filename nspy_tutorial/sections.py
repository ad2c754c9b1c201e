"""The section guard: ``with section("2. ...") as s:`` ends OK (``s.result`` set), SKIPPED (:class:`Skip`; an
``ERR_NVGPUCTRPERM`` error too, need ``counters``) or FAILED (anything else). Read at each section, a typo a
:class:`SettingError`: ``NSPY_TUTORIAL_STRICT`` re-raises a failure, ``NSPY_TUTORIAL_RESULTS`` gets one JSON
line per section, ``NSPY_TUTORIAL_REQUIRE`` turns a skip lacking one of its needs into a failure."""

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import TracebackType

from nspy_tutorial.display import banner, say

OK, SKIPPED, FAILED = "OK", "SKIPPED", "FAILED"
STATUSES = (OK, SKIPPED, FAILED)

STRICT_VAR = "NSPY_TUTORIAL_STRICT"
REQUIRE_VAR = "NSPY_TUTORIAL_REQUIRE"
RESULTS_VAR = "NSPY_TUTORIAL_RESULTS"
WORKDIR_VAR = "NSPY_TUTORIAL_WORKDIR"
DEFAULT_ROOT = "nspy_work"  # the work folders' root when WORKDIR_VAR is unset (in Colab: /content/nspy_work)
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")
NEEDS = ("gpu", "profiler", "ncu", "ncu-cli", "cupti", "triton", "counters")
# The driver lets only administrators read the GPU's counters: every tool's error text then carries this code.
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
    """A precondition is not met: the section is SKIPPED with ``reason`` and ``remedy``. ``lacks`` is every
    need it lacks (any of them required fails it), ``needs`` the first, which the card groups skips by."""

    def __init__(self, reason: str, remedy: str, needs: str | tuple[str, ...] = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.remedy = remedy
        self.lacks: tuple[str, ...] = tuple(need for need in ((needs,) if isinstance(needs, str) else needs) if need)
        self.needs = self.lacks[0] if self.lacks else ""


def needs(value, section: str, need: str = "profiler"):
    """``value``, made by section ``section`` (e.g. ``"2b"``); when None, SKIPPED with that section's outcome."""
    if value is not None:
        return value
    earlier = next((r for r in records() if r.section.startswith(section + ".")), None)
    outcome = f"section {section}: {earlier.status}, {earlier.reason}" if earlier else f"section {section} has not run"
    remedy = (earlier and earlier.remedy) or f"run section {section} first"
    raise Skip(f"needs section {section}'s result; {outcome}", remedy, needs=(earlier and earlier.needs) or need)


class ClaimFailed(AssertionError):
    """A statement the notebook's prose makes no longer holds on the reader's data."""


def claim(condition: object, statement: str, evidence: str = "") -> None:
    """Print ``check: <statement>`` when it holds, else raise :class:`ClaimFailed` naming it."""
    detail = f" ({evidence})" if evidence else ""
    if not condition:
        raise ClaimFailed(f"claim no longer holds: {statement}{detail}")
    say(f"check: {statement}{detail}")


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
    _NOTEBOOK["name"] = name


def records() -> list[SectionRecord]:
    return list(_RECORDS.values())


_ROOT: dict[str, Path] = {}


def enter_workdir(notebook: str) -> Path:
    """Make ``<root>/<notebook>``, for every file the notebook writes, the working directory and first on
    ``sys.path``, with ``tempfile`` and child processes writing to its ``tmp/``; return it."""
    if "root" not in _ROOT:  # the root is fixed at first use, absolute
        _ROOT["root"] = Path(os.environ.get(WORKDIR_VAR, "").strip() or DEFAULT_ROOT).expanduser().resolve()
    path = _ROOT["root"] / notebook
    tmp = path / "tmp"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        value = os.environ.get(WORKDIR_VAR, "")
        setting = f"{WORKDIR_VAR}={value!r}" if value.strip() else f"{WORKDIR_VAR} is unset, so ./{DEFAULT_ROOT}"
        raise SettingError(f"{setting}: cannot make the work folder {tmp} ({error.strerror or error}); set "
                           f"{WORKDIR_VAR} to a folder you can write to") from None
    os.chdir(path)
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    tempfile.tempdir = str(tmp)
    os.environ["TMPDIR"] = str(tmp)  # child processes (ncu, Python scripts) too
    return path


def strict() -> bool:
    """``NSPY_TUTORIAL_STRICT`` as a yes/no; :class:`SettingError` for any other spelling."""
    value = os.environ.get(STRICT_VAR, "")
    word = value.strip().lower()
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise SettingError(f"{STRICT_VAR}={value!r} is not a yes/no value; use 1/0, true/false, yes/no or "
                           "on/off (any case), or leave it empty for off")
    return word in TRUE_WORDS


def required() -> set[str]:
    """The needs listed in ``NSPY_TUTORIAL_REQUIRE``; :class:`SettingError` for an unknown one."""
    value = os.environ.get(REQUIRE_VAR, "")
    needs = {part.strip().lower() for part in value.split(",") if part.strip()}
    unknown = sorted(need for need in needs if need not in NEEDS and not CC_NEED.fullmatch(need))
    if unknown:
        raise SettingError(f"{REQUIRE_VAR}={value!r}: unknown need {', '.join(map(repr, unknown))}; valid needs: "
                           f"{', '.join(NEEDS)}, cc<major>.<minor> (e.g. cc8.0), comma-separated")
    return needs


def check_settings() -> None:
    """Raise :class:`SettingError` if a variable the guard reads holds a value it does not accept."""
    strict()
    required()


def first_line(text: str, limit: int = 200) -> str:
    """The first line of ``text``, cut after its last whole word within ``limit`` (with "...") if it can be."""
    line = (text.strip().splitlines() or [""])[0]
    if len(line) <= limit:
        return line
    head = line[:limit - 2]  # one character more than fits, so that a space there counts
    return head.rsplit(" ", 1)[0].rstrip() + "..." if " " in head else line


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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc_type is not None and not issubclass(exc_type, Exception):
            return False  # KeyboardInterrupt, SystemExit: never swallowed
        record = SectionRecord(_NOTEBOOK["name"], self.name, OK, seconds=round(time.perf_counter() - self._start, 3))
        if exc is not None and not isinstance(exc, Skip) and COUNTERS_CODE in str(exc):  # any tool's refusal
            line = next(line.strip() for line in str(exc).splitlines() if COUNTERS_CODE in line)
            exc = Skip(f"this machine reserves the GPU's performance counters to administrators: {first_line(line)}",
                       COUNTERS_REMEDY, needs="counters")
        if exc is None and self.result:
            record.result = self.result
        elif exc is None:
            record.status, record.reason = FAILED, "the section finished without setting its one-line result"
            record.remedy = "set `s.result = ...` at the end of the section"
        elif isinstance(exc, Skip):
            missing = [need for need in exc.lacks if need.lower() in required()]
            record.status = FAILED if missing else SKIPPED
            record.reason = f"required `{missing[0]}` is missing: {exc.reason}" if missing else exc.reason
            record.remedy, record.needs = exc.remedy, exc.needs or None
        else:
            record.status, record.reason = FAILED, f"{type(exc).__name__}: {first_line(str(exc))}"
            record.remedy = "see the traceback above"
            traceback.print_exception(exc_type, exc, tb, limit=6)
        reraise = record.status == FAILED and strict()
        self.status = record.status
        _RECORDS[self.name] = record
        print()
        say({OK: f"[OK] {record.result}  ({record.seconds:.1f} s)",
             SKIPPED: f"[SKIPPED] {record.reason}\nwhat to do: {record.remedy}",
             FAILED: f"[FAILED] {record.reason}\n{record.remedy}"}[record.status], "", "          ")
        if os.environ.get(RESULTS_VAR):
            with open(os.environ[RESULTS_VAR], "a", encoding="utf-8") as handle:
                handle.write(json.dumps(dataclasses.asdict(record)) + "\n")
        if reraise and (exc is None or isinstance(exc, Skip)):  # any other exception re-raises itself
            raise ClaimFailed(f"{self.name}: {record.reason}") from exc
        return not reraise


def summary() -> None:
    """Print every section's status and result line (the last cell: it returns nothing, so Jupyter echoes nothing
    after it). Strict: a FAILED section raises."""
    banner(f"SUMMARY  {_NOTEBOOK['name']}")
    recs = records()
    for rec in recs:
        line = rec.result if rec.status == OK else f"{rec.reason} -> {rec.remedy}"
        print(f"  {rec.status:<8s} {rec.section}")
        say(line, " " * 11, " " * 11)
    counts = {s: sum(r.status == s for r in recs) for s in STATUSES}
    print(f"\n  {counts[OK]} OK, {counts[SKIPPED]} SKIPPED, {counts[FAILED]} FAILED")
    if strict() and counts[FAILED]:
        raise ClaimFailed(f"{counts[FAILED]} section(s) FAILED in {_NOTEBOOK['name']}")
