# %% [markdown]
# # 04 · Cache and clock control: two defaults that change the answer
#
# **What you will learn**
# - what `cache_control` ("all" = flush caches before every replay, "none" = keep them)
#   and `clock_control` ("base" = lock clocks to base, "none" = let the GPU boost) do to
#   the *same* kernel;
# - that nsight-python's defaults (`cache_control="all"`, `clock_control="none"`) are not
#   the plain `ncu` defaults (`--cache-control all --clock-control base`);
# - how to measure the clock a kernel really ran at
#   (`gpc__cycles_elapsed.avg.per_second`) -- `ComputeClock` is only the rating;
# - what to do when nsight-python's Nsight Compute backend is not available: run the
#   `ncu` command line on a script, and flush the L2 by hand under CUPTI.
#
# The experiment streams through a vector (`y = x * 2`) at two sizes chosen from **your
# GPU's L2 size**: one that fits in L2 (a quarter of it) and one far above (8×).
#
# | section | needs |
# |---|---|
# | 1. the 2×2 with nsight-python | the Nsight Compute backend (ncu ≥ 2026.2.1) |
# | 2. the 2×2 with the `ncu` command line | any `ncu` (older ones too) |
# | 3. warm vs cold L2 by hand | any backend (CUPTI too) |

# %%
{{SETUP}}

# %%
import os
import tempfile
import textwrap

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch

from nspy_tutorial import ncu_cli
from nspy_tutorial.profiling import sum_kernels

SILENT = nsight.VerbosityLevel.SILENT
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    SMALL, LARGE = L2 // 4 // 4, 8 * L2 // 4  # float32 elements: L2/4 and 8 x L2 bytes
    print(f"L2 = {L2 / 2**20:.0f} MiB -> small vector {4 * SMALL / 2**20:.1f} MiB, large {4 * LARGE / 2**20:.0f} MiB")


def summarise(table: pd.DataFrame) -> dict:
    """Speed-up of warm over cold L2 per size, and the measured clock range."""
    t = table.groupby(["size", "cache_control"]).time_us.mean().unstack()
    return {"speedup": (t["all"] / t["none"]).to_dict(),
            "mhz": (table.SM_MHz.min(), table.SM_MHz.max())}


def check_claims(table: pd.DataFrame, rated_khz) -> dict:
    """The two claims of this notebook, asserted on one 2x2 table."""
    found = summarise(table)
    lo, hi = found["mhz"]
    nt.claim(len(set(rated_khz)) == 1, "the ComputeClock column is the same in every configuration",
             f"{sorted(set(rated_khz))} kHz")
    nt.claim(hi - lo > 0.01 * hi, "the measured SM clock moves between configurations", f"{lo:.0f}-{hi:.0f} MHz")
    s_small, s_large = found["speedup"]["fits in L2"], found["speedup"]["8x L2"]
    nt.claim(s_small > 1.1 and s_large < 1.1, "a warm L2 beats a flushed one only for the size that fits in L2",
             f"cold/warm time: {s_small:.2f}x (fits), {s_large:.2f}x (8x L2)")
    return found

# %% [markdown]
# ## 0. The defaults, read from the tools themselves
#
# Before measuring anything: what does each tool do when you say nothing? nsight-python's
# defaults are in its decorator's signature; the `ncu` command line states its own in
# `ncu --help`. And the CUPTI collector does not even accept the two options.

# %%
import inspect
import re
import subprocess

with nt.section("0. Default cache and clock control: nsight-python vs ncu") as s:
    params = inspect.signature(nsight.analyze.kernel).parameters
    nsp = {k: params[k].default for k in ("cache_control", "clock_control")}
    print(f"  nsight-python: {nsp}")
    nt.claim(nsp == {"cache_control": "all", "clock_control": "none"},
             "nsight-python flushes caches and leaves clocks free by default")
    cupti_params = inspect.signature(nsight.collection.cupti.CUPTICollector.__init__).parameters
    nt.claim("cache_control" not in cupti_params and "clock_control" not in cupti_params,
             "the CUPTI collector takes neither option: under CUPTI they are ignored")
    line = f"nsight-python cache={nsp['cache_control']}, clock={nsp['clock_control']}"
    if ENV.ncu_path:
        helptext = subprocess.run([ENV.ncu_path, "--help"], capture_output=True, text=True).stdout
        cli = {k: re.search(rf"--{k}\s+arg\s+\(=(\w+)\)", helptext) for k in ("cache-control", "clock-control")}
        if all(cli.values()):
            cli = {k: m.group(1) for k, m in cli.items()}
            print(f"  ncu --help:    {cli}")
            nt.claim(cli == {"cache-control": "all", "clock-control": "base"},
                     "the ncu command line flushes caches and locks clocks to base by default")
            line += f"; ncu CLI cache={cli['cache-control']}, clock={cli['clock-control']}"
        else:
            print("  (could not read the defaults from this ncu's --help text)")
    s.result = line

# %% [markdown]
# ## 1. The 2×2 with nsight-python (Nsight Compute backend)
#
# Four decorated benchmarks, one per combination. Besides the duration we collect
# `gpc__cycles_elapsed.avg.per_second`: GPU cycles elapsed divided by the kernel's
# duration, i.e. **the clock the kernel actually ran at**.

# %%
def make_scale_bench(cache: str, clock: str):
    @nsight.analyze.kernel(runs=10, cache_control=cache, clock_control=clock, thermal_mode="off",
                           verbosity=SILENT, metrics=[TIME, SM_HZ])
    def scale(n: int) -> None:
        x = torch.randn(n, device="cuda")
        with nsight.annotate("x * 2"):
            _ = x * 2.0
    return scale


with nt.section("1. cache_control x clock_control with nsight-python") as s:
    ENV.require("ncu")
    rows, rated = [], []
    for cache in ("all", "none"):
        for clock in ("none", "base"):
            df = make_scale_bench(cache, clock)(configs=[SMALL, LARGE]).to_dataframe()
            rated += list(df.ComputeClock)
            t = df[df.Metric == TIME].set_index("n").AvgValue
            hz = df[df.Metric == SM_HZ].set_index("n").AvgValue
            for n, size in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
                rows.append({"cache_control": cache, "clock_control": clock, "size": size,
                             "time_us": t[n] / 1e3, "GB/s": 2 * 4 * n / t[n], "SM_MHz": hz[n] / 1e6})
    NSIGHT_TABLE = pd.DataFrame(rows)
    print(NSIGHT_TABLE.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    found = check_claims(NSIGHT_TABLE, rated)
    s.result = (f"warm L2 {found['speedup']['fits in L2']:.2f}x faster (fits), {found['speedup']['8x L2']:.2f}x (8x L2); "
                f"SM clock {found['mhz'][0]:.0f}-{found['mhz'][1]:.0f} MHz")

# %% [markdown]
# ## 2. The same 2×2 with the `ncu` command line
#
# If nsight-python's Nsight Compute backend could not load (an ncu older than 2026.2.1
# that you cannot upgrade), the `ncu` command line still profiles a **separate** Python
# process in launch mode. We write the kernel into a small script, mark the regions
# with NVTX ranges, and let `ncu --nvtx --nvtx-include small/ --nvtx-include large/`
# profile only those -- the same filtering `nsight.annotate` does for you.
#
# `nspy_tutorial.ncu_cli` strips the profiler-injection variables nsight-python set in
# this process before starting the child, so the child is profiled by its own ncu only.

# %%
SCRIPT = textwrap.dedent('''
    import sys, torch
    small, large, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    for name, n in (("small", small), ("large", large)):
        x = torch.randn(n, device="cuda")
        for _ in range(reps):
            torch.cuda.nvtx.range_push(name)
            y = x * 2.0
            torch.cuda.nvtx.range_pop()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)  # a compute-bound contrast
    for _ in range(reps):
        torch.cuda.nvtx.range_push("matmul")
        c = a @ a
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
''')
REPS = 5

with nt.section("2. cache_control x clock_control with the ncu command line") as s:
    ENV.require("ncu-cli")
    script = os.path.join(tempfile.mkdtemp(prefix="nspy_04_"), "scale.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    rows, rated, MATMUL_US = [], [], {}
    for cache in ("all", "none"):
        for clock in ("none", "base"):
            raw = ncu_cli.profile_script(ENV.ncu_path, script, [str(SMALL), str(LARGE), str(REPS)],
                                         [TIME, SM_HZ, "device__attribute_clock_rate"], ["small", "large", "matmul"],
                                         cache_control=cache, clock_control=clock)
            wide = raw.pivot_table(index="ID", columns="Metric Name", values="Metric Value")
            nt.claim(len(wide) >= 3 * REPS and (len(wide) - 2 * REPS) % REPS == 0,
                     "ncu profiled only the kernels inside the three NVTX ranges", f"{len(wide)} launches")
            rated += list(wide["device__attribute_clock_rate"])
            MATMUL_US[(cache, clock)] = wide.iloc[2 * REPS:][TIME].sum() / REPS / 1e3
            for size, part, n in (("fits in L2", wide.iloc[:REPS], SMALL), ("8x L2", wide.iloc[REPS:], LARGE)):
                t = part[TIME].mean()
                rows.append({"cache_control": cache, "clock_control": clock, "size": size,
                             "time_us": t / 1e3, "GB/s": 2 * 4 * n / t, "SM_MHz": part[SM_HZ].mean() / 1e6})
    CLI_TABLE = pd.DataFrame(rows)
    print(f"  {ENV.ncu_path} (version {'.'.join(map(str, ENV.ncu_version))})")
    print(CLI_TABLE.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    found = check_claims(CLI_TABLE, rated)
    base = CLI_TABLE[CLI_TABLE.clock_control == "base"].SM_MHz.mean()
    boost = CLI_TABLE[CLI_TABLE.clock_control == "none"].SM_MHz.mean()
    stream = CLI_TABLE[CLI_TABLE["size"] == "8x L2"].groupby("clock_control").time_us.mean()
    slow_stream = stream["base"] / stream["none"]
    slow_mm = MATMUL_US[("all", "base")] / MATMUL_US[("all", "none")]
    print(f"  locking the clock ({boost:.0f} -> {base:.0f} MHz, {boost / base:.2f}x) slows the 8x-L2 stream "
          f"{slow_stream:.2f}x and the fp16 matmul ({MATMUL_US[('all', 'none')]:.0f} us) {slow_mm:.2f}x")
    nt.claim(slow_mm > slow_stream, "the compute-bound matmul feels the clock lock more than the memory-bound stream",
             f"{slow_mm:.2f}x vs {slow_stream:.2f}x")
    s.result = (f"ncu CLI: warm L2 {found['speedup']['fits in L2']:.2f}x faster (fits), "
                f"{found['speedup']['8x L2']:.2f}x (8x L2); clock {boost:.0f}->{base:.0f} MHz slows matmul "
                f"{slow_mm:.2f}x, stream {slow_stream:.2f}x")

# %% [markdown]
# The script also runs an fp16 matmul in a third range, as a contrast: a memory-bound
# stream mostly waits on DRAM, so it feels the SM clock less than a compute-bound matmul,
# which slows down by up to the clock ratio. (Whether "base" also lowers the memory clock
# depends on the GPU.) Which of the two your kernel is decides how much `clock_control`
# matters for it -- notebook 06 measures that boundary.
#
# Plotting whichever table we have shows the cache effect: it matters only when the
# data fits in L2.

# %%
with nt.section("Plot: time per configuration") as s:
    table = globals().get("NSIGHT_TABLE", globals().get("CLI_TABLE"))
    if table is None:
        raise nt.Skip("neither section 1 nor section 2 produced a table",
                      "see their SKIPPED reasons above", needs="ncu-cli")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, size in zip(axes, ("fits in L2", "8x L2")):
        part = table[table["size"] == size]
        labels = [f"cache={c}\nclock={k}" for c, k in zip(part.cache_control, part.clock_control)]
        ax.bar(labels, part.time_us, color=["C0", "C1", "C2", "C3"])
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(f"x * 2, {size}"); ax.set_ylabel("us")
    plt.tight_layout(); plt.show()
    s.result = f"plotted {len(table)} configurations"

# %% [markdown]
# ## 3. Warm vs cold L2 by hand (any backend, CUPTI included)
#
# The CUPTI backend records each kernel once as it runs: no replay, **no cache
# flush, no clock control** -- `cache_control` and `clock_control` are ignored there.
# You can still measure a cold cache honestly: overwrite the L2 yourself *before*
# the annotation, by writing a scratch buffer twice the L2 size. That write is not
# measured (it is outside the annotation), but it evicts `x`.
#
# Note what "warm" means here: `x` was just written by `torch.randn`, so whatever part
# of it fits in L2 is still there when `x * 2` runs.

# %%
# cache_control="none": under the Nsight Compute backend, do not flush for us either
@nsight.analyze.kernel(runs=20, thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=sum_kernels,
                       cache_control="none")
def scale_flush(n: int, flush: bool) -> None:
    x = torch.randn(n, device="cuda")
    if flush:
        SCRATCH.fill_(1.0)  # evict x from L2: not measured
    with nsight.annotate("x * 2"):
        _ = x * 2.0


with nt.section("3. Warm vs cold L2 by hand") as s:
    ENV.require("profiler")
    SCRATCH = torch.empty(2 * L2 // 4, device="cuda")
    configs = [(SMALL, False), (SMALL, True), (LARGE, False), (LARGE, True)]
    df = pd.concat([scale_flush(configs=[c]).to_dataframe() for c in configs])
    t = df.set_index(["n", "flush"]).AvgValue
    sp_small = t[(SMALL, True)] / t[(SMALL, False)]
    sp_large = t[(LARGE, True)] / t[(LARGE, False)]
    for n, name in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
        print(f"  {name:10s}: warm {t[(n, False)] / 1e3:8.1f} us, flushed {t[(n, True)] / 1e3:8.1f} us "
              f"-> {2 * 4 * n / t[(n, False)]:7.0f} vs {2 * 4 * n / t[(n, True)]:7.0f} GB/s")
    nt.claim(sp_small > 1.1 and sp_large < 1.1, "a warm L2 beats a flushed one only for the size that fits in L2",
             f"cold/warm: {sp_small:.2f}x (fits), {sp_large:.2f}x (8x L2)")
    del SCRATCH
    s.result = f"{ENV.backend}: flushed/warm time {sp_small:.2f}x (fits in L2), {sp_large:.2f}x (8x L2)"

# %% [markdown]
# ## Takeaways
#
# - Decide cache and clock control on purpose. nsight-python flushes caches
#   (`"all"`) and leaves clocks free (`"none"`); the `ncu` command line flushes and locks
#   to base. The same kernel can differ by tens of percent between the two.
# - A cold-cache number is reproducible; a warm-cache number is what the kernel sees
#   inside a real model when its input was just produced. Know which you report.
# - Measure the clock (`gpc__cycles_elapsed.avg.per_second`); `ComputeClock` is the
#   card's rating and never moves.
# - No Nsight Compute backend? The `ncu` CLI on a script gives the same controls, and
#   under CUPTI you can flush the L2 yourself -- but you cannot lock clocks there.

# %%
nt.summary();
