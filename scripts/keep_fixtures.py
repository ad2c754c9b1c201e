"""Keep the tables the CPU tests read (tests/fixtures/*.json) from a GPU run of the notebooks.

    python scripts/keep_fixtures.py [--out tests/fixtures/run1] 04 06 07 08 09 10 11

The tests read two such folders, ``run1`` and ``run2``, kept by two separate GPU runs: a verdict
a notebook prints must come out the same from both (``tests/notebook_code.fixture``).

Each notebook is executed with nbclient, strict, after a first cell that makes
``ncu_cli.nsight_table`` keep every table it reads from the ncu command line
(:func:`keep_ncu_tables`; the notebooks themselves know nothing of it). Tables measured in the
notebook's own process (the CUPTI backend's, and 10's metric table) are kept by one more cell,
run in the same kernel after the notebook (:data:`IN_PROCESS`). A notebook that fails, or a
table that is missing because its section did not run, fails the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
KEEP_VAR = "NSPY_TUTORIAL_KEEP_TABLES"  # the folder the tables go to, for the notebook's kernel
FIRST = f"import sys\nsys.path.insert(0, {str(ROOT / 'scripts')!r})\nimport keep_fixtures\nkeep_fixtures.keep_ncu_tables()"
KEEP = "from keep_fixtures import keep_table\n"
EVENTS = 'pd.DataFrame({}["events"], columns=["op", "events_ns", "wall_ns"])'  # 09 section 4: one row per launch
IN_PROCESS = {  # notebook number -> the cell that keeps what it measured in its own process
    "06": KEEP + 'print(keep_table(CALL_1, rk.roofs, [(N_STREAM, M_ROOF, ",".join(PRECISIONS))], 10, [TIME], name="roofs"))\n'
                 'print(keep_table(CALL_2, rk.roofs, [(N_STREAM, M_ROOF, ",".join(PRECISIONS))], 10, [TIME], '
                 'name="roofs-again"))',
    "05": KEEP + 'print(keep_table(SWEEP, pk.sweep, SIZES, RUNS, list(SWEEP.Metric.unique()), name="sweep-tflops"))\n'
                 'print(keep_table(NORMALIZED, pk.sweep, pair, RUNS, [TIME], name="sweep-normalized"))\n'
                 'print(keep_table(FP8, pk.fp8_matmul, SIZES[-1:], RUNS, list(FP8.Metric.unique()), name="fp8"))',
    "02": KEEP + 'print(keep_table(df.assign(sm_mhz=RAN_MHZ), matmul, [N], 1, ["gpu__time_duration.sum"], '
                 'name="matmul"))',
    "03": KEEP + 'print(keep_table(RAW, add_vectors, SIZES, 20, ["gpu__time_duration.sum"], name="raw-x20"))\n'
                 'print(keep_table(RAW100, add_vectors, SIZES, 100, ["gpu__time_duration.sum"], name="raw-x100"))',
    "04": KEEP + 'print(keep_table(RAW_BY_HAND, ck.stream_after, BY_HAND_CONFIGS, 20, [TIME], name="stream_after-raw"))',
    "07": KEEP + 'print(keep_table(pd.concat([ROOF[0].assign(call=1), ROOF[1].assign(call=2)]), fk.roof, '
                 '[(ROWS, HIDDEN)], SETTINGS["runs"], [TIME], name="roof"))\n'
                 'print(keep_table(TIMELINE.rename_axis("range").reset_index(), fk.trace, [(ROWS, HIDDEN)], 1, [], '
                 'name="timeline"))',
    "08": KEEP + 'print(keep_table(OFF["raw"], profile_heated, [N_HEAT], RUNS, [], name="thermal-off"))\n'
                 'print(keep_table(AUTO["raw"], profile_heated, [N_HEAT], RUNS, [], name="thermal-auto"))',
    "09": KEEP + 'print(keep_table(CUPTI["table"], ck.workload, [()], ck.RUNS, [TIME], name="workload-cupti"))\n'
                 f'print(keep_table({EVENTS.format("CUPTI")}, ck.workload, [()], ck.RUNS, [TIME], name="events-cupti"))\n'
                 f'print(keep_table({EVENTS.format("PLAIN")}, ck.workload, [()], ck.RUNS, [TIME], name="events-plain"))\n'
                 # NVML's SM clock while CUPTI measured (section 1): the bound section 3 puts on CUPTI's clock
                 'print(keep_table(pd.DataFrame([CUPTI_MHZ], columns=["median", "lowest", "highest"]), ck.workload, [()], '
                 'ck.RUNS, [], name="cupti-clock"))',
    "10": KEEP + 'print(keep_table(DF, ek.stream, SIZES, RUNS, [TIME]))\n'
                 'print(keep_table(found, ek.matmul, [N_FULL], 1, list(found.metric), name="full-matmul"))',
    "11": KEEP + "".join(f'print(keep_table({table}, hk.measured, {table}[["size", "cache"]].drop_duplicates().values'
                         f'.tolist(), {table}.NumRuns.max().item(), [TIME], name="{name}"))\n'
                         for table, name in (("LAUNCHES", "launches"), ("BATCHES", "batches"), ("CACHES", "caches")))
                 + 'print(keep_table(pd.DataFrame(PILOT_RUNS), hk.measured, LAUNCHES[["size", "cache"]].values.tolist(), '
                   'LAUNCHES.NumRuns.max().item(), [TIME], name="pilot-runs"))',
}


def keep_table(table, func, configs: Sequence, runs: int, metrics: Sequence[str], name: str | None = None) -> str:
    """Save ``table``, its column types and the call as ``$NSPY_TUTORIAL_KEEP_TABLES/<notebook>--<name>.json``
    (the notebook's work folder is the working directory); the path."""
    folder = os.environ[KEEP_VAR]
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{os.path.basename(os.getcwd())}--{name or func.__name__}.json")
    from nspy_tutorial.ncu_cli import as_tuples  # each config as nsight-python binds it

    kept = {"call": {"function": func.__name__, "configs": [list(c) for c in as_tuples(configs)], "runs": runs,
                     "metrics": list(metrics)},
            "dtypes": {column: str(dtype) for column, dtype in table.dtypes.items()},
            "table": json.loads(table.to_json(orient="split", index=False))}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(kept, handle, indent=1)
        handle.write("\n")
    return path


def keep_ncu_tables() -> None:
    """In the notebook's kernel: every table ``ncu_cli.nsight_table`` reads is kept as ``<notebook>--<report>.json``."""
    from nspy_tutorial import ncu_cli

    read = ncu_cli.nsight_table

    def read_and_keep(script: str, func, **settings):
        table = read(script, func, **settings)
        call = {**ncu_cli.DEFAULTS, **settings}
        report = os.path.basename(call.get("report") or f"{func.__name__}.ncu-rep")
        keep_table(table, func, call["configs"], call["runs"], call["metrics"], name=report.removesuffix(".ncu-rep"))
        return table

    ncu_cli.nsight_table = read_and_keep


def keep(notebook: Path, out: Path, cell: str | None, timeout: int = 1200) -> None:
    """Run ``notebook`` (then ``cell``, in the same kernel) with its ncu tables kept in ``out``."""
    os.environ.update({KEEP_VAR: str(out.resolve()), "NSPY_TUTORIAL_STRICT": "1"})
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(FIRST))
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
