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
* :func:`profile_script_report` -- run ncu into a report and read it back;
* :func:`nsight_table` -- run a notebook's kernels module under ncu the way nsight-python
  runs a decorated function, and return nsight-python's own ``to_dataframe()`` table
  (:func:`read_nsight_table` reads such a report; :func:`replay` is what the module's
  ``if __name__ == "__main__":`` block calls);
* :func:`nsight_tables` -- the same under several settings, one ncu process each, started
  together; :func:`start_nsight_table` -- one started ahead of the notebook's own work. The
  children measure in turns (:class:`Turns`): start-ups overlap, measurements never do.

``nsight_table`` is how a machine without the Nsight Compute backend (ncu older than
2026.2.1) still hands a notebook the same table that backend gives: ncu in launch mode
records the kernels inside nsight-python's NVTX ranges, and nsight-python's own
``extraction.extract_df_from_report`` and ``transformation.aggregate_data`` turn the report
into the table. Those two functions are not public API; :data:`NSIGHT_TESTED` is the range of
nsight-python versions this is tested with, and another version is refused with a clear error.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence

import pandas as pd

from nspy_tutorial.sections import COUNTERS_CODE, COUNTERS_REMEDY

# Set by nsight-python's Nsight Compute or CUPTI activation in *this* process; a child
# profiled by its own ncu must not inherit them.
INJECTION_VARIABLES = (
    "NVTX_INJECTION64_PATH",
    "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
    "NV_COMPUTE_PROFILER_IN_PROCESS",
)


class NcuCliError(RuntimeError):
    """ncu exited non-zero or printed no metrics."""


PERMISSION_CODE, PERMISSION_REMEDY = COUNTERS_CODE, COUNTERS_REMEDY


class CountersNotPermitted(NcuCliError):
    """The driver lets only administrators read GPU performance counters (ERR_NVGPUCTRPERM)."""


def counters_refused(text: str) -> bool:
    """True if ``text`` (ncu's output, or an exception message) reports ERR_NVGPUCTRPERM."""
    return PERMISSION_CODE in text


def child_environment() -> dict[str, str]:
    """This process's environment without the profiler-injection variables.

    ``NSPY_NCU_INIT_AT_IMPORT=0``: a child that imports nsight (for ``nsight.annotate``)
    must not try to attach Nsight Compute to itself; the ncu that launched it profiles it.
    """
    env = {k: v for k, v in os.environ.items() if k not in INJECTION_VARIABLES}
    env["NSPY_NCU_INIT_AT_IMPORT"] = "0"
    return env


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

    Raises :class:`NcuCliError` with ncu's last lines when it exits non-zero, and
    :class:`CountersNotPermitted` when ncu says the counters are reserved to administrators
    (whatever its exit code: ncu may still exit 0 after refusing every kernel).
    """
    release_gpu_cache()
    done = subprocess.run(
        list(cmd), capture_output=True, text=True, env=child_environment(), timeout=timeout, check=False
    )
    check_output(done.stdout + done.stderr, done.returncode)
    return done.stdout


def release_gpu_cache() -> None:
    """Give this process's cached, unused GPU memory back before a child allocates its own copy.

    PyTorch keeps freed blocks cached; a child profiled by ncu needs the same memory again,
    so on a small GPU (a T4's 15 GB) the two together can run out.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


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


# --- nsight-python's table from the ncu command line -----------------------------------------

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


def nsight_table(script: str, func, *, ncu: str, timeout: int = 600, **settings) -> pd.DataFrame:
    """Profile ``func`` from ``script`` with the ncu command line; return nsight-python's table.

    ``script`` is the kernels module that defines ``func`` and ends with
    ``if __name__ == "__main__": ncu_cli.replay(globals())``. The keyword arguments are
    ``nsight.analyze.kernel``'s (``configs``, ``runs``, ``metrics``, ``cache_control``,
    ``clock_control``, ``replay_mode``, ``combine_kernel_metrics``, ``derive_metric``,
    ``normalize_against``, ``ignore_kernel_list``, ``thermal_mode="off"``), with its defaults
    (``cache_control="all"``, ``clock_control="none"``), so one settings dict serves both paths;
    the command is printed once. The report is written to ``report`` (default
    ``<function>.ncu-rep`` in the working directory) and read back by :func:`read_nsight_table`.
    """
    return start_nsight_table(script, func, ncu=ncu, timeout=timeout, **settings).table()


def _variant_settings(func, key, variant: dict, settings: dict) -> dict:
    """One variant's settings: nsight.analyze.kernel's defaults, overridden by ``settings``, then by
    ``variant``; checked, with its report's name (the function's, then the key's parts)."""
    merged = {"runs": 10, "metrics": ("gpu__time_duration.sum",), "cache_control": "all", "clock_control": "none",
              "replay_mode": "kernel", "thermal_mode": "off", **settings, **variant}
    if "configs" not in merged:
        raise TypeError("nsight_tables(): configs is missing (as for nsight.analyze.kernel)")
    known = {"configs", "runs", "metrics", "cache_control", "clock_control", "replay_mode", "combine_kernel_metrics",
             "derive_metric", "normalize_against", "ignore_kernel_list", "thermal_mode", "report",
             *NSIGHT_SETTINGS_IGNORED}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise TypeError(f"nsight_table(): {', '.join(unknown)} is not an nsight.analyze.kernel setting it supports")
    if merged["thermal_mode"] != "off":
        raise ValueError("nsight_table(): thermal_mode must be 'off' (the ncu child does no thermal pauses)")
    if not merged.get("report"):
        parts = key if isinstance(key, tuple) else () if key is None else (key,)
        merged["report"] = "-".join([func.__name__, *map(str, parts)]) + ".ncu-rep"
    return merged


TURN_VAR = "NSPY_NCU_TURN_FILE"  # replay() waits until this file exists before it touches the GPU
OWNER_VAR = "NSPY_NCU_TURN_OWNER"  # ... and gives up if this process (the notebook's) is gone
TURN_TIMEOUT_VAR = "NSPY_NCU_TURN_TIMEOUT"  # ... or after this many seconds (the parent's timeout)


def nsight_tables(script: str, func, *, ncu: str, variants: dict, timeout: int = 600, **settings) -> dict:
    """:func:`nsight_table` under several settings, one ncu process each; ``{key: table}``.

    ``variants`` maps a key to the settings that differ (e.g. ``{("all", "base"):
    dict(cache_control="all", clock_control="base")}``); ``settings`` are the shared ones. An ncu
    process spends seconds starting Python, torch and nsight before its first kernel, so the
    processes start together and those start-ups overlap; the measuring does not: each child's
    :func:`replay` waits for its turn before it touches the GPU, and the next turn is given only
    when the ncu before it has exited. So no kernel of one child runs while another is measured,
    and each child's cache and clock settings hold for its own kernels only. Each command is
    printed once; the first error stops the rest.
    """
    return start_nsight_tables(script, func, ncu=ncu, variants=variants, timeout=timeout, **settings).tables()


def start_nsight_table(script: str, func, *, ncu: str, timeout: int = 600, **settings) -> Started:
    """Start :func:`nsight_table`'s ncu process now; :meth:`Started.table` later lets it measure.

    Its start-up (Python, torch, nsight, and whatever the kernels module's ``replay`` does
    before its turn) then overlaps this process's own work; it touches the GPU for its
    measurement only once :meth:`Started.table` gives it its turn.
    """
    return start_nsight_tables(script, func, ncu=ncu, variants={None: {}}, timeout=timeout, **settings)


def start_nsight_tables(script: str, func, *, ncu: str, variants: dict, timeout: int = 600, **settings) -> Started:
    """Start :func:`nsight_tables`'s ncu processes now; :meth:`Started.tables` lets them measure."""
    check_nsight_version()
    if not os.path.exists(script):
        raise NcuCliError(f"no kernels module at {script}: run its %%writefile cell first")
    chosen = {key: _variant_settings(func, key, dict(variant), settings) for key, variant in variants.items()}
    commands = {key: nsight_command(ncu, script, func.__name__, v["configs"], v["runs"], v["metrics"], v["report"],
                                    v["cache_control"], v["clock_control"], v["replay_mode"])
                for key, v in chosen.items()}
    for cmd in commands.values():
        print(f"  $ {command_text(cmd)}")
    return Started(func, chosen, Turns(list(commands.values()), timeout))


class Started:
    """ncu processes started by :func:`start_nsight_tables`, waiting for their turns to measure.

    :meth:`tables` gives the turns and reads nsight-python's tables; if it is never called,
    the processes are stopped when this object is dropped (a rerun cell), at exit, or when
    they see that this process is gone.
    """

    def __init__(self, func, chosen: dict, turns: Turns) -> None:
        self.func, self.chosen, self.turns = func, chosen, turns
        self.started = time.perf_counter()

    def tables(self) -> dict:
        """Let each process measure in turn, then read each report: ``{key: nsight-python's table}``."""
        self.turns.take()
        profiled = time.perf_counter()
        tables = {}
        for key, v in self.chosen.items():
            tables[key] = read_nsight_table(v["report"], self.func, v["configs"], v["runs"], v["metrics"],
                                            combine_kernel_metrics=v.get("combine_kernel_metrics"),
                                            derive_metric=v.get("derive_metric"),
                                            normalize_against=v.get("normalize_against"),
                                            ignore_kernel_list=v.get("ignore_kernel_list"))
            keep_table(tables[key], self.func, v["configs"], v["runs"], v["metrics"],
                       name=os.path.basename(v["report"]).removesuffix(".ncu-rep"))
        read = time.perf_counter() - profiled
        if len(tables) == 1:
            print(f"  (ncu ran {profiled - self.started:.1f} s, its report was read in {read:.1f} s)")
        else:
            print(f"  ({len(tables)} ncu processes, started together, measuring one at a time, ran "
                  f"{profiled - self.started:.1f} s in all; their reports were read in {read:.1f} s)")
        return tables

    def table(self) -> pd.DataFrame:
        """The one table of :func:`start_nsight_table`."""
        (table,) = self.tables().values()
        return table


class Turns:
    """Commands started at once whose children measure one at a time, in order.

    Child *i* finds its turn file (``turn-<i>`` in a private folder, named by :data:`TURN_VAR`)
    only once command *i - 1* has exited. Output goes to unnamed temporary files (a pipe nobody
    reads could fill and block a child). Each command leads a process group of its own, so that
    stopping it also stops the Python that ncu launched, which would otherwise wait on.
    """

    def __init__(self, commands: Sequence[Sequence[str]], timeout: int = 600, folder: str | None = None) -> None:
        release_gpu_cache()
        self.commands, self.timeout = [list(cmd) for cmd in commands], timeout
        self._own = None if folder else tempfile.TemporaryDirectory(prefix="ncu_turns_")
        self.folder = folder or self._own.name
        self.processes: list[subprocess.Popen] = []
        self.logs = []
        try:
            for index, cmd in enumerate(self.commands):
                self.logs.append(tempfile.TemporaryFile(mode="w+"))
                env = {**child_environment(), TURN_VAR: self.turn_file(index), OWNER_VAR: str(os.getpid()),
                       TURN_TIMEOUT_VAR: str(timeout)}
                self.processes.append(subprocess.Popen(cmd, stdout=self.logs[-1], stderr=subprocess.STDOUT,
                                                       text=True, env=env, start_new_session=True))
        except BaseException:
            self.stop()
            raise
        self._finalizer = weakref.finalize(self, Turns._stop, self.processes, self.logs, self._own)

    def turn_file(self, index: int) -> str:
        return os.path.join(self.folder, f"turn-{index}")

    def take(self) -> list[str]:
        """Give each child its turn after the previous command exited; each command's output, in order.

        Raises as :func:`run` does for the first that fails; the others are stopped either way.
        """
        try:
            release_gpu_cache()  # what this process freed since the start is its children's now
            outputs = []
            for index, (process, log) in enumerate(zip(self.processes, self.logs)):
                open(self.turn_file(index), "w").close()
                try:
                    code = process.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    raise NcuCliError(f"ncu still running after {self.timeout} s: "
                                      f"{command_text(self.commands[index])}") from None
                log.seek(0)
                outputs.append(check_output(log.read(), code))
            return outputs
        finally:
            self.stop()

    def stop(self) -> None:
        """Kill whatever still runs and close the logs (and the turn folder this object made)."""
        Turns._stop(self.processes, self.logs, self._own)

    @staticmethod
    def _stop(processes, logs, own) -> None:
        for process in processes:  # each ncu leads a session of its own: ncu and the Python it launched
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # the whole group has exited
                pass
            process.wait()
        for log in logs:
            log.close()
        if own is not None:
            own.cleanup()


def run_in_turns(commands: Sequence[Sequence[str]], folder: str | None = None, timeout: int = 600) -> list[str]:
    """Start every command at once; their children measure one at a time, in order (:class:`Turns`)."""
    return Turns(commands, timeout, folder).take()


def check_output(output: str, returncode: int) -> str:
    """``output`` of an ncu command that exited with ``returncode``; raises if it failed.

    :class:`CountersNotPermitted` when ncu says the counters are reserved to administrators
    (whatever its exit code: ncu may still exit 0 after refusing every kernel), else
    :class:`NcuCliError` with ncu's last lines for a non-zero exit.
    """
    if counters_refused(output):
        line = next((line for line in output.splitlines() if PERMISSION_CODE in line), PERMISSION_CODE)
        raise CountersNotPermitted(f"{line.strip()} -- what to do: {PERMISSION_REMEDY}")
    if returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-6:])
        raise NcuCliError(f"ncu exited {returncode}:\n{tail}")
    return output


KEEP_VAR = "NSPY_TUTORIAL_KEEP_TABLES"


def keep_table(table: pd.DataFrame, func, configs: Sequence, runs: int, metrics: Sequence[str],
               name: str | None = None) -> str | None:
    """With ``NSPY_TUTORIAL_KEEP_TABLES=<folder>``, save ``table`` there as JSON, with the call.

    This is how the tests' fixtures are made: nsight-python's own table, extracted from a
    report written on a GPU machine, saved with its column types so that :func:`load_table`
    gives back the same DataFrame on a CPU (the reports themselves are about 1 MB a kernel).
    The file is ``<work folder name>--<name>.json`` (``name``: the report's, default the
    function's); returns its path.
    """
    folder = os.environ.get(KEEP_VAR)
    if not folder:
        return None
    os.makedirs(folder, exist_ok=True)
    name = name or func.__name__
    path = os.path.join(folder, f"{os.path.basename(os.getcwd())}--{name}.json")
    kept = {"call": {"function": func.__name__, "configs": [list(c) for c in as_tuples(configs)], "runs": runs,
                     "metrics": list(metrics)},
            "dtypes": {column: str(dtype) for column, dtype in table.dtypes.items()},
            "table": json.loads(table.to_json(orient="split", index=False))}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(kept, handle, indent=1)
        handle.write("\n")
    return path


def load_table(path: str) -> tuple[dict, pd.DataFrame]:
    """A table saved by :func:`keep_table`: (the call, the DataFrame with its column types)."""
    with open(path, encoding="utf-8") as handle:
        kept = json.load(handle)
    split = kept["table"]
    table = pd.DataFrame(split["data"], columns=split["columns"])
    for column, dtype in kept["dtypes"].items():
        if dtype not in ("object", "str", "string"):
            table[column] = table[column].astype(dtype)
    return kept["call"], table


def replay(namespace: dict, argv: Sequence[str] | None = None, warm_up=None, before_turn: dict | None = None) -> None:
    """Run a kernels module's function as nsight-python runs a decorated one; for its ``__main__``.

    ``argv`` (default ``sys.argv[1:]``) is ``<function> <configs as JSON> <runs>``, as
    :func:`nsight_command` writes it. Every config, then every run of it, in that order;
    before each run the annotation state is cleared, as nsight-python does, so each run may
    enter the same ``nsight.annotate`` names again. ``warm_up`` (a function) runs first, outside
    every annotation. Before either touches the GPU, the child waits for its turn
    (:func:`wait_for_turn`) when it was started ahead (:func:`start_nsight_table`) or beside
    others (:func:`nsight_tables`). ``before_turn`` maps a function's name to work it needs
    done first, called with each config *before* the wait -- e.g. a ``torch.compile``, which
    then overlaps the notebook's own; it must not be measured, and the notebook measures nothing
    meanwhile (it is waiting for this child, or compiling).
    """
    from nsight.annotation import clear_active_annotations

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        raise SystemExit(f"usage: python {os.path.basename(sys.argv[0])} <function> <configs as JSON> <runs>")
    name, configs, runs = args[0], json.loads(args[1]), int(args[2])
    if not callable(namespace.get(name)):
        raise SystemExit(f"no function {name!r} in this module")
    if before_turn and name in before_turn:
        for config in configs:
            before_turn[name](*config)
    wait_for_turn()
    if warm_up is not None:
        warm_up()
    for config in configs:
        for _ in range(runs):
            clear_active_annotations()
            namespace[name](*config)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def wait_for_turn(timeout: float | None = None) -> None:
    """Wait until the file named by :data:`TURN_VAR` exists (at once when the variable is unset).

    :class:`Turns` creates it when the previous ncu process has exited. A child gives up when
    the process that started it is gone, or after ``timeout`` seconds (default: the starter's
    timeout, :data:`TURN_TIMEOUT_VAR`, else 600): nobody is left to give the turn.
    """
    path = os.environ.get(TURN_VAR)
    if not path:
        return
    if timeout is None:
        timeout = float(os.environ.get(TURN_TIMEOUT_VAR) or 600)
    owner = int(os.environ.get(OWNER_VAR) or 0)
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no turn to measure within {timeout:.0f} s ({TURN_VAR}={path})")
        if owner and not _alive(owner):
            raise SystemExit(f"the process that started this one ({owner}) is gone: nobody will give the turn")
        time.sleep(0.005)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        pass
    return True
