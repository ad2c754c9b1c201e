# %% [markdown]
# # 04 · Cache and clock control: two defaults that change the answer
#
# **What you will learn**
# - what `cache_control` ("all" = flush caches before every replay pass, "none" = keep them)
#   and `clock_control` ("base" = lock clocks to base, "none" = let the GPU boost) do to
#   the *same* kernels;
# - that nsight-python's defaults (`cache_control="all"`, `clock_control="none"`) are not
#   the plain `ncu` defaults (`--cache-control all --clock-control base`);
# - how to measure the clock a kernel really ran at
#   (`gpc__cycles_elapsed.avg.per_second`) -- `ComputeClock` is only the rating;
# - how the same measurement runs without nsight-python's Nsight Compute backend (the `ncu`
#   command line on the same kernels file, read back into nsight-python's own table), and
#   how to flush the L2 by hand under CUPTI;
# - which ceiling to set a memory stream against: the datasheet's rounded bandwidth or
#   the device's own (memory clock × bus width), and what the DRAM counters add.
#
# The experiment streams through a vector (`y = x * 2`) at two sizes chosen from **your
# GPU's L2 size**: one that fits in L2 (a quarter of it) and one far above (8×); an fp16
# matmul is the compute-bound contrast.
#
# | section | needs |
# |---|---|
# | 0. the defaults, read from the tools | nothing (an `ncu` for its half) |
# | 1. cache and clock control, measured | the Nsight Compute backend, or any `ncu` (command line) |
# | 2. warm vs cold L2 by hand | any backend (CUPTI too) |

# %%
{{SETUP}}

# %%
import inspect
import re
import subprocess

import matplotlib.pyplot as plt
import nsight
import pandas as pd

from nspy_tutorial import ncu_cli

SILENT = nsight.VerbosityLevel.SILENT  # every profile here is silent; notebook 02 shows nsight's output
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
DRAM_RATE, DRAM_WRITE = "dram__bytes.sum.per_second", "dram__bytes_write.sum"  # what the DRAM really moved
SMALL = LARGE = None
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    SMALL, LARGE = L2 // 4 // 4, 8 * L2 // 4  # float32 elements: L2/4 and 8 x L2 bytes
    print(f"L2 = {L2 / 2**20:.0f} MiB -> small vector {4 * SMALL / 2**20:.1f} MiB, large {4 * LARGE / 2**20:.0f} MiB")


def dram_peak_gbs(facts) -> float | None:
    """The device's own theoretical DRAM bandwidth: 2 transfers per memory clock x bus width.
    NVML gives both numbers; None if it did not."""
    if facts is None or not facts.max_mem_clock_mhz or not facts.memory_bus_width_bits:
        return None
    return 2 * facts.max_mem_clock_mhz * 1e6 * facts.memory_bus_width_bits / 8 / 1e9


PEAK_GBS = dram_peak_gbs(ENV.facts)
SHEET_GBS = ENV.datasheet.mem_bandwidth_gbs.value if ENV.datasheet else None

# %% [markdown]
# The kernels, written once. `%%writefile` puts them in `cache_kernels.py` (in this
# notebook's work folder); the notebook imports that file, and the `ncu` command line runs
# the same file. `stream_and_matmul` opens three annotations in one call -- the stream at
# both sizes, then the matmul -- so one profile (one `ncu` process) measures all three.
# Each input is written just before its annotation: what of it fits in L2 is still there
# when the kernel starts, unless the tool flushes the caches.

# %% writefile cache_kernels.py
"""Notebook 04's kernels: the stream y = x * 2 at two sizes, an fp16 matmul, an L2 flush by hand."""
import nsight
import torch

MATMUL_N = 4096  # an fp16 4096-cube matmul: compute-bound on every GPU the tutorial targets


def stream_and_matmul(small: int, large: int) -> None:
    """Section 1: three annotations in one call, so that one profile measures all three."""
    for name, n in (("x * 2, fits in L2", small), ("x * 2, 8x L2", large)):
        x = torch.randn(n, device="cuda")  # just written: what of it fits in L2 is still there
        with nsight.annotate(name):
            _ = x * 2.0
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.float16)
    with nsight.annotate("fp16 matmul"):
        _ = a @ a


def evict_l2() -> None:
    """Write a scratch buffer twice the L2's size: whatever was in L2 is pushed out."""
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    torch.empty(2 * l2_bytes // 4, device="cuda").fill_(1.0)


def stream_after(n: int, flush: bool) -> None:
    """Section 2: the stream with its input warm (just written) or evicted by hand."""
    x = torch.randn(n, device="cuda")
    if flush:
        evict_l2()  # not measured: it is outside the annotation
    with nsight.annotate("x * 2"):
        _ = x * 2.0


if __name__ == "__main__":  # what the ncu command line runs (the printed command shows it)
    from nspy_tutorial import ncu_cli

    ncu_cli.replay(globals())

# %%
import cache_kernels as ck

# %% [markdown]
# ## 0. The defaults, read from the tools themselves
#
# Before measuring anything: what does each tool do when you say nothing? nsight-python's
# defaults are in its decorator's signature; the `ncu` command line states its own in
# `ncu --help`. And the CUPTI collector does not even accept the two options.

# %%
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
# ## 1. Cache and clock control, one change at a time
#
# Three profiles of the same call: nsight-python's defaults, then the caches kept warm
# (`cache_control="none"`), then the clocks locked to base (`clock_control="base"`, the `ncu`
# command line's default). Each differs from the first in one setting only. Besides the
# duration we collect `gpc__cycles_elapsed.avg.per_second` -- GPU cycles elapsed divided by
# the kernel's duration, i.e. **the clock the kernel actually ran at** -- and
# `dram__bytes.sum.per_second` and `dram__bytes_write.sum`: the rate at which the DRAM
# really moved bytes, and how much it wrote.
#
# One cell decides who measures. With nsight-python's Nsight Compute backend (Colab after
# notebook 01) the decorator runs the function in this process. With an older `ncu` that
# backend cannot load, so `ncu_cli.nsight_table` runs `cache_kernels.py` under the `ncu`
# command line with the same settings, one `ncu` run per combination (each command is
# printed), and reads each report back with nsight-python's own code. Either way the result
# is nsight-python's `to_dataframe()` table, and everything below reads that one table. The
# matmul may be several cuBLAS kernels: `combine_kernel_metrics=add` sums them, right for
# its time, meaningless for its rates, so only the matmul's time is read. Three runs per profile: under replay each run
# repeats the kernel under the same rules; the table prints each time's spread (RSD) beside
# it, to hold against the effects compared.
#
# What to look for:
# - **cache**: the stream that fits in L2 is faster with warm caches; the 8× stream is not,
#   since most of its input is in DRAM either way;
# - **clock**: the measured SM clock moves with `clock_control` while `ComputeClock` stays
#   the rating; the compute-bound matmul slows down more than the memory-bound stream;
# - **bandwidth**: the 8× stream's rate, computed from the 8n bytes it reads and writes,
#   against the datasheet and against the device's own peak, **2 transfers per memory clock ×
#   bus width** (both reported by NVML). At the end of the kernel the last writes may still
#   sit in L2 (write-back), so the DRAM counters can show fewer bytes written than the
#   kernel wrote; a rate above the clock-derived peak must be explained by them, or the
#   check fails.

# %%
def add(a: float, b: float) -> float:
    """combine_kernel_metrics: the kernels of one run, summed (right for time)."""
    return a + b


STREAMS = {"x * 2, fits in L2": "small", "x * 2, 8x L2": "large"}  # annotation -> the argument sizing it
MATMUL = "fp16 matmul"


def per_configuration(tables: dict) -> pd.DataFrame:
    """One row per (cache_control, clock_control) and annotation, from nsight-python's tables:
    time; for the streams, GB/s by the 8n bytes the kernel moves, what the DRAM moved, the SM clock."""
    rows = []
    for (cache, clock), table in tables.items():
        value = [ncu_cli.to_base_units(v, u) for v, u in zip(table.AvgValue, table.Unit)]  # s, byte, byte/s, Hz
        m = table.assign(value=value).pivot_table(index="Annotation", columns="Metric", values="value")
        for annotation, r in m.iterrows():
            rsd = table[(table.Annotation == annotation) & (table.Metric == TIME)].RelativeStdDevPct.iloc[0]
            row = {"cache_control": cache, "clock_control": clock, "kernel": annotation, "time_us": r[TIME] * 1e6,
                   "time RSD %": rsd}
            if annotation in STREAMS:
                n = int(table.loc[table.Annotation == annotation, STREAMS[annotation]].iloc[0])
                row.update({"GB/s": 8 * n / r[TIME] / 1e9, "DRAM GB/s": r[DRAM_RATE] / 1e9,
                            "DRAM wrote / 4n": r[DRAM_WRITE] / (4 * n), "SM MHz": r[SM_HZ] / 1e6})
            rows.append(row)
    return pd.DataFrame(rows)


def slowdown(table: pd.DataFrame, kernel: str, cache: str, clock: str) -> float:
    """Time under (cache, clock) over time under nsight-python's defaults (all, none)."""
    t = table[table.kernel == kernel].set_index(["cache_control", "clock_control"]).time_us
    return t[(cache, clock)] / t[("all", "none")]


def check_cache(table: pd.DataFrame) -> str:
    """Flushed over warm time, per stream size."""
    small, large = (1 / slowdown(table, kernel, "none", "none") for kernel in STREAMS)  # (all, none) / (none, none)
    nt.claim(small > 1.1 and large < 1.1, "a warm L2 beats a flushed one only for the size that fits in L2",
             f"flushed/warm time: {small:.2f}x (fits), {large:.2f}x (8x L2)")
    return f"flushed/warm {small:.2f}x (fits in L2), {large:.2f}x (8x L2)"


def check_clock(table: pd.DataFrame, rated_khz: set) -> str:
    """The measured SM clock against the rating, and who feels the lock."""
    stream = table[table.kernel.isin(list(STREAMS))]
    free, locked = (stream[stream.clock_control == c]["SM MHz"].mean() for c in ("none", "base"))
    print(f"  ComputeClock in every row: {sorted(k // 1000 for k in rated_khz)} MHz (the rating); measured SM clock: "
          f"{free:,.0f} MHz free, {locked:,.0f} MHz locked to base")
    nt.claim(abs(free - locked) > 0.01 * free, "the SM clock the kernels ran at moves with clock_control",
             f"{free:,.0f} vs {locked:,.0f} MHz")
    slow_mm, slow_stream = slowdown(table, MATMUL, "all", "base"), slowdown(table, "x * 2, 8x L2", "all", "base")
    print(f"  locked/free time: fp16 matmul {slow_mm:.2f}x, 8x-L2 stream {slow_stream:.2f}x "
          f"(clock ratio {free / locked:.2f}x)")
    nt.claim(slow_mm > slow_stream, "the compute-bound matmul feels the clock lock more than the memory-bound stream",
             f"{slow_mm:.2f}x vs {slow_stream:.2f}x")
    return f"clock {free:,.0f}->{locked:,.0f} MHz slows matmul {slow_mm:.2f}x, stream {slow_stream:.2f}x"


def check_bandwidth(table: pd.DataFrame, peak_gbs: float | None, sheet_gbs: float | None) -> str:
    """The 8x-L2 stream against the datasheet and the device's clock-derived DRAM peak."""
    big = table[table.kernel == "x * 2, 8x L2"]
    fastest = big.loc[big["GB/s"].idxmax()]
    share = fastest["DRAM wrote / 4n"]
    print(f"  8x L2 stream, fastest ({fastest.cache_control}/{fastest.clock_control}): {fastest['GB/s']:,.0f} GB/s by "
          f"the bytes the kernel moves, {fastest['DRAM GB/s']:,.0f} GB/s by the bytes the DRAM moved; the DRAM wrote "
          f"{share:.3f} of what the kernel wrote" + (" (the rest was still in L2 when it ended)" if share < 1 else ""))
    sheet = f"{sheet_gbs:,.0f} GB/s on the datasheet" if sheet_gbs else "datasheet unknown"
    if peak_gbs is None:
        print("  (NVML did not report the memory clock and bus width: no clock-derived peak)")
        return f"8x L2 stream up to {fastest['GB/s']:,.0f} GB/s; {sheet}"
    print(f"  DRAM peak from the device's memory clock and bus width: {peak_gbs:,.0f} GB/s; {sheet}")
    if sheet_gbs and fastest["GB/s"] > sheet_gbs:
        print(f"  -> above the datasheet's figure, which is {100 * sheet_gbs / peak_gbs:.1f}% of the clock-derived "
              "peak: the datasheet rounds down")
    nt.claim((big["DRAM GB/s"] <= peak_gbs).all(), "the DRAM never moved more bytes per second than its clock and "
             "bus width allow", f"max {big['DRAM GB/s'].max():,.0f} vs {peak_gbs:,.0f} GB/s")
    above = big[big["GB/s"] > peak_gbs]
    if len(above):  # a rate above the peak is a finding: the data must explain it, or this fails
        nt.claim((above["DRAM wrote / 4n"] < 1).all(), "a stream rate above the DRAM peak is explained: part of its "
                 "output never reached DRAM during the kernel", above[["GB/s", "DRAM wrote / 4n"]].to_string())
    return f"8x L2 stream {fastest['GB/s']:,.0f} GB/s ({fastest['DRAM GB/s']:,.0f} by DRAM counters) vs peak " \
           f"{peak_gbs:,.0f} from clocks, {sheet}"


def plot_times(table: pd.DataFrame) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, kernel in zip(axes, [*STREAMS, MATMUL]):
        part = table[table.kernel == kernel]
        ax.bar([f"cache={c}\nclock={k}" for c, k in zip(part.cache_control, part.clock_control)], part.time_us,
               color=["C0", "C1", "C2"])
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(kernel)
        ax.set_ylabel("us")
    plt.tight_layout()
    plt.show()

# %%
COMBINATIONS = [("all", "none"), ("none", "none"), ("all", "base")]  # defaults; warm caches; locked clocks
SETTINGS = dict(configs=[(SMALL, LARGE)], runs=3, metrics=[TIME, SM_HZ, DRAM_RATE, DRAM_WRITE],
                combine_kernel_metrics=add, thermal_mode="off", verbosity=SILENT)

with nt.section("1. cache_control and clock_control, measured") as s:
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend (Colab after notebook 01): three profiles
        tables, source = {(cache, clock): nsight.analyze.kernel(cache_control=cache, clock_control=clock, **SETTINGS)(
            ck.stream_and_matmul)().to_dataframe() for cache, clock in COMBINATIONS}, "ncu"
    else:  # an older ncu: the ncu command line on the same file, one run per combination
        ENV.require("ncu-cli")
        tables, source = {(cache, clock): ncu_cli.nsight_table(
            "cache_kernels.py", ck.stream_and_matmul, ncu=ENV.ncu_path, cache_control=cache, clock_control=clock,
            report=f"stream_and_matmul-{cache}-{clock}.ncu-rep", **SETTINGS) for cache, clock in COMBINATIONS}, "ncu-cli"
    for cache, clock in COMBINATIONS:
        print(nt.rules(source, cache_control=cache, clock_control=clock))
    TABLE = per_configuration(tables)
    print(TABLE.to_string(index=False, na_rep="", float_format=lambda v: f"{v:,.2f}"))
    plot_times(TABLE)
    rated = {int(k) for t in tables.values() for k in t.ComputeClock}
    s.result = f"{source}: " + "; ".join([check_cache(TABLE), check_clock(TABLE, rated),
                                          check_bandwidth(TABLE, PEAK_GBS, SHEET_GBS)])

# %% [markdown]
# The matmul is the contrast: a memory-bound stream mostly waits on DRAM, so it feels the
# SM clock less than a compute-bound matmul, which slows down by up to the clock ratio.
# (Whether "base" also lowers the memory clock depends on the GPU.) Which of the two your
# kernel is decides how much `clock_control` matters for it -- notebook 06 measures that
# boundary.
#
# ## 2. Warm vs cold L2 by hand (any backend, CUPTI included)
#
# The CUPTI backend records each kernel once as it runs: no replay, **no cache
# flush, no clock control** -- `cache_control` and `clock_control` are ignored there.
# You can still measure a cold cache honestly: overwrite the L2 yourself *before*
# the annotation (`ck.evict_l2` writes a scratch buffer twice the L2 size). That write
# is not measured (it is outside the annotation), but it evicts `x`. Under the Nsight
# Compute backend, `cache_control="none"` keeps the tool from flushing for us.
#
# Note what "warm" means here: `x` was just written by `torch.randn`, so whatever part
# of it fits in L2 is still there when `x * 2` runs. Twenty runs per configuration:
# without replay each run is one real launch, and the check compares means.

# %%
with nt.section("2. Warm vs cold L2 by hand") as s:
    ENV.require("profiler")
    configs = [(SMALL, False), (SMALL, True), (LARGE, False), (LARGE, True)]
    by_hand = nsight.analyze.kernel(configs=configs, runs=20, cache_control="none", thermal_mode="off",
                                    verbosity=SILENT)(ck.stream_after)
    t = by_hand().to_dataframe().set_index(["n", "flush"]).AvgValue  # ns
    sp_small, sp_large = t[(SMALL, True)] / t[(SMALL, False)], t[(LARGE, True)] / t[(LARGE, False)]
    print(nt.rules(ENV.backend, cache_control="none"))
    for n, name in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
        print(f"  {name:10s}: warm {t[(n, False)] / 1e3:8.1f} us, flushed {t[(n, True)] / 1e3:8.1f} us "
              f"-> {2 * 4 * n / t[(n, False)]:7,.0f} vs {2 * 4 * n / t[(n, True)]:7,.0f} GB/s")
    if PEAK_GBS:
        print(f"  (the DRAM peak from this device's clocks is {PEAK_GBS:,.0f} GB/s; for the size that fits, "
              "the warm rate is L2 bandwidth, not DRAM)")
    nt.claim(sp_small > 1.1 and sp_large < 1.1, "a warm L2 beats a flushed one only for the size that fits in L2",
             f"flushed/warm: {sp_small:.2f}x (fits), {sp_large:.2f}x (8x L2)")
    s.result = f"{ENV.backend}: flushed/warm time {sp_small:.2f}x (fits in L2), {sp_large:.2f}x (8x L2)"

# %% [markdown]
# ## Takeaways
#
# - Decide cache and clock control on purpose. nsight-python flushes caches
#   (`"all"`) and leaves clocks free (`"none"`); the `ncu` command line flushes and locks
#   to base. The same kernel can differ a lot between the two.
# - A cold-cache number is reproducible; a warm-cache number is what the kernel sees
#   inside a real model when its input was just produced. Know which you report.
# - Measure the clock (`gpc__cycles_elapsed.avg.per_second`); `ComputeClock` is the
#   card's rating and never moves.
# - No Nsight Compute backend? The `ncu` CLI on the same kernels file gives the same
#   controls and nsight-python's table, and under CUPTI you can flush the L2 yourself --
#   but you cannot lock clocks there.
# - Bandwidth has two ceilings: the datasheet's rounded figure, and the device's own,
#   2 × memory clock × bus width. Set a stream against the second, and read the DRAM
#   counters when a number looks too good: writes can still be in L2 when the kernel ends.
#
# ## Try it
#
# - In `cache_kernels.py`, make `evict_l2`'s buffer `l2_bytes // 4 // 4` elements (a
#   quarter of the L2) instead of twice its size, and run section 2 again: the "flushed"
#   time of the small vector moves back toward the warm one -- a partial flush.
# - In `stream_and_matmul`, replace `_ = x * 2.0` by `x.mul_(2.0)` (in place: the same
#   bytes, written back where they were read) and compare the 8×L2 rate and the share of
#   its writes that reached DRAM during the kernel.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`: `cache_control`, `clock_control`, `metrics`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [Tools: what CUPTI ignores](https://docs.nvidia.com/nsight-python/tools.html) ·
# [Nsight Compute: cache and clock control](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#cache-control) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary();
