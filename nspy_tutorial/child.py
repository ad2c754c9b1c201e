"""Run a Python script in a fresh child process and read back its one JSON result.

Some experiments cannot share the notebook's process (Nsight Compute, once loaded, cannot be
unloaded; ``torch.profiler`` must be seen working without nsight): the notebook writes the script,
:func:`run_json` runs it in the foreground (it ends with the cell or the kernel, :mod:`lifetime`)
without the profiler-injection variables, and the script prints one line ``NSPY_RESULT {...json...}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nspy_tutorial import lifetime, ncu_cli

RESULT_MARKER = "NSPY_RESULT "


class ChildError(RuntimeError):
    """The child exited non-zero, timed out, or printed no result line."""


def parse_result(output: str) -> dict[str, Any]:
    """The JSON object on the last ``NSPY_RESULT`` line of ``output``; :class:`ChildError` if none."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        raise ChildError(f"the child printed no line starting with {RESULT_MARKER.strip()!r}")
    try:
        result = json.loads(lines[-1][len(RESULT_MARKER):])
    except json.JSONDecodeError as exc:
        raise ChildError(f"the child's result line is not JSON: {exc}") from exc
    if not isinstance(result, dict):
        raise ChildError(f"the child's result is a {type(result).__name__}, not a JSON object")
    return result


def run_json(script: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
             timeout: float = 300) -> dict[str, Any]:
    """Run ``python script *args`` (``env`` added to the cleaned environment) and return its result;
    :class:`ChildError` with the child's last lines when it fails or times out."""
    try:
        code, output = lifetime.run([sys.executable, script, *args], {**ncu_cli.child_environment(), **(env or {})},
                                    timeout)
    except subprocess.TimeoutExpired:
        raise ChildError(f"the child ran longer than {timeout:g} s and was stopped") from None
    tail = "\n".join(output.strip().splitlines()[-8:])
    if code != 0:
        raise ChildError(f"the child exited {code}:\n{tail}")
    try:
        return parse_result(output)
    except ChildError as exc:
        raise ChildError(f"{exc}; its last lines:\n{tail}") from exc
