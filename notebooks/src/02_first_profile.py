# %% [markdown]
# # 02 · Your first profile: the GPU's parts, and what one row of `ProfileResults` says
#
# **What you will learn**
# - the parts of *this* GPU that a kernel can keep busy -- SMs, warps, CUDA cores, Tensor
#   Cores, occupancy, the L2 cache, DRAM bandwidth, the clock -- with your GPU's own numbers,
#   and the Nsight Compute counter that says when each one is saturated;
# - how `nsight.annotate` and `@nsight.analyze.kernel` turn "time this matmul" into a pandas
#   DataFrame -- the decorator as nsight-python's own first example writes it --, what
#   nsight-python prints while it works, and why the inputs are created *outside* the
#   annotation;
# - what every column of `to_dataframe()` means, read on one real row -- and that the same
#   metric name means a different measurement under each backend;
# - how to turn a kernel time into TFLOP/s by hand and set it against the datasheet peak,
#   **at the clock that peak assumes and at the clock the kernel ran near**;
# - things the DataFrame does *not* say that people assume it does -- each one checked on your
#   own data: one run has no stability verdict, the unit is ns, `ComputeClock` is a rating
#   rather than a measurement, and a library call can launch more than one kernel (split-K,
#   when the kernel names say so).
#
# Works with either nsight-python backend: Nsight Compute or CUPTI (an older ncu that cannot
# be upgraded). Every table says which one measured it. On Colab each notebook runs in a
# fresh runtime of its own: the setup cell below installs what this notebook needs (nothing
# has to run before it), and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import math
import re
import time

import nsight
import pandas as pd
import pynvml
import torch
from cuda.core import Device
from IPython.display import display

from nspy_tutorial import clock

pd.set_option("display.width", 200)
pd.set_option("display.max_colwidth", 80)
SILENT = nsight.VerbosityLevel.SILENT
N = 2048  # 2048^2 fp32 = 16 MiB per matrix: fits every GPU the tutorial targets
RAN_MHZ = None  # the SM clock (MHz) the matmul ran near, read in section 3


def add(a: float, b: float) -> float:
    """combine_kernel_metrics: nsight calls it with the metric values of two kernels of one run."""
    return a + b


def kernel_names(kernel_column: str) -> list[str]:
    """The Kernel column joins the kernels of a combined row with '|': one short name each
    (nt.short_kernel_name: the function's name and what it computes, without its arguments)."""
    return [nt.short_kernel_name(name) for name in kernel_column.split("|")]


def rows_of(results) -> pd.DataFrame:
    """results.to_dataframe(), refusing an empty table: when no kernel was profiled nsight-python
    1.1.0 returns one, 1.1.1 raises a RuntimeError itself; either way the section stops with that."""
    table = results.to_dataframe()
    if table.empty:
        raise RuntimeError("No kernels were profiled: nsight-python returned an empty table")
    return table


# %% [markdown]
# ## 1. The GPU's parts, on this GPU
#
# Profiling a kernel is finding out **which part of the GPU it keeps busy**, and how close to
# that part's limit. The parts, with the numbers your GPU reports (setup read them: `ENV.facts`
# from torch and NVML, and the device's own attributes through `cuda.core`):
#
# - **[SM](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#sm)** (streaming multiprocessor): the GPU's processor. A kernel's thread blocks are spread
#   over the SMs; a kernel with fewer blocks than SMs leaves some idle.
# - **[Warp](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#warp)**: 32 threads that an SM schedules together, one instruction for all of them at a
#   time. When a warp waits (for memory, say), the SM switches to another one that is ready.
# - **[CUDA cores](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#cuda-core)**: the SM's lanes for ordinary fp32 arithmetic; one fused multiply-add per lane
#   per clock is 2 FLOP. The datasheet's fp32 peak is SMs × lanes × 2 × the clock it assumes,
#   which is how the cell finds the lanes per SM (a power of two on every GPU since Volta: the
#   check fails if the datasheet row does not fit this device).
# - **[Tensor Cores](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#tensor-core)**: units that do a small matrix multiply per instruction, many times the
#   FLOP of the lanes, in fp16/bf16 (and, by generation, tf32, fp8). Their generation follows
#   from the GPU's compute capability.
# - **[Occupancy](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#occupancy)**: how many warps an SM holds at once, as a share of the most it can hold. More
#   warps give the scheduler more to switch to while others wait; registers and shared memory
#   per block limit how many fit.
# - **[L2 cache](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#l2-cache)**: memory on the chip that every SM shares; data that fits there is not re-read
#   from DRAM.
# - **[DRAM bandwidth](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#memory-bandwidth)**: bytes per second between the GPU's memory and the chip: two transfers
#   per memory clock, times the bus width.
# - **The SM clock**: every compute peak is stated at one clock; a kernel that runs slower or
#   faster than that clock moves its ceiling with it (section 3).
#
# Nsight Compute has a counter for each. A throughput counter ends in
# `.pct_of_peak_sustained_elapsed` or `.pct_of_peak_sustained_active` (the
# [glossary](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#pct_of_peak_sustained_elapsed-vs-_active)):
# *elapsed* divides what the unit did by what it could have done over the kernel's whole
# duration; *active* only over the cycles in which the unit had work. A kernel that leaves
# SMs idle scores lower on elapsed than on active; achieved occupancy is counted per active
# cycle. The names below exist on an H200 with ncu 2025.3.1; notebooks 06 and 10 read them.
# Seen from here, the rest of the series asks one question of every kernel: which of these
# parts is saturated?


# %%
def tensor_cores(cc: tuple[int, int]) -> str:
    """The Tensor Core generation a compute capability brings (NVIDIA's architecture whitepapers)."""
    if cc < (7, 0):
        return "none (before Volta)"
    if cc < (7, 5):
        return "1st generation (Volta): fp16"
    if cc < (8, 0):
        return "2nd generation (Turing): fp16, int8"
    if cc == (8, 9) or cc[0] == 9:
        return f"4th generation ({'Ada' if cc[0] == 8 else 'Hopper'}): fp16, bf16, tf32, fp8"
    if cc[0] == 8:
        return "3rd generation (Ampere): fp16, bf16, tf32"
    return "5th generation (Blackwell): fp16, bf16, tf32, fp8, fp4"


def fp32_lanes(fp32_tflops: float | None, sms: int, clock_mhz: float | None) -> float | None:
    """fp32 lanes ('CUDA cores') per SM that the datasheet's fp32 peak implies: peak / (2 x SMs x clock)."""
    if not fp32_tflops or not clock_mhz:
        return None
    return fp32_tflops * 1e12 / (2 * sms * clock_mhz * 1e6)


COUNTERS = {  # the Nsight Compute counter that says each part is busy (ncu 2025.3.1 on an H200)
    "SM": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "warp": "smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio",
    "CUDA cores": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "Tensor Cores": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "L2 cache": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "SM clock": "gpc__cycles_elapsed.avg.per_second",
}

with nt.section("1. The GPU's parts, on this GPU") as s:
    ENV.require("gpu")
    f, sheet = ENV.facts, ENV.datasheet
    props = Device(torch.cuda.current_device()).properties
    max_warps = props.max_threads_per_multiprocessor // props.warp_size
    lanes = fp32_lanes(
        sheet and sheet.fp32_tflops.value, f.sm_count, sheet and sheet.clock_mhz.value
    )
    dram = (
        f.memory_bus_width_bits
        and f.max_mem_clock_mhz
        and 2 * f.max_mem_clock_mhz * f.memory_bus_width_bits / 8e3
    )
    here = {
        "SM": f"{f.sm_count} SMs",
        "warp": f"{props.warp_size} threads; why a warp waits, by reason:",
        "CUDA cores": f"{lanes:.0f} fp32 lanes per SM: datasheet fp32 / (2 x SMs x its clock)"
        if lanes
        else "lanes unknown: this GPU's fp32 peak or its clock is not in the datasheet table",
        "Tensor Cores": tensor_cores(f.compute_capability),
        "occupancy": f"at most {max_warps} warps per SM",
        "L2 cache": f"{f.l2_bytes / 2**20:.0f} MB",
        "DRAM": f"{dram:,.0f} GB/s = 2 x {f.max_mem_clock_mhz:,} MHz x {f.memory_bus_width_bits:,} bit / 8"
        if dram
        else "bandwidth unknown: NVML did not report the memory clock and bus width",
        "SM clock": f"up to {f.max_sm_clock_mhz:,} MHz (NVML)",
    }
    print(f"  {ENV.gpu_name}, compute capability {'.'.join(map(str, f.compute_capability))}")
    for part, counter in COUNTERS.items():
        print(f"  {part:13}{here[part]}\n  {'':13}busy: {counter}")
    if sheet is not None:
        print(
            f"  datasheet ({sheet.gpu}): {sheet.mem_bandwidth_gbs} GB/s; fp32 {sheet.fp32_tflops} TFLOP/s at "
            f"{sheet.clock_mhz} MHz"
        )
    if lanes:
        nt.claim(
            abs(lanes / 2 ** round(math.log2(lanes)) - 1) < 0.02,
            "the datasheet's fp32 peak is SMs x fp32 lanes x 2 FLOP x its clock, with lanes per SM a "
            "power of two (64 or 128 since Volta)",
            f"{lanes:.2f} lanes per SM",
        )
    s.result = (
        f"{f.sm_count} SMs"
        + (f" x {lanes:.0f} fp32 lanes" if lanes else "")
        + f", {max_warps} warps per SM, {tensor_cores(f.compute_capability).split(':')[0]} Tensor Cores, "
        + f"L2 {f.l2_bytes / 2**20:.0f} MB"
        + (f", DRAM {dram:,.0f} GB/s" if dram else "")
    )

# %% [markdown]
# ## 2. Profile one fp32 matmul
#
# The benchmark function is ordinary PyTorch. Two things make it a profile, exactly as in
# nsight-python's own first example:
#
# - `@nsight.analyze.kernel` above the function: calling `matmul(N)` now runs it under the
#   profiler and returns a `ProfileResults` (not what the function returns);
#   `.to_dataframe()` gives one row per annotation × configuration × metric.
# - `with nsight.annotate("matmul")` marks the region to measure. Only kernels
#   **launched inside it** are attributed to the row. `torch.randn` launches its own
#   random-number kernels; creating the inputs above the annotation keeps them out.
#
# With no arguments the decorator uses nsight-python's defaults: one run, the **default
# verbosity** (so you see what it prints while it works), pauses for GPU cooling when
# needed (`thermal_mode="auto"`, notebook 08), and one kernel expected per annotation.
# Should cuBLAS split this product into several kernels on your GPU, this plain form
# refuses it: section 5 shows why, and what `combine_kernel_metrics` does about it.
#
# The call runs inside `clock.Sampler()`, which reads the SM clock through NVML a hundred
# times a second in a thread while the block runs: the CUPTI backend measures durations, not
# the clock, so this is the clock the kernel ran *near* (section 3 uses it).
#
# The decorator takes settings too, `@nsight.analyze.kernel(runs=10, ...)`, and it is an
# ordinary function: `nsight.analyze.kernel(...)(f)` wraps `f` with other settings. The
# decorated `matmul` keeps the undecorated function as `matmul.__wrapped__` (nsight-python
# uses `functools.wraps`), so later sections profile the *same* function again, silently
# (`verbosity=nsight.VerbosityLevel.SILENT`, as every later profile in this series), without
# cooling pauses (`thermal_mode="off"`) and with `combine_kernel_metrics=add`.


# %%
@nsight.analyze.kernel
def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda")  # not measured: outside the annotation
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("matmul"):
        _ = a @ b


profile_matmul_quietly = nsight.analyze.kernel(
    thermal_mode="off", combine_kernel_metrics=add, verbosity=SILENT
)(matmul.__wrapped__)

with nt.section("2. Profile one fp32 matmul") as s:
    ENV.require("profiler")
    with clock.Sampler() as during:
        result = matmul(N)  # nsight-python's own output appears below this line
    df = rows_of(result)
    print()
    print(nt.rules(ENV.backend))
    display(df.T)
    row = df.iloc[0]
    t_ns = float(row["AvgValue"])
    names = kernel_names(row["Kernel"])
    print("kernel(s) in the annotation:", *names, sep="\n  ")
    nt.claim(
        not any(word in k.lower() for k in names for word in ("rand", "normal", "distribution")),
        "no random-number kernel was measured: the inputs were made outside the annotation",
        f"{len(names)} kernel(s)",
    )
    s.result = f"fp32 {N}^3 matmul: {t_ns / 1e3:,.1f} us on {row['GPU']} ({ENV.backend} backend)"

# %% [markdown]
# ## 3. Read the row: every column, TFLOP/s by hand, and the clock
#
# | column | meaning |
# |---|---|
# | `Annotation` | the `nsight.annotate` name |
# | `n` | one column per parameter of the benchmark function: the configuration |
# | `Metric` | the metric's name: `gpu__time_duration.sum` (kernel duration) unless you ask for more |
# | `AvgValue`, `StdDev`, `MinValue`, `MaxValue` | statistics over the runs |
# | `NumRuns` | how many runs went into them (`runs=`, default 1) |
# | `CI95_Lower`, `CI95_Upper` | a 95 % confidence interval for the mean (notebook 03) |
# | `RelativeStdDevPct`, `StableMeasurement` | spread as % of the mean, and "is it < 2 %?" |
# | `Kernel` | the kernel name(s); several joined by `|` when combined |
# | `GPU`, `Host` | device name and machine |
# | `ComputeClock`, `MemoryClock` | the device's *rated* clock attributes, in kHz (section 4) |
# | `Unit` | the unit of the values |
# | `Normalized`, `Geomean` | set by `normalize_against` (notebook 05) and across configurations |
#
# **The same metric name, two measurements.** `gpu__time_duration.sum` is the kernel's
# duration on the GPU under both backends, but it is taken under different rules (the
# line printed above the table says which applied here): the **Nsight Compute backend**
# *replays* the kernel and, by default, flushes the caches before every replay and leaves the
# clocks free (`cache_control="all"`, `clock_control="none"`); the **CUPTI backend** times the
# kernel once, *as it ran* in your program: no replay, no flush, no clock control (both options
# are ignored). For a kernel whose data fits in the cache they can differ a lot (notebook 04).
# Compare numbers only under the same rules. The check below compares the column list with the
# DataFrame you got, so if a future nsight-python adds or drops a column, this notebook says so.
#
# **% of peak, and the clock.** A matmul of two n × n matrices does 2n³ FLOP (a multiply and an
# add per term). Divided by the time it is a rate, and the datasheet's fp32 peak is the rate
# the GPU could reach -- *at the SM clock the datasheet assumes*. A GPU whose clock runs lower
# (held by an administrator, by a profiler that was killed, capped for power or heat) has a
# lower ceiling: peak × clock it ran / clock the datasheet assumes. So the cell states both
# clocks: the datasheet's, and the one the kernel ran near -- under the Nsight Compute backend
# measured (`gpc__cycles_elapsed.avg.per_second`, a second profile of the same matmul), under
# CUPTI NVML's reading during section 2's profile, said as such. When setup found the clock
# held, the cell says so: every figure then sits under the datasheet by about that ratio.

# %%
DOCUMENTED = [
    "Annotation",
    "n",
    "Metric",
    "AvgValue",
    "StdDev",
    "MinValue",
    "MaxValue",
    "NumRuns",
    "CI95_Lower",
    "CI95_Upper",
    "RelativeStdDevPct",
    "StableMeasurement",
    "Kernel",
    "GPU",
    "Host",
    "ComputeClock",
    "MemoryClock",
    "Unit",
    "Normalized",
    "Geomean",
]


def clock_basis(tflops: float, peak: float, sheet_mhz, ran_mhz, how: str, state) -> list[str]:
    """The lines that state a % of peak with its clocks: the datasheet's peak and the clock it assumes,
    the clock the kernel ran near (``how``: who read it) and the peak at that clock, and a clock that
    setup found held (``state``: ENV.clock)."""
    where = f"at {sheet_mhz:,.0f} MHz" if sheet_mhz else "(the datasheet states no clock)"
    lines = [
        f"{tflops:.1f} TFLOP/s = {100 * tflops / peak:.0f} % of the datasheet's {peak:g} TFLOP/s {where}"
    ]
    if ran_mhz and sheet_mhz:
        at = peak * ran_mhz / sheet_mhz
        lines.append(f"the SM clock it ran near: {ran_mhz:,.0f} MHz, {how}")
        lines.append(
            f"the peak at {ran_mhz:,.0f} MHz: {at:.1f} TFLOP/s -> {100 * tflops / at:.0f} % of it"
        )
    else:
        lines.append(f"the clock it ran at is not known here ({how}): % of the datasheet only")
    if state is not None and state.state == "held":
        lines.append(
            f"setup found the SM clock HELD at {state.held_mhz:,} MHz, {state.ratio:.0%} of its "
            f"{state.max_mhz:,}: every figure sits about that far under the datasheet"
        )
    return lines


with nt.section("3. Read the row: columns, TFLOP/s by hand, and the clock") as s:
    ENV.require("profiler")
    extra, missing = set(df.columns) - set(DOCUMENTED), set(DOCUMENTED) - set(df.columns)
    nt.claim(
        not extra and not missing,
        "the table above lists exactly the columns to_dataframe() returns",
        f"undocumented: {sorted(extra)}, missing: {sorted(missing)}",
    )
    flops = 2 * N**3
    tflops = flops / (t_ns * 1e-9) / 1e12
    print(f"  {flops:.3e} flop in {t_ns:,.0f} ns = {tflops:.1f} TFLOP/s")
    if ENV.backend == "ncu":
        clocked = nsight.analyze.kernel(
            metrics=["gpc__cycles_elapsed.avg.per_second"], thermal_mode="off", verbosity=SILENT
        )(matmul.__wrapped__)
        RAN_MHZ = float(rows_of(clocked(N)).iloc[0]["AvgValue"]) / 1e6
        how = "measured by Nsight Compute (gpc__cycles_elapsed.avg.per_second)"
    else:
        RAN_MHZ, low, high = during.mhz or (None, None, None)
        how = f"NVML's reading during the profile ({low}-{high} MHz; CUPTI does not measure it)"
        how = (
            how
            if RAN_MHZ
            else "NVML read nothing during the profile, and CUPTI does not measure it"
        )
    peak = ENV.datasheet.fp32_tflops if ENV.datasheet else None
    if peak is None or peak.value is None:
        print("  this GPU's fp32 peak is not in the datasheet table: no % of peak")
        s.result = f"{tflops:.1f} TFLOP/s (fp32 peak unknown)"
    else:
        sheet_mhz = ENV.datasheet.peak_clock_mhz("fp32")
        lines = clock_basis(tflops, peak.value, sheet_mhz, RAN_MHZ, how, ENV.clock)
        print(*(f"  {line}" for line in lines), sep="\n")
        nt.claim(
            tflops <= peak.value,
            "the measured rate does not exceed the datasheet peak",
            f"{tflops:.1f} vs {peak}",
        )
        s.result = f"{tflops:.1f} TFLOP/s = {100 * tflops / peak.value:.0f}% of the fp32 datasheet"
        if RAN_MHZ and sheet_mhz:
            at_clock = 100 * tflops / (peak.value * RAN_MHZ / sheet_mhz)
            s.result += (
                f" ({sheet_mhz:,.0f} MHz), {at_clock:.0f}% at the {RAN_MHZ:,.0f} MHz it ran near"
            )
        if ENV.clock is not None and ENV.clock.state == "held":
            s.result += f"; SM clock held at {ENV.clock.held_mhz:,} MHz"

# %% [markdown]
# Percent of peak is a first hint, not a verdict. Besides the clock, the peak assumes perfect
# scheduling; a 2048-cube matmul is small for a big GPU, and on GPUs with TF32 PyTorch keeps
# plain fp32 unless you opt in (notebook 05). Which part is saturated -- the lanes, the memory,
# the scheduler -- takes the counters of section 1 (notebook 06).
#
# ## 4. What the row does *not* tell you
#
# Three claims that are easy to get wrong, checked on your data:
#
# - **One run has no stability verdict.** `StdDev` needs two samples, so with
#   `runs=1` it is NaN and `StableMeasurement` is `<NA>` -- not `False`, not `True`.
# - **The unit is nanoseconds**: `Unit` says `ns` (Nsight Compute spells it `nsecond`).
# - **`ComputeClock` is not a measurement.** It is the device attribute "clock rate" in
#   kHz -- the same number in every row, whatever clock the kernel really ran at. We
#   compare it with the attribute read from the driver, then ask NVML what the SM clock
#   *is*: once after two idle seconds and once after a second of fp16 tensor-core matmuls,
#   while more are queued (a GPU under heavy load may settle below its rated clock).
#
# The extra ComputeClock rows come from one call per size, a loop written out below:
# section 5 shows why sizes are not mixed in one call.

# %%
with nt.section("4. One run, the unit, and the rated clock") as s:
    ENV.require("profiler")
    nt.claim(
        row["NumRuns"] == 1 and pd.isna(row["StdDev"]),
        "with one run StdDev is NaN",
        f"StdDev={row['StdDev']}",
    )
    nt.claim(
        row["StableMeasurement"] is pd.NA,
        "with one run StableMeasurement is <NA>",
        repr(row["StableMeasurement"]),
    )
    nt.claim(
        row["Unit"] in ("ns", "nsecond"),
        "gpu__time_duration.sum is reported in nanoseconds",
        repr(row["Unit"]),
    )
    rows = [
        rows_of(profile_matmul_quietly(configs=[n])) for n in (256, 1024, N)
    ]  # one call per size
    clocks = pd.concat(rows).ComputeClock
    rated_khz = Device(
        torch.cuda.current_device()
    ).properties.clock_rate  # the GPU the matmuls ran on
    nt.claim(
        clocks.nunique() == 1 and int(clocks.iloc[0]) == int(rated_khz),
        "ComputeClock is the device's clock-rate attribute, identical in every row",
        f"{sorted(set(clocks))} kHz vs attribute {rated_khz} kHz",
    )
    pynvml.nvmlInit()
    # NVML's handle of the GPU CUDA runs on (NVML's own numbering ignores CUDA_VISIBLE_DEVICES)
    gpu = nt.nvml_handle()
    time.sleep(
        4.0
    )  # nothing queued: let the GPU idle (its boost clock lingers about 2 s after work)
    idle_mhz = pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # a second of tensor-core work: the GPU draws power and heats
        for _ in range(4):
            _ = a @ a
        torch.cuda.synchronize()
    for _ in range(8):
        _ = a @ a  # queued: the GPU works through them while we read the clock
    busy_mhz = pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM)
    torch.cuda.synchronize()
    rated_mhz = int(rated_khz) // 1000
    print(
        f"  ComputeClock (every row): {rated_mhz} MHz; NVML: {idle_mhz} MHz after 4 s idle, "
        f"{busy_mhz} MHz after 1 s of fp16 matmuls"
    )
    differ = [
        f"{m} MHz {when}" for m, when in ((idle_mhz, "idle"), (busy_mhz, "busy")) if m != rated_mhz
    ]
    print(
        "  -> "
        + (
            f"the GPU ran at {' and '.join(differ)}: not what ComputeClock says"
            if differ
            else "every read matched ComputeClock here; it is still the rating, not a reading"
        )
    )
    s.result = f"ComputeClock {rated_mhz} MHz in every row; NVML read {idle_mhz} MHz idle, {busy_mhz} MHz busy"

# %% [markdown]
# ## 5. When one call launches several kernels: `combine_kernel_metrics`
#
# nsight-python expects **one kernel per annotation**. Eager PyTorch evaluates
# `a + b * c` as two kernels (multiply, then add); cuBLAS sometimes launches more than
# one kernel for one matmul, depending on the size and the GPU. Without
# `combine_kernel_metrics` nsight-python refuses such a region with a `RuntimeError` that
# says how many kernels it found (1.1.0: "More than one (total=2) kernel is launched within
# the … annotation"; 1.1.1 words it differently and adds the run count), so the check reads
# what you read: the error's type, and a message about the kernel count. With it, the
# metrics of the kernels in one run are combined -- here by our `add`, so the times are
# summed -- and the `Kernel` column lists them joined by `|`.
#
# The second half counts how many kernels cuBLAS launched for an fp32 matmul at several
# sizes *on this GPU*, one profiled call per size -- the reason notebook 05 profiles each
# size separately.
#
# **[Split-K](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#split-k).** Each output tile of `a @ b` is a sum over the shared dimension k. When the
# output has too few tiles to keep every SM busy -- small matrices on a big GPU -- cuBLAS
# can split k into slices: several blocks compute partial sums of the same tile in
# parallel, and a second kernel adds the partial results. The kernel names show it: look
# for `splitK` in a name (the GEMM, e.g. `..._splitK_...`, or the reduction,
# `splitKreduce_kernel`). The cell finds such names and prints at which sizes they appear;
# a size with several kernels and no such name divided the work another way: read the
# names it prints.


# %%
def a_plus_b_times_c(n: int) -> None:
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate("a + b * c"):
        _ = a + b * c


unfused = nsight.analyze.kernel(thermal_mode="off", verbosity=SILENT)(a_plus_b_times_c)
unfused_combined = nsight.analyze.kernel(
    thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=add
)(a_plus_b_times_c)

SPLIT_K = re.compile(
    r"split_?k", re.IGNORECASE
)  # in the raw names too: "splitK", "splitKreduce_kernel"


def refusal(call) -> RuntimeError | None:
    """The RuntimeError call() raised (nsight-python's refusal), or None if it returned; any other error
    propagates."""
    try:
        call()
    except RuntimeError as error:
        return error
    return None


def says_kernel_count(error: Exception) -> bool:
    """The refusal of a region with several kernels, as nsight-python 1.1.0 and 1.1.1 word it: a message
    about kernels that says how many ('More than one (total=2) kernel ...'; 1.1.1 adds the run count)."""
    text = str(error).lower()
    return "kernel" in text and re.search(r"more than one|\b2\b", text) is not None


def split_k(kernel_column: str) -> list[str]:
    """The short names of the kernels in a Kernel column whose full name says split-K."""
    return [nt.short_kernel_name(k) for k in kernel_column.split("|") if SPLIT_K.search(k)]


with nt.section("5. Several kernels in one annotation") as s:
    ENV.require("profiler")
    raised = refusal(lambda: unfused(1 << 20))
    said = (
        f"{type(raised).__name__}: {(str(raised).splitlines() or [''])[0]}" if raised else "a table"
    )
    print(f"  without combine_kernel_metrics: {said}")
    nt.claim(
        raised is not None and says_kernel_count(raised),
        "without combine_kernel_metrics, nsight-python refuses a two-kernel region, saying how many kernels",
        said,
    )
    both = rows_of(unfused_combined(1 << 20)).iloc[0]
    print(nt.rules(ENV.backend))
    print(
        f"  with combine_kernel_metrics=add: {both['AvgValue']:,.0f} ns for",
        *kernel_names(both["Kernel"]),
        sep="\n    ",
    )
    nt.claim(
        len(kernel_names(both["Kernel"])) == 2,
        "with it, the Kernel column lists both kernels joined by '|'",
    )
    counts, split = {}, {}
    for n in (128, 256, 512, 1024, 2048, 4096):
        column = rows_of(profile_matmul_quietly(configs=[n])).iloc[0]["Kernel"]
        counts[n], split[n] = len(kernel_names(column)), split_k(column)
        print(f"  fp32 matmul {n:5d}: {counts[n]} kernel(s)", *kernel_names(column), sep="\n    ")
    several = [n for n in counts if counts[n] > 1]
    named = [n for n in several if split[n]]
    other = sorted(set(several) - set(named))
    print(
        f"  several kernels at {several or 'no size'}; split-K in their names at {named or 'no size'}"
        + (f"; other splits (read the names) at {other}" if other else "")
    )
    per_size = ", ".join(f"{n}: {c}" for n, c in counts.items())
    s.result = f"a+b*c refused, then combined; fp32 matmul kernels per size {per_size}" + (
        f"; split-K at {named}" if named else ""
    )

# %% [markdown]
# ## Takeaways
#
# - Know your GPU's parts -- SMs, warps, lanes, Tensor Cores, occupancy, L2, DRAM, the clock --
#   and the counter that says each one is busy: profiling is finding which one is saturated.
# - Annotate exactly the work you mean to measure; build inputs outside the annotation.
# - A row is one annotation × configuration × metric. With one run, read `AvgValue` and
#   nothing else: there is no spread to judge (`StableMeasurement` is `<NA>`).
# - The metric name does not say how it was measured: Nsight Compute replays with cold
#   caches, CUPTI times the real run with warm ones. State which.
# - A % of peak is stated at a clock: give the datasheet's and the one the kernel ran near
#   (measured under Nsight Compute; NVML's reading, said as such, under CUPTI). `ComputeClock`
#   is the card's rating, not that clock.
# - Library calls may launch several kernels, and how many can change with the size
#   (split-K: a GEMM and a reduction, named so): `combine_kernel_metrics` combines them, and
#   notebook 05 shows how to sweep sizes safely.
#
# ## Try it
#
# - Move the two `torch.randn` lines *inside* the annotation and run section 2 again: the
#   plain `@nsight.analyze.kernel` refuses the call (several kernels in one annotation);
#   decorated with `@nsight.analyze.kernel(combine_kernel_metrics=add)`, the random-number
#   kernels are added to the matmul's time and listed in `Kernel` (section 2's check fails
#   and names them).
# - Decorate `matmul` with `@nsight.analyze.kernel(runs=10)`: `StdDev` and
#   `StableMeasurement` get values -- notebook 03 takes them apart.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [Profiling results: every column](https://docs.nvidia.com/nsight-python/overview/profiling_results.html) ·
# [Core concepts: `annotate`, one kernel per annotation](https://docs.nvidia.com/nsight-python/overview/core_concepts.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
