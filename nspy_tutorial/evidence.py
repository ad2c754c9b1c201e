"""Keeping the evidence (notebooks 08 and 10), testable without a GPU: the newest file nsight-python wrote, a
folder's listing, a table against its CSV copy, the report reader's version against the writer's, the environment."""

import dataclasses
import datetime
import os
import platform
import re
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nspy_tutorial.backend import installed, version_text
from nspy_tutorial.environment import banner_lines

# nsight-python names its files <prefix><kind>-<function>-<k>.<ext>, k counting the calls.
OUTPUT_KINDS = {"profiled_data": "csv", "processed_data": "csv", "ncu-output": "ncu-rep"}
PACKAGES = ("nsight-python", "cupti-python", "ncu-report", "torch", "nvidia-ml-py", "pandas", "numpy")


class UnreadableReport(RuntimeError):
    """A report file that ``ncu_report`` opened but could not read anything from."""


def newest_output(prefix: str, kind: str, function: str) -> Path:
    """``<prefix><kind>-<function>-<k>.<ext>`` with the largest ``k`` (a number: it counts the calls of one
    decorated function in this process); ``kind`` is ``profiled_data``, ``processed_data`` or ``ncu-output``."""
    folder, stem = os.path.split(prefix)
    pattern = re.compile(rf"^{re.escape(stem)}{re.escape(kind)}-{re.escape(function)}-(\d+)\.{OUTPUT_KINDS[kind]}$")
    found = [(int(m.group(1)), entry) for entry in Path(folder or ".").iterdir() if (m := pattern.match(entry.name))]
    if not found:
        csv = ", output_csv=True" if OUTPUT_KINDS[kind] == "csv" else ""
        raise FileNotFoundError(f"no {kind}-{function}-<k>.{OUTPUT_KINDS[kind]} under prefix {prefix!r} "
                                f"(was the function called with output_prefix={prefix!r}{csv}?)")
    return max(found)[1]


def listing(folder: str | Path) -> pd.DataFrame:
    """Every file under ``folder``: its path relative to the folder and its size in bytes."""
    root = Path(folder)
    rows = [{"file": str(p.relative_to(root)), "bytes": p.stat().st_size}
            for p in sorted(root.rglob("*")) if p.is_file()]
    return pd.DataFrame(rows, columns=["file", "bytes"])


def _same_values(before: pd.Series, after: pd.Series) -> bool:
    """Missing in the same places, numbers equal to 1e-12 relative, anything else the same as text."""
    if not before.isna().equals(after.isna()):
        return False
    b, a = before.dropna(), after.dropna()
    if pd.api.types.is_numeric_dtype(before) and not pd.api.types.is_bool_dtype(before):
        numbers = pd.to_numeric(a, errors="coerce").to_numpy(dtype=float)  # anything else: NaN, never close
        return bool(np.allclose(b.to_numpy(dtype=float), numbers, rtol=1e-12, atol=0.0))
    return b.astype(str).tolist() == a.astype(str).tolist()


def round_trip_differences(frame: pd.DataFrame, back: pd.DataFrame) -> pd.DataFrame:
    """One row per column of ``frame``: its dtype before and in ``back`` (the table read back from CSV), and
    whether the values survived. A string such as ``"580.10"`` that CSV turns into 580.1 has changed."""
    rows = []
    for col in frame.columns:
        present = col in back.columns
        same = present and _same_values(frame[col].reset_index(drop=True), back[col].reset_index(drop=True))
        rows.append({"column": col, "dtype_before": str(frame[col].dtype),
                     "dtype_after": str(back[col].dtype) if present else "-", "present": present, "same_values": same})
    return pd.DataFrame(rows)


def reader_version() -> tuple[int, ...] | None:
    """The installed ``ncu-report`` package's version (the reader of ``.ncu-rep`` files) as ints, or None."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", installed("ncu-report") or "")
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def version_verdict(writer: tuple[int, ...] | None, reader: tuple[int, ...] | None) -> tuple[str, str]:
    """``(status, message)``: whether ``ncu-report`` ``reader`` should read a report by ncu ``writer``; status
    ``"ok"``, ``"reader-older"`` or ``"unknown"``. As nsight-python's own check, only year.minor counts."""
    read_by, written_by = f"ncu-report {version_text(reader)}", f"ncu {version_text(writer)}"
    if writer is None or reader is None:
        return "unknown", f"cannot compare: report written by {written_by}, read by {read_by}"
    if reader[:2] < writer[:2]:
        return "reader-older", (f"{read_by} is older than the {written_by} that wrote the report and may not read it: "
                                f"pip install 'ncu-report>={writer[0]}.{writer[1]}'")
    if reader[:2] > writer[:2]:
        return "ok", (f"{read_by} is newer than the {written_by} that wrote the report: newer readers are meant to "
                      "open older reports")
    return "ok", f"{read_by} and {written_by} are the same release"


def check_loaded(num_ranges: int, path: str | Path, writer: tuple[int, ...] | None = None,
                 reader: tuple[int, ...] | None = None) -> None:
    """Raise :class:`UnreadableReport` if a loaded report holds no ranges: ``ncu_report.load_report`` returns
    an empty context, without an error, for a file it cannot read."""
    if num_ranges > 0:
        return
    path = Path(path)
    status, message = version_verdict(writer, reader if reader is not None else reader_version())
    hint = message if status != "ok" else "the versions are compatible, so the file is probably not a complete report"
    raise UnreadableReport(f"{path.name} ({path.stat().st_size:,} bytes) opened with 0 ranges: nothing could be "
                           f"read; {hint}")


def environment_record(env: Any) -> dict[str, Any]:
    """``env`` (``nt.setup``'s), package versions, host, time and the banner's lines, as a JSON-ready dict; the SM
    clock's state as setup read it (``ClockState.record``: free, or held and at what), so a cap shows in the evidence."""
    torch = sys.modules.get("torch")
    return {"recorded_at_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **dataclasses.asdict(env), "workdir": str(env.workdir) if env.workdir else None,
            "clock": env.clock.record() if env.clock else None,
            "ncu_version": version_text(env.ncu_version) if env.ncu_version else None,
            "packages": {name: installed(name) for name in PACKAGES},
            "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None,
            "python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname(),
            "banner": banner_lines(env)}
