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
# - how far a kernel is from the datasheet, split in two: the clock it ran at
#   (`gpc__cycles_elapsed.avg.per_second`) and the kernel itself at that clock;
# - how to combine counters over the kernels of one annotation (`combine_kernel_metrics`):
#   times and bytes add up, percentages and clocks are weighted by time;
# - where a Transformer's operations land: the QKV projection, the attention softmax, and
#   attention through PyTorch's math path (op by op), FlashAttention and PyTorch's default,
#   with fusion and precision changed one at a time.
#
# | section | needs |
# |---|---|
# | 1. roofs, datasheet and measured | any nsight-python backend (CUPTI too) |
# | 2. limited by what? three kernels | counters: the Nsight Compute backend, or any `ncu` command line |
# | 3. Transformer ops on the roofline | section 2's measurement; flash attention needs cc ≥ 8.0 |
# | 4. the roofline plot | sections 1 and 2 |
#
# Buffer sizes come from what your GPU reports (its L2, its *free* memory), so the notebook
# runs unchanged on a Colab T4 and on an H200. On Colab this notebook is a fresh runtime of
# its own: the setup cell below installs what it needs (run again, it skips what is there).

# %%
{{SETUP}}

# %% [markdown]
# ## The kernels, written once
#
# Every kernel this notebook measures is in the module below, written once. `roofs` is
# section 1's: streams with three read:write mixes, a read-only reduction, and one matmul per
# precision (their order rotates from run to run, so each precision runs first in turn).
# `limits` is sections 2 and 3's: the three kernels of the tutorial this series grew from (an
# fp16 matmul, `x * 2`, a softmax), then a Transformer layer's operations. Each operation runs
# inside an `nsight.annotate` region named after it; `measure` runs an operation once,
# unmeasured, the first time a process meets it (cuBLAS and cuDNN pick their kernels then),
# so every measured run launches the same kernels. `EachOp` runs PyTorch's math attention a
# second time with every operation PyTorch's dispatcher sees in an annotation of its own, so
# the table also has that region op by op. The notebook imports the module and profiles it
# with nsight-python; where nsight-python's Nsight Compute backend cannot load, the `ncu`
# command line runs the same file (the printed command shows it).

# %% writefile roofline_kernels.py
"""Notebook 06's kernels: profiled by nsight-python in the notebook, or run by the ncu command line."""
import contextlib
import itertools
from functools import partial

import torch
import torch.nn.functional as F
from nsight import annotate
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
CLEAN = "y = x * 2, clean L2"
STREAMS = {
    "x.sum()": (1, 0),
    "y = x * 2": (1, 1),
    CLEAN: (1, 1),
    "y = x + w": (2, 1),
    "y = addcmul(x, w, v)": (3, 1),
}
MATH_FP32, MATH_HALF, DEFAULT = (
    "attention, math (upcast to fp32)",
    "attention, math (kept in 16 bit)",
    "attention, PyTorch's default",
)
FUSED = {
    "FLASH_ATTENTION": "attention, flash",
    "EFFICIENT_ATTENTION": "attention, memory-efficient",
}
WARM, CALLS = set(), itertools.count()


def measure(
    ops: dict,
) -> None:  # each operation inside an annotation named by its key, after one unmeasured first call
    for name, op in ops.items():
        if name not in WARM:
            WARM.add(name)
            op()
        with annotate(name):
            op()


class EachOp(
    TorchDispatchMode
):  # every operation PyTorch's dispatcher runs, in an annotation of its own: `<region>: 03 bmm`
    def __init__(self, region: str):
        super().__init__()
        self.region, self.count = region, itertools.count(1)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        with annotate(f"{self.region}: {next(self.count):02d} {func.overloadpacket.__name__}"):
            return func(
                *args, **(kwargs or {})
            )  # a view launches no kernel: its annotation stays empty


def roofs(
    n: int, m: int, l2: int, precisions: str
) -> None:  # section 1: streams of n floats, an m³ matmul per precision
    x, w, v = (
        torch.randn(n, device="cuda") for _ in range(3)
    )  # made outside the annotations: not measured
    y, scratch = torch.empty_like(x), torch.empty(2 * l2 // 4, device="cuda")
    for name, op in {
        "y = x * 2": partial(torch.mul, x, 2.0, out=y),
        CLEAN: partial(torch.mul, x, 2.0, out=y),
        "x.sum()": x.sum,
        "y = x + w": partial(torch.add, x, w, out=y),
        "y = addcmul(x, w, v)": partial(torch.addcmul, x, w, v, out=y),
    }.items():
        if (
            name == CLEAN
        ):  # the first x * 2 ran right after other work (the randn calls); this one does not:
            scratch.sum()  # reading twice the L2 of other data writes the dirty lines back now
        with annotate(name):
            op()
    del x, w, v, y, scratch
    k = next(CALLS) % len(
        ps := precisions.split(",")
    )  # rotated by one each run: each precision first in turn
    mats = {p: torch.randn(m, m, device="cuda", dtype=DTYPES[p]) for p in ps[k:] + ps[:k]}
    measure({f"{p} matmul": (lambda a=a: a @ a) for p, a in mats.items()})


def attention(
    q, k, v, backend=None
):  # PyTorch's scaled_dot_product_attention on one backend (None: PyTorch's choice)
    with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v)


def limits(
    n_mm: int, n_vec: int, rows: int, b: int, h: int, s: int, dh: int, half: str, fused: str
) -> None:
    """Sections 2 and 3: three kernels of different character, then a Transformer layer's operations in `half`."""
    a = torch.randn(n_mm, n_mm, device="cuda", dtype=torch.float16)
    vec, m = torch.randn(n_vec, device="cuda"), torch.randn(rows, 1024, device="cuda")
    measure(
        {
            "fp16 matmul": lambda: a @ a,
            "x * 2": lambda: vec * 2.0,
            "softmax [rows x 1024]": lambda: torch.softmax(m, dim=-1),
        }
    )
    dt, d = DTYPES[half], h * dh
    x, w_qkv, scores = (
        torch.randn(*shape, device="cuda", dtype=dt)
        for shape in ((b * s, d), (d, 3 * d), (b, h, s, s))
    )
    q, k, v = (torch.randn(b, h, s, dh, device="cuda", dtype=dt) for _ in range(3))
    measure(
        {
            "QKV projection": lambda: x @ w_qkv,
            "attention softmax": lambda: torch.softmax(scores, dim=-1),
        }
    )
    for name in (
        MATH_FP32,
        MATH_HALF,
    ):  # PyTorch upcasts fp16/bf16 to fp32 unless told to keep them (PyTorch 2.5+)
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(name == MATH_HALF)
        measure({name: lambda: attention(q, k, v, "MATH")})
        with EachOp(name):  # the same path again, op by op
            attention(q, k, v, "MATH")
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)
    measure({FUSED[fused]: lambda: attention(q, k, v, fused)} if fused in FUSED else {})
    measure({DEFAULT: lambda: attention(q, k, v)})


def sdpa_unavailable(backend: str, half: str, h: int, dh: int) -> str | None:
    """None if this SDPA backend runs here on `half` inputs; else PyTorch's error."""
    q = torch.randn(1, h, 256, dh, device="cuda", dtype=DTYPES[half])
    try:
        attention(q, q, q, backend)
    except (
        RuntimeError
    ) as exc:  # "No available kernel"; PyTorch gives its reasons as warnings just above
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

TIME, DRAM_BYTES, CLOCK = (
    "gpu__time_duration.sum",
    "dram__bytes.sum",
    "gpc__cycles_elapsed.avg.per_second",
)
SM_PCT, DRAM_PCT = (
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
METRICS = [TIME, SM_PCT, DRAM_PCT, DRAM_BYTES, CLOCK]
BOUND_AT, NEAR, RIDGE, UPPER, SAME, RUN_TO_RUN_PCT = (
    60,
    10,
    1.1,
    1.5,
    10,
    3.0,
)  # the text's thresholds; the last assumed
MiB, ROOFS, LIMITS, SILENT = 2**20, None, None, nsight.VerbosityLevel.SILENT
if ENV.facts:
    FREE, L2 = (
        torch.cuda.mem_get_info()[0],
        ENV.facts.l2_bytes,
    )  # free memory: the GPU may be shared
    STREAM_BYTES = (
        int(min(max(16 * L2, 256 * MiB), FREE // 16)) // MiB * MiB
    )  # 16x the L2, at most 1/16 free
    N_STREAM, ROWS = (
        STREAM_BYTES // 4,
        STREAM_BYTES // 4 // 1024,
    )  # floats; softmax rows of 1024 floats
    M_ROOF = 8192 if 3 * 4 * 8192**2 <= FREE // 8 else 4096  # the matmuls for the compute roofs
    HALF = (
        "bf16" if ENV.facts.compute_capability >= (8, 0) else "fp16"
    )  # no bf16 tensor cores before Ampere
    PRECISIONS = sorted({"fp16", "fp32", HALF})
    B, H, S, DH = 4, 16, 2048, 128  # batch, heads, sequence, head dimension (d_model = H * DH)
    B = next(
        b for b in (B, 2, 1) if 24 * b * H * S * S <= FREE // 2 or b == 1
    )  # fp32 scores and probabilities, twice
    print(
        f"free {FREE / 2**30:.1f} GiB, L2 {L2 / MiB:.0f} MiB -> streams of {STREAM_BYTES / MiB:,.0f} MiB "
        f"({STREAM_BYTES / L2:.1f}x L2), matmuls {M_ROOF}^3 in {PRECISIONS}; attention b, h, s, dh {B, H, S, DH}, {HALF}"
    )


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"  # 3 significant digits below 100


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
# The datasheet gives the peaks (looked up by your GPU's name). A compute peak is a product:
# SMs × FLOP per SM per clock × the clock the datasheet assumes. The device reports its SMs
# and its highest clock, and the FLOP per clock is a power of two on NVIDIA GPUs, so the cell
# takes each peak apart and prints the clock it assumes (NVIDIA quotes some at a clock below
# the highest: the H100's tensor peaks at 1,830 MHz on its datasheet). Section 2 sets each
# kernel against the peak at the clock it really ran at.
#
# We also *measure* the roofs, ten runs each (mean, 95 % Student-t interval, fastest run):
#
# - **bandwidth**: kernels over buffers up to 16× larger than L2 (smaller where free memory
#   caps them: the cell above printed the ratio), with four read:write mixes: `y = x * 2`
#   (1 read : 1 write), `y = x + w` (2 : 1), `y = addcmul(x, w, v)` (3 : 1) -- streams --
#   and `x.sum()`, read only, which is a reduction kernel (blocks sum their slices, then the
#   partial sums are combined): its rate is how fast PyTorch's reduction reads, not a
#   read-only limit of DRAM. Bytes come from the tensor sizes. The write mixes differ because
#   DRAM turns its bus around between reads and writes. The **memory roof is the fastest of
#   the four**: the best this GPU showed you, under the rules printed above the table;
# - **compute**: one large matmul per precision, FLOPs = 2·n³, in an order that rotates
#   from run to run (each precision first in turn). fp32 runs on CUDA cores with PyTorch's
#   default (no TF32), the same setting the math attention path of section 3 runs under.
#   fp16 and bf16 share one tensor-core rate on the datasheets of Ampere and newer, so a
#   difference between their roofs is not the precision's arithmetic, nor (the order
#   rotating) which ran first: two roofs far apart would be a finding (checked); a few
#   percent can be the kernel cuBLAS picked, or the clock the GPU held (its power depends on
#   the data), not measured here.
#
# **A roof measured in one session is not a constant.** Run the notebook again and each roof
# carries run-to-run variation of a few percent (notebook 03 §6 shows how to check two
# batches of one kernel against each other). `RUN_TO_RUN_PCT` (set in the code above) is that
# tolerance -- an assumption: set it from your own repeats, e.g. run this notebook twice and
# see how far its roofs move. No verdict below ranks two numbers closer than
# `RUN_TO_RUN_PCT` %, and a kernel within it of its roof is **at the roof (within run-to-run
# variation)**, not ranked below it.
#
# This section asks for durations only, the one metric both backends give, so it does not
# measure the clock: its % of datasheet is at whatever clock the GPU held.
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
def roof_table(
    table, stream_bytes, m, sheet
) -> pd.DataFrame:  # GB/s, TFLOP/s: mean, 95 % Student-t interval, fastest
    rows = {}
    for name, r in table[table.Metric == TIME].set_index("Annotation").iterrows():
        work = (
            sum(rk.STREAMS[name]) * stream_bytes
            if (stream := name in rk.STREAMS)
            else 2 * m**3 / 1e3
        )  # per ns
        half = stats.t.ppf(0.975, r.NumRuns - 1) * r.StdDev / np.sqrt(r.NumRuns)
        peak = (
            (sheet.mem_bandwidth_gbs if stream else sheet.peak_tflops(name.split()[0])).value
            if sheet
            else None
        )
        rows[name] = {
            "unit": "GB/s" if stream else "TFLOP/s",
            "mean": work / r.AvgValue,
            "CI95 low": work / (r.AvgValue + half),
            "CI95 high": work / (r.AvgValue - half),
            "fastest run": work / r.MinValue,
            "datasheet": peak or np.nan,
            "% of datasheet": 100 * work / r.AvgValue / peak if peak else np.nan,
        }
    return pd.DataFrame(rows).T.infer_objects()


def taken_apart(
    tflops, sms, max_mhz
) -> tuple[int, float]:  # a peak = SMs x FLOP per clock (a power of 2) x MHz
    return (per_clock := 2 ** round(np.log2(tflops * 1e6 / (sms * max_mhz)))), tflops * 1e6 / (
        sms * per_clock
    )


def beside_top(
    tflops, mhz, top
) -> str:  # the clock a peak implies, against the highest: a rounded peak can lift it
    over, up_to = (
        100 * (mhz / top - 1),
        50 * 10.0 ** -len(f"{tflops:g}".partition(".")[2]) / tflops,
    )  # up_to: its rounding, %
    return (
        f"the highest clock: {top:,} MHz"
        if over <= 0
        else f"{over:.2f} % above the highest clock, {top:,} MHz: "
        + (
            f"the datasheet's {tflops:g} is rounded, by up to {up_to:.2f} %"
            if over <= up_to
            else "more than its rounding explains"
        )
    )


with nt.section("1. This GPU's roofs: datasheet and measured") as s:
    ENV.require("profiler")
    profile = nsight.analyze.kernel(
        runs=10, combine_kernel_metrics=lambda x, y: x + y, thermal_mode="off", verbosity=SILENT
    )
    ROOF_RUNS = profile(rk.roofs)(N_STREAM, M_ROOF, L2, ",".join(PRECISIONS)).to_dataframe()
    print(
        "  "
        + nt.rules(ENV.backend)
        + "; the clock each kernel ran at is not measured here (section 2 does)"
    )
    print(
        (t := roof_table(ROOF_RUNS, STREAM_BYTES, M_ROOF, (sheet := ENV.datasheet))).to_string(
            float_format=fmt
        )
    )
    mhz, bits = (
        ENV.facts.max_mem_clock_mhz,
        ENV.facts.memory_bus_width_bits,
    )  # NVML: this device's own
    clock_peak = (
        2 * mhz * bits / 8 / 1e3 if mhz and bits else np.nan
    )  # GB/s: data moves twice per memory clock
    print(
        f"  the device's own DRAM peak: 2 x {mhz} MHz x {bits} bit / 8 = {clock_peak:,.0f} GB/s; datasheet "
        f"{sheet.mem_bandwidth_gbs if sheet else 'unknown'}"
    )
    limits = t["datasheet"].where(
        t.unit == "TFLOP/s", clock_peak
    )  # the hardware's: datasheet FLOP/s, clock-derived GB/s
    nt.claim(
        not (t["mean"] > limits).any(),
        "every mean stays at or below the hardware's peak (datasheet FLOP/s, clock-derived GB/s)",
        "; ".join(f"{n} {r['mean']:,.0f} vs {limits[n]:,.0f} {r.unit}" for n, r in t.iterrows()),
    )
    print(
        f"  one L2 is {100 * L2 / (2 * STREAM_BYTES):.1f} % of the bytes y = x * 2 moves; the clean-L2 rerun changed "
        f"its rate by {100 * (t.loc[rk.CLEAN, 'mean'] / t.loc['y = x * 2', 'mean'] - 1):+.1f} %"
    )
    for name, r in t[
        (t.unit == "GB/s") & (t["% of datasheet"] > 100)
    ].iterrows():  # ncu: cache_control="all"
        print(
            f"  FINDING: {name} is {r['% of datasheet'] - 100:+.1f} % above the datasheet; started with a clean L2: "
            f"{ENV.backend == 'ncu' or name == rk.CLEAN}; writes: {rk.STREAMS[name][1] > 0}; the clock-derived "
            f"peak is {clock_peak / r.datasheet - 1:+.1%} from the datasheet"
        )
    sms, top, peaks = (
        ENV.facts.sm_count,
        ENV.facts.max_sm_clock_mhz,
        {p: t.datasheet[f"{p} matmul"] for p in PRECISIONS},
    )
    apart = {
        p: taken_apart(v, sms, top) for p, v in peaks.items() if v > 0
    }  # top: the highest SM clock NVML reports
    steady = t.loc[
        [n for n in rk.STREAMS if n != rk.CLEAN], "mean"
    ]  # the roofs below leave the clean-L2 rerun out
    ROOFS = {
        "memory": steady.max(),
        "memory stream": steady.idxmax(),
        "clock memory": clock_peak,
        "datasheet": peaks,
        **{p: t.loc[f"{p} matmul", "mean"] for p in PRECISIONS},
        "apart": apart,
        "x * 2": t.loc[rk.CLEAN, "mean"],
        "per MHz": {p: sms * k / 1e6 for p, (k, _) in apart.items()},
        "kernels": dict(zip(ROOF_RUNS.Annotation, ROOF_RUNS.Kernel)),
    }
    print(
        "".join(
            f"  datasheet {p}: {peaks[p]:g} TFLOP/s = {sms} SMs x {k:,} FLOP per clock x {at:,.0f} MHz "
            f"({beside_top(peaks[p], at, top)})\n"
            for p, (k, at) in apart.items()
        ),
        end="",
    )
    if (
        {"fp16", "bf16"} <= set(PRECISIONS) and sheet and sheet.fp16_tflops == sheet.bf16_tflops
    ):  # order rotated
        nt.claim(
            abs(ROOFS["bf16"] / ROOFS["fp16"] - 1) < SAME / 100,
            f"fp16 and bf16 (one datasheet rate) reach roofs within {SAME} % of each other",
            f"bf16 {100 * (ROOFS['bf16'] / ROOFS['fp16'] - 1):+.1f} % against fp16",
        )
    s.result = f"memory {ROOFS['memory']:,.0f} GB/s ({ROOFS['memory stream']}); " + ", ".join(
        f"{p} {ROOFS[p]:,.0f} TFLOP/s (ridge {1e3 * ROOFS[p] / ROOFS['memory']:.0f} FLOP/byte)"
        for p in PRECISIONS
    )

# %% [markdown]
# ## 2. Three kernels: limited by compute or by memory?
#
# The three kernels of the tutorial this series grew from: an fp16 4096³ matmul, `x * 2`
# over the stream buffer, and a softmax over a [rows × 1024] fp32 matrix as large as that
# buffer. Each kernel is judged against the roof of **its own precision and unit**: the fp16
# matmul against the measured fp16 roof; `x * 2` and the softmax run in fp32 on CUDA cores,
# so against the measured fp32 roof -- or rather its memory slope, since both sit far left
# of the ridge. Three ways:
#
# 1. **The formula**: FLOPs and the bytes the kernel must move, counted by hand; its AI
#    against the ridge. Nothing is measured: the time cancels (`(F/t)/P > (B/t)/W` exactly
#    when `F/B > P/W`), so any verdict "from FLOPs and bytes over the measured time" *is*
#    this ridge comparison. It is the prediction.
# 2. **The roofline with measured bytes**: the same FLOPs over the DRAM bytes the counter
#    `dram__bytes.sum` saw, against the same ridge; and the **% of its roof**: the time the
#    roofline allows, `max(F / P, B / W)` with the measured *B*, over the measured time. For
#    a kernel on the memory side that is the % of the **memory slope** (`B / W`), whichever
#    precision it computes in. At `BOUND_AT` % or more (set in the code above) the kernel is
#    *bound* by that roof; below it, **limited by neither** (latency, occupancy, a chain of
#    small kernels, or instructions slower than those of the matmul that set the roof:
#    section 3 says where the kernel names show that) -- a verdict in its own right. Within
#    `RUN_TO_RUN_PCT` % of `BOUND_AT` the verdict says *bound or neither (within run-to-run
#    variation)*, and within `RUN_TO_RUN_PCT` % of 100 *at the roof (within run-to-run
#    variation)*: another session's roofs could move it across either line. An intensity
#    within `RIDGE` of the ridge is **on the ridge**: which side it falls can change from run
#    to run, and the verdict says so instead of picking one.
# 3. **The counters**: `sm__throughput.avg.pct_of_peak_sustained_elapsed` is the *busiest
#    unit* of the SMs (tensor pipe, FMA, ALU, load/store, ...) as a % of its peak -- not the
#    share of FLOP capacity used: a softmax can keep load/store and ALU busy while using a
#    sliver of the FLOPs. `dram__throughput...` is DRAM's. The larger names the limit,
#    unless they are within `NEAR` points (a **tie**), or both are below `BOUND_AT` (neither).
#
# The check: the counters name the limit the roofline names wherever both decide. Whether
# the measured intensity lands on the formula's side of the ridge is checked only near the
# ridge (section 3): these three sit far from it, where it could not come out otherwise.
#
# **A GEMM against a GEMM.** The fp16 roof is itself a cuBLAS matmul (section 1), so the
# fp16 matmul at the full height of its roof is as fast as cuBLAS's own matmul -- which says
# nothing of how far both are from the hardware. The **clock** does: the counters include
# `gpc__cycles_elapsed.avg.per_second`, the SM clock the kernel ran at (cycles elapsed over
# its duration; notebook 04). For each kernel on the compute side the cell prints the % of
# the datasheet peak beside the % of the peak *at that clock* (SMs × FLOP per clock × the
# clock measured). Their ratio is the clock's part of the gap to the datasheet (the
# datasheet's clock over the one the kernel ran at); what is left at that clock is the
# kernel's.
#
# **One measurement for sections 2 and 3.** Counters need Nsight Compute: nsight-python's
# backend where setup activated it, else the `ncu`
# command line on the same module, which returns nsight-python's own table. One call
# measures the kernels of both sections, two runs each: every run replays some fifty
# kernels over gigabyte buffers (the section's seconds are mostly that), replayed with
# flushed caches the counters barely vary from run to run, and two still give a (wide)
# Student-t interval; section 1 measured the run-to-run spread.
#
# **Two sets of rules meet in "% of roof".** The kernels here are measured by Nsight
# Compute (nsight-python's backend or the `ncu` command line): each replayed, its caches
# flushed before every pass, clocks free. The roofs come from section 1, under whatever
# backend setup activated -- under CUPTI: no replay, no flush, caches as warm as the work
# before left them, clocks free. The cell prints both lines of rules, one under the other.
# The consequence for a stream far larger than L2: a flushed cache changes at most one L2 of
# its bytes (section 1 printed that share, and what a clean L2 did to `x * 2`). The cell
# checks it where it can: `x * 2` here is the same kernel over the same buffer as section
# 1's clean-L2 rerun of `y = x * 2` (the one start that matches a flush), so its rate under
# both rules must agree within `RUN_TO_RUN_PCT` %. The compute
# roofs cannot be checked that way (section 1's matmuls are larger); a GEMM re-reads its
# tiles from L2 either way, so a cold start is a sliver of its time. When an annotation
# launches several kernels, `combine` folds them: times and bytes add up, percentages and
# the clock are weighted by duration (nsight-python hands it two kernels' metric arrays in
# the order of `metrics=[...]`). In that table kernel names are function names without
# template arguments, but many still say a lot: cuBLAS's `sm80_xmma_gemm_f32f32_…_ffma…` is
# an fp32 GEMM on CUDA cores written for sm80, a name like cuDNN's
# `…sm90_flash_fprop_wgmma_f16…` shows an fp16 attention on `wgmma` (Hopper's warpgroup
# matrix instructions) because `wgmma` is in it, a T4's `turing_fp16_s1688gemm…` a Turing
# tensor-core GEMM, while PyTorch's `vectorized_elementwise_kernel` says nothing of its
# dtype. The notebook takes each row's precision from the inputs' dtypes
# (names vary by library and version) and reads the names for the instructions (section 3).


# %%
def combine(
    x, y
):  # combine_kernel_metrics for METRICS: times, bytes add up; percentages, the clock weighted by time
    return np.where(
        np.isin(METRICS, [TIME, DRAM_BYTES]), x + y, (x * x[0] + y * y[0]) / (x[0] + y[0])
    )


def kernel_model(
    n_mm, n_vec, rows, b, h, s, dh, half, fused, e=2
) -> dict:  # FLOPs, formula bytes, roof; e: 16-bit
    d, sc, n = (
        h * dh,
        b * h * s * s,
        b * h * s * dh,
    )  # sc: scores; n: elements of each of q, k, v and the output
    att, by_op = (
        4 * sc * dh + 5 * sc,
        {"_safe_softmax": (5 * sc, "fp32")},
    )  # QK^T, PV and softmax (see the text)
    return {
        "fp16 matmul": (2 * n_mm**3, 2 * 3 * n_mm**2, "fp16"),
        "x * 2": (n_vec, 4 * 2 * n_vec, "fp32"),  # A B C; x y
        "softmax [rows x 1024]": (
            5 * rows * 1024,
            4 * 2 * rows * 1024,
            "fp32",
        ),  # max, sub, exp, sum, div
        "QKV projection": (
            2 * b * s * d * 3 * d,
            e * (b * s * d + d * 3 * d + b * s * 3 * d),
            half,
        ),
        "attention softmax": (5 * sc, e * 2 * sc, "fp32"),
        rk.MATH_FP32: (
            att,
            (4 * e + 48) * n + (34 + e) * sc,
            "fp32",
            {**by_op, "bmm": (2 * sc * dh, "fp32")},
        ),
        rk.MATH_HALF: (
            att,
            8 * e * n + (7 * e + 2) * sc,
            half,
            {**by_op, "bmm": (2 * sc * dh, half)},
        ),
        **dict.fromkeys([rk.FUSED.get(fused, "fused"), rk.DEFAULT], (att, 4 * e * n, half)),
    }  # q, k, v, output


def by_operation(
    table, region, scores, flops, roofs
) -> pd.DataFrame:  # a region's op-by-op rows (section 3)
    w = (
        table[table.Annotation.str.startswith(region + ": ")]
        .pivot_table(
            index=["Annotation", "Kernel"], columns="Metric", values="AvgValue", sort=False
        )
        .reset_index("Kernel")
    )
    f, p = zip(
        *[flops.get(name.split()[-1], (0, "fp32")) for name in w.index]
    )  # FLOPs by op name, else none
    return pd.DataFrame(
        {
            "kernels": w.Kernel,
            "us": w[TIME] / 1e3,
            "% of time": 100 * w[TIME] / w[TIME].sum(),
            "B per score": w[DRAM_BYTES] / scores,
            "FLOP us": np.divide(f, [roofs[r] for r in p]) / 1e6,
            "byte us": w[DRAM_BYTES] / roofs["memory"] / 1e3,
        }
    ).rename(index=lambda name: name[len(region) + 2 :])


def place(
    table, model, roofs
) -> pd.DataFrame:  # each annotation against the roof of its own precision and unit
    w = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue", sort=False)
    t = table[table.Metric == TIME].set_index("Annotation")
    names = [n for n in model if n in w.index]
    split = pd.Series(
        {n: len(model[n]) > 3 and table.Annotation.str.startswith(n + ": ").any() for n in names},
        dtype=bool,
    )
    w, t, flops, formula = (
        w.loc[names],
        t.loc[names],
        *(pd.Series({n: model[n][i] for n in names}) for i in (0, 1)),
    )
    out = pd.DataFrame(
        {
            "kernels": t.Kernel.str.count(r"\|") + 1,
            "time_us": t.AvgValue / 1e3,
            "MHz": w[CLOCK] / 1e6,
            "± us": stats.t.ppf(0.975, t.NumRuns - 1) * t.StdDev / np.sqrt(t.NumRuns) / 1e3,
            "roof": [model[n][2] for n in names],
            "kernel names": t.Kernel,
            "SM %": w[SM_PCT],
            "DRAM %": w[DRAM_PCT],
        }
    )
    peak, bw, sec, moved = (
        out.roof.map(roofs).astype(float) * 1e12,
        roofs["memory"] * 1e9,
        w[TIME] / 1e9,
        w[DRAM_BYTES],
    )
    out["TFLOP/s"], out["GB/s"], out["formula MB"], out["measured MB"] = (
        flops / sec / 1e12,
        moved / sec / 1e9,
        formula / 1e6,
        moved / 1e6,
    )
    out["AI formula"], out["AI measured"], out["ridge"] = flops / formula, flops / moved, peak / bw
    allowed = np.maximum(flops / peak, moved / bw).where(
        ~split,
        pd.Series(
            {
                n: by_operation(  # seconds; run op by op:
                    table, n, 1, model[n][3], roofs
                )[["FLOP us", "byte us"]]
                .max(axis=1)
                .sum()
                / 1e6
                for n in names
                if split[n]
            }
        ),
    )
    out["% of roof"] = pct = 100 * allowed / sec  # the time the roofline allows / the time taken
    out["formula side"], out["side"] = (
        np.where(out[ai] > out.ridge, "compute", "memory") for ai in ("AI formula", "AI measured")
    )
    out["against"] = np.where(
        split,
        "its ops' roofs",
        np.where(out.side == "compute", "its " + out.roof + " roof", "the memory slope"),
    )
    ridge = out["on ridge"] = np.abs(np.log(out["AI measured"] / out.ridge)) < np.log(
        RIDGE
    )  # no side decided
    where = np.where(split, "op by op", np.where(ridge, "on the ridge", out.side + " side"))
    bound, v = (
        np.where(split | ridge, "bound " + where, out.side + "-bound"),
        RUN_TO_RUN_PCT,
    )  # v: near a line, say so
    out["verdict"] = np.select(
        [pct > 100 + v, pct >= 100 - v, pct >= BOUND_AT + v, pct > BOUND_AT - v],
        [
            bound + ", above its measured roof (rules or clock differ)",
            bound + ", at the roof (within run-to-run variation)",
            bound,
            f"at {BOUND_AT} % (within run-to-run variation): bound or neither, " + where,
        ],
        "neither (" + where + ")",
    )
    out["% of datasheet"] = (100 * out["TFLOP/s"] / out.roof.map(roofs["datasheet"])).where(
        out.side == "compute"
    )
    out["% at its clock"] = (100 * out["TFLOP/s"] / out.roof.map(roofs["per MHz"]) / out.MHz).where(
        out.side == "compute"
    )
    out["counters"] = [
        "neither"
        if max(a, b) < BOUND_AT
        else "tie"
        if abs(a - b) < NEAR
        else "SM"
        if a > b
        else "DRAM"
        for a, b in zip(out["SM %"], out["DRAM %"])
    ]
    return out


THREE = ["fp16 matmul", "x * 2", "softmax [rows x 1024]"]
with nt.section("2. Limited by what? Three kernels, three ways") as s:
    ENV.require("profiler")
    roofs = nt.needs(ROOFS, section="1")
    why_not = {
        b: rk.sdpa_unavailable(b, HALF, H, DH) for b in rk.FUSED
    }  # flash first, else memory-efficient
    FUSED_BACKEND = next((b for b, why in why_not.items() if why is None), "none")
    print(
        "".join(
            f"  {rk.FUSED[b]} is not available here: {why}\n" for b, why in why_not.items() if why
        ),
        end="",
    )
    CONFIG = (4096, N_STREAM, ROWS, B, H, S, DH, HALF, FUSED_BACKEND)
    SETTINGS = dict(
        runs=2,
        metrics=METRICS,
        combine_kernel_metrics=combine,
        thermal_mode="off",
        verbosity=SILENT,
    )
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend, in this process
        table, source = (
            nsight.analyze.kernel(configs=[CONFIG], **SETTINGS)(rk.limits)().to_dataframe(),
            "ncu",
        )
    else:  # an older ncu: the ncu command line on the same file
        ENV.require("ncu-cli")
        table, source = (
            ncu_cli.nsight_table(
                "roofline_kernels.py", rk.limits, ncu=ENV.ncu_path, configs=[CONFIG], **SETTINGS
            ),
            "ncu-cli",
        )
    print(
        RULES := "  "
        + nt.rules(source, cache_control="all", clock_control="none")
        + "\n  roofs: "
        + nt.rules(ENV.backend)
    )
    MEASURED, LIMITS = table, place(table, kernel_model(*CONFIG), roofs)
    nt.claim(
        abs((rate := 2 * STREAM_BYTES / LIMITS.loc["x * 2", "time_us"] / 1e3) / roofs["x * 2"] - 1)
        < RUN_TO_RUN_PCT / 100,
        f"x * 2 under both rules: one rate within {RUN_TO_RUN_PCT} %",
        f"{rate:,.0f} GB/s, {roofs['x * 2']:,.0f} in section 1 (clean L2)",
    )
    print(
        (three := LIMITS.loc[THREE])[
            [
                "time_us",
                "± us",
                "roof",
                "AI measured",
                "ridge",
                "% of roof",
                "verdict",
                "MHz",
                "% of datasheet",
                "% at its clock",
                "SM %",
                "DRAM %",
                "counters",
            ]
        ].to_string(float_format=fmt)
    )
    for name, r in three[
        three.counters.isin(["SM", "DRAM"]) & three.verdict.str.contains("-bound")
    ].iterrows():
        nt.claim(
            {"SM": "compute", "DRAM": "memory"}[r.counters] == r.side,
            f"{name}: the counters name the limit the roofline names",
            f"SM {r['SM %']:.0f} %, DRAM {r['DRAM %']:.0f} %; {r.verdict}",
        )
    s.result = "; ".join(
        f"{n}: {r.verdict}, {r['% of roof']:.0f} % of {r.against}"
        + (
            f" ({r['% of datasheet']:.0f} % of"
            f" the datasheet, {r['% at its clock']:.0f} % at the {r.MHz:,.0f} MHz it ran)"
            if r["% at its clock"] > 0
            else ""
        )
        + f", counters {r.counters}"
        for n, r in three.iterrows()
    )

# %% [markdown]
# ## 3. Transformer operations on the roofline
#
# The Nsight guide this series follows classifies a Transformer's operations: the QKV
# projection compute-bound (a GEMM on tensor cores), the attention softmax memory- or
# latency-bound (little arithmetic per byte), and FlashAttention fast because it **moves
# the attention point right and up**: it never writes the [batch, heads, seq, seq] scores to
# DRAM, so the same FLOPs need far fewer bytes. We check each on your GPU, from the table
# section 2 measured.
#
# | operation | FLOPs | bytes the formula counts (e bytes per 16-bit element) | roof |
# |---|---|---|---|
# | QKV projection `[b·s, d] @ [d, 3d]` | 2 · b·s · d · 3d | e · (b·s·d + d·3d + b·s·3d) | its 16-bit precision |
# | attention softmax over `[b, h, s, s]` | 5 · b·h·s² | e · 2 · b·h·s² | fp32 (CUDA cores) |
# | attention, fused (flash, or PyTorch's default) | 4 · b·h·s²·dh + 5 · b·h·s² | e · 4n: q, k, v, output (n = b·h·s·dh) | 16-bit |
# | attention, math, kept in 16 bit | the same | e · 8n + (7e + 2) · b·h·s² | 16-bit |
# | attention, math, upcast to fp32 | the same | (4e + 48) · n + (34 + e) · b·h·s² | fp32 (CUDA cores) |
#
# **The math path, counted as PyTorch runs it.** Per score, kept in 16 bit: QKᵀ writes it
# (e), then PyTorch's *safe* softmax reads and writes it (2e), compares it with −∞ (reads e,
# writes a 1-byte flag), reduces the flags per row (`all`: reads 1) and zeroes rows that were
# all −∞ (`where`: reads and writes e), and PV reads the probabilities (e): 7e + 2 bytes --
# not the 4e of "write, read, write, read", which is the least an unfused path could move.
# Upcast to fp32, the same passes move 4 bytes per score, plus a cast of the probabilities
# back to 16 bit (4 + e); the n-sized terms are the casts of q, k, v and the output, the
# scaling of q and k, and the GEMMs' other operands. The run op by op (`EachOp`) shows each
# of these operations with its kernels, time and bytes per score, and the check that the
# op-by-op run launched the region's very kernels, in order.
#
# **Precision from the inputs.** PyTorch's math path upcasts fp16/bf16 inputs to fp32 (its
# GEMMs then run on CUDA cores) unless `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`
# (PyTorch 2.5 and later) keeps it in 16 bit. So the notebook runs it both ways and knows
# each row's precision from the inputs' dtype and that flag; the DRAM counters confirm it.
# Then **flash vs math kept in 16 bit is fusion at one precision**, and flash vs math upcast
# to fp32 changes **precision + fusion** at once. One more difference can hide in there:
# PyTorch's flash backend is FlashAttention-2 (`flash_fwd_kernel`, written for sm80's
# `mma.sync` instructions), while cuBLAS may run the math path's 16-bit GEMMs with kernels
# built for a newer architecture. The `instructions` column is only what the kernel names
# say: the words `wgmma`, `hmma`, `ffma`, `s1688`, `s16816`, `flash_fwd`, an architecture
# (`sm90`, `turing`, ...) -- e.g. `nvjet_sm90…` says sm90 and nothing of its instructions,
# so the cell does not claim `wgmma` for it; a name with `…wgmma…` in it does. Where two
# rows' names differ, the comparison names the difference. So does the result line where a
# kernel's names differ from those of section 1's matmul that set its roof: FlashAttention-2's
# `mma.sync` cannot run at the rate of a Hopper GEMM's `wgmma`, so below that roof its
# "neither" can be its own instructions' ceiling, not latency or occupancy.
#
# **A region of several kernels is bound kernel by kernel.** Each kernel of the math path
# is bound on its own: the GEMMs by their roof, the softmax's passes by the memory slope.
# The time the roofline allows the region is then the *sum* of `max(F_i / P_i, B_i / W)`
# over its parts, not `max(F / P, B / W)` of its totals -- one point for the whole region
# mixes a compute-bound GEMM with a memory-bound softmax and lands far below both roofs. The
# op-by-op run gives each operation's time and measured bytes; its FLOPs are the formula's,
# attributed by operation: `2·b·h·s²·dh` to each `bmm` (against the region's GEMM roof), the
# softmax's `5·b·h·s²` to `_safe_softmax` (fp32, CUDA cores), none to the casts and scalings.
# The cell checks that the op-by-op run names each operation given FLOPs as often as the
# formula counts it: a renamed operation would get none.
# The region's "% of roof" is that sum over its measured time, and its verdict says
# **op by op**. An operation that launches several kernels (the safe softmax: five) is
# summed as one; kernel by kernel could allow at most its smaller term more, and the cell
# prints that bound as a share of the region's time. A region of several kernels
# without an op-by-op run (the `kernels` column says how many) is still one point.
#
# **Bytes, both ways**: measured bytes may fall *below* the formula by up to one L2 per
# kernel (under Nsight Compute each kernel starts with a clean L2, and writes still held in
# L2 when it ends reach DRAM later, outside its counters), and may exceed it by at most
# `UPPER` times. The two plain GEMMs are held to the lower side only: a GEMM re-reads the
# tiles its L2 cannot keep, as often as the L2's size and cuBLAS's tiling make it (a T4's
# L2 is a fifteenth of an H200's); the math paths' GEMMs re-read only the small q, k and v.
# Outside that band the formula is wrong. Near its ridge (within a factor of four) a kernel's measured intensity
# must fall on the formula's side of it, unless it is on the ridge; far from it, the side
# could not come out otherwise and is printed, not checked.
#
# FlashAttention in PyTorch needs compute capability ≥ 8.0 and fp16/bf16; where it is not
# available (a T4 is 7.5) the cell says why in PyTorch's words and uses the memory-efficient
# backend, labelled as such. PyTorch's default is measured too, with its time and kernels.

# %%
ISA = r"wgmma|hmma|ffma|s1688|s16816|flash_fwd|sm_?\d\d|turing|volta|ampere"  # what kernel names may say of it


def instructions(
    kernels: str,
) -> str:  # what a row's kernel names say of instructions and architecture, or nothing
    return ", ".join(dict.fromkeys(pd.Series(kernels).str.findall(ISA)[0])) or "not in the names"


def unlike_its_roof(
    r, roofs
) -> str:  # where a kernel's names lack a word of the roof matmul's ("sm90, wgmma" has "sm90")
    theirs = instructions(roofs["kernels"].get(f"{r.roof} matmul", ""))
    return (
        ""
        if set(theirs.split(", ")) <= set(r.instructions.split(", "))
        or not r.against.endswith(" roof")
        else f" (its names say {r.instructions}, its roof matmul's say {theirs}: other instructions can have a lower ceiling)"
    )


with nt.section("3. Transformer ops on the roofline") as s:
    ENV.require("profiler")
    lim, roofs = nt.needs(LIMITS, section="2"), nt.needs(ROOFS, section="1")
    ops = lim.drop(index=THREE).assign(instructions=lambda t: t["kernel names"].map(instructions))
    print(
        RULES
        + "\n"
        + ops.drop(
            columns=[
                "kernel names",
                "SM %",
                "DRAM %",
                "GB/s",
                "formula side",
                "side",
                "against",
                "on ridge",
                "counters",
            ]
        ).to_string(float_format=fmt)
    )
    for region in (rk.MATH_FP32, rk.MATH_HALF):
        parts = by_operation(
            MEASURED, region, B * H * S * S, (model := kernel_model(*CONFIG)[region])[3], roofs
        )
        gap = (
            parts[parts.kernels.str.contains("|", regex=False)][["FLOP us", "byte us"]]
            .min(axis=1)
            .sum()
        )
        print(
            f"  {region}, op by op (kernel by kernel could allow at most {gap:,.0f} us more, {100 * gap / parts.us.sum():.1f}"
            " % of its time):\n"
            + parts.assign(kernels=parts.kernels.str.slice(0, 60)).to_string(float_format=fmt)
        )
        nt.claim(
            np.isclose(
                got := sum(model[3].get(n.split()[-1], (0,))[0] for n in parts.index), model[0]
            ),
            f"{region}: each"
            f" op given FLOPs ({', '.join(model[3])}) is named as often as the formula counts it",
            f"{got:.4g} of {model[0]:.4g} FLOPs",
        )
        nt.claim(
            "|".join(parts.kernels) == ops.loc[region, "kernel names"],
            f"{region}: the op-by-op run launches the region's kernels, in order",
            f"{len(parts)} operations, {ops.loc[region, 'kernels']} kernels",
        )
    for (
        name,
        r,
    ) in (
        lim.iterrows()
    ):  # a GEMM re-reads the tiles its L2 cannot keep, as often as L2 and tiling make it
        gemm = name in ("fp16 matmul", "QKV projection")
        nt.claim(
            r["formula MB"] - r.kernels * L2 / 1e6
            <= r["measured MB"]
            <= (np.inf if gemm else UPPER) * r["formula MB"],
            f"{name}: measured bytes within one L2 per kernel below the formula, "
            + ("any amount above (a GEMM)" if gemm else f"{UPPER}x above"),
            f"{fmt(r['measured MB'])} of {fmt(r['formula MB'])} MB",
        )
    near = lim[
        np.abs(np.log(lim["AI formula"] / lim.ridge)) < np.log(4)
    ]  # the rest: more than 4x from the ridge
    nt.claim(
        ((near.side == near["formula side"]) | near["on ridge"]).all(),
        "near their ridge, measured intensities fall on the formula's side (or on the ridge)",
        "; ".join(
            f"{n}: AI {fmt(r['AI measured'])}"
            f" (formula {fmt(r['AI formula'])}), ridge {fmt(r.ridge)}"
            for n, r in near.iterrows()
        )
        or "none near",
    )
    for before, after, label in (
        (rk.MATH_HALF, (fused := rk.FUSED.get(FUSED_BACKEND)), "fusion alone"),
        (rk.MATH_FP32, fused, "precision + fusion"),
        (rk.MATH_FP32, rk.MATH_HALF, "precision alone"),
    ):
        if {before, after} <= set(ops.index):
            x, y = ops.loc[before], ops.loc[after]
            label += (
                ""
                if x.instructions == y.instructions
                else f" (and {y.instructions} for {x.instructions})"
            )
            nt.claim(
                y["measured MB"] < x["measured MB"] and y.time_us < x.time_us,
                f"{label}: {after} moves the point right and up from {before}",
                f"{x['measured MB'] / y['measured MB']:.1f}x fewer DRAM bytes, "
                f"{x.time_us / y.time_us:.1f}x faster",
            )
    s.result = "; ".join(
        f"{n}: {r.verdict} at {r['% of roof']:.0f} % of {r.against}{unlike_its_roof(r, roofs)}, "
        f"{r.time_us:,.0f} us"
        for n, r in ops.iterrows()
    )

# %% [markdown]
# ## 4. The roofline plot
#
# Log-log: arithmetic intensity across, FLOP/s up. Solid lines are the roofs measured in
# section 1, one per precision; dashed lines the datasheet's. Each kernel of sections 2 and
# 3 is a numbered dot at its *measured* intensity (the legend names it), in the colour of
# the roof it is judged against; a hollow ring on the same height marks the formula's
# intensity. A region of several kernels is one dot for its *sums* (all its FLOPs over all
# its bytes, at its total time; the legend says how many kernels): its height is not what
# section 3 judges it by, which is op by op. The check: no kernel beats the hardware -- its FLOP/s stay below the peak at
# the clock it ran at, its bytes per second below the clock-derived DRAM peak.

# %%
with nt.section("4. The roofline plot") as s:
    ENV.require("profiler")
    points, roofs = nt.needs(LIMITS, section="2"), nt.needs(ROOFS, section="1")
    sheet, ai, colors = (
        ENV.datasheet,
        np.logspace(-2, 4.5, 300),
        {"fp16": "C0", "bf16": "C1", "fp32": "C2"},
    )
    fig, ax = plt.subplots(figsize=(11, 6))
    for p in PRECISIONS:
        ax.plot(
            ai,
            np.minimum(roofs[p] * 1e12, roofs["memory"] * 1e9 * ai),
            "-",
            color=colors[p],
            label=f"measured {p} roof",
        )
        if sheet and sheet.peak_tflops(p).value and sheet.mem_bandwidth_gbs.value:
            ax.plot(
                ai,
                np.minimum(
                    sheet.peak_tflops(p).value * 1e12, sheet.mem_bandwidth_gbs.value * 1e9 * ai
                ),
                "--",
                color=colors[p],
                lw=0.8,
                label=f"datasheet {p}",
            )
    for i, (name, r) in enumerate(points.iterrows(), 1):
        y, angle = (
            r["TFLOP/s"] * 1e12,
            2.4 * i,
        )  # labels placed round their dots: two dots in one place stay readable
        ax.plot(r["AI measured"], y, "o", color=colors[r.roof], ms=6)
        ax.plot(r["AI formula"], y, "o", mfc="none", color=colors[r.roof], ms=9, alpha=0.6)
        ax.annotate(
            str(i),
            (r["AI measured"], y),
            textcoords="offset points",
            xytext=(18 * np.cos(angle), 18 * np.sin(angle)),
            fontsize=8,
            ha="center",
            va="center",
            arrowprops=dict(arrowstyle="-", lw=0.5, color="gray"),
        )
        ax.plot(
            [],
            [],
            " ",
            label=f"{i}: {name}" + (f" (the sum of {r.kernels} kernels)" if r.kernels > 1 else ""),
        )
    ax.plot([], [], "o", mfc="none", color="gray", label="ring: the formula's intensity")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP/DRAM byte)",
        ylabel="FLOP/s",
        title=ENV.gpu_name,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    plt.tight_layout()
    plt.show()
    for name, r in points.iterrows():
        nt.claim(
            not r["% at its clock"] > 100 and not r["GB/s"] > roofs["clock memory"],
            f"{name}: below the hardware's peaks",
            (
                f"{r['% at its clock']:.0f} % of the {r.roof} peak at the {r.MHz:,.0f} MHz it ran; "
                if r.side == "compute"
                else "memory side: "
            )
            + f"{r['GB/s']:,.0f} of {roofs['clock memory']:,.0f} GB/s",
        )
    s.result = (
        f"{len(points)} kernels on the roofline of {ENV.gpu_name}, none above the hardware's peaks"
    )

# %% [markdown]
# ## Takeaways
#
# - Compute the arithmetic intensity of a kernel *before* profiling it: FLOPs over the
#   bytes it must move, against the ridge of the roof of *its* precision and unit -- and
#   count the bytes of what the library really launches (attention's softmax is a *safe*
#   softmax, with passes of its own).
# - Measure your own roofs: a stream far larger than L2 for bandwidth, a large matmul per
#   precision for compute. A kernel that reaches a roof measured with the same kind of
#   kernel is as good as that kernel, no more.
# - The gap to the datasheet has two parts, and section 2 printed both: the clock (the
#   datasheet's peak assumes one, the GPU held another, measured with
#   `gpc__cycles_elapsed.avg.per_second`) and the kernel at the clock it ran at.
# - A number above the datasheet is a question: the device's own memory clock and bus
#   width, and the L2 state each stream started in, answer it.
# - The verdict needs two numbers: which side of the ridge (measured intensity), and how
#   close to that roof (% of roof). Far below both roofs is a verdict too: limited by
#   neither; on the ridge, the side is not decided. Counters say which unit was busiest --
#   not FLOP use -- and can tie.
# - A fused kernel (flash attention) wins by moving *fewer bytes* for the same FLOPs: its
#   point moves right, then up. Compare it with the math path at equal precision before
#   crediting fusion, and read the kernel names: the two may not use the same instructions.
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
nt.summary()
