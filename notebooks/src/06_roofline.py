# %% [markdown]
# # 06 · Compute- or memory-bound? The roofline of *your* GPU
#
# **What you will learn**
# - how to draw this GPU's roofline twice: from the datasheet, and from two kernels you
#   measure yourself (a stream far larger than L2, and a large half-precision matmul);
# - what the **ridge point** (FLOP per byte where the two roofs meet) says about a kernel
#   before you profile it;
# - what to do when a measurement beats the datasheet: find out why, with the device's own
#   memory clock and bus width, instead of shrugging;
# - three ways to decide "limited by compute or by memory" -- Nsight Compute counters
#   through nsight-python, the plain `ncu` command line (any version), and analytic FLOPs
#   and bytes over a measured time -- and that they agree;
# - how to combine hardware counters over several kernels in one annotation: times add up,
#   percentages of peak are weighted by time -- one `combine_kernel_metrics` function;
# - where a Transformer's operations land: the QKV projection, the attention softmax, and
#   attention through PyTorch's math backend against FlashAttention.
#
# | section | needs |
# |---|---|
# | 1. roofs, datasheet and measured | any nsight-python backend (CUPTI too) |
# | 2a. counters through nsight-python | the Nsight Compute backend (ncu ≥ 2026.2.1) |
# | 2b. counters through the `ncu` command line | any `ncu` (older ones too) |
# | 2c. analytic FLOPs and bytes over measured time | any backend |
# | 2d. the three ways side by side | two of 2a-2c |
# | 3. Transformer ops | any backend; DRAM bytes where 2a's or 2b's tool exists; flash attention needs cc ≥ 8.0 |
# | 4. the roofline plot | sections 1-3 |
#
# Buffer sizes come from what your GPU reports (its L2 and memory size), so the notebook
# runs unchanged on a 16 GB T4 and on an H200; the output is silent where nsight-python
# would print progress (`verbosity=SILENT`).

# %%
{{SETUP}}

# %%
import math
import tempfile
import textwrap
import warnings

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import stats
from torch.nn.attention import SDPBackend, sdpa_kernel

from nspy_tutorial import ncu_cli

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
TIME = "gpu__time_duration.sum"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
OUT_DIR = tempfile.mkdtemp(prefix="nspy_06_")
MiB = 2**20

MM_DTYPES = {"fp16": torch.float16}
if ENV.facts:
    L2, MEM = ENV.facts.l2_bytes, ENV.facts.memory_bytes
    # one streaming buffer: 16x the L2 (at least 256 MiB), at most 1/16 of the memory
    STREAM_BYTES = int(min(max(16 * L2, 256 * MiB), MEM // 16)) // MiB * MiB
    N_STREAM = STREAM_BYTES // 4  # float32 elements
    ROWS = N_STREAM // 1024  # softmax rows of 1024 floats: the same bytes as the stream
    M_ROOF = 8192 if 3 * 2 * 8192**2 <= MEM // 8 else 4096  # the matmul for the compute roof
    HALF = torch.bfloat16 if ENV.facts.compute_capability >= (8, 0) else torch.float16
    if ENV.facts.compute_capability >= (8, 0):
        MM_DTYPES["bf16"] = torch.bfloat16
    print(f"L2 {L2 / MiB:.0f} MiB, memory {MEM / 2**30:.0f} GiB -> stream buffer {STREAM_BYTES / MiB:,.0f} MiB "
          f"({STREAM_BYTES / L2:.0f}x L2), softmax {ROWS:,} x 1024, roof matmul {M_ROOF}^3 in {list(MM_DTYPES)}")


def add(x, y):
    """combine_kernel_metrics: add up the metrics of the kernels one annotation launched."""
    return x + y


def t_interval(mean: float, sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of a mean of n runs (n is small: not the normal 1.96)."""
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def timing(df: pd.DataFrame, annotation: str) -> dict:
    """One annotation's duration from to_dataframe(): mean, 95 % Student-t CI and fastest run (ns)."""
    r = df[(df.Annotation == annotation) & (df.Metric == TIME)].iloc[0]
    lo, hi = t_interval(r.AvgValue, r.StdDev, int(r.NumRuns))
    return {"mean": r.AvgValue, "lo": lo, "hi": hi, "min": r.MinValue, "runs": int(r.NumRuns),
            "kernels": r.Kernel.split("|")}


def fmt_table(table: pd.DataFrame, fmt: str = "{:,.1f}") -> None:
    print(textwrap.indent(table.to_string(float_format=lambda v: fmt.format(v)), "  "))


def num(v: float) -> str:
    """A number for a one-line result: no decimals from 10 up, two below."""
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2f}"

# %% [markdown]
# ## 1. This GPU's roofs: the datasheet, and what it really does
#
# A roofline has two roofs. **Compute**: the most FLOP per second the GPU can execute.
# **Memory**: the most bytes per second DRAM can deliver. A kernel that performs *F* FLOPs
# and must move *B* bytes cannot finish faster than `max(F / peak_FLOP/s, B / peak_B/s)`;
# which term wins depends on its **arithmetic intensity** `AI = F / B` (FLOP per byte)
# against the **ridge point** `peak_FLOP/s / peak_B/s`.
#
# The datasheet gives both peaks (looked up by your GPU's name). We also *measure* them:
#
# - **bandwidth**: streams over buffers at least 16× larger than L2 (so L2 cannot hold
#   them), with different mixes of reads and writes: `x.sum()` (read only),
#   `torch.mul(x, 2.0, out=y)` (1 read : 1 write), `torch.add(x, w, out=y)` (2 : 1) and
#   `torch.addcmul(x, w, v, out=y)` (3 : 1). Bytes come from the tensor sizes: each
#   buffer read once, each output written once. All are real kernels -- a plain same-dtype
#   `y.copy_(x)` may be a memcpy, which the profiler does not see as a kernel at all. DRAM
#   has to turn its bus around between reads and writes, so the mix matters; the
#   **measured memory roof is the fastest of these streams** -- the best this GPU showed
#   you, not a promise;
# - **matrix throughput**: a large fp16 matmul (and bf16 on Ampere and newer); FLOPs = 2·n³.
#
# Ten runs each; the table gives the mean with a 95 % Student-t interval and the fastest
# run.
#
# **When a stream beats the datasheet.** Two explanations can be checked on your data:
#
# 1. *The datasheet is rounded.* The device reports its own memory clock and bus width
#    through NVML; `2 × max memory clock × bus width / 8` is the interface's peak (data
#    moves twice per memory clock as NVML reports it). For an H100 SXM (2,619 MHz,
#    5,120 bit) that is 3,352 GB/s, the datasheet's "3.35 TB/s"; another datasheet may
#    round its figure. No stream may beat *this* number.
# 2. *Bytes counted are not bytes moved during the kernel.* L2 is a write-back cache: when
#    a kernel ends, up to one L2 of its writes may still sit in L2, and reach DRAM only
#    later. A kernel that starts with a clean L2 -- as under Nsight Compute, which flushes
#    caches before every kernel -- gets that for free; in a steady stream of kernels each one
#    pays for the previous one's leftovers, and it evens out. So we run the multiply twice:
#    once right after other work, once right after reading a scratch buffer twice the L2's
#    size (which leaves L2 clean). A read-only stream has no writes to leave behind.
#
# The section prints which explanation your data supports, and asserts only what must hold:
# no stream beats the device's clock-derived peak on average.

# %%
STREAM_RW, STREAM_CLEAN, STREAM_R = ("stream: y = x * 2 (1 read, 1 write)", "stream: y = x * 2 after an L2 flush",
                                     "stream: x.sum() (read only)")
STREAM_2R, STREAM_3R = "stream: y = x + w (2 reads, 1 write)", "stream: y = addcmul(x, w, v) (3 reads, 1 write)"
# bytes each stream moves, in buffers of STREAM_BYTES: reads + writes
STREAM_BUFFERS = {STREAM_R: 1, STREAM_RW: 2, STREAM_CLEAN: 2, STREAM_2R: 3, STREAM_3R: 4}


@nsight.analyze.kernel(runs=10, combine_kernel_metrics=add, thermal_mode="off", verbosity=SILENT)
def roof_benchmarks(n: int, m: int) -> None:
    x, w, v = (torch.randn(n, device="cuda") for _ in range(3))  # made outside the annotations: not measured
    y = torch.empty_like(x)
    scratch = torch.empty(2 * L2 // 4, device="cuda")
    mats = {p: torch.randn(m, m, device="cuda", dtype=dt) for p, dt in MM_DTYPES.items()}
    with nsight.annotate(STREAM_RW):  # right after other work (the randn calls above)
        torch.mul(x, 2.0, out=y)
    scratch.sum()  # not measured: reading 2x L2 of other data leaves L2 clean (dirty lines written back now)
    with nsight.annotate(STREAM_CLEAN):
        torch.mul(x, 2.0, out=y)
    with nsight.annotate(STREAM_R):
        x.sum()
    with nsight.annotate(STREAM_2R):
        torch.add(x, w, out=y)
    with nsight.annotate(STREAM_3R):
        torch.addcmul(x, w, v, out=y)
    for p, a in mats.items():
        with nsight.annotate(f"{p} matmul {m}"):
            _ = a @ a


with nt.section("1. This GPU's roofs: datasheet and measured") as s:
    ENV.require("profiler")
    df = roof_benchmarks(N_STREAM, M_ROOF).to_dataframe()
    sheet, facts = ENV.datasheet, ENV.facts
    sheet_bw = sheet.mem_bandwidth_gbs.value if sheet else None
    print(f"  bytes: one buffer is {STREAM_BYTES:,} B; x.sum() reads 1, y = x * 2 moves 2 (read x, write y), "
          "y = x + w moves 3, addcmul moves 4")
    bw = {}  # GB/s = bytes per ns
    for name, buffers in STREAM_BUFFERS.items():
        nbytes = buffers * STREAM_BYTES
        t = timing(df, name)
        bw[name] = {"mean": nbytes / t["mean"], "lo": nbytes / t["hi"], "hi": nbytes / t["lo"], "best": nbytes / t["min"]}
    tflops = {}
    for p in MM_DTYPES:
        t = timing(df, f"{p} matmul {M_ROOF}")
        flops = 2 * M_ROOF**3
        tflops[p] = {"mean": flops / t["mean"] / 1e3, "lo": flops / t["hi"] / 1e3, "hi": flops / t["lo"] / 1e3,
                     "best": flops / t["min"] / 1e3}
    rows = []
    for name, v in bw.items():
        rows.append({"roof": name, "unit": "GB/s", "datasheet": sheet_bw, "mean": v["mean"], "CI95 low": v["lo"],
                     "CI95 high": v["hi"], "fastest run": v["best"]})
    for p, v in tflops.items():
        peak = sheet.peak_tflops(p).value if sheet else None
        rows.append({"roof": f"{p} matmul {M_ROOF}^3", "unit": "TFLOP/s", "datasheet": peak, "mean": v["mean"],
                     "CI95 low": v["lo"], "CI95 high": v["hi"], "fastest run": v["best"]})
    table = pd.DataFrame(rows).set_index("roof")
    table["% of datasheet"] = 100 * table["mean"] / table["datasheet"]
    print("  " + nt.rules(ENV.backend))
    fmt_table(table, "{:,.0f}")
    if sheet:
        print(f"  datasheet ({sheet.gpu}): fp32 {sheet.fp32_tflops}, tf32 {sheet.tf32_tflops}, fp16 {sheet.fp16_tflops}, "
              f"bf16 {sheet.bf16_tflops} TFLOP/s, {sheet.mem_bandwidth_gbs} GB/s")
    else:
        print(f"  {ENV.gpu_name} is not in the datasheet table: datasheet peaks unknown, measured roofs only")

    # --- explanation 1: the device's own DRAM peak ---
    clock_peak = None
    if facts.max_mem_clock_mhz and facts.memory_bus_width_bits:
        clock_peak = 2 * facts.max_mem_clock_mhz * 1e6 * facts.memory_bus_width_bits / 8 / 1e9
        print(f"  device's own DRAM peak: 2 x {facts.max_mem_clock_mhz} MHz x {facts.memory_bus_width_bits} bit / 8 "
              f"= {clock_peak:,.0f} GB/s (NVML max memory clock and bus width)"
              + (f", {100 * (clock_peak / sheet_bw - 1):+.1f} % vs the datasheet" if sheet_bw else ""))
        for name, v in bw.items():
            nt.claim(v["mean"] <= clock_peak, f"{name.split(': ')[1]}: the mean stays at or below the device's "
                     "clock-derived DRAM peak", f"{v['mean']:,.0f} <= {clock_peak:,.0f} GB/s; fastest run {v['best']:,.0f}")
    else:
        print("  NVML does not report this GPU's memory clock and bus width: no clock-derived DRAM peak")
    # --- explanation 2: writes still in L2 when the kernel ends ---
    carry = 100 * L2 / (2 * STREAM_BYTES)
    clean_gain = 100 * (bw[STREAM_CLEAN]["mean"] / bw[STREAM_RW]["mean"] - 1)
    print(f"  starting with a clean L2 changes the read+write stream by {clean_gain:+.1f} % "
          f"(one L2 of {L2 / MiB:.0f} MiB is at most {carry:.1f} % of the bytes it moves)")

    above = {name: v["mean"] for name, v in bw.items() if sheet_bw and v["mean"] > sheet_bw}
    if above:
        print(f"\n  FINDING: above the datasheet's {sheet_bw:,.0f} GB/s: "
              + ", ".join(f"{n.split(': ')[1]} {v:,.0f} GB/s (+{100 * (v / sheet_bw - 1):.1f} %)" for n, v in above.items()))
        if clock_peak:
            print(f"  - explanation 1, a rounded datasheet: the device's own peak is {clock_peak:,.0f} GB/s and every "
                  f"stream stayed below it (checked above) -> "
                  + ("SUPPORTED" if clock_peak > sheet_bw else "NOT SUPPORTED (the clock-derived peak is not higher)"))
        else:
            print("  - explanation 1, a rounded datasheet: cannot be checked here (no NVML memory clock / bus width)")
        # under Nsight Compute (cache_control="all") every kernel starts with a clean L2
        clean = [STREAM_RW, STREAM_CLEAN] if ENV.backend == "ncu" else [STREAM_CLEAN]
        unflushed = [n.split(": ")[1] for n in (STREAM_R, STREAM_RW, STREAM_2R, STREAM_3R) if n in above and n not in clean]
        gain = max(above.get(n, 0) for n in clean) / sheet_bw - 1
        print("  - explanation 2, writes still in L2: "
              + (f"NOT the reason: {' and '.join(unflushed)} -- which gain nothing from a clean L2 -- "
                 "are above the datasheet too" if unflushed else
                 f"SUPPORTED: only streams that started with a clean L2 and write are above the datasheet "
                 f"(by up to {100 * gain:.1f} %, within the {carry:.1f} % one L2 can hide)"))
    elif sheet_bw:
        print(f"  every stream stays below the datasheet's {sheet_bw:,.0f} GB/s: nothing to explain")

    # --- the read:write mix, and the roofs the rest of the notebook uses ---
    steady = {name: bw[name]["mean"] for name in (STREAM_R, STREAM_RW, STREAM_2R, STREAM_3R)}
    fastest = max(steady, key=steady.get)
    print("\n  the read:write mix (steady streams, mean GB/s): "
          + ", ".join(f"{n.split(': ')[1].split(' (')[1].rstrip(')')} {v:,.0f}" for n, v in steady.items()))
    # the clean-L2 stream is left out of the roof: its bonus is an artefact of the flush
    best_p = max(tflops, key=lambda p: tflops[p]["mean"])
    ROOFS = {"memory": steady[fastest], "memory_stream": fastest, "streams": steady, "tensor": tflops[best_p]["mean"],
             "tensor_dtype": best_p, "sheet_memory": sheet_bw, "sheet_tensor": sheet.peak_tflops(best_p).value if sheet else None,
             "sheet_fp32": sheet.fp32_tflops.value if sheet else None, "clock_memory": clock_peak}
    ridge = {"measured (tensor)": 1e3 * ROOFS["tensor"] / ROOFS["memory"]}
    if sheet_bw and ROOFS["sheet_tensor"]:
        ridge[f"datasheet ({best_p} tensor)"] = 1e3 * ROOFS["sheet_tensor"] / sheet_bw
    if sheet_bw and ROOFS["sheet_fp32"]:
        ridge["datasheet (fp32, CUDA cores)"] = 1e3 * ROOFS["sheet_fp32"] / sheet_bw
    print(f"\n  roofs used below: {ROOFS['memory']:,.0f} GB/s (the fastest steady stream: {fastest.split(': ')[1]}), "
          f"{ROOFS['tensor']:,.0f} TFLOP/s ({best_p})")
    print("  ridge point = peak FLOP/s / peak bytes/s:")
    for name, value in ridge.items():
        print(f"    {name:30s} {value:7.1f} FLOP/byte")
    s.result = (f"measured {ROOFS['memory']:,.0f} GB/s and {ROOFS['tensor']:,.0f} TFLOP/s ({best_p}); datasheet "
                f"{num(sheet_bw) if sheet_bw else 'unknown'} GB/s, "
                f"{num(ROOFS['sheet_tensor']) if ROOFS['sheet_tensor'] else 'unknown'} TFLOP/s; ridge "
                + ", ".join(f"{k} {v:.0f}" for k, v in ridge.items()) + " FLOP/byte")

# %% [markdown]
# The measured roofs are what the rest of the notebook compares against: they are what
# *this* GPU sustains, under the rules printed above the table (CUPTI: warm caches, free
# clocks; Nsight Compute: caches flushed before each kernel). A datasheet is a ceiling at
# boost clock; a measured roof is an achievable one.
#
# ## 2. The seed's three kernels: limited by compute or by memory?
#
# An fp16 4096³ matmul, `x * 2` over the stream buffer, and a softmax over a
# [rows × 1024] float matrix as large as the stream buffer (a matrix that fits in L2 would
# give a different verdict with warm and with flushed caches). Three ways to decide what
# limits each one:
#
# - **2a / 2b: hardware counters.** `sm__throughput.avg.pct_of_peak_sustained_elapsed` is
#   the busiest SM unit as a percentage of its peak over the kernel's duration,
#   `dram__throughput.avg.pct_of_peak_sustained_elapsed` the same for DRAM. The larger one
#   names the limit. nsight-python collects them when its Nsight Compute backend is active
#   (2a); the `ncu` command line collects them from any ncu, old ones included (2b).
# - **2c: no counters at all.** Count the FLOPs and the bytes the kernel must move, divide by
#   its measured duration, and compare each rate with its roof from section 1. This works
#   with the CUPTI backend, which measures durations only.
#
# When one annotation launches several kernels, the counters must be combined. Adding times
# is right; adding percentages is not. The region's percentage of peak is the kernels'
# percentages **weighted by their durations** -- a `combine_kernel_metrics` function can do
# that, because nsight-python hands it the *array* of all metrics of two kernels, in the
# order of `metrics=[...]` (see `ActionData.combine` in nsight-python's `utils.py`).

# %%
MATMUL, SCALE, SOFTMAX = "fp16 matmul 4096^3", "x * 2", "softmax [rows x 1024]"
SEED_RANGES = {"seed_matmul": MATMUL, "seed_scale": SCALE, "seed_softmax": SOFTMAX}  # ncu CLI range -> kernel
if ENV.facts:
    SEED_CONFIG = (4096, N_STREAM, ROWS)
    # What each kernel must do at least, counted by hand:
    SEED_MODEL = {
        MATMUL: {"flops": 2 * 4096**3,  # 4096^3 multiply-adds, 2 FLOP each
                 "bytes": 2 * 3 * 4096**2,  # fp16: read A and B, write C, each once
                 "roof": "tensor"},
        SCALE: {"flops": N_STREAM,  # one multiply per element
                "bytes": 4 * 2 * N_STREAM,  # fp32: read x, write y
                "roof": "cuda cores"},
        SOFTMAX: {"flops": 5 * ROWS * 1024,  # per element: max, subtract, exp, add to the sum, divide
                  "bytes": 4 * 2 * ROWS * 1024,  # fp32: read the matrix once, write it once
                  "roof": "cuda cores"},
    }
# Softmax, honestly: exp is counted as one FLOP although it is a special-function instruction
# plus a multiply; a kernel may read each row more than once, from L1/L2, never more from DRAM
# than the minimum counted here if the row fits on chip (1024 floats = 4 KiB: it does).


def time_weighted(x, y):
    """combine_kernel_metrics for metrics=[time, %, %]: add the times, average the %s weighted by time."""
    t = x[0] + y[0]
    return np.concatenate([[t], (x[1:] * x[0] + y[1:] * y[0]) / t])


def make_seed_body():
    def seed_kernels(n_mm: int, n_vec: int, rows: int) -> None:  # a fresh function object for each decorator
        a = torch.randn(n_mm, n_mm, device="cuda", dtype=torch.float16)
        x = torch.randn(n_vec, device="cuda")
        s = torch.randn(rows, 1024, device="cuda")
        with nsight.annotate(MATMUL):
            _ = a @ a
        with nsight.annotate(SCALE):
            _ = x * 2.0
        with nsight.annotate(SOFTMAX):
            _ = torch.softmax(s, dim=-1)
    return seed_kernels


seed_counters = nsight.analyze.kernel(runs=3, metrics=[TIME, SM_PCT, DRAM_PCT], combine_kernel_metrics=time_weighted,
                                      thermal_mode="off", verbosity=SILENT)(make_seed_body())
seed_durations = nsight.analyze.kernel(runs=10, combine_kernel_metrics=add, thermal_mode="off",
                                       verbosity=SILENT)(make_seed_body())
WAYS = {}  # way -> table of kernel -> verdict


def bound_from_counters(sm: pd.Series, dram: pd.Series) -> pd.Series:
    """'compute' where the SM is busier (in % of its peak) than DRAM, else 'memory'."""
    return pd.Series(np.where(sm > dram, "compute", "memory"), index=sm.index)

# %% [markdown]
# ### 2a. Counters through nsight-python (Nsight Compute backend)
#
# Three metrics make Nsight Compute replay each kernel several times (one pass per group of
# counters it can read at once); nsight-python still returns one row per annotation and
# metric. Caches are flushed before every pass (`cache_control="all"`, the default).

# %%
with nt.section("2a. Limited by what? Counters from nsight-python") as s:
    ENV.require("ncu")
    df = seed_counters(*SEED_CONFIG).to_dataframe()
    wide = df.pivot(index="Annotation", columns="Metric", values="AvgValue").loc[list(SEED_MODEL)]
    table = pd.DataFrame({"time_us": wide[TIME] / 1e3, "SM %": wide[SM_PCT], "DRAM %": wide[DRAM_PCT]})
    table["kernels"] = [len(df[df.Annotation == k].Kernel.iloc[0].split("|")) for k in table.index]
    table["limited by"] = bound_from_counters(table["SM %"], table["DRAM %"])
    print("  " + nt.rules("ncu", cache_control="all", clock_control="none"))
    fmt_table(table)
    WAYS["a) nsight-python counters"] = table
    s.result = "; ".join(f"{k}: {r['limited by']} (SM {r['SM %']:.0f} %, DRAM {r['DRAM %']:.0f} %)" for k, r in table.iterrows())

# %% [markdown]
# ### 2b. Counters through the `ncu` command line (any ncu)
#
# The same three kernels in a small script, each inside an NVTX range
# (`torch.cuda.nvtx.range_push`), repeated three times. `ncu --nvtx --nvtx-include name/`
# profiles only the kernels in those ranges and writes a report (`-o`); we read it back with
# `ncu_report`, the module nsight-python itself uses, which tells each launch's NVTX range.
# You can open the same `.ncu-rep` file in the Nsight Compute GUI.

# %%
SEED_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    n_mm, n_vec, rows, reps = map(int, sys.argv[1:5])
    a = torch.randn(n_mm, n_mm, device="cuda", dtype=torch.float16)
    x = torch.randn(n_vec, device="cuda")
    s = torch.randn(rows, 1024, device="cuda")
    c, y, p = a @ a, x * 2.0, torch.softmax(s, dim=-1)  # warm-up, outside the ranges
    for _ in range(reps):
        torch.cuda.nvtx.range_push("seed_matmul")
        c = a @ a
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("seed_scale")
        y = x * 2.0
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("seed_softmax")
        p = torch.softmax(s, dim=-1)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')
REPS = 3


def per_run(report: pd.DataFrame, nvtx_range: str, reps: int) -> pd.DataFrame:
    """The launches of one NVTX range, split into its `reps` runs (launch order) and combined per run:
    times and bytes are added, percentages averaged weighted by time (as time_weighted above)."""
    part = report[report.Range == nvtx_range].sort_values("ID")
    nt.claim(len(part) > 0 and len(part) % reps == 0, f"every run of {nvtx_range} launched the same number of kernels",
             f"{len(part)} launches in {reps} runs")
    k = len(part) // reps
    runs = []
    for i in range(reps):
        chunk = part.iloc[i * k:(i + 1) * k]
        row = {"kernels": k, "names": " | ".join(chunk["Kernel Name"]), TIME: chunk[TIME].sum()}
        for m in (SM_PCT, DRAM_PCT):
            if m in chunk:
                row[m] = (chunk[m] * chunk[TIME]).sum() / row[TIME]
        for m in (DRAM_READ, DRAM_WRITE):
            if m in chunk:
                row[m] = chunk[m].sum()
        runs.append(row)
    return pd.DataFrame(runs)


with nt.section("2b. Limited by what? Counters from the ncu command line") as s:
    ENV.require("ncu-cli")
    script = ncu_cli.write_script(SEED_SCRIPT, "seed_kernels.py", OUT_DIR)
    report = ncu_cli.profile_script_report(ENV.ncu_path, script, [str(v) for v in (*SEED_CONFIG, REPS)],
                                           [TIME, SM_PCT, DRAM_PCT], list(SEED_RANGES), f"{OUT_DIR}/seed_kernels.ncu-rep",
                                           show_command=True)
    print(f"  ncu {'.'.join(map(str, ENV.ncu_version))}; report: {OUT_DIR}/seed_kernels.ncu-rep")
    rows = {}
    for rng, kernel in SEED_RANGES.items():
        runs = per_run(report, rng, REPS)
        rows[kernel] = {"time_us": runs[TIME].mean() / 1e3, "SM %": runs[SM_PCT].mean(), "DRAM %": runs[DRAM_PCT].mean(),
                        "kernels": int(runs.kernels.iloc[0])}
    table = pd.DataFrame(rows).T[["time_us", "SM %", "DRAM %", "kernels"]].astype(float).astype({"kernels": int})
    table["limited by"] = bound_from_counters(table["SM %"], table["DRAM %"])
    print("  " + nt.rules("ncu-cli"))
    fmt_table(table)
    WAYS["b) ncu command line"] = table
    s.result = "; ".join(f"{k}: {r['limited by']} (SM {r['SM %']:.0f} %, DRAM {r['DRAM %']:.0f} %)" for k, r in table.iterrows())

# %% [markdown]
# ### 2c. No counters: analytic FLOPs and bytes over the measured time
#
# With only durations (the CUPTI backend), divide what each kernel must do (the counts
# written out above) by its measured time, and compare each rate with its roof: the
# FLOP rate with the compute roof the kernel can use (tensor cores for the matmul, CUDA
# cores for the other two), the byte rate with the bandwidth roof. The larger percentage
# names the limit.
#
# This is the ridge point in disguise: `(F/t) / P > (B/t) / W` exactly when `F/B > P/W`,
# the time cancels. So the verdict depends only on the arithmetic intensity and the roofs;
# the measured time says how *close* to its roof the kernel gets. (`x * 2` is section 1's
# stream itself, so it sits at about 100 % of the memory roof by construction.)

# %%
def roof_values() -> dict:
    """The roofs in use: measured in section 1 where it ran, else the datasheet; None where neither exists."""
    measured = globals().get("ROOFS")
    sheet = ENV.datasheet
    if measured is None and sheet is None:
        raise nt.Skip("no roofs: section 1 did not run and this GPU is not in the datasheet table",
                      "see section 1's SKIPPED or FAILED reason above", needs="profiler")
    memory = measured["memory"] if measured else sheet.mem_bandwidth_gbs.value
    tensor = measured["tensor"] if measured else sheet.fp16_tflops.value
    fp32 = sheet.fp32_tflops.value if sheet and sheet.fp32_tflops.value else None
    source = "measured in section 1" if measured else "datasheet (section 1 did not complete)"
    # no fp32 figure for an unknown GPU: the tensor roof stands in (a higher roof, so a later ridge)
    return {"memory": memory, "tensor": tensor, "cuda cores": fp32 or tensor, "source": source,
            "cuda cores source": "datasheet fp32" if fp32 else "tensor roof (no fp32 datasheet figure)"}


def place(model: dict, t_ns: float, roofs: dict) -> dict:
    """A kernel's point on the roofline and its analytic verdict."""
    flops_s, bytes_s = model["flops"] / t_ns * 1e9, model["bytes"] / t_ns * 1e9
    compute_pct = 100 * flops_s / (roofs[model["roof"]] * 1e12)
    memory_pct = 100 * bytes_s / (roofs["memory"] * 1e9)
    return {"AI": model["flops"] / model["bytes"], "TFLOP/s": flops_s / 1e12, "GB/s": bytes_s / 1e9,
            "% compute roof": compute_pct, "% memory roof": memory_pct,
            "ridge": 1e3 * roofs[model["roof"]] / roofs["memory"],
            "limited by": "compute" if compute_pct > memory_pct else "memory", "roof": model["roof"]}


with nt.section("2c. Limited by what? Analytic FLOPs and bytes over measured time") as s:
    ENV.require("profiler")
    roofs = roof_values()
    df = seed_durations(*SEED_CONFIG).to_dataframe()
    rows = {}
    for kernel, model in SEED_MODEL.items():
        t = timing(df, kernel)
        rows[kernel] = {"time_us": t["mean"] / 1e3, "CI95 +/- us": (t["hi"] - t["mean"]) / 1e3,
                        **place(model, t["mean"], roofs), "kernels": len(t["kernels"])}
    table = pd.DataFrame(rows).T
    print(f"  roofs {roofs['source']}: {roofs['memory']:,.0f} GB/s, tensor {roofs['tensor']:,.0f} TFLOP/s, "
          f"CUDA cores {roofs['cuda cores']:,.1f} TFLOP/s ({roofs['cuda cores source']})")
    print("  " + nt.rules(ENV.backend))
    cols = ["time_us", "CI95 +/- us", "AI", "ridge", "TFLOP/s", "GB/s", "% compute roof", "% memory roof", "limited by", "kernels"]
    fmt_table(table[cols].infer_objects(), "{:,.2f}")
    WAYS["c) analytic / measured time"] = table
    SEED_POINTS = table
    s.result = "; ".join(f"{k}: {r['limited by']} (AI {num(r['AI'])} vs ridge {num(r['ridge'])})" for k, r in table.iterrows())

# %% [markdown]
# ### 2d. The three ways side by side
#
# One table, one row per kernel, one verdict per way that ran on this machine. Where two or
# more ran, they must agree: these three kernels sit far from the ridge (AI ≈ 1,365, 0.125
# and 0.6 FLOP/byte against ridges of tens to hundreds), so no honest method can
# disagree about them. The percentages differ between the ways, and that is expected: the
# counters compare with the *hardware's* peak under their own rules (Nsight Compute flushes
# caches, the `ncu` command line also locks the clocks to base), the analytic way with the
# roofs measured in section 1.

# %%
with nt.section("2d. The three ways side by side") as s:
    ENV.require("profiler")
    if not WAYS:
        raise nt.Skip("none of 2a, 2b, 2c produced a table", "see their SKIPPED or FAILED reasons above", needs="profiler")
    side = pd.DataFrame({way: t["limited by"] for way, t in WAYS.items()})
    detail = pd.DataFrame({way: [f"SM {r['SM %']:.0f} % / DRAM {r['DRAM %']:.0f} %" if "SM %" in t
                                 else f"compute {r['% compute roof']:.0f} % / memory {r['% memory roof']:.1f} %"
                                 for _, r in t.iterrows()] for way, t in WAYS.items()}, index=side.index)
    print(side.to_string())
    print()
    print(detail.to_string())
    if len(WAYS) >= 2:
        for kernel, verdicts in side.iterrows():
            nt.claim(verdicts.nunique() == 1, f"{kernel}: every way that ran gives the same verdict", dict(verdicts))
        s.result = f"{len(WAYS)} ways agree: " + ", ".join(f"{k} {v}" for k, v in side.iloc[:, 0].items())
    else:
        s.result = f"only {list(WAYS)[0]} ran here: " + ", ".join(f"{k} {v}" for k, v in side.iloc[:, 0].items())

# %% [markdown]
# ## 3. Transformer operations on the roofline
#
# Seed 002's table says: the QKV projection is compute-bound (a GEMM on tensor cores), the
# attention softmax is memory-bound (little arithmetic per byte), and FlashAttention is
# faster not by magic but because it **moves the attention point up and to the right**: it
# never writes the [batch, heads, seq, seq] score matrix to DRAM, so the same FLOPs need
# far fewer bytes. We check that on your GPU.
#
# Sizes: batch 4 (fewer if memory is short), 16 heads of 128 (d_model = 2,048), sequence
# 2,048, in bf16 on Ampere and newer, fp16 before. What each operation must do, at least:
#
# | operation | FLOPs | minimum DRAM bytes (e = 2 bytes per element) |
# |---|---|---|
# | QKV projection `[b·s, d] @ [d, 3d]` | 2 · (b·s) · d · 3d | e · (b·s·d + d·3d + b·s·3d) |
# | attention softmax over `[b, h, s, s]` | 5 · b·h·s² | e · 2 · b·h·s² (read and write once) |
# | attention, fused (flash) | 4 · b·h·s²·dh + 5 · b·h·s² | e · 4 · b·h·s·dh (read q, k, v; write the output) |
# | attention, math backend | the same | the fused bytes + e · 4 · b·h·s² |
#
# Attention's FLOPs are its two matmuls (QKᵀ and PV, 2 FLOP per multiply-add) and the
# softmax; the scaling of q and k (b·h·s·dh multiplies each, under 0.1 %) is left out. The
# math backend materialises the scores: QKᵀ writes them, softmax reads them and writes the
# probabilities, PV reads those -- four passes over a b·h·s² matrix. That is the minimum
# for an unfused path; PyTorch's math path may move more (it can compute the scores in fp32
# and add a masking pass), which the DRAM counters show where a counter path exists. The
# kernel names say which precision really ran: if the math path's matmuls are fp32 GEMMs
# (`f32f32`, `sgemm` in the name), they ran on CUDA cores, and the cell judges the math point
# against the fp32 roof instead of the tensor-core one.
#
# **Arithmetic intensity, defined once for the whole notebook**: analytic FLOPs over the
# analytic *minimum* bytes above -- the algorithm's intensity, the same on every GPU. Where
# counters ran, the table adds the measured DRAM bytes and the intensity they imply (the
# plot draws it as a hollow marker): a kernel that moves more than its minimum sits left
# of its algorithmic point.
#
# FlashAttention in PyTorch needs compute capability ≥ 8.0 and fp16/bf16. Where it is not
# available (a T4 is 7.5) the cell says why, in PyTorch's own words, and uses the
# memory-efficient backend as the fused kernel instead -- labelled as such, never as flash.
# It also profiles PyTorch's default choice and tells which kernels it picked.

# %%
B, H, S, DH = 4, 16, 2048, 128  # batch, heads, sequence length, head dimension; d_model = H * DH
if ENV.facts:
    while B > 1 and 6 * 4 * B * H * S * S > ENV.facts.memory_bytes // 2:  # room for the math path's fp32 copies
        B //= 2
QKV, SOFTMAX_ATT, MATH, DEFAULT = "QKV projection", "attention softmax", "attention, math backend", "attention, PyTorch's default"
FUSED = {"label": None, "backend": None}  # set in section 3: flash, else memory-efficient, else none
TRANSFORMER_METRICS = [TIME, DRAM_READ, DRAM_WRITE] if ENV.backend == "ncu" else [TIME]


def transformer_model(b: int, h: int, s: int, dh: int, e: int = 2) -> dict:
    """Analytic FLOPs and minimum DRAM bytes (the table above); e = bytes per element."""
    d, scores, qkvo = h * dh, b * h * s * s, 4 * b * h * s * dh
    attention_flops = 4 * b * h * s * s * dh + 5 * scores
    return {
        QKV: {"flops": 2 * (b * s) * d * (3 * d), "bytes": e * (b * s * d + d * 3 * d + b * s * 3 * d), "roof": "tensor"},
        SOFTMAX_ATT: {"flops": 5 * scores, "bytes": e * 2 * scores, "roof": "cuda cores"},
        MATH: {"flops": attention_flops, "bytes": e * (qkvo + 4 * scores), "roof": "tensor"},
        "fused": {"flops": attention_flops, "bytes": e * qkvo, "roof": "tensor"},
    }


def sdpa_unavailable(backend, q, k, v):
    """None if this SDPA backend runs on q, k, v here; else PyTorch's reasons (its warnings, or its error)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v)
            torch.cuda.synchronize()
            return None
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as exc:  # the probe's answer: "No available kernel", with the reasons as warnings
            reasons = [str(w.message).strip().splitlines()[0] for w in caught]
            return "; ".join(reasons[:3] + [str(exc).strip().splitlines()[0]])


@nsight.analyze.kernel(runs=5, metrics=TRANSFORMER_METRICS, combine_kernel_metrics=add, thermal_mode="off",
                       verbosity=SILENT)
def transformer_ops(b: int, h: int, s: int, dh: int) -> None:
    d = h * dh
    x = torch.randn(b * s, d, device="cuda", dtype=HALF)
    w_qkv = torch.randn(d, 3 * d, device="cuda", dtype=HALF)
    scores = torch.randn(b, h, s, s, device="cuda", dtype=HALF)
    q, k, v = (torch.randn(b, h, s, dh, device="cuda", dtype=HALF) for _ in range(3))
    with nsight.annotate(QKV):
        _ = x @ w_qkv
    with nsight.annotate(SOFTMAX_ATT):
        _ = torch.softmax(scores, dim=-1)
    with sdpa_kernel(SDPBackend.MATH), nsight.annotate(MATH):
        _ = F.scaled_dot_product_attention(q, k, v)
    if FUSED["backend"] is not None:
        with sdpa_kernel(FUSED["backend"]), nsight.annotate(FUSED["label"]):
            _ = F.scaled_dot_product_attention(q, k, v)
    with nsight.annotate(DEFAULT):
        _ = F.scaled_dot_product_attention(q, k, v)


TRANSFORMER_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, h, s, dh, reps = map(int, sys.argv[1:6])
    half, fused = getattr(torch, sys.argv[6]), sys.argv[7]
    d = h * dh
    x = torch.randn(b * s, d, device="cuda", dtype=half)
    w_qkv = torch.randn(d, 3 * d, device="cuda", dtype=half)
    scores = torch.randn(b, h, s, s, device="cuda", dtype=half)
    q, k, v = (torch.randn(b, h, s, dh, device="cuda", dtype=half) for _ in range(3))

    def attention(backend):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v)

    work = {"t_qkv": lambda: x @ w_qkv, "t_softmax": lambda: torch.softmax(scores, dim=-1),
            "t_math": lambda: attention(SDPBackend.MATH), "t_default": lambda: attention(None)}
    if fused != "none":
        work["t_fused"] = lambda: attention(getattr(SDPBackend, fused))
    for fn in work.values():  # warm-up, outside the ranges
        fn()
    for _ in range(reps):
        for name, fn in work.items():
            torch.cuda.nvtx.range_push(name)
            fn()
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')

with nt.section("3. Transformer ops on the roofline") as s:
    ENV.require("profiler")
    roofs = roof_values()
    cc = ENV.facts.compute_capability
    q, k, v = (torch.randn(B, H, S, DH, device="cuda", dtype=HALF) for _ in range(3))
    why_not = sdpa_unavailable(SDPBackend.FLASH_ATTENTION, q, k, v)
    if why_not is None:
        FUSED.update(label="attention, flash backend", backend=SDPBackend.FLASH_ATTENTION)
    else:
        print(f"  FlashAttention is not available here (needs compute capability >= 8.0 and fp16/bf16; this GPU is "
              f"{cc[0]}.{cc[1]}, inputs {str(HALF).replace('torch.', '')}).\n  PyTorch says: {why_not}")
        why_not_eff = sdpa_unavailable(SDPBackend.EFFICIENT_ATTENTION, q, k, v)
        if why_not_eff is None:
            FUSED.update(label="attention, memory-efficient backend", backend=SDPBackend.EFFICIENT_ATTENTION)
            print("  the fused kernel below is PyTorch's memory-efficient attention instead (not flash)")
        else:
            print(f"  the memory-efficient backend is not available either: {why_not_eff}")
    del q, k, v
    print(f"  sizes: batch {B}, heads {H}, seq {S}, head dim {DH}, d_model {H * DH}, {str(HALF).replace('torch.', '')}")
    model = transformer_model(B, H, S, DH)
    if FUSED["label"]:
        model[FUSED["label"]] = model.pop("fused")
    else:
        model.pop("fused")
    df = transformer_ops(B, H, S, DH).to_dataframe()
    print("  durations: " + nt.rules(ENV.backend))
    fp32_gemms = [k for k in timing(df, MATH)["kernels"] if "f32f32" in k or "sgemm" in k]
    if fp32_gemms:
        model[MATH]["roof"] = "cuda cores"
        print(f"  the math backend's matmuls ran in fp32 ({nt.short_kernel_name(fp32_gemms[0])}): PyTorch upcast the "
              f"{str(HALF).replace('torch.', '')} inputs, so its compute roof is the CUDA cores' fp32 one")

    # DRAM bytes: from the same run (Nsight Compute backend), else from the ncu command line
    measured, ranges = {}, {"t_qkv": QKV, "t_softmax": SOFTMAX_ATT, "t_math": MATH, "t_default": DEFAULT}
    if FUSED["label"]:
        ranges["t_fused"] = FUSED["label"]
    if ENV.backend == "ncu":
        for name in list(model) + [DEFAULT]:
            part = df[df.Annotation == name].set_index("Metric").AvgValue
            measured[name] = part[DRAM_READ] + part[DRAM_WRITE]
        bytes_rules = nt.rules("ncu")
    elif ENV.ncu_path:
        script = ncu_cli.write_script(TRANSFORMER_SCRIPT, "transformer_ops.py", OUT_DIR)
        fused_arg = FUSED["backend"].name if FUSED["backend"] is not None else "none"
        report = ncu_cli.profile_script_report(
            ENV.ncu_path, script, [str(v) for v in (B, H, S, DH, REPS)] + [str(HALF).replace("torch.", ""), fused_arg],
            [TIME, DRAM_READ, DRAM_WRITE], list(ranges), f"{OUT_DIR}/transformer_ops.ncu-rep", show_command=True)
        for rng, name in ranges.items():
            runs = per_run(report, rng, REPS)
            measured[name] = (runs[DRAM_READ] + runs[DRAM_WRITE]).mean()
        bytes_rules = nt.rules("ncu-cli")
    else:
        bytes_rules = "no counter path on this machine (no Nsight Compute backend, no ncu): analytic bytes only"
    print(f"  DRAM bytes: {bytes_rules}")

    rows = {}
    for name, m in model.items():
        t = timing(df, name)
        row = {"time_us": t["mean"] / 1e3, "CI95 +/- us": (t["hi"] - t["mean"]) / 1e3, **place(m, t["mean"], roofs),
               "min MB": m["bytes"] / 1e6, "measured MB": measured.get(name, np.nan) / 1e6, "kernels": len(t["kernels"])}
        row["AI measured"] = m["flops"] / measured[name] if name in measured else np.nan
        rows[name] = row
    table = pd.DataFrame(rows).T
    cols = ["time_us", "CI95 +/- us", "kernels", "TFLOP/s", "min MB", "measured MB", "AI", "AI measured", "ridge", "limited by"]
    fmt_table(table[cols].infer_objects(), "{:,.1f}")

    kernels = {name: timing(df, name)["kernels"] for name in list(model) + [DEFAULT]}
    for name, names in kernels.items():
        print(f"  {name}: {len(names)} kernel(s)")
        for k in names:
            print(f"      {nt.short_kernel_name(k)}")
    twin = [name for name in model if kernels[name] == kernels[DEFAULT]]
    print(f"  PyTorch's default picked the same kernels as: {twin[0] if twin else 'none of the backends above'}")

    tensor_ridge, low_ridge = table.loc[QKV, "ridge"], table.loc[SOFTMAX_ATT, "ridge"]
    nt.claim(table.loc[QKV, "AI"] > tensor_ridge, "the QKV projection sits right of the ridge (compute-bound)",
             f"AI {table.loc[QKV, 'AI']:.0f} vs ridge {tensor_ridge:.0f} FLOP/byte")
    nt.claim(table.loc[SOFTMAX_ATT, "AI"] < min(low_ridge, tensor_ridge), "the attention softmax sits left of the ridge "
             "(memory-bound)", f"AI {table.loc[SOFTMAX_ATT, 'AI']:.2f} vs ridge {min(low_ridge, tensor_ridge):.0f} FLOP/byte")
    if FUSED["label"]:
        f_row, m_row = table.loc[FUSED["label"]], table.loc[MATH]
        nt.claim(f_row["TFLOP/s"] > m_row["TFLOP/s"], f"{FUSED['label']} moves the point up: more FLOP/s than math",
                 f"{f_row['TFLOP/s']:.1f} vs {m_row['TFLOP/s']:.1f} TFLOP/s")
        if measured:
            nt.claim(measured[FUSED["label"]] < measured[MATH], f"{FUSED['label']} moves the point right: it moved "
                     "fewer DRAM bytes than math for the same FLOPs",
                     f"{measured[FUSED['label']] / 1e6:,.0f} vs {measured[MATH] / 1e6:,.0f} MB measured")
        else:
            print("  (right: by construction of the analytic bytes; no counters here to confirm it)")
        verdict = (f"{FUSED['label'].split(', ')[1]} {f_row['TFLOP/s']:.0f} vs math {m_row['TFLOP/s']:.0f} TFLOP/s"
                   + (f", {measured[FUSED['label']] / 1e6:,.0f} vs {measured[MATH] / 1e6:,.0f} MB" if measured else ""))
    else:
        verdict = "no fused attention backend here: the flash point is not drawn"
    TRANSFORMER_POINTS = table
    s.result = (f"QKV AI {table.loc[QKV, 'AI']:.0f} > ridge {tensor_ridge:.0f}; softmax AI "
                f"{table.loc[SOFTMAX_ATT, 'AI']:.2f} < ridge; {verdict}")

# %% [markdown]
# ## 4. The roofline plot
#
# Log-log: arithmetic intensity across, FLOP/s up. Dashed lines are the datasheet's roofs
# (fp32 on CUDA cores, and half-precision tensor cores), solid lines the roofs measured in
# section 1. Every kernel of sections 2 and 3 is a labelled point at its analytic
# intensity; where DRAM counters ran, a hollow marker on the same height shows the intensity
# its measured bytes imply.

# %%
with nt.section("4. The roofline plot") as s:
    ENV.require("profiler")
    roofs = roof_values()
    tables = [t for t in (globals().get("SEED_POINTS"), globals().get("TRANSFORMER_POINTS")) if t is not None]
    if not tables:
        raise nt.Skip("no kernel points: sections 2c and 3 did not run", "see their SKIPPED or FAILED reasons above",
                      needs="profiler")
    points = pd.concat(tables)
    ai = np.logspace(-2, 4.5, 300)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    mroofs = globals().get("ROOFS")
    sheet = ENV.datasheet
    if sheet and sheet.mem_bandwidth_gbs.value:
        sheet_bw = sheet.mem_bandwidth_gbs.value * 1e9
        for peak, label, color in ((sheet.fp16_tflops.value, "datasheet fp16/bf16 tensor", "C0"),
                                   (sheet.fp32_tflops.value, "datasheet fp32", "C7")):
            if peak:
                ax.plot(ai, np.minimum(peak * 1e12, sheet_bw * ai), "--", color=color, lw=1, label=label)
    if mroofs:
        ax.plot(ai, np.minimum(mroofs["tensor"] * 1e12, mroofs["memory"] * 1e9 * ai), "-", color="C3", lw=2,
                label=f"measured: {mroofs['memory']:,.0f} GB/s, {mroofs['tensor']:,.0f} TFLOP/s ({mroofs['tensor_dtype']})")
    for i, (name, p) in enumerate(points.iterrows()):
        y = p["TFLOP/s"] * 1e12
        ax.plot(p["AI"], y, "o", color=f"C{i % 10}", ms=7)
        ax.annotate(name, (p["AI"], y), textcoords="offset points", xytext=(6, 4), fontsize=8)
        if "AI measured" in p and pd.notna(p["AI measured"]):
            ax.plot(p["AI measured"], y, "o", mfc="none", color=f"C{i % 10}", ms=9)
            ax.plot([p["AI measured"], p["AI"]], [y, y], ":", color=f"C{i % 10}", lw=1)
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)"); ax.set_ylabel("FLOP/s")
    ax.set_title(f"Roofline of {ENV.gpu_name}")
    ax.legend(fontsize=8, loc="lower right"); ax.grid(True, which="major", alpha=0.3)
    plt.tight_layout(); plt.show()
    # A point above a *measured* roof is noise around a mean (x * 2 is that roof's own kernel); above the
    # hardware's limits it is a finding: the datasheet FLOP/s, the clock-derived (else datasheet) bandwidth.
    limit_bw = (mroofs or {}).get("clock_memory") or (sheet.mem_bandwidth_gbs.value if sheet else None)
    limit_flops = {"tensor": sheet.fp16_tflops.value if sheet else None, "cuda cores": sheet.fp32_tflops.value if sheet else None}
    above = [name for name, p in points.iterrows()
             if (limit_bw and p["GB/s"] > limit_bw) or (limit_flops.get(p.get("roof")) and p["TFLOP/s"] > limit_flops[p["roof"]])]
    if above:
        print(f"  FINDING: above the hardware's limits (datasheet FLOP/s, {limit_bw or 'unknown'} GB/s): {above} -- "
              "check which bytes they really move (section 3's counters) and the rules they were timed under")
    s.result = (f"{len(points)} kernels on the roofline of {ENV.gpu_name}"
                + (f"; above the hardware's limits: {above}" if above else "; none above the hardware's limits"))

# %% [markdown]
# ## Takeaways
#
# - Compute the arithmetic intensity of a kernel *before* profiling it: FLOPs over the bytes
#   it must move. Against this GPU's ridge point it predicts the limit; the measurement then
#   says how close to that roof the kernel gets.
# - Measure your own roofs. A stream much larger than L2 gives the achievable bandwidth, a
#   large half-precision matmul the achievable tensor throughput; they sit below the
#   datasheet, and the gap is what a real kernel can hope to close.
# - A number above the datasheet is a question, not a rounding error: here the device's own
#   memory clock and bus width give the interface's peak to check against.
# - "Limited by" from counters (SM % vs DRAM %) and from analytic counts over time agree for
#   kernels far from the ridge; use counters when a kernel sits near it, or when you do not
#   know what it does.
# - A fused kernel (flash attention) wins by moving *fewer bytes* for the same FLOPs: its
#   point moves right, then up toward the compute roof.
#
# ## Try it
#
# - Shrink the softmax to fit in L2 (`ROWS = L2 // 4096 // 4`) and run 2a with
#   `cache_control="none"`: a warm L2 can turn its DRAM % into something else entirely.
# - Change `S` in section 3 to 512 and 4096: the math backend's extra bytes grow with s²,
#   the fused kernel's do not.
# - With the Nsight Compute backend, profile the math attention with
#   `replay_mode="range"`: one result for the whole annotated range instead of one per kernel.
#
# Docs: [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html)
# (`metrics`, `combine_kernel_metrics`, `replay_mode`),
# [core concepts](https://docs.nvidia.com/nsight-python/overview/core_concepts.html),
# nsight-python's source (https://github.com/NVIDIA/nsight-python), the Nsight Compute
# [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# (metrics, roofline, replay, cache and clock control).

# %%
nt.summary();
