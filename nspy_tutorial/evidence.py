"""Plumbing for keeping the evidence of a profiling investigation (notebooks 08 and 10).

The lessons -- ``output_prefix``/``output_csv``, reading the CSVs back, opening a report
with ``ncu_report`` -- are written out in the notebooks. What lives here is the
bookkeeping around them, each piece testable without a GPU:

* :func:`newest_output` -- the file nsight-python wrote for the latest call of a function;
* :func:`listing` -- what a folder holds, with sizes;
* :func:`round_trip_differences` -- a DataFrame against its CSV copy, column by column,
  with missing values (``pd.NA``, ``NaN``) treated as equal and dtype changes reported;
* :func:`parse_version`, :func:`reader_version`, :func:`version_verdict` -- the
  ``ncu-report`` reader's version against the ncu that wrote a report;
* :func:`check_loaded` -- turn "the report opened but holds nothing" into a clear error
  (``ncu_report.load_report`` does not raise on a file it cannot read);
* :func:`environment_record`, :func:`write_json`, :func:`zip_folder` -- the environment
  facts as JSON, and one zip per evidence folder.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nspy_tutorial.bootstrap import banner_lines

# nsight-python names its files <prefix><kind>-<function>-<k>.<ext>, k counting the calls.
OUTPUT_KINDS = {
    "profiled_data": "csv",
    "processed_data": "csv",
    "ncu-output": "ncu-rep",
}
PACKAGES = ("nsight-python", "cupti-python", "ncu-report", "torch", "nvidia-ml-py", "pandas", "numpy")


class UnreadableReport(RuntimeError):
    """A report file that ``ncu_report`` opened but could not read anything from."""


def newest_output(prefix: str, kind: str, function: str) -> Path:
    """``<prefix><kind>-<function>-<k>.<ext>`` with the largest ``k``.

    ``kind`` is ``profiled_data``, ``processed_data`` or ``ncu-output``. ``k`` counts
    the calls of one decorated function in this Python process; it is compared as a
    number, so call 10 is newer than call 9.
    """
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"newest_output(): unknown kind {kind!r}; use one of {sorted(OUTPUT_KINDS)}")
    folder, stem = os.path.split(prefix)
    pattern = re.compile(rf"^{re.escape(stem)}{re.escape(kind)}-{re.escape(function)}-(\d+)\.{OUTPUT_KINDS[kind]}$")
    found = []
    for entry in Path(folder or ".").iterdir():
        match = pattern.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    if not found:
        raise FileNotFoundError(
            f"no {kind}-{function}-<k>.{OUTPUT_KINDS[kind]} under prefix {prefix!r} "
            f"(was the function called with output_prefix={prefix!r}"
            + (", output_csv=True" if OUTPUT_KINDS[kind] == "csv" else "") + "?)"
        )
    return max(found)[1]


def listing(folder: str | Path) -> pd.DataFrame:
    """Every file under ``folder``: its path relative to the folder and its size in bytes."""
    root = Path(folder)
    rows = [{"file": str(p.relative_to(root)), "bytes": p.stat().st_size}
            for p in sorted(root.rglob("*")) if p.is_file()]
    return pd.DataFrame(rows, columns=["file", "bytes"])


def _same_values(before: pd.Series, after: pd.Series) -> bool:
    missing_before, missing_after = before.isna().to_numpy(), after.isna().to_numpy()
    if len(before) != len(after) or not np.array_equal(missing_before, missing_after):
        return False
    b, a = before[~missing_before], after[~missing_after]
    if len(b) == 0:
        return True
    if pd.api.types.is_numeric_dtype(before) or pd.api.types.is_bool_dtype(before):
        nb, na = pd.to_numeric(b, errors="coerce"), pd.to_numeric(a, errors="coerce")
        if not nb.isna().any() and not na.isna().any():
            return bool(np.allclose(nb.to_numpy(dtype=float), na.to_numpy(dtype=float), rtol=1e-12, atol=0.0))
    # text (or numbers stored as objects): the written form must survive exactly
    return bool((b.astype(str).to_numpy() == a.astype(str).to_numpy()).all())


def round_trip_differences(frame: pd.DataFrame, back: pd.DataFrame) -> pd.DataFrame:
    """Compare ``frame`` with ``back`` (the same table read back from CSV), column by column.

    One row per column of ``frame``: its dtype before and after, whether ``back`` has it,
    and whether the values are the same. Missing values compare equal whatever their
    spelling (``pd.NA``, ``NaN``, ``None``); numbers compare to 1e-12 relative; anything
    else compares as text. A string such as ``"580.10"`` that CSV turns into the number
    580.1 is reported as *changed*, because it is.
    """
    rows = []
    for col in frame.columns:
        present = col in back.columns
        rows.append({
            "column": col,
            "dtype_before": str(frame[col].dtype),
            "dtype_after": str(back[col].dtype) if present else "-",
            "present": present,
            "same_values": present and _same_values(frame[col].reset_index(drop=True),
                                                    back[col].reset_index(drop=True)),
        })
    return pd.DataFrame(rows)


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"2026.3.1"`` or ``"2025.3.1.0"`` -> a tuple of ints; None if no version is in it."""
    if not text:
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def reader_version() -> tuple[int, ...] | None:
    """The installed ``ncu-report`` package's version (the reader of ``.ncu-rep`` files)."""
    try:
        return parse_version(importlib.metadata.version("ncu-report"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _text(version: tuple[int, ...] | None) -> str:
    return "unknown" if version is None else ".".join(str(p) for p in version)


def version_verdict(writer: tuple[int, ...] | None, reader: tuple[int, ...] | None) -> tuple[str, str]:
    """Whether an ``ncu-report`` of version ``reader`` should read a report by ncu ``writer``.

    Returns ``(status, message)``; status is ``"ok"``, ``"reader-older"`` or ``"unknown"``.
    Like nsight-python's own check (``collection/ncu.py``), only year.minor is compared:
    a reader older than the writer may not understand the file.
    """
    if writer is None or reader is None:
        return "unknown", (f"cannot compare: report written by ncu {_text(writer)}, "
                           f"read by ncu-report {_text(reader)}")
    if reader[:2] < writer[:2]:
        return "reader-older", (
            f"ncu-report {_text(reader)} is older than the ncu {_text(writer)} that wrote the report "
            f"and may not read it: pip install 'ncu-report>={writer[0]}.{writer[1]}'"
        )
    if reader[:2] > writer[:2]:
        return "ok", (f"ncu-report {_text(reader)} is newer than the ncu {_text(writer)} that wrote "
                      "the report: newer readers are meant to open older reports")
    return "ok", f"ncu-report {_text(reader)} and ncu {_text(writer)} are the same release"


def check_loaded(num_ranges: int, path: str | Path, writer: tuple[int, ...] | None = None,
                 reader: tuple[int, ...] | None = None) -> None:
    """Raise :class:`UnreadableReport` if a loaded report holds no ranges.

    ``ncu_report.load_report`` returns an empty context, without an error, for a file
    it cannot read (an empty file, something that is not a report, a format it does not
    know). A real report holds at least one range, so zero is an error worth a reason.
    """
    if num_ranges > 0:
        return
    path = Path(path)
    size = path.stat().st_size if path.exists() else 0
    status, message = version_verdict(writer, reader if reader is not None else reader_version())
    hint = (f"; {message}" if status != "ok" else
            "; the versions are compatible, so the file is probably not a complete report")
    raise UnreadableReport(f"{path.name} ({size:,} bytes) opened with 0 ranges: nothing could be read{hint}")


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_record(env: Any) -> dict[str, Any]:
    """The environment banner as a JSON-ready dict (an ``Environment`` from ``nt.setup``)."""
    torch = sys.modules.get("torch")
    return {
        "recorded_at_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "notebook": env.notebook,
        "gpu_name": env.gpu_name,
        "gpu_problem": env.gpu_problem,
        "driver": env.driver,
        "facts": dataclasses.asdict(env.facts) if env.facts is not None else None,
        "datasheet": dataclasses.asdict(env.datasheet) if env.datasheet is not None else None,
        "backend": env.backend,
        "backend_reason": env.backend_reason,
        "ncu_path": env.ncu_path,
        "ncu_version": _text(env.ncu_version) if env.ncu_version else None,
        "ncu_problem": env.ncu_problem,
        "cupti_problem": env.cupti_problem,
        "packages": {name: _package_version(name) for name in PACKAGES},
        "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "on_colab": env.on_colab,
        "banner": banner_lines(env),
    }


def write_json(record: dict[str, Any], path: str | Path) -> Path:
    """Write ``record`` as indented JSON (tuples become lists); return the path."""
    path = Path(path)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def zip_folder(folder: str | Path) -> Path:
    """Zip ``folder`` into ``<folder>.zip`` beside it (replacing an older zip); return its path.

    Paths inside the zip start with the folder's name, so it unpacks into one folder.
    """
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise NotADirectoryError(f"zip_folder(): {folder} is not a folder")
    archive = shutil.make_archive(str(folder), "zip", root_dir=folder.parent, base_dir=folder.name)
    return Path(archive)
