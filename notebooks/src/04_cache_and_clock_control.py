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
#   (`gpc__cycles_elapsed.avg.per_second`) -- `ComputeClock` is only the rating -- that
#   `clock_control="base"` does not pin one frequency, and how to set a compute-bound kernel
#   against the datasheet peak *at the clock it ran at*;
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
#
# On Colab each notebook runs in a fresh runtime of its own: the setup cell below installs what
# this notebook needs (nothing has to run before it), and a second run of it skips what is there.

# %%
{{SETUP}}

# %%
import glob
import inspect
import os
import re
import subprocess

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
from scipy import stats

from nspy_tutorial import ncu_cli

SILENT = (
    nsight.VerbosityLevel.SILENT
)  # every profile here is silent; notebook 02 shows nsight's output
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
DRAM_RATE, DRAM_WRITE = (
    "dram__bytes.sum.per_second",
    "dram__bytes_write.sum",
)  # what the DRAM really moved
SMALL = LARGE = None
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    SMALL, LARGE = L2 // 4 // 4, 8 * L2 // 4  # float32 elements: L2/4 and 8 x L2 bytes
    print(
        f"L2 = {L2 / 2**20:.0f} MiB -> small vector {4 * SMALL / 2**20:.1f} MiB, large {4 * LARGE / 2**20:.0f} MiB"
    )


def dram_peak_gbs(facts) -> float | None:
    """The device's own theoretical DRAM bandwidth: 2 transfers per memory clock x bus width.
    NVML gives both numbers; None if it did not."""
    if facts is None or not facts.max_mem_clock_mhz or not facts.memory_bus_width_bits:
        return None
    return 2 * facts.max_mem_clock_mhz * 1e6 * facts.memory_bus_width_bits / 8 / 1e9


PEAK_GBS = dram_peak_gbs(ENV.facts)
SHEET_GBS = ENV.datasheet.mem_bandwidth_gbs.value if ENV.datasheet else None
# the fp16 datasheet peak and the SM clock the datasheet states it at (not always the maximum: the datasheet
# states an H100 SXM's tensor peaks at 1830 MHz): the peak at a clock f is peak x f / that clock
FP16 = (
    (ENV.datasheet.fp16_tflops.value, ENV.datasheet.peak_clock_mhz("fp16"))
    if ENV.datasheet
    else (None, None)
)

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
    nt.claim(
        nsp == {"cache_control": "all", "clock_control": "none"},
        "nsight-python flushes caches and leaves clocks free by default",
    )
    cupti_params = inspect.signature(nsight.collection.cupti.CUPTICollector.__init__).parameters
    nt.claim(
        "cache_control" not in cupti_params and "clock_control" not in cupti_params,
        "the CUPTI collector takes neither option: under CUPTI they are ignored",
    )
    line = f"nsight-python cache={nsp['cache_control']}, clock={nsp['clock_control']}"
    if ENV.ncu_path:
        helptext = subprocess.run([ENV.ncu_path, "--help"], capture_output=True, text=True).stdout
        cli = {
            k: re.search(rf"--{k}\s+arg\s+\(=(\w+)\)", helptext)
            for k in ("cache-control", "clock-control")
        }
        if all(cli.values()):
            cli = {k: m.group(1) for k, m in cli.items()}
            print(f"  ncu --help:    {cli}")
            nt.claim(
                cli == {"cache-control": "all", "clock-control": "base"},
                "the ncu command line flushes caches and locks clocks to base by default",
            )
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
# the kernel's duration, i.e. **the clock the kernel actually ran at**, read for every kernel,
# the matmul included -- and `dram__bytes.sum.per_second` and `dram__bytes_write.sum`: the
# rate at which the DRAM really moved bytes, and how much it wrote (rate × time − written =
# what it read).
#
# One cell decides who measures. With nsight-python's Nsight Compute backend the decorator
# runs the function in this process. With an older `ncu` that backend cannot load, so
# `ncu_cli.nsight_table` runs `cache_kernels.py` under the `ncu` command line with the same
# settings, one `ncu` run per combination (each command is printed), and reads each report
# back with nsight-python's own code. Either way the result is nsight-python's
# `to_dataframe()` table, and everything below reads that one table. The matmul may be
# several cuBLAS kernels: `combine_kernel_metrics=per_run` gets each kernel's metrics in the
# order asked for and combines a run's kernels as one kernel would read: times and bytes
# add, the two rates (SM cycles and DRAM bytes per second) are weighted by each kernel's
# time; the table says how many kernels there were. Three runs per profile: under replay
# each run repeats the kernel under the same rules; the table prints each time's spread
# (RSD) beside it, to hold against the effects compared.
#
# What to look for:
# - **cache**: the stream that fits in L2 is faster with warm caches, and the DRAM counters
#   say why: warm, its input came from L2 (the DRAM read next to none of it); flushed, from
#   DRAM. The 8× stream is not faster, since most of its input is in DRAM either way;
# - **clock**: the measured SM clock moves with `clock_control` while `ComputeClock` stays
#   the rating. `clock_control="base"` asks for the base clock; it does not pin one
#   frequency -- the cell prints each kernel's own clock under it, and a heavy kernel can run
#   at a lower one than a light kernel beside it. The compute-bound matmul's time follows its
#   own clock ratio; the memory-bound stream hardly moves;
# - **peak at the clock**: the datasheet's fp16 peak is stated at one SM clock (a datasheet
#   fact the tutorial's table records); a kernel that ran at a lower clock can reach at most
#   `peak × its clock / that clock`. The cell prints the matmul's TFLOP/s as % of the
#   datasheet and as % of the peak at the clock it ran at, and fails if it beats the latter;
# - **bandwidth**: the 8× stream's rate, computed from the 8n bytes it reads and writes,
#   against the datasheet and against the device's own peak, **2 transfers per memory clock ×
#   bus width** (both reported by NVML). At the end of the kernel the last writes may still
#   sit in L2 (write-back), so the DRAM counters can show fewer bytes written than the
#   kernel wrote; a rate above the clock-derived peak must be explained by them, or the
#   check fails.


# %%
def per_run(x, y):
    """combine_kernel_metrics, on two kernels' [time, SM Hz, DRAM byte/s, DRAM bytes] of one run: times and bytes
    add; the rates are weighted by time (cycles / time, bytes / time), so the run reads as one kernel."""
    out = x + y
    out[1:3] = (x[1:3] * x[0] + y[1:3] * y[0]) / out[0]
    return out


STREAMS = {
    "x * 2, fits in L2": "small",
    "x * 2, 8x L2": "large",
}  # annotation -> the argument sizing it
MATMUL = "fp16 matmul"


def per_configuration(tables: dict, matmul_n: int) -> pd.DataFrame:
    """One row per (cache_control, clock_control) and annotation, from nsight-python's tables: time and the SM
    clock it ran at (a combined row's, time-weighted by per_run); for the streams, GB/s by the 8n bytes the
    kernel moves and what the DRAM read and wrote; for the matmul, TFLOP/s."""
    rows = []
    for (cache, clock), table in tables.items():
        value = [
            ncu_cli.to_base_units(v, u) for v, u in zip(table.AvgValue, table.Unit)
        ]  # s, byte, byte/s, Hz
        m = table.assign(value=value).pivot_table(
            index="Annotation", columns="Metric", values="value"
        )
        for annotation, r in m.iterrows():
            first = table[(table.Annotation == annotation) & (table.Metric == TIME)].iloc[0]
            row = {
                "cache_control": cache,
                "clock_control": clock,
                "kernel": annotation,
                "time_us": r[TIME] * 1e6,
                "time RSD %": first.RelativeStdDevPct,
                "kernels": first.Kernel.count("|") + 1,
                "SM MHz": r[SM_HZ] / 1e6,
            }
            if annotation in STREAMS:
                n = int(first[STREAMS[annotation]])
                row.update(
                    {
                        "GB/s": 8 * n / r[TIME] / 1e9,
                        "DRAM GB/s": r[DRAM_RATE] / 1e9,
                        "DRAM read / 4n": (r[DRAM_RATE] * r[TIME] - r[DRAM_WRITE]) / (4 * n),
                        "DRAM wrote / 4n": r[DRAM_WRITE] / (4 * n),
                    }
                )
            else:
                row["TFLOP/s"] = 2 * matmul_n**3 / r[TIME] / 1e12
            rows.append(row)
    return pd.DataFrame(rows)


def slowdown(table: pd.DataFrame, kernel: str, cache: str, clock: str) -> float:
    """Time under (cache, clock) over time under nsight-python's defaults (all, none)."""
    t = table[table.kernel == kernel].set_index(["cache_control", "clock_control"]).time_us
    return t[(cache, clock)] / t[("all", "none")]


def check_cache(table: pd.DataFrame) -> str:
    """Flushed over warm time per stream size, and where the small stream's input came from (DRAM counters)."""
    small, large = (
        1 / slowdown(table, kernel, "none", "none") for kernel in STREAMS
    )  # (all, none) / (none, none)
    nt.claim(
        small > 1.1 and large < 1.1,
        "a warm L2 beats a flushed one only for the size that fits in L2",
        f"flushed/warm time: {small:.2f}x (fits), {large:.2f}x (8x L2)",
    )
    fits, eight = STREAMS
    free = table[table.clock_control == "none"].set_index(["kernel", "cache_control"])
    warm, cold, big = free.loc[(fits, "none")], free.loc[(fits, "all")], free.loc[(eight, "none")]
    nt.claim(
        warm["DRAM read / 4n"] < 0.1 and cold["DRAM read / 4n"] > 0.9,
        "warm, the small stream's input came "
        "from L2 (the DRAM read under a tenth of it); flushed, from DRAM (over nine tenths)",
        f"DRAM read {warm['DRAM read / 4n']:.3f} and {cold['DRAM read / 4n']:.3f} of the input",
    )
    print(
        f"  warm, the small stream lasts {warm.time_us:.1f} us and moves {warm['GB/s']:,.0f} GB/s out of L2 "
        f"({warm['GB/s'] / big['GB/s']:.2f}x the 8x stream's rate out of DRAM): a kernel this short spends a share "
        "of its time on its launch and the tail of its last blocks, so its rate is a lower bound on the L2's "
        "bandwidth, not a measure of it"
    )
    return f"flushed/warm {small:.2f}x (fits in L2, served from L2 when warm), {large:.2f}x (8x L2)"


def check_clock(table: pd.DataFrame, rated_khz: set) -> str:
    """Each kernel's own SM clock under both clock_control settings (caches flushed), and who feels the lock."""
    mhz = table[table.cache_control == "all"].pivot(
        index="kernel", columns="clock_control", values="SM MHz"
    )
    print(
        f"  ComputeClock in every row: {sorted(k // 1000 for k in rated_khz)} MHz (the rating); the SM clock each "
        "kernel ran at, MHz:\n" + mhz[["none", "base"]].to_string(float_format="{:,.0f}".format)
    )
    nt.claim(
        (abs(mhz.none - mhz.base) > 0.01 * mhz.none).all(),
        "every kernel's SM clock moves with clock_control",
        ", ".join(f"{k}: {r.none:,.0f} vs {r.base:,.0f} MHz" for k, r in mhz.iterrows()),
    )
    apart = mhz.base.max() / mhz.base.min() - 1
    pinned = "one frequency" if apart < 0.02 else "not one frequency"
    print(
        f"  under clock_control='base' the kernels' clocks were {apart:.1%} apart ({mhz.base.idxmin()} lowest): "
        + ("one frequency, within 2 %" if apart < 0.02 else "'base' did not pin one frequency")
    )
    eight = list(STREAMS)[1]
    slow_mm, slow_stream = (
        slowdown(table, MATMUL, "all", "base"),
        slowdown(table, eight, "all", "base"),
    )
    ratio_mm, ratio_stream = mhz.none[MATMUL] / mhz.base[MATMUL], mhz.none[eight] / mhz.base[eight]
    print(
        f"  locked/free time: fp16 matmul {slow_mm:.2f}x (its own clock fell {ratio_mm:.2f}x), 8x-L2 stream "
        f"{slow_stream:.2f}x (its clock fell {ratio_stream:.2f}x)"
    )
    nt.claim(
        slow_mm > slow_stream,
        "the compute-bound matmul feels the clock lock more than the memory-bound stream",
        f"{slow_mm:.2f}x vs {slow_stream:.2f}x",
    )
    nt.claim(
        abs(slow_mm / ratio_mm - 1) < 0.1,
        "the compute-bound matmul's time follows its own clock (locked/free "
        "time within 10 % of its free/locked clock)",
        f"{slow_mm:.2f}x vs {ratio_mm:.2f}x",
    )
    return (
        f"matmul clock {mhz.none[MATMUL]:,.0f}->{mhz.base[MATMUL]:,.0f} MHz slows it {slow_mm:.2f}x, stream "
        f"{slow_stream:.2f}x; under base: {pinned}"
    )


def check_peak(table: pd.DataFrame, peak_tflops: float | None, sheet_mhz: float | None) -> str:
    """The matmul's TFLOP/s as % of the fp16 datasheet peak and as % of that peak at the clock it ran at."""
    mm = table[table.kernel == MATMUL].copy()
    if not peak_tflops:
        print("  (this GPU's fp16 peak is not in the datasheet table: no % of peak)")
        return f"fp16 matmul up to {mm['TFLOP/s'].max():,.0f} TFLOP/s, datasheet peak unknown"
    mm["% datasheet"] = 100 * mm["TFLOP/s"] / peak_tflops
    mm["% at its clock"] = (
        100 * mm["TFLOP/s"] / (peak_tflops * mm["SM MHz"] / sheet_mhz) if sheet_mhz else np.nan
    )
    print(
        f"  fp16 datasheet peak {peak_tflops:g} TFLOP/s, stated at "
        + (
            f"{sheet_mhz:,.0f} MHz; at the clock f a kernel ran at: peak x f / {sheet_mhz:,.0f}"
            if sheet_mhz
            else "a clock the datasheet table does not give: no % at the kernel's clock"
        )
    )
    print(
        mm[
            [
                "cache_control",
                "clock_control",
                "kernels",
                "SM MHz",
                "TFLOP/s",
                "% datasheet",
                "% at its clock",
            ]
        ].to_string(index=False, float_format="{:,.1f}".format)
    )
    best = mm.loc[mm["TFLOP/s"].idxmax()]
    if sheet_mhz:
        nt.claim(
            (mm["% at its clock"] <= 100).all(),
            "the matmul never beats the fp16 peak at the clock it ran at",
            f"up to {mm['% at its clock'].max():.1f}%",
        )
    return (
        f"fp16 matmul {best['TFLOP/s']:,.0f} TFLOP/s = {best['% datasheet']:.0f}% of the datasheet peak"
        + (
            f", {best['% at its clock']:.0f}% of it at its {best['SM MHz']:,.0f} MHz"
            if sheet_mhz
            else ""
        )
    )


def check_bandwidth(table: pd.DataFrame, peak_gbs: float | None, sheet_gbs: float | None) -> str:
    """The 8x-L2 stream against the datasheet and the device's clock-derived DRAM peak."""
    big = table[table.kernel == "x * 2, 8x L2"]
    fastest = big.loc[big["GB/s"].idxmax()]
    share = fastest["DRAM wrote / 4n"]
    print(
        f"  8x L2 stream, fastest ({fastest.cache_control}/{fastest.clock_control}): {fastest['GB/s']:,.0f} GB/s by "
        f"the bytes the kernel moves, {fastest['DRAM GB/s']:,.0f} GB/s by the bytes the DRAM moved; the DRAM wrote "
        f"{share:.3f} of what the kernel wrote"
        + (" (the rest was still in L2 when it ended)" if share < 1 else "")
    )
    sheet = f"{sheet_gbs:,.0f} GB/s on the datasheet" if sheet_gbs else "datasheet unknown"
    if peak_gbs is None:
        print("  (NVML did not report the memory clock and bus width: no clock-derived peak)")
        return f"8x L2 stream up to {fastest['GB/s']:,.0f} GB/s; {sheet}"
    print(
        f"  DRAM peak from the device's memory clock and bus width: {peak_gbs:,.0f} GB/s; {sheet}"
    )
    if sheet_gbs and fastest["GB/s"] > sheet_gbs:
        print(
            f"  -> above the datasheet's figure, which is {100 * sheet_gbs / peak_gbs:.1f}% of the clock-derived "
            "peak: the datasheet rounds down"
        )
    nt.claim(
        (big["DRAM GB/s"] <= peak_gbs).all(),
        "the DRAM never moved more bytes per second than its clock and bus width allow",
        f"max {big['DRAM GB/s'].max():,.0f} vs {peak_gbs:,.0f} GB/s",
    )
    above = big[big["GB/s"] > peak_gbs]
    if len(above):  # a rate above the peak is a finding: the data must explain it, or this fails
        nt.claim(
            (above["DRAM wrote / 4n"] < 1).all(),
            "a stream rate above the DRAM peak is explained: part of its "
            "output never reached DRAM during the kernel",
            above[["GB/s", "DRAM wrote / 4n"]].to_string(),
        )
    return (
        f"8x L2 stream {fastest['GB/s']:,.0f} GB/s ({fastest['DRAM GB/s']:,.0f} by DRAM counters) vs peak "
        f"{peak_gbs:,.0f} from clocks, {sheet}"
    )


def plot_times(table: pd.DataFrame) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, kernel in zip(axes, [*STREAMS, MATMUL]):
        part = table[table.kernel == kernel]
        ax.bar(
            [f"cache={c}\nclock={k}" for c, k in zip(part.cache_control, part.clock_control)],
            part.time_us,
            color=["C0", "C1", "C2"],
        )
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(kernel)
        ax.set_ylabel("us")
    plt.tight_layout()
    plt.show()


# %%
COMBINATIONS = [
    ("all", "none"),
    ("none", "none"),
    ("all", "base"),
]  # defaults; warm caches; locked clocks
SETTINGS = dict(
    configs=[(SMALL, LARGE)],
    runs=3,
    metrics=[TIME, SM_HZ, DRAM_RATE, DRAM_WRITE],
    combine_kernel_metrics=per_run,
    thermal_mode="off",
    verbosity=SILENT,
)

with nt.section("1. cache_control and clock_control, measured") as s:
    if (
        ENV.backend == "ncu"
    ):  # nsight-python's Nsight Compute backend: three profiles, in this process
        tables, source = (
            {
                (cache, clock): nsight.analyze.kernel(
                    cache_control=cache, clock_control=clock, **SETTINGS
                )(ck.stream_and_matmul)().to_dataframe()
                for cache, clock in COMBINATIONS
            },
            "ncu",
        )
    else:  # an older ncu: the ncu command line on the same file, one run per combination
        ENV.require("ncu-cli")
        tables, source = (
            {
                (cache, clock): ncu_cli.nsight_table(
                    "cache_kernels.py",
                    ck.stream_and_matmul,
                    ncu=ENV.ncu_path,
                    cache_control=cache,
                    clock_control=clock,
                    report=f"stream_and_matmul-{cache}-{clock}.ncu-rep",
                    **SETTINGS,
                )
                for cache, clock in COMBINATIONS
            },
            "ncu-cli",
        )
    for cache, clock in COMBINATIONS:
        print(nt.rules(source, cache_control=cache, clock_control=clock))
    TABLE = per_configuration(tables, ck.MATMUL_N)
    print(TABLE.to_string(index=False, na_rep="", float_format=lambda v: f"{v:,.2f}"))
    plot_times(TABLE)
    rated = {int(k) for t in tables.values() for k in t.ComputeClock}
    s.result = f"{source}: " + "; ".join(
        [
            check_cache(TABLE),
            check_clock(TABLE, rated),
            check_peak(TABLE, *FP16),
            check_bandwidth(TABLE, PEAK_GBS, SHEET_GBS),
        ]
    )

# %% [markdown]
# The matmul is the contrast: a memory-bound stream mostly waits on DRAM, so it feels the
# SM clock less than a compute-bound matmul, whose time follows the clock *it* ran at -- read
# from its own row, since under the same setting a heavy kernel and a light one need not run
# at the same clock. (Whether "base" also lowers the memory clock depends on the GPU.) Which
# of the two your kernel is decides how much `clock_control` matters for it -- notebook 06
# measures that boundary. And a % of peak means little until the clock is known: the gap
# between a matmul and the datasheet is partly the clock it ran at, partly the kernel.
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
# without replay each run is one real launch, and the check compares means. Under CUPTI no
# clock is measured: these times are at whatever clock the GPU chose.
#
# **What a flush buys.** Flushing gives every run the same starting state -- an L2 without
# the input. It does not promise runs that agree more closely: the flushed kernel reads from
# DRAM, which has its own variation. The cell compares the two spreads on the raw runs
# (`output_csv=True`): the RSD and a robust spread (1.4826 × the median absolute deviation,
# as % of the median), and the Brown-Forsythe test (Levene's, centred on the median, on the
# log durations: one slow run cannot decide it; its statistic, the mean distance from the
# median, gives the direction), Holm-corrected over the two sizes. The result line says, per
# size, how wide the flushed runs spread against the warm ones -- the ratio of those mean
# distances, `flushed/warm spread` in the table -- and whether that difference is
# distinguishable after Holm. The check, on the size that fits in L2 (the one whose starting
# state the flush changes), fails only if the flushed runs spread distinguishably *narrower*.


# %%
def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: a family of p-values keeps its 5 % level whatever their number."""
    p = np.asarray(p, float)
    order, out = np.argsort(p), np.empty(len(p))
    out[order] = np.minimum(1, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return out


def compare_spread(raw: pd.DataFrame) -> pd.DataFrame:
    """Per size, warm vs flushed runs (raw per-run durations): RSD, robust spread, Brown-Forsythe p, Holm, verdict."""
    rows = []
    for n, g in raw.groupby("n", sort=False):
        runs = {flush: g[g.flush == flush].Value.to_numpy(dtype=float) for flush in (False, True)}
        dev = {
            flush: np.abs(np.log(v) - np.median(np.log(v))).mean() for flush, v in runs.items()
        }  # the test's
        row = {
            "n": n,
            "p": stats.levene(np.log(runs[False]), np.log(runs[True]), center="median").pvalue,
            "flushed/warm spread": dev[True] / dev[False] if dev[False] else np.inf,
        }
        for flush, v in runs.items():
            name = "flushed" if flush else "warm"
            row[f"RSD {name} %"] = 100 * v.std(ddof=1) / v.mean()
            row[f"robust {name} %"] = (
                100 * 1.4826 * np.median(np.abs(v - np.median(v))) / np.median(v)
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    table["p_holm"] = holm(table.p)
    table["verdict"] = np.where(
        ~(table.p_holm < 0.05),
        "not distinguishable",
        np.where(
            table["flushed/warm spread"] > 1, "flushed spread larger", "flushed spread smaller"
        ),
    )
    return table


def check_spread(raw: pd.DataFrame, fits: int) -> str:
    """compare_spread printed; the claim on the size that fits in L2 (``fits`` elements)."""
    spread = compare_spread(raw)
    print(spread.to_string(index=False, float_format="{:,.3g}".format))
    said = {
        r.n: f"flushed {r.ratio:.2f}x warm ({'wider' if r.ratio > 1 else 'narrower'}), "
        f"{'' if r.p_holm < 0.05 else 'not '}distinguishable after Holm (p_holm {r.p_holm:.2g})"
        for r in spread.rename(columns={"flushed/warm spread": "ratio"}).itertuples()
    }
    nt.claim(
        spread.set_index("n").verdict[fits] != "flushed spread smaller",
        "fits in L2: the flushed runs spread no "
        "narrower than the warm ones by a difference distinguishable after Holm -- a flush fixes the starting "
        "state, not the spread",
        said[fits],
    )
    return "spread (the test's mean distance from the median): " + "; ".join(
        f"n={n:,} {v}" for n, v in said.items()
    )


BY_HAND_CONFIGS = [(SMALL, False), (SMALL, True), (LARGE, False), (LARGE, True)]

with nt.section("2. Warm vs cold L2 by hand") as s:
    ENV.require("profiler")
    by_hand = nsight.analyze.kernel(
        configs=BY_HAND_CONFIGS,
        runs=20,
        cache_control="none",
        thermal_mode="off",
        verbosity=SILENT,
        output_csv=True,
        output_prefix="by_hand_",
    )(ck.stream_after)
    t = by_hand().to_dataframe().set_index(["n", "flush"]).AvgValue  # ns
    newest = max(
        glob.glob("by_hand_profiled_data-stream_after-*.csv"), key=os.path.getmtime
    )  # the raw runs
    RAW_BY_HAND = pd.read_csv(newest)
    sp_small, sp_large = t[(SMALL, True)] / t[(SMALL, False)], t[(LARGE, True)] / t[(LARGE, False)]
    print(nt.rules(ENV.backend, cache_control="none"))
    if ENV.backend == "cupti":
        print(
            "  (the CUPTI backend measures no clock: these times are at whatever clock the GPU chose)"
        )
    for n, name in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
        print(
            f"  {name:10s}: warm {t[(n, False)] / 1e3:8.1f} us, flushed {t[(n, True)] / 1e3:8.1f} us "
            f"-> {2 * 4 * n / t[(n, False)]:7,.0f} vs {2 * 4 * n / t[(n, True)]:7,.0f} GB/s"
        )
    print(
        "  (warm, the small vector is read from L2 -- section 1's DRAM counters show it; a kernel this short is "
        "set by its launch and its tail as much as by the L2, so its rate is not the L2's bandwidth)"
    )
    nt.claim(
        sp_small > 1.1 and sp_large < 1.1,
        "a warm L2 beats a flushed one only for the size that fits in L2",
        f"flushed/warm: {sp_small:.2f}x (fits), {sp_large:.2f}x (8x L2)",
    )
    s.result = (
        f"{ENV.backend}: flushed/warm time {sp_small:.2f}x (fits in L2), {sp_large:.2f}x (8x L2); "
        + check_spread(RAW_BY_HAND, SMALL)
    )

# %% [markdown]
# ## Takeaways
#
# - Decide cache and clock control on purpose. nsight-python flushes caches
#   (`"all"`) and leaves clocks free (`"none"`); the `ncu` command line flushes and locks
#   to base. The same kernel can differ a lot between the two.
# - A flushed-cache number gives every run the same starting state (an L2 without the
#   input) -- not a smaller spread: section 2 compares the spreads on your runs. A warm-cache
#   number is what the kernel sees inside a real model when its input was just produced.
#   Know which you report.
# - Measure the clock (`gpc__cycles_elapsed.avg.per_second`) of each kernel you judge;
#   `ComputeClock` is the card's rating and never moves, and `clock_control="base"` does not
#   pin one frequency. Set a % of peak against the peak at the clock the kernel ran at.
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
nt.summary()
