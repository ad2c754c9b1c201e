"""Running the plain ncu command line on a script, for when nsight-python's backend can't.

nsight-python 1.1 attaches Nsight Compute to the running notebook and needs ncu
2026.2.1+. An older ncu still profiles a *separate* Python process in launch mode::

    ncu --nvtx --nvtx-include "region/" --metrics ... --csv python3 script.py

That gives cache control, clock control and hardware counters to users who cannot
upgrade. :func:`profile_script` runs it and returns one row per kernel launch and metric.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
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


def ncu_command(
    ncu: str,
    script: str,
    script_args: Sequence[str],
    metrics: Sequence[str],
    nvtx_ranges: Sequence[str],
    cache_control: str = "all",
    clock_control: str = "base",
) -> list[str]:
    """The ncu launch-mode command line (its defaults: flush caches, lock base clocks)."""
    cmd = [ncu, "--cache-control", cache_control, "--clock-control", clock_control, "--csv"]
    if nvtx_ranges:
        cmd.append("--nvtx")
        for name in nvtx_ranges:
            cmd += ["--nvtx-include", f"{name}/"]
    cmd += ["--metrics", ",".join(metrics), sys.executable, script, *script_args]
    return cmd


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


def profile_script(
    ncu: str,
    script: str,
    script_args: Sequence[str],
    metrics: Sequence[str],
    nvtx_ranges: Sequence[str],
    cache_control: str = "all",
    clock_control: str = "base",
    timeout: int = 600,
) -> pd.DataFrame:
    """Profile ``script`` with ncu in launch mode; one row per launch and metric."""
    cmd = ncu_command(ncu, script, script_args, metrics, nvtx_ranges, cache_control, clock_control)
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=child_environment(), timeout=timeout, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise NcuCliError(f"ncu exited {done.returncode}:\n{tail}")
    return parse_csv(done.stdout)
