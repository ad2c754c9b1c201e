# %% [markdown]
# # 10 · Keeping the evidence: CSVs, the full Nsight Compute report, one zip per investigation
#
# **What you will learn**
# - what `output_prefix` and `output_csv=True` write, file by file, and what is in each:
#   the per-run CSV (one row per annotation × configuration × run × metric) and the processed
#   CSV (exactly `to_dataframe()`, except for what a CSV cannot keep -- checked on your data);
# - how to open a Nsight Compute report from Python with `ncu_report`: ranges, actions
#   (kernel launches), metrics with their units -- nsight-python's own report when its Nsight
#   Compute backend is active, and a **full** report (`ncu --set full`) from the command line,
#   which works with any ncu, old ones included;
# - the handful of metrics in a full report that matter first (duration, SM and DRAM
#   throughput, achieved occupancy, tensor pipe use), and what to do when a metric is absent;
# - that `ncu_report` opens a file it cannot read *without an error*, and how to tell; what
#   to do when the reader (`ncu-report`) is older than the ncu that wrote the report;
# - how to pack one investigation -- environment, CSVs, report, plots, the script -- into one
#   zip, download it from Colab, and open the report in the Nsight Compute GUI;
# - the habits this series taught, and the notebook that showed each on your GPU.
#
# Everything this notebook writes goes into one **evidence folder** (a new temporary folder;
# set `EVIDENCE` to a folder of your own to keep it).

# %%
{{SETUP}}

# %%
import json
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import matplotlib.pyplot as plt
import ncu_report
import nsight
import numpy as np
import pandas as pd
import torch

from nspy_tutorial import evidence, ncu_cli

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
TIME = "gpu__time_duration.sum"
EVIDENCE = Path(tempfile.mkdtemp(prefix="nspy_10_")) / time.strftime("evidence-%Y%m%d-%H%M%S")
(EVIDENCE / "plots").mkdir(parents=True)
PREFIX = f"{EVIDENCE}/"  # output_prefix is a string prefix: a folder path ending in "/"
SIZES = [1 << 20, 1 << 24]
RUNS = 10
ANNOTATIONS = ["x * 2", "x + 1"]
DF = RAW = None
NSIGHT_REPORT_METRICS = None
print(f"evidence folder: {EVIDENCE}")

# %% [markdown]
# ## 1. `output_prefix` + `output_csv=True`: what is written, and reading it back
#
# Two elementwise kernels, two sizes, 10 runs, plus a derived metric (GB/s, computed per
# run by `derive_metric`), so that the CSVs have more than one metric. With
# `output_prefix=PREFIX` and `output_csv=True`, nsight-python writes (`nsight/collection/core.py`):
#
# | file | content |
# |---|---|
# | `profiled_data-<fn>-<k>.csv` | every run: one row per annotation × configuration × run × metric, with the raw `Value` |
# | `processed_data-<fn>-<k>.csv` | the aggregated table, the same as `to_dataframe()` |
# | `ncu-output-<fn>-<k>.ncu-rep` and `.log` | Nsight Compute backend only: its report and log |
# | `collected_info.pkl` | only with `info_collectors` (notebook 08); note it has no `<fn>-<k>` in its name |
#
# `<k>` counts the calls of that decorated function in this Python process (0, 1, 2, ...),
# so calling it again does not overwrite the first call's files. We read both CSVs back with
# pandas and compare the processed one with `to_dataframe()` value by value. A CSV keeps text,
# not types: a nullable boolean such as `StableMeasurement` or a column of strings may come
# back with another dtype, and a text value that looks like a number (a driver version
# "580.10", say) comes back as a number. The comparison treats missing values as equal
# whatever their spelling, and prints every dtype that changed.

# %%
def gb_per_s(time_ns, n):
    """derive_metric: each element is read once and written once (4 + 4 bytes); bytes/ns = GB/s."""
    return 8 * n / time_ns, "GB/s"


@nsight.analyze.kernel(configs=SIZES, runs=RUNS, thermal_mode="off", verbosity=SILENT,
                       derive_metric=gb_per_s, output_prefix=PREFIX, output_csv=True)
def stream(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with nsight.annotate("x * 2"):
        _ = x * 2.0
    with nsight.annotate("x + 1"):
        _ = x + 1.0


with nt.section("1. output_prefix + output_csv: the files, read back") as s:
    ENV.require("profiler")
    DF = stream().to_dataframe()
    print(f"  {nt.rules(ENV.backend)}\n")
    print(evidence.listing(EVIDENCE).to_string(index=False))
    RAW = pd.read_csv(evidence.newest_output(PREFIX, "profiled_data", "stream"))
    back = pd.read_csv(evidence.newest_output(PREFIX, "processed_data", "stream"))
    metrics = list(DF.Metric.unique())
    rows = len(ANNOTATIONS) * len(SIZES) * RUNS * len(metrics)
    print(f"\n  per-run CSV: {len(RAW)} rows, columns {list(RAW.columns)}")
    nt.claim(len(RAW) == rows, "the per-run CSV has one row per annotation x configuration x run x metric",
             f"{len(RAW)} = {len(ANNOTATIONS)} x {len(SIZES)} x {RUNS} x {len(metrics)} {metrics}")
    nt.claim((RAW.groupby(["Annotation", "n", "Metric"]).size() == RUNS).all(),
             f"each annotation, size and metric has exactly {RUNS} runs in it")
    diff = evidence.round_trip_differences(DF, back)
    nt.claim(list(back.columns) == list(DF.columns), "the processed CSV has to_dataframe()'s columns, in order")
    nt.claim(diff.same_values.all(), "every value of to_dataframe() comes back from the processed CSV",
             f"differing columns: {list(diff.column[~diff.same_values])}")
    changed = diff[diff.dtype_before != diff.dtype_after]
    print("\n  dtypes that the CSV round trip changed (values equal, types not):")
    print(changed[["column", "dtype_before", "dtype_after"]].to_string(index=False) if len(changed) else "    none")
    fig, axes = plt.subplots(1, len(ANNOTATIONS), figsize=(9, 3.2), sharey=True)
    for ax, ann in zip(axes, ANNOTATIONS):
        for n in SIZES:
            v = RAW[(RAW.Annotation == ann) & (RAW.n == n) & (RAW.Metric == TIME)].Value / 1e3
            ax.plot(np.arange(len(v)), v, "o-", ms=3, label=f"n = {n:,}")
        ax.set_title(f"{ann} ({ENV.backend} backend)", fontsize=9)
        ax.set_xlabel("run")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("kernel time (us)")
    plt.tight_layout()
    fig.savefig(EVIDENCE / "plots" / "per_run_time.png", dpi=120)  # the plot is evidence too
    plt.show()
    s.result = (f"{len(evidence.listing(EVIDENCE))} files; per-run CSV {len(RAW)} rows; processed CSV == to_dataframe() "
                f"({len(changed)} dtype(s) changed)")

# %% [markdown]
# ## 2. The Nsight Compute report, opened from Python
#
# A `.ncu-rep` file is Nsight Compute's report: every profiled kernel launch with every
# metric collected for it. `ncu_report` (the `ncu-report` package, which nsight-python
# itself uses to read its results) opens it:
#
# ```python
# report = ncu_report.load_report(path)          # an IContext
# for i in range(report.num_ranges()):           # ranges: streams of execution
#     rng = report.range_by_idx(i)
#     for j in range(rng.num_actions()):         # actions: one per profiled kernel launch
#         action = rng.action_by_idx(j)
#         action.name(), action.metric_names()   # the kernel, and every metric it has
#         action[metric].value(), action[metric].unit()
#         action.metric_by_name(metric)          # None when the report does not have it
# ```
#
# **2a. nsight-python's own report.** With the Nsight Compute backend, section 1's call left
# `ncu-output-stream-<k>.ncu-rep` in the evidence folder. It holds **only the metrics asked
# for** (here `gpu__time_duration.sum`) and the device attributes ncu records anyway -- not
# a full analysis. We check that the per-run CSV's durations are this report's numbers.
# Under the CUPTI backend nsight-python writes no report, and the section says so.

# %%
def actions_of(report) -> list:
    """Every action (profiled kernel launch) of every range of an opened report."""
    found = []
    for i in range(report.num_ranges()):
        rng = report.range_by_idx(i)
        for j in range(rng.num_actions()):
            found.append(rng.action_by_idx(j))
    return found


with nt.section("2a. nsight-python's own report (Nsight Compute backend)") as s:
    ENV.require("profiler")
    if ENV.backend != "ncu":
        raise nt.Skip(f"the {ENV.backend} backend writes no .ncu-rep (only the Nsight Compute backend does; it did "
                      f"not load: {ENV.ncu_problem}); section 2b writes a full report with the ncu command line",
                      nt.bootstrap.NCU_REMEDY, needs="ncu")
    if RAW is None:
        raise nt.Skip("section 1 did not run, so nsight-python wrote no report",
                      "run section 1 first (see its SKIPPED reason)", needs="ncu")
    path = evidence.newest_output(PREFIX, "ncu-output", "stream")
    report = ncu_report.load_report(str(path))
    evidence.check_loaded(report.num_ranges(), path, writer=ENV.ncu_version)
    actions = actions_of(report)
    NSIGHT_REPORT_METRICS = len(actions[0].metric_names())
    print(f"  {path.name}: {report.num_ranges()} range(s), {len(actions)} actions, "
          f"{NSIGHT_REPORT_METRICS} metrics per action")
    print(f"  kernels: {sorted({nt.short_kernel_name(a.name()) for a in actions})}")
    print(f"  metrics of the first action: {sorted(actions[0].metric_names())}")
    nt.claim(len(actions) == len(ANNOTATIONS) * len(SIZES) * RUNS,
             "one action per profiled launch: annotations x configurations x runs", f"{len(actions)} actions")
    durations = sorted(float(a[TIME].value()) for a in actions)
    from_csv = sorted(RAW[RAW.Metric == TIME].Value)
    nt.claim(np.allclose(durations, from_csv), "the per-run CSV's durations are this report's gpu__time_duration.sum values",
             f"{len(durations)} values, unit {actions[0][TIME].unit()!r}")
    s.result = f"{len(actions)} launches, {NSIGHT_REPORT_METRICS} metrics each: only what was asked for"

# %% [markdown]
# **2b. The full report from the `ncu` command line.** For a complete analysis, run ncu
# itself with `--set full -o <file>` on a small script -- this works with any ncu, including
# one too old for nsight-python's backend. The script is saved in the evidence folder beside
# the report: it *is* the experiment. `--set full` replays each kernel some 40 times to
# collect every section, so we profile **one** launch, selected by an NVTX range (the
# first, warm-up matmul runs outside it). The command line's defaults apply: caches flushed,
# clocks locked to base (notebook 04).
#
# Then the metrics that answer the first questions about a kernel:
#
# | question | metric |
# |---|---|
# | how long? | `gpu__time_duration.sum` |
# | how busy were the SMs, the memory? (% of peak) | `sm__throughput.avg.pct_of_peak_sustained_elapsed`, `gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed`, `gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed` |
# | how full were the SMs? (achieved occupancy) | `sm__warps_active.avg.pct_of_peak_sustained_active` |
# | at what clock? | `gpc__cycles_elapsed.avg.per_second` |
# | did it use the tensor cores? | a `pipe_tensor` metric; the name depends on the GPU and the ncu version |
#
# A metric this GPU or this ncu does not have is printed as "not in this report" rather than
# failing; for the tensor pipes we list what the report does have.

# %%
FULL_SCRIPT = textwrap.dedent('''
    import sys, torch
    n = int(sys.argv[1])
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = a @ b                      # warm-up, outside the range: not profiled
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("matmul")
    c = a @ b                      # the one launch ncu profiles
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')
N_FULL = 4096
KEY_METRICS = {
    "duration": TIME,
    "SM throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM throughput": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "memory throughput": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "SM clock": "gpc__cycles_elapsed.avg.per_second",
}
TENSOR_PIPE = [  # tried in order; names differ between GPU generations and ncu versions
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
]


def shown(metric) -> str:
    """A metric's value and unit, or why there is none."""
    if metric is None:
        return "not in this report"
    value = metric.value()
    if isinstance(value, (int, float)):
        return f"{value:,.2f} {metric.unit()}"
    return f"{value!r} {metric.unit()}"


FULL_REPORT = None

with nt.section("2b. The full report from the ncu command line (--set full)") as s:
    ENV.require("ncu-cli")
    script = ncu_cli.write_script(FULL_SCRIPT, "full_matmul.py", directory=str(EVIDENCE))
    base = EVIDENCE / "ncu-cli-full-matmul"
    cmd = ncu_cli.ncu_command(ENV.ncu_path, script, [str(N_FULL)], [], ["matmul"],
                              section_set="full", report=str(base))
    print(f"  $ {ncu_cli.command_text(cmd)}")
    print(f"  {nt.rules('ncu-cli')}")
    start = time.perf_counter()
    ncu_cli.run(cmd, timeout=600)
    took = time.perf_counter() - start
    FULL_REPORT = Path(f"{base}.ncu-rep")
    nt.claim(FULL_REPORT.exists(), "ncu wrote the report, adding .ncu-rep to the name given with -o",
             f"{FULL_REPORT.name}, {FULL_REPORT.stat().st_size / 2**20:.1f} MiB" if FULL_REPORT.exists() else "")
    report = ncu_report.load_report(str(FULL_REPORT))
    evidence.check_loaded(report.num_ranges(), FULL_REPORT, writer=ENV.ncu_version)
    actions = actions_of(report)
    action = actions[0]
    names = action.metric_names()
    print(f"\n  ncu took {took:.0f} s; {report.num_ranges()} range(s), {len(actions)} action(s); the first:")
    print(f"    {nt.short_kernel_name(action.name())}")
    print(f"    {len(names):,} metrics\n")
    for label, metric in KEY_METRICS.items():
        print(f"    {label:20s} {metric:68s} {shown(action.metric_by_name(metric))}")
    tensor = next((t for t in TENSOR_PIPE if action.metric_by_name(t) is not None), None)
    print(f"    {'tensor pipe':20s} {(tensor or TENSOR_PIPE[0]):68s} {shown(action.metric_by_name(tensor) if tensor else None)}")
    others = sorted(m for m in names if "pipe_tensor" in m and m.endswith("pct_of_peak_sustained_active"))
    print(f"\n  pipe_tensor metrics in this report ({len(others)}): {others[:8]}{' ...' if len(others) > 8 else ''}")
    nt.claim(len(actions) >= 1 and action.metric_by_name(TIME) is not None,
             "the report holds the profiled launch and its duration")
    nt.claim(len(names) > 100, "the full set records hundreds of metrics per launch", f"{len(names):,}")
    if NSIGHT_REPORT_METRICS is not None:
        nt.claim(NSIGHT_REPORT_METRICS < len(names), "nsight-python's report holds far fewer metrics than a full one",
                 f"{NSIGHT_REPORT_METRICS} vs {len(names):,}")
    details = ncu_cli.run([ENV.ncu_path, "--import", str(FULL_REPORT), "--page", "details"], timeout=300)
    print("\n  the same report read by ncu itself (ncu --import <report> --page details), first lines:")
    print(textwrap.indent("\n".join(details.strip().splitlines()[:24]), "    "))
    sm = action.metric_by_name(KEY_METRICS["SM throughput"])
    s.result = (f"{len(names):,} metrics for {len(actions)} launch(es); SM throughput "
                f"{shown(sm)}; ncu took {took:.0f} s")

# %% [markdown]
# **2c. Versions, and a report that cannot be read.** nsight-python refuses to start its
# Nsight Compute backend when the installed `ncu-report` is older (year.minor) than the ncu
# (`collection/ncu.py`, `check_ncu_report_version`): an older reader may not understand a
# newer report. The reverse -- a newer reader, an older report, as on a machine with an old
# ncu -- is the supported direction. The ncu command line has no such check, so compare
# them yourself.
#
# Worse, `ncu_report.load_report` does not raise on a file it cannot read: it returns a
# report with **zero ranges**. We show it with a file that is not a report, and turn
# "zero ranges" into an error that names the versions (`evidence.check_loaded`, used above).
# This section needs no GPU.

# %%
with nt.section("2c. Reader and writer versions; a file ncu_report cannot read") as s:
    reader = evidence.reader_version()
    writer = ENV.ncu_version if ENV.ncu_path else None
    status, message = evidence.version_verdict(writer, reader)
    print(f"  reader: ncu-report {'.'.join(map(str, reader)) if reader else 'not installed'}; "
          f"writer: {ENV.ncu_path or 'no ncu on this machine'} "
          f"({'.'.join(map(str, writer)) if writer else '-'})")
    print(f"  {status}: {message}")
    bogus = Path(tempfile.mkdtemp(prefix="nspy_10_bogus_")) / "not-a-report.ncu-rep"  # not in the evidence folder
    bogus.write_bytes(b"this is not a Nsight Compute report\n" * 64)
    try:
        ranges, raised = ncu_report.load_report(str(bogus)).num_ranges(), None
    except Exception as exc:  # a future ncu_report may raise instead: that is fine too
        ranges, raised = None, f"{type(exc).__name__}: {exc}"
    print("  load_report on a file that is not a report: "
          + (f"raised {raised}" if raised else f"no error, {ranges} ranges"))
    nt.claim(raised is not None or ranges == 0, "nothing is read from a file that is not a report")
    caught = raised
    if raised is None:
        try:
            evidence.check_loaded(ranges, bogus, writer, reader)
        except evidence.UnreadableReport as exc:
            caught = str(exc)
        print(f"  check_loaded: {caught}")
        nt.claim(caught is not None, "a report that opens with 0 ranges becomes a clear error")
    s.result = (f"reader vs writer: {status}; a file that is not a report: "
                f"{'raised' if raised else f'{ranges} ranges, turned into a clear error'}")

# %% [markdown]
# ## 3. One evidence folder per investigation, zipped
#
# A number without its conditions cannot be checked later. The evidence folder gets:
#
# - `environment.json`: the banner as data -- GPU, driver, device facts, datasheet peaks,
#   backend and why, ncu path and version, package versions, Python, host, time;
# - the CSVs and, with the Nsight Compute backend, nsight-python's report (section 1);
# - the full report and the exact script it profiled (section 2b);
# - the plots, saved as PNG;
# - `README.txt`: which tool measured what, under which rules, and how to open the report.
#
# Then `shutil.make_archive` (`evidence.zip_folder`) packs it. On Colab the zip is
# downloaded to your computer (`google.colab.files.download`); elsewhere its path is printed.
# A section that was SKIPPED simply contributes nothing -- the listing shows what is there.
#
# **Opening the report in the Nsight Compute GUI.** Install Nsight Compute on your own
# computer (free, from https://developer.nvidia.com/nsight-compute; the GUI is `ncu-ui`; it
# needs no GPU to *read* a report, and it should be at least as new as the ncu that wrote
# it), unzip, then `ncu-ui ncu-cli-full-matmul.ncu-rep` or *File → Open*. The **Details**
# page has the sections the full set collected (GPU Speed Of Light, Compute and Memory
# Workload Analysis, Occupancy, ...), with the rules' advice; **Source** shows SASS with
# per-instruction metrics; **Raw** lists every metric. Without a GUI:
# `ncu --import <report> --page details` prints the Details page (section 2b ran it), and
# `--page raw --csv` prints every metric as CSV.

# %%
with nt.section("3. The evidence folder, zipped") as s:
    record = evidence.environment_record(ENV)
    evidence.write_json(record, EVIDENCE / "environment.json")
    lines = [f"Evidence folder written by notebook 10_keeping_the_evidence on {record['recorded_at_utc']}",
             f"GPU: {ENV.gpu_name or 'none'}; backend: {ENV.backend or 'none'}; ncu: {ENV.ncu_path or 'none'}", ""]
    if RAW is not None:
        lines += ["profiled_data-*.csv, processed_data-*.csv, plots/per_run_time.png (section 1):",
                  f"  {nt.rules(ENV.backend)}", ""]
    if FULL_REPORT is not None and FULL_REPORT.exists():
        lines += [f"{FULL_REPORT.name} (section 2b), profiling full_matmul.py:", f"  {nt.rules('ncu-cli')}", ""]
    lines += ["Open a .ncu-rep with the Nsight Compute GUI (ncu-ui <file>, or File > Open),",
              "or print it: ncu --import <file> --page details   (or --page raw --csv).",
              "environment.json: GPU, driver, device facts, backend, tool and package versions."]
    (EVIDENCE / "README.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = evidence.listing(EVIDENCE)
    print(table.to_string(index=False))
    archive = evidence.zip_folder(EVIDENCE)
    inside = set(zipfile.ZipFile(archive).namelist())
    nt.claim(all(f"{EVIDENCE.name}/{f}" in inside for f in table["file"]), "the zip holds every file of the folder",
             f"{len(table)} files")
    kept = json.loads((EVIDENCE / "environment.json").read_text())
    nt.claim(kept["gpu_name"] == ENV.gpu_name and kept["backend"] == ENV.backend,
             "environment.json records this machine's GPU and backend")
    print(f"\n  {archive}  ({archive.stat().st_size / 1024:,.0f} KiB)")
    if ENV.on_colab:
        from google.colab import files
        files.download(str(archive))
        print("  Colab: the download of the zip has started in your browser")
    s.result = f"{len(table)} files in {archive.name} ({archive.stat().st_size / 1024:,.0f} KiB)"

# %% [markdown]
# ## 4. What to carry over
#
# The habits this series taught, each with the notebook that showed it on your GPU:
#
# | habit | shown in |
# |---|---|
# | `import nsight` (the setup cell) before anything touches CUDA; know which backend you got and why | 01 |
# | Annotate exactly the work you mean to measure; make inputs outside the annotation; one kernel per region unless you pass `combine_kernel_metrics` | 02 |
# | `ComputeClock` is the card's rating, not the clock the kernel ran at | 02, 04 |
# | Use `runs`; read the CI and `RelativeStdDevPct`; short kernels need more runs; a first run can be an outlier | 03 |
# | Choose cache and clock control on purpose: nsight-python flushes caches and leaves clocks free, the `ncu` command line locks them to base | 04 |
# | Sweep sizes one call per size when a library picks kernels by size; after `normalize_against`, only `AvgValue` is a ratio | 05 |
# | Turn time into FLOP/s and bytes/s, and compare with this GPU's roofs before optimising; a number above a datasheet peak is a finding to explain | 02, 05, 06 |
# | Count the bytes: fusion pays where memory traffic falls | 07 |
# | Record the conditions with the measurement (clocks, temperature, headroom); warm up; check what thermal control did | 08 |
# | Know which tool measured: CUPTI, Nsight Compute and CUDA events answer different questions | 09 |
# | Keep the evidence: CSVs, the full report, the script, the environment, in one zip | 10 |
#
# And say, next to every table, whose rules produced it: `nt.rules(...)` printed one line
# for that in every measured section of this series.
#
# Where to go next: nsight-python's [documentation](https://docs.nvidia.com/nsight-python/)
# and [examples](https://github.com/NVIDIA/nsight-python/tree/main/examples) (Triton kernels,
# `@nsight.analyze.plot`), and the
# [Nsight Compute profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# for what each section and metric means.

# %%
HABITS = {
    "01": "import nsight first; know your backend",
    "02": "annotate exactly the work; inputs outside; one kernel per region",
    "03": "enough runs; read the CI and the spread",
    "04": "cache and clock control on purpose",
    "05": "one call per size; only AvgValue is normalised",
    "06": "compare with this GPU's roofs",
    "07": "count the bytes",
    "08": "record the conditions; check thermal control",
    "09": "know which tool measured",
    "10": "keep the evidence",
}

with nt.section("4. What to carry over") as s:
    for number, habit in HABITS.items():
        print(f"  [{number}] {habit}")
    nt.claim(list(HABITS) == [f"{i:02d}" for i in range(1, 11)], "one habit for each of the ten notebooks")
    s.result = f"{len(HABITS)} habits, one per notebook (checklist above; nothing measured here)"

# %% [markdown]
# ## Takeaways
#
# - `output_prefix` + `output_csv=True` keep every run, not just the summary; put the prefix
#   in a folder of its own per investigation.
# - A CSV keeps values, not types: read it back knowing which columns change dtype.
# - nsight-python's own report holds only the metrics you asked for. For the full picture,
#   run `ncu --set full -o` on a small script -- any ncu can.
# - `ncu_report.load_report` does not fail on an unreadable file: check that ranges came out,
#   and that the reader is not older than the ncu that wrote the report.
# - One folder, one zip: environment, data, report, script, plots.
#
# ## Try it
#
# - Add `info_collectors` from notebook 08 to `stream` and look for `collected_info.pkl` in
#   the folder -- and at what happens to it when a second function writes to the same prefix.
# - Change `FULL_SCRIPT` to profile your own kernel, and open the zip's report in `ncu-ui`.
#
# Docs: [nsight-python](https://docs.nvidia.com/nsight-python/) (`output_prefix`, `output_csv`);
# example [11_output_csv.py](https://github.com/NVIDIA/nsight-python/blob/main/examples/11_output_csv.py);
# [core.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/collection/core.py) (what is
# written), [extraction.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/extraction.py)
# (how nsight-python reads its report with `ncu_report`).

# %%
nt.summary();
