# %% [markdown]
# # 02 · Your first profile: what one row of `ProfileResults` says
#
# **What you will learn**
# - how `nsight.annotate` and `@nsight.analyze.kernel` turn "time this matmul" into a
#   pandas DataFrame -- the decorator as nsight-python's own first example writes it --, what
#   nsight-python prints while it works, and why the inputs are created *outside* the
#   annotation;
# - what every column of `to_dataframe()` means, read on one real row -- and that the
#   same metric name means a different measurement under each backend;
# - how to turn a kernel time into TFLOP/s by hand and set it against this GPU's
#   datasheet peak;
# - four things the DataFrame does *not* say that people assume it does -- each one
#   checked on your own data: one run has no stability verdict, the unit is ns,
#   `ComputeClock` is a rating rather than a measurement, and a library call can launch
#   more than one kernel (split-K, when the kernel names say so).
#
# Works with either nsight-python backend: Nsight Compute or CUPTI (an older ncu that cannot
# be upgraded). Every table says which one measured it. On Colab each notebook runs in a
# fresh runtime of its own: the setup cell below installs what this notebook needs (nothing
# has to run before it), and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import inspect
import re
import time

import nsight
import pandas as pd
import pynvml
import torch
from cuda.core import Device
from IPython.display import display

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_colwidth", 80)
SILENT = nsight.VerbosityLevel.SILENT
N = 2048  # 2048^2 fp32 = 16 MiB per matrix: fits every GPU the tutorial targets


def add(a: float, b: float) -> float:
    """combine_kernel_metrics: nsight calls it with the metric values of two kernels of one run."""
    return a + b


def kernel_names(kernel_column: str) -> list[str]:
    """The Kernel column joins the kernels of a combined row with '|': one short name each
    (nt.short_kernel_name: the function's name and what it computes, without its arguments)."""
    return [nt.short_kernel_name(name) for name in kernel_column.split("|")]


def rows_of(results) -> pd.DataFrame:
    """results.to_dataframe(), refusing an empty table: when no kernel was profiled nsight-python 1.1.0 returns
    one, 1.1.1 raises a RuntimeError itself; either way the section stops with that reason."""
    table = results.to_dataframe()
    if table.empty:
        raise RuntimeError("No kernels were profiled: nsight-python returned an empty table")
    return table


def refusal(call) -> str | None:
    """None if call() returned; else the first line of the error with which nsight-python refused it. Judged by where
    the error was raised (nsight's own code), not by its words, which 1.1.1 changed; any other error propagates."""
    try:
        call()
    except Exception as exc:
        if (
            not inspect.trace()[-1].frame.f_globals.get("__name__", "").startswith("nsight")
        ):  # where it was raised
            raise
        return f"{type(exc).__name__}: " + (str(exc).splitlines() or [""])[0]
    return None


# %% [markdown]
# ## 1. Profile one fp32 matmul
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
# refuses it: section 4 shows why, and what `combine_kernel_metrics` does about it.
#
# The decorator takes settings too, `@nsight.analyze.kernel(runs=10, ...)`, and it is an
# ordinary function: `nsight.analyze.kernel(...)(f)` wraps `f` with other settings. The
# decorated `matmul` keeps the undecorated function as `matmul.__wrapped__` (nsight-python
# uses `functools.wraps`), so sections 3 and 4 profile the *same* function again, silently
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

with nt.section("1. Profile one fp32 matmul") as s:
    ENV.require("profiler")
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
# ## 2. Every column, on the row you just measured
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
# | `ComputeClock`, `MemoryClock` | the device's *rated* clock attributes, in kHz (section 3) |
# | `Unit` | the unit of the values |
# | `Normalized`, `Geomean` | set by `normalize_against` (notebook 05) and across configurations |
#
# **The same metric name, two measurements.** `gpu__time_duration.sum` is the kernel's
# duration on the GPU under both backends, but it is taken under different rules (the
# line printed above the table says which applied here):
#
# - the **Nsight Compute backend** *replays* the kernel for its measurement and, by
#   default, flushes the caches before every replay and leaves the clocks free
#   (`cache_control="all"`, `clock_control="none"`): every replay starts from the same
#   state, caches empty (which does not make the replays agree more closely: notebook 04
#   compares the spreads);
# - the **CUPTI backend** times the kernel once, *as it ran* in your program: no replay,
#   no flush (the caches are as warm as the preceding work left them), no clock control;
#   both options are ignored.
#
# For a 2048-cube matmul the two are close; for a kernel whose data fits in the cache
# they can differ a lot (notebook 04 measures it). Compare numbers only under the same
# rules.
#
# The check below compares the column list with the DataFrame you got, so if a future
# nsight-python adds or drops a column, this notebook says so.

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

with nt.section("2. Read the row: columns and TFLOP/s by hand") as s:
    ENV.require("profiler")
    extra, missing = set(df.columns) - set(DOCUMENTED), set(DOCUMENTED) - set(df.columns)
    nt.claim(
        not extra and not missing,
        "the table above lists exactly the columns to_dataframe() returns",
        f"undocumented: {sorted(extra)}, missing: {sorted(missing)}",
    )
    flops = 2 * N**3  # one multiply and one add per inner-product term
    tflops = flops / (t_ns * 1e-9) / 1e12
    print(f"  {flops:.3e} flop in {t_ns:,.0f} ns = {tflops:.1f} TFLOP/s")
    peak = ENV.datasheet.fp32_tflops if ENV.datasheet else None
    if peak is None or peak.value is None:
        print("  this GPU's fp32 peak is not in the datasheet table: peak unknown, so no % of peak")
        s.result = f"{tflops:.1f} TFLOP/s (fp32 peak unknown)"
    else:
        print(
            f"  datasheet fp32 peak for {ENV.datasheet.gpu}: {peak} TFLOP/s -> {100 * tflops / peak.value:.0f} % of peak"
        )
        print(
            "  (a peak at the datasheet's clock: this profile measured no clock, and a loaded GPU need not hold that "
            "one -- notebook 04 measures the clock a kernel ran at and sets it against the peak at that clock)"
        )
        nt.claim(
            tflops <= peak.value,
            "the measured rate does not exceed the datasheet peak",
            f"{tflops:.1f} vs {peak}",
        )
        s.result = f"{tflops:.1f} TFLOP/s = {100 * tflops / peak.value:.0f} % of the {ENV.datasheet.gpu} fp32 datasheet peak"

# %% [markdown]
# Percent of peak is a first hint, not a verdict. The peak is stated at one clock (the
# datasheet's) with perfect scheduling, and a GPU under load may run below that clock
# (section 3 reads it; notebook 04 sets a kernel against the peak at the clock it ran at);
# a 2048-cube matmul is small for a big GPU, and on GPUs with TF32 PyTorch keeps plain fp32
# unless you opt in (notebook 05).
#
# ## 3. What the row does *not* tell you
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
# section 4 shows why sizes are not mixed in one call.

# %%
with nt.section("3. One run, the unit, and the rated clock") as s:
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
    time.sleep(2.0)  # nothing queued: let the GPU idle
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
    max_mhz = pynvml.nvmlDeviceGetMaxClockInfo(gpu, pynvml.NVML_CLOCK_SM)
    print(f"  ComputeClock (every row): {rated_mhz} MHz    NVML max SM clock: {max_mhz} MHz")
    print(
        f"  NVML SM clock after 2 s idle: {idle_mhz} MHz    after 1 s of fp16 matmuls: {busy_mhz} MHz"
    )
    differ = [
        f"{m} MHz {when}" for m, when in ((idle_mhz, "idle"), (busy_mhz, "busy")) if m != rated_mhz
    ]
    print(
        "  -> "
        + (
            f"the GPU ran at {' and '.join(differ)}: not what ComputeClock says"
            if differ
            else "every read matched ComputeClock here; ComputeClock is still the rating, not a reading "
            "(notebooks 04 and 08 catch this GPU at other clocks)"
        )
    )
    s.result = f"ComputeClock {rated_mhz} MHz in every row; NVML read {idle_mhz} MHz idle, {busy_mhz} MHz busy; unit ns; 1 run -> <NA>"

# %% [markdown]
# ## 4. When one call launches several kernels: `combine_kernel_metrics`
#
# nsight-python expects **one kernel per annotation**. Eager PyTorch evaluates
# `a + b * c` as two kernels (multiply, then add); cuBLAS sometimes launches more than
# one kernel for one matmul, depending on the size and the GPU. Without
# `combine_kernel_metrics` nsight-python refuses such a region (the check below looks at
# *that* it refuses, not at the words of its error, which change between versions); with
# it, the metrics of the kernels in one run are combined -- here by our `add`, so the times
# are summed -- and the `Kernel` column lists them joined by `|`.
#
# The second half counts how many kernels cuBLAS launched for an fp32 matmul at several
# sizes *on this GPU*, one profiled call per size -- the reason notebook 05 profiles each
# size separately.
#
# **Split-K.** Each output tile of `a @ b` is a sum over the shared dimension k. When the
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
)  # in the raw names too: "splitK", "splitKreduce_kernel", ...


def split_k(kernel_column: str) -> list[str]:
    """The short names of the kernels in a Kernel column whose full name says split-K."""
    return [nt.short_kernel_name(k) for k in kernel_column.split("|") if SPLIT_K.search(k)]


with nt.section("4. Several kernels in one annotation") as s:
    ENV.require("profiler")
    raised = refusal(lambda: unfused(1 << 20))
    print("  without combine_kernel_metrics:", raised or "nsight-python returned a table")
    nt.claim(
        raised is not None,
        "without combine_kernel_metrics, nsight-python refuses a two-kernel region",
        raised or "no refusal",
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
    print(
        f"  several kernels at {several or 'no size'}; split-K in their names at {named or 'no size'}"
        + (
            f"; other splits (read the names) at {sorted(set(several) - set(named))}"
            if set(several) - set(named)
            else ""
        )
    )
    varies = len(set(counts.values())) > 1
    s.result = (
        f"a+b*c = 2 kernels; fp32 matmul kernels per size {counts}"
        + (" (varies with size on this GPU)" if varies else " (constant on this GPU)")
        + f"; split-K named at {named or 'no size'}"
    )

# %% [markdown]
# ## Takeaways
#
# - Annotate exactly the work you mean to measure; build inputs outside the annotation.
# - A row is one annotation × configuration × metric. With one run, read `AvgValue` and
#   nothing else: there is no spread to judge (`StableMeasurement` is `<NA>`).
# - The metric name does not say how it was measured: Nsight Compute replays with cold
#   caches, CUPTI times the real run with warm ones. State which.
# - Turn time into a rate (TFLOP/s, GB/s) and compare with the datasheet peak of *your*
#   GPU; a rate above the peak is a finding to explain, not a rounding error.
# - `ComputeClock` is the card's rating. To know the clock a kernel ran at you must
#   measure it (notebook 04).
# - Library calls may launch several kernels, and how many can change with the size
#   (split-K: a GEMM and a reduction, named so): `combine_kernel_metrics` combines them, and
#   notebook 05 shows how to sweep sizes safely.
#
# ## Try it
#
# - Move the two `torch.randn` lines *inside* the annotation and run section 1 again: the
#   plain `@nsight.analyze.kernel` refuses the call (several kernels in one annotation);
#   decorated with `@nsight.analyze.kernel(combine_kernel_metrics=add)`, the random-number
#   kernels are added to the matmul's time and listed in `Kernel` (section 1's check fails
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
