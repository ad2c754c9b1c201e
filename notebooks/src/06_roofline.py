# %% [markdown]
# # 06 · Compute- or memory-bound? The roofline of *your* GPU, at the clock each kernel ran
#
# **What you will learn**
# - how to measure this GPU's roofs (streams far larger than L2, one large matmul per precision)
#   and state them per clock cycle, so that a kernel is judged against its roof *at the clock
#   it ran*, not at whatever clock the roof's own kernel happened to get;
# - the one formula behind every roofline verdict, `max(F / P, B / W) / t`, worked by hand;
# - where three classic kernels and a Transformer layer's operations land, each against the
#   roof of its own precision and unit;
# - what a kernel that is **neither** compute- nor memory-bound is doing instead (tensor pipe,
#   occupancy, the warp-stall reason Nsight Compute counts), and the next step each verdict
#   points to;
# - FlashAttention against math attention by three questions, answered from counters, and what
#   fusing the softmax buys, measured against this run's run-to-run band.
#
# **The verdict words** (every verdict below is one of them; `BOUND_AT`, `RIDGE` and the band
# are set and derived in the code):
#
# | verdict | what the numbers say | the next step it points to |
# |---|---|---|
# | compute-bound | FLOP rate at least `BOUND_AT` % of its compute roof at the clock it ran | change precision (a faster roof), or cut FLOPs |
# | memory-bound | DRAM bytes per second at least `BOUND_AT` % of the memory roof | cut bytes: fuse with its neighbours, smaller types |
# | …, at the roof | within the run-to-run band of its roof | as fast as the roof's own kernel: change the work, not the kernel |
# | …, above its roof | faster than its roof by more than the band: a measured roof is one kernel's rate (the roof matmul's), not the hardware's ceiling; this kernel found a faster way | as at the roof; the datasheet's per-cycle rate is the ceiling left |
# | neither | below `BOUND_AT` % of both: latency, instruction issue or synchronisation sets its time | the counters say which: raise occupancy, overlap, cut instructions, or a kernel made for this GPU's tensor cores |
# | … or neither | within the band of the `BOUND_AT` line: another run could move it across | measure again before acting on it |
# | bound on the ridge | its intensity within a factor `RIDGE` of the ridge point: the side is not decided | either remedy |
# | bound op by op | several kernels, each judged on its own: the times the roofline allows them, added | fuse the operations |
#
# **Words used below.** [Ridge point](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#ridge-point):
# the arithmetic intensity `P / W` (FLOP per byte) where a compute roof meets the memory roof.
# A [GPC](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#gpc)
# (graphics processing cluster) is a group of SMs on one clock: `gpc__cycles_elapsed.avg.per_second`
# is the SM clock Nsight Compute measured during a kernel, `dram__cycles_elapsed.avg.per_second`
# DRAM's. A counter's [`pct_of_peak_sustained_elapsed`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#pct_of_peak_sustained_elapsed-vs-_active)
# divides by the peak over the kernel's whole duration; `_active` only over the cycles the unit
# had work. [HMMA](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#hmma)
# is the tensor-core instruction a warp issues on its own (PTX [`mma.sync`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#mmasync),
# sm70 and later; FlashAttention-2 is written with it);
# [`wgmma`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#wgmma) is
# Hopper's asynchronous instruction for four warps at once, the only way to its full tensor
# rate. A GEMM may split its reduction dimension across blocks and add the parts in a second
# kernel ([split-K](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#split-k)),
# and its [epilogue](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#epilogue),
# the stage that writes the output, is where libraries fuse a bias or an activation.
#
# | section | needs |
# |---|---|
# | 1. roofs, datasheet and measured | any nsight-python backend (CUPTI too) |
# | 2.–6. every kernel at its clock | counters: the Nsight Compute backend, or any `ncu` command line |
#
# Buffer sizes come from what your GPU reports (its L2, its *free* memory), so the notebook
# runs unchanged on a Colab T4 and on an H200. On Colab this notebook is a fresh runtime of
# its own: the setup cell below installs what it needs (run again, it skips what is there).

# %%
{{SETUP}}

# %% [markdown]
# ## The kernels, written once
#
# `roofs` is section 1's: streams with four read:write mixes, then one matmul per precision in
# an order that rotates from run to run (each precision first in turn). `counters` is sections 2
# to 6's: the three kernels of the tutorial this series grew from (an fp16 matmul, `x * 2`, a
# softmax), the roof matmuls again (their clock measured this time), then a Transformer layer's
# operations. Each runs in an `nsight.annotate` region named after it; `measure` runs an
# operation once unmeasured the first time (cuBLAS and cuDNN pick their kernels then). `EachOp`
# runs PyTorch's math attention a second time with every operation its dispatcher sees in an
# annotation of its own, so the table has that region op by op. Where nsight-python's Nsight
# Compute backend cannot load, the `ncu` command line runs the same file (the printed command
# shows it).

# %% writefile roofline_kernels.py
"""Notebook 06's kernels: profiled by nsight-python in the notebook, or by the ncu command line."""

import contextlib
import itertools
from functools import partial

import torch
import torch.nn.functional as F
from nsight import annotate
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
STREAMS = {"y = x * 2": (1, 1), "x.sum()": (1, 0), "y = x + w": (2, 1)}
STREAMS["y = addcmul(x, w, v)"] = (3, 1)  # (reads, writes) of n floats each
MATH_FP32, MATH_HALF = "math attention, fp32", "math attention, 16-bit"
FUSED = {"FLASH_ATTENTION": "flash attention", "EFFICIENT_ATTENTION": "memory-efficient attention"}
DEFAULT, WARM, CALLS = "PyTorch's default attention", set(), itertools.count()


def measure(ops: dict) -> None:
    """Each operation inside an annotation named by its key, after one unmeasured first call."""
    for name, op in ops.items():
        if name not in WARM:
            WARM.add(name)
            op()
        with annotate(name):
            op()


class EachOp(TorchDispatchMode):
    """Every operation PyTorch's dispatcher runs, in an annotation of its own: `<region>: 03 bmm`"""

    def __init__(self, region: str):
        super().__init__()
        self.region, self.count = region, itertools.count(1)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        with annotate(f"{self.region}: {next(self.count):02d} {func.overloadpacket.__name__}"):
            return func(*args, **(kwargs or {}))  # a view launches no kernel: no row


def matmuls(m: int, precisions: str, label: str) -> None:
    """An m x m matmul per precision, in an order rotated by one each run: each first in turn."""
    ps = precisions.split(",")
    k = next(CALLS) % len(ps)
    for p in ps[k:] + ps[:k]:
        a = torch.randn(m, m, device="cuda", dtype=DTYPES[p])
        measure({f"{p} {label}": partial(torch.matmul, a, a)})


def roofs(n: int, m: int, precisions: str) -> None:
    """Section 1: streams of n floats, then the matmuls."""
    x, w, v = (torch.randn(n, device="cuda") for _ in range(3))
    y = torch.empty_like(x)
    ops = (partial(torch.mul, x, 2.0, out=y), x.sum, partial(torch.add, x, w, out=y))
    for name, op in zip(STREAMS, ops + (partial(torch.addcmul, x, w, v, out=y),)):
        with annotate(name):
            op()
    matmuls(m, precisions, "matmul")


def attention(q, k, v, backend=None):
    """PyTorch's scaled_dot_product_attention on one backend (None: PyTorch's choice)."""
    with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v)


def counters(n_mm, n_vec, rows, m, precisions, b, h, s, dh, half, fused) -> None:
    """Sections 2 to 6: three kernels, the roof matmuls, a Transformer layer's operations."""
    a = torch.randn(n_mm, n_mm, device="cuda", dtype=torch.float16)
    vec, mat = torch.randn(n_vec, device="cuda"), torch.randn(rows, 1024, device="cuda")
    measure({"fp16 matmul": partial(torch.matmul, a, a), "x * 2": partial(torch.mul, vec, 2.0)})
    measure({"softmax [rows x 1024]": partial(torch.softmax, mat, -1)})
    matmuls(m, precisions, "roof matmul")
    dt, d = DTYPES[half], h * dh
    x, w_qkv = (torch.randn(*shape, device="cuda", dtype=dt) for shape in ((b * s, d), (d, 3 * d)))
    q, k, v, scores = (torch.randn(b, h, s, n, device="cuda", dtype=dt) for n in (dh, dh, dh, s))
    measure({"QKV projection": partial(torch.matmul, x, w_qkv)})
    measure({"attention softmax": partial(torch.softmax, scores, -1)})
    for name in (MATH_FP32, MATH_HALF):  # PyTorch 2.5+ keeps 16 bit only when told to
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(name == MATH_HALF)
        measure({name: partial(attention, q, k, v, "MATH")})
        with EachOp(name):  # the same path again, op by op
            attention(q, k, v, "MATH")
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)
    measure({FUSED[fused]: partial(attention, q, k, v, fused)})
    measure({DEFAULT: partial(attention, q, k, v)})


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

from nspy_tutorial import backend, clock, gpu_facts, ncu_cli
from nspy_tutorial.display import say
from nspy_tutorial.lessons import run_to_run_pct

TIME, DRAM_BYTES = "gpu__time_duration.sum", "dram__bytes.sum"
CLOCK, DRAM_CLOCK = "gpc__cycles_elapsed.avg.per_second", "dram__cycles_elapsed.avg.per_second"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
ISSUE = "sm__issue_active.avg.pct_of_peak_sustained_elapsed"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
REASONS = "long_scoreboard short_scoreboard wait barrier mio_throttle math_pipe_throttle".split()
REASONS += ["lg_throttle", "not_selected", "no_instruction", "drain"]
BOUND_AT, NEAR, RIDGE, UPPER = 60, 10, 1.1, 1.5  # the text's thresholds
ROOFS, BAND, LIMITS, SILENT = None, None, None, nsight.VerbosityLevel.SILENT
if ENV.facts:
    FREE, L2, MiB = torch.cuda.mem_get_info()[0], ENV.facts.l2_bytes, 2**20  # free: a shared GPU
    STREAM_BYTES = int(min(max(16 * L2, 256 * MiB), FREE // 16)) // MiB * MiB
    N_STREAM, ROWS = STREAM_BYTES // 4, STREAM_BYTES // 4 // 1024  # floats; softmax rows
    M_ROOF = 8192 if 3 * 4 * 8192**2 <= FREE // 8 else 4096  # the roof matmuls
    HALF = "bf16" if ENV.facts.compute_capability >= (8, 0) else "fp16"  # bf16: Ampere on
    FUSED_BACKEND = "FLASH_ATTENTION" if HALF == "bf16" else "EFFICIENT_ATTENTION"  # flash too
    PRECISIONS = sorted({"fp16", "fp32", HALF})
    B, H, S, DH = 4, 16, 2048, 128  # batch, heads, sequence, head dimension
    B = next(b for b in (B, 2, 1) if 24 * b * H * S * S <= FREE // 2 or b == 1)  # fp32 scores
    REASONS += ["gmma"] if ENV.facts.compute_capability[0] == 9 else []  # Hopper: wgmma waits
    print(f"streams {STREAM_BYTES / MiB:,.0f} MiB ({STREAM_BYTES / L2:.1f}x L2), GEMMs {M_ROOF}^3")
METRICS = [TIME, DRAM_BYTES, CLOCK, DRAM_CLOCK, SM_PCT, DRAM_PCT, TENSOR, OCCUPANCY, ISSUE]
METRICS += [STALL.format(r) for r in REASONS]


def fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"  # 3 significant digits below 100


# %% [markdown]
# ## The roofline by hand
#
# A kernel that performs *F* FLOPs and moves *B* bytes of DRAM cannot finish faster than
# `max(F / P, B / W)`, for its compute roof *P* (FLOP/s) and the memory roof *W* (bytes/s).
# Which term wins depends on its **arithmetic intensity** `F / B` against the ridge `P / W`.
# Divided by the time *t* it took, that bound is the share of its roof the kernel reached: the
# "% of roof" of every table below. The cell works it for the fp16 4096³ matmul against this
# GPU's datasheet (a Colab T4's where there is no GPU); section 2 measures *t*.

# %%
sheet = ENV.datasheet or gpu_facts.datasheet_for("Tesla T4")
flops, moved = 2 * 4096**3, 3 * 2 * 4096**2  # a multiply and an add a term; A, B, C of 2 bytes
P, W = sheet.fp16_tflops.value * 1e12, sheet.mem_bandwidth_gbs.value * 1e9  # FLOP/s, bytes/s
print(f"{sheet.gpu}: F/P = {1e6 * flops / P:.1f} us, B/W = {1e6 * moved / W:.1f} us")
print(f"AI = F/B = {flops / moved:,.0f} FLOP/byte, ridge P/W = {P / W:,.0f}: the compute side;")
print(f"in t us it reaches 100 x {1e6 * max(flops / P, moved / W):.1f} / t % of its roof")

# %% [markdown]
# ## 1. This GPU's roofs: the datasheet, and what it really does
#
# The datasheet gives the peaks, looked up by your GPU's name. A compute peak is SMs × FLOP per
# SM per cycle × the clock the datasheet assumes (the H100 and H200 datasheets state their
# tensor peaks at a datasheet clock of 1,830 MHz, below the highest); section 2 prints that FLOP
# per cycle.
# We also *measure* the roofs, ten runs each: **bandwidth** from streams over buffers up to 16×
# larger than L2 with four read:write mixes (`x.sum()` is a reduction, blocks summing slices:
# how fast PyTorch's reduction reads), the fastest of them being the memory roof; **compute**
# from one large matmul per precision (fp32 on CUDA cores, PyTorch's default: no TF32). The
# check: no roof above the hardware's peak -- the datasheet's FLOP/s, and for bandwidth the
# device's own `2 × memory clock × bus width / 8` (NVML reports both; a datasheet rounds).
#
# This section asks for durations only, the one metric both backends give, and the CUPTI backend
# measures no clock: the cell samples NVML's SM clock while the roofs run. That is NVML's reading
# near the kernels, not the clock they ran at, so each % of the datasheet here compares a kernel
# at an unknown clock with a peak at the datasheet's; section 2 measures the roof matmuls' own.
# Where setup found the clock held, the cell says so: every % of the datasheet then sits under a
# free clock's by about that ratio.
#
# **The run-to-run band.** A roof measured once is not a constant. The cell measures the same
# roofs a second time, a call later, and takes each kernel's
# [run-to-run band](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#run-to-run-band)
# with notebook 03's `run_to_run_pct` (the shift between the two batches plus its 95 % Welch
# half-width); the largest is this run's band. No verdict below ranks two numbers closer than
# it, and a kernel within it of a line is said to be so. The band comes from large kernels: one
# of a few microseconds (the smallest operations of section 3) can move more between runs, so a
# verdict near a line for such a kernel deserves a second run before you act on it.


# %%
def roof_table(table, stream_bytes, m, sheet) -> pd.DataFrame:
    """Each roof kernel's rate (GB/s, TFLOP/s): mean, 95 % Student-t half-width, the datasheet."""
    t = table[table.Metric == TIME].set_index("Annotation")
    stream = t.index.isin(list(rk.STREAMS))
    work = [sum(rk.STREAMS[n]) * stream_bytes if n in rk.STREAMS else 2e-3 * m**3 for n in t.index]
    half = stats.t.ppf(0.975, t.NumRuns - 1) * t.StdDev / np.sqrt(t.NumRuns)
    out = pd.DataFrame({"unit": np.where(stream, "GB/s", "TFLOP/s"), "mean": work / t.AvgValue})
    out["±"] = out["mean"] * half / t.AvgValue
    peaks = [sheet.peak_tflops(n.split()[0]) for n in t.index[~stream]] if sheet else []
    out["datasheet"] = np.where(stream, sheet.mem_bandwidth_gbs.value, 0) if sheet else np.nan
    out.loc[~stream, "datasheet"] = [p.value for p in peaks] or np.nan
    out["% of sheet"] = 100 * out["mean"] / out.datasheet
    return out


with nt.section("1. This GPU's roofs: datasheet and measured") as s:
    ENV.require("profiler")
    profile = nsight.analyze.kernel(
        runs=10, combine_kernel_metrics=lambda x, y: x + y, thermal_mode="off", verbosity=SILENT
    )
    roof_kernels, args = profile(rk.roofs), (N_STREAM, M_ROOF, ",".join(PRECISIONS))
    with clock.Sampler() as nvml:  # CUPTI measures no clock: NVML's reading meanwhile
        CALL_1 = roof_kernels(*args).to_dataframe()
    CALL_2 = roof_kernels(*args).to_dataframe()  # the same kernels a call later: the band
    say(nt.rules(ENV.backend))
    t = roof_table(CALL_1, STREAM_BYTES, M_ROOF, ENV.datasheet)
    batch = ["AvgValue", "StdDev", "NumRuns"]  # (mean, sd, runs): what run_to_run_pct compares
    first, again = (c[c.Metric == TIME].set_index("Annotation")[batch] for c in (CALL_1, CALL_2))
    t["band %"] = [run_to_run_pct(first.loc[n], again.loc[n]) for n in t.index]
    print(t.to_string(float_format=fmt, na_rep="-"))
    BAND = t["band %"].max()
    say(f"run-to-run band {BAND:.2f} %: the largest of the {len(t)} ({t['band %'].idxmax()})")
    reading = "{:,.0f} MHz ({:,.0f}-{:,.0f})".format(*nvml.mhz) if nvml.mhz else "not read"
    say(f"NVML's SM clock during the first call, median (range): {reading}")
    mem_mhz, bits = ENV.facts.max_mem_clock_mhz or np.nan, ENV.facts.memory_bus_width_bits or np.nan
    device = 2 * mem_mhz * bits / 8e3  # two transfers per memory clock, in GB/s
    say(f"the device's DRAM peak: 2 x {mem_mhz:,.0f} MHz x {bits:,.0f} bit/8 = {device:,.0f} GB/s")
    if ENV.clock and ENV.clock.state == "held":  # every % of the datasheet sits under by about that
        say(f"SM clock HELD at {ENV.clock.held_mhz:,} MHz, {ENV.clock.ratio:.0%} of max: see setup")
    hardware = t.datasheet.where(t.unit == "TFLOP/s", device)
    nt.claim(not (t["mean"] > hardware).any(), "none above the datasheet FLOP/s, the device GB/s")
    ROOFS = {p: t.loc[f"{p} matmul", "mean"] for p in PRECISIONS}
    ROOFS.update(memory=t.loc[list(rk.STREAMS), "mean"].max(), device=device)
    tflops = ", ".join(f"{p} {ROOFS[p]:,.0f}" for p in PRECISIONS)
    s.result = f"memory {ROOFS['memory']:,.0f} GB/s, {tflops} TFLOP/s; band {BAND:.1f} %"

# %% [markdown]
# ## 2. Each kernel against its roof, at the clock it ran
#
# A roof measured in FLOP per second holds only at the clock its kernel ran. The GPU picks its
# clock from its power and temperature, and a profiler's own rules (notebook 04) change it too:
# the same cuBLAS matmul runs slower once the GPU is warm (notebook 08), and a GPU whose clock
# is held lower (the setup cell's banner says so) moves every FLOP rate. A **FLOP per cycle**
# does not move with the clock. So this section measures the roof matmuls again, with Nsight
# Compute and under the same rules as every kernel here, this time with their cycles: each
# compute roof becomes FLOPs over SM cycles (`gpc__cycles_elapsed.avg.per_second` × duration),
# and each kernel is judged against `FLOP per cycle × the SM clock it ran`. DRAM has a clock of
# its own, which the SM clock does not move: the memory roof becomes bytes per DRAM cycle
# (section 1's GB/s over the DRAM clock Nsight Compute measured during `x * 2`, the same stream
# kernel), and each kernel's memory roof is that times its own DRAM clock.
#
# The first table sets each roof per cycle beside the datasheet's (its peak over the clock it
# states). The second judges every kernel against the roof of **its own precision and unit**,
# at its clocks, by the formula of the by-hand cell with its measured DRAM bytes: the three
# kernels of the tutorial this series grew from (an fp16 4096³ matmul, `x * 2` over the stream
# buffer, a softmax over a [rows × 1024] fp32 matrix as large), then the Transformer operations
# of section 3. `MHz` is the SM clock it ran; `ridge` the ridge point at its clocks; `AI` its
# measured intensity; `kernels` how many the annotation launched.
#
# One measurement serves sections 2 to 6: nsight-python's Nsight Compute backend where setup
# activated it, else the `ncu` command line on the same module, which returns nsight-python's
# own table. Every kernel is replayed once per metric pass with its caches flushed, two runs
# each. Where an annotation launches several kernels, `combine` folds them: times and bytes add
# up, percentages, clocks and stall ratios are weighted by duration.


# %%
def combine(x, y):
    """combine_kernel_metrics for METRICS: times and bytes add up, the rest weighted by time."""
    adds = np.isin(METRICS, [TIME, DRAM_BYTES])
    return np.where(adds, x + y, (x * x[0] + y * y[0]) / (x[0] + y[0]))


def wide(table) -> pd.DataFrame:
    """One row per annotation, one column per metric, and its kernels: how many, their names."""
    w = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue", sort=False)
    names = table[table.Metric == TIME].set_index("Annotation").Kernel
    return w.assign(kernels=names.str.count(r"\|") + 1, names=names)


def kernel_model(n_mm, n_vec, rows, m, precisions, b, h, s, dh, half, fused, e=2) -> dict:
    """Per annotation: FLOPs, the DRAM bytes the formula counts, the roof it is judged by; the
    math paths also FLOPs by operation (section 3's table; e: bytes per 16-bit element)."""
    d, sc, n = h * dh, b * h * s * s, b * h * s * dh  # sc: scores; n: elements of q, k, v, out
    att, soft = 4 * sc * dh + 5 * sc, {"_safe_softmax": (5 * sc, "fp32")}  # QK^T, PV; softmax
    ops32, ops16 = {**soft, "bmm": (2 * sc * dh, "fp32")}, {**soft, "bmm": (2 * sc * dh, half)}
    qkv = e * (b * s * d + d * 3 * d + b * s * 3 * d)  # read x and the weights, write q, k, v
    return {
        "fp16 matmul": (2 * n_mm**3, 2 * 3 * n_mm**2, "fp16"),
        "x * 2": (n_vec, 8 * n_vec, "fp32"),  # a read and a write of 4 bytes per FLOP
        "softmax [rows x 1024]": (5 * rows * 1024, 4 * 2 * rows * 1024, "fp32"),
        "QKV projection": (2 * b * s * d * 3 * d, qkv, half),
        "attention softmax": (5 * sc, e * 2 * sc, "fp32"),
        rk.MATH_FP32: (att, (4 * e + 48) * n + (34 + e) * sc, "fp32", ops32),
        rk.MATH_HALF: (att, 8 * e * n + (7 * e + 2) * sc, half, ops16),
        rk.FUSED[fused]: (att, 4 * e * n, half),  # q, k, v and the output
        rk.DEFAULT: (att, 4 * e * n, half),
    }


def flops_of(model: dict, name: str) -> tuple:
    """FLOPs and roof of an annotation, or of one operation of a region run op by op."""
    region, _, op = name.partition(": ")  # kernel_model's (FLOPs, bytes, roof[, FLOPs by op])
    return model[region][3].get(op.split()[-1], (0, "fp32")) if op else model[name][0:3:2]


def sheet_per_cycle(p: str, sheet=ENV.datasheet) -> float:
    """The datasheet's FLOP per SM cycle: its peak over the clock it states the peak at."""
    at = sheet and (sheet.peak_clock_mhz(p) or ENV.facts.max_sm_clock_mhz)
    return sheet.peak_tflops(p).value * 1e6 / at if sheet else np.nan


# %% [markdown]
# The placement on the roofline is a method notebook 11 applies to your own function, so its
# four functions live in this `# @save` cell and in `nspy_tutorial.lessons`, word for word.
# They take plain numbers (or columns): FLOPs, bytes, clocks in MHz, the roofs per cycle, the
# band. `allowed_seconds` is the by-hand formula at the clocks a kernel ran; `side_of_ridge`
# and `verdict` give the words of the legend at the top; `next_step` the remedy each points to.
# For a kernel that is neither, `next_step` reads the top
# [warp-stall reason](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#warp-stall-reasons)
# and the achieved [occupancy](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#occupancy)
# (section 4 explains both).


# %%
# @save
def allowed_seconds(flops, dram_bytes, sm_mhz, dram_mhz, flop_per_cycle, bytes_per_cycle):
    """max(F / P, B / W) at a kernel's clocks: P = FLOP/cycle x SM MHz, W = B/cycle x DRAM MHz."""
    compute = flops / (flop_per_cycle * sm_mhz * 1e6)
    return np.maximum(compute, dram_bytes / (bytes_per_cycle * dram_mhz * 1e6))


def side_of_ridge(intensity: float, ridge: float, near: float = 1.1) -> str:
    """ "compute", "memory", or "ridge" where the intensity lies within a factor `near` of it."""
    if intensity > ridge * near:
        return "compute"
    return "memory" if intensity < ridge / near else "ridge"


def verdict(pct: float, side: str, band: float, bound_at: float = 60) -> str:
    """The legend's word for a kernel at `pct` % of its roof on `side` (side_of_ridge's, or "ops"
    for a region judged op by op); `band` is the run-to-run band in %."""
    words = {"compute": "compute-bound", "memory": "memory-bound", "ops": "bound op by op"}
    bound = words.get(side, "bound on the ridge")
    if pct >= 100 - band:
        return bound + (", above its roof" if pct > 100 + band else ", at the roof")
    if pct >= bound_at + band:
        return bound
    return bound + " or neither" if pct > bound_at - band else "neither"


def next_step(verdict: str, side: str, stall: str = "", occupancy: float = 100.0) -> str:
    """The remedy a verdict points to; for "neither", from the top stall and the occupancy %."""
    if side == "ops":
        return "fuse: one kernel for its chain of operations"
    if not verdict.endswith("neither"):
        steps = {"compute": "change precision (a faster roof), or cut FLOPs"}
        steps["memory"] = "cut bytes: fuse with its neighbours, or use smaller types"
        return steps.get(side, "either: cut bytes or change precision")
    if side == "compute":
        return "change the kernel: one built for this GPU's tensor instructions (Hopper: wgmma)"
    if stall in ("long_scoreboard", "lg_throttle", "drain"):  # waiting for memory
        return "raise occupancy: more warps" if occupancy < 50 else "overlap: more loads in flight"
    if stall in ("barrier", "gmma"):
        return "overlap: less waiting at barriers (more stages in flight)"
    return "cut instructions: fewer passes, conversions and checks per byte (fuse)"


# %%
def place(w, model, pc, band) -> pd.DataFrame:
    """Each annotation the model counts (a region's operations too) against the roof of its
    precision at the clocks it ran; a region run op by op by its operations, added."""
    w = w[[n.split(": ")[0] in model for n in w.index]]
    flops, roof = (pd.Series(x, w.index) for x in zip(*[flops_of(model, n) for n in w.index]))
    sm, dram, fpc = w[CLOCK] / 1e6, w[DRAM_CLOCK] / 1e6, roof.map(pc)
    out = pd.DataFrame({"kernels": w.kernels, "us": w[TIME] / 1e3, "MHz": sm, "roof": roof})
    out["F"] = flops
    out["AI"], out["ridge"] = flops / w[DRAM_BYTES], fpc * sm / (pc["memory"] * dram)
    out["allowed us"] = 1e6 * allowed_seconds(flops, w[DRAM_BYTES], sm, dram, fpc, pc["memory"])
    out["side"] = [side_of_ridge(a, r, RIDGE) for a, r in zip(out.AI, out.ridge)]
    for region in [n for n in out.index if len(model.get(n, ())) > 3]:  # judged op by op
        ops = out.index.str.startswith(region + ": ")
        out.loc[region, ["allowed us", "side"]] = out.loc[ops, "allowed us"].sum(), "ops"
    out["% of roof"] = 100 * out["allowed us"] / out.us
    out["verdict"] = [verdict(p, sd, band, BOUND_AT) for p, sd in zip(out["% of roof"], out.side)]
    return out


with nt.section("2. Each kernel against its roof, at the clock it ran") as s:
    ENV.require("profiler")
    roofs = nt.needs(ROOFS, section="1")
    CONFIG = (4096, N_STREAM, ROWS, M_ROOF, ",".join(PRECISIONS), B, H, S, DH, HALF, FUSED_BACKEND)
    SETTINGS = dict(runs=2, metrics=METRICS, combine_kernel_metrics=combine, thermal_mode="off")
    SETTINGS["verbosity"] = SILENT
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend, in this process
        table = nsight.analyze.kernel(configs=[CONFIG], **SETTINGS)(rk.counters)().to_dataframe()
        source = "ncu"
    else:  # an older ncu: the ncu command line on the same file
        ENV.require("ncu-cli")
        table = ncu_cli.nsight_table(
            "roofline_kernels.py", rk.counters, ncu=ENV.ncu_path, configs=[CONFIG], **SETTINGS
        )
        source = "ncu-cli"
    RULES = nt.rules(source, cache_control="all", clock_control="none")
    say(RULES)
    MEASURED = wide(table)
    mats = MEASURED.loc[[f"{p} roof matmul" for p in PRECISIONS]].set_axis(PRECISIONS)
    per = pd.DataFrame({"TFLOP/s, sec. 1": pd.Series(roofs)[PRECISIONS], "MHz": mats[CLOCK] / 1e6})
    per["FLOP/cycle"] = 2 * M_ROOF**3 / (mats[TIME] / 1e9 * mats[CLOCK])
    per["datasheet's"] = [sheet_per_cycle(p) for p in PRECISIONS]
    per["% of sheet"] = 100 * per["FLOP/cycle"] / per["datasheet's"]
    print(per.to_string(float_format=fmt, na_rep="-"))
    nt.claim(not (per["% of sheet"] > 100).any(), "no roof matmul above the datasheet's FLOP/cycle")
    dram = MEASURED[DRAM_CLOCK] / 1e6  # DRAM's clock, during each kernel
    PER_CYCLE = {**per["FLOP/cycle"], "memory": roofs["memory"] * 1e3 / dram["x * 2"]}
    at = f"at the {dram['x * 2']:,.0f} MHz of x * 2 (all: {dram.min():,.0f}-{dram.max():,.0f})"
    say(f"memory: {roofs['memory']:,.0f} GB/s = {PER_CYCLE['memory']:,.0f} B per DRAM cycle {at}")
    LIMITS = place(MEASURED, kernel_model(*CONFIG), PER_CYCLE, BAND)
    whole = LIMITS[[": " not in n for n in LIMITS.index]]
    cols = ["kernels", "us", "MHz", "AI", "ridge", "% of roof", "verdict"]
    print(whole[cols].to_string(float_format=fmt))
    words = whole.verdict.str.split(",").str[0].value_counts()  # the verdicts, qualifiers aside
    counts = ", ".join(f"{n} {w}" for w, n in words.items())
    s.result = f"{len(whole)} judged at their clocks: {counts}"

# %% [markdown]
# ## 3. Transformer operations on the roofline, op by op
#
# The Nsight guide this series follows classifies a Transformer's operations: the QKV
# projection compute-bound (a GEMM on tensor cores), the attention softmax memory- or
# latency-bound, and FlashAttention fast because it never writes the [batch, heads, seq, seq]
# scores to DRAM. Section 2's table judged each of them; this section opens the math paths,
# which launch many kernels, and checks the counts behind every verdict.
#
# | operation | FLOPs | bytes the formula counts (e bytes per 16-bit element) | roof |
# |---|---|---|---|
# | QKV projection `[b·s, d] @ [d, 3d]` | 2 · b·s · d · 3d | e · (b·s·d + d·3d + b·s·3d) | its 16-bit precision |
# | attention softmax over `[b, h, s, s]` | 5 · b·h·s² | e · 2 · b·h·s² | fp32 (CUDA cores) |
# | flash attention, PyTorch's default attention (fused) | 4 · b·h·s²·dh + 5 · b·h·s² | e · 4n: q, k, v, output (n = b·h·s·dh) | 16-bit |
# | math attention, 16-bit | the same | e · 8n + (7e + 2) · b·h·s² | op by op |
# | math attention, fp32 (upcast) | the same | (4e + 48) · n + (34 + e) · b·h·s² | op by op |
#
# **The math path, counted as PyTorch runs it.** Per score, kept in 16 bit: QKᵀ writes it (e),
# PyTorch's *safe* softmax reads and writes it (2e), compares it with −∞ (reads e, writes a
# 1-byte flag), reduces the flags per row (reads 1) and zeroes rows that were all −∞ (reads and
# writes e), and PV reads the probabilities (e): 7e + 2 bytes. Upcast to fp32 the same passes
# move 4 bytes per score, plus a cast back to 16 bit. PyTorch upcasts 16-bit inputs to fp32 (its
# GEMMs then run on CUDA cores) unless `allow_fp16_bf16_reduction_math_sdp(True)` keeps them, so
# the notebook runs both and knows each row's precision from the inputs and that flag.
#
# **A region of several kernels is judged op by op.** One point for a whole region mixes a
# compute-bound GEMM with a memory-bound softmax and lands below both roofs. The op-by-op run
# gives each operation its time, bytes and clocks; its FLOPs are the formula's, by operation
# (`2·b·h·s²·dh` to each `bmm`, against the region's GEMM roof; `5·b·h·s²` to `_safe_softmax`,
# fp32; none to casts and scalings). The time the roofline allows the region is the sum of what
# it allows each operation (`allowed us`, each at its own clocks); `time` is an operation's share
# of the region's time, `score` its DRAM bytes per attention score. The checks: the op-by-op run
# launches the region's very kernels and
# names every operation given FLOPs as often as the formula counts it; measured bytes lie at
# most one L2 per kernel below the formula and at most `UPPER` times above it (a GEMM re-reads
# the tiles its L2 cannot keep, so the two plain GEMMs are held to the lower side only).
# PyTorch's FlashAttention needs compute capability ≥ 8.0 and 16-bit inputs; below (a T4 is
# 7.5) the notebook measures the memory-efficient backend instead, named as such.

# %%
with nt.section("3. Transformer operations, op by op") as s:
    ENV.require("profiler")
    lim, model, biggest = nt.needs(LIMITS, section="2"), kernel_model(*CONFIG), []
    for region in (rk.MATH_FP32, rk.MATH_HALF):
        ops = lim[lim.index.str.startswith(region + ": ")]
        score = MEASURED[DRAM_BYTES] / (B * H * S * S)  # DRAM bytes per attention score
        parts = ops.assign(time=100 * ops.us / ops.us.sum(), score=score)
        cols = ["kernels", "us", "time", "score", "allowed us", "verdict"]
        print(f"  {region}, op by op (time: % of its time; score: DRAM bytes per score):")
        print(parts[cols].rename(index=lambda n: n.split(": ")[1]).to_string(float_format=fmt))
        named = np.isclose(sum(flops_of(model, n)[0] for n in ops.index), model[region][0])
        same = "|".join(MEASURED.loc[ops.index, "names"]) == MEASURED.names[region]
        nt.claim(named and same, f"{region}: op by op, the region's kernels and FLOPs")
        biggest.append(f"{region}: {parts.time.idxmax().split()[-1]} {parts.time.max():.0f} %")
    whole = lim[[n in model for n in lim.index]]
    ratio = MEASURED.loc[whole.index, DRAM_BYTES] / [model[n][1] for n in whole.index]
    low = 1 - whole.kernels * L2 / [model[n][1] for n in whole.index]  # one L2 a kernel below
    gemm = whole.index.isin(["fp16 matmul", "QKV projection"])  # re-reads tiles: no upper bound
    bad = whole.index[(ratio < low) | ((ratio > UPPER) & ~gemm)]
    span = f"measured / formula {ratio.min():.2f}-{ratio.max():.2f}"
    nt.claim(not len(bad), "every kernel's DRAM bytes fit the formula", ", ".join(bad) or span)
    s.result = "; ".join(biggest) + " of the time"

# %% [markdown]
# ## 4. Why not at a roof: the counters behind each verdict
#
# A kernel below both roofs is limited by something else, and Nsight Compute counts what. The
# table sets each kernel (and each operation with at least 5 % of its math path's time) beside:
# its SM cycles, the tensor pipe busy (%
# of its peak over the cycles the SMs were active: HMMA and, on Hopper, `wgmma` work), the
# achieved **occupancy** (warps resident, as a % of the most an SM holds), the issue slots used
# (the share of the kernel's cycles an SM issued an instruction), and the **top warp-stall
# reason**: of Nsight
# Compute's `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`, the reason with
# the most warps waiting per issued instruction. `long_scoreboard` waits for global or local
# memory, `short_scoreboard` for shared memory or special functions, `wait` a fixed latency,
# `barrier` a `__syncthreads`, `math_pipe_throttle` a busy pipe, `not_selected` means warps were
# ready but another one issued, `mio_throttle`/`lg_throttle` full memory-instruction queues,
# `drain` stores at exit, `gmma` (Hopper only) `wgmma` results. These metric names were checked on
# an H200 with Nsight Compute 2025.3.1; `ncu --query-metrics` lists what your GPU has, and a
# name it lacks stops the measurement with an error that names it.
#
# Below the table, each verdict with the next step it points to (the legend at the top).
#
# The clock tells one more thing. A kernel limited by DRAM takes as many microseconds whatever
# the SM clock; one limited inside the SMs takes about as many *cycles* (`k cycles`, time × SM
# clock), so its microseconds grow as the clock falls. Run this notebook on a GPU whose clock is
# held lower and compare. `SM%` (the busiest unit of the SMs -- tensor pipe, FMA, load/store...
# -- as a % of its peak, not FLOP use) and `DRAM%` are Nsight Compute's two headline counters.
# The check: the busiest of them agrees with each verdict -- at least `BOUND_AT` − `NEAR` % for a
# bound kernel, below `BOUND_AT` + `NEAR` % for one that is neither (a verdict within the band of
# the line is not checked).

# %%
with nt.section("4. Why not at a roof: the counters behind each verdict") as s:
    ENV.require("profiler")
    lim = nt.needs(LIMITS, section="2")
    region_us = lim.us[[n.split(": ")[0] for n in lim.index]].values
    rows = lim[(lim.side != "ops") & (lim.us >= 0.05 * region_us)]  # ops of 5 % of a region or more
    w = MEASURED.loc[rows.index]
    stalls = w[[STALL.format(r) for r in REASONS]].set_axis(REASONS, axis=1)
    top = stalls.idxmax(axis=1)
    diag = pd.DataFrame({"k cycles": w[TIME] * w[CLOCK] / 1e12, "SM%": w[SM_PCT]})
    diag[["DRAM%", "tensor%", "occup.%", "issue%"]] = w[[DRAM_PCT, TENSOR, OCCUPANCY, ISSUE]].values
    diag["top stall"] = top + " " + stalls.max(axis=1).map("{:.1f}".format)
    print(diag.to_string(float_format=fmt))
    for name, r in rows.iterrows():
        step = next_step(r.verdict, r.side, top[name], w.loc[name, OCCUPANCY])
        say(f"{name}: {r.verdict} ({r['% of roof']:.0f} %) -> {step}")
    busy, neither = diag[["SM%", "DRAM%"]].max(axis=1), rows.verdict == "neither"
    wrong = (neither & (busy >= BOUND_AT + NEAR)) | (~neither & (busy < BOUND_AT - NEAR))
    wrong &= ~rows.verdict.str.endswith(" or neither")  # near the line, counters decide nothing
    nt.claim(not wrong.any(), "verdicts agree with the busiest unit", ", ".join(rows.index[wrong]))
    stalls_of = ", ".join(f"{k} ({n})" for k, n in top[neither].value_counts().items()) or "none"
    s.result = f"{neither.sum()} of {len(rows)} neither; their top stalls: {stalls_of}"

# %% [markdown]
# ## 5. FlashAttention against math attention: three questions, and what fusing buys
#
# Judge a fused kernel as Nsight Compute sees it, by three questions answered from counters:
# is **tensor-core utilisation up** (the tensor pipe, weighted over the region's kernels)? Is
# **DRAM traffic down** (`dram__bytes.sum`)? Did **fusion happen** (how many kernels the region
# launched)? Compared with the math path kept in 16 bit, the precision is the same, so what
# changes is fusion alone. Section 3's op-by-op table showed where the math path's time goes:
# the safe softmax's passes over the scores. The roofline says how much fusing can save at
# least: the bytes the fused kernel no longer moves, at the memory roof. The cell then measures
# what it saved, and calls the difference real only beyond this run's band; the same for
# changing precision alone (math upcast to fp32 against math kept in 16 bit).

# %%
with nt.section("5. Flash vs math attention: three questions, fusion measured") as s:
    ENV.require("profiler")
    lim, fused = nt.needs(LIMITS, section="2"), rk.FUSED[FUSED_BACKEND]
    answers = MEASURED.loc[[rk.MATH_HALF, fused], [TENSOR, DRAM_BYTES, "kernels", TIME]]
    answers = answers.set_axis(["tensor %", "DRAM MB", "kernels", "us"], axis=1) / [1, 1e6, 1, 1e3]
    print(answers.T.to_string(float_format=fmt))
    math16, flash = answers.iloc[0], answers.iloc[1]
    up, down = flash["tensor %"] > math16["tensor %"], flash["DRAM MB"] < math16["DRAM MB"]
    say(f"tensor pipe up: {up}; DRAM traffic down: {down}; fused: {flash.kernels < math16.kernels}")
    nt.claim(down and flash.kernels < math16.kernels, "the fused one: fewer bytes, fewer kernels")
    for before, after in ((rk.MATH_HALF, fused), (rk.MATH_FP32, rk.MATH_HALF)):
        a, b = lim.us[before], lim.us[after]
        real = "beyond" if abs(100 * (b - a) / a) > BAND else "within"
        change = f"{a:,.0f} -> {b:,.0f} us, {100 * (b - a) / a:+.0f} % ({real} the band)"
        say(f"{before} -> {after}: {change}")
    least = (math16["DRAM MB"] - flash["DRAM MB"]) / ROOFS["memory"] * 1e3  # us at the memory roof
    saved = math16.us - flash.us
    say(f"fusion saves at least the bytes it does not move: {least:,.0f} us; it saved {saved:,.0f}")
    nt.claim(saved >= least and saved > BAND * math16.us / 100, "it saved that, beyond the band")
    s.result = f"{fused}: {math16.us / flash.us:.1f}x faster than {rk.MATH_HALF}, beyond the band"

# %% [markdown]
# ## 6. The roofline plot
#
# Log-log: arithmetic intensity (FLOP per DRAM byte) across, and up **FLOP per SM cycle**, a
# kernel's FLOPs over the cycles it ran (its time × the SM clock it ran). Per cycle, each compute
# roof is one horizontal line that no clock moves: section 2's FLOP per cycle of its roof matmul
# (fp16's is dashed: it may lie on bf16's). The memory roof is not: DRAM keeps its own clock, so
# per SM cycle a kernel's memory roof is section 2's bytes per DRAM cycle × its DRAM clock / its
# SM clock, higher for a kernel the GPU ran slower. The shaded band is that roof from the fastest
# to the slowest SM clock of the kernels plotted.
#
# Each point is a row sections 2–4 judge: the single kernels, and each operation of the math
# paths on its own (those without FLOPs have no place on a log scale). Its colour is the roof it
# is judged by (purple: the memory roof), and a thin line from it ends in a dash at that roof, at
# the clocks the kernel ran: the gap between dot and dash is its % of roof in the tables. A
# triangle is one above its roof by more than the run-to-run band. The thin grey lines are the
# datasheet's FLOP per cycle; its bandwidth has no line here, as per SM cycle it would need a
# clock (section 1 compares it in GB/s). The title says which tool measured the dots and which the
# memory roof, under which rules. The check: no kernel beats the hardware -- none above the
# datasheet's FLOP per cycle, none above the device's own DRAM peak.


# %%
with nt.section("6. The roofline plot") as s:
    ENV.require("profiler")
    pts = nt.needs(LIMITS, section="2").query("F > 0 and side != 'ops'").copy()  # each one judged
    pts["y"], pts["roof y"] = pts.F / (pts.us * pts.MHz), pts.F / (pts["allowed us"] * pts.MHz)
    pts["by"] = pts.roof.where(pts["roof y"] > 0.999 * pts.roof.map(PER_CYCLE), "memory")
    per_sm = (pts.roof.map(PER_CYCLE) / pts.ridge).agg(["min", "max"])  # memory roof, B per cycle
    colors = {"fp16": "C0", "bf16": "C1", "fp32": "C2", "memory": "C4"}
    ai, top = np.geomspace(pts.AI.min() / 3, pts.AI.max() * 3), max(map(PER_CYCLE.get, PRECISIONS))
    fig, ax = plt.subplots(figsize=(10, 9))
    label = f"memory roof, {PER_CYCLE['memory']:,.0f} B per DRAM cycle, over the SM clocks"
    label += " {:,.0f}-{:,.0f} MHz the kernels ran".format(*pts.MHz.agg(["min", "max"]))
    band = np.minimum(top, np.outer(per_sm, ai))  # at the slowest and at the fastest SM clock
    ax.fill_between(ai, *band, color=colors["memory"], alpha=0.3, lw=0, label=label)
    for p, ls in zip(PRECISIONS, ["-", (0, (4, 4))] * 2):  # every second dashed: fp16 on bf16
        y, label = PER_CYCLE[p], f"{p} roof: {PER_CYCLE[p]:,.0f} FLOP/cycle"
        ax.plot([y / per_sm["max"], ai[-1]], [y, y], c=colors[p], ls=ls, label=label)
    cap = [sheet_per_cycle(p) for p in PRECISIONS]  # the datasheet's, thin and grey
    ax.hlines(cap, ai[0], ai[-1], color="0.6", lw=0.6, label=ENV.datasheet and "datasheet roofs")
    for i, (name, r) in enumerate(pts.iterrows(), 1):
        label = f"{i}: {name} ({r['% of roof']:.0f} % of the {r.by} roof)"
        ax.plot(r.AI, r.y, "^" if "above" in r.verdict else "o", color=colors[r.by], label=label)
        ax.plot([r.AI] * 2, [r.y, r["roof y"]], "-_", c=colors[r.by], lw=0.8, ms=12, markevery=[1])
    ax.set(xscale="log", yscale="log", xlim=(ai[0], ai[-1]), ylim=(pts.y.min() / 3, 2 * top))
    ax.set(xlabel="arithmetic intensity (FLOP per DRAM byte)", ylabel="FLOP per SM cycle")
    title = f"{ENV.gpu_name}, ncu {backend.version_text(ENV.ncu_version)}: each kernel (dot) "
    title += "against the roof it is judged by (dash), per SM cycle\ndots and compute roofs "
    ax.set_title(f"{title}{RULES}\nmemory roof {nt.rules(ENV.backend)}", size=8)
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    ends = [(x * f, y) for x, y in zip(pts.AI, pts["roof y"]) for f in (0.87, 1, 1.15)]  # a dash
    marks = [*zip(pts.AI, pts.y), *ends, *((x, PER_CYCLE[p]) for p in PRECISIONS for x in ai)]
    for i, (x, y, xy) in enumerate(zip(pts.AI, pts.y, nt.label_offsets(ax, marks, len(pts))), 1):
        ax.annotate(str(i), (x, y), textcoords="offset pixels", xytext=xy, ha="center", fontsize=8)
    plt.show()
    one = LIMITS[LIMITS.side != "ops"]  # FLOP/cycle over the datasheet's, GB/s over the device's
    over = one.F / one.us / one.MHz > one.roof.map(sheet_per_cycle)
    over |= MEASURED.loc[one.index, DRAM_BYTES] / one.us / 1e3 > ROOFS["device"]
    nt.claim(not over.any(), "no kernel beats the hardware's peaks", ", ".join(over[over].index))
    s.result = f"{len(pts)} kernels and operations, each against its roof at its clock"

# %% [markdown]
# ## Takeaways
#
# - State a roof per cycle (FLOP per SM cycle, bytes per DRAM cycle) and judge a kernel at the
#   clock it ran: a FLOP rate alone changes with the clock, a held clock included, and the
#   verdict with it.
# - Count FLOPs and bytes before profiling: `max(F / P, B / W)` is the least time; the
#   measured time over it is the % of roof. Count what the library really launches.
# - A region of several kernels is judged op by op; one point for its totals lands below both
#   roofs and says nothing.
# - "Neither" is a diagnosis to finish: the tensor pipe, occupancy and the top stall reason
#   say whether to raise occupancy, overlap, cut instructions, or change the kernel.
# - A difference is real only beyond the run-to-run band, measured in this run (two calls of
#   the same kernels), not assumed.
# - A fused kernel is judged by three questions from counters (tensor pipe, DRAM bytes, kernel
#   count); the roofline says the least it should save, the measurement what it saved.
#
# ## Try it
#
# - Change `S` to 512 and 4096: the math path's extra bytes grow with s², the fused kernel's do not.
# - Set `BOUND_AT` to 50 and see which verdicts move: those were near the line.
# - Notebook 11 applies these `# @save` functions to your own function.
#
# Docs: [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html)
# (`metrics`, `combine_kernel_metrics`), the Nsight Compute
# [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html) (roofline,
# warp stall reasons, metrics), [roofline](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#roofline).

# %%
nt.summary()
