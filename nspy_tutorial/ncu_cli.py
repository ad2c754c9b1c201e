"""Child processes: the ncu command line, where nsight-python's Nsight Compute backend does not work, and
:func:`run_json` for a script that must not share the notebook's process.

An ncu of any version still profiles a separate Python in launch mode: :func:`nsight_table` runs a kernels
module whose ``__main__`` is :func:`replay` (as nsight-python runs a decorated function) and reads the report
with nsight-python's own extraction and aggregation (not public API: :func:`check_nsight_version`), so the notebook
gets the very table the backend returns."""

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from nspy_tutorial import lifetime
from nspy_tutorial.sections import COUNTERS_CODE, COUNTERS_REMEDY, first_line

# Set by nsight-python's Nsight Compute or CUPTI activation in this process; a child must not inherit them.
INJECTION_VARIABLES = ("NVTX_INJECTION64_PATH", "NV_COMPUTE_PROFILER_PERFWORKS_DIR", "NV_COMPUTE_PROFILER_IN_PROCESS")
NSIGHT_DOMAIN = "nsight-python"  # nsight.annotate opens its ranges in this NVTX domain
DEFAULTS = {"runs": 10, "metrics": ("gpu__time_duration.sum",), "cache_control": "all", "clock_control": "none",
            "replay_mode": "kernel", "thermal_mode": "off"}  # nsight.analyze.kernel's own defaults
RESULT_MARKER = "NSPY_RESULT "  # run_json's script prints its result as this and one JSON object
KNOWN = {*DEFAULTS, "combine_kernel_metrics", "derive_metric", "normalize_against", "ignore_kernel_list",
         "report", "verbosity"}  # verbosity: accepted so one settings dict serves both paths


class NcuCliError(RuntimeError):
    """ncu exited non-zero, ran too long, met refused counters, or wrote no report."""


class ChildError(RuntimeError):
    """:func:`run_json`'s child exited non-zero, timed out, met refused counters, or printed no result line."""


def child_environment() -> dict[str, str]:
    """This environment without the injection variables; ``NSPY_NCU_INIT_AT_IMPORT=0``: a child that imports
    nsight (for ``nsight.annotate``) must not attach Nsight Compute to itself -- its ncu profiles it."""
    env = {k: v for k, v in os.environ.items() if k not in INJECTION_VARIABLES}
    env["NSPY_NCU_INIT_AT_IMPORT"] = "0"
    return env


def command_text(cmd: Sequence[str]) -> str:
    """``cmd`` as one shell line that can be pasted into a terminal."""
    return shlex.join(cmd)


def print_command(cmd: Sequence[str], width: int = 116) -> None:
    """``cmd`` printed as it can be pasted, in lines that fit a reader's screen: each line but the last ends in a
    backslash; an argument too long for a line (ncu's metric list) breaks after a comma with no indent on the next
    line, as the shell joins a backslash-newline inside a word back together."""
    lines, line = [], "  $"
    for word in map(shlex.quote, map(str, cmd)):
        if len(line) + len(word) + 3 > width and line.strip() not in ("$", ""):
            lines.append(line + " \\")
            line = "     "
        while len(line) + len(word) + 3 > width and "," in word[: width - len(line) - 3]:
            cut = word.rindex(",", 0, width - len(line) - 3) + 1
            lines.append((f"{line} " if line else "") + word[:cut] + "\\")
            line, word = "", word[cut:]
        line = f"{line} {word}" if line else word
    print("\n".join([*lines, line]))


def run(cmd: Sequence[str], timeout: float = 600, env: Mapping[str, str] | None = None,
        error: type[RuntimeError] = NcuCliError) -> str:
    """Run ncu (or :func:`run_json`'s Python) in the foreground, in :func:`child_environment` plus ``env``, after
    giving back torch's cached GPU memory; its output, or ``error`` for refused counters (ERR_NVGPUCTRPERM, even
    with exit 0; the section guard skips it), a timeout or a non-zero exit."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    name = os.path.basename(cmd[0])
    try:
        code, output = lifetime.run(cmd, {**child_environment(), **(env or {})}, timeout)
    except subprocess.TimeoutExpired:
        raise error(f"{name} ran longer than {timeout:g} s and was stopped: {command_text(cmd)}") from None
    if COUNTERS_CODE in output:
        line = next(line for line in output.splitlines() if COUNTERS_CODE in line)
        raise error(f"{line.strip()} -- what to do: {COUNTERS_REMEDY}")
    if code != 0:
        raise error(f"{name} exited {code}:\n" + "\n".join(output.strip().splitlines()[-8:]))
    return output


_HELP: dict[str, str] = {}  # `ncu --help` per ncu path, read once


def has_clock_reset(ncu_path: str) -> bool:
    """Whether this ncu's ``--help`` lists ``--clock-control reset`` (2025.3.1's does): read, never assumed."""
    _HELP[ncu_path] = _HELP.get(ncu_path) or run([ncu_path, "--help"], timeout=60)
    option = re.search(r"--clock-control\b.*?(?=\n\s*--\w|\Z)", _HELP[ncu_path], re.S)
    return bool(option and re.search(r"^\s*reset\b", option[0], re.M))


def reset_clocks(ncu_path: str) -> str:
    """Run ``ncu --clock-control reset`` in the foreground (at most 120 s); what it printed, else NcuCliError."""
    if not has_clock_reset(ncu_path):
        raise NcuCliError(f"{ncu_path} has no --clock-control reset (its --help does not list it): a new machine "
                          "(on Colab a new runtime) clears clocks a killed ncu left locked")
    return run([ncu_path, "--clock-control", "reset"], timeout=120).strip() or "it printed nothing"


def after_forced_stop(killed: list[list[str]]) -> None:
    """In :data:`lifetime.FORCED_STOP_HOOKS`: an ncu that had to be SIGKILLed may have left the clocks locked;
    reset them where that ncu can, and say in one line what came of it, or that it cannot and what clears a lock."""
    for ncu in {shutil.which(arg) or arg for line in killed if not {"reset", "--help"} & {*line} for arg in line[:2]
                if os.path.basename(arg) == "ncu"}:
        said = f"ncu was still running {lifetime.GRACE_SECONDS:g} s after SIGINT and was killed (clocks may be locked)"
        try:
            print(f"{said}; `{ncu} --clock-control reset`: {first_line(reset_clocks(ncu))}", flush=True)
        except (NcuCliError, OSError) as error:
            print(f"{said}; {' '.join(str(error).split())[:300]}", flush=True)


lifetime.FORCED_STOP_HOOKS.append(after_forced_stop)


# ncu prints each value in a scaled unit of its choosing ("usecond", "Gbyte/s", "cycle/nsecond", "Mhz", "%").
_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BASES = ("second", "byte", "cycle", "hz", "s")  # longest first: "nsecond" is n + second, "ns" is n + s


def _unit_factor(part: str, whole: str) -> float:
    for base in _BASES:
        if part.lower().endswith(base) and part[: len(part) - len(base)] in _PREFIX:
            return _PREFIX[part[: len(part) - len(base)]]
    raise ValueError(f"unexpected unit {whole!r} from ncu (known: [n|u|m|K|M|G|T] + second/s, byte, cycle, hz, "
                     "optionally per second)")


def to_base_units(value: float, unit: str) -> float:
    """``value`` printed by ncu in ``unit`` in SI base units (s, byte, byte/s, Hz); an unknown unit is an error."""
    unit = (unit or "").strip()
    if unit in ("", "%"):
        return value
    numerator, _, denominator = unit.partition("/")
    factor = _unit_factor(numerator, unit) / (_unit_factor(denominator, unit) if denominator else 1.0)
    return value * factor


def check_nsight_version(version: str | None = None) -> str:
    """The installed nsight-python version, or :class:`NcuCliError` unless it is the 1.1.x this was tested with."""
    version = version or importlib.metadata.version("nsight-python")
    if version.split(".")[:2] != ["1", "1"]:
        raise NcuCliError("nsight_table reads ncu reports with nsight-python's extraction.extract_df_from_report and "
                          "transformation.aggregate_data, which are not public API; it is tested with nsight-python "
                          f"1.1.x and this is {version}: install 'nsight-python>=1.1,<1.2'")
    return version


def as_tuples(configs: Sequence) -> list[tuple]:
    """Each config as a tuple of arguments (a scalar config is one argument), as nsight-python binds them."""
    return [tuple(config) if isinstance(config, (list, tuple)) else (config,) for config in configs]


def nsight_command(ncu: str, script: str, function: str, configs: Sequence, runs: int, metrics: Sequence[str],
                   report: str, cache_control: str = "all", clock_control: str = "none",
                   replay_mode: str = "kernel") -> list[str]:
    """The launch-mode command that records what nsight-python's backend would, under the same rules."""
    arguments = [function, json.dumps([list(config) for config in as_tuples(configs)]), str(runs)]
    return [ncu, "--nvtx", "--nvtx-include", f"regex:{NSIGHT_DOMAIN}@.+", "--cache-control", cache_control,
            "--clock-control", clock_control, "--replay-mode", replay_mode, "--metrics", ",".join(metrics),
            "-f", "-o", report, sys.executable, script, *arguments]


def read_nsight_table(report: str, func, configs: Sequence, runs: int, metrics: Sequence[str], *,
                      combine_kernel_metrics=None, derive_metric=None, normalize_against: str | None = None,
                      ignore_kernel_list: Sequence[str] | None = None) -> pd.DataFrame:
    """nsight-python's ``to_dataframe()`` table from a report of :func:`replay`'s runs (its backend's two calls)."""
    from nsight import extraction, transformation
    from nsight.utils import VerbosityLevel

    if not os.path.exists(report):
        raise NcuCliError(f"no report at {report}: did ncu write it? (see its output above)")
    raw = extraction.extract_df_from_report(
        report, list(metrics), as_tuples(configs), runs, func, derive_metric,
        list(ignore_kernel_list) if ignore_kernel_list else None, VerbosityLevel.SILENT, combine_kernel_metrics)
    with np.errstate(divide="ignore"):  # its geometric mean takes the log of a counter that read 0 (harmless)
        return transformation.aggregate_data(raw, func, normalize_against, VerbosityLevel.SILENT)


def nsight_table(script: str, func, *, ncu: str, configs: Sequence, timeout: int = 600, **settings) -> pd.DataFrame:
    """Profile ``func`` of the kernels module ``script`` with the ncu command line; nsight-python's table. The
    settings are ``nsight.analyze.kernel``'s (one dict serves both paths); the report is ``<function>.ncu-rep``."""
    s = {**DEFAULTS, **settings}
    unknown = sorted(set(s) - KNOWN)
    if unknown:
        raise TypeError(f"nsight_table(): {', '.join(unknown)} is not an nsight.analyze.kernel setting it supports")
    if s["thermal_mode"] != "off":
        raise ValueError("nsight_table(): thermal_mode must be 'off' (the ncu child does no thermal pauses)")
    check_nsight_version()
    if not os.path.exists(script):
        raise NcuCliError(f"no kernels module at {script}: run its %%writefile cell first")
    report = s.get("report") or f"{func.__name__}.ncu-rep"
    cmd = nsight_command(ncu, script, func.__name__, configs, s["runs"], s["metrics"], report,
                         s["cache_control"], s["clock_control"], s["replay_mode"])
    print_command(cmd)
    run(cmd, timeout=timeout)
    passed_on = ("combine_kernel_metrics", "derive_metric", "normalize_against", "ignore_kernel_list")
    return read_nsight_table(report, func, configs, s["runs"], s["metrics"], **{k: s.get(k) for k in passed_on})


def replay(namespace: dict, argv: Sequence[str] | None = None) -> None:
    """A kernels module's ``__main__``: ``<function> <configs as JSON> <runs>``, run as nsight-python runs a
    decorated function; it exits as soon as the notebook's process is gone (:func:`lifetime.watch_owner`)."""
    lifetime.watch_owner()
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        raise SystemExit(f"usage: python {os.path.basename(sys.argv[0])} <function> <configs as JSON> <runs>")
    name, configs, runs = args[0], json.loads(args[1]), int(args[2])
    from nsight.annotation import clear_active_annotations

    for config in configs:
        for _ in range(runs):
            clear_active_annotations()
            namespace[name](*config)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def run_json(script: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
             timeout: float = 300) -> dict[str, Any]:
    """``python script *args`` through :func:`run`: the JSON on its last ``NSPY_RESULT`` line, else ChildError."""
    output = run([sys.executable, script, *args], timeout, env, ChildError)
    tail = "\n".join(output.strip().splitlines()[-8:])
    lines = [line for line in output.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        raise ChildError(f"the child printed no line starting with {RESULT_MARKER.strip()!r}; its last lines:\n{tail}")
    try:
        return json.loads(lines[-1][len(RESULT_MARKER):])
    except json.JSONDecodeError as exc:
        raise ChildError(f"the child's result line is not JSON ({exc}); its last lines:\n{tail}") from exc
