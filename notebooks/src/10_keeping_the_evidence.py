# %% [markdown]
# # 10 · Keeping the evidence: CSVs, the full Nsight Compute report, one zip per investigation
#
# **What you will learn**
# - what `output_prefix` and `output_csv=True` write, file by file, and what is in each:
#   the per-run CSV (one row per annotation × configuration × run × metric, `derive_metric`'s
#   values included) and the processed CSV (exactly `to_dataframe()`, except for what a CSV
#   cannot keep -- checked on your data);
# - how to open a Nsight Compute report from Python with `ncu_report`: ranges, actions
#   (kernel launches), metrics with their units -- nsight-python's own report when its Nsight
#   Compute backend is active, and a **full** report (`ncu --set full`) from the command line,
#   which works with any ncu, old ones included;
# - the handful of metrics in a full report that matter first (duration, SM and DRAM
#   throughput, achieved occupancy, warp execution efficiency, the clock the kernel ran at and
#   the clock basis ncu chose, tensor pipe use), how to find the right name when names differ
#   between GPUs and ncu versions, and the report's Speed Of Light section printed as text, as
#   the GUI would show it;
# - that `ncu_report` opens a file it cannot read *without an error*, and how to tell; what
#   to do when the reader (`ncu-report`) is older than the ncu that wrote the report;
# - how to pack one investigation -- environment (the SM clock's state included: free, or held),
#   CSVs, report, plots, the profiled module -- into one zip, download it from Colab, and open the report in the Nsight Compute GUI;
# - the habits this series taught, and the notebook that showed each on your GPU.
#
# Everything this notebook writes goes into its work folder (printed by the setup cell); the
# evidence of this investigation goes into one **evidence folder** inside it.

# %%
{{SETUP}}

# %%
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path

import matplotlib.pyplot as plt
import ncu_report
import nsight
import numpy as np
import pandas as pd

from nspy_tutorial import evidence, ncu_cli, timeline

SILENT = nsight.VerbosityLevel.SILENT
TIME = "gpu__time_duration.sum"
EVIDENCE = ENV.workdir / time.strftime("evidence-%Y%m%d-%H%M%S")
(EVIDENCE / "plots").mkdir(parents=True)
PREFIX = f"{EVIDENCE}/"  # output_prefix is a string prefix: a folder path ending in "/"
print(f"evidence folder: {EVIDENCE}")


# %% [markdown]
# The workloads, written once: two elementwise streams for section 1, and the fp16 matmul
# whose full report section 2b keeps. The notebook imports this module; the `ncu` command
# line runs the same file (its `__main__` replays a function the way nsight-python runs a
# decorated one: configurations, then runs, ranges in nsight-python's NVTX domain).

# %% writefile evidence_kernels.py
"""Notebook 10's workloads: two elementwise streams (section 1) and one fp16 matmul (section 2b)."""
import nsight
import torch


def stream(n: int) -> None:
    """x * 2 and x + 1 on n floats, each in its own annotation (x is made outside them)."""
    x = torch.randn(n, device="cuda")
    with nsight.annotate("x * 2"):
        _ = x * 2.0
    with nsight.annotate("x + 1"):
        _ = x + 1.0


def matmul(n: int) -> None:
    """One n x n fp16 matmul; cuBLAS picks a tensor-core kernel for this GPU."""
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    with nsight.annotate("fp16 matmul"):
        _ = a @ b


if __name__ == "__main__":  # what the ncu command line runs (the printed command shows it)
    from nspy_tutorial import ncu_cli

    ncu_cli.replay(globals())

# %%
import evidence_kernels as ek  # written by the cell above, into the work folder

# %% [markdown]
# ## 1. `output_prefix` + `output_csv=True`: what is written, and reading it back
#
# Two elementwise kernels, two sizes, a few runs, plus a derived metric (GB/s, computed per
# run by `derive_metric`), so that the CSVs have more than one metric. With
# `output_prefix=PREFIX` and `output_csv=True`, nsight-python writes (`nsight/collection/core.py`):
#
# | file | content |
# |---|---|
# | `profiled_data-<fn>-<k>.csv` | every run: one row per annotation × configuration × run × metric, with the raw `Value` |
# | `processed_data-<fn>-<k>.csv` | the aggregated table, the same as `to_dataframe()` |
# | `ncu-output-<fn>-<k>.ncu-rep` and `.log` | Nsight Compute backend only: its report and log |
# | `collected_info.pkl` | with `info_collectors` (notebook 08), nsight-python 1.1.0 only; no `<fn>-<k>` in its name |
#
# `<k>` counts the calls of that decorated function in this Python process (0, 1, 2, ...),
# so calling it again does not overwrite the first call's files. We read both CSVs back with
# pandas and compare the processed one with `to_dataframe()` value by value. A CSV keeps text,
# not types: a nullable boolean such as `StableMeasurement` or a column of strings may come
# back with another dtype, and a text value that looks like a number (a driver version
# "580.10", say) comes back as a number. The comparison treats missing values as equal
# whatever their spelling, and prints every dtype that changed. Look also at the derived
# metric's rows: `derive_metric` adds a metric named after the function, with its own unit.
# Its GB/s counts bytes, not where they came from: where the 8 bytes per element of a size fit
# in the L2 (the setup cell printed its size), the kernel works **L2-resident** (a warm input
# with CUPTI; with Nsight Compute's flush, an output the L2 absorbs), so that rate is not the
# DRAM's -- nor the L2's bandwidth: a kernel of a few microseconds spends much of its time
# launching, ramping up and draining (notebook 04 measures a warm stream like it). The cell
# labels each size.

# %%
SIZES = [1 << 20, 1 << 24]
RUNS = 5  # the shape of the files, not the statistics (notebook 03): a few runs are enough
DF = RAW = NSIGHT_REPORT_METRICS = None


def gb_per_s(time_ns, n):
    """derive_metric: each element is read once and written once (4 + 4 bytes); bytes/ns = GB/s."""
    return 8 * n / time_ns, "GB/s"


def residency(n: int, l2_bytes: int) -> str:
    """Where n floats read once and written once (8 n bytes) can live during the kernel: the L2, or only DRAM."""
    fits = "L2-resident (fits in the L2: not a DRAM rate, nor the L2's)"
    return fits if 8 * n <= l2_bytes else "DRAM (larger than the L2)"


def read_back(table: pd.DataFrame, prefix: str, function: str) -> tuple:
    """The newest call's per-run and processed CSVs, and the processed one compared with `table` column by column."""
    raw = pd.read_csv(evidence.newest_output(prefix, "profiled_data", function))
    back = pd.read_csv(evidence.newest_output(prefix, "processed_data", function))
    return raw, back, evidence.round_trip_differences(table, back)


with nt.section("1. output_prefix + output_csv: the files, read back") as s:
    ENV.require("profiler")
    stream = nsight.analyze.kernel(
        configs=SIZES,
        runs=RUNS,
        thermal_mode="off",
        verbosity=SILENT,
        derive_metric=gb_per_s,
        output_prefix=PREFIX,
        output_csv=True,
    )(ek.stream)
    DF = stream().to_dataframe()
    print(f"  {nt.rules(ENV.backend)}\n\n  derive_metric's rows of to_dataframe():")
    rates = DF[DF.Metric == "gb_per_s"][
        ["Annotation", "n", "AvgValue", "Unit", "RelativeStdDevPct"]
    ]
    # not the DRAM's rate where it fits in the L2
    where = [residency(n, ENV.facts.l2_bytes) for n in rates.n]
    print(rates.assign(where=where).round(2).to_string(index=False))
    RAW, back, diff = read_back(DF, PREFIX, "stream")
    metrics = list(RAW.Metric.unique())
    print(f"\n  per-run CSV: {len(RAW)} rows, metrics {metrics},\n    columns {list(RAW.columns)}")
    counts = RAW.groupby(["Annotation", "n", "Metric"]).size()
    rows = f"{len(RAW)} rows = 2 x {len(SIZES)} x {RUNS} x {len(metrics)}"
    one_each = len(counts) == 2 * len(SIZES) * len(metrics) and (counts == RUNS).all()
    nt.claim(
        one_each, "the per-run CSV has a row per annotation x configuration x run x metric", rows
    )
    same = list(back.columns) == list(DF.columns)
    nt.claim(same, "the processed CSV has to_dataframe()'s columns, in order")
    differing = f"differing columns: {list(diff.column[~diff.same_values])}"
    every = "every value of to_dataframe() comes back from the processed CSV"
    nt.claim(diff.same_values.all(), every, differing)
    changed = diff[diff.dtype_before != diff.dtype_after]
    print("\n  dtypes that the CSV round trip changed (values equal, types not):")
    shown = changed[["column", "dtype_before", "dtype_after"]]
    print(shown.to_string(index=False) if len(changed) else "    none")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, (ann, part) in zip(axes, RAW[RAW.Metric == TIME].groupby("Annotation")):
        for n, runs in part.groupby("n"):
            ax.plot(np.arange(len(runs)), runs.Value / 1e3, "o-", ms=3, label=f"n = {n:,}")
        ax.set(title=f"{ann} ({ENV.backend} backend)", xlabel="run", yscale="log")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("kernel time (us)")
    plt.tight_layout()
    fig.savefig(EVIDENCE / "plots" / "per_run_time.png", dpi=120)  # the plot is evidence too
    plt.show()
    files = evidence.listing(EVIDENCE)
    print(files.to_string(index=False))
    s.result = (
        f"{len(files)} files; per-run CSV {len(RAW)} rows ({len(metrics)} metrics); processed CSV "
        f"== to_dataframe() ({len(changed)} dtype(s) changed)"
    )


# %% [markdown]
# ## 2. The Nsight Compute report, opened from Python
#
# A `.ncu-rep` file is Nsight Compute's report: every profiled kernel launch with every
# metric collected for it. [`ncu_report`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#ncu_report) (the `ncu-report` package: Nsight
# Compute's Python reader of `.ncu-rep` files, which nsight-python itself uses) opens it:
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
    ranges = [report.range_by_idx(i) for i in range(report.num_ranges())]
    return [r.action_by_idx(j) for r in ranges for j in range(r.num_actions())]


with nt.section("2a. nsight-python's own report (Nsight Compute backend)") as s:
    ENV.require("profiler", also="ncu")
    if ENV.backend != "ncu":
        why = (
            f"the {ENV.backend} backend writes no .ncu-rep (only the Nsight Compute backend does; it "
            f"did not load: {ENV.ncu_problem}); section 2b writes a full report with the ncu command line"
        )
        raise nt.Skip(why, nt.environment.NCU_REMEDY, needs="ncu")
    if RAW is None:
        why = "section 1 did not run, so nsight-python wrote no report"
        raise nt.Skip(why, "run section 1 first (see its SKIPPED reason)", needs="ncu")
    path = evidence.newest_output(PREFIX, "ncu-output", "stream")
    report = ncu_report.load_report(str(path))
    evidence.check_loaded(report.num_ranges(), path, writer=ENV.ncu_version)
    actions = actions_of(report)
    NSIGHT_REPORT_METRICS = len(actions[0].metric_names())
    print(f"  {path.name}: {report.num_ranges()} range(s), {len(actions)} actions, ", end="")
    print(f"{NSIGHT_REPORT_METRICS} metrics per action")
    print(f"  kernels: {sorted({nt.short_kernel_name(a.name()) for a in actions})}")
    per_launch = "one action per profiled launch: annotations x configurations x runs"
    nt.claim(len(actions) == 2 * len(SIZES) * RUNS, per_launch, f"{len(actions)} actions")
    durations = sorted(float(a[TIME].value()) for a in actions)
    same = np.allclose(durations, sorted(RAW[RAW.Metric == TIME].Value))
    said = "the per-run CSV's durations are this report's gpu__time_duration.sum values"
    nt.claim(same, said, f"{len(durations)} values, unit {actions[0][TIME].unit()!r}")
    s.result = (
        f"{len(actions)} launches, {NSIGHT_REPORT_METRICS} metrics each: only what was asked for"
    )


# %% [markdown]
# **2b. The full report from the `ncu` command line.** For a complete analysis, run ncu
# itself with `--set full -o <file>` on the module above -- this works with any ncu,
# including one too old for nsight-python's backend. `--set full` replays each kernel some
# 40 times to collect every section, so we profile **one** launch: `--nvtx-include` keeps only
# kernels inside nsight-python's annotation (the matrices are made outside it).
#
# **The clock basis.** The command line's defaults apply: caches flushed, and the clocks
# **locked to base** (`--clock-control base`) for the run. Locked to base does not pin one
# frequency: notebook 04 measured the clock under it, and it need not sit at the datasheet's
# base clock (for example, a T4's is 585 of 1,590 MHz). So the durations in this report are
# the kernel at whatever clock the lock allowed, and that clock is measured, not assumed: the
# cell prints the SM clock the report measured during the kernel
# (`gpc__cycles_elapsed.avg.per_second`: cycles elapsed / duration) beside the duration, against
# the GPU's rated maximum (`device__attribute_clock_rate`, nsight-python's `ComputeClock`), and
# checks that it ran below that maximum. Where setup found the GPU's clock held even before this
# notebook ran (its banner), the cell says that too: then even "clocks free" would not be free.
#
# Then the metrics that answer the first questions about a kernel. Metric names differ
# between GPU generations and ncu versions, so each question lists candidate names; the
# first one the report has is used, and the table says which:
#
# | question | metric |
# |---|---|
# | how long? | `gpu__time_duration.sum` |
# | how busy were the SMs, the memory? (% of peak) | `sm__throughput`, `gpu__dram_throughput`, `gpu__compute_memory_throughput` (`.avg.pct_of_peak_sustained_elapsed`) |
# | how full were the SMs? ([achieved occupancy](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#occupancy): the share of the SM's warp slots that held a working warp, notebook 02 §1) | `sm__warps_active.avg.pct_of_peak_sustained_active` |
# | how many of a warp's 32 threads does each instruction use? ([warp execution efficiency](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#warp-execution-efficiency)) | `smsp__thread_inst_executed_per_inst_executed.ratio` |
# | at what clock did it run, of which maximum? | `gpc__cycles_elapsed.avg.per_second` and `device__attribute_clock_rate`, in MHz |
# | did it use the tensor cores? | `sm__pipe_tensor_cycles_active` (cycles any tensor pipe was busy), `sm__pipe_tensor_op_hmma_cycles_active` (the HMMA pipe), `sm__inst_executed_pipe_tensor_op_gmma` (`wgmma` instructions issued) |
#
# Two instruction names first. [HMMA](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#hmma) is the tensor cores' half-precision matrix
# multiply-accumulate instruction as the GPU runs it: one warp computes a small tile
# (`mma.sync` in PTX, NVIDIA's virtual instruction set). [`wgmma`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#wgmma) is Hopper's
# warpgroup MMA: four warps together issue one asynchronous instruction on a much larger tile,
# reading it from shared memory.
#
# Two kinds of tensor metric answer different questions. A `cycles_active` metric says how
# often a pipe was busy; an `inst_executed` one how many instructions were issued, as a share
# of the issue rate. On Hopper (H100, H200: compute capability 9.0) cuBLAS's fp16 GEMMs
# (`nvjet_sm90_...`) issue `wgmma` instructions, each of which keeps the pipe busy for many
# cycles: so their instruction share reads far below the pipe's busy cycles. Look at the
# table: which pipe's busy cycles follow the GEMM, and how far the `wgmma` instruction share
# sits below them. Judge "did it use the tensor cores" by busy cycles, and read the names:
# an ncu version may not offer a busy-cycles metric for every instruction type. The HMMA
# pipe's metrics are named after HMMA instructions, but on Hopper they count `wgmma` work too:
# where the HMMA pipe is as busy as "any tensor pipe", the cell says so, and its instruction
# share is not a count of `mma.sync`.
# Achieved occupancy is low for a `wgmma` GEMM by design: each SM holds a few large
# warpgroups that keep big tiles in registers and shared memory, so judge such a kernel by
# its tensor-pipe activity, not by its occupancy.
#
# Last, the report's **[Speed Of Light](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#speed-of-light)** section, printed as the GUI's
# Details page would show it: each unit's throughput as a % of the most it could do (its
# "speed of light"), the first place to look for which part of the GPU a kernel keeps busy.

# %%
N_FULL = 4096
FULL_REPORT = None
QUESTIONS = {  # question -> candidate metric names, the first one present is used
    "duration": ["gpu__time_duration.sum"],
    "SM throughput": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "DRAM throughput": [
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ],
    "memory throughput": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
    "achieved occupancy": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "SM clock it ran at": [
        "gpc__cycles_elapsed.avg.per_second",
        "sm__cycles_elapsed.avg.per_second",
    ],
    "rated max SM clock": ["device__attribute_clock_rate"],
    "tensor pipes busy": ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
    "HMMA pipe busy": ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"],
    "wgmma issued": ["sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"],
    "HMMA issued": ["sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"],
    "warp execution efficiency": ["smsp__thread_inst_executed_per_inst_executed.ratio"],
}


def metric_table(action) -> pd.DataFrame:
    """Every candidate metric, and every tensor-pipe average %, that the report has: name, value, unit."""
    wanted = {m for names in QUESTIONS.values() for m in names}
    tensor = [m for m in action.metric_names() if "pipe_tensor" in m and ".avg.pct_of_peak" in m]
    names = sorted({m for m in action.metric_names() if m in wanted} | set(tensor))
    rows = [(m, action[m].value(), action[m].unit()) for m in names]
    return pd.DataFrame(rows, columns=["metric", "value", "unit"])


def readable(value, unit: str, metric: str = "") -> str:
    """A value as one reads it: a percentage as is, a time in us, a frequency in MHz, threads of a warp's 32."""
    if metric.endswith("per_inst_executed.ratio"):  # threads that execute each warp instruction
        return f"{value:.1f} of 32 threads"
    if metric == "device__attribute_clock_rate":  # in kHz, as nsight-python reads it (ComputeClock)
        value, unit = value * 1e3, "hz"
    if unit == "%":
        return f"{value:.1f} %"
    if unit.lower().endswith("hz") or unit.startswith("cycle/"):
        return f"{ncu_cli.to_base_units(value, unit) / 1e6:,.0f} MHz"
    if unit.lower().endswith(("second", "s")):
        return f"{ncu_cli.to_base_units(value, unit) * 1e6:,.2f} us"
    return f"{value:,.4g} {unit}"


def key_metrics(found: pd.DataFrame) -> pd.DataFrame:
    """One row per question: the first candidate metric the report has and its value, or 'not in this report'."""
    have = found.set_index("metric")
    rows = []
    for question, names in QUESTIONS.items():
        name = next((m for m in names if m in have.index), None)
        value = readable(have.value[name], have.unit[name], name) if name else "not in this report"
        rows.append((question, value, name or "-"))
    return pd.DataFrame(rows, columns=["question", "value", "metric used"])


def hmma_counts_wgmma(found: pd.DataFrame) -> bool:
    """Whether the HMMA pipe was as busy as any tensor pipe (within 1 point) while wgmma instructions were issued."""
    pct = found.set_index("metric").value.to_dict()
    hmma = pct.get(QUESTIONS["HMMA pipe busy"][0])
    busiest = pct.get(QUESTIONS["tensor pipes busy"][0])
    gmma = pct.get(QUESTIONS["wgmma issued"][0], 0)
    return None not in (hmma, busiest) and gmma > 0 and abs(hmma - busiest) < 1


def clocks_mhz(found: pd.DataFrame) -> tuple[float, float] | None:
    """(the clock the report measured the kernel at, the GPU's rated maximum) in MHz; None if the report lacks one."""
    have = found.set_index("metric")
    ran = next((m for m in QUESTIONS["SM clock it ran at"] if m in have.index), None)
    if ran is None or "device__attribute_clock_rate" not in have.index:
        return None
    rated = have.value["device__attribute_clock_rate"] / 1e3  # kHz, as nsight-python reads it
    return ncu_cli.to_base_units(have.value[ran], have.unit[ran]) / 1e6, rated


with nt.section("2b. The full report from the ncu command line (--set full)") as s:
    ENV.require("ncu-cli")
    FULL_REPORT = EVIDENCE / "full-matmul.ncu-rep"
    # every section of the full set, and warp execution efficiency; only kernels inside nsight.annotate;
    # -o: ncu adds .ncu-rep to the name; then matmul(N_FULL), one run
    cmd = [ENV.ncu_path, "--set", "full", "--metrics", QUESTIONS["warp execution efficiency"][0]]
    cmd += ["--nvtx", "--nvtx-include", "regex:nsight-python@.+", "-f"]
    cmd += ["-o", str(FULL_REPORT.with_suffix("")), sys.executable, "evidence_kernels.py"]
    cmd += ["matmul", json.dumps([[N_FULL]]), "1"]
    print(f"  $ {ncu_cli.command_text(cmd)}\n  {nt.rules('ncu-cli')}")
    start = time.perf_counter()
    ncu_cli.run(cmd, timeout=600)
    took = time.perf_counter() - start
    nt.claim(
        FULL_REPORT.exists(), "ncu wrote the report, adding .ncu-rep to the name given with -o"
    )
    report = ncu_report.load_report(str(FULL_REPORT))
    evidence.check_loaded(report.num_ranges(), FULL_REPORT, writer=ENV.ncu_version)
    actions = actions_of(report)
    names = actions[0].metric_names()
    print(f"\n  ncu took {took:.0f} s; {len(actions)} launch(es) in the annotation; the first,")
    print(f"  {nt.short_kernel_name(actions[0].name())}, has {len(names):,} metrics\n")
    found = metric_table(actions[0])
    answers = key_metrics(found)
    print(answers.to_string(index=False))
    clocks = clocks_mhz(found)
    at = ""
    if clocks:  # the command line's default --clock-control base: clocks locked, not one frequency
        ran, top = clocks
        at = f" at {ran:,.0f} of {top:,.0f} MHz (locked to base)"
        print(
            f"\n  duration {answers.value[0]}, at an SM clock of {ran:,.0f} MHz measured during the kernel"
        )
        print(
            f"  (gpc__cycles_elapsed.avg.per_second): {100 * ran / top:.0f} % of the rated maximum, {top:,.0f} MHz"
        )
        print(
            "  (device__attribute_clock_rate). The clock basis: ncu locked the clocks to base for the run"
        )
        print(
            "  (--clock-control base, its default), which does not pin one frequency (notebook 04); with"
        )
        print("  clocks free, the GPU may run this kernel at a higher clock and in less time.")
        if ENV.clock is not None and ENV.clock.state == "held":
            print(
                f"  Setup also found the SM clock held at {ENV.clock.held_mhz:,} MHz: free is not free here."
            )
        below = "under --clock-control base the kernel ran below the GPU's rated maximum clock"
        nt.claim(ran < top, below, f"{ran:,.0f} of {top:,.0f} MHz")
    tensor = found[found.metric.str.contains("pipe_tensor")]
    print(f"\n  tensor-pipe % metrics in this report: {len(tensor)}")
    if hmma_counts_wgmma(found):
        print(
            "  the HMMA pipe was as busy as any tensor pipe while wgmma ran: it counts wgmma work here"
        )
    many = "the report holds the launch, its duration and hundreds of other metrics"
    nt.claim(
        actions[0].metric_by_name(TIME) is not None and len(names) > 100, many, f"{len(names):,}"
    )
    if NSIGHT_REPORT_METRICS is not None:
        fewer = "nsight-python's report holds far fewer metrics than a full one"
        nt.claim(
            NSIGHT_REPORT_METRICS < len(names), fewer, f"{NSIGHT_REPORT_METRICS} vs {len(names):,}"
        )
    # cycles the pipe was busy, not instructions issued
    busy = tensor[tensor.metric.str.contains("cycles_active")]
    if len(busy):
        top_pipe = f"busiest: {busy.metric.iloc[busy.value.argmax()]} {busy.value.max():.1f} %"
        on_tc = "the fp16 matmul ran on the tensor cores (a tensor pipe busy > 20 %)"
        nt.claim(busy.value.max() > 20, on_tc, top_pipe)
    # the GUI's Details page, Speed Of Light section, as text (Colab has no GUI)
    sol = [
        ENV.ncu_path,
        "--import",
        str(FULL_REPORT),
        "--page",
        "details",
        "--section",
        "SpeedOfLight",
    ]
    page = ncu_cli.run(sol)
    print(f"\n  $ {ncu_cli.command_text(sol)}\n{page}")
    printed = "ncu --import prints the report's Speed Of Light section"
    nt.claim(
        "Speed Of Light" in page and "Duration" in page, printed, f"{len(page.splitlines())} lines"
    )
    v = answers.set_index("question").value
    s.result = (
        f"{v['duration']}{at}; occupancy {v['achieved occupancy']}; tensor pipes "
        f"{v['tensor pipes busy']}; {v['warp execution efficiency']} active"
    )


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
    read_by = ".".join(map(str, reader)) if reader else "not installed"
    written_by = ".".join(map(str, writer)) if writer else "-"
    print(f"  reader: ncu-report {read_by}; writer: {ENV.ncu_path or 'no ncu here'} ({written_by})")
    print(f"  {status}: {message}")
    bogus = Path("not-a-report.ncu-rep")  # in the work folder, not in the evidence folder
    bogus.write_bytes(b"this is not a Nsight Compute report\n" * 64)
    try:
        ranges, raised = ncu_report.load_report(str(bogus)).num_ranges(), None
    except Exception as exc:  # a future ncu_report may raise instead: that is fine too
        ranges, raised = None, f"{type(exc).__name__}: {exc}"
    got = f"raised {raised}" if raised else f"no error, {ranges} ranges"
    print(f"  load_report on a file that is not a report: {got}")
    nt.claim(raised is not None or ranges == 0, "nothing is read from a file that is not a report")
    if raised is None:
        try:
            evidence.check_loaded(ranges, bogus, writer, reader)
        except evidence.UnreadableReport as exc:
            print(f"  check_loaded turns that into: {exc}")
    outcome = "raised" if raised else f"{ranges} ranges, turned into a clear error"
    s.result = f"ncu-report reader vs ncu writer: {status}; a file that is not a report: {outcome}"


# %% [markdown]
# ## 3. One evidence folder per investigation, zipped
#
# A number without its conditions cannot be checked later. The evidence folder gets:
#
# - `environment.json`: the banner as data -- GPU, driver, device facts, datasheet peaks,
#   the SM clock's state before anything ran (free, or held and at what: a cap shows in the
#   zip), backend and why, ncu path and version, package versions, Python, host, time;
# - the CSVs and, with the Nsight Compute backend, nsight-python's report (section 1);
# - the full report (section 2b) and `evidence_kernels.py`, the module it profiled;
# - the plots, saved as PNG;
# - `README.txt`: which tool measured what, under which rules, and how to open the report;
# - where a timeline of this notebook's kernels was captured (a `.nsys-rep` from Nsight
#   Systems, or `torch.profiler`'s trace where `nsys` is missing), that capture too.
#
# Then `shutil.make_archive` packs it, paths inside starting with the folder's name. On Colab the zip is
# downloaded to your computer (`google.colab.files.download`); elsewhere its path is printed.
# A section that was SKIPPED simply contributes nothing -- the listing shows what is there.
#
# **Opening the report in the Nsight Compute GUI.** Install Nsight Compute on your own
# computer (free, from https://developer.nvidia.com/nsight-compute; the GUI is `ncu-ui`; it
# needs no GPU to *read* a report, and it should be at least as new as the ncu that wrote
# it), unzip, then `ncu-ui full-matmul.ncu-rep` or *File → Open*. The **Details** page has
# the sections the full set collected (GPU Speed Of Light, Compute and Memory Workload
# Analysis, Occupancy, ...), with the rules' advice; **Source** shows SASS with
# per-instruction metrics; **Raw** lists every metric. Without a GUI (Colab has none):
# `ncu --import <report> --page details` prints the Details page (section 2b printed its
# Speed Of Light section so, with `--section SpeedOfLight`), and `--page raw --csv` prints
# every metric as CSV.

# %%
with nt.section("3. The evidence folder, zipped") as s:
    record = evidence.environment_record(ENV)  # its "clock": setup's reading, free or held
    as_json = json.dumps(record, indent=2, default=str) + "\n"
    (EVIDENCE / "environment.json").write_text(as_json, encoding="utf-8")
    shutil.copy("evidence_kernels.py", EVIDENCE)  # the experiment itself
    lines = [
        f"Evidence folder written by notebook 10_keeping_the_evidence on {record['recorded_at_utc']}",
        f"GPU: {ENV.gpu_name or 'none'}; backend: {ENV.backend or 'none'}; ncu: {ENV.ncu_path or 'none'}",
        f"SM clock before anything ran: {record['clock']['line'] if record['clock'] else 'not read'}",
        "",
    ]
    if RAW is not None:
        lines += ["profiled_data-*.csv, processed_data-*.csv, plots/per_run_time.png (section 1):"]
        lines += [f"  {nt.rules(ENV.backend)}", ""]
    if FULL_REPORT is not None and FULL_REPORT.exists():
        lines += [
            f"{FULL_REPORT.name} (section 2b), profiling matmul({N_FULL}) of evidence_kernels.py:"
        ]
        lines += [f"  {nt.rules('ncu-cli')}", ""]
    # notebook 07's timeline capture (a .nsys-rep for nsys-ui, or torch.profiler's trace), where 07
    # ran on this machine before: its work folder is this one's neighbour
    captures = timeline.captures(ENV.workdir.parent / "07_kernel_fusion")
    for path in captures:
        shutil.copy(path, EVIDENCE)
    lines += [
        f"{p.name} (notebook 07, section 5): its timeline; open a .nsys-rep in nsys-ui"
        for p in captures
    ]
    lines += (
        [] if captures else ["no timeline capture: notebook 07 has not run on this machine", ""]
    )
    lines += [
        "Open a .ncu-rep with the Nsight Compute GUI (ncu-ui <file>, or File > Open),",
        "or print it: ncu --import <file> --page details   (or --page raw --csv).",
        "environment.json: GPU, driver, device facts, the SM clock's state, backend, tool and package",
        "versions.",
    ]
    (EVIDENCE / "README.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = evidence.listing(EVIDENCE)
    print(table.to_string(index=False))
    where = dict(root_dir=EVIDENCE.parent, base_dir=EVIDENCE.name)
    archive = Path(shutil.make_archive(str(EVIDENCE), "zip", **where))
    kib = archive.stat().st_size / 1024
    print(f"\n  {archive}: {len(zipfile.ZipFile(archive).namelist())} entries, {kib:,.0f} KiB")
    state = record["clock"]["state"] if record["clock"] else "not read"
    print(f"  the clock it records: {state} (environment.json, README.txt)")
    if ENV.on_colab:
        from google.colab import files

        files.download(str(archive))
        print("  Colab: the download of the zip has started in your browser")
    s.result = f"{len(table)} files in {archive.name} ({kib:,.0f} KiB); SM clock {state}"


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
# | Keep the evidence: CSVs, the full report, the profiled module, the environment, in one zip | 10 |
#
# And say, next to every table, whose rules produced it: `nt.rules(...)` printed one line
# for that in every measured section of this series.
#
# Where to go next: nsight-python's [documentation](https://docs.nvidia.com/nsight-python/)
# and [examples](https://github.com/NVIDIA/nsight-python/tree/main/examples) (Triton kernels,
# `@nsight.analyze.plot`), and the
# [Nsight Compute profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# for what each section and metric means.
#
# ## Takeaways
#
# - `output_prefix` + `output_csv=True` keep every run, not just the summary; put the prefix
#   in a folder of its own per investigation.
# - A CSV keeps values, not types: read it back knowing which columns change dtype.
# - nsight-python's own report holds only the metrics you asked for. For the full picture,
#   run `ncu --set full -o` on the same module -- any ncu can; its durations are taken with
#   clocks locked to base (not one pinned frequency: read the measured SM clock beside them)
#   unless you pass `--clock-control none`. Check that a metric's name exists in the
#   report before you read it, and judge tensor-core use by a pipe's busy cycles, not by an
#   instruction count; `ncu --import ... --page details` prints what the GUI would show.
# - `ncu_report.load_report` does not fail on an unreadable file: check that ranges came out,
#   and that the reader is not older than the ncu that wrote the report.
# - One folder, one zip: environment, data, report, module, plots.
#
# ## Try it
#
# - Add `info_collectors` from notebook 08 to `stream` and look for `collected_info.pkl` in
#   the folder -- and at what happens to it when a second function writes to the same prefix
#   (nsight-python 1.1.0 writes it; 1.1.1 and later keep the values in the table only).
# - Add your own kernel to `evidence_kernels.py` (inside an `nsight.annotate`), point the
#   command of section 2b at it, and open the zip's report in `ncu-ui`.
#
# Docs: [nsight-python](https://docs.nvidia.com/nsight-python/) (`output_prefix`, `output_csv`);
# example [11_output_csv.py](https://github.com/NVIDIA/nsight-python/blob/main/examples/11_output_csv.py);
# [core.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/collection/core.py) (what is
# written), [extraction.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/extraction.py)
# (how nsight-python reads its report with `ncu_report`).

# %%
nt.summary()
