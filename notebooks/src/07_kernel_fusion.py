# %% [markdown]
# # 07 · Kernel fusion, measured in bytes -- and on the timeline
#
# **What you will learn**
# - why `a + b * c` in eager PyTorch moves more bytes than `torch.addcmul(a, b, c)`, and how
#   to *measure* that with the DRAM counters `dram__bytes_read.sum` and
#   `dram__bytes_write.sum`, summed over an annotation's kernels with
#   `combine_kernel_metrics`;
# - how to count the bytes a kernel sequence must move by hand, and hold the counters to it;
# - three ways to write bias + GELU -- the formula written out as GPT-2 does, PyTorch's own
#   `F.gelu`, and `torch.compile` -- and what each costs in kernels, bytes and time; where
#   the idiomatic version's time goes, kernel by kernel; why the compiler must do its work
#   outside the measured region;
# - how to judge `torch.compile` by three questions answered from counters: did
#   [fusion](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#kernel-fusion)
#   happen, did DRAM traffic fall, are the SMs or tensor cores busier;
# - how close a fused kernel gets to this GPU's bandwidth roof, judged against how far one
#   kernel moves between two calls of this run;
# - what a **timeline** shows that per-kernel numbers cannot: the GPU waiting for the CPU
#   between small kernels, drawn by Nsight Systems (`nsys`) where it is installed, else by
#   `torch.profiler`.
#
# | section | needs |
# |---|---|
# | 1. `a + b * c` vs `torch.addcmul` | nsight-python's Nsight Compute backend, or any `ncu` command line |
# | 2. bias + GELU, three ways, and the bias add apart | the same, plus Triton for `torch.compile` (compute capability ≥ 7.0; a T4 is fine) |
# | 3. three questions for `torch.compile` | section 2 |
# | 4. how close to the bandwidth roof | any nsight-python backend, plus Triton |
# | 5. the timeline | a GPU and Triton; Nsight Systems if installed (Colab: installed here), else `torch.profiler` |
#
# Sizes come from your GPU: every vector is 16× its L2 (at least 256 MiB), or less where
# free memory caps it -- the setup cell below prints the ratio -- so the bytes really travel
# to and from DRAM. On Colab this notebook is a fresh runtime of its own: its setup cell
# installs what it needs (run again, it skips what is there).

# %%
{{SETUP}}

# %%
import importlib.util
import time
from collections import Counter

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch
from scipy import stats

from nspy_tutorial import backend, bootstrap, ncu_cli, timeline
from nspy_tutorial.lessons import run_to_run_pct, welch_shift

SILENT = nsight.VerbosityLevel.SILENT
TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"  # the SMs' busiest unit, % of its peak
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"  # tensor pipe busy, %
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"  # DRAM busy, % of its peak
CLOCK = "gpc__cycles_elapsed.avg.per_second"  # the SM clock the kernel ran at, Hz
MiB, HIDDEN = 2**20, 4096  # HIDDEN: the GELU's width (a transformer MLP's 4 x d_model)


def combine(x, y):
    """combine_kernel_metrics: time and bytes add up; the % and the clock are weighted by time."""
    both = x + y
    both[3:] = (x[0] * x[3:] + y[0] * y[3:]) / both[0]
    return both


SETTINGS = dict(
    runs=3,
    metrics=[TIME, READ, WRITE, SM, TENSOR, DRAM, CLOCK],  # combine() relies on this order
    combine_kernel_metrics=combine,
    cache_control="all",
    clock_control="none",
    thermal_mode="off",
    verbosity=SILENT,
)
GELU = GELU_TABLE = None  # section 2 sets them, for section 3
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    VECTOR = min(max(16 * L2, 256 * MiB), torch.cuda.mem_get_info()[0] // 16) // MiB * MiB
    N, ROWS = VECTOR // 4, VECTOR // 4 // HIDDEN  # floats per vector; GELU input: ROWS x HIDDEN
    print(f"L2 {L2 / MiB:.0f} MiB -> vectors of {N:,} floats ({VECTOR / MiB:,.0f} MiB, ", end="")
    print(f"{VECTOR / L2:.1f}x L2); GELU input {ROWS:,} x {HIDDEN}")

# %% [markdown]
# ## The kernels, written once
#
# Every workload of this notebook is in the cell below, which Jupyter's `%%writefile` saves
# as `fusion_kernels.py` in the notebook's work folder. The notebook imports it; when the
# `ncu` command line measures instead of nsight-python's backend, or Nsight Systems draws the
# timeline, it runs the same file (the command is printed). `fusion`, `gelu` and `roof` are
# the functions nsight-python profiles: each `nsight.annotate` region is one row of its table.
# `trace` is section 5's: each of its ranges is marked twice, for NVTX (what Nsight Systems
# records) and for `torch.profiler` (its `record_function`).

# %% writefile fusion_kernels.py
"""The workloads of notebook 07: imported by the notebook, run by the ncu and nsys command lines."""
import contextlib
import functools
import math

import nsight
import nvtx
import torch
import torch.nn.functional as F

UNFUSED, ADDCMUL = "a + b * c", "torch.addcmul(a, b, c)"
HAND, IDIOMATIC, COMPILED = "GELU by hand, eager", "F.gelu, eager", "GELU, torch.compile"
BIAS, GELU_ONLY = "x + bias, eager", "F.gelu(h) alone, eager"  # the idiomatic one's two kernels
# vectors read + written; x.sum() is a reduction kernel that reads x, the others streams
STREAMS = {"x.sum()": 1, "y = x * 2": 2, "y = x + w": 3, "y = addcmul(x, w, v)": 4}
SMALL, CALLS = 16, 5  # section 5: rows of the small input (16 x 4096 floats), calls per range
CASES = ("eager, small", "compiled, small", "eager, large", "compiled, large")  # section 5's ranges


def gelu_by_hand(x, bias):
    """Bias add, then GELU's tanh approximation written out as GPT-2 does (its NewGELUActivation)."""
    h = x + bias
    return (
        0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
    )


def gelu_idiomatic(x, bias):
    """What a practitioner writes: the bias add, then PyTorch's GELU with the same approximation."""
    return F.gelu(x + bias, approximate="tanh")


@functools.cache
def compiler():
    """torch.compile's version of gelu_by_hand, made on first use (importing it takes a second)."""
    import torch._inductor.config

    torch._inductor.config.compile_threads = 1  # compile in this process: no pool of workers
    return torch.compile(gelu_by_hand, dynamic=False)


def compiled_gelu(x, bias):
    """The first call on a shape compiles (seconds); later calls launch one fused kernel."""
    return compiler()(x, bias)


def fusion(n):
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate(UNFUSED):
        a + b * c
    with nsight.annotate(ADDCMUL):
        torch.addcmul(a, b, c)


def gelu(rows, hidden):
    x, bias = torch.randn(rows, hidden, device="cuda"), torch.randn(hidden, device="cuda")
    h = x + bias  # outside the annotations: in a model, the linear layer's epilogue adds the bias
    compiled_gelu(x, bias)  # compiles on the first run of a fresh process, outside every annotation
    with nsight.annotate(HAND):
        gelu_by_hand(x, bias)
    with nsight.annotate(IDIOMATIC):
        gelu_idiomatic(x, bias)
    with nsight.annotate(BIAS):
        x + bias
    with nsight.annotate(GELU_ONLY):
        F.gelu(h, approximate="tanh")
    with nsight.annotate(COMPILED):
        compiled_gelu(x, bias)


def roof(rows, hidden):
    x, w, v = (torch.randn(rows, hidden, device="cuda") for _ in range(3))
    y, bias = torch.empty_like(x), torch.randn(hidden, device="cuda")
    compiled_gelu(x, bias)  # outside every annotation, as in gelu()
    with nsight.annotate("x.sum()"):
        x.sum()
    with nsight.annotate("y = x * 2"):
        torch.mul(x, 2.0, out=y)
    with nsight.annotate("y = x + w"):
        torch.add(x, w, out=y)
    with nsight.annotate("y = addcmul(x, w, v)"):
        torch.addcmul(x, w, v, out=y)
    with nsight.annotate(COMPILED):
        compiled_gelu(x, bias)


@contextlib.contextmanager
def timeline_range(name):
    """One range both timelines show: NVTX for Nsight Systems, record_function for torch.profiler."""
    with nvtx.annotate(name), torch.profiler.record_function(name):
        yield


def trace(rows, hidden):
    """Section 5: GELU by hand, eager and compiled, on a small and a large input; CALLS calls a range."""
    bias = torch.randn(hidden, device="cuda")
    for size, n_rows in (("small", SMALL), ("large", rows)):
        x = torch.randn(n_rows, hidden, device="cuda")
        for kind, run in (("eager", gelu_by_hand), ("compiled", compiled_gelu)):
            run(x, bias)  # warm-up outside the range (the compiled one compiles for this shape)
            torch.cuda.synchronize()
            with timeline_range(f"{kind}, {size}"):
                for _ in range(CALLS):
                    run(x, bias)
                torch.cuda.synchronize()  # the range ends when the GPU is done


if __name__ == "__main__":  # what the ncu and nsys command lines run (the printed command shows it)
    from nspy_tutorial import ncu_cli

    ncu_cli.replay(globals())

# %%
import fusion_kernels as fk

fk = importlib.reload(fk)  # after an edit of the cell above, its new version


def hand_counts(n: int, hidden: int) -> dict:
    """Kernels, DRAM bytes read and written per variant, counted by hand (the text's tables)."""
    v, b = 4 * n, 4 * hidden  # bytes of one vector and of the bias
    return {
        fk.UNFUSED: (2, (2 + 2) * v, (1 + 1) * v),  # t = b * c; then a + t
        fk.ADDCMUL: (1, 3 * v, v),
        fk.HAND: (9, 11 * v + b, 9 * v),
        fk.IDIOMATIC: (2, 2 * v + b, 2 * v),  # h = x + bias; then gelu(h)
        fk.BIAS: (1, v + b, v),
        fk.GELU_ONLY: (1, v, v),
        fk.COMPILED: (1, v + b, v),
    }


def variants(table: pd.DataFrame, counts: dict) -> pd.DataFrame:
    """Per annotation: kernels, time (mean, Student-t 95 % half-width), DRAM MB measured, counted."""
    rows = {}
    for name, m in table.groupby("Annotation", sort=False):
        m, (_, read, write) = m.set_index("Metric"), counts[name]
        t = m.loc[TIME]
        rows[name] = {
            "kernels": t.Kernel.count("|") + 1,
            "time us": t.AvgValue / 1e3,
            "+/- us": stats.t.ppf(0.975, t.NumRuns - 1) * t.StdDev / np.sqrt(t.NumRuns) / 1e3,
            "read MB": m.AvgValue[READ] / 1e6,
            "counted read MB": read / 1e6,
            "write MB": m.AvgValue[WRITE] / 1e6,
            "counted write MB": write / 1e6,
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def as_counted(row: pd.Series, kernels: int, l2: float) -> bool:
    """The DRAM counters against the hand count (the slack is the text's)."""
    read = row["read MB"] / row["counted read MB"]
    write, counted = row["write MB"], row["counted write MB"]
    return 0.98 <= read <= 1.10 and counted - kernels * l2 / 1e6 <= write <= 1.10 * counted


def batch(table: pd.DataFrame, name: str) -> tuple[float, float, int]:
    """A variant's time as notebook 03's batch: (mean, standard deviation, runs)."""
    t = table[(table.Annotation == name) & (table.Metric == TIME)].iloc[0]
    return t.AvgValue, t.StdDev, t.NumRuns


def verdict(shift: float, half: float, margin: float = 2.0) -> str:
    """A shift (%) and its 95 % half-width: a side only where the whole interval is beyond margin."""
    if abs(shift) - half <= margin:
        return f"not distinguishable (within {margin:g} %)"
    return "slower" if shift > 0 else "faster"


def report(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """Whose rules measured, each variant against its hand count (printed), the count's claims."""
    print(nt.rules(source, SETTINGS["cache_control"], SETTINGS["clock_control"]))
    counts = hand_counts(N, HIDDEN)
    t = variants(table, counts)
    print(t.to_string(float_format="{:,.1f}".format))
    for name, r in t.iterrows():
        launched = table[(table.Annotation == name) & (table.Metric == TIME)].Kernel.iloc[0]
        names = Counter(launched.split("|"))
        kernels = ", ".join(f"{c} x " * (c > 1) + nt.short_kernel_name(k) for k, c in names.items())
        nt.claim(r.kernels == counts[name][0], f"{name}: kernels as counted", kernels)
        nt.claim(as_counted(r, r.kernels, L2), f"{name}: DRAM bytes as counted")
    return t


def counters(func, config: tuple) -> tuple[pd.DataFrame, str]:
    """`func` under SETTINGS: by the Nsight Compute backend, else by the ncu command line."""
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend: this process, one call
        return nsight.analyze.kernel(configs=[config], **SETTINGS)(func)().to_dataframe(), "ncu"
    # CUPTI measures durations only: the ncu command line runs the same file, same settings
    kept = ncu_cli.nsight_table(
        "fusion_kernels.py", func, ncu=ENV.ncu_path, configs=[config], **SETTINGS
    )
    return kept, "ncu-cli"


# %% [markdown]
# ## 1. Unfused vs fused: `a + b * c` against `torch.addcmul(a, b, c)`
#
# Eager PyTorch runs `a + b * c` as two kernels: the multiply writes a temporary `t = b * c`
# to DRAM, the add reads it back. `torch.addcmul(a, b, c)` computes the same in one kernel.
# Counted by hand, for *n* float32 elements (4 bytes each):
#
# | variant | kernel | reads | writes |
# |---|---|---|---|
# | `a + b * c` | `t = b * c` | b, c: 8n | t: 4n |
# | | `a + t` | a, t: 8n | result: 4n |
# | | **total** | **16n** | **8n** → 24n bytes |
# | `torch.addcmul` | one kernel | a, b, c: 12n | result: 4n → 16n bytes |
#
# So fusion should save a third of the traffic and, since both are memory-bound, about a
# third of the time. The unfused annotation launches two kernels: without
# `combine_kernel_metrics` nsight-python would refuse it (notebook 02 shows the error). With
# `combine` (above) it adds the two kernels' times *and* their byte counts, metric by metric;
# nsight-python hands the function one array per kernel, so the percentages and the clock it
# also measures (section 3) are averaged, each kernel weighted by its time.
#
# **Which tool measures.** nsight-python's Nsight Compute backend collects the time and the
# counters in one call. The CUPTI backend measures durations only, so on a machine with an
# older `ncu` the `ncu` command line runs `fusion_kernels.py` with the same settings and
# hands back nsight-python's own table -- the same columns, the same rules (caches flushed
# before every kernel, clocks free), printed above the table. Either way the `Kernel` column
# holds the kernels' bare function names, joined by `|`: PyTorch's elementwise kernels are
# called `vectorized_elementwise_kernel` (every operand contiguous) or `elementwise_kernel`
# (the generic path), whatever they compute.
#
# What to look for: the kernel counts; `read MB` against `counted read MB` (after a flush
# every input byte must come from DRAM); `write MB` a little short of its count (a kernel's
# last writes may still sit in L2 when its counters stop: at most one L2 per kernel); and
# the time difference in % of `addcmul`'s time, with its 95 % Welch interval (notebook 03's
# `welch_shift`: each variant keeps its own spread, so a noisy one widens the interval).

# %%
with nt.section("1. Unfused vs fused: a + b * c against torch.addcmul") as s:
    ENV.require("ncu" if ENV.backend == "ncu" else "ncu-cli")  # counters: either tool
    table, source = counters(fk.fusion, (N,))
    t = report(table, source)
    shift, half, _ = welch_shift(batch(table, fk.ADDCMUL), batch(table, fk.UNFUSED))
    nt.claim(shift > half, "a + b * c takes longer than addcmul", f"{shift:+.1f} % +- {half:.1f} %")
    moved = t["read MB"] + t["write MB"]
    s.result = (
        f"unfused/fused: {moved[fk.UNFUSED]:,.0f}/{moved[fk.ADDCMUL]:,.0f} MB, "
        f"{t['time us'][fk.UNFUSED]:,.0f}/{t['time us'][fk.ADDCMUL]:,.0f} us ({shift:+.0f} %)"
    )

# %% [markdown]
# ## 2. Bias + GELU, three ways: by hand, `F.gelu`, `torch.compile` -- and the bias add apart
#
# Nobody writes `addcmul` by hand for every expression. Here is a chain from a real model:
# the bias add and GELU after the first linear layer of a GPT-2-style MLP. GPT-2 writes
# GELU's tanh approximation out in Python (`gelu_by_hand` above); eager PyTorch runs that as
# **nine** kernels, each reading its inputs from DRAM and writing a full-size temporary:
#
# | # | eager kernel | reads | writes |
# |---|---|---|---|
# | 1 | `h = x + bias` | x, bias | h |
# | 2 | `0.5 * h` | h | t1 |
# | 3 | `torch.pow(h, 3.0)` | h | t2 |
# | 4 | `0.044715 * t2` | t2 | t3 |
# | 5 | `h + t3` | h, t3 | t4 |
# | 6 | `sqrt(2/π) * t4` | t4 | t5 |
# | 7 | `torch.tanh(t5)` | t5 | t6 |
# | 8 | `1.0 + t6` | t6 | t7 |
# | 9 | `t1 * t7` | t1, t7 | y |
#
# That is 11 reads and 9 writes of n floats: 80n bytes (plus the small bias). The idiomatic
# eager version, `F.gelu(x + bias, approximate="tanh")`, is two kernels (the add, then
# PyTorch's own GELU): 16n bytes. One fused kernel reads x and the bias and writes y: 8n
# bytes -- a tenth of the hand-written chain, half of the idiomatic one. The fair baseline
# for `torch.compile` is the idiomatic one; the hand-written chain shows what it rescues.
# `torch.compile` generates its fused kernel with
# [Triton](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#triton),
# a compiler for GPU kernels written in Python; its kernels' names start with `triton_`.
#
# **The bias add, apart.** The idiomatic row's two kernels are also measured one at a time:
# `x + bias` (8n bytes) and `F.gelu(h)` on a ready `h` (8n bytes). Their times should add
# up to the idiomatic row's (checked), and they say where its time goes. PyTorch's
# elementwise kernels use vector loads only when every operand is contiguous; the bias is
# broadcast along the rows (a stride of zero), so `x + bias` runs the generic
# `elementwise_kernel` -- look at its name -- not the `vectorized_elementwise_kernel` that
# `F.gelu(h)` runs. In a model the bias add costs no kernel of its own: the linear layer
# before the GELU adds it as it writes its output, in the matmul's
# [epilogue](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#epilogue)
# (the last step of a matmul kernel, applied to each result before it is stored). So
# `F.gelu(h)` alone is what an eager model pays for its GELU, and the compiled kernel (which
# adds the bias too) is set against it; where the 95 % interval of the difference does not
# reach beyond 2 % either way, the cell says **not distinguishable** rather than pick a
# winner that could change from run to run.
#
# **Compile before you measure, outside the annotation.** The first call of a
# `torch.compile`d function traces it, generates and compiles a Triton kernel (seconds of
# CPU time) and launches it several times to pick a configuration. Inside an annotation
# that would time the compiler and break nsight-python's "same kernels in every run" rule.
# So the cell compiles once, here, on the profiled shapes, and checks the three versions
# agree. `gelu` calls `compiled_gelu` once before its annotations too, so the `ncu`
# command line's fresh process compiles for itself before its first annotation.


# %%
def require_triton() -> None:
    """torch.compile's GPU code generator: Triton, on compute capability 7.0 or newer."""
    ENV.require_compute_capability((7, 0), "torch.compile's Triton code generator", also="triton")
    if importlib.util.find_spec("triton") is None:
        raise nt.Skip(
            "torch.compile generates GPU kernels with Triton, and Triton is not installed",
            "install PyTorch's CUDA build for Linux, which brings Triton (`pip install torch`)",
            needs="triton",
        )


with nt.section("2. Bias + GELU three ways: by hand, F.gelu, torch.compile") as s:
    ENV.require("ncu" if ENV.backend == "ncu" else "ncu-cli", also="triton")
    require_triton()
    x, bias = torch.randn(ROWS, HIDDEN, device="cuda"), torch.randn(HIDDEN, device="cuda")
    start = time.perf_counter()
    y = fk.compiled_gelu(x, bias)  # compiles: once, before and outside any annotation
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    error = max((f(x, bias) - y).abs().max().item() for f in (fk.gelu_by_hand, fk.gelu_idiomatic))
    del x, bias, y  # freed: gelu (or the ncu child) makes its own
    print(f"  compiled and warmed up in {compile_s:.1f} s, before and outside any annotation")
    nt.claim(error < 1e-4, "by hand, F.gelu and compiled agree", f"max |difference| {error:.1e}")
    GELU_TABLE, source = counters(fk.gelu, (ROWS, HIDDEN))
    GELU = t = report(GELU_TABLE, source)
    for slow in (fk.HAND, fk.IDIOMATIC):
        shift, half, _ = welch_shift(batch(GELU_TABLE, fk.COMPILED), batch(GELU_TABLE, slow))
        nt.claim(
            shift > half, f"{slow} takes longer than compiled", f"{shift:+.0f} % +- {half:.1f}"
        )
    bias, alone, both = (t["time us"][name] for name in (fk.BIAS, fk.GELU_ONLY, fk.IDIOMATIC))
    sums = f"{bias:,.0f} + {alone:,.0f} vs {both:,.0f} us"
    nt.claim(abs(bias + alone - both) < 0.05 * both, "bias add + F.gelu(h) = F.gelu (5 %)", sums)
    shift, half, _ = welch_shift(batch(GELU_TABLE, fk.COMPILED), batch(GELU_TABLE, fk.GELU_ONLY))
    same = verdict(shift, half)
    print(f"  F.gelu(h) alone against compiled: {shift:+.1f} % +- {half:.1f} % (95 %): {same}")
    s.result = (
        f"compiled {t['time us'][fk.COMPILED]:,.0f} us, F.gelu {both:,.0f}, by hand "
        f"{t['time us'][fk.HAND]:,.0f}; F.gelu(h) alone: {same}"
    )

# %% [markdown]
# Did the fusion succeed? The `Kernel` column says how many kernels each region launched and
# their names (Triton's start with `triton_`); the byte counters say whether DRAM traffic
# fell. Both are needed: a "fused" region that still launches a copy kernel, or a compiled
# kernel that re-reads its input, shows up in one and not necessarily in the other.
#
# ## 3. Did `torch.compile` help? Three questions, answered from counters
#
# Judge a compiler's output as you would judge FlashAttention: not by its time alone, but by
# three questions the counters of section 2's one measurement answer.
#
# 1. **Did fusion happen?** The kernel count per region.
# 2. **Did DRAM traffic fall?** The measured DRAM bytes.
# 3. **Are the SMs or the tensor cores busier?** `sm__throughput.avg.pct_of_peak_sustained_elapsed`
#    is the busiest unit of the SMs (FMA, ALU, load/store, ...) as a % of its peak over the
#    kernel's whole run ([`_elapsed` vs `_active`](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#pct_of_peak_sustained_elapsed-vs-_active):
#    `_elapsed` divides by every cycle of the run, `_active` only by the cycles the unit had
#    work); `sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active` is how busy the
#    [tensor cores](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#tensor-core)
#    were. Both count cycles, so they are % of the peak *at the clock the kernel ran*,
#    printed beside them (`gpc__cycles_elapsed.avg.per_second`); a region's value is its
#    kernels' average, weighted by time.
#
# A GELU has no matrix multiply, so expect the tensor pipe idle in every variant: the gain
# can only come from fewer bytes and fewer launches. Which unit limits the compiled kernel is
# read as notebook 06 does, from the one closer to its peak: the SMs, or DRAM
# (`dram__throughput.avg.pct_of_peak_sustained_elapsed`, at the memory clock). A locked or
# lowered SM clock raises a DRAM-bound kernel's SM % (the same work in fewer cycles), not its
# DRAM %. The verdict names the next step.


# %%
def three_questions(table: pd.DataFrame, t: pd.DataFrame) -> pd.DataFrame:
    """Per variant: kernels, DRAM MB, SM and tensor %, the SM clock they ran at, the time."""
    per = table.pivot(index="Annotation", columns="Metric", values="AvgValue").loc[t.index]
    return pd.DataFrame(
        {
            "kernels": t.kernels,
            "DRAM MB": t["read MB"] + t["write MB"],
            "SM %": per[SM],
            "tensor %": per[TENSOR],
            "DRAM %": per[DRAM],
            "SM MHz": per[CLOCK] / 1e6,
            "time us": t["time us"],
        }
    )


with nt.section("3. Did torch.compile help? Three questions, from counters") as s:
    q = three_questions(GELU_TABLE, nt.needs(GELU, section="2", need="ncu-cli"))
    print(q.to_string(float_format="{:,.1f}".format))
    eager, fused = q.loc[fk.IDIOMATIC], q.loc[fk.COMPILED]
    nt.claim(fused.kernels == 1 < eager.kernels, "fusion happened", f"{eager.kernels:.0f} -> 1")
    cut = eager["DRAM MB"] / fused["DRAM MB"]
    nt.claim(cut > 1.5, "DRAM traffic fell against F.gelu", f"{cut:.1f}x fewer bytes")
    idle = q["tensor %"].max()
    nt.claim(idle < 5, "the tensor pipe idles in every variant", f"at most {idle:.1f} %")
    busiest = f"DRAM {fused['DRAM %']:.0f} % vs SM {fused['SM %']:.0f} % of peak"
    nt.claim(fused["DRAM %"] > fused["SM %"], "the compiled kernel: DRAM the busier unit", busiest)
    print(f"  verdict: fused; {cut:.1f}x fewer DRAM bytes than F.gelu; {busiest}, tensor cores")
    print("  unused: bytes, not arithmetic, set its time. Next step: move fewer bytes (bf16")
    print("  activations, or the GELU in the matmul's epilogue); section 4: how close to the roof")
    s.result = (
        f"kernels {eager.kernels:.0f} -> 1, DRAM {cut:.1f}x less, SM {eager['SM %']:.0f} -> "
        f"{fused['SM %']:.0f} % at {fused['SM MHz']:,.0f} MHz, tensor {fused['tensor %']:.1f} %"
    )

# %% [markdown]
# ## 4. How close to the bandwidth roof is the fused kernel?
#
# A fused elementwise kernel is still memory-bound: the best it can do is move its bytes at
# the GPU's achievable bandwidth. We measure that roof as notebook 06 does, over vectors as
# large as above: three streams with different read:write mixes -- `y = x * 2` (1 read, 1
# write), `y = x + w` (2 reads, 1 write), `y = addcmul(x, w, v)` (3 reads, 1 write) -- and
# `x.sum()`, which reads the vector once but is a reduction kernel, not a stream (blocks
# sum their slices, then the partial sums are combined); bytes from the tensor sizes; the
# fastest of the four is the roof. DRAM pays for turning its bus around between reads and
# writes, so a fused kernel is also set against the stream with **its own mix**: for the
# compiled GELU (one read, one write) that is `x * 2`. Section 1's `addcmul` *is* the
# 3-read stream, so the question is asked of the compiled GELU only. Its **effective
# bandwidth** is its counted bytes over its time: a kernel that moved more gets no credit.
#
# **Is a difference real?** The same kernels are measured in two calls, one after the other.
# How far `y = x * 2` moves between them is this run's
# [run-to-run band](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#run-to-run-band)
# (notebook 03's `run_to_run_pct`: the shift between the two batches plus its 95 % Welch
# half-width): the compiled GELU is "at its same-mix stream" unless it lies farther from it
# than that band. DRAM bandwidth is set by the memory clock, printed with the device's peak.

# %%
with nt.section("4. How close to the bandwidth roof is the fused kernel?") as s:
    ENV.require("profiler", also="triton")
    require_triton()
    measure = nsight.analyze.kernel(
        configs=[(ROWS, HIDDEN)],
        runs=SETTINGS["runs"],
        combine_kernel_metrics=combine,
        thermal_mode="off",
        verbosity=SILENT,
    )(fk.roof)
    ROOF = [measure().to_dataframe() for _ in range(2)]  # two calls: how far a kernel moves
    print(nt.rules(ENV.backend))
    ns = ROOF[0].set_index("Annotation").AvgValue
    gbs = {name: k * VECTOR / ns[name] for name, k in fk.STREAMS.items()}
    gbs[fk.COMPILED] = sum(hand_counts(N, HIDDEN)[fk.COMPILED][1:]) / ns[fk.COMPILED]
    roof, mix = max(gbs[name] for name in fk.STREAMS), gbs["y = x * 2"]
    for name, v in gbs.items():
        print(f"  {name:22s} {v:7,.0f} GB/s = {100 * v / roof:5.1f} % of the measured roof")
    band = run_to_run_pct(*(batch(table, "y = x * 2") for table in ROOF))
    off = 100 * gbs[fk.COMPILED] / mix - 100
    where = "at" if abs(off) <= band else "below" if off < 0 else "above"
    print(
        f"  compiled GELU: {off:+.1f} % from its same-mix stream, y = x * 2, whose two calls set the"
    )
    print(f"  run-to-run band at +-{band:.1f} %: the compiled GELU is {where} its same-mix stream")
    mhz, bus = ENV.facts.max_mem_clock_mhz, ENV.facts.memory_bus_width_bits
    peak = 2 * mhz * 1e6 * bus / 8 / 1e9 if mhz and bus else None  # double data rate: 2 per clock
    if peak:
        print(f"  device's DRAM peak {peak:,.0f} GB/s: 2 x {mhz:,} MHz memory clock x {bus:,} bits")
        if ENV.datasheet:
            print(
                f"  datasheet {ENV.datasheet.mem_bandwidth_gbs.value:,.0f} GB/s (its memory clock)"
            )
        fastest = max(gbs.values())
        nt.claim(fastest <= peak, "nothing beats the DRAM peak", f"fastest {fastest:,.0f} GB/s")
    if ENV.clock and ENV.clock.held_mhz:
        print(f"  the SM clock is held at {ENV.clock.held_mhz:,} MHz; GB/s follow the memory clock")
    s.result = (
        f"compiled GELU {where} its same-mix stream ({off:+.1f} %, band +-{band:.1f} %), "
        f"{100 * gbs[fk.COMPILED] / roof:.0f} % of the roof ({roof:,.0f} GB/s)"
    )

# %% [markdown]
# At its same-mix stream, the fused kernel moves its bytes as fast as a plain copy with the
# same reads and writes: the only way left to make it faster is to move fewer bytes (a
# smaller dtype, or fusing it into the matmul before it). Clearly below means something else
# limits it -- the arithmetic (`tanh` is not free; look at its SM % in section 3) or how it
# accesses memory.

# %% [markdown]
# ## 5. The timeline plot: where the GPU waits
#
# Every number so far is a kernel's own time. nsight-python reports a region's time as the
# **sum of its kernels' durations**, so the nine kernels of eager GELU look as if they ran back
# to back. They do not: between two kernels the CPU must launch the next (a
# [launch](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#kernel-launch)
# is a CUDA API call, `cudaLaunchKernel`, that queues a kernel for the GPU), and when a kernel
# is shorter than a launch the GPU sits idle. Only a **timeline** shows it: the CPU's CUDA
# calls on one lane, the GPU's kernels on another, on one clock.
#
# Nsight Systems (`nsys`) draws that timeline, and it is where a profiling session should
# start: `nsys profile --trace=cuda,nvtx,osrt --stats=true -o ... python script.py`, the
# program in a child process with no other profiler attached. It records every CUDA call,
# every kernel, [NVTX](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#nvtx-range)
# ranges (named spans the program marks) and OS calls. This cell runs `fusion_kernels.py`'s
# `trace` that way and reads the report (`nsys export --type sqlite`, read with `sqlite3`).
# Where `nsys` is missing (this project's GPU test machine has none; Colab has NVIDIA's apt
# repository but not the package, so on Colab this cell installs it, showing apt's lines),
# the same child runs under `torch.profiler` instead, whose trace (its Kineto library's)
# holds the same three things: CUDA calls, kernels, ranges. The printout and the plot's title
# say which tool drew it. Both tracers add a little time to each launch: the gaps below are
# upper bounds.
#
# Four ranges, one thing changed at a time: GELU by hand, eager and compiled, on a small
# input (a few hundred KiB: each kernel takes about as long as its launch, or less) and on
# section 2's large one. Each range makes five calls, then waits for the GPU, so its wall
# time covers the GPU's work. Per range: the wall time; the kernels and their summed time
# (what nsight-python would report); **GPU busy**, the time covered by at least one kernel in
# % of the wall time; the median idle gap between kernels; the CPU's time per launch call.
# Expect the small eager range **launch-bound** (GPU busy well under half: it waits for the
# CPU), and the large ranges **bandwidth-bound** (the GPU stays busy: the CPU queues kernels
# faster than the GPU runs them). Fusion helps both in different ways: fewer bytes on the
# large input, fewer launches on the small one -- but the compiled small range still waits:
# each call of a compiled function costs the CPU its own checks before the one launch.
#
# Reading the plot: the two ranges of one input size share an x-range, so a shorter bar is a
# shorter range. Kernels alternate two shades of green, so kernels that run back to back stay
# apart. The CPU lane is grey wherever the CPU works outside a CUDA call: Python, PyTorch's
# dispatcher (the code that picks a kernel for each operation) and, in a compiled function,
# its **guards** (the checks that its inputs still match what it was compiled for). A gap in
# the GPU lane under grey is a GPU waiting for a CPU that is busy, not idle.
#
# What each tool can tell you: the timeline (nsys) shows *where the time goes* -- an idle GPU,
# launch overhead, synchronisation (`cudaDeviceSynchronize`, the CPU waiting for the GPU) --
# but not why one kernel is slow; Nsight Compute shows *why one kernel is slow* (its counters,
# sections 1-4) but nothing between kernels. Start with the timeline, then open the kernel
# that matters.
#
# `per_range` below turns a timeline into that per-range table. Its cell is marked `# @save`: the
# package keeps it word for word (`nspy_tutorial.lessons`), and notebook 11 applies it to your own
# function's calls.


# %%
# @save
def per_range(tl: timeline.Timeline) -> pd.DataFrame:
    """Per range: wall time, its kernels and their summed time, GPU busy %, idle gaps, launch time."""
    launched = tl.calls.merge(tl.kernels, on="correlation", suffixes=("", " k"))
    rows = []
    for r in tl.ranges.itertuples():
        k = launched[(launched.start >= r.start) & (launched.start < r.end)].sort_values("start k")
        reach = np.maximum.accumulate(k["end k"].to_numpy())  # the latest end so far
        gaps = np.clip(k["start k"].to_numpy()[1:] - reach[:-1], 0, None)
        start, end = k["start k"].clip(r.start, r.end), k["end k"].clip(r.start, r.end)
        covered = np.clip(end - np.maximum(start, np.r_[r.start, reach[:-1]]), 0, None).sum()
        wall = r.end - r.start
        rows.append(
            {
                "wall us": wall / 1e3,
                "kernels": len(k),
                "kernel sum us": (k["end k"] - k["start k"]).sum() / 1e3,
                "GPU busy %": 100 * covered / wall,
                "median gap us": np.median(gaps) / 1e3 if len(gaps) else np.nan,
                "us per launch": (k.end - k.start).mean() / 1e3,
            }
        )
    return pd.DataFrame(rows, index=tl.ranges.name.to_numpy())


# %%
with nt.section("5. The timeline plot: where the GPU waits") as s:
    require_triton()
    NSYS = backend.find_nsys()
    if NSYS is None and ENV.on_colab:  # NVIDIA's apt repository is there, the package is not
        problem = bootstrap.install_nsys()
        NSYS = backend.find_nsys()
        nt.claim(NSYS is not None, "apt installed Nsight Systems", problem or "yet no nsys found")
    if NSYS is None:
        print(backend.nsys_missing(ENV.on_colab))
    TL = timeline.capture("fusion_kernels.py", "trace", [(ROWS, HIDDEN)], nsys=NSYS)
    TL.ranges = TL.ranges[TL.ranges.name.isin(fk.CASES)]  # the module's four, no library's own
    kept = ", ".join(path.name for path in timeline.captures("."))  # for nsys-ui, and notebook 10
    print(f"drawn by {TL.tool} on {TL.gpu.get('name')}; kept in the work folder: {kept}")
    TIMELINE = per_range(TL)
    print(TIMELINE.to_string(float_format="{:,.1f}".format))
    counted = [(9 if name.startswith("eager") else 1) * fk.CALLS for name in TIMELINE.index]
    nt.claim(TIMELINE.kernels.tolist() == counted, "9 kernels per eager call, 1 per compiled call")
    busy = TIMELINE["GPU busy %"]
    small, large = busy.filter(like="small").max(), busy.filter(like="large").min()
    nt.claim(small < 50, "small input: launch-bound, GPU busy under half", f"at most {small:.0f} %")
    nt.claim(large > 80, "large input: the GPU stays busy, over 80 %", f"at least {large:.0f} %")
    fig, axes = plt.subplots(len(TIMELINE), 1, figsize=(11, 1.25 * len(TIMELINE) + 1.4))
    for ax, r, t in zip(axes, TL.ranges.itertuples(), TIMELINE.to_dict("records")):
        calls = TL.calls[(TL.calls.start >= r.start) & (TL.calls.start < r.end)]
        kernels = TL.kernels[TL.kernels.correlation.isin(calls.correlation)].sort_values("start")
        launch = np.where(calls.correlation.isin(kernels.correlation), "C0", "C3")
        shades = np.resize(["C2", "darkgreen"], len(kernels))  # back to back, yet apart
        ax.broken_barh([(0, t["wall us"])], (1, 0.8), color="0.85")  # the CPU's own work
        for lane, events, colour in ((0, kernels, shades), (1, calls, launch)):
            spans = list(zip((events.start - r.start) / 1e3, (events.end - events.start) / 1e3))
            ax.broken_barh(spans, (lane, 0.8), color=colour, linewidth=0.5)  # edges: 1 us shows
        if r.name == "compiled, small":  # what the CPU does before each call's one launch
            ax.text((calls.start.min() - r.start) / 2e3, 1.3, "Python, guards", ha="center", size=8)
        ax.set_xlim(0, TIMELINE["wall us"].filter(like=r.name.split(", ")[1]).max())  # per size
        ax.set_yticks([0.4, 1.4], ["GPU kernels", "CPU"], fontsize=8)
        title = f"{r.name}: {t['wall us']:,.0f} us wall, {t['kernels']:.0f} kernels, GPU busy"
        ax.set_title(f"{title} {t['GPU busy %']:.0f} %", fontsize=9, loc="left")
    keys = {"C2": "kernel (shades alternate)", "C0": "launch call", "C3": "other CUDA call (sync)"}
    keys["0.85"] = "CPU outside CUDA calls: Python, dispatch, torch.compile's guards"
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour, label=key) for colour, key in keys.items()]
    axes[-1].legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=2)
    axes[-1].set_xlabel("us since the range began (one x-range per input size: lengths compare)")
    fig.suptitle(f"Timeline drawn by {TL.tool} on {TL.gpu.get('name')}")
    plt.tight_layout()
    plt.show()
    sums = TIMELINE["wall us"] / TIMELINE["kernel sum us"]
    print(f"  eager, small: its wall time is {sums['eager, small']:.0f}x its kernels' summed time,")
    print("  the only figure nsight-python reports for a region")
    tool = TL.tool.split(" (")[0].split("-")[0]  # "torch.profiler", or "Nsight Systems <version>"
    s.result = f"{tool}: GPU busy <={small:.0f} % small (next: CUDA graphs), >={large:.0f} % large"

# %% [markdown]
# ## Takeaways
#
# - Count bytes before you measure time: for memory-bound kernels, time follows bytes.
#   Every unfused intermediate costs a full write and a full read.
# - Measure the bytes: `dram__bytes_read.sum` and `dram__bytes_write.sum`, summed over an
#   annotation's kernels with `combine_kernel_metrics`. With an older `ncu`, the command line
#   on the same file gives nsight-python's same table.
# - Judge a compiler's output by three questions from counters: fewer kernels, fewer DRAM
#   bytes, busier SMs or tensor cores -- then name the next step.
# - Compare against what a practitioner would write (`F.gelu`), not only against the
#   slowest way to write it -- and measure its kernels one at a time: a broadcast bias add
#   runs PyTorch's generic, non-vectorised kernel, and in a model it belongs in the linear
#   layer's epilogue, where it costs no kernel of its own.
# - Compile and warm up outside the profiled region, on the shapes you will profile.
# - A fused elementwise kernel at its same-mix stream is done; to go faster, move fewer
#   bytes. Call a difference real only beyond how far one kernel moves between two calls.
# - Look at the timeline first: a region's summed kernel time hides the GPU waiting for
#   launches. Small kernels are launch-bound; fusing them cuts launches as well as bytes.
#
# ## Try it
#
# - Add a layer norm written out by hand (mean, subtract, variance, rsqrt, scale, shift) to
#   `fusion_kernels.py`: count its eager kernels and bytes, then see what `torch.compile`
#   makes of a reduction.
# - Run section 2 in bf16 (`torch.randn(..., dtype=torch.bfloat16)` in `gelu`): the
#   counted bytes halve; does the time?
# - In `trace`, raise `SMALL` until the small eager range stops being launch-bound: at what
#   size does a kernel outlast its launch? Or compile with `mode="reduce-overhead"` (CUDA
#   graphs: one launch for many kernels) and look at the compiled small range again.
#
# Docs: [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html)
# (`metrics`, `combine_kernel_metrics`),
# [core concepts](https://docs.nvidia.com/nsight-python/overview/core_concepts.html)
# (annotations with several kernels), nsight-python's source
# (https://github.com/NVIDIA/nsight-python), the Nsight Compute
# [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# (memory metrics, cache control), the Nsight Systems
# [user guide](https://docs.nvidia.com/nsight-systems/UserGuide/index.html) (`nsys profile`,
# `nsys export`), [`torch.profiler`](https://pytorch.org/docs/stable/profiler.html) and
# [`torch.compile`](https://pytorch.org/docs/stable/generated/torch.compile.html).

# %%
nt.summary()
