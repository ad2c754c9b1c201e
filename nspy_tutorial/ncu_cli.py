"""The plain ncu command line, for when nsight-python's Nsight Compute backend can't load.

nsight-python 1.1 attaches Nsight Compute to the running notebook and needs ncu 2026.2.1+.
An older ncu still profiles a *separate* Python process in launch mode. The pieces:

* :func:`run` -- run an ncu command in the foreground (the profiler-injection variables of
  *this* process removed, :func:`child_environment`); the whole tree it starts ends with the
  call, also when the cell is interrupted (:mod:`nspy_tutorial.lifetime`);
* :func:`command_text` -- a command as one copy-pasteable line;
* :func:`to_base_units` -- a value in ncu's printed unit (``usecond``, ``Gbyte/s``) in SI units;
* :func:`nsight_table` -- run a notebook's kernels module under ncu the way nsight-python
  runs a decorated function, and return nsight-python's own ``to_dataframe()`` table
  (:func:`read_nsight_table` reads the report; :func:`replay` is what the module's
  ``if __name__ == "__main__":`` block calls).

``nsight_table`` is how a machine without the Nsight Compute backend still hands a notebook
the same table that backend gives: ncu in launch mode records the kernels inside
nsight-python's NVTX ranges, and nsight-python's own ``extraction.extract_df_from_report``
and ``transformation.aggregate_data`` turn the report into the table. Those two functions
are not public API; :data:`NSIGHT_TESTED` is the range of nsight-python versions this is
tested with, and another version is refused with a clear error.

With ``NSPY_TUTORIAL_KEEP_TABLES=<folder>`` every table ``nsight_table`` reads is also saved
there (:func:`keep_table`): that is how the CPU tests' fixtures are made on a GPU machine.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence

import pandas as pd

from nspy_tutorial import lifetime
from nspy_tutorial.sections import COUNTERS_CODE, COUNTERS_REMEDY

# Set by nsight-python's Nsight Compute or CUPTI activation in *this* process; a child
# profiled by its own ncu must not inherit them.
INJECTION_VARIABLES = (
    "NVTX_INJECTION64_PATH",
    "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
    "NV_COMPUTE_PROFILER_IN_PROCESS",
)
KEEP_VAR = "NSPY_TUTORIAL_KEEP_TABLES"


class NcuCliError(RuntimeError):
    """ncu exited non-zero, ran too long, or wrote no report."""


class CountersNotPermitted(NcuCliError):
    """The driver lets only administrators read GPU performance counters (ERR_NVGPUCTRPERM)."""


def child_environment() -> dict[str, str]:
    """This process's environment without the profiler-injection variables.

    ``NSPY_NCU_INIT_AT_IMPORT=0``: a child that imports nsight (for ``nsight.annotate``)
    must not try to attach Nsight Compute to itself; the ncu that launched it profiles it.
    """
    env = {k: v for k, v in os.environ.items() if k not in INJECTION_VARIABLES}
    env["NSPY_NCU_INIT_AT_IMPORT"] = "0"
    return env


def command_text(cmd: Sequence[str]) -> str:
    """``cmd`` as one shell line, quoted so that it can be pasted into a terminal."""
    return shlex.join(cmd)


def release_gpu_cache() -> None:
    """Give this process's cached, unused GPU memory back before a child allocates its own copy.

    PyTorch keeps freed blocks cached; a child profiled by ncu needs the same memory again,
    so on a small GPU (a T4's 15 GB) the two together can run out.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run(cmd: Sequence[str], timeout: int = 600) -> str:
    """Run an ncu command in a clean child environment and wait for it; return its output.

    Raises :class:`CountersNotPermitted` when ncu says the counters are reserved to
    administrators (whatever its exit code: ncu may still exit 0 after refusing every kernel),
    and :class:`NcuCliError` with ncu's last lines when it exits non-zero or runs too long.
    """
    release_gpu_cache()
    try:
        code, output = lifetime.run(cmd, child_environment(), timeout)
    except subprocess.TimeoutExpired:
        raise NcuCliError(f"ncu still running after {timeout} s, stopped: {command_text(cmd)}") from None
    if COUNTERS_CODE in output:
        line = next(line for line in output.splitlines() if COUNTERS_CODE in line)
        raise CountersNotPermitted(f"{line.strip()} -- what to do: {COUNTERS_REMEDY}")
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-6:])
        raise NcuCliError(f"ncu exited {code}:\n{tail}")
    return output


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


NSIGHT_DOMAIN = "nsight-python"  # nsight.annotate opens its ranges in this NVTX domain
NSIGHT_TESTED = ((1, 1), (1, 2))  # nsight-python >= 1.1, < 1.2: extraction/transformation as read here
NSIGHT_SETTINGS_IGNORED = ("verbosity",)  # accepted so one settings dict serves both paths


def check_nsight_version(version: str | None = None) -> str:
    """The installed nsight-python version, or :class:`NcuCliError` if it is outside :data:`NSIGHT_TESTED`."""
    version = version or importlib.metadata.version("nsight-python")
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    low, high = NSIGHT_TESTED
    if not low <= found < high:
        raise NcuCliError(
            f"nsight_table reads ncu reports with nsight-python's extraction.extract_df_from_report and "
            f"transformation.aggregate_data, which are not public API; it is tested with nsight-python "
            f"{low[0]}.{low[1]}.x and this is {version}: install 'nsight-python>={low[0]}.{low[1]},<{high[0]}.{high[1]}'"
        )
    return version


def as_tuples(configs: Sequence) -> list[tuple]:
    """Each config as a tuple of arguments (a scalar config is one argument), as nsight-python binds them."""
    return [tuple(config) if isinstance(config, (list, tuple)) else (config,) for config in configs]


def nsight_command(ncu: str, script: str, function: str, configs: Sequence, runs: int, metrics: Sequence[str],
                   report: str, cache_control: str = "all", clock_control: str = "none",
                   replay_mode: str = "kernel") -> list[str]:
    """The launch-mode command that records what nsight-python's backend would: the kernels
    inside its NVTX ranges, ``metrics``, under the given cache, clock and replay rules."""
    arguments = [function, json.dumps([list(config) for config in as_tuples(configs)]), str(runs)]
    return [ncu, "--nvtx", "--nvtx-include", f"regex:{NSIGHT_DOMAIN}@.+", "--cache-control", cache_control,
            "--clock-control", clock_control, "--replay-mode", replay_mode, "--metrics", ",".join(metrics),
            "-f", "-o", report, sys.executable, script, *arguments]


def read_nsight_table(report: str, func, configs: Sequence, runs: int, metrics: Sequence[str], *,
                      combine_kernel_metrics=None, derive_metric=None, normalize_against: str | None = None,
                      ignore_kernel_list: Sequence[str] | None = None) -> pd.DataFrame:
    """nsight-python's ``to_dataframe()`` table from an ncu report of :func:`replay`'s runs.

    The two calls nsight-python's Nsight Compute backend makes after profiling, with the same
    arguments: ``extract_df_from_report`` (one row per run, annotation and metric, kernels of a
    run combined by ``combine_kernel_metrics``) and ``aggregate_data`` (mean, spread, CI per
    configuration). Errors are nsight-python's own, e.g. several kernels in an annotation
    without ``combine_kernel_metrics``.
    """
    check_nsight_version()
    from nsight import extraction, transformation
    from nsight.utils import VerbosityLevel

    if not os.path.exists(report):
        raise NcuCliError(f"no report at {report}: did ncu write it? (see its output above)")
    raw = extraction.extract_df_from_report(
        report, list(metrics), as_tuples(configs), runs, func, derive_metric,
        list(ignore_kernel_list) if ignore_kernel_list else None, VerbosityLevel.SILENT, combine_kernel_metrics)
    return transformation.aggregate_data(raw, func, normalize_against, VerbosityLevel.SILENT)


DEFAULTS = {"runs": 10, "metrics": ("gpu__time_duration.sum",), "cache_control": "all", "clock_control": "none",
            "replay_mode": "kernel", "thermal_mode": "off"}  # nsight.analyze.kernel's own defaults
KNOWN = {*DEFAULTS, "configs", "combine_kernel_metrics", "derive_metric", "normalize_against", "ignore_kernel_list",
         "report", *NSIGHT_SETTINGS_IGNORED}


def nsight_table(script: str, func, *, ncu: str, timeout: int = 600, **settings) -> pd.DataFrame:
    """Profile ``func`` from ``script`` with the ncu command line; return nsight-python's table.

    ``script`` is the kernels module that defines ``func`` and ends with
    ``if __name__ == "__main__": ncu_cli.replay(globals())``. The keyword arguments are
    ``nsight.analyze.kernel``'s (``configs``, ``runs``, ``metrics``, ``cache_control``,
    ``clock_control``, ``replay_mode``, ``combine_kernel_metrics``, ``derive_metric``,
    ``normalize_against``, ``ignore_kernel_list``, ``thermal_mode="off"``), with its defaults
    (``cache_control="all"``, ``clock_control="none"``), so one settings dict serves both paths.
    The command is printed, then run in the foreground. The report is written to ``report``
    (default ``<function>.ncu-rep`` in the working directory) and read back by
    :func:`read_nsight_table`.
    """
    s = {**DEFAULTS, **settings}
    unknown = sorted(set(s) - KNOWN)
    if unknown:
        raise TypeError(f"nsight_table(): {', '.join(unknown)} is not an nsight.analyze.kernel setting it supports")
    if "configs" not in s:
        raise TypeError("nsight_table(): configs is missing (as for nsight.analyze.kernel)")
    if s["thermal_mode"] != "off":
        raise ValueError("nsight_table(): thermal_mode must be 'off' (the ncu child does no thermal pauses)")
    check_nsight_version()
    if not os.path.exists(script):
        raise NcuCliError(f"no kernels module at {script}: run its %%writefile cell first")
    report = s.get("report") or f"{func.__name__}.ncu-rep"
    cmd = nsight_command(ncu, script, func.__name__, s["configs"], s["runs"], s["metrics"], report,
                         s["cache_control"], s["clock_control"], s["replay_mode"])
    print(f"  $ {command_text(cmd)}")
    run(cmd, timeout=timeout)
    table = read_nsight_table(report, func, s["configs"], s["runs"], s["metrics"],
                              combine_kernel_metrics=s.get("combine_kernel_metrics"),
                              derive_metric=s.get("derive_metric"), normalize_against=s.get("normalize_against"),
                              ignore_kernel_list=s.get("ignore_kernel_list"))
    keep_table(table, func, s["configs"], s["runs"], s["metrics"], name=os.path.basename(report).removesuffix(".ncu-rep"))
    return table


def keep_table(table: pd.DataFrame, func, configs: Sequence, runs: int, metrics: Sequence[str],
               name: str | None = None) -> str | None:
    """With ``NSPY_TUTORIAL_KEEP_TABLES=<folder>``, save ``table`` there as JSON, with the call.

    nsight-python's own table, saved with its column types so that the tests read back the
    same DataFrame on a CPU (the reports themselves are about 1 MB a kernel). The file is
    ``<work folder name>--<name>.json`` (``name`` default: the function's); returns its path.
    """
    folder = os.environ.get(KEEP_VAR)
    if not folder:
        return None
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{os.path.basename(os.getcwd())}--{name or func.__name__}.json")
    kept = {"call": {"function": func.__name__, "configs": [list(c) for c in as_tuples(configs)], "runs": runs,
                     "metrics": list(metrics)},
            "dtypes": {column: str(dtype) for column, dtype in table.dtypes.items()},
            "table": json.loads(table.to_json(orient="split", index=False))}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(kept, handle, indent=1)
        handle.write("\n")
    return path


def replay(namespace: dict, argv: Sequence[str] | None = None) -> None:
    """Run a kernels module's function as nsight-python runs a decorated one; for its ``__main__``.

    ``argv`` (default ``sys.argv[1:]``) is ``<function> <configs as JSON> <runs>``, as
    :func:`nsight_command` writes it. Every config, then every run of it, in that order;
    before each run the annotation state is cleared, as nsight-python does, so each run may
    enter the same ``nsight.annotate`` names again. Started by :func:`run`, the process exits
    as soon as the notebook's is gone (:func:`nspy_tutorial.lifetime.watch_owner`).
    """
    lifetime.watch_owner()
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        raise SystemExit(f"usage: python {os.path.basename(sys.argv[0])} <function> <configs as JSON> <runs>")
    name, configs, runs = args[0], json.loads(args[1]), int(args[2])
    if not callable(namespace.get(name)):
        raise SystemExit(f"no function {name!r} in this module")
    from nsight.annotation import clear_active_annotations

    for config in configs:
        for _ in range(runs):
            clear_active_annotations()
            namespace[name](*config)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
