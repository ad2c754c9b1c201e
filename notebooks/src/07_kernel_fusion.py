# %% [markdown]
# # 07 · Kernel fusion, measured in bytes
#
# **What you will learn**
# - why `a + b * c` in eager PyTorch moves 1.5× the bytes of `torch.addcmul(a, b, c)`, and
#   how to *measure* that with the DRAM counters `dram__bytes_read.sum` and
#   `dram__bytes_write.sum`, summed over an annotation's kernels with
#   `combine_kernel_metrics`;
# - how to count the bytes a kernel sequence must move by hand, and compare the count with
#   the counters;
# - how to check that `torch.compile` fused a real model's elementwise chain (bias + GELU):
#   fewer kernels in the `Kernel` column, fewer bytes, less time -- and why compilation must
#   happen outside the measured region;
# - how close a fused kernel gets to this GPU's bandwidth roof, measured here the same way
#   as in notebook 06.
#
# | section | needs |
# |---|---|
# | 1. `a + b * c` vs `torch.addcmul` | any nsight-python backend for time; DRAM bytes from the Nsight Compute backend, else from the `ncu` command line |
# | 2. `torch.compile` as the fuser | the same, plus Triton (compute capability ≥ 7.0; a T4 is fine) |
# | 3. how close to the bandwidth roof | any backend, and section 1 or 2 |
# | 4. the plot | section 1 or 2 |
#
# Sizes come from your GPU: every vector is at least 16× its L2 (and at least 256 MiB), so
# the bytes really travel to and from DRAM.

# %%
{{SETUP}}

# %%
import importlib.util
import math
import tempfile
import textwrap
import time

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch
from scipy import stats

from nspy_tutorial import ncu_cli

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
TIME, DRAM_READ, DRAM_WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
OUT_DIR = tempfile.mkdtemp(prefix="nspy_07_")
MiB = 2**20
RUNS, REPS = 10, 3  # runs per nsight-python call; repetitions in each ncu command-line script
HIDDEN = 4096  # the GELU's hidden size (a transformer MLP's 4 x d_model)
# With the Nsight Compute backend one call collects time and bytes; CUPTI measures time only.
FUSION_METRICS = [TIME, DRAM_READ, DRAM_WRITE] if ENV.backend == "ncu" else [TIME]

if ENV.facts:
    L2, MEM = ENV.facts.l2_bytes, ENV.facts.memory_bytes
    STREAM_BYTES = int(min(max(16 * L2, 256 * MiB), MEM // 16)) // MiB * MiB  # one vector, as in notebook 06
    N = STREAM_BYTES // 4  # float32 elements per vector
    ROWS = N // HIDDEN
    print(f"L2 {L2 / MiB:.0f} MiB -> vectors of {N:,} floats ({STREAM_BYTES / MiB:,.0f} MiB, {STREAM_BYTES / L2:.0f}x L2); "
          f"GELU input {ROWS:,} x {HIDDEN}")


def add(x, y):
    """combine_kernel_metrics: add up the metrics (time, bytes) of the kernels one annotation launched."""
    return x + y


def t_interval(mean: float, sd: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of a mean of n runs."""
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def timing(df: pd.DataFrame, annotation: str) -> dict:
    """One annotation's duration from to_dataframe(): mean, sd, runs, 95 % Student-t CI (ns) and its kernels."""
    r = df[(df.Annotation == annotation) & (df.Metric == TIME)].iloc[0]
    lo, hi = t_interval(r.AvgValue, r.StdDev, int(r.NumRuns))
    return {"mean": r.AvgValue, "sd": r.StdDev, "runs": int(r.NumRuns), "lo": lo, "hi": hi, "min": r.MinValue,
            "kernels": r.Kernel.split("|")}


def show_kernels(times: dict) -> None:
    """Each variant's kernels, one short name per line (the Kernel column joins them with '|')."""
    for name, t in times.items():
        print(f"  {name}: {len(t['kernels'])} kernel(s)")
        for k in t["kernels"]:
            print(f"      {nt.short_kernel_name(k)}")


def slower(a: dict, b: dict) -> float:
    """One-sided Welch t-test p-value for 'a takes longer than b' (unequal variances, few runs)."""
    return stats.ttest_ind_from_stats(a["mean"], a["sd"], a["runs"], b["mean"], b["sd"], b["runs"],
                                      equal_var=False, alternative="greater").pvalue


def per_run(report: pd.DataFrame, nvtx_range: str, reps: int) -> pd.DataFrame:
    """One NVTX range's launches from an ncu report, split into its `reps` runs and added up per run."""
    part = report[report.Range == nvtx_range].sort_values("ID")
    nt.claim(len(part) > 0 and len(part) % reps == 0, f"every run of {nvtx_range} launched the same number of kernels",
             f"{len(part)} launches in {reps} runs")
    k = len(part) // reps
    return pd.DataFrame([{"kernels": k, TIME: c[TIME].sum(), DRAM_READ: c[DRAM_READ].sum(), DRAM_WRITE: c[DRAM_WRITE].sum()}
                         for c in (part.iloc[i * k:(i + 1) * k] for i in range(reps))])


def dram_bytes(df: pd.DataFrame, ranges: dict, script_source: str, script_args: list, name: str) -> tuple[dict, str]:
    """Measured DRAM bytes (read, write) per annotation, and whose rules produced them: the same nsight-python
    run under the Nsight Compute backend; else the ncu command line on a script (ranges: NVTX range -> annotation)."""
    if ENV.backend == "ncu":
        out = {}
        for annotation in ranges.values():
            m = df[df.Annotation == annotation].set_index("Metric").AvgValue
            out[annotation] = {"read": m[DRAM_READ], "write": m[DRAM_WRITE]}
        return out, nt.rules("ncu")
    try:
        ENV.require("ncu-cli")
    except nt.Skip as missing:  # say what was measured and what could not be
        raise nt.Skip(f"DRAM bytes need the Nsight Compute backend or the ncu command line; the {ENV.backend} backend "
                      f"measured the times only (sections 3 and 4 use them). {missing.reason}",
                      missing.remedy, needs=missing.needs) from None
    script = ncu_cli.write_script(script_source, f"{name}.py", OUT_DIR)
    report = ncu_cli.profile_script_report(ENV.ncu_path, script, [str(a) for a in script_args],
                                           [TIME, DRAM_READ, DRAM_WRITE], list(ranges), f"{OUT_DIR}/{name}.ncu-rep",
                                           show_command=True)
    out = {}
    for rng, annotation in ranges.items():
        runs = per_run(report, rng, REPS)
        out[annotation] = {"read": runs[DRAM_READ].mean(), "write": runs[DRAM_WRITE].mean()}
    return out, nt.rules("ncu-cli")


def fusion_table(df: pd.DataFrame, analytic: dict, measured: dict) -> pd.DataFrame:
    """Per variant: kernels, time (mean, CI), analytic and measured MB, their ratio, effective GB/s."""
    rows = {}
    for name, a in analytic.items():
        t = timing(df, name)
        total = a["read"] + a["write"]
        m = measured.get(name, {})
        rows[name] = {"kernels": len(t["kernels"]), "time_us": t["mean"] / 1e3, "CI95 +/- us": (t["hi"] - t["mean"]) / 1e3,
                      "analytic MB": total / 1e6, "measured MB": (m["read"] + m["write"]) / 1e6 if m else np.nan,
                      "measured read MB": m["read"] / 1e6 if m else np.nan,
                      "measured write MB": m["write"] / 1e6 if m else np.nan,
                      "eff. GB/s": total / t["mean"]}
    table = pd.DataFrame(rows).T
    table["measured / analytic"] = table["measured MB"] / table["analytic MB"]
    return table.astype({"kernels": int})


def fmt_table(table: pd.DataFrame, fmt: str = "{:,.1f}") -> None:
    print(textwrap.indent(table.to_string(float_format=lambda v: fmt.format(v)), "  "))


TABLES = {}  # section -> its table, for sections 3 and 4

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
# So fusion should save a third of the traffic, and -- since both are memory-bound -- about
# a third of the time. The unfused annotation launches two kernels: without
# `combine_kernel_metrics` nsight-python would refuse it (notebook 02 shows the error);
# with `add` below it adds the two kernels' times *and* their byte counts, metric by metric.
#
# Where the numbers come from: with the Nsight Compute backend, one profiled call collects
# `gpu__time_duration.sum` and both byte counters. With CUPTI (durations only) the time
# comes from CUPTI and the bytes from the `ncu` command line on a small script -- whose
# exact command is printed. Under both Nsight Compute tools the caches are flushed before
# every kernel, so each kernel's inputs come from DRAM ("cold" bytes); a kernel's last
# writes may still sit in L2 when it ends, and reach DRAM after its counters stopped (at most
# one L2 per kernel).

# %%
UNFUSED, ADDCMUL = "a + b * c", "torch.addcmul(a, b, c)"
if ENV.facts:
    ANALYTIC_1 = {UNFUSED: {"read": 4 * (2 + 2) * N,  # b, c into the multiply; a and t into the add
                            "write": 4 * (1 + 1) * N},  # t out of the multiply, the result out of the add
                  ADDCMUL: {"read": 4 * 3 * N, "write": 4 * N}}  # a, b, c in; the result out


@nsight.analyze.kernel(runs=RUNS, metrics=FUSION_METRICS, combine_kernel_metrics=add, thermal_mode="off",
                       verbosity=SILENT)
def fusion(n: int) -> None:
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    with nsight.annotate(UNFUSED):
        _ = a + b * c
    with nsight.annotate(ADDCMUL):
        _ = torch.addcmul(a, b, c)


FUSION_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    n, reps = map(int, sys.argv[1:3])
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    d, e = a + b * c, torch.addcmul(a, b, c)  # warm-up, outside the ranges
    for _ in range(reps):
        torch.cuda.nvtx.range_push("f_unfused")
        d = a + b * c
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("f_addcmul")
        e = torch.addcmul(a, b, c)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')

with nt.section("1. Unfused vs fused: a + b * c against torch.addcmul") as s:
    ENV.require("profiler")
    df = fusion(N).to_dataframe()
    TIMES_1 = {name: timing(df, name) for name in ANALYTIC_1}
    TABLES["1"] = fusion_table(df, ANALYTIC_1, {})  # times only: sections 3 and 4 can use them even without bytes
    measured, bytes_rules = dram_bytes(df, {"f_unfused": UNFUSED, "f_addcmul": ADDCMUL}, FUSION_SCRIPT, [N, REPS], "fusion")
    table = fusion_table(df, ANALYTIC_1, measured)
    print("  time:  " + nt.rules(ENV.backend))
    print("  bytes: " + bytes_rules)
    fmt_table(table, "{:,.2f}")
    show_kernels(TIMES_1)
    u, f = table.loc[UNFUSED], table.loc[ADDCMUL]
    p = slower(TIMES_1[UNFUSED], TIMES_1[ADDCMUL])
    kernels = {name: len(t["kernels"]) for name, t in TIMES_1.items()}
    nt.claim(kernels[UNFUSED] == 2 and kernels[ADDCMUL] == 1, "a + b * c launches two kernels, torch.addcmul one",
             f"{kernels[UNFUSED]} and {kernels[ADDCMUL]}")
    nt.claim(u["measured MB"] > f["measured MB"], "the unfused version moves more DRAM bytes (measured)",
             f"{u['measured MB']:,.0f} vs {f['measured MB']:,.0f} MB; analytic {u['analytic MB']:,.0f} vs {f['analytic MB']:,.0f}")
    nt.claim(p < 0.01, "the unfused version takes longer (one-sided Welch t-test, p < 0.01)",
             f"{u['time_us']:,.0f} vs {f['time_us']:,.0f} us, p = {p:.1e}")
    TABLES["1"] = table
    s.result = (f"bytes unfused/fused: analytic {u['analytic MB'] / f['analytic MB']:.2f}x, measured "
                f"{u['measured MB'] / f['measured MB']:.2f}x; time {u['time_us'] / f['time_us']:.2f}x")

# %% [markdown]
# Read the `measured / analytic` column: the reads should match the hand count closely
# (with flushed caches every input byte must come from DRAM); the writes can fall short by
# up to one L2 per kernel, because a kernel's last writes may still sit in L2 when it ends.
# Under CUPTI the *times* come from a run with warm caches, the *bytes* from a flushed one:
# the two tables follow different rules, and both are printed above.
#
# ## 2. `torch.compile` as the fuser: bias + GELU
#
# Nobody writes `addcmul` by hand for every expression. A compiler can fuse any chain of
# elementwise operations into one kernel. Here is one from a real model: the bias add and
# GELU after the first linear layer of a GPT-2-style MLP, with GELU's tanh approximation
# written out as GPT-2 does. Eager PyTorch runs it as **nine** kernels; each reads its inputs from
# DRAM and writes a full-size temporary:
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
# That is 11 tensor reads and 9 writes of n floats: 80n bytes (plus the tiny bias). One
# fused kernel reads x and the bias and writes y: 8n bytes -- ten times less.
#
# **Compile before you measure, outside the annotation.** The first call of a
# `torch.compile`d function traces it, generates and compiles a Triton kernel (seconds of
# CPU time) and may launch extra kernels to tune it. nsight-python calls the decorated
# function once per run, so compiling inside it would time the compiler, and every kernel
# it launched inside the annotation would break the "same number of kernels in every run"
# rule. So we compile and warm up once, on the same shapes, before profiling -- and the
# `ncu` script does the same before its first NVTX range. (`compile_threads = 1` keeps the
# compilation in this process instead of starting a pool of worker processes for one small
# kernel.)

# %%
EAGER, COMPILED = "bias + GELU, eager", "bias + GELU, torch.compile"


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Bias add, then GELU with the tanh approximation (as in GPT-2)."""
    h = x + bias
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))


if ENV.facts:
    ANALYTIC_2 = {EAGER: {"read": 4 * 11 * N + 4 * HIDDEN, "write": 4 * 9 * N},  # the table above
                  COMPILED: {"read": 4 * N + 4 * HIDDEN, "write": 4 * N}}  # read x and bias once, write y once


@nsight.analyze.kernel(runs=RUNS, metrics=FUSION_METRICS, combine_kernel_metrics=add, thermal_mode="off",
                       verbosity=SILENT)
def gelu_bench(rows: int, hidden: int) -> None:
    x = torch.randn(rows, hidden, device="cuda")
    bias = torch.randn(hidden, device="cuda")
    with nsight.annotate(EAGER):
        _ = bias_gelu(x, bias)
    with nsight.annotate(COMPILED):
        _ = compiled_gelu(x, bias)  # compiled and warmed up in the section below, before this runs


GELU_SCRIPT = textwrap.dedent('''
    import math
    import sys
    import torch
    import torch._inductor.config
    torch._inductor.config.compile_threads = 1  # compile in this process
    rows, hidden, reps = map(int, sys.argv[1:4])

    def bias_gelu(x, bias):  # the notebook's function, verbatim
        h = x + bias
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))

    x = torch.randn(rows, hidden, device="cuda")
    bias = torch.randn(hidden, device="cuda")
    compiled = torch.compile(bias_gelu, dynamic=False)
    y, z = bias_gelu(x, bias), compiled(x, bias)  # compile and warm up before any NVTX range
    torch.cuda.synchronize()
    for _ in range(reps):
        torch.cuda.nvtx.range_push("g_eager")
        y = bias_gelu(x, bias)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("g_compiled")
        z = compiled(x, bias)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')

with nt.section("2. torch.compile as the fuser: bias + GELU") as s:
    ENV.require("profiler")
    ENV.require_compute_capability((7, 0), "torch.compile's Triton code generator")
    if importlib.util.find_spec("triton") is None:
        raise nt.Skip("torch.compile generates GPU kernels with Triton, and Triton is not installed",
                      "install PyTorch's CUDA build for Linux, which brings Triton (`pip install torch`)", needs="triton")
    import torch._inductor.config
    torch._inductor.config.compile_threads = 1  # compile in this process (see above)
    x = torch.randn(ROWS, HIDDEN, device="cuda")
    bias = torch.randn(HIDDEN, device="cuda")
    start = time.perf_counter()
    compiled_gelu = torch.compile(bias_gelu, dynamic=False)
    y = compiled_gelu(x, bias)  # the first call compiles
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    error = (y - bias_gelu(x, bias)).abs().max().item()
    print(f"  compiled and warmed up in {compile_s:.1f} s, before and outside any annotation")
    nt.claim(error < 1e-4, "the compiled function computes the same values as eager", f"max |difference| {error:.1e}")
    del x, bias, y
    df = gelu_bench(ROWS, HIDDEN).to_dataframe()
    TIMES_2 = {name: timing(df, name) for name in ANALYTIC_2}
    TABLES["2"] = fusion_table(df, ANALYTIC_2, {})  # times only, as in section 1
    measured, bytes_rules = dram_bytes(df, {"g_eager": EAGER, "g_compiled": COMPILED}, GELU_SCRIPT, [ROWS, HIDDEN, REPS], "bias_gelu")
    table = fusion_table(df, ANALYTIC_2, measured)
    print("  time:  " + nt.rules(ENV.backend))
    print("  bytes: " + bytes_rules)
    fmt_table(table, "{:,.2f}")
    show_kernels(TIMES_2)
    e, c = table.loc[EAGER], table.loc[COMPILED]
    p = slower(TIMES_2[EAGER], TIMES_2[COMPILED])
    kernels = {name: len(t["kernels"]) for name, t in TIMES_2.items()}
    nt.claim(kernels[COMPILED] < kernels[EAGER], "the compiled version launches fewer kernels (Kernel column)",
             f"{kernels[COMPILED]} vs {kernels[EAGER]}")
    nt.claim(c["measured MB"] < e["measured MB"], "the compiled version moves fewer DRAM bytes (measured)",
             f"{c['measured MB']:,.0f} vs {e['measured MB']:,.0f} MB")
    nt.claim(p < 0.01, "the compiled version is faster (one-sided Welch t-test, p < 0.01)",
             f"{c['time_us']:,.0f} vs {e['time_us']:,.0f} us, p = {p:.1e}")
    TABLES["2"] = table
    s.result = (f"eager {kernels[EAGER]} kernels -> compiled {kernels[COMPILED]}; bytes {e['measured MB'] / c['measured MB']:.1f}x "
                f"fewer (analytic {e['analytic MB'] / c['analytic MB']:.1f}x); time {e['time_us'] / c['time_us']:.1f}x; "
                f"compile {compile_s:.0f} s")

# %% [markdown]
# Did the fusion succeed? The `Kernel` column says how many kernels the region launched and
# their names (Triton's start with `triton_`); the byte counters say whether DRAM traffic
# fell. Both are needed: a "fused" region that still launches a copy kernel, or a compiled
# kernel that re-reads its input, shows up in one and not necessarily in the other.
#
# ## 3. How close to the bandwidth roof are the fused kernels?
#
# A fused elementwise kernel is still memory-bound; the best it can do is move its bytes at
# the GPU's achievable bandwidth. We measure that roof here as notebook 06 does: streams over
# vectors as large as the ones above with different read:write mixes -- `x.sum()` (read
# only), `y = x * 2` (1 read, 1 write), `y = x + w` (2 reads, 1 write),
# `y = addcmul(x, w, v)` (3 reads, 1 write) -- bytes from the tensor sizes; the fastest is
# the roof. Because DRAM pays for turning its bus around between reads and writes, each
# fused kernel is also set against the stream with **its own mix**: addcmul reads three
# vectors and writes one; the compiled bias + GELU reads one and writes one. Each fused
# kernel's **effective bandwidth** is its analytic bytes over its measured time -- the bytes
# it *must* move, so a kernel that moved more than that gets no credit for it.

# %%
STREAM_R, STREAM_RW = "stream: x.sum() (read only)", "stream: y = x * 2 (1 read, 1 write)"
STREAM_2R, STREAM_3R = "stream: y = x + w (2 reads, 1 write)", "stream: y = addcmul(x, w, v) (3 reads, 1 write)"
STREAM_BUFFERS = {STREAM_R: 1, STREAM_RW: 2, STREAM_2R: 3, STREAM_3R: 4}  # vectors read + written
OWN_MIX = {ADDCMUL: STREAM_3R, COMPILED: STREAM_RW}  # the stream with the same read:write mix


@nsight.analyze.kernel(runs=RUNS, combine_kernel_metrics=add, thermal_mode="off", verbosity=SILENT)
def bandwidth_roof(n: int) -> None:
    x, w, v = (torch.randn(n, device="cuda") for _ in range(3))  # not measured: outside the annotations
    y = torch.empty_like(x)
    with nsight.annotate(STREAM_R):
        x.sum()
    with nsight.annotate(STREAM_RW):
        torch.mul(x, 2.0, out=y)
    with nsight.annotate(STREAM_2R):
        torch.add(x, w, out=y)
    with nsight.annotate(STREAM_3R):
        torch.addcmul(x, w, v, out=y)


with nt.section("3. How close to the bandwidth roof are the fused kernels?") as s:
    ENV.require("profiler")
    fused = {name: (TABLES[k], name) for k, name in (("1", ADDCMUL), ("2", COMPILED)) if k in TABLES}
    if not fused:
        raise nt.Skip("no fused kernel was timed: sections 1 and 2 did not get that far",
                      "see their SKIPPED or FAILED reasons above", needs="profiler")
    df = bandwidth_roof(N).to_dataframe()
    bw = {name: k * STREAM_BYTES / timing(df, name)["mean"] for name, k in STREAM_BUFFERS.items()}  # GB/s
    roof = max(bw.values())
    sheet = ENV.datasheet.mem_bandwidth_gbs.value if ENV.datasheet else None
    facts = ENV.facts
    clock_peak = (2 * facts.max_mem_clock_mhz * 1e6 * facts.memory_bus_width_bits / 8 / 1e9
                  if facts.max_mem_clock_mhz and facts.memory_bus_width_bits else None)
    print("  " + nt.rules(ENV.backend))
    print("  streams: " + ", ".join(f"{k.split(': ')[1]} {v:,.0f} GB/s" for k, v in bw.items())
          + f" -> measured roof {roof:,.0f} GB/s; datasheet {f'{sheet:,.0f}' if sheet else 'unknown'} GB/s"
          + (f"; device's clock-derived peak {clock_peak:,.0f} GB/s" if clock_peak else ""))
    rows = {}
    for name, (table, _) in fused.items():
        eff = table.loc[name, "eff. GB/s"]
        rows[name] = {"eff. GB/s": eff, "same-mix stream GB/s": bw[OWN_MIX[name]],
                      "% of same-mix stream": 100 * eff / bw[OWN_MIX[name]], "% of measured roof": 100 * eff / roof,
                      "% of datasheet": 100 * eff / sheet if sheet else np.nan,
                      "% of clock-derived peak": 100 * eff / clock_peak if clock_peak else np.nan}
        if clock_peak:
            nt.claim(eff <= clock_peak, f"{name} moves its analytic bytes no faster than the device's clock-derived "
                     "DRAM peak", f"{eff:,.0f} <= {clock_peak:,.0f} GB/s")
    close = pd.DataFrame(rows).T
    fmt_table(close)
    s.result = "; ".join(f"{k}: {r['eff. GB/s']:,.0f} GB/s = {r['% of same-mix stream']:.0f} % of its same-mix "
                         f"stream, {r['% of measured roof']:.0f} % of the measured roof"
                         + (f", {r['% of datasheet']:.0f} % of the datasheet" if sheet else "") for k, r in close.iterrows())

# %% [markdown]
# Near 100 % of its same-mix stream means the fused kernel moves its bytes as fast as a
# plain stream with the same reads and writes: the only way left to make it faster is to
# move fewer bytes (a smaller dtype, or fusing it
# into the matmul before it). Clearly below means something else limits it -- the
# arithmetic (GELU's `tanh` is not free), or how it accesses memory.
#
# ## 4. The plot: bytes and time per variant

# %%
with nt.section("4. Plot: bytes and time per variant") as s:
    ENV.require("profiler")
    if not TABLES:
        raise nt.Skip("sections 1 and 2 timed nothing", "see their SKIPPED or FAILED reasons above", needs="profiler")
    both = pd.concat(TABLES.values())
    fig, (ax_b, ax_t) = plt.subplots(1, 2, figsize=(11, 3.8))
    pos = np.arange(len(both))
    ax_b.bar(pos - 0.2, both["analytic MB"], 0.4, label="analytic (counted by hand)")
    ax_b.bar(pos + 0.2, both["measured MB"], 0.4, label="measured (DRAM counters)")
    ax_b.set_ylabel("MB moved"); ax_b.set_title("DRAM bytes per call"); ax_b.legend(fontsize=8)
    ax_t.bar(pos, both["time_us"], 0.5, yerr=both["CI95 +/- us"], capsize=4, color="C2")
    ax_t.set_ylabel("us"); ax_t.set_title(f"time per call (mean, 95 % CI, {ENV.backend})")
    for ax in (ax_b, ax_t):
        ax.set_xticks(pos)
        ax.set_xticklabels([n.replace(", ", "\n") for n in both.index], fontsize=8)
    fig.suptitle(f"Kernel fusion on {ENV.gpu_name}")
    plt.tight_layout(); plt.show()
    s.result = f"plotted {len(both)} variants"

# %% [markdown]
# ## Takeaways
#
# - Count bytes before you measure time: for memory-bound kernels, time follows bytes.
#   Every unfused intermediate costs a full write and a full read.
# - Measure the bytes: `dram__bytes_read.sum` and `dram__bytes_write.sum`, summed over an
#   annotation's kernels with `combine_kernel_metrics`. With an old `ncu`, the command line
#   on a script gives the same counters.
# - Check fusion in two places: the `Kernel` column (how many kernels, whose names) and the
#   byte counters (did traffic fall).
# - Compile and warm up outside the profiled region, on the shapes you will profile.
# - A fused elementwise kernel near the bandwidth roof is done; to go faster, move fewer
#   bytes.
#
# ## Try it
#
# - Replace `bias_gelu` with a layer norm written out by hand (mean, subtract, variance,
#   rsqrt, scale, shift): count its eager kernels and bytes, then see what `torch.compile`
#   makes of a reduction.
# - Run section 2 in bf16 (`torch.randn(..., dtype=torch.bfloat16)` in `gelu_bench`): the
#   analytic bytes halve; does the time?
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
nt.summary();
