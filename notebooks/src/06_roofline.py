# %% [markdown]
# # 06 · Compute- or memory-bound? The roofline of *your* GPU
#
# **What you will learn**
# - how to draw this GPU's roofline twice: from the datasheet, and from kernels you measure
#   yourself (streams far larger than L2; one large matmul per precision, fp32 on CUDA cores
#   included);
# - what the **ridge point** (FLOP per byte where a compute roof meets the memory roof) says
#   about a kernel before you profile it, and why each kernel is judged against the roof of
#   *its own* precision and unit;
# - three ways to say what limits a kernel -- the formula, the roofline with measured DRAM
#   bytes, and the hardware counters -- what each one measures, and what a tie looks like;
# - how to combine counters over the kernels of one annotation (`combine_kernel_metrics`):
#   times and bytes add up, percentages of peak are weighted by time;
# - where a Transformer's operations land: the QKV projection, the attention softmax, and
#   attention through PyTorch's math path, FlashAttention and PyTorch's default, with
#   fusion and precision changed one at a time.
#
# | section | needs |
# |---|---|
# | 1. roofs, datasheet and measured | any nsight-python backend (CUPTI too) |
# | 2. limited by what? the seed's three kernels | counters: the Nsight Compute backend, or any `ncu` command line |
# | 3. Transformer ops on the roofline | section 2's measurement; flash attention needs cc ≥ 8.0 |
# | 4. the roofline plot | sections 1 and 2 |
#
# Buffer sizes come from what your GPU reports (its L2, its *free* memory), so the notebook
# runs unchanged on a Colab T4 and on an H200.

# %%
{{SETUP}}

# %% [markdown]
# ## The kernels, written once
#
# Every kernel this notebook measures is in the module below, written once. `roofs` is
# section 1's: streams with four read:write mixes and one matmul per precision. `limits` is
# sections 2 and 3's: the seed's three kernels (an fp16 matmul, `x * 2`, a softmax), then a
# Transformer layer's operations. Each operation runs inside an `nsight.annotate` region
# named after it; `measure` runs an operation once, unmeasured, the first time a process
# meets it (cuBLAS and cuDNN pick their kernels then), so every measured run launches the
# same kernels. The notebook imports the module and profiles it with nsight-python; where
# nsight-python's Nsight Compute backend cannot load, the `ncu` command line runs the same
# file (the printed command shows it).

# %% writefile roofline_kernels.py
"""Notebook 06's kernels: profiled by nsight-python in the notebook, or run by the ncu command line."""
import contextlib

import torch
import torch.nn.functional as F
from nsight import annotate
from torch.nn.attention import SDPBackend, sdpa_kernel

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
STREAMS = {"x.sum()": (1, 0), "y = x * 2": (1, 1), "y = x * 2, clean L2": (1, 1),  # buffers (read, written)
           "y = x + w": (2, 1), "y = addcmul(x, w, v)": (3, 1)}
CLEAN = "y = x * 2, clean L2"
MATH_FP32, MATH_HALF = "attention, math (upcast to fp32)", "attention, math (kept in 16 bit)"
FUSED = {"FLASH_ATTENTION": "attention, flash", "EFFICIENT_ATTENTION": "attention, memory-efficient"}
DEFAULT = "attention, PyTorch's default"
WARM = set()


def measure(ops: dict) -> None:
    """Run each operation inside an annotation named by its key (after one unmeasured first call)."""
    for name, op in ops.items():
        if name not in WARM:
            WARM.add(name)
            op()
        with annotate(name):
            op()


def roofs(n: int, m: int, l2: int, precisions: str) -> None:
    """Section 1: streams over n floats each, and an m x m x m matmul per precision."""
    x, w, v = (torch.randn(n, device="cuda") for _ in range(3))  # made outside the annotations: not measured
    y, scratch = torch.empty_like(x), torch.empty(2 * l2 // 4, device="cuda")
    with annotate("y = x * 2"):  # right after other work (the randn calls)
        torch.mul(x, 2.0, out=y)
    scratch.sum()  # reading twice the L2 of other data writes the dirty lines back now
    with annotate(CLEAN):
        torch.mul(x, 2.0, out=y)
    with annotate("x.sum()"):
        x.sum()
    with annotate("y = x + w"):
        torch.add(x, w, out=y)
    with annotate("y = addcmul(x, w, v)"):
        torch.addcmul(x, w, v, out=y)
    del x, w, v, y, scratch
    mats = {p: torch.randn(m, m, device="cuda", dtype=DTYPES[p]) for p in precisions.split(",")}
    measure({f"{p} matmul": (lambda a=a: a @ a) for p, a in mats.items()})


def attention(q, k, v, backend=None):
    """PyTorch's scaled_dot_product_attention on one backend (None: PyTorch's own choice)."""
    with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v)


def transformer_ops(b: int, h: int, s: int, dh: int, half: str, fused: str) -> None:
    """Section 3: a Transformer layer's QKV projection, attention softmax and attention, in `half`."""
    dt, d = DTYPES[half], h * dh
    x, w_qkv = torch.randn(b * s, d, device="cuda", dtype=dt), torch.randn(d, 3 * d, device="cuda", dtype=dt)
    scores = torch.randn(b, h, s, s, device="cuda", dtype=dt)
    q, k, v = (torch.randn(b, h, s, dh, device="cuda", dtype=dt) for _ in range(3))
    measure({"QKV projection": lambda: x @ w_qkv, "attention softmax": lambda: torch.softmax(scores, dim=-1)})
    measure({MATH_FP32: lambda: attention(q, k, v, "MATH")})  # PyTorch upcasts fp16/bf16 to fp32 here
    if hasattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp"):  # PyTorch >= 2.5
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)  # the same math path, kept in 16 bit
        measure({MATH_HALF: lambda: attention(q, k, v, "MATH")})
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)
    measure({FUSED[fused]: lambda: attention(q, k, v, fused)} if fused in FUSED else {})
    measure({DEFAULT: lambda: attention(q, k, v)})


def limits(n_mm: int, n_vec: int, rows: int, b: int, h: int, s: int, dh: int, half: str, fused: str) -> None:
    """Sections 2 and 3: the seed's three kernels, then a Transformer layer's operations."""
    a = torch.randn(n_mm, n_mm, device="cuda", dtype=torch.float16)
    x, m = torch.randn(n_vec, device="cuda"), torch.randn(rows, 1024, device="cuda")
    measure({"fp16 matmul": lambda: a @ a, "x * 2": lambda: x * 2.0,
             "softmax [rows x 1024]": lambda: torch.softmax(m, dim=-1)})
    transformer_ops(b, h, s, dh, half, fused)


def sdpa_unavailable(backend: str, half: str, h: int, dh: int) -> str | None:
    """None if this SDPA backend runs here on `half` inputs; else PyTorch's error."""
    q = torch.randn(1, h, 256, dh, device="cuda", dtype=DTYPES[half])
    try:
        attention(q, q, q, backend)
    except RuntimeError as exc:  # "No available kernel"; PyTorch gives its reasons as warnings just above
        return str(exc).strip().splitlines()[0]


if __name__ == "__main__":  # what the ncu command line runs (the printed command shows it)
    from nspy_tutorial import ncu_cli
    ncu_cli.replay(globals())

# %%
import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import roofline_kernels as rk
import torch
from scipy import stats

from nspy_tutorial import ncu_cli

SILENT = nsight.VerbosityLevel.SILENT
TIME, DRAM_BYTES = "gpu__time_duration.sum", "dram__bytes.sum"
SM_PCT, DRAM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"
BOUND_AT, NEAR = 60, 10  # % of its roof to call a kernel bound by it; counters closer than NEAR points are a tie
MiB, ROOFS, LIMITS = 2**20, None, None
if ENV.facts:
    FREE, L2 = torch.cuda.mem_get_info()[0], ENV.facts.l2_bytes  # free memory: the GPU may be shared
    STREAM_BYTES = int(min(max(16 * L2, 256 * MiB), FREE // 16)) // MiB * MiB  # 16x the L2, at most 1/16 free
    N_STREAM, ROWS = STREAM_BYTES // 4, STREAM_BYTES // 4 // 1024  # floats; softmax rows of 1024 floats
    M_ROOF = 8192 if 3 * 4 * 8192**2 <= FREE // 8 else 4096  # the matmuls for the compute roofs
    HALF = "bf16" if ENV.facts.compute_capability >= (8, 0) else "fp16"  # no bf16 tensor cores before Ampere
    PRECISIONS = sorted({"fp16", "fp32", HALF})
    B, H, S, DH = 4, 16, 2048, 128  # batch, heads, sequence, head dimension (d_model = H * DH)
    while B > 1 and 24 * B * H * S * S > FREE // 2:  # the math path's fp32 scores and probabilities, twice
        B //= 2
    print(f"free {FREE / 2**30:.1f} GiB, L2 {L2 / MiB:.0f} MiB -> streams of {STREAM_BYTES / MiB:,.0f} MiB, "
          f"matmuls {M_ROOF}^3 in {PRECISIONS}; attention batch {B}, {H} heads, seq {S}, head dim {DH}, {HALF}")


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def show(table: pd.DataFrame, cols: list) -> None:
    print(table[cols].to_string(float_format=fmt))



# %% [markdown]
# ## 1. This GPU's roofs: the datasheet, and what it really does
#
# A roofline has two kinds of roof. **Compute**: the most FLOP per second the GPU executes
# -- one roof per precision and unit (fp16 and bf16 on tensor cores, fp32 on CUDA cores).
# **Memory**: the most bytes per second DRAM delivers. A kernel that performs *F* FLOPs and
# moves *B* bytes cannot finish faster than `max(F / P, B / W)` for its compute roof *P* and
# the memory roof *W*; which term wins depends on its **arithmetic intensity** `AI = F / B`
# (FLOP per byte) against the **ridge point** `P / W`.
#
# The datasheet gives the peaks (looked up by your GPU's name). We also *measure* them, ten
# runs each (mean, 95 % Student-t interval, fastest run):
#
# - **bandwidth**: streams over buffers at least 16× larger than L2, with four read:write
#   mixes: `x.sum()` (read only), `y = x * 2` (1 read : 1 write), `y = x + w` (2 : 1),
#   `y = addcmul(x, w, v)` (3 : 1). Bytes come from the tensor sizes. The write mixes differ
#   because DRAM turns its bus around between reads and writes. `x.sum()` is different in
#   kind: a reduction kernel (blocks sum their slices, then the partial sums are combined),
#   so its rate is how fast PyTorch's reduction streams, not a read-only limit of DRAM. The
#   **memory roof is the fastest of the four**: the best this GPU showed you, under the rules
#   printed above the table;
# - **compute**: one large matmul per precision, FLOPs = 2·n³. fp32 runs on CUDA cores with
#   PyTorch's default (no TF32), the same setting the math attention path of section 3 runs
#   under.
#
# **When a stream beats the datasheet**, two explanations can be checked:
#
# 1. *The datasheet is rounded.* NVML reports the memory clock and bus width;
#    `2 × clock × bus width / 8` is the interface's peak (e.g. an H100 SXM: 2 × 2,619 MHz ×
#    5,120 bit / 8 = 3,352 GB/s, the datasheet's 3.35 TB/s). No stream may beat *this*.
# 2. *Writes still in L2 when the kernel ends.* L2 is write-back: up to one L2 of a kernel's
#    writes can still sit there when it ends. A kernel that starts with a clean L2 does not
#    pay for them; one that follows other work pays for its predecessor's. Which streams
#    start clean depends on the rules: **the CUPTI backend does not flush**, so only the
#    `clean L2` rerun (after reading a scratch buffer twice the L2) starts clean; **under
#    Nsight Compute (`cache_control="all"`) every stream starts with a clean L2**, and the
#    two `x * 2` rows differ only by noise. A read-only stream has no writes to hide.

# %%
def roof_table(table: pd.DataFrame, stream_bytes: int, m: int, sheet) -> pd.DataFrame:
    """GB/s of each stream and TFLOP/s of each matmul: mean, 95 % Student-t interval, fastest run."""
    rows = {}
    for name, r in table[table.Metric == TIME].set_index("Annotation").iterrows():
        stream = name in rk.STREAMS
        work = sum(rk.STREAMS[name]) * stream_bytes if stream else 2 * m**3 / 1e3  # per ns: GB/s or TFLOP/s
        half = stats.t.ppf(0.975, r.NumRuns - 1) * r.StdDev / np.sqrt(r.NumRuns)
        peak = (sheet.mem_bandwidth_gbs if stream else sheet.peak_tflops(name.split()[0])).value if sheet else None
        rows[name] = {"unit": "GB/s" if stream else "TFLOP/s", "mean": work / r.AvgValue, "CI95 low": work / (r.AvgValue + half),
                      "CI95 high": work / (r.AvgValue - half), "fastest run": work / r.MinValue, "datasheet": peak or np.nan}
    out = pd.DataFrame(rows).T.infer_objects()
    out["% of datasheet"] = 100 * out["mean"] / out["datasheet"]
    return out


with nt.section("1. This GPU's roofs: datasheet and measured") as s:
    ENV.require("profiler")
    profile = nsight.analyze.kernel(runs=10, combine_kernel_metrics=lambda x, y: x + y, thermal_mode="off", verbosity=SILENT)
    table = profile(rk.roofs)(N_STREAM, M_ROOF, L2, ",".join(PRECISIONS)).to_dataframe()
    print("  " + nt.rules(ENV.backend))
    t, sheet = roof_table(table, STREAM_BYTES, M_ROOF, ENV.datasheet), ENV.datasheet
    show(t, list(t.columns))
    mhz, bits = ENV.facts.max_mem_clock_mhz, ENV.facts.memory_bus_width_bits  # NVML: this device's own
    clock_peak = 2 * mhz * bits / 8 / 1e3 if mhz and bits else np.nan  # GB/s: data moves twice per memory clock
    print(f"  the device's own DRAM peak: 2 x {mhz} MHz x {bits} bit / 8 = {clock_peak:,.0f} GB/s; datasheet "
          f"{sheet.mem_bandwidth_gbs if sheet else 'unknown'}")
    limits = t["datasheet"].where(t.unit == "TFLOP/s", clock_peak)  # the hardware's: datasheet FLOP/s, clock-derived GB/s
    for name, r in t[limits.notna()].iterrows():
        nt.claim(r["mean"] <= limits[name], f"{name}: the mean stays at or below the hardware's peak",
                 f"{r['mean']:,.0f} vs {limits[name]:,.0f} {r.unit}")
    print(f"  one L2 is {100 * L2 / (2 * STREAM_BYTES):.1f} % of the bytes y = x * 2 moves; the clean-L2 rerun changed "
          f"its rate by {100 * (t.loc[rk.CLEAN, 'mean'] / t.loc['y = x * 2', 'mean'] - 1):+.1f} %")
    clean = ENV.backend == "ncu"  # cache_control="all": every kernel starts with a clean L2
    for name, r in t[(t.unit == "GB/s") & (t["% of datasheet"] > 100)].iterrows():
        print(f"  FINDING: {name} is {r['% of datasheet'] - 100:+.1f} % above the datasheet; started with a clean L2: "
              f"{'yes' if clean or name == rk.CLEAN else 'no'}; writes: {'yes' if rk.STREAMS[name][1] else 'no'}; "
              f"the clock-derived peak is {clock_peak / r.datasheet - 1:+.1%} from the datasheet")
    steady = t.loc[[n for n in rk.STREAMS if n != rk.CLEAN], "mean"]  # the roofs used below (clean-L2 rerun left out)
    ROOFS = {"memory": steady.max(), "memory stream": steady.idxmax(), "clock memory": clock_peak,
             **{p: t.loc[f"{p} matmul", "mean"] for p in PRECISIONS}}
    ridges = {p: 1e3 * ROOFS[p] / ROOFS["memory"] for p in PRECISIONS}
    print(f"  memory roof: {ROOFS['memory']:,.0f} GB/s ({ROOFS['memory stream']}); ridge points (FLOP/byte): "
          + ", ".join(f"{p} {r:.0f}" for p, r in ridges.items()))
    s.result = (f"memory {ROOFS['memory']:,.0f} GB/s; " + ", ".join(f"{p} {ROOFS[p]:,.0f} TFLOP/s (ridge {ridges[p]:.0f})"
                                                                     for p in PRECISIONS))

# %% [markdown]
# ## 2. The seed's three kernels: limited by compute or by memory?
#
# An fp16 4096³ matmul, `x * 2` over the stream buffer, and a softmax over a [rows × 1024]
# fp32 matrix as large as that buffer. Each kernel is judged against the roof of **its own
# precision and unit**: the fp16 matmul against the measured fp16 roof; `x * 2` and the
# softmax run in fp32 on CUDA cores, so against the measured fp32 roof. Three ways:
#
# 1. **The formula**: FLOPs and the bytes the kernel must move, counted by hand; its AI
#    against the ridge. Nothing is measured: the time cancels (`(F/t)/P > (B/t)/W` exactly
#    when `F/B > P/W`), so any verdict "from FLOPs and bytes over the measured time" *is*
#    this ridge comparison. It is the prediction.
# 2. **The roofline with measured bytes**: the same FLOPs over the DRAM bytes the counter
#    `dram__bytes.sum` saw, against the same ridge; and the **% of its roof**: the time the
#    roofline allows, `max(F / P, B / W)` with the measured *B*, over the measured time. At
#    `BOUND_AT` % or more (set in the code above) the kernel is *bound* by that roof; below
#    it, **limited by neither** (latency, occupancy, a chain of small kernels) -- a verdict
#    in its own right. More than the whole roof means it beat the roof section 1 measured
#    under section 1's rules.
# 3. **The counters**: `sm__throughput.avg.pct_of_peak_sustained_elapsed` is the *busiest
#    unit* of the SMs (tensor pipe, FMA, ALU, load/store, ...) as a % of its peak -- not the
#    share of FLOP capacity used: a softmax can keep load/store and ALU busy while using a
#    sliver of the FLOPs. `dram__throughput...` is DRAM's. The larger names the limit,
#    unless they are within `NEAR` points (a **tie**), or both are below `BOUND_AT` (neither).
#
# The checks: the measured intensity falls on the side of the ridge the formula predicted,
# and the counters name the limit the roofline names wherever both decide.
#
# **One measurement for sections 2 and 3.** Counters need Nsight Compute: nsight-python's
# backend where it is active, else the `ncu` command line on the same module, which returns
# nsight-python's own table. One call measures the kernels of both sections, two runs
# each: every run replays some thirty kernels
# over gigabyte buffers (the section's seconds are mostly that), replayed with flushed caches
# the counters barely vary from run to run, and two still give a (wide) Student-t interval;
# section 1 measured the run-to-run spread. When an
# annotation launches several kernels, `combine` folds them: times and bytes add up,
# percentages are weighted by duration (nsight-python hands it two kernels' metric arrays in
# the order of `metrics=[...]`). In that table kernel names are bare function names
# (`vectorized_elementwise_kernel`, `flash_fwd_kernel`, cuBLAS's `nvjet_...`, sometimes just
# `Kernel2`): no template arguments, so no precision; the notebook never reads precision from
# a name.

# %%
def combine(x, y):
    """combine_kernel_metrics for [time, SM %, DRAM %, DRAM bytes]: add times and bytes, weight the %s by time."""
    t = x[0] + y[0]
    return np.array([t, (x[1] * x[0] + y[1] * y[0]) / t, (x[2] * x[0] + y[2] * y[0]) / t, x[3] + y[3]])


def kernel_model(n_mm, n_vec, rows, b, h, s, dh, half, fused, e=2) -> dict:
    """Per annotation: FLOPs, the bytes the formula says it moves, its roof. e: bytes per 16-bit element."""
    d, sc, qkvo = h * dh, b * h * s * s, 4 * b * h * s * dh
    att = 4 * sc * dh + 5 * sc  # QK^T and PV (2 FLOP per multiply-add), softmax (5 per score)
    return {"fp16 matmul": (2 * n_mm**3, 2 * 3 * n_mm**2, "fp16"),  # read A and B, write C
            "x * 2": (n_vec, 4 * 2 * n_vec, "fp32"),  # read x, write y
            "softmax [rows x 1024]": (5 * rows * 1024, 4 * 2 * rows * 1024, "fp32"),  # max, sub, exp, sum, div
            "QKV projection": (2 * b * s * d * 3 * d, e * (b * s * d + d * 3 * d + b * s * 3 * d), half),
            "attention softmax": (5 * sc, e * 2 * sc, "fp32"),
            rk.MATH_FP32: (att, e * qkvo + 4 * 4 * sc, "fp32"),  # four passes over fp32 scores
            rk.MATH_HALF: (att, e * qkvo + e * 4 * sc, half),  # four passes over 16-bit scores
            rk.FUSED.get(fused, "fused"): (att, e * qkvo, half),  # read q, k, v, write the output
            rk.DEFAULT: (att, e * qkvo, half)}


def place(table: pd.DataFrame, model: dict, roofs: dict) -> pd.DataFrame:
    """Each annotation of nsight-python's table against the roof of its own precision and unit."""
    w = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue", sort=False)
    t = table[table.Metric == TIME].set_index("Annotation")
    names = [n for n in model if n in w.index]
    w, t, flops, formula = w.loc[names], t.loc[names], *(pd.Series({n: model[n][i] for n in names}) for i in (0, 1))
    out = pd.DataFrame({"kernels": t.Kernel.str.count(r"\|") + 1, "time_us": t.AvgValue / 1e3,
                        "± us": stats.t.ppf(0.975, t.NumRuns - 1) * t.StdDev / np.sqrt(t.NumRuns) / 1e3,
                        "roof": [model[n][2] for n in names], "kernel names": t.Kernel})
    peak, bw, sec, moved = out.roof.map(roofs) * 1e12, roofs["memory"] * 1e9, w[TIME] / 1e9, w[DRAM_BYTES]
    out["TFLOP/s"], out["GB/s"], out["formula MB"], out["measured MB"] = flops / sec / 1e12, moved / sec / 1e9, formula / 1e6, moved / 1e6
    out["AI formula"], out["AI measured"], out["ridge"] = flops / formula, flops / moved, peak / bw
    out["% of roof"] = 100 * np.maximum(flops / peak, moved / bw) / sec  # the time the roofline allows / the time taken
    out["formula side"], out["side"] = (np.where(out[ai] > out.ridge, "compute", "memory") for ai in ("AI formula", "AI measured"))
    out["verdict"] = [f"{s}-bound" if p >= BOUND_AT else f"neither ({s} side)" for s, p in zip(out.side, out["% of roof"])]
    out["SM %"], out["DRAM %"] = w[SM_PCT], w[DRAM_PCT]
    out["counters"] = ["neither" if max(a, b) < BOUND_AT else "tie" if abs(a - b) < NEAR else "SM" if a > b else "DRAM"
                       for a, b in zip(out["SM %"], out["DRAM %"])]
    return out


SEED = ["fp16 matmul", "x * 2", "softmax [rows x 1024]"]
with nt.section("2. Limited by what? The seed's three kernels, three ways") as s:
    ENV.require("profiler")
    roofs = nt.needs(ROOFS, section="1")
    why_not = {b: rk.sdpa_unavailable(b, HALF, H, DH) for b in rk.FUSED}  # flash first, else memory-efficient
    FUSED_BACKEND = next((b for b, why in why_not.items() if why is None), "none")
    print("".join(f"  {rk.FUSED[b]} is not available here: {why}\n" for b, why in why_not.items() if why), end="")
    CONFIG = (4096, N_STREAM, ROWS, B, H, S, DH, HALF, FUSED_BACKEND)
    SETTINGS = dict(runs=2, metrics=[TIME, SM_PCT, DRAM_PCT, DRAM_BYTES], combine_kernel_metrics=combine,
                    thermal_mode="off", verbosity=SILENT)
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend (Colab after notebook 01)
        table, source = nsight.analyze.kernel(configs=[CONFIG], **SETTINGS)(rk.limits)().to_dataframe(), "ncu"
    else:  # an older ncu: the ncu command line on the same file
        ENV.require("ncu-cli")
        table, source = ncu_cli.nsight_table("roofline_kernels.py", rk.limits, ncu=ENV.ncu_path, configs=[CONFIG],
                                             **SETTINGS), "ncu-cli"
    print("  " + nt.rules(source, cache_control="all", clock_control="none"))  # nsight-python's defaults, both tools
    LIMITS = place(table, kernel_model(*CONFIG), roofs)
    seed = LIMITS.loc[SEED]
    show(seed, ["time_us", "± us", "roof", "AI formula", "AI measured", "ridge", "% of roof", "verdict", "SM %", "DRAM %",
                "counters"])
    for name, r in seed.iterrows():
        nt.claim(r.side == r["formula side"], f"{name}: the measured intensity is on the {r['formula side']} side of the "
                 "ridge, as the formula predicts", f"AI {fmt(r['AI measured'])} vs ridge {fmt(r.ridge)} ({r.roof})")
        if r.counters in ("SM", "DRAM") and r.verdict.endswith("bound"):
            nt.claim({"SM": "compute", "DRAM": "memory"}[r.counters] == r.side, f"{name}: the counters name the limit "
                     "the roofline names", f"SM {r['SM %']:.0f} %, DRAM {r['DRAM %']:.0f} %; {r.verdict}")
        else:
            print(f"  {name}: not compared: counters {r.counters}, roofline {r.verdict}")
    s.result = "; ".join(f"{n}: {r.verdict}, {r['% of roof']:.0f} % of its {r.roof} roof, counters {r.counters}"
                         for n, r in seed.iterrows())

# %% [markdown]
# ## 3. Transformer operations on the roofline
#
# Seed 002's table: the QKV projection is compute-bound (a GEMM on tensor cores), the
# attention softmax memory- or latency-bound (little arithmetic per byte), and
# FlashAttention is fast because it **moves the attention point right and up**: it never
# writes the [batch, heads, seq, seq] scores to DRAM, so the same FLOPs need far fewer
# bytes. We check each on your GPU, from the table section 2 measured.
#
# | operation | FLOPs | bytes the formula counts (e bytes per element) | roof |
# |---|---|---|---|
# | QKV projection `[b·s, d] @ [d, 3d]` | 2 · b·s · d · 3d | e · (b·s·d + d·3d + b·s·3d) | its 16-bit precision |
# | attention softmax over `[b, h, s, s]` | 5 · b·h·s² | e · 2 · b·h·s² | fp32 (CUDA cores) |
# | attention, fused (flash, or PyTorch's default) | 4 · b·h·s²·dh + 5 · b·h·s² | e · 4 · b·h·s·dh (q, k, v, output) | 16-bit |
# | attention, math, kept in 16 bit | the same | the fused bytes + e · 4 · b·h·s² | 16-bit |
# | attention, math, upcast to fp32 | the same | the fused bytes + 4 · 4 · b·h·s² | fp32 (CUDA cores) |
#
# **Precision without kernel names.** PyTorch's math path upcasts fp16/bf16 inputs to fp32
# (its GEMMs then run on CUDA cores) unless `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`
# (PyTorch 2.5 and later) keeps it in 16 bit. So the notebook runs it both ways and knows
# each row's precision from the inputs' dtype and that flag; the DRAM counters confirm it
# (fp32 scores move twice the bytes). Then **flash vs math kept in 16 bit is fusion alone**;
# flash vs math upcast to fp32 changes **precision + fusion** at once.
#
# **Regions, not points.** The math path is a chain of kernels (casts, scaling, two batched
# GEMMs, a softmax with its masking). Its dot on the roofline is a time-weighted blend, not
# one kernel's point; the cell splits it by the formula: its two GEMMs at their roof, its
# softmax pass at the memory roof, against the time it took.
#
# **"formula MB", not "minimum MB"**: measured bytes can fall *below* the formula by up to
# one L2: under Nsight Compute each kernel starts with a clean L2, and writes still held in
# L2 when it ends reach DRAM later, outside the kernel's counters. More than one L2 below
# would mean the formula is wrong.
#
# FlashAttention in PyTorch needs compute capability ≥ 8.0 and fp16/bf16; where it is not
# available (a T4 is 7.5) the cell says why in PyTorch's words and uses the memory-efficient
# backend, labelled as such. PyTorch's default is measured too, with its time and kernels.

# %%
with nt.section("3. Transformer ops on the roofline") as s:
    ENV.require("profiler")
    lim, roofs = nt.needs(LIMITS, section="2"), nt.needs(ROOFS, section="1")
    ops = lim.drop(index=SEED)
    show(ops, ["kernels", "time_us", "± us", "roof", "TFLOP/s", "formula MB", "measured MB", "AI formula", "AI measured",
               "ridge", "% of roof", "verdict"])
    for name in [n for n in ops.index if n.startswith("attention,")]:
        print(f"  {name} ran: {', '.join(dict.fromkeys(ops.loc[name, 'kernel names'].split('|')))}")
    if rk.MATH_HALF not in ops.index:
        print(f"  torch {torch.__version__} has no allow_fp16_bf16_reduction_math_sdp: fusion alone is not shown")
    sc = B * H * S * S
    for name, r in ops[ops.index.str.startswith("attention, math")].iterrows():  # e: bytes per score
        e = 4 if r.roof == "fp32" else 2
        gemm, soft = 4 * sc * DH / (roofs[r.roof] * 1e6), e * 2 * sc / (roofs["memory"] * 1e3)  # us
        print(f"  {name}: {r.kernels} kernels, not one point: at their roofs its two GEMMs need >= {gemm:,.0f} us "
              f"({r.roof}), its softmax pass >= {soft:,.0f} us (memory); it took {r.time_us:,.0f} us, so the parts "
              f"in sequence reach {100 * (gemm + soft) / r.time_us:.0f} % of the time the roofline allows")
    for name, r in lim.iterrows():
        nt.claim(r["measured MB"] >= r["formula MB"] - L2 / 1e6, f"{name}: measured bytes are at most one L2 below the "
                 "formula", f"{r['measured MB']:,.1f} vs {r['formula MB']:,.1f} MB, L2 {L2 / 1e6:.0f} MB")
    for name, side in (("QKV projection", "compute"), ("attention softmax", "memory")):
        nt.claim(ops.loc[name, "side"] == side, f"{name}: its measured intensity is on the {side} side of its ridge",
                 f"AI {fmt(ops.loc[name, 'AI measured'])} vs ridge {fmt(ops.loc[name, 'ridge'])} ({ops.loc[name, 'roof']})")
    fused = rk.FUSED.get(FUSED_BACKEND)
    for before, after, label in ((rk.MATH_HALF, fused, "fusion alone"), (rk.MATH_FP32, fused, "precision + fusion"),
                                 (rk.MATH_FP32, rk.MATH_HALF, "precision alone")):
        if {before, after} <= set(ops.index):
            x, y = ops.loc[before], ops.loc[after]
            nt.claim(y["measured MB"] < x["measured MB"] and y.time_us < x.time_us, f"{label}: {after} moves the "
                     f"point right and up from {before}", f"{x['measured MB'] / y['measured MB']:.1f}x fewer DRAM bytes, "
                     f"{x.time_us / y.time_us:.1f}x faster")
    s.result = "; ".join(f"{n}: {r.verdict} at {r['% of roof']:.0f} % of its {r.roof} roof, {r.time_us:,.0f} us"
                         for n, r in ops.iterrows())

# %% [markdown]
# ## 4. The roofline plot
#
# Log-log: arithmetic intensity across, FLOP/s up. Solid lines are the roofs measured in
# section 1, one per precision; dashed lines the datasheet's. Each kernel of sections 2 and
# 3 is a numbered dot at its *measured* intensity (the legend names it), in the colour of
# the roof it is judged against; a hollow ring on the same height marks the formula's
# intensity. The check: no kernel beats the hardware (its precision's datasheet peak, the
# clock-derived DRAM peak).

# %%
with nt.section("4. The roofline plot") as s:
    ENV.require("profiler")
    points, roofs = nt.needs(LIMITS, section="2"), nt.needs(ROOFS, section="1")
    sheet, ai, colors = ENV.datasheet, np.logspace(-2, 4.5, 300), {"fp16": "C0", "bf16": "C1", "fp32": "C2"}
    fig, ax = plt.subplots(figsize=(11, 6))
    for p in PRECISIONS:
        ax.plot(ai, np.minimum(roofs[p] * 1e12, roofs["memory"] * 1e9 * ai), "-", color=colors[p], label=f"measured {p} roof")
        if sheet and sheet.peak_tflops(p).value and sheet.mem_bandwidth_gbs.value:
            ax.plot(ai, np.minimum(sheet.peak_tflops(p).value * 1e12, sheet.mem_bandwidth_gbs.value * 1e9 * ai), "--",
                    color=colors[p], lw=0.8, label=f"datasheet {p}")
    for i, (name, r) in enumerate(points.iterrows(), 1):
        y, angle = r["TFLOP/s"] * 1e12, 2.4 * i  # labels placed round their dots: two dots in one place stay readable
        ax.plot(r["AI measured"], y, "o", color=colors[r.roof], ms=6)
        ax.plot(r["AI formula"], y, "o", mfc="none", color=colors[r.roof], ms=9, alpha=0.6)
        ax.annotate(str(i), (r["AI measured"], y), textcoords="offset points", xytext=(18 * np.cos(angle), 18 * np.sin(angle)),
                    fontsize=8, ha="center", va="center", arrowprops=dict(arrowstyle="-", lw=0.5, color="gray"))
        ax.plot([], [], " ", label=f"{i}: {name}")
    ax.plot([], [], "o", mfc="none", color="gray", label="ring: the formula's intensity")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per DRAM byte)", ylabel="FLOP/s",
           title=f"Roofline of {ENV.gpu_name}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)); ax.grid(True, which="major", alpha=0.3)
    plt.tight_layout(); plt.show()
    for name, r in points.iterrows():
        peak = sheet.peak_tflops(r.roof).value if sheet else None
        nt.claim((peak is None or r["TFLOP/s"] <= peak) and not r["GB/s"] > roofs["clock memory"],
                 f"{name}: below the hardware's peaks", f"{r['TFLOP/s']:,.1f} TFLOP/s ({r.roof} datasheet {peak}), "
                 f"{r['GB/s']:,.0f} GB/s (clock-derived {roofs['clock memory']:,.0f})")
    s.result = f"{len(points)} kernels on the roofline of {ENV.gpu_name}, none above the hardware's peaks"

# %% [markdown]
# ## Takeaways
#
# - Compute the arithmetic intensity of a kernel *before* profiling it: FLOPs over the
#   bytes it must move, against the ridge of the roof of *its* precision and unit.
# - Measure your own roofs: a stream far larger than L2 for bandwidth, a large matmul per
#   precision for compute. The gap to the datasheet is what no real kernel closes.
# - A number above the datasheet is a question: the device's own memory clock and bus
#   width, and the L2 state each stream started in, answer it.
# - The verdict needs two numbers: which side of the ridge (measured intensity), and how
#   close to that roof (% of roof). Far below both roofs is a verdict too: limited by
#   neither. Counters say which unit was busiest -- not FLOP use -- and can tie.
# - A fused kernel (flash attention) wins by moving *fewer bytes* for the same FLOPs: its
#   point moves right, then up. Compare it with the math path at equal precision before
#   crediting fusion.
#
# ## Try it
#
# - Change `S` to 512 and 4096: the math path's extra bytes grow with s², the fused
#   kernel's do not.
# - Shrink the softmax to fit in L2 and profile it with `cache_control="none"`: a warm L2
#   moves its point off the DRAM roofline.
# - With the Nsight Compute backend, profile the math attention with `replay_mode="range"`:
#   one result for the whole annotated range instead of one per kernel.
#
# Docs: [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html)
# (`metrics`, `combine_kernel_metrics`, `replay_mode`),
# [core concepts](https://docs.nvidia.com/nsight-python/overview/core_concepts.html),
# nsight-python's source (https://github.com/NVIDIA/nsight-python), the Nsight Compute
# [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# (metrics, roofline, replay, cache and clock control).

# %%
nt.summary();
