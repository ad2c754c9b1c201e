# %% [markdown]
# # 04 · Cache and clock control: two defaults that change the answer
#
# **What you will learn**
# - what `cache_control` ("all" = flush the caches before every replay pass, "none" = keep
#   them) and `clock_control` ("base" = lock the clocks to base, "none" = let the GPU boost) do
#   to the *same* kernels, all four combinations;
# - that nsight-python's defaults (`cache_control="all"`, `clock_control="none"`) are not the
#   plain `ncu` defaults (`--cache-control all --clock-control base`);
# - how to measure the clock a kernel really ran at (`gpc__cycles_elapsed.avg.per_second`) --
#   `ComputeClock` is only the rating -- and how to set a compute-bound kernel against the
#   datasheet peak *at the clock it ran at*;
# - that `ncu` locks the clocks while it profiles and unlocks them when it exits: how to stop
#   it so that it does, what a lock left behind looks like, and what clears it;
# - what the DRAM counters count in a [write-back](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#write-back-cache)
#   L2, and which ceiling to set a memory stream against: the datasheet's rounded bandwidth
#   or the device's own (memory clock × bus width);
# - how the same measurement runs without nsight-python's Nsight Compute backend (the `ncu`
#   command line on the same kernels file, read back into nsight-python's own table), and how
#   to flush the L2 by hand under CUPTI.
#
# The experiment streams through a vector (`y = x * 2`) at two sizes chosen from **your
# GPU's L2 size**: one that fits in L2 (a quarter of it) and one far above (8×); an fp16
# matmul is the compute-bound contrast.
#
# | section | needs |
# |---|---|
# | 0. the defaults, read from the tools | nothing (an `ncu` for its half) |
# | 1. cache and clock control, measured (2 × 2) | the Nsight Compute backend, or any `ncu` (command line) |
# | 2. the clock after `ncu`, and a lock left behind | a GPU |
# | 3. warm vs cold L2 by hand | any backend (CUPTI too) |
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

from nspy_tutorial import lifetime, ncu_cli
from nspy_tutorial.clock import read_clock_state

# every profile here is silent; notebook 02 shows nsight's output
SILENT = nsight.VerbosityLevel.SILENT
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
# what the DRAM really moved: bytes per second, and bytes written
DRAM_RATE, DRAM_WRITE = "dram__bytes.sum.per_second", "dram__bytes_write.sum"
SMALL = LARGE = None
if ENV.facts:
    L2 = ENV.facts.l2_bytes
    SMALL, LARGE = L2 // 4 // 4, 8 * L2 // 4  # float32 elements: L2/4 and 8 x L2 bytes
    print(f"L2 {L2 >> 20} MiB: vectors of {SMALL >> 18} and {LARGE >> 18} MiB (float32)")
SHEET = ENV.datasheet
# the fp16 datasheet peak and the SM clock it is stated at (an H100's tensor peaks: 1,830 MHz)
FP16 = (SHEET.fp16_tflops.value, SHEET.peak_clock_mhz("fp16")) if SHEET else (None, None)
HELD_MHZ = ENV.clock.held_mhz if ENV.clock else None  # setup's reading: None unless held

# %% [markdown]
# The kernels, written once. `%%writefile` puts them in `cache_kernels.py` (in this
# notebook's work folder); the notebook imports that file, and the `ncu` command line runs
# the same file. `stream_and_matmul` opens three annotations in one call -- the stream at
# both sizes, then the matmul -- so one profile (one `ncu` process) measures all three.
#
# The L2 is a **write-back** cache: a line a kernel writes stays in L2, *dirty*, until
# something evicts it; only then is it written to DRAM. `dram__bytes_write.sum` counts what
# the DRAM wrote while the kernel ran -- whoever dirtied the line. `torch.randn` has just
# written the input; left dirty, its lines would be written back during our kernel and
# counted as its writes. So before each annotation `warm` reads a buffer twice the L2's size
# (every dirty line goes to DRAM now, outside the measurement) and then reads the input back:
# it sits in L2, clean -- unless the tool flushes the caches (or `evict=True`: section 3).

# %% writefile cache_kernels.py
"""Notebook 04's kernels: the stream y = x * 2 at two sizes, an fp16 matmul, the L2 evicted by hand."""

import functools

import nsight
import torch

MATMUL_N = 4096  # an fp16 4096-cube matmul: compute-bound on every GPU the tutorial targets


@functools.cache
def scratch() -> torch.Tensor:
    """A buffer twice the L2's size, made once."""
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return torch.ones(2 * l2_bytes // 4, device="cuda")


def warm(x: torch.Tensor, evict: bool = False) -> torch.Tensor:
    """Read the scratch buffer -- the L2 pushed out, its dirty lines written to DRAM now -- then read
    ``x`` back into L2: warm and clean (with ``evict``: not read back, x waits in DRAM)."""
    scratch().sum()
    if not evict:
        x.sum()
    return x


def stream_and_matmul(small: int, large: int) -> None:
    """Section 1: three annotations in one call, so that one profile measures all three."""
    for name, n in (("x * 2, fits in L2", small), ("x * 2, 8x L2", large)):
        x = warm(torch.randn(n, device="cuda"))
        with nsight.annotate(name):
            _ = x * 2.0
    a = warm(torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.float16))
    with nsight.annotate("fp16 matmul"):
        _ = a @ a


def stream_after(n: int, flush: bool) -> None:
    """Section 3: the stream with its input warm, or evicted by hand (outside the annotation)."""
    x = warm(torch.randn(n, device="cuda"), evict=flush)
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
# `ncu --help`, with every value `--clock-control` takes. And the CUPTI collector does not
# even accept the two options.

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
        # each option's line: "--cache-control arg (=all)   Control the behavior of the GPU caches..."
        cli = dict(re.findall(r"--(cache-control|clock-control)\s+arg\s+\(=(\w+)\)", helptext))
        if len(cli) == 2:
            block = helptext.split("--clock-control", 1)[1].split("\n  --", 1)[0]
            values = re.findall(r"^\s+(\w+)\s*$", block, flags=re.M)
            print(f"  ncu --help:    {cli}; --clock-control takes {', '.join(values)}")
            nt.claim(
                cli == {"cache-control": "all", "clock-control": "base"},
                "the ncu command line flushes caches and locks clocks to base by default",
            )
            line += f"; ncu CLI cache={cli['cache-control']}, clock={cli['clock-control']}"
        else:
            print("  (could not read the defaults from this ncu's --help text)")
    s.result = line

# %% [markdown]
# ## 1. Cache and clock control, one change at a time, all four combinations
#
# Four profiles of the same call: nsight-python's defaults (`all`/`none`), the caches kept warm
# (`cache_control="none"`), the clocks locked to base (`clock_control="base"`, the `ncu`
# command line's default), and both: seed 000's 2 × 2. Each pair of rows differs in one setting;
# the cache's effect is checked under either clock setting. Besides
# the duration we collect `gpc__cycles_elapsed.avg.per_second` -- cycles of a
# [GPC](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#gpc) (a
# cluster of [SMs](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#sm),
# the GPU's processors) divided by the kernel's duration, i.e. **the SM clock the kernel actually ran
# at** -- and `dram__bytes.sum.per_second` and `dram__bytes_write.sum`: the rate at which the
# DRAM moved bytes, and how much it wrote (rate × time − written = what it read).
#
# One cell decides who measures. With nsight-python's Nsight Compute backend the decorator
# runs the function in this process. With an older `ncu` that backend cannot load, so
# `ncu_cli.nsight_table` runs `cache_kernels.py` under the `ncu` command line with the same
# settings, one `ncu` run per combination (each command is printed), and reads each report
# back with nsight-python's own code: the same `to_dataframe()` table either way. The matmul
# may be several cuBLAS kernels: `combine_kernel_metrics=per_run` adds their times and bytes
# and weights the two rates by each kernel's time. Three runs per profile; the table prints
# each time's spread (RSD, standard deviation over mean) to hold against the effects.
#
# What to look for:
# - **cache**: the stream that fits in L2 is faster warm, and the DRAM counters say why: warm,
#   the DRAM read next to none of its input; flushed, all of it. The 8× stream is not faster;
# - **writes**: warm or flushed, the DRAM wrote the same share of what the kernel wrote --
#   with the L2 cleaned before the annotation, the writes counted are the kernel's own;
# - **clock**: the measured SM clock moves with `clock_control` while `ComputeClock` stays the
#   rating. "base" does not pin one frequency: a heavy kernel can run lower than a light one
#   beside it. The compute-bound matmul's time follows its own clock; the memory-bound stream
#   hardly moves. **On a clock already held** (setup's banner says HELD, or no kernel's clock
#   moves) `clock_control` has nothing to move: the cell says so and checks that nothing moved;
# - **peak at the clock**: the datasheet's fp16 peak is stated at one SM clock; a kernel that
#   ran at a lower clock can reach at most `peak × its clock / that clock`;
# - **bandwidth**: the 8× stream's rate, from the 8n bytes it reads and writes, against the
#   datasheet and against the device's own peak, **2 transfers per memory clock × bus width /
#   8** (both from NVML). A rate above that peak must be explained by writes still in L2 when
#   the kernel ended, or the check fails.


# %%
def per_run(x, y):
    """combine_kernel_metrics on two kernels' [time, SM Hz, DRAM byte/s, DRAM bytes] of one run."""
    out = x + y
    out[1:3] = (x[1:3] * x[0] + y[1:3] * y[0]) / out[0]  # rates weighted by time
    return out


STREAMS = {"x * 2, fits in L2": "small", "x * 2, 8x L2": "large"}  # annotation -> its argument
MATMUL = "fp16 matmul"


def per_configuration(tables: dict, matmul_n: int) -> pd.DataFrame:
    """A row per (cache_control, clock_control) and annotation, from nsight-python's tables."""
    rows = []
    for (cache, clock_control), table in tables.items():
        value = [ncu_cli.to_base_units(v, u) for v, u in zip(table.AvgValue, table.Unit)]
        m = table.assign(value=value).pivot_table(
            index="Annotation", columns="Metric", values="value"
        )
        for annotation, r in m.iterrows():
            first = table[(table.Annotation == annotation) & (table.Metric == TIME)].iloc[0]
            row = {"cache_control": cache, "clock_control": clock_control, "kernel": annotation}
            row["time_us"], row["RSD %"] = r[TIME] * 1e6, first.RelativeStdDevPct
            row["kernels"], row["SM MHz"] = first.Kernel.count("|") + 1, r[SM_HZ] / 1e6
            if annotation in STREAMS:  # GB/s by the 8n bytes the kernel moves; what the DRAM did
                n = int(first[STREAMS[annotation]])
                row["GB/s"] = 8 * n / r[TIME] / 1e9
                row["DRAM GB/s"] = r[DRAM_RATE] / 1e9
                row["DRAM read / 4n"] = (r[DRAM_RATE] * r[TIME] - r[DRAM_WRITE]) / (4 * n)
                row["DRAM wrote / 4n"] = r[DRAM_WRITE] / (4 * n)
            else:
                row["TFLOP/s"] = 2 * matmul_n**3 / r[TIME] / 1e12
            rows.append(row)
    return pd.DataFrame(rows)


def check_cache(table: pd.DataFrame) -> str:
    """Flushed over warm time per stream under each clock setting, and what the DRAM read and wrote."""
    t = table[table.kernel.isin(STREAMS)].set_index(["kernel", "clock_control", "cache_control"])
    fits, eight = STREAMS
    ratio = (t.time_us.xs("all", level=2) / t.time_us.xs("none", level=2)).dropna().unstack(0)
    nt.claim(
        (ratio[fits] > 1.1).all() and (ratio[eight] < 1.1).all(),
        "a warm L2 beats a flushed one only for the size that fits in L2, under either clock",
        ", ".join(
            f"clock {k}: {r[fits]:.2f}x (fits), {r[eight]:.2f}x (8x L2)"
            for k, r in ratio.iterrows()
        ),
    )
    read = t["DRAM read / 4n"].unstack("cache_control").dropna().loc[fits]
    nt.claim(
        (read["none"] < 0.1).all() and (read["all"] > 0.9).all(),
        "warm, the small stream's input came from L2 (the DRAM read under a tenth of it); flushed, "
        "from DRAM (over nine tenths)",
        ", ".join(f"clock {k}: {r['none']:.3f} and {r['all']:.3f}" for k, r in read.iterrows()),
    )
    wrote = t["DRAM wrote / 4n"].unstack("cache_control").dropna()
    nt.claim(
        ((wrote["none"] - wrote["all"]).abs() < 0.05).all() and (wrote < 1.02).all(axis=None),
        "the DRAM writes counted are the kernel's own: warm or flushed, the same share of its "
        "output (within 0.05), never more than it wrote",
        ", ".join(
            f"{k[0]}: {r['none']:.2f} warm, {r['all']:.2f} flushed" for k, r in wrote.iterrows()
        ),
    )
    free = ratio.loc["none"]
    return f"flushed/warm {free[fits]:.2f}x (fits in L2), {free[eight]:.2f}x (8x L2)"


def check_clock(table: pd.DataFrame, rated_khz: set, held_mhz: int | None) -> str:
    """Each kernel's SM clock under both clock_control settings (caches flushed), and who feels it."""
    flushed = table[table.cache_control == "all"]
    mhz = flushed.pivot(index="kernel", columns="clock_control", values="SM MHz")
    slow = flushed.pivot(index="kernel", columns="clock_control", values="time_us")
    slow = slow.base / slow.none  # locked over free time, per kernel
    print(f"  ComputeClock in every row: {sorted(k // 1000 for k in rated_khz)} MHz (the rating)")
    print("  SM clock each kernel ran at, MHz:\n" + mhz.to_string(float_format="{:,.0f}".format))
    moved = (mhz.none - mhz.base).abs() > 0.01 * mhz.none
    slow_mm = slow[MATMUL]
    if not moved.any():  # clock_control had nothing to move: the clock was held already
        setup = f"held at {held_mhz:,} MHz even idle" if held_mhz else "free: held since then"
        print(f"  setup found the SM clock {setup}")
        nt.claim(
            abs(slow_mm - 1) < 0.03,
            "on a clock already held, clock_control moves neither a kernel's clock nor the "
            "matmul's time (within 3 %)",
            f"{mhz.none[MATMUL]:,.0f} vs {mhz.base[MATMUL]:,.0f} MHz, time {slow_mm:.3f}x",
        )
        return f"clock held ({mhz.base[MATMUL]:,.0f} MHz under load): clock_control moved nothing"
    nt.claim(
        moved.all(),
        "every kernel's SM clock moves with clock_control",
        ", ".join(f"{k}: {r.none:,.0f} vs {r.base:,.0f} MHz" for k, r in mhz.iterrows()),
    )
    apart = mhz.base.max() / mhz.base.min() - 1
    print(f"  under 'base' the kernels' clocks were {apart:.1%} apart (one frequency: within 2 %)")
    slow_stream = slow[list(STREAMS)[1]]
    ratio_mm = mhz.none[MATMUL] / mhz.base[MATMUL]
    nt.claim(
        slow_mm > slow_stream,
        "the compute-bound matmul feels the clock lock more than the memory-bound 8x-L2 stream",
        f"locked/free time {slow_mm:.2f}x vs {slow_stream:.2f}x",
    )
    nt.claim(
        abs(slow_mm / ratio_mm - 1) < 0.1,
        "the matmul's time follows its own clock (locked/free time within 10 % of its clock ratio)",
        f"{slow_mm:.2f}x vs {ratio_mm:.2f}x",
    )
    pinned = "one frequency" if apart < 0.02 else "not one frequency"
    return f"matmul {slow_mm:.2f}x slower locked ({mhz.none[MATMUL]:,.0f}->{mhz.base[MATMUL]:,.0f} MHz; {pinned})"


def check_peak(table: pd.DataFrame, peak: float | None, sheet_mhz: float | None, held=None) -> str:
    """The matmul's TFLOP/s as % of the fp16 datasheet peak and of that peak at the clock it ran at."""
    mm = table[table.kernel == MATMUL].dropna(axis=1, how="all").drop(columns=["kernel", "RSD %"])
    if not (peak and sheet_mhz):
        print("  (the datasheet table lacks this GPU's fp16 peak or its clock: no % of peak)")
        return f"fp16 matmul up to {mm['TFLOP/s'].max():,.0f} TFLOP/s"
    mm["% datasheet"] = 100 * mm["TFLOP/s"] / peak
    mm["% at its clock"] = 100 * mm["TFLOP/s"] / (peak * mm["SM MHz"] / sheet_mhz)
    print(
        f"  fp16 datasheet peak {peak:g} TFLOP/s at {sheet_mhz:,.0f} MHz; at f MHz: peak x f / {sheet_mhz:,.0f}"
    )
    if held:
        print(
            f"  (SM clock held at {held[0]:,} MHz, {held[1]:.0%} of its maximum: % datasheet sits about that low)"
        )
    print(mm.to_string(index=False, float_format="{:,.1f}".format))
    nt.claim(
        (mm["% at its clock"] <= 100).all(),
        "the matmul never beats the fp16 peak at the clock it ran at",
        f"up to {mm['% at its clock'].max():.1f}%",
    )
    best = mm.loc[mm["TFLOP/s"].idxmax()]
    return (
        f"fp16 matmul {best['% at its clock']:.0f}% of peak at its {best['SM MHz']:,.0f} MHz "
        f"({best['% datasheet']:.0f}% at the datasheet's {sheet_mhz:,.0f})"
    )


def check_bandwidth(table: pd.DataFrame, facts, sheet_gbs: float | None) -> str:
    """The 8x-L2 stream against the datasheet and the DRAM peak: 2 x memory clock x bus width / 8."""
    big = table[table.kernel == list(STREAMS)[1]]
    fastest = big.loc[big["GB/s"].idxmax()]
    said = f"8x-L2 stream {fastest['GB/s']:,.0f}"
    sheet = f"{sheet_gbs:,.0f} GB/s on the datasheet" if sheet_gbs else "datasheet unknown"
    if not (facts and facts.max_mem_clock_mhz and facts.memory_bus_width_bits):
        print("  (NVML did not report the memory clock and bus width: no clock-derived peak)")
        return f"{said} GB/s; {sheet}"
    mem_mhz, width = facts.max_mem_clock_mhz, facts.memory_bus_width_bits
    peak = 2 * mem_mhz * 1e6 * width / 8 / 1e9
    print(
        f"  8x-L2 stream up to {fastest['GB/s']:,.0f} GB/s ({fastest['DRAM GB/s']:,.0f} by DRAM counters)\n"
        f"  DRAM peak 2 x {mem_mhz:,} MHz x {width:,} bit / 8 = {peak:,.0f} GB/s (NVML's maximum memory "
        f"clock; the kernel's is not measured); {sheet}"
    )
    nt.claim(
        (big["DRAM GB/s"] <= peak).all(),
        "the DRAM never moved more bytes per second than its clock and bus width allow",
        f"max {big['DRAM GB/s'].max():,.0f} vs {peak:,.0f} GB/s",
    )
    above = big[big["GB/s"] > peak]
    if len(above):  # a rate above the peak is a finding: the data must explain it, or this fails
        nt.claim(
            (above["DRAM wrote / 4n"] < 1).all(),
            "a stream rate above the DRAM peak is explained: part of its output stayed in L2",
            f"DRAM wrote up to {above['DRAM wrote / 4n'].max():.2f} of its output",
        )
    return f"{said} of {peak:,.0f} GB/s (2 x memory clock x bus width)"


def plot_times(table: pd.DataFrame) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, kernel in zip(axes, [*STREAMS, MATMUL]):
        part = table[table.kernel == kernel]
        labels = [f"cache={c}\nclock={k}" for c, k in zip(part.cache_control, part.clock_control)]
        ax.bar(labels, part.time_us, color=["C0", "C1", "C2", "C3"])
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(kernel)
        ax.set_ylabel("us")
    plt.tight_layout()
    plt.show()


# %%
COMBINATIONS = [("all", "none"), ("none", "none"), ("all", "base"), ("none", "base")]
SETTINGS = dict(
    configs=[(SMALL, LARGE)],
    runs=3,
    metrics=[TIME, SM_HZ, DRAM_RATE, DRAM_WRITE],
    combine_kernel_metrics=per_run,
    thermal_mode="off",
    verbosity=SILENT,
)


def measure(cache: str, clock_control: str) -> pd.DataFrame:
    """One profile of ck.stream_and_matmul under (cache, clock_control): nsight-python's table."""
    rules = dict(cache_control=cache, clock_control=clock_control)
    if ENV.backend == "ncu":  # nsight-python's Nsight Compute backend, in this process
        bench = nsight.analyze.kernel(**rules, **SETTINGS)
        with lifetime.stop_children_cleanly():  # an interrupt lets its ncu restore the clocks
            return bench(ck.stream_and_matmul)().to_dataframe()
    report = f"stream_and_matmul-{cache}-{clock_control}.ncu-rep"  # the ncu command line
    args = dict(ncu=ENV.ncu_path, report=report, **rules, **SETTINGS)
    return ncu_cli.nsight_table("cache_kernels.py", ck.stream_and_matmul, **args)


with nt.section("1. cache_control and clock_control, measured (2 x 2)") as s:
    if ENV.backend != "ncu":  # an older ncu: the command line on the same file
        ENV.require("ncu-cli")
    source = "ncu" if ENV.backend == "ncu" else "ncu-cli"
    tables = {combo: measure(*combo) for combo in COMBINATIONS}
    for cache, clock_control in COMBINATIONS:
        print(nt.rules(source, cache_control=cache, clock_control=clock_control))
    TABLE = per_configuration(tables, ck.MATMUL_N)
    columns = ["cache_control", "clock_control", "kernel", "time_us", "RSD %", "GB/s"]
    streams = TABLE[TABLE.kernel != MATMUL][columns + ["DRAM read / 4n", "DRAM wrote / 4n"]]
    print(streams.to_string(index=False, float_format="{:,.2f}".format))
    plot_times(TABLE)
    rated = {int(k) for t in tables.values() for k in t.ComputeClock}
    held = (HELD_MHZ, ENV.clock.ratio) if HELD_MHZ else None
    checks = [
        check_cache(TABLE),
        check_clock(TABLE, rated, HELD_MHZ),
        check_peak(TABLE, *FP16, held),
        check_bandwidth(TABLE, ENV.facts, SHEET.mem_bandwidth_gbs.value if SHEET else None),
    ]
    s.result = f"{source}: " + "; ".join(checks)

# %% [markdown]
# The matmul is the contrast: a memory-bound stream mostly waits on DRAM, so it feels the SM
# clock less than a compute-bound matmul, whose time follows the clock *it* ran at. Which of
# the two your kernel is decides how much `clock_control` matters for it -- notebook 06
# measures that boundary. And a % of peak means little until the clock is known.
#
# ## 2. The clock after `ncu`, and a lock left behind
#
# `ncu` locks the clocks while it profiles (`--clock-control base`, its default; nsight-python
# asks for `none`) and **unlocks them when it exits normally**. Stop a profile with Ctrl-C (in a
# notebook: the Stop button, the same interrupt): `ncu` then restores the clocks and exits; the
# tutorial passes the interrupt on to the `ncu` it started and waits for it before anything
# harsher. Never `kill -9` it, nor the Python it profiles: a killed `ncu` restores nothing, and
# the lock stays -- for every later process on that GPU, on a shared machine everyone's.
#
# What a lock left behind looks like: setup's banner line **SM clock HELD at … even idle**. A
# free GPU idles far below its maximum (hundreds of MHz); a held one stays at the lock while
# nothing runs, and every figure in the notebooks sits under the datasheet by about that
# ratio. What clears it, as far as anyone has measured: a new machine or runtime, or
# `ncu --clock-control reset` where the installed `ncu` has that value (section 0 lists what
# yours takes). An administrator may also lock clocks on purpose, for stable benchmarks: so
# this cell resets only a clock that setup found held **and** only when you say so, by
# setting `RESET_CLOCKS = True` in it. Otherwise it prints what it would run and why it did
# not. First it reads the clock again, now that section 1's `ncu` runs are over.

# %%
# True: reset a clock that setup found held, with `ncu --clock-control reset` (only then)
RESET_CLOCKS = False

with nt.section("2. The clock after ncu, and a lock left behind") as s:
    ENV.require("gpu")
    now = read_clock_state()
    print(f"  at setup: {ENV.clock.lines()[0]}\n  now:      {now.lines()[0]}")
    if now.state == "held":
        command = f"{ENV.ncu_path or 'ncu'} --clock-control reset"
        has_reset = bool(ENV.ncu_path) and ncu_cli.has_clock_reset(ENV.ncu_path)
        why = [
            ("setup found the clock free: a run above left this lock", ENV.clock.state != "held"),
            ("RESET_CLOCKS is False in this cell", not RESET_CLOCKS),
            ("no ncu here has --clock-control reset", not has_reset),
        ]
        if any(no for _, no in why):
            print(f"  would run: {command}\n  not run: " + "; ".join(w for w, no in why if no))
            print("  otherwise: a new machine clears it (a new Colab runtime presumably; untested)")
        else:
            print(f"  $ {command}\n" + ncu_cli.reset_clocks(ENV.ncu_path))
            now = read_clock_state()
            print(f"  after the reset: {now.lines()[0]}")
    nt.claim(
        now.state != "held" or ENV.clock.state == "held",
        "this notebook's ncu runs left the clock as setup found it",
        now.lines()[0],
    )
    s.result = f"idle clock now {now.state}: " + (
        f"{now.idle_mhz[0]:,}-{now.idle_mhz[1]:,} MHz" if now.idle_mhz else now.why
    )

# %% [markdown]
# ## 3. Warm vs cold L2 by hand (any backend, CUPTI included)
#
# The CUPTI backend records each kernel once as it runs: no replay, **no cache flush, no clock
# control** -- `cache_control` and `clock_control` are ignored there. You can still measure a
# cold cache honestly: evict the L2 yourself *before* the annotation (`ck.warm(x, evict=True)`),
# outside the measurement; for the warm case the input is read back into L2. Twenty
# runs per configuration: without replay each run is one real launch. Under CUPTI no clock is
# measured: these times are at whatever clock the GPU chose.
#
# **What a flush buys.** Flushing gives every run the same starting state -- an L2 without the
# input. It does not promise runs that agree more closely: the flushed kernel reads from DRAM,
# which has its own variation. The cell compares the spreads of the raw runs
# (`output_csv=True`) with the
# [Brown-Forsythe test](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#brown-forsythe-test):
# it asks whether two groups spread alike by comparing each run's distance from its group's
# median (here on log durations), so one slow run cannot decide it. The check, on the size
# that fits in L2 (whose starting state the flush changes), fails only if the flushed runs
# spread distinguishably *narrower* (p < 0.05).


# %%
def spread(raw: pd.DataFrame, n: int) -> dict:
    """Warm vs flushed runs of size ``n``: RSDs, the flushed/warm ratio of the mean distances from
    the median (log durations) and Brown-Forsythe's p for "they spread alike"."""
    runs = [raw[(raw.n == n) & (raw.flush == f)].Value.to_numpy(dtype=float) for f in (False, True)]
    logs = [np.log(v) for v in runs]
    dev = [np.abs(v - np.median(v)).mean() for v in logs]
    return {
        "RSD warm %": 100 * runs[0].std(ddof=1) / runs[0].mean(),
        "RSD flushed %": 100 * runs[1].std(ddof=1) / runs[1].mean(),
        "flushed/warm": dev[1] / dev[0] if dev[0] else np.inf,
        "p": stats.levene(*logs, center="median").pvalue,
    }


def check_spread(raw: pd.DataFrame, fits: int) -> str:
    """The spreads of both sizes printed; the claim on the size that fits in L2."""
    found = {n: spread(raw, n) for n in raw.n.unique()}
    print(pd.DataFrame(found).T.rename_axis("n").to_string(float_format="{:,.3g}".format))
    f = found[fits]
    said = f"flushed spread {f['flushed/warm']:.2f}x warm's (p {f['p']:.2g})"
    nt.claim(
        not (f["p"] < 0.05 and f["flushed/warm"] < 1),
        "fits in L2: the flushed runs spread no narrower than the warm ones, distinguishably -- a "
        "flush fixes the starting state, not the spread",
        said,
    )
    return f"fits in L2: {said}"


BY_HAND_CONFIGS = [(SMALL, False), (SMALL, True), (LARGE, False), (LARGE, True)]

with nt.section("3. Warm vs cold L2 by hand") as s:
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
    # the raw runs: nsight-python's per-run CSV of this call
    newest = max(glob.glob("by_hand_profiled_data-stream_after-*.csv"), key=os.path.getmtime)
    RAW_BY_HAND = pd.read_csv(newest)
    print(nt.rules(ENV.backend, cache_control="none"))
    for n, name in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
        print(
            f"  {name:10s}: warm {t[(n, False)] / 1e3:8.1f} us, flushed {t[(n, True)] / 1e3:8.1f} us "
            f"-> {8 * n / t[(n, False)]:7,.0f} vs {8 * n / t[(n, True)]:7,.0f} GB/s (warm: from L2 if it fits)"
        )
    small, large = (t[(n, True)] / t[(n, False)] for n in (SMALL, LARGE))
    nt.claim(
        small > 1.1 and large < 1.1,
        "a warm L2 beats a flushed one only for the size that fits in L2",
        f"flushed/warm: {small:.2f}x (fits), {large:.2f}x (8x L2)",
    )
    s.result = (
        f"{ENV.backend}: flushed/warm {small:.2f}x (fits), {large:.2f}x (8x L2); "
        + check_spread(RAW_BY_HAND, SMALL)
    )

# %% [markdown]
# ## Takeaways
#
# - Decide cache and clock control on purpose. nsight-python flushes caches (`"all"`) and
#   leaves clocks free (`"none"`); the `ncu` command line flushes and locks to base.
# - A flushed-cache number gives every run the same starting state, not a smaller spread. A
#   warm-cache number is what the kernel sees when its input was just produced. Know which you
#   report.
# - Measure the clock (`gpc__cycles_elapsed.avg.per_second`) of each kernel you judge;
#   `ComputeClock` never moves, and "base" does not pin one frequency. Set a % of peak against
#   the peak at the clock the kernel ran at -- and look at setup's clock line first: on a held
#   clock `clock_control` changes nothing.
# - Stop `ncu` with Ctrl-C, never `kill -9`: a killed `ncu` leaves the clocks locked.
# - DRAM counters count what DRAM did while the kernel ran, write-backs of other work's dirty
#   lines included: clean the L2 before the annotation when you read them.
# - Bandwidth has two ceilings: the datasheet's rounded figure, and 2 × memory clock × bus
#   width / 8. Set a stream against the second.
#
# ## Try it
#
# - In `cache_kernels.py`, make `warm` skip `scratch().sum()` and run section 1 again: the warm rows'
#   "DRAM wrote" now includes `torch.randn`'s write-backs, and the writes check says so.
# - Make `scratch`'s buffer a quarter of the L2 instead of twice its size and run section 3:
#   the "flushed" time of the small vector moves toward the warm one -- a partial flush.
#
# **Docs:** [nsight-python](https://docs.nvidia.com/nsight-python/) ·
# [`nsight.analyze.kernel`: `cache_control`, `clock_control`, `metrics`](https://docs.nvidia.com/nsight-python/analyze.html) ·
# [Tools: what CUPTI ignores](https://docs.nvidia.com/nsight-python/tools.html) ·
# [Nsight Compute: cache and clock control](https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#cache-control) ·
# [Nsight Compute CLI: `--clock-control`](https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html) ·
# source: [github.com/NVIDIA/nsight-python](https://github.com/NVIDIA/nsight-python)

# %%
nt.summary()
