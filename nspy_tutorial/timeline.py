"""The timeline of a notebook's kernels module (07), captured in a child process with no nsight tool active: under
Nsight Systems as seed 002 runs it (``nsys profile --trace=cuda,nvtx,osrt --stats=true -o ... python module.py``) where
nsys is installed, else under torch.profiler (its Kineto trace). Either capture is read into one schema, times in ns
from its first event, so the analysis after reading is one path: ``kernels`` (the GPU's), ``calls`` (the CPU's CUDA
API calls; a launch shares its kernel's correlation) and ``ranges`` (NVTX, or ``record_function``). The capture file
stays in the notebook's work folder (:func:`captures`: for nsys-ui, or an evidence folder)."""

import dataclasses
import importlib
import json
import os
import sqlite3
import sys
from pathlib import Path

import pandas as pd

from nspy_tutorial import backend, lifetime, ncu_cli

COLUMNS = {"kernels": ["name", "start", "end", "correlation"], "calls": ["name", "start", "end", "correlation"],
           "ranges": ["name", "start", "end"]}
NSYS_TABLES = {  # what the SQLite export needs, and what a missing one means: nsys leaves out a table it has no rows for
    "StringIds": "it holds every name: this is not an Nsight Systems export",
    "CUPTI_ACTIVITY_KIND_KERNEL": "no GPU kernel was traced: the program launched none, or ran without --trace=cuda",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "no CUDA API call was traced: the program ran without --trace=cuda",
    "NVTX_EVENTS": "no NVTX range was recorded: the program opened none, or ran without --trace=nvtx",
}
NSYS_QUERIES = {  # columns by name; a schema without one is an error that names it
    "kernels": "SELECT s.value, k.start, k.end, k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
               "JOIN StringIds s ON s.id = k.demangledName",
    "calls": "SELECT s.value, r.start, r.end, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
             "JOIN StringIds s ON s.id = r.nameId",
    "ranges": "SELECT COALESCE(n.text, s.value), n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s "
              "ON s.id = n.textId WHERE n.end > n.start",  # ranges only: marks and domain names have no end
}
NSYS_GPU = {"name": "name", "sms": "smCount", "l2_bytes": "l2CacheSize", "bandwidth_bytes_per_s": "memoryBandwidth",
            "clock_hz": "clockRate", "cc_major": "computeMajor", "cc_minor": "computeMinor"}
KINETO = {"kernels": ("kernel",), "calls": ("cuda_runtime", "cuda_driver"), "ranges": ("user_annotation",)}


class TimelineError(RuntimeError):
    """A capture that could not be made or read; the message says what is missing and what it means."""


@dataclasses.dataclass
class Timeline:
    """One capture in the common schema; ``tool`` drew it, ``path`` is the file kept, ``gpu`` what it says of the GPU."""

    tool: str
    path: str
    kernels: pd.DataFrame
    calls: pd.DataFrame
    ranges: pd.DataFrame
    gpu: dict


def _timeline(tool: str, path: str, gpu: dict, scale: float, **rows: list) -> Timeline:
    """The rows as frames, times in ns from the first event (``scale``: ns per unit); API names without their
    version suffix (nsys's ``cudaLaunchKernel_v7000`` is torch.profiler's ``cudaLaunchKernel``)."""
    frames = {kind: pd.DataFrame(found, columns=COLUMNS[kind]) for kind, found in rows.items()}
    first = min(frame.start.min() for frame in frames.values() if len(frame))
    for frame in frames.values():
        frame[["start", "end"]] = (frame[["start", "end"]].astype(float) - first) * scale
    frames["calls"]["name"] = frames["calls"].name.str.replace(r"_v\d+$", "", regex=True)
    return Timeline(tool, path, gpu=gpu, **frames)


def read_nsys(path: str, report: str | None = None) -> Timeline:
    """An ``nsys export --type sqlite`` file, read by table and column name: the schema changes between nsys versions
    (its version is in ``META_DATA_EXPORT``, ``EXPORT_META_DATA`` in older ones). Names need not be valid UTF-8."""
    if not os.path.exists(path):
        raise TimelineError(f"no {path}: did `nsys export` write it? (see its output above)")
    db, version = sqlite3.connect(f"file:{path}?mode=ro", uri=True), "unknown"
    db.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    try:
        have = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in {"META_DATA_EXPORT", "EXPORT_META_DATA"} & have:
            version = dict(db.execute(f"SELECT name, value FROM {table}")).get("EXPORT_PRODUCT_VERSION", version)
        for table, meaning in NSYS_TABLES.items():
            if table not in have:
                raise TimelineError(f"{path} (Nsight Systems {version}) has no table {table}: {meaning}")
        rows = {kind: db.execute(query).fetchall() for kind, query in NSYS_QUERIES.items()}
        gpu = db.execute("SELECT * FROM TARGET_INFO_GPU") if "TARGET_INFO_GPU" in have else None
        facts = dict(zip([d[0] for d in gpu.description], gpu.fetchone() or ())) if gpu else {}
    except sqlite3.DatabaseError as exc:
        raise TimelineError(f"{path} (Nsight Systems {version}): {exc}; this reader knows nsys 2025.3's schema "
                            "(3.20)") from exc
    finally:
        db.close()
    for kind, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("ranges", "NVTX_EVENTS")):
        if not rows[kind]:
            raise TimelineError(f"{path} (Nsight Systems {version}): {table} has no {kind}: {NSYS_TABLES[table]}")
    gpu = {key: facts[column] for key, column in NSYS_GPU.items() if column in facts}
    return _timeline(f"Nsight Systems {version}", report or path, gpu, 1.0, **rows)


def read_kineto(path: str) -> Timeline:
    """torch.profiler's chrome trace (``export_chrome_trace``): its complete events ("ph": "X") of the categories in
    :data:`KINETO`, ``ts`` and ``dur`` in us; ``args.correlation`` links a launch call to its kernel."""
    with open(path, encoding="utf-8") as handle:
        trace = json.load(handle)
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    rows = {kind: [(e["name"], e["ts"], e["ts"] + e["dur"], e.get("args", {}).get("correlation"))[:len(COLUMNS[kind])]
                   for e in events if e.get("cat") in cats] for kind, cats in KINETO.items()}
    if not rows["kernels"]:
        raise TimelineError(f"{path} holds no GPU kernel: torch.profiler recorded no CUDA activity (no GPU, or another "
                            "profiler held CUPTI in that process, as nsight-python's CUPTI backend does)")
    if not rows["ranges"]:
        raise TimelineError(f"{path} holds no record_function range: the program opened none")
    device = (trace.get("deviceProperties") or [{}])[0]
    return _timeline("torch.profiler (Kineto)", path, {"name": device.get("name"), "sms": device.get("numSms")},
                     1e3, **rows)


def capture(script: str, function: str, configs: list, *, nsys: str | None, runs: int = 1,
            timeout: float = 600) -> Timeline:
    """Run ``function`` of the kernels module ``script`` on each config ``runs`` times in a child process with no
    nsight tool active, in the foreground of the cell, each command printed: under ``nsys`` through the module's own
    ``__main__`` (``ncu_cli.replay``), the report exported to SQLite and read; with ``nsys=None`` under torch.profiler
    (``python -m nspy_tutorial.timeline``). The files stay in the working directory, the notebook's work folder."""
    if not os.path.exists(script):
        raise TimelineError(f"no kernels module at {script}: run its %%writefile cell first")
    stem = f"{function}-timeline"
    args = [function, json.dumps([list(c) for c in ncu_cli.as_tuples(configs)], separators=(",", ":")), str(runs)]
    steps = [[sys.executable, "-m", "nspy_tutorial.timeline", script, *args, f"{stem}.json"]] if nsys is None else [
        [nsys, "profile", "--trace=cuda,nvtx,osrt", "--stats=true", "--force-overwrite=true", "-o", stem,
         sys.executable, script, *args],
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", f"{stem}.sqlite", f"{stem}.nsys-rep"]]
    for number, cmd in enumerate(steps):
        ncu_cli.print_command(cmd)
        output = ncu_cli.run(cmd, timeout, error=TimelineError)
        if number == 0 and nsys:  # --stats=true's summary tables, kept beside the report
            Path(f"{stem}-stats.txt").write_text(output, encoding="utf-8")
    if nsys is None:
        return read_kineto(f"{stem}.json")
    timeline = read_nsys(f"{stem}.sqlite", f"{stem}.nsys-rep")
    timeline.tool = f"Nsight Systems {backend.nsys_version(nsys)}"  # the nsys that drew it
    return timeline


def captures(folder: str | Path) -> list[Path]:
    """The timeline files kept in a notebook's work folder (``*-timeline.nsys-rep``, ``.sqlite``, the stats text, or
    torch.profiler's ``.json``): what an evidence folder (10) collects, and what ``nsys-ui`` opens."""
    return sorted(path for path in Path(folder).glob("*-timeline*") if path.is_file())


def main(argv: list[str] | None = None) -> None:
    """``python -m nspy_tutorial.timeline SCRIPT FUNCTION CONFIGS RUNS TRACE``: the function once on the first config
    (it compiles, warms up), then on each config RUNS times under torch.profiler; its chrome trace to TRACE."""
    lifetime.watch_owner()
    script, function, configs, runs, trace = argv or sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    work = getattr(importlib.import_module(Path(script).stem), function)
    import torch
    from torch.profiler import ProfilerActivity, profile

    configs = json.loads(configs)
    work(*configs[0])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        for config in [config for config in configs for _ in range(int(runs))]:  # as nsight-python orders them
            work(*config)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    profiler.export_chrome_trace(trace)


if __name__ == "__main__":
    main()
