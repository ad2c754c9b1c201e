"""Run a Python script in a fresh child process and read back its one JSON result.

Some experiments cannot share the notebook's process: nsight-python's two tools are
mutually exclusive there (Nsight Compute, once loaded, cannot be unloaded), and
``torch.profiler`` must be seen working *without* nsight. A notebook then writes the
experiment as a script (visible in the notebook), runs it here, and gets a dict back.

The contract with the script is one line on stdout::

    print(RESULT_MARKER + json.dumps(result))   # i.e. "NSPY_RESULT {...}"

:func:`run_json` starts the child with this process's environment minus the
profiler-injection variables (:func:`nspy_tutorial.ncu_cli.child_environment`) plus the
variables you give it, and waits for it in the foreground: the child ends with the cell or
the kernel (:mod:`nspy_tutorial.lifetime`).
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
    """The JSON object on the last ``NSPY_RESULT`` line of ``output``.

    Raises :class:`ChildError` when there is no such line or it is not a JSON object.
    """
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


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_json(script: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
             timeout: float = 300) -> dict[str, Any]:
    """Run ``python script *args`` and return its result.

    ``env`` adds to (or overrides) the cleaned environment. Raises :class:`ChildError`
    with the last lines of the child's output when it fails or times out.
    """
    try:
        code, output = lifetime.run([sys.executable, script, *args], {**ncu_cli.child_environment(), **(env or {})},
                                    timeout)
    except subprocess.TimeoutExpired:
        raise ChildError(f"the child ran longer than {timeout:g} s and was stopped") from None
    if code != 0:
        raise ChildError(f"the child exited {code}:\n{_tail(output)}")
    try:
        return parse_result(output)
    except ChildError as exc:
        raise ChildError(f"{exc}; its last lines:\n{_tail(output)}") from exc
