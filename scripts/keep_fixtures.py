"""Keep the tables the CPU tests read (tests/fixtures/*.json) from a GPU run of the notebooks.

    python scripts/keep_fixtures.py [--out tests/fixtures/run1] 04 06 07 08 09 10

The tests read two such folders, ``run1`` and ``run2``, kept by two separate GPU runs: a verdict
a notebook prints must come out the same from both (``tests/notebook_code.fixture``).

Each notebook is executed with nbclient, strict, with ``NSPY_TUTORIAL_KEEP_TABLES=<out>``:
every table ``ncu_cli.nsight_table`` reads from the ncu command line is kept by it. Tables
measured in the notebook's own process (the CUPTI backend's, and 10's metric table) are kept
by one more cell, run in the same kernel after the notebook (:data:`IN_PROCESS`). A notebook
that fails, or a table that is missing because its section did not run, fails the script.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
KEEP = "from nspy_tutorial.ncu_cli import keep_table\n"
EVENTS = 'pd.DataFrame({}["events"], columns=["op", "events_ns", "wall_ns"])'  # 09 section 4: one row per launch
IN_PROCESS = {  # notebook number -> the cell that keeps what it measured in its own process
    "06": KEEP + 'print(keep_table(ROOF_RUNS, rk.roofs, [(N_STREAM, M_ROOF, L2, ",".join(PRECISIONS))], 10, [TIME], '
                 'name="roofs"))',
    "05": KEEP + 'print(keep_table(df, sweep, SIZES, RUNS, list(df.Metric.unique()), name="sweep-tflops"))\n'
                 'print(keep_table(NORMALIZED, sweep, pair, RUNS, [TIMES.Metric.iloc[0]], name="sweep-normalized"))',
    "04": KEEP + 'print(keep_table(RAW_BY_HAND, ck.stream_after, BY_HAND_CONFIGS, 20, [TIME], name="stream_after-raw"))',
    "08": KEEP + 'print(keep_table(OFF["raw"], profile_heated, [N_HEAT], RUNS, [], name="thermal-off"))\n'
                 'print(keep_table(AUTO["raw"], profile_heated, [N_HEAT], RUNS, [], name="thermal-auto"))',
    "09": KEEP + 'print(keep_table(CUPTI["table"], ck.workload, [()], ck.RUNS, [TIME], name="workload-cupti"))\n'
                 f'print(keep_table({EVENTS.format("CUPTI")}, ck.workload, [()], ck.RUNS, [TIME], name="events-cupti"))\n'
                 f'print(keep_table({EVENTS.format("PLAIN")}, ck.workload, [()], ck.RUNS, [TIME], name="events-plain"))',
    "10": KEEP + 'print(keep_table(DF, ek.stream, SIZES, RUNS, [TIME]))\n'
                 'print(keep_table(found, ek.matmul, [N_FULL], 1, list(found.metric), name="full-matmul"))',
}


def keep(notebook: Path, out: Path, cell: str | None, timeout: int = 1200) -> None:
    """Run ``notebook`` (then ``cell``, in the same kernel) with its ncu tables kept in ``out``."""
    os.environ.update({"NSPY_TUTORIAL_KEEP_TABLES": str(out.resolve()), "NSPY_TUTORIAL_STRICT": "1"})
    nb = nbformat.read(notebook, as_version=4)
    if cell:
        nb.cells.append(nbformat.v4.new_code_cell(cell))
    nbclient.NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(notebook.parent)}}).execute()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("numbers", nargs="+", help="notebook numbers, e.g. 04 09")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "run1")
    args = parser.parse_args(argv)
    for number in args.numbers:
        (notebook,) = (ROOT / "notebooks").glob(f"{int(number):02d}_*.ipynb")
        print(f"{notebook.name} ...", flush=True)
        try:
            keep(notebook, args.out, IN_PROCESS.get(f"{int(number):02d}"))
        except nbclient.exceptions.CellExecutionError as exc:
            print(f"{notebook.name}: not kept: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
