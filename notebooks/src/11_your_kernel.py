# %% [markdown]
# # 11 · Your own kernel: the whole method on your function
#
# **What you will learn**
# - how to put *your* PyTorch function through what notebooks 02–10 taught, by editing
#   **one cell** and running the rest unchanged;
# - what it launches (kernels per call and their names, size by size), how many runs give
#   ±1 % at 95 %, which cache setting answers your question and what the GPU's clock was
#   doing, where it sits on this GPU's roofline and the one next step that suggests, how busy
#   the GPU is around it, and a zip of the evidence;
# - what each of those says about the default function: RMSNorm written by hand in eager
#   PyTorch at a Transformer's shape -- several kernels, memory-bound, a fusion to suggest.
#
# | section | method from | needs |
# |---|---|---|
# | 1. what it launches | [02](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/02_first_profile.ipynb), [05](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/05_precision_sweeps.ipynb) | any nsight-python backend |
# | 2. how many runs | [03](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/03_run_counts.ipynb)'s plan and run-to-run band | section 1 |
# | 3. caches and clocks | [04](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/04_cache_and_clock_control.ipynb) | section 1 |
# | 4. the roofline and the next step | [06](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/06_roofline.ipynb)'s roofs and placement, [07](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/07_kernel_fusion.ipynb)'s bytes | counters: the Nsight Compute backend or any `ncu` command line |
# | 5. the timeline | [07](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/07_kernel_fusion.ipynb)'s timeline (Nsight Systems, else `torch.profiler`) | a GPU |
# | 6. the evidence zip | [10](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/10_keeping_the_evidence.ipynb) | nothing |
#
# On Colab this notebook is a fresh runtime of its own: the setup cell installs what it
# needs (run again, it skips what is there).

# %%
{{SETUP}}

# %% [markdown]
# ## Edit this one cell: your function
#
# **Edit the next cell, and only that one.** Every later cell reads it and runs unchanged.
# Jupyter's `%%writefile` saves it as `your_kernel.py` in the notebook's work folder: the
# notebook imports it, and where counters need the `ncu` command line, ncu runs the same
# file. Keep its names:
#
# - `your_function(*inputs)`: the work to measure, on CUDA tensors. Every kernel it launches
#   is a kernel of the measured region; nothing else is.
# - `make_inputs(*arguments)`: its inputs for one size, made *outside* the measured region.
# - `SIZES`: a name for each size and the arguments `make_inputs` takes for it. Sections 2–5
#   judge the **last** one.
# - `CACHE`: `"warm"` to time it as a loop does (the call before left its inputs in L2 as
#   far as they fit), `"flushed"` to time a cold start. Section 3 measures both.
# - `PRECISION`: the compute roof it runs on -- `"fp32"` on CUDA cores, `"fp16"`/`"bf16"` on
#   tensor cores.
# - `flop_count(*arguments)` and `byte_count(*arguments)`: the FLOPs its math needs and the
#   DRAM bytes it must move at the least, or `None` where you do not know. Without a FLOP
#   count, section 4 reads one from the instruction counters.
#
# **The default: RMSNorm, by hand, in eager PyTorch.** A Transformer normalises every token's
# features before each block: `y = weight · x / sqrt(mean(x²) + eps)` over the features, as
# LLaMA's reference code writes it (in fp32, then back to bf16), on *t* tokens × *f* features:
# n = t·f elements of 2 bytes in, and as many out. Its math needs 4n FLOPs (square, sum, scale,
# weight) and, at the least, 4n + 2f bytes: read x and the weight, write y -- `flop_count` and
# `byte_count` below. Eager PyTorch runs it as eight kernels, each a pass over memory:
#
# | kernel | reads (bytes) | writes (bytes) |
# |---|---|---|
# | `x.to(torch.float32)` | 2n | 4n |
# | `h.pow(2)` | 4n | 4n |
# | `.mean(-1, keepdim=True)` | 4n | 4t |
# | `+ eps`, then `torch.rsqrt` (two kernels) | 8t | 8t |
# | `h * ...` (one value per row, broadcast) | 4n + 4t | 4n |
# | `.to(x.dtype)` | 4n | 2n |
# | `weight * ...` | 2n + 2f | 2n |
# | **total** | **about 20n** | **about 16n**: about 36n bytes |
#
# So the eager version should move about nine times the bytes the math needs, far left of
# the compute roof (4n FLOPs on 36n bytes: about a ninth of a FLOP per byte): memory-bound,
# and fusing the eight kernels into one should cut its bytes. Section 1 shows what it really
# launches; section 4 measures its bytes.

# %% writefile your_kernel.py
"""Your function: the one cell you edit. The notebook imports this file; the ncu command line runs it."""

import torch

NAME = "RMSNorm by hand, eager"  # the measured region's name in every table
SIZES = {"1024 tokens": (1024, 4096), "8192 tokens": (8192, 4096)}  # name: make_inputs' arguments
CACHE = "warm"  # "warm": its time inside a loop; "flushed": a cold start
PRECISION = "fp32"  # its compute roof: "fp32" (CUDA cores), "fp16" or "bf16" (tensor cores)
DTYPE = torch.bfloat16  # its inputs' element type


def make_inputs(tokens: int, features: int) -> tuple:
    """your_function's inputs for one size, on the GPU: made outside the measured region."""
    x = torch.randn(tokens, features, device="cuda", dtype=DTYPE)
    weight = torch.rand(features, device="cuda", dtype=DTYPE)
    return x, weight


def your_function(x, weight, eps: float = 1e-6):
    """RMSNorm as LLaMA's reference code writes it: in fp32, then back to the input's dtype."""
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps)).to(x.dtype)


def flop_count(tokens: int, features: int) -> int | None:
    """The FLOPs the math needs (None: read them from the instruction counters)."""
    return 4 * tokens * features


def byte_count(tokens: int, features: int) -> int | None:
    """The DRAM bytes it must move at the least (None: unknown): x and the weight in, y out, bf16."""
    return 2 * (2 * tokens * features + features)


# %% [markdown]
# ## How the notebook runs it
#
# The module below is the notebook's, not yours to edit: it is how every section calls your
# function (the ncu command line runs it too). `measured` is what nsight-python profiles:
# it makes the inputs, calls your function once **unmeasured** -- a `torch.compile`d
# function compiles there, a library autotunes there, and the L2 is left as a loop leaves
# it -- then, for `"flushed"`, reads twice the L2 of other data (notebook 04's flush by
# hand, which works under either backend), and calls your function once more inside
# `nsight.annotate`. `judged` adds 06's two roof kernels to the same call -- a stream
# far larger than L2 and a large matmul in your precision -- so that your function and the
# roofs are measured under the same rules and at the clock each ran. `loop` calls it again
# and again for the timeline.

# %% writefile run_your_kernel.py
"""Notebook 11's harness around your_kernel.py: imported by the notebook, run by the ncu command line."""

import torch
import your_kernel as yk
from nsight import annotate

STREAM, MATMUL = "roof: y = x * 2", "roof: matmul"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
if yk.CACHE not in ("warm", "flushed") or yk.PRECISION not in DTYPES or not yk.SIZES:
    problem = f"CACHE {yk.CACHE!r} (warm, flushed), PRECISION {yk.PRECISION!r} (fp32, fp16, bf16)"
    raise ValueError(f"your cell: {problem}, {len(yk.SIZES)} SIZES (at least one)")


def measured(size: str, cache: str) -> None:
    """Your function once unmeasured (compiles, autotunes, warms the L2), then once in an annotation."""
    inputs = yk.make_inputs(*yk.SIZES[size])
    yk.your_function(*inputs)
    if cache == "flushed":  # read twice the L2 of other data: your inputs leave it
        torch.empty(torch.cuda.get_device_properties(0).L2_cache_size // 2, device="cuda").sum()
    with annotate(yk.NAME):
        yk.your_function(*inputs)


def judged(size: str, n_stream: int, m: int) -> None:
    """Section 4: your function, a stream of n_stream floats and an m x m matmul, in one call."""
    measured(size, "warm")  # under Nsight Compute every kernel starts with flushed caches anyway
    x = torch.randn(n_stream, device="cuda")
    y = torch.empty_like(x)
    a = torch.randn(m, m, device="cuda", dtype=DTYPES[yk.PRECISION])
    a @ a  # cuBLAS picks its kernel here, unmeasured
    with annotate(STREAM):
        torch.mul(x, 2.0, out=y)
    with annotate(MATMUL):
        a @ a


def loop(size: str, calls: int) -> None:
    """Section 5: `calls` calls one after another, each in a range both timeline tools see."""
    inputs = yk.make_inputs(*yk.SIZES[size])
    yk.your_function(*inputs)
    torch.cuda.synchronize()
    for _ in range(
        calls
    ):  # each range ends when the GPU is done: its wall time covers the GPU's work
        with torch.profiler.record_function("call"), torch.cuda.nvtx.range("call"):
            yk.your_function(*inputs)
            torch.cuda.synchronize()


if __name__ == "__main__":  # what the ncu command line runs (the printed command shows it)
    from nspy_tutorial import ncu_cli

    ncu_cli.replay(globals())

# %%
import importlib.util
import json
import re
import shutil
import textwrap
import time
from collections import Counter
from pathlib import Path

import nsight
import numpy as np
import pandas as pd
import run_your_kernel as hk
import torch
import your_kernel as yk
from scipy import stats

from nspy_tutorial import backend, clock, evidence, lessons, ncu_cli, timeline

yk = importlib.reload(yk)  # after an edit of your cell, its new version
hk = importlib.reload(hk)

# %%
SILENT = nsight.VerbosityLevel.SILENT
TIME, DRAM = "gpu__time_duration.sum", "dram__bytes.sum"
CLOCK = "gpc__cycles_elapsed.avg.per_second"  # the clock a kernel ran at: its cycles over its time
# tensor-core instructions, whose FLOPs no counter below counts
TENSOR = "sm__inst_executed_pipe_tensor.sum"
# thread instructions per precision (f, h, d: fp32, fp16, fp64): add and multiply one FLOP, FMA two
OPS = {
    f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": 2 if op == "fma" else 1
    for p in "fhd"
    for op in ("add", "mul", "fma")
}
# 06's counters for its verdict and next step: DRAM's clock, achieved occupancy, why warps stalled
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
REASONS = ["long_scoreboard", "wait", "barrier", "math_pipe_throttle", "lg_throttle", "drain"]
RATES = [CLOCK, DRAM_CLOCK, OCCUPANCY, *(STALL.format(r) for r in REASONS)]
METRICS = [TIME, DRAM, TENSOR, *OPS, *RATES]
# pilot runs, the +/- % section 2 plans for, the most runs it takes, the calls section 5 draws
PILOT, TARGET, MAX_RUNS, CALLS = 20, 1.0, 200, 10
JUDGED = list(yk.SIZES)[-1]  # sections 2-5 judge the last size
LAUNCHES = PILOT_RUNS = PLANNED = BATCHES = BAND = CACHES = COUNTERS = CLOCK_SEEN = BUSY = None
RULES = {}  # section -> whose rules measured its table, for the evidence folder
CAUSES = {
    "none": "no GPU kernel ran when measured: your_function computes on the CPU or returns a kept "
    "result (functools.cache); make each call compute on CUDA tensors",
    "uneven": "the number of kernels changed from run to run (a cache, a data-dependent branch): "
    "make each call launch the same kernels",
}


def add(x, y):
    """combine_kernel_metrics: the times of one call's kernels add up (nsight needs a Python function)."""
    return x + y


def combine(x, y):
    """combine_kernel_metrics for METRICS: times, bytes, counts add up; rates are weighted by time."""
    weighted = (x * x[0] + y * y[0]) / (x[0] + y[0])
    return np.where(np.isin(METRICS, RATES), weighted, x + y)


# the settings of every profile of sections 1-3: the cache state is set by hand in `measured`
QUIET = dict(combine_kernel_metrics=add, cache_control="none", thermal_mode="off", verbosity=SILENT)


class YourFunctionError(Exception):
    """Your function or its inputs cannot be measured as they are: what happened, what to change."""


def devices(value) -> set:
    """The device types ("cuda", "cpu") of the tensors in a tensor, tuple or list."""
    items = value if isinstance(value, (tuple, list)) else [value]
    return {item.device.type for item in items if hasattr(item, "device")}


def device_problem(inputs, output=None) -> str | None:
    """What is wrong with where the inputs (and the output) live, or None."""
    found, out = devices(inputs), devices(output) - {"cuda"}
    if found - {"cuda"}:
        return f"make_inputs made tensors on {' and '.join(sorted(found))}: make all on 'cuda'"
    if out:
        return (
            f"your_function returned a tensor on the {out.pop()}: it computed there or copied its "
            "result (.cpu(), .numpy()); keep the work on CUDA tensors and return them"
        )
    return None


def try_once(size: str) -> tuple[float, float]:
    """Seconds of two calls at one size, no profiler; else Skip (memory) or YourFunctionError."""
    try:
        inputs = yk.make_inputs(*yk.SIZES[size])
        seconds, output = [], None
        while len(seconds) < 2 and not device_problem(inputs):  # inputs off the GPU: not called
            start = time.perf_counter()
            output = yk.your_function(*inputs)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError as exc:
        free, total = (b / 2**30 for b in torch.cuda.mem_get_info())
        raise nt.Skip(
            f"size {size!r} needs more GPU memory than is free ({free:.1f} of {total:.1f} GiB)",
            "take a smaller size in SIZES (your cell), or free what other processes or cells hold",
        ) from exc
    except Exception as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        raise YourFunctionError(f"your cell, size {size!r}: {type(exc).__name__}: {line}") from exc
    problem = device_problem(inputs, output)
    if problem:
        raise YourFunctionError(f"size {size!r}: {problem}")
    return seconds[0], seconds[1]


def first_call(first: float, later: float) -> str:
    """What the first call's time says: it compiled or autotuned (far slower than the next), or not."""
    slow = first > max(10 * later, 0.1)
    why = "it compiles or autotunes on first use, unmeasured" if slow else "no compile on first use"
    return f"first call {1e3 * first:,.1f} ms, the next {1e3 * later:,.2f} ms: {why}"


def refusal(exc: Exception) -> str | None:
    """The CAUSES entry of nsight-python's RuntimeError (1.1.0's and 1.1.1's words), else None."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or "kernel" not in text or text.startswith("CUDA error"):
        return None
    return "none" if re.search(r"\bno kernels? (were profiled|launch)", text, re.I) else "uneven"


def launched(call) -> pd.DataFrame:
    """nsight-python's table of one call; no row or a refused count: YourFunctionError, the cause."""
    try:
        table = call().to_dataframe()
    except RuntimeError as exc:
        cause = refusal(exc)
        if cause is None:
            raise
        said = str(exc).splitlines()[0]
        raise YourFunctionError(f"{CAUSES[cause]}\nnsight-python said: {said}") from exc
    if table.empty:
        raise YourFunctionError(f"{CAUSES['none']}\nnsight-python returned an empty table")
    return table


def per_size(table: pd.DataFrame, first: dict) -> pd.DataFrame:
    """One row per size: kernels per call, mean time and spread, the first call's seconds."""
    rows = table[table.Metric == TIME].set_index("size")
    out = pd.DataFrame(
        {"kernels": rows.Kernel.str.count(r"\|") + 1, "time us": rows.AvgValue / 1e3}
    )
    out["RSD %"] = rows.RelativeStdDevPct
    out["first call s"] = pd.Series({size: seconds[0] for size, seconds in first.items()})
    return out


def size_note(kernels: pd.Series) -> str:
    """Whether the kernels per call vary by size, and what that means."""
    if kernels.nunique() == 1:
        return f"{kernels.iloc[0]} kernel(s) per call at every size"
    counts = ", ".join(f"{n} at {size}" for size, n in kernels.items())
    return f"kernels per call vary by size ({counts}): one call per size, as in notebook 05"


def batch(row: pd.Series) -> tuple[float, float, int]:
    """A profiled call's time as (mean, standard deviation, runs) in ns, as welch_shift takes it."""
    return float(row.AvgValue), float(row.StdDev), int(row.NumRuns)


def shift_verdict(a: tuple, b: tuple, band: float | None) -> tuple[str, str]:
    """b against a: the shift and its 95 % interval; real if its near end lies beyond the band."""
    move, half, _ = lessons.welch_shift(a, b)
    words = f"{move:+.2f} % [{move - half:+.2f}, {move + half:+.2f}]"
    if band is None:
        return words, "not judged: no run-to-run band (section 2 did not run)"
    real = abs(move) - half > band
    return words, f"{'a real difference' if real else 'not distinguishable'} (band {band:.2f} %)"


def flops_of(counters: pd.Series, count: int | None) -> tuple[float, str]:
    """Your FLOP count, else the instruction counters' (Skip where tensor cores ran)."""
    if count is not None:
        return float(count), "your flop_count"
    if counters[TENSOR] > 0:
        raise nt.Skip(
            "it runs tensor-core instructions, whose FLOPs the instruction counters here miss",
            "write flop_count in your cell (a matmul of m x k by k x n: 2 m n k FLOPs)",
        )
    return float(sum(counters[m] * k for m, k in OPS.items())), "the instruction counters"


# %% [markdown]
# ## 1. What it launches
#
# First your function runs twice with no profiler: a function that raises, works on the CPU
# or mixes devices stops here with what to change, and one that needs more memory than is
# free is skipped. The first call's time says whether it compiles or autotunes on first use
# (`torch.compile` does: seconds, once). Then each size is profiled **in a call of its own**
# -- a library may launch other kernels at another size, which is why notebook 05 sweeps
# sizes one call at a time -- with `combine_kernel_metrics=add`, so a call of several
# kernels is one row whose `Kernel` column lists them all (notebook 02). Twenty runs each,
# kept raw with `output_csv=True`: section 2 plans from them.
#
# Where nsight-python gets no row, the cell says why in plain words: no kernel ran in the
# measured region (your function computes on the CPU, or returns a result it kept), or the
# number of kernels changed from run to run. It judges nsight-python's error by its type
# and its words, as nsight-python 1.1.0 and 1.1.1 write them (1.1.0 returns an empty table
# where 1.1.1 raises).

# %%
with nt.section("1. What it launches: kernels per call, size by size") as s:
    ENV.require("profiler")
    first = {size: try_once(size) for size in yk.SIZES}
    tables, raw = [], {}
    for i, size in enumerate(yk.SIZES):  # one call per size, its raw runs in a CSV of its own
        prefix = f"pilot-{i}-"
        pilot = nsight.analyze.kernel(runs=PILOT, output_prefix=prefix, output_csv=True, **QUIET)
        tables.append(launched(lambda: pilot(hk.measured)(size, yk.CACHE)))
        csv = evidence.newest_output(prefix, "profiled_data", "measured")
        raw[size] = pd.read_csv(csv).Value.to_numpy(dtype=float)
    LAUNCHES = pd.concat(tables, ignore_index=True)
    RULES["1"] = nt.rules(ENV.backend, "none", "none")
    sizes = per_size(LAUNCHES, first)
    print(textwrap.fill(RULES["1"], 118), sizes.to_string(float_format="{:,.2f}".format), sep="\n")
    for size, column in LAUNCHES.set_index("size").Kernel.items():  # each kernel, and how often
        names = Counter(nt.short_kernel_name(kernel) for kernel in column.split("|"))
        print(f"  {size}:", *(f"{n} x {name}" for name, n in names.items()), sep="\n    ")
    notes = [size_note(sizes.kernels), first_call(*first[JUDGED])]
    print("", *notes, sep="\n  ")
    PILOT_RUNS = raw
    counts = [f"{n} kernel(s) at {size}" for size, n in sizes.kernels.items()]
    s.result = f"{yk.NAME}: " + "; ".join([*counts, notes[1]])

# %% [markdown]
# ## 2. How many runs: 03's plan for ±1 %, tried, and a second batch
#
# [Notebook 03](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/03_run_counts.ipynb)'s
# plan, imported from the package where 03 wrote it (`# @save`): from the judged size's
# twenty pilot runs, a spread one slow run cannot dominate (the
# [median absolute deviation](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#mad),
# with a floor of the [timer step](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#timer-step):
# durations come in whole steps of the GPU's timer), and the fewest runs whose 95 %
# interval of the mean reaches ±1 % (with
# [Student's t](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#students-t-interval),
# which widens the interval for few runs, as the spread is itself estimated). The plan is
# then **tried**: one call with
# that many runs, whose interval the cell prints against the target. A plan describes one
# batch, so a **second batch** follows, a call later: the
# [run-to-run band](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#run-to-run-band)
# -- how far the second mean lies from the first, plus the 95 % half-width of that shift
# ([Welch](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#welchs-t-test):
# each batch keeps its own spread) -- is the least a difference must exceed before this
# notebook calls it real (section 3).

# %%
with nt.section("2. How many runs: 03's plan for 1 %, tried, and a second batch") as s:
    ENV.require("profiler")
    runs = nt.needs(PILOT_RUNS, section="1")[JUDGED]
    step = lessons.timer_step(runs)
    planned, spread = lessons.plan_runs(runs, step, TARGET)
    PLANNED = min(planned, MAX_RUNS)
    again = nsight.analyze.kernel(runs=PLANNED, **QUIET)(hk.measured)
    BATCHES = pd.concat([launched(lambda: again(JUDGED, yk.CACHE)) for _ in range(2)])
    a, b = (batch(row) for _, row in BATCHES[BATCHES.Metric == TIME].iterrows())
    BAND = lessons.run_to_run_pct(a, b)
    half = 100 * stats.t.ppf(0.975, a[2] - 1) * a[1] / np.sqrt(a[2]) / a[0]  # Student t, % of mean
    RULES["2"] = nt.rules(ENV.backend, "none", "none")
    cap = f" (capped at {MAX_RUNS})" if planned > MAX_RUNS else ""
    print(textwrap.fill(RULES["2"], 118))
    print(f"  robust spread {spread:.2f} %, timer step {step:.0f} ns -> {planned} runs{cap}")
    print(
        f"  tried: {a[0] / 1e3:,.2f} us +/-{half:.2f} % (95 %, Student t), target +/-{TARGET:g} %"
    )
    print(f"  the second batch against the first: {shift_verdict(a, b, None)[0]} (95 %, Welch)")
    print(f"  run-to-run band: {BAND:.2f} %; no difference within it is called real below")
    s.result = (
        f"{PLANNED} runs for +/-{TARGET:g} % (robust spread {spread:.2f} %); tried: "
        f"+/-{half:.2f} %; run-to-run band {BAND:.2f} %"
    )

# %% [markdown]
# ## 3. Caches and clocks: the setting, the clock, and the time at both
#
# [Notebook 04](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/04_cache_and_clock_control.ipynb)
# showed that "the kernel's time" depends on the state it starts in. Which one to report
# depends on your question: **warm** is the time inside a loop that calls your function
# again and again (its inputs still in L2 as far as they fit); **flushed** is a cold start,
# the first call after other work. Your cell chose one (`CACHE`); the cell measures both in
# one call, with the run count section 2 planned (else the pilot's), and calls the
# difference real only where even the near end of its 95 % interval lies beyond section 2's
# run-to-run band.
#
# The clock: setup watched the SM clock before anything ran and says whether it is free to
# boost or held (a lock left by a killed profiler, or an administrator's): a held clock slows
# every figure of this notebook by about the ratio it prints. While these runs ran, NVML
# sampled the SM clock in a thread -- NVML's reading during the run, not a clock the
# profiler measured (the CUPTI backend measures none; section 4's Nsight Compute does).

# %%
WHY = {
    "warm": "a loop calls it again and again: its inputs stay in L2 as far as they fit",
    "flushed": "a cold start: the first call after other work finds its inputs in DRAM",
}

with nt.section("3. Caches and clocks: the setting, the clock, the time at both") as s:
    ENV.require("profiler")
    nt.needs(PILOT_RUNS, section="1")
    both = [(JUDGED, "warm"), (JUDGED, "flushed")]
    caches = nsight.analyze.kernel(configs=both, runs=PLANNED or PILOT, **QUIET)(hk.measured)
    with clock.Sampler() as sampler:
        CACHES = launched(caches)
    CLOCK_SEEN = sampler.mhz
    RULES["3"] = nt.rules(ENV.backend, "none", "none")
    print(textwrap.fill(RULES["3"] + "; the flush by hand, in run_your_kernel.measured", 118))
    times = CACHES[CACHES.Metric == TIME].set_index("cache")
    warm, flushed = (batch(times.loc[c]) for c in ("warm", "flushed"))
    words, reading = shift_verdict(warm, flushed, BAND)
    print(f"  warm {warm[0] / 1e3:,.2f} us, flushed {flushed[0] / 1e3:,.2f} us: {words}, {reading}")
    print(f"  your setting: {yk.CACHE} -- {WHY[yk.CACHE]}")
    print("  setup's SM clock:", *(ENV.clock.lines() if ENV.clock else ["not read"]), sep="\n    ")
    mhz = "NVML read no SM clock during these runs"
    if CLOCK_SEEN:
        mhz = f"NVML read {CLOCK_SEEN[0]:,.0f} MHz ({CLOCK_SEEN[1]:,}-{CLOCK_SEEN[2]:,}) meanwhile"
    print(f"  {mhz} (NVML's reading, not a measured kernel clock)")
    s.result = (
        f"{yk.CACHE} (chosen) {times.AvgValue[yk.CACHE] / 1e3:,.1f} us; flushed {words}, {reading}; "
        f"clock {ENV.clock.state if ENV.clock else 'not read'}, {mhz}"
    )

# %% [markdown]
# ## 4. Where it sits on this GPU's roofline, and the next step
#
# [Notebook 06](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/06_roofline.ipynb)'s
# method, imported from the package where 06 wrote it (`# @save`). One Nsight Compute
# measurement -- nsight-python's backend where setup loaded it, else the `ncu` command line
# on `run_your_kernel.py`, which returns nsight-python's own table -- profiles your function
# and 06's two roof kernels in one call, under one set of rules (caches flushed before every
# kernel, clocks free), collecting for each:
#
# - the time, and the **DRAM bytes** (`dram__bytes.sum`): against `byte_count`, the bytes
#   the math needs, the ratio says how many times over the kernels move them
#   ([notebook 07](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/07_kernel_fusion.ipynb):
#   each unfused intermediate is a full write and a full read);
# - the **clock** each kernel ran at, `gpc__cycles_elapsed.avg.per_second` (cycles over
#   time), so each kernel is judged against the roof at *its* clock;
# - the **FLOPs**: your `flop_count`, else the instruction counters (adds and multiplies one
#   FLOP, fused multiply-adds two, in fp32, fp16 and fp64, as Nsight Compute's own roofline
#   counts them); tensor-core instructions are not among them, so a function that runs
#   them needs a `flop_count`.
#
# 06's placement then sets the point (FLOPs over bytes:
# [arithmetic intensity](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#arithmetic-intensity))
# against this GPU's measured roofs at the clock your kernels ran, gives the verdict
# (compute-bound, memory-bound, or neither) and the one next step it suggests: fuse, cut
# bytes, change precision, raise occupancy.

# %%
with nt.section("4. Where it sits on this GPU's roofline, and the next step") as s:
    ENV.require("profiler")
    nt.needs(PILOT_RUNS, section="1")
    free = torch.cuda.mem_get_info()[0]
    n_stream = int(min(max(16 * ENV.facts.l2_bytes, 2**28), free // 16)) // 4  # floats: 16x the L2
    m = 8192 if 3 * 4 * 8192**2 <= free // 8 else 4096
    config = [(JUDGED, n_stream, m)]
    settings = dict(runs=2, metrics=METRICS, combine_kernel_metrics=combine, thermal_mode="off")
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend, in this process
        table = nsight.analyze.kernel(configs=config, verbosity=SILENT, **settings)(hk.judged)()
        table, source = table.to_dataframe(), "ncu"
    else:  # CUPTI measures durations only: the ncu command line on the same file
        ENV.require("ncu-cli")
        script, ncu = "run_your_kernel.py", ENV.ncu_path
        table = ncu_cli.nsight_table(script, hk.judged, ncu=ncu, configs=config, **settings)
        source = "ncu-cli"
    COUNTERS = table.pivot_table(index="Annotation", columns="Metric", values="AvgValue")
    RULES["4"] = nt.rules(source, "all", "none")
    yours = COUNTERS.loc[yk.NAME]
    flops, flops_from = flops_of(yours, yk.flop_count(*yk.SIZES[JUDGED]))
    need = yk.byte_count(*yk.SIZES[JUDGED])
    moved = f"{yours[DRAM] / need:.1f}x the bytes your count needs" if need else "no byte_count"
    print(textwrap.fill(RULES["4"], 118))
    print(f"  {yk.NAME} at {JUDGED}: {yours[TIME] / 1e3:,.1f} us at {yours[CLOCK] / 1e6:,.0f} MHz")
    print(f"  {flops:.3g} FLOPs ({flops_from}), {yours[DRAM] / 1e6:,.0f} MB from DRAM ({moved})")
    kernels = table[table.Annotation == yk.NAME].Kernel.iloc[0].count("|") + 1
    nt.claim(
        not need or yours[DRAM] >= need - kernels * ENV.facts.l2_bytes,
        "the kernels move at least the bytes your count needs (less one L2 a kernel, still in L2)",
        moved,
    )
    stream, matmul = COUNTERS.loc[hk.STREAM], COUNTERS.loc[hk.MATMUL]
    fpc = 2 * m**3 / (matmul[TIME] / 1e9 * matmul[CLOCK])  # the roof matmul: FLOP per SM cycle
    bpc = 8 * n_stream / (stream[TIME] / 1e9 * stream[DRAM_CLOCK])  # the stream: B per DRAM cycle
    sm, dram, seconds = yours[CLOCK] / 1e6, yours[DRAM_CLOCK] / 1e6, yours[TIME] / 1e9
    pct = 100 * lessons.allowed_seconds(flops, yours[DRAM], sm, dram, fpc, bpc) / seconds
    side = lessons.side_of_ridge(flops / yours[DRAM], fpc * sm / (bpc * dram))
    word = lessons.verdict(pct, side, BAND or 0.0)
    top = max(REASONS, key=lambda reason: yours[STALL.format(reason)])  # the top warp-stall reason
    # a chain of kernels: 06's step for a region of several operations is to fuse them
    step = lessons.next_step(word, "ops" if kernels > 1 else side, top, yours[OCCUPANCY])
    best = 100 * lessons.allowed_seconds(flops, need or yours[DRAM], sm, dram, fpc, bpc) / seconds
    print(
        f"  roofs at its clocks {fpc * sm / 1e6:,.1f} TFLOP/s, {bpc * dram / 1e3:,.0f} GB/s; {top}"
    )
    print(f"  {word}, {pct:.0f} % of its {side} roof; with only its math's bytes: {best:.0f} %")
    s.result = f"{word}, {pct:.0f} % of its roof ({best:.0f} % with the bytes its math needs); next: {step}"

# %% [markdown]
# ## 5. The timeline around it: is the GPU busy?
#
# nsight-python's time for a region is the *sum of its kernels' durations*: the gaps
# between them -- launch overhead, the CPU's Python between kernels -- are not in it.
# [Notebook 07](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/07_kernel_fusion.ipynb)'s
# timeline shows them: a child process runs `loop` (your function ten times, each call in a
# range), under Nsight Systems where it is installed, else under `torch.profiler`, and the
# cell prints the share of each call's wall time the GPU was busy. A call far below full
# is launch-bound: fewer, larger kernels (fusion, CUDA graphs) help it more than faster ones.

# %%
with nt.section("5. The timeline around it: GPU busy % per call") as s:
    ENV.require("gpu")
    nt.needs(PILOT_RUNS, section="1")
    tl = timeline.capture("run_your_kernel.py", "loop", [(JUDGED, CALLS)], nsys=backend.find_nsys())
    BUSY = lessons.per_range(tl)
    print(f"  drawn by {tl.tool}; kept:", *(path.name for path in timeline.captures(".")))
    print(BUSY.describe().loc[["min", "50%", "max"]].to_string(float_format="{:,.1f}".format))
    busy = BUSY["GPU busy %"].median()
    tool = tl.tool.split(" (")[0]
    side = "launch-bound: fewer launches help (fuse, CUDA graphs)" if busy < 50 else "see section 4"
    s.result = f"{tool}: GPU busy {busy:.0f} % of a call, sync included (median); {side}"

# %% [markdown]
# ## 6. The evidence, zipped
#
# As [notebook 10](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/notebooks/10_keeping_the_evidence.ipynb)
# does: one folder with every table this notebook measured (CSV), the reports and raw runs
# nsight-python and ncu wrote, your cell and the harness (`your_kernel.py`,
# `run_your_kernel.py`), the environment with setup's clock state and NVML's clock during
# section 3 (`environment.json`), and `README.txt` saying which tool measured each table
# under which rules; then one zip. A section that did not run contributes nothing: the
# listing shows what is there.

# %%
with nt.section("6. The evidence, zipped") as s:
    folder = Path("evidence")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    tables = {"launches": LAUNCHES, "batches": BATCHES, "caches": CACHES, "counters": COUNTERS}
    tables["timeline"] = BUSY
    for name, table in tables.items():
        if table is not None:
            table.to_csv(folder / f"{name}.csv")
    for pattern in (
        "pilot-*.csv",
        "*.ncu-rep",
        "*_kernel.py",
        "*-timeline*",
    ):  # runs, reports, modules
        for path in Path().glob(pattern):
            shutil.copy(path, folder)
    record = {**evidence.environment_record(ENV), "nvml_sm_mhz_in_section_3": CLOCK_SEEN}
    (folder / "environment.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    notes = [f"section {k}: {line}" for k, line in RULES.items()] or ["nothing was measured"]
    (folder / "README.txt").write_text("\n".join([f"{yk.NAME} at {JUDGED}", *notes]) + "\n")
    archive = Path(shutil.make_archive("your_kernel_evidence", "zip", base_dir=folder.name))
    listing = evidence.listing(folder)
    print(listing.to_string(index=False))
    if ENV.on_colab:
        from google.colab import files

        files.download(str(archive))
    s.result = f"{len(listing)} files in {archive.name} ({archive.stat().st_size / 1024:,.0f} KiB)"

# %% [markdown]
# ## Takeaways
#
# - One cell holds your function, its inputs, its sizes and what its math needs; everything
#   else is the method, unchanged: the same function for every section, and the ncu command
#   line on the same file.
# - Count kernels before you time them: how many a call launches, and whether that changes
#   with the size, is the first thing a profile tells you.
# - Plan the runs from a spread one slow run cannot dominate, try the plan, and call a
#   difference real only beyond the band two batches of the same kernel leave open.
# - Say which cache state your number is for (a loop, or a cold start) and what the clock
#   was doing.
# - Place it on the roofline with measured bytes and the clock it ran at: the verdict names
#   the next step. Where the kernels move several times the bytes your count needs, that
#   step is to fuse them: section 4 prints the ratio for the default's eight kernels.
#
# ## Try it
#
# - Fuse the default: in your cell, rename `your_function` to `rms_norm` and add
#   `your_function = torch.compile(rms_norm, dynamic=False)` below it (the first call
#   compiles, unmeasured, and section 1 says so), then run every cell again: the kernels,
#   the bytes and the verdict change.
# - Put your own model's hot function in the cell, with the shapes it really runs at.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [core concepts: one region, several kernels](https://docs.nvidia.com/nsight-python/overview/core_concepts.html) ·
# the Nsight Compute [profiling guide](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html)
# (metrics, roofline, cache and clock control)

# %%
nt.summary()
