"""Running the plain ncu command line on a script, for when nsight-python's backend can't.

nsight-python 1.1 attaches Nsight Compute to the running notebook and needs ncu
2026.2.1+. An older ncu still profiles a *separate* Python process in launch mode::

    ncu --nvtx --nvtx-include "region/" --metrics ... --csv python3 script.py

That gives cache control, clock control and hardware counters to users who cannot
upgrade. The pieces, each usable on its own so a notebook can show what it runs:

* :func:`write_script` -- put a script's text in a file for ncu to launch;
* :func:`ncu_command` -- the command line (metrics as CSV, or a ``--set`` into a report);
* :func:`command_text` -- that command as one copy-pasteable line;
* :func:`run` -- run it with the profiler-injection variables of *this* process removed;
* :func:`parse_csv` -- ncu's ``--csv`` output as a DataFrame;
* :func:`to_base_units` -- a value in ncu's printed unit (``usecond``, ``Gbyte/s``) in SI units;
* :func:`profile_script` -- all of the above for the common CSV case;
* :func:`read_report` -- a report written with ``-o``: one row per launch, labelled with
  the NVTX range it ran in (read through ``ncu_report``, not from a CSV column whose name
  changes between ncu versions);
* :func:`profile_script_report` -- run ncu into a report and read it back.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import pandas as pd

# Set by nsight-python's Nsight Compute or CUPTI activation in *this* process; a child
# profiled by its own ncu must not inherit them.
INJECTION_VARIABLES = (
    "NVTX_INJECTION64_PATH",
    "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
    "NV_COMPUTE_PROFILER_IN_PROCESS",
)


class NcuCliError(RuntimeError):
    """ncu exited non-zero or printed no metrics."""


def child_environment() -> dict[str, str]:
    """This process's environment without the profiler-injection variables."""
    return {k: v for k, v in os.environ.items() if k not in INJECTION_VARIABLES}


def write_script(source: str, name: str = "profiled.py", directory: str | None = None) -> str:
    """Write ``source`` to ``<directory>/<name>`` (a new temporary folder by default)."""
    directory = directory or tempfile.mkdtemp(prefix="nspy_ncu_")
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source)
    return path


def ncu_command(
    ncu: str,
    script: str,
    script_args: Sequence[str],
    metrics: Sequence[str],
    nvtx_ranges: Sequence[str],
    cache_control: str = "all",
    clock_control: str = "base",
    *,
    section_set: str | None = None,
    report: str | None = None,
) -> list[str]:
    """The ncu launch-mode command line (ncu's own defaults: flush caches, lock base clocks).

    ``metrics`` are collected and printed as CSV, unless ``report`` names a file to
    write instead (``-o``; ncu adds ``.ncu-rep``). ``section_set`` (e.g. ``"full"``)
    adds ncu's section set to the metrics. ``nvtx_ranges`` limits profiling to the
    kernels launched inside those NVTX push/pop ranges.
    """
    cmd = [ncu, "--cache-control", cache_control, "--clock-control", clock_control]
    cmd += ["-f", "-o", report] if report else ["--csv"]
    if nvtx_ranges:
        cmd.append("--nvtx")
        for name in nvtx_ranges:
            cmd += ["--nvtx-include", f"{name}/"]
    if section_set:
        cmd += ["--set", section_set]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += [sys.executable, script, *script_args]
    return cmd


def command_text(cmd: Sequence[str]) -> str:
    """``cmd`` as one shell line, quoted so that it can be pasted into a terminal."""
    return shlex.join(cmd)


def run(cmd: Sequence[str], timeout: int = 600) -> str:
    """Run an ncu command in a clean child environment; return its stdout.

    Raises :class:`NcuCliError` with ncu's last lines when it exits non-zero.
    """
    done = subprocess.run(
        list(cmd), capture_output=True, text=True, env=child_environment(), timeout=timeout, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise NcuCliError(f"ncu exited {done.returncode}:\n{tail}")
    return done.stdout


def parse_csv(stdout: str) -> pd.DataFrame:
    """ncu's ``--csv`` rows (lines starting with a quote) as a typed DataFrame.

    Columns kept: ID (launch index), Kernel Name, Metric Name, Metric Unit, Metric Value
    (float; ncu prints thousands separators) and the NVTX range column when present.
    """
    rows = "\n".join(line for line in stdout.splitlines() if line.startswith('"'))
    if not rows:
        raise NcuCliError("ncu printed no metric rows (did the NVTX range names match?)")
    df = pd.read_csv(io.StringIO(rows), dtype=str)
    df["Metric Value"] = pd.to_numeric(df["Metric Value"].str.replace(",", ""), errors="coerce")
    df["ID"] = pd.to_numeric(df["ID"])
    return df


# ncu prints each metric in a scaled unit of its own choosing: "nsecond", "usecond", "Mbyte",
# "Gbyte/s", "Tbyte/second", "cycle/nsecond", "Mhz", "%". Prefixes are SI (decimal).
_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BASES = ("second", "byte", "cycle", "hz", "s")  # longest first: "nsecond" is n + second, "ns" is n + s


def _unit_factor(part: str, whole: str) -> float:
    for base in _BASES:
        if part.lower().endswith(base):
            prefix = part[: len(part) - len(base)]
            if prefix in _PREFIX:
                return _PREFIX[prefix]
    raise ValueError(f"unexpected unit {whole!r} from ncu (known: [n|u|m|K|M|G|T] + second/s, byte, cycle, hz, "
                     "optionally per second)")


def to_base_units(value: float, unit: str) -> float:
    """``value`` printed by ncu in ``unit``, converted to SI base units.

    Durations become seconds, sizes bytes, rates bytes (or cycles) per second, frequencies
    Hz; ``%`` and unit-less values are returned unchanged. An unknown unit is an error,
    so a scaled value is never read as if it were in base units.
    """
    unit = (unit or "").strip()
    if unit in ("", "%"):
        return value
    numerator, _, denominator = unit.partition("/")
    factor = _unit_factor(numerator, unit)
    if denominator:
        factor /= _unit_factor(denominator, unit)
    return value * factor


def profile_script(
    ncu: str,
    script: str,
    script_args: Sequence[str],
    metrics: Sequence[str],
    nvtx_ranges: Sequence[str],
    cache_control: str = "all",
    clock_control: str = "base",
    timeout: int = 600,
    show_command: bool = False,
) -> pd.DataFrame:
    """Profile ``script`` with ncu in launch mode; one row per launch and metric.

    ``show_command=True`` prints the exact command line first (``$ ncu ...``).
    """
    cmd = ncu_command(ncu, script, script_args, metrics, nvtx_ranges, cache_control, clock_control)
    if show_command:
        print(f"  $ {command_text(cmd)}")
    return parse_csv(run(cmd, timeout=timeout))


def _push_pop_names(action) -> set[str]:
    """Names of the NVTX push/pop ranges open (in any domain) when ``action`` launched."""
    state = action.nvtx_state()
    if state is None:
        return set()
    names: set[str] = set()
    for domain_id in state.domains():
        names.update(state.domain_by_id(domain_id).push_pop_ranges())
    return names


def read_report(path: str, metrics: Sequence[str], nvtx_ranges: Sequence[str]) -> pd.DataFrame:
    """An ncu report as one row per profiled kernel launch, in launch order.

    Columns: ``ID`` (launch index), ``Range`` (which of ``nvtx_ranges`` the launch ran
    inside, from the NVTX state ncu recorded with ``--nvtx``; None if none), ``Kernel Name``
    and one column per metric. Raises :class:`NcuCliError` for a report without launches,
    a launch inside two of the ranges, or a metric the report lacks.
    """
    import ncu_report  # installed with nsight-python; imported here, like torch, only when used

    report = ncu_report.load_report(path)
    rows = []
    for range_idx in range(report.num_ranges()):
        profiled = report.range_by_idx(range_idx)
        for action_idx in range(profiled.num_actions()):
            action = profiled.action_by_idx(action_idx)
            found = [name for name in nvtx_ranges if name in _push_pop_names(action)]
            if len(found) > 1:
                raise NcuCliError(f"launch {len(rows)} ({action.name()}) ran inside several ranges: {found}")
            available = set(action.metric_names())
            missing = [m for m in metrics if m not in available]
            if missing:
                raise NcuCliError(f"{path}: launch {len(rows)} ({action.name()}) has no metric {missing}")
            row = {"ID": len(rows), "Range": found[0] if found else None, "Kernel Name": action.name()}
            row.update({m: action.metric_by_name(m).value() for m in metrics})
            rows.append(row)
    if not rows:
        raise NcuCliError(f"{path} holds no profiled kernel (did the NVTX range names match?)")
    if nvtx_ranges and all(row["Range"] is None for row in rows):
        raise NcuCliError(f"{path}: no launch carries any of the NVTX ranges {list(nvtx_ranges)} in its NVTX state "
                          "(was ncu run with --nvtx?)")
    return pd.DataFrame(rows)


def profile_script_report(
    ncu: str,
    script: str,
    script_args: Sequence[str],
    metrics: Sequence[str],
    nvtx_ranges: Sequence[str],
    report: str,
    cache_control: str = "all",
    clock_control: str = "base",
    timeout: int = 600,
    show_command: bool = False,
) -> pd.DataFrame:
    """Profile ``script`` with ncu into ``report`` (a ``.ncu-rep`` path) and read it back.

    The result is :func:`read_report`'s: one row per launch, with its NVTX range.
    ``show_command=True`` prints the exact command line first (``$ ncu ...``).
    """
    cmd = ncu_command(ncu, script, script_args, metrics, nvtx_ranges, cache_control, clock_control, report=report)
    if show_command:
        print(f"  $ {command_text(cmd)}")
    run(cmd, timeout=timeout)
    if not os.path.exists(report) and os.path.exists(report + ".ncu-rep"):
        report += ".ncu-rep"  # an ncu that appends the extension to a name that already has it
    return read_report(report, metrics, nvtx_ranges)
