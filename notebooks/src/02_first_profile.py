# %% [markdown]
# # 02 · Your first profile: what one row of `ProfileResults` says
#
# **What you will learn**
# - how `nsight.annotate` and `@nsight.analyze.kernel` turn "time this matmul" into a
#   pandas DataFrame, and why the inputs are created *outside* the annotation;
# - what every column of `to_dataframe()` means, read on one real row;
# - how to turn a kernel time into TFLOP/s by hand and set it against this GPU's
#   datasheet peak;
# - four things the DataFrame does *not* say that people assume it does -- each one
#   checked on your own data: one run has no stability verdict, the unit is ns,
#   `ComputeClock` is a rated attribute rather than a measurement, and a library call
#   can launch more than one kernel.
#
# Works with either nsight-python backend: Nsight Compute (Colab after notebook 01) or
# the CUPTI backend (an older ncu that cannot be upgraded). Both measure
# `gpu__time_duration.sum`, the kernel's duration on the GPU.

# %%
{{SETUP}}

# %%
import nsight
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from nspy_tutorial.profiling import kernel_counts, profile_per_config, sum_kernels

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_colwidth", 60)
SILENT = nsight.VerbosityLevel.SILENT
N = 2048  # 2048^2 fp32 = 16 MiB per matrix: fits every GPU the tutorial targets

# %% [markdown]
# ## 1. Profile one fp32 matmul
#
# The benchmark function below is ordinary PyTorch. Two things make it a profile:
#
# - `with nsight.annotate("matmul")` marks the region to measure. Only kernels
#   **launched inside it** are attributed to the row. `torch.randn` launches its own
#   random-number kernels; creating the inputs above the annotation keeps them out.
# - `@nsight.analyze.kernel(...)` runs the function under the profiler and returns a
#   `ProfileResults`; `.to_dataframe()` gives one row per annotation × configuration ×
#   metric. `thermal_mode="off"` skips nsight-python's pauses for GPU cooling (notebook
#   08 is about those), and `combine_kernel_metrics=sum_kernels` says what to do if
#   cuBLAS splits the product into several kernels (section 4).

# %%
@nsight.analyze.kernel(thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=sum_kernels)
def first_matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda")  # not measured: outside the annotation
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("matmul"):
        _ = a @ b


with nt.section("1. Profile one fp32 matmul") as s:
    ENV.require("profiler")
    df = first_matmul(N).to_dataframe()
    display(df.T)
    row = df.iloc[0]
    t_ns = float(row["AvgValue"])
    nt.claim(
        not any(word in row["Kernel"].lower() for word in ("rand", "normal", "distribution")),
        "no random-number kernel was measured: the inputs were made outside the annotation",
        f"kernel: {row['Kernel'][:70]}",
    )
    s.result = f"fp32 {N}^3 matmul: {t_ns / 1e3:,.1f} us on {row['GPU']} ({ENV.backend} backend)"

# %% [markdown]
# ## 2. Every column, on the row you just measured
#
# | column | meaning |
# |---|---|
# | `Annotation` | the `nsight.annotate` name |
# | `n` | one column per parameter of the benchmark function: the configuration |
# | `Metric` | what was measured: `gpu__time_duration.sum` (kernel duration) unless you ask for more |
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
# The check below compares this list with the DataFrame you got, so if a future
# nsight-python adds or drops a column, this notebook says so.

# %%
DOCUMENTED = [
    "Annotation", "n", "Metric", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns",
    "CI95_Lower", "CI95_Upper", "RelativeStdDevPct", "StableMeasurement", "Kernel", "GPU",
    "Host", "ComputeClock", "MemoryClock", "Unit", "Normalized", "Geomean",
]

with nt.section("2. Read the row: columns and TFLOP/s by hand") as s:
    ENV.require("profiler")
    extra, missing = set(df.columns) - set(DOCUMENTED), set(DOCUMENTED) - set(df.columns)
    nt.claim(not extra and not missing, "the table above lists exactly the columns to_dataframe() returns",
             f"undocumented: {sorted(extra)}, missing: {sorted(missing)}")
    flops = 2 * N**3  # one multiply and one add per inner-product term
    tflops = flops / (t_ns * 1e-9) / 1e12
    sheet = ENV.datasheet
    peak = sheet.fp32_tflops.value if sheet else None
    print(f"  {flops:.3e} flop in {t_ns:,.0f} ns = {tflops:.1f} TFLOP/s")
    if peak:
        print(f"  datasheet fp32 peak for {sheet.gpu}: {sheet.fp32_tflops} TFLOP/s -> {100 * tflops / peak:.0f} % of peak")
    else:
        print("  this GPU is not in the datasheet table: peak unknown, so no % of peak")
    nt.claim(peak is None or tflops < 1.5 * peak, "the measured rate is below the datasheet peak (with margin for rounding)",
             f"{tflops:.1f} vs {peak}")
    share = f" = {100 * tflops / peak:.0f} % of the fp32 datasheet peak" if peak else " (peak unknown)"
    s.result = f"{tflops:.1f} TFLOP/s{share}"

# %% [markdown]
# Percent of peak is a first hint, not a verdict. The peak is at the **boost** clock
# with perfect scheduling; a 2048-cube matmul is small for a big GPU, and on GPUs with
# TF32 PyTorch keeps plain fp32 unless you opt in (notebook 05).
#
# ## 3. What the row does *not* tell you
#
# Three claims that are easy to get wrong, checked on your data:
#
# - **One run has no stability verdict.** `StdDev` needs two samples, so with
#   `runs=1` it is NaN and `StableMeasurement` is `<NA>` -- not `False`, not `True`.
# - **The unit is nanoseconds** (`Unit == "ns"`).
# - **`ComputeClock` is not a measurement.** It is the device attribute "clock rate"
#   in kHz, the same number in every row, whatever clock the kernel really ran at. We
#   compare it with the attribute read directly from the driver and with NVML's
#   maximum SM clock, and show NVML's *current* SM clock next to it.

# %%
with nt.section("3. One run, the unit, and the rated clock") as s:
    ENV.require("profiler")
    from cuda.core import Device
    import pynvml

    nt.claim(row["NumRuns"] == 1 and pd.isna(row["StdDev"]), "with one run StdDev is NaN", f"StdDev={row['StdDev']}")
    nt.claim(row["StableMeasurement"] is pd.NA, "with one run StableMeasurement is <NA>", repr(row["StableMeasurement"]))
    nt.claim(row["Unit"] == "ns", "gpu__time_duration.sum is reported in ns", repr(row["Unit"]))

    rated_khz = Device(0).properties.clock_rate
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    max_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
    now_mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    # one call per size: cuBLAS may launch a different number of kernels per size (section 4)
    clocks = profile_per_config(first_matmul, [256, 1024, N])["ComputeClock"]
    print(f"  ComputeClock column: {sorted(set(clocks))} kHz over 3 sizes")
    print(f"  device attribute clock_rate: {rated_khz} kHz; NVML max SM clock {max_mhz} MHz; NVML SM clock now {now_mhz} MHz")
    nt.claim(clocks.nunique() == 1 and int(clocks.iloc[0]) == int(rated_khz),
             "ComputeClock is the device's clock-rate attribute, identical in every row")
    s.result = f"ComputeClock {int(rated_khz) // 1000} MHz (rated) vs SM clock now {now_mhz} MHz; unit ns; 1 run -> <NA>"

# %% [markdown]
# ## 4. When one call launches several kernels: `combine_kernel_metrics`
#
# nsight-python expects **one kernel per annotation**. Eager PyTorch evaluates
# `a + b * c` as two kernels (multiply, then add); cuBLAS sometimes launches more than
# one kernel for one matmul, depending on the size and the GPU. Without
# `combine_kernel_metrics` such a region raises; with it, the metrics of the kernels in
# one run are combined (here: summed) and the `Kernel` column lists them joined by `|`.
#
# The second half counts how many kernels cuBLAS launched for an fp32 matmul at several
# sizes *on this GPU* -- the reason notebook 05 profiles each size separately.

# %%
@nsight.analyze.kernel(thermal_mode="off", verbosity=SILENT)
def unfused(n: int) -> None:
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate("a + b * c"):
        _ = a + b * c


@nsight.analyze.kernel(thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=sum_kernels)
def unfused_combined(n: int) -> None:
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate("a + b * c"):
        _ = a + b * c


@nsight.analyze.kernel(thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=sum_kernels)
def matmul_at(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight.annotate("matmul"):
        _ = a @ b


with nt.section("4. Several kernels in one annotation") as s:
    ENV.require("profiler")
    try:
        unfused(1 << 20)
        raised = None
    except RuntimeError as exc:
        raised = str(exc)
        print("  without combine_kernel_metrics:", raised.splitlines()[0])
    nt.claim(raised is not None and "More than one" in raised,
             "without combine_kernel_metrics, a two-kernel region raises")
    both = unfused_combined(1 << 20).to_dataframe().iloc[0]
    print(f"  with sum_kernels: {both['AvgValue']:,.0f} ns, kernels: {both['Kernel'][:110]}")
    nt.claim(kernel_counts(pd.DataFrame([both])).iloc[0] == 2, "with it, the Kernel column lists both kernels joined by '|'")

    counts = {}
    for n in (128, 256, 512, 1024, 2048, 4096):
        r = matmul_at(n).to_dataframe().iloc[0]
        counts[n] = int(kernel_counts(pd.DataFrame([r])).iloc[0])
        print(f"  fp32 matmul {n:5d}: {counts[n]} kernel(s)  {r['Kernel'][:90]}")
    varies = len(set(counts.values())) > 1
    s.result = (f"a+b*c = 2 kernels; fp32 matmul kernels per size {counts}"
                + (" (varies with size on this GPU)" if varies else " (constant on this GPU)"))

# %% [markdown]
# ## Takeaways
#
# - Annotate exactly the work you mean to measure; build inputs outside the annotation.
# - A row is one annotation × configuration × metric. With one run, read `AvgValue` and
#   nothing else: there is no spread to judge (`StableMeasurement` is `<NA>`).
# - Turn time into a rate (TFLOP/s, GB/s) and compare with the datasheet peak of *your*
#   GPU -- the peak comes from the table in `nspy_tutorial`, looked up by device name.
# - `ComputeClock` is the card's rating. To know the clock a kernel ran at you must
#   measure it (notebook 04).
# - Library calls may launch several kernels, and how many can change with the size:
#   `combine_kernel_metrics` sums them, and notebook 05 shows how to sweep sizes safely.

# %%
nt.summary();
