"""Run notebook 11 with another function in its reader's cell, strict, and print each section's outcome.

    python scripts/try_your_kernel.py [--out DIR] [--timeout S] default softmax gelu-eager

For each name of :data:`CATALOGUE`, a copy of ``notebooks/11_your_kernel.ipynb`` gets that function in the
cell the reader edits (``%%writefile your_kernel.py``; ``default`` keeps the notebook's own RMSNorm), and
is executed with nbclient in strict mode (``NSPY_TUTORIAL_STRICT=1``), its work folder under ``DIR``
(``NSPY_TUTORIAL_WORKDIR``), each section writing its JSON line to ``DIR/<name>.jsonl``
(``NSPY_TUTORIAL_RESULTS``). The executed copy is kept as ``DIR/11_your_kernel--<name>.ipynb``. Then
every section's status and one-line result are printed. Exit 0 when every copy ran to its end with no
FAILED section, 1 otherwise, 2 for a name not in the catalogue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from copy import deepcopy
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "11_your_kernel.ipynb"
CELL = "%%writefile your_kernel.py"

# Each entry is the whole reader's cell: the names the notebook reads (NAME, SIZES, CACHE, PRECISION,
# make_inputs, your_function, flop_count, byte_count), as a reader would write them.
CATALOGUE = {
    "default": None,  # the notebook's own cell: RMSNorm by hand, eager, several kernels
    "softmax": '''"""One kernel: PyTorch's softmax over the rows of an fp32 matrix."""

import torch

NAME = "softmax over rows"
SIZES = {"4096 rows": (4096, 4096), "65536 rows": (65536, 4096)}
CACHE = "warm"
PRECISION = "fp32"


def make_inputs(rows: int, columns: int) -> tuple:
    return (torch.randn(rows, columns, device="cuda"),)


def your_function(x):
    return torch.softmax(x, dim=-1)


def flop_count(rows: int, columns: int) -> int | None:
    return 5 * rows * columns  # max, subtract, exp, sum, divide


def byte_count(rows: int, columns: int) -> int | None:
    return 2 * 4 * rows * columns  # x in, y out, fp32
''',
    "gelu-eager": '''"""Several kernels: GELU's tanh approximation written out as GPT-2 does, with the bias add (notebook 07)."""

import math

import torch

NAME = "bias + GELU by hand, eager"
SIZES = {"1024 tokens": (1024, 16384), "8192 tokens": (8192, 16384)}
CACHE = "warm"
PRECISION = "fp32"


def make_inputs(tokens: int, hidden: int) -> tuple:
    return torch.randn(tokens, hidden, device="cuda"), torch.randn(hidden, device="cuda")


def your_function(x, bias):
    h = x + bias
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))


def flop_count(tokens: int, hidden: int) -> int | None:
    return None  # tanh and pow are not plain adds and multiplies: the instruction counters count them


def byte_count(tokens: int, hidden: int) -> int | None:
    return 4 * (2 * tokens * hidden + hidden)  # x and the bias in, y out, fp32
''',
    "rmsnorm-compiled": '''"""The default RMSNorm, fused by torch.compile: it compiles on its first call, outside the measured region."""

import torch

NAME = "RMSNorm, torch.compile"
SIZES = {"1024 tokens": (1024, 4096), "8192 tokens": (8192, 4096)}
CACHE = "warm"
PRECISION = "fp32"
DTYPE = torch.bfloat16


def make_inputs(tokens: int, features: int) -> tuple:
    x = torch.randn(tokens, features, device="cuda", dtype=DTYPE)
    return x, torch.rand(features, device="cuda", dtype=DTYPE)


def rms_norm(x, weight, eps: float = 1e-6):
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps)).to(x.dtype)


your_function = torch.compile(rms_norm, dynamic=False)


def flop_count(tokens: int, features: int) -> int | None:
    return 4 * tokens * features


def byte_count(tokens: int, features: int) -> int | None:
    return 2 * (2 * tokens * features + features)
''',
}


def with_function(notebook: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """A copy of ``notebook`` whose reader's cell holds the catalogue's ``name`` (``default``: unchanged)."""
    copy = deepcopy(notebook)
    cells = [cell for cell in copy.cells if cell.cell_type == "code" and cell.source.startswith(CELL + "\n")]
    if len(cells) != 1:
        raise ValueError(f"{NOTEBOOK.name}: expected one cell starting with {CELL!r}, found {len(cells)}")
    if CATALOGUE[name] is not None:
        cells[0].source = f"{CELL}\n{CATALOGUE[name]}"
    return copy


def sections(results: Path) -> list[dict]:
    """The JSON lines the notebook's sections wrote, in order (a section run twice: its last line)."""
    found: dict[str, dict] = {}
    for line in results.read_text(encoding="utf-8").splitlines() if results.exists() else []:
        record = json.loads(line)
        found[record["section"]] = record
    return list(found.values())


def report(name: str, records: list[dict], stopped: str | None) -> list[str]:
    """Lines to print: one per section (status, name, then its result or its reason and remedy)."""
    lines = [f"== {name}" + (f": STOPPED -- {stopped}" if stopped else "")]
    for r in records:
        said = r["result"] if r["status"] == "OK" else f"{r['reason']} -> {r['remedy']}"
        lines.append(f"  {r['status']:<8} {r['section']}\n           {said}")
    return lines or [f"== {name}: no section ran"]


def run(name: str, out: Path, timeout: int) -> bool:
    """Execute the copy for ``name``; print its sections; True when it ran to its end with none FAILED."""
    results = out / f"{name}.jsonl"
    results.unlink(missing_ok=True)
    os.environ.update({"NSPY_TUTORIAL_STRICT": "1", "NSPY_TUTORIAL_WORKDIR": str(out / "work" / name),
                       "NSPY_TUTORIAL_RESULTS": str(results)})
    copy = with_function(nbformat.read(NOTEBOOK, as_version=4), name)
    stopped = None
    try:
        nbclient.NotebookClient(copy, timeout=timeout, resources={"metadata": {"path": str(out)}}).execute()
    except nbclient.exceptions.CellExecutionError as exc:
        stopped = (str(exc).strip().splitlines() or ["a cell raised"])[-1]
    finally:
        nbformat.write(copy, out / f"{NOTEBOOK.stem}--{name}.ipynb")
    records = sections(results)
    print("\n".join(report(name, records, stopped)), flush=True)
    return stopped is None and not any(r["status"] == "FAILED" for r in records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", help=f"functions to try: {', '.join(CATALOGUE)}")
    parser.add_argument("--out", type=Path, default=None, help="where the copies, work folders and records go")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell (default 1200)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in CATALOGUE]
    if unknown:
        print(f"not in the catalogue: {', '.join(unknown)}; choose from {', '.join(CATALOGUE)}", file=sys.stderr)
        return 2
    out = (args.out or Path(tempfile.mkdtemp(prefix="try-your-kernel-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"copies, work folders and records in {out}", flush=True)
    ok = [run(name, out, args.timeout) for name in args.names]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
