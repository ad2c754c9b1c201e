# %% [markdown]
# # 07 · Kernel fusion, measured in bytes
#
# **What you will learn**
# - why `a + b * c` in eager PyTorch moves more bytes than `torch.addcmul(a, b, c)`, and how
#   to *measure* that with the DRAM counters `dram__bytes_read.sum` and
#   `dram__bytes_write.sum`, summed over an annotation's kernels with
#   `combine_kernel_metrics`;
# - how to count the bytes a kernel sequence must move by hand, and hold the counters to it;
# - three ways to write bias + GELU -- the formula written out as GPT-2 does, PyTorch's own
#   `F.gelu`, and `torch.compile` -- and what each costs in kernels, bytes and time; where
#   the idiomatic version's time goes, kernel by kernel (a broadcast bias add is not cheap);
#   why the compiler must do its work outside the measured region;
# - how close a fused kernel gets to this GPU's bandwidth roof, measured as in notebook 06.
#
# | section | needs |
# |---|---|
# | 1. `a + b * c` vs `torch.addcmul` | nsight-python's Nsight Compute backend, or any `ncu` command line |
# | 2. bias + GELU, three ways, and the bias add apart | the same, plus Triton for `torch.compile` (compute capability ≥ 7.0; a T4 is fine) |
# | 3. how close to the bandwidth roof | any nsight-python backend, plus Triton |
# | 4. the plot | section 1 or 2 |
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

from nspy_tutorial import ncu_cli

SILENT = nsight.VerbosityLevel.SILENT
TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
MiB, HIDDEN = 2**20, 4096  # HIDDEN: the GELU's width (a transformer MLP's 4 x d_model)


def add(x, y):
    """combine_kernel_metrics: add up the metrics (time, bytes) of the kernels one annotation launched."""
    return x + y


# Three runs: each kernel here moves hundreds of megabytes or more with flushed caches, and its time repeats
# to about a percent or better (notebook 03 shows how to check); the differences below are tens of percent and
# more, which three runs and a Student-t interval resolve. Under Nsight Compute every run replays every kernel.
SETTINGS = dict(
    runs=3,
    metrics=[TIME, READ, WRITE],
    combine_kernel_metrics=add,
    cache_control="all",
    clock_control="none",
    thermal_mode="off",
    verbosity=SILENT,
)
FUSION = GELU = None  # sections 1 and 2 set their tables, for the plot
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    VECTOR = (
        min(max(16 * L2, 256 * MiB), torch.cuda.mem_get_info()[0] // 16) // MiB * MiB
    )  # bytes, from free memory
    N = (
        VECTOR // 4
    )  # float32 elements per vector; the GELU's input is ROWS x HIDDEN = N elements too
    ROWS = N // HIDDEN
    print(
        f"L2 {L2 / MiB:.0f} MiB -> vectors of {N:,} floats ({VECTOR / MiB:,.0f} MiB, {VECTOR / L2:.1f}x L2); "
        f"GELU input {ROWS:,} x {HIDDEN}"
    )

# %% [markdown]
# ## The kernels, written once
#
# Every workload of this notebook is in the cell below, which Jupyter's `%%writefile` saves
# as `fusion_kernels.py` in the notebook's work folder. The notebook imports it; when the
# `ncu` command line measures instead of nsight-python's backend, it runs the same file
# (the command is printed). `fusion`, `gelu` and `roof` are the functions nsight-python
# profiles: each `nsight.annotate` region is one row of its table.

# %% writefile fusion_kernels.py
"""The workloads of notebook 07; the notebook imports this file and the ncu command line runs it."""
import functools
import math

import nsight
import torch
import torch.nn.functional as F

UNFUSED, ADDCMUL = "a + b * c", "torch.addcmul(a, b, c)"
HAND, IDIOMATIC, COMPILED = "GELU by hand, eager", "F.gelu, eager", "GELU, torch.compile"
BIAS, GELU_ONLY = (
    "x + bias, eager",
    "F.gelu(h) alone, eager",
)  # the idiomatic version's two kernels, one at a time
STREAMS = {
    "x.sum()": 1,
    "y = x * 2": 2,
    "y = x + w": 3,
    "y = addcmul(x, w, v)": 4,
}  # vectors read + written; x.sum()
# is a reduction kernel that reads x, the others streams


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
    """torch.compile's version of gelu_by_hand, made on first use (importing the compiler takes a second)."""
    import torch._inductor.config

    torch._inductor.config.compile_threads = (
        1  # compile in this process: no pool of workers for one kernel
    )
    return torch.compile(gelu_by_hand, dynamic=False)


def compiled_gelu(x, bias):
    return compiler()(
        x, bias
    )  # the first call compiles (seconds); later calls launch one fused kernel


def fusion(n):
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate(UNFUSED):
        a + b * c
    with nsight.annotate(ADDCMUL):
        torch.addcmul(a, b, c)


def gelu(rows, hidden):
    x, bias = torch.randn(rows, hidden, device="cuda"), torch.randn(hidden, device="cuda")
    h = (
        x + bias
    )  # outside the annotations: in a model the bias add sits in the linear layer's epilogue
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


if __name__ == "__main__":  # what the ncu command line runs (the printed command shows it)
    from nspy_tutorial import ncu_cli

    ncu_cli.replay(globals())

# %%
import fusion_kernels as fk

fk = importlib.reload(fk)  # after an edit of the cell above, its new version


def hand_counts(n: int, hidden: int) -> dict:
    """Kernels and DRAM bytes each variant must launch and move, counted by hand (the tables in the text)."""
    v, b = 4 * n, 4 * hidden  # bytes of one vector and of the bias
    return {
        fk.UNFUSED: dict(
            kernels=2, read=(2 + 2) * v, write=(1 + 1) * v
        ),  # b, c -> t; then a, t -> result
        fk.ADDCMUL: dict(kernels=1, read=3 * v, write=v),
        fk.HAND: dict(kernels=9, read=11 * v + b, write=9 * v),
        fk.IDIOMATIC: dict(
            kernels=2, read=2 * v + b, write=2 * v
        ),  # x + bias -> h; then gelu(h) -> y
        fk.BIAS: dict(kernels=1, read=v + b, write=v),
        fk.GELU_ONLY: dict(kernels=1, read=v, write=v),
        fk.COMPILED: dict(kernels=1, read=v + b, write=v),
    }


def variants(table: pd.DataFrame, counts: dict) -> pd.DataFrame:
    """One row per annotation of nsight-python's table: kernels, time (mean, Student-t 95 % half-width), DRAM bytes
    measured and counted by hand, and the effective bandwidth (the counted bytes over the time)."""
    rows = {}
    for name in table.Annotation.unique():
        m, c = table[table.Annotation == name].set_index("Metric"), counts[name]
        t = m.loc[TIME]
        rows[name] = {
            "kernels": t.Kernel.count("|") + 1,
            "counted": c["kernels"],
            "time us": t.AvgValue / 1e3,
            "+/- us": stats.t.ppf(0.975, t.NumRuns - 1) * t.StdDev / np.sqrt(t.NumRuns) / 1e3,
            "read MB": m.AvgValue[READ] / 1e6,
            "counted read MB": c["read"] / 1e6,
            "write MB": m.AvgValue[WRITE] / 1e6,
            "counted write MB": c["write"] / 1e6,
            "GB/s": (c["read"] + c["write"]) / t.AvgValue,
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def as_counted(row: pd.Series, l2: float) -> bool:
    """The counters against the hand count. Reads: after the flush every input byte comes from DRAM, so not fewer
    (2 % slack) and not much more (10 %: other traffic). Writes: up to one L2 per kernel may still sit in L2 when
    the kernel's counters stop; not more than the count (10 % slack)."""
    read, write, counted = (
        row["read MB"] / row["counted read MB"],
        row["write MB"],
        row["counted write MB"],
    )
    return 0.98 <= read <= 1.10 and counted - row["kernels"] * l2 / 1e6 <= write <= 1.10 * counted


def slower_by(table: pd.DataFrame, slow: str, fast: str) -> tuple[float, float, float]:
    """How much longer `slow` takes than `fast`, in us: the difference of the mean times and its Welch 95 % interval."""
    a, b = (
        table[(table.Annotation == name) & (table.Metric == TIME)].iloc[0] for name in (slow, fast)
    )
    va, vb = a.StdDev**2 / a.NumRuns, b.StdDev**2 / b.NumRuns
    dof = (va + vb) ** 2 / (va**2 / (a.NumRuns - 1) + vb**2 / (b.NumRuns - 1))
    d, half = a.AvgValue - b.AvgValue, stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    return d / 1e3, (d - half) / 1e3, (d + half) / 1e3


def verdict(lo: float, hi: float, ref: float, margin: float = 2.0) -> str:
    """A difference's 95 % interval [lo, hi] against ref: "slower" or "faster" where the whole interval lies beyond
    +-margin % of ref, else "not distinguishable" (a near-tie is named, not decided: it can flip from run to run)."""
    edge = margin / 100 * ref
    return (
        "slower"
        if lo > edge
        else "faster"
        if hi < -edge
        else f"not distinguishable (within {margin:g} %)"
    )


def report(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """Whose rules measured, each variant against its hand count (printed), and the claims of the count."""
    print(nt.rules(source, SETTINGS["cache_control"], SETTINGS["clock_control"]))
    t = variants(table, hand_counts(N, HIDDEN))
    print(t.to_string(float_format="{:,.1f}".format))
    for name, r in t.iterrows():
        kernels = Counter(
            table[(table.Annotation == name) & (table.Metric == TIME)].Kernel.iloc[0].split("|")
        )
        nt.claim(
            r["kernels"] == r["counted"],
            f"{name} launches the {r['counted']:.0f} kernel(s) counted by hand",
            ", ".join(f"{c} x " * (c > 1) + nt.short_kernel_name(k) for k, c in kernels.items()),
        )
        nt.claim(
            as_counted(r, L2),
            f"{name}: the DRAM counters read the bytes counted by hand (writes: within one "
            "L2 per kernel)",
            f"read {r['read MB']:,.0f} of {r['counted read MB']:,.0f} MB, "
            f"wrote {r['write MB']:,.0f} of {r['counted write MB']:,.0f} MB",
        )
    return t


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
# `combine_kernel_metrics` nsight-python would refuse it (notebook 02 shows the error); with
# `add` it adds the two kernels' times *and* their byte counts, metric by metric.
#
# **Which tool measures.** nsight-python's Nsight Compute backend collects the time and both
# byte counters in one call. The CUPTI backend measures durations only, so on a machine with
# an older `ncu` the `ncu` command line runs `fusion_kernels.py` with the same settings and
# hands back nsight-python's own table -- the same columns, the same rules (caches flushed
# before every kernel, clocks free), printed above the table. Either way the `Kernel` column
# holds the kernels' bare function names, joined by `|`: PyTorch's elementwise kernels are
# called `vectorized_elementwise_kernel` (every operand contiguous) or `elementwise_kernel`
# (the generic path), whatever they compute.
#
# What to look for: the kernel counts; `read MB` against `counted read MB` (after a flush
# every input byte must come from DRAM); `write MB` a little short of its count (a kernel's
# last writes may still sit in L2 when its counters stop: at most one L2 per kernel); and
# the time difference with its 95 % interval.

# %%
with nt.section("1. Unfused vs fused: a + b * c against torch.addcmul") as s:
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend: this process, one call
        table, source = (
            nsight.analyze.kernel(configs=[(N,)], **SETTINGS)(fk.fusion)().to_dataframe(),
            "ncu",
        )
    else:  # CUPTI measures durations only: the ncu command line runs the same file with the same settings
        ENV.require("ncu-cli")
        table, source = (
            ncu_cli.nsight_table(
                "fusion_kernels.py", fk.fusion, ncu=ENV.ncu_path, configs=[(N,)], **SETTINGS
            ),
            "ncu-cli",
        )
    FUSION = t = report(table, source)
    d, lo, hi = slower_by(table, fk.UNFUSED, fk.ADDCMUL)
    nt.claim(
        lo > 0,
        "a + b * c takes longer than torch.addcmul (the 95 % interval of the difference is above zero)",
        f"{d:+,.1f} us [{lo:+,.1f}, {hi:+,.1f}]",
    )
    u, f = t.loc[fk.UNFUSED], t.loc[fk.ADDCMUL]
    s.result = (
        f"bytes unfused/fused: counted {u['counted read MB'] + u['counted write MB']:,.0f}/"
        f"{f['counted read MB'] + f['counted write MB']:,.0f} MB, measured "
        f"{u['read MB'] + u['write MB']:,.0f}/{f['read MB'] + f['write MB']:,.0f} MB; "
        f"time {u['time us']:,.0f} vs {f['time us']:,.0f} us, +{d:,.0f} us [{lo:,.0f}, {hi:,.0f}]"
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
#
# **The bias add, apart.** The idiomatic row's two kernels are also measured one at a time:
# `x + bias` (8n bytes) and `F.gelu(h)` on a ready `h` (8n bytes). Their times should add
# up to the idiomatic row's (checked), and they say where its time goes: the bytes explain
# a factor of two against the fused kernel; the rest is how fast each kernel moves its
# bytes. PyTorch's elementwise kernels use vector loads only when every operand is
# contiguous; the bias is broadcast along the rows (a stride of zero), so `x + bias` runs
# the generic `elementwise_kernel` -- look at its name in the table -- not the
# `vectorized_elementwise_kernel` that `F.gelu(h)` runs. In a model the bias add costs no
# kernel of its own: the linear layer before the GELU adds it as it writes its output (the
# GEMM's epilogue), so `F.gelu(h)` alone is what an eager model pays for its GELU, and the
# compiled kernel (which adds the bias too) is set against it; where the 95 % interval of
# the difference does not reach beyond 2 % either way, the cell says **not
# distinguishable** rather than pick a winner that could change from run to run.
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
    require_triton()
    x, bias = torch.randn(ROWS, HIDDEN, device="cuda"), torch.randn(HIDDEN, device="cuda")
    start = time.perf_counter()
    y = fk.compiled_gelu(x, bias)  # compiles: once, before and outside any annotation
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    error = max((f(x, bias) - y).abs().max().item() for f in (fk.gelu_by_hand, fk.gelu_idiomatic))
    print(f"  compiled and warmed up in {compile_s:.1f} s, before and outside any annotation")
    del x, bias, y  # freed: gelu (or the ncu child) makes its own
    if ENV.backend == "ncu":
        table, source = (
            nsight.analyze.kernel(configs=[(ROWS, HIDDEN)], **SETTINGS)(fk.gelu)().to_dataframe(),
            "ncu",
        )
    else:  # CUPTI measures durations only: the ncu command line on the same file, with the same settings
        ENV.require("ncu-cli")
        table, source = (
            ncu_cli.nsight_table(
                "fusion_kernels.py", fk.gelu, ncu=ENV.ncu_path, configs=[(ROWS, HIDDEN)], **SETTINGS
            ),
            "ncu-cli",
        )
    nt.claim(
        error < 1e-4,
        "by hand, F.gelu and torch.compile compute the same values",
        f"max |difference| {error:.1e}",
    )
    GELU = t = report(table, source)
    for slow in (fk.HAND, fk.IDIOMATIC):
        d, lo, hi = slower_by(table, slow, fk.COMPILED)
        print(
            f"  {slow} takes {t['time us'][slow] / t['time us'][fk.COMPILED]:.1f}x as long as {fk.COMPILED}: "
            f"{d:+,.1f} us [{lo:+,.1f}, {hi:+,.1f}] (95 %)"
        )
        nt.claim(
            lo > 0,
            f"{fk.COMPILED} is faster than {slow} (the 95 % interval of the difference is above zero)",
            f"{d:+,.1f} us",
        )
    bias, alone, both, fused = (
        t.loc[name] for name in (fk.BIAS, fk.GELU_ONLY, fk.IDIOMATIC, fk.COMPILED)
    )
    nt.claim(
        abs(bias["time us"] + alone["time us"] - both["time us"]) < 0.05 * both["time us"],
        f"{fk.BIAS} and "
        f"{fk.GELU_ONLY}, measured one at a time, add up to {fk.IDIOMATIC} (within 5 %)",
        f"{bias['time us']:,.0f} + {alone['time us']:,.0f} vs {both['time us']:,.0f} us",
    )
    counted = (both["counted read MB"] + both["counted write MB"]) / (
        fused["counted read MB"] + fused["counted write MB"]
    )
    ratio = both["time us"] / fused["time us"]
    print(
        f"  {fk.IDIOMATIC} takes {ratio:.1f}x {fk.COMPILED}'s time: {counted:.1f}x the bytes, times {ratio / counted:.2f}x"
        f" the time per byte; its bias add moves its bytes at {bias['GB/s']:,.0f} GB/s, F.gelu(h) at "
        f"{alone['GB/s']:,.0f}, the compiled kernel at {fused['GB/s']:,.0f}"
    )
    d, lo, hi = slower_by(table, fk.GELU_ONLY, fk.COMPILED)
    same = verdict(lo, hi, fused["time us"])
    print(
        f"  {fk.GELU_ONLY} (what a model with the bias in its linear layer pays) against {fk.COMPILED}: "
        f"{d:+,.1f} us [{lo:+,.1f}, {hi:+,.1f}] (95 %): {same}"
    )
    s.result = "; ".join(
        [
            *(
                f"{name}: {r['kernels']:.0f} kernel(s), {r['read MB'] + r['write MB']:,.0f} MB, "
                f"{r['time us']:,.0f} us"
                for name, r in t.iterrows()
            ),
            f"F.gelu(h) alone vs compiled: {same}",
            f"compile {compile_s:.1f} s",
        ]
    )

# %% [markdown]
# Did the fusion succeed? The `Kernel` column says how many kernels each region launched and
# their names (Triton's start with `triton_`); the byte counters say whether DRAM traffic
# fell. Both are needed: a "fused" region that still launches a copy kernel, or a compiled
# kernel that re-reads its input, shows up in one and not necessarily in the other.
#
# ## 3. How close to the bandwidth roof is the fused kernel?
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
# 3-read stream: it sits at its same-mix stream by construction, so the question is asked
# of the compiled GELU only. Its **effective bandwidth** is its counted bytes over its
# time: a kernel that moved more gets no credit. The streams and the compiled GELU run in
# one profiled call, under the same rules.

# %%
with nt.section("3. How close to the bandwidth roof is the fused kernel?") as s:
    ENV.require("profiler", also="triton")
    require_triton()
    table = nsight.analyze.kernel(
        configs=[(ROWS, HIDDEN)],
        runs=SETTINGS["runs"],
        combine_kernel_metrics=add,
        thermal_mode="off",
        verbosity=SILENT,
    )(fk.roof)().to_dataframe()
    print(nt.rules(ENV.backend))
    ns = table.set_index("Annotation").AvgValue
    gbs = {name: k * VECTOR / ns[name] for name, k in fk.STREAMS.items()}
    counted = hand_counts(N, HIDDEN)[fk.COMPILED]
    gbs[fk.COMPILED] = (counted["read"] + counted["write"]) / ns[fk.COMPILED]
    roof, mix = max(gbs[name] for name in fk.STREAMS), gbs["y = x * 2"]
    sheet = ENV.datasheet.mem_bandwidth_gbs.value if ENV.datasheet else None
    clock, bus = (
        ENV.facts.max_mem_clock_mhz,
        ENV.facts.memory_bus_width_bits,
    )  # double data rate: 2 transfers a clock
    clock_peak = 2 * clock * 1e6 * bus / 8 / 1e9 if clock and bus else None
    for name, v in gbs.items():
        print(f"  {name:22s} {v:7,.0f} GB/s = {100 * v / roof:5.1f} % of the measured roof")
    eff = gbs[fk.COMPILED]
    print(
        f"  {fk.COMPILED}: {100 * eff / mix:.1f} % of its same-mix stream (y = x * 2); datasheet "
        f"{f'{sheet:,.0f}' if sheet else 'unknown'} GB/s; device's clock-derived peak "
        f"{f'{clock_peak:,.0f}' if clock_peak else 'unknown'} GB/s"
    )
    if clock_peak:
        nt.claim(
            max(gbs.values()) <= clock_peak,
            "no stream and no fused kernel moves its counted bytes faster than "
            "the device's clock-derived DRAM peak",
            f"fastest {max(gbs.values()):,.0f} <= {clock_peak:,.0f} GB/s",
        )
    s.result = (
        f"compiled GELU {eff:,.0f} GB/s = {100 * eff / mix:.0f} % of its same-mix stream, "
        f"{100 * eff / roof:.0f} % of the measured roof ({roof:,.0f} GB/s)"
        + (f", {100 * eff / sheet:.0f} % of the datasheet" if sheet else "")
    )

# %% [markdown]
# Near its same-mix stream, the fused kernel moves its bytes as fast as a plain copy with
# the same reads and writes: the only way left to make it faster is to move fewer bytes (a
# smaller dtype, or fusing it into the matmul before it). Clearly below means something
# else limits it -- the arithmetic (`tanh` is not free) or how it accesses memory.
#
# ## 4. The plot: bytes and time per variant

# %%
with nt.section("4. Plot: bytes and time per variant") as s:
    both = pd.concat(
        [nt.needs(FUSION, section="1", need="ncu-cli"), nt.needs(GELU, section="2", need="ncu-cli")]
    )
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(12, 3.8))
    pos = np.arange(len(both))
    ax_b.bar(
        pos - 0.2, both["counted read MB"] + both["counted write MB"], 0.4, label="counted by hand"
    )
    ax_b.bar(pos + 0.2, both["read MB"] + both["write MB"], 0.4, label="measured (DRAM counters)")
    ax_b.set_ylabel("MB moved")
    ax_b.set_title("DRAM bytes per call")
    ax_b.legend(fontsize=8)
    ax_t.bar(pos, both["time us"], 0.5, yerr=both["+/- us"], capsize=4, color="C2")
    ax_t.set_ylabel("us")
    ax_t.set_title("time per call (mean, 95 % CI)")
    for ax in (ax_b, ax_t):
        ax.set_xticks(
            pos, both.index, fontsize=8, rotation=20, ha="right"
        )  # whole names, slanted: none overlap
    fig.suptitle(f"Kernel fusion on {ENV.gpu_name}")
    plt.tight_layout()
    plt.show()
    s.result = f"plotted {len(both)} variants"

# %% [markdown]
# ## Takeaways
#
# - Count bytes before you measure time: for memory-bound kernels, time follows bytes.
#   Every unfused intermediate costs a full write and a full read.
# - Measure the bytes: `dram__bytes_read.sum` and `dram__bytes_write.sum`, summed over an
#   annotation's kernels with `combine_kernel_metrics`. With an older `ncu`, the command line
#   on the same file gives nsight-python's same table.
# - Check fusion in two places: the `Kernel` column (how many kernels, whose names) and the
#   byte counters (did traffic fall).
# - Compare against what a practitioner would write (`F.gelu`), not only against the
#   slowest way to write it -- and measure its kernels one at a time: a broadcast bias add
#   runs PyTorch's generic, non-vectorised kernel, and in a model it belongs in the linear
#   layer's epilogue, where it costs no kernel of its own.
# - Compile and warm up outside the profiled region, on the shapes you will profile.
# - A fused elementwise kernel near its same-mix stream is done; to go faster, move fewer
#   bytes.
#
# ## Try it
#
# - Add a layer norm written out by hand (mean, subtract, variance, rsqrt, scale, shift) to
#   `fusion_kernels.py`: count its eager kernels and bytes, then see what `torch.compile`
#   makes of a reduction.
# - Run section 2 in bf16 (`torch.randn(..., dtype=torch.bfloat16)` in `gelu`): the
#   counted bytes halve; does the time?
#
# Docs: [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html)
# (`metrics`, `combine_kernel_metrics`),
# [core concepts](https://docs.nvidia.com/nsight-python/overview/core_concepts.html)
# (annotations with several kernels), nsight-python's source
# (https://github.com/NVIDIA/nsight-python), the Nsight Compute
# [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# (memory metrics, cache control) and
# [`torch.compile`](https://pytorch.org/docs/stable/generated/torch.compile.html).

# %%
nt.summary()
