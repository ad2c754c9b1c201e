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
#   `ncu` command line on a script, and flush the L2 by hand under CUPTI;
# - which ceiling to set a memory stream against: the datasheet's rounded bandwidth or
#   the device's own (memory clock × bus width), and what the DRAM counters add.
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
import textwrap

import matplotlib.pyplot as plt
import nsight
import pandas as pd
import torch

from nspy_tutorial import ncu_cli

SILENT = nsight.VerbosityLevel.SILENT  # every profile here is silent; notebook 02 shows nsight's output
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
DRAM_RATE, DRAM_WRITE = "dram__bytes.sum.per_second", "dram__bytes_write.sum"  # what the DRAM really moved
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
def in_base_units(value: float, unit: str) -> float:
    """Nsight Compute prints each metric in a scaled unit (usecond, Mbyte, Gbyte/s,
    cycle/nsecond): nanoseconds for a duration, otherwise SI (bytes, per second)."""
    si = ncu_cli.to_base_units(value, unit)
    is_duration = "/" not in unit and unit.lower().endswith(("second", "s")) and not unit.lower().endswith("hz")
    return si * 1e9 if is_duration else si


def row(cache: str, clock: str, size: str, n: int, t_ns: float, hz: float, dram_bps: float, dram_written: float) -> dict:
    """One line of a 2x2 table: the stream moves 4n bytes in and 4n out."""
    return {"cache_control": cache, "clock_control": clock, "size": size, "time_us": t_ns / 1e3,
            "GB/s": 2 * 4 * n / t_ns, "DRAM GB/s": dram_bps / 1e9,
            "DRAM wrote / 4n": dram_written / (4 * n), "SM_MHz": hz / 1e6}


def check_bandwidth(table: pd.DataFrame) -> str:
    """The 8x-L2 stream against the datasheet and the device's clock-derived DRAM peak."""
    big = table[table["size"] == "8x L2"]
    fastest = big.loc[big["GB/s"].idxmax()]
    sheet = ENV.datasheet.mem_bandwidth_gbs.value if ENV.datasheet else None
    share = fastest["DRAM wrote / 4n"]
    print(f"  8x L2 stream, fastest configuration ({fastest.cache_control}/{fastest.clock_control}): "
          f"{fastest['GB/s']:,.0f} GB/s by the bytes the kernel moves, {fastest['DRAM GB/s']:,.0f} GB/s by the bytes "
          f"the DRAM moved; the DRAM wrote {share:.3f} of what the kernel wrote"
          + (" (the rest was still in L2 when the kernel ended)" if share < 1 else ""))
    if PEAK_GBS is None:
        print("  (NVML did not report the memory clock and bus width: no clock-derived peak)")
        return f"8x L2 stream up to {fastest['GB/s']:,.0f} GB/s"
    f = ENV.facts
    print(f"  DRAM peak from the device's own numbers: 2 x {f.max_mem_clock_mhz} MHz x {f.memory_bus_width_bits} bit / 8 "
          f"= {PEAK_GBS:,.0f} GB/s; datasheet: " + (f"{sheet:,.0f} GB/s" if sheet else "unknown"))
    if sheet and fastest["GB/s"] > sheet:
        print(f"  -> above the datasheet's {sheet:,.0f} GB/s, which is {100 * sheet / PEAK_GBS:.1f}% of the clock-derived "
              "peak: the datasheet figure is rounded down")
    nt.claim((big["DRAM GB/s"] <= PEAK_GBS).all(), "the DRAM never moved more bytes per second than its clock and bus width allow",
             f"max {big['DRAM GB/s'].max():,.0f} vs {PEAK_GBS:,.0f} GB/s")
    above = big[big["GB/s"] > PEAK_GBS]
    if len(above):  # a rate above the peak is a finding: it must be explained by the data, or this fails
        nt.claim((above["DRAM wrote / 4n"] < 1).all(), "a stream rate above the DRAM peak is explained: part of its "
                 "output never reached DRAM during the kernel", above[["GB/s", "DRAM wrote / 4n"]].to_string())
    return (f"8x L2 stream {fastest['GB/s']:,.0f} GB/s ({fastest['DRAM GB/s']:,.0f} by DRAM counters) vs peak "
            f"{PEAK_GBS:,.0f} from clocks, " + (f"{sheet:,.0f} on the datasheet" if sheet else "datasheet unknown"))


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
# One benchmark function, profiled under each of the four combinations. Besides the
# duration we collect `gpc__cycles_elapsed.avg.per_second`: GPU cycles elapsed divided by
# the kernel's duration, i.e. **the clock the kernel actually ran at**; and
# `dram__bytes.sum.per_second` and `dram__bytes_write.sum`: the rate at which the DRAM
# really moved bytes (measured within one replay pass), and how much it wrote.
#
# The stream reads 4n bytes and writes 4n. Dividing those 8n bytes by the time gives the
# usual "GB/s", and for the 8×L2 size it can be compared with the memory's peak -- but
# which peak? The datasheet gives a rounded figure; the device's own is
# **2 transfers per memory clock × bus width**, both reported by NVML
# (`ENV.facts.max_mem_clock_mhz`, `ENV.facts.memory_bus_width_bits`). And at the end of
# the kernel the last writes may still sit in L2 (write-back), so the DRAM counters can
# show fewer bytes written than the kernel wrote. The cell prints all three and checks
# that the DRAM never moved more than the clock-derived peak allows; a stream rate above
# that peak would have to be explained by those counters, or the check fails.

# %%
def scale(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with nsight.annotate("x * 2"):
        _ = x * 2.0


def profile_scale(cache: str, clock: str):
    return nsight.analyze.kernel(runs=10, cache_control=cache, clock_control=clock, thermal_mode="off",
                                 verbosity=SILENT, metrics=[TIME, SM_HZ, DRAM_RATE, DRAM_WRITE])(scale)


with nt.section("1. cache_control x clock_control with nsight-python") as s:
    ENV.require("ncu")
    rows, rated = [], []
    for cache in ("all", "none"):
        for clock in ("none", "base"):
            print(f"  {cache}/{clock}: {nt.rules('ncu', cache_control=cache, clock_control=clock)}")
            df = profile_scale(cache, clock)(configs=[SMALL, LARGE]).to_dataframe()
            rated += list(df.ComputeClock)
            df["value"] = [in_base_units(v, u) for v, u in zip(df.AvgValue, df.Unit)]
            m = df.pivot_table(index="n", columns="Metric", values="value")
            for n, size in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
                rows.append(row(cache, clock, size, n, *m.loc[n, [TIME, SM_HZ, DRAM_RATE, DRAM_WRITE]]))
    NSIGHT_TABLE = pd.DataFrame(rows)
    print(NSIGHT_TABLE.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    found = check_claims(NSIGHT_TABLE, rated)
    bandwidth = check_bandwidth(NSIGHT_TABLE)
    s.result = (f"warm L2 {found['speedup']['fits in L2']:.2f}x faster (fits), {found['speedup']['8x L2']:.2f}x (8x L2); "
                f"SM clock {found['mhz'][0]:.0f}-{found['mhz'][1]:.0f} MHz; {bandwidth}")

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
# The cell prints the exact command once. Its rules differ from nsight-python's in one
# default: `--clock-control base` locks the clocks unless told otherwise.

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
    script = ncu_cli.write_script(SCRIPT, "scale.py")
    print(f"  {ENV.ncu_path} (version {'.'.join(map(str, ENV.ncu_version))}); the exact command, for the first combination:")
    rows, rated, MATMUL_US = [], [], {}
    for cache in ("all", "none"):
        for clock in ("none", "base"):
            raw = ncu_cli.profile_script(ENV.ncu_path, script, [str(SMALL), str(LARGE), str(REPS)],
                                         [TIME, SM_HZ, DRAM_RATE, DRAM_WRITE, "device__attribute_clock_rate"],
                                         ["small", "large", "matmul"], cache_control=cache, clock_control=clock,
                                         show_command=not rows)
            print(f"  {cache}/{clock}: {nt.rules('ncu-cli', cache_control=cache, clock_control=clock)}")
            rated += list(raw[raw["Metric Name"] == "device__attribute_clock_rate"]["Metric Value"])
            raw = raw[raw["Metric Name"] != "device__attribute_clock_rate"]
            raw = raw.assign(value=[in_base_units(v, u) for v, u in zip(raw["Metric Value"], raw["Metric Unit"])])
            wide = raw.pivot_table(index="ID", columns="Metric Name", values="value")
            nt.claim(len(wide) >= 3 * REPS and (len(wide) - 2 * REPS) % REPS == 0,
                     "ncu profiled only the kernels inside the three NVTX ranges", f"{len(wide)} launches")
            MATMUL_US[(cache, clock)] = wide.iloc[2 * REPS:][TIME].sum() / REPS / 1e3
            for size, part, n in (("fits in L2", wide.iloc[:REPS], SMALL), ("8x L2", wide.iloc[REPS:2 * REPS], LARGE)):
                rows.append(row(cache, clock, size, n, *part[[TIME, SM_HZ, DRAM_RATE, DRAM_WRITE]].mean()))
    CLI_TABLE = pd.DataFrame(rows)
    print(CLI_TABLE.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    found = check_claims(CLI_TABLE, rated)
    bandwidth = check_bandwidth(CLI_TABLE)
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
                f"{slow_mm:.2f}x, stream {slow_stream:.2f}x; {bandwidth}")

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
# A scratch buffer twice the L2 size: writing it pushes everything else out of L2.
SCRATCH = torch.empty(2 * L2 // 4, device="cuda") if ENV.has_gpu else None


# cache_control="none": under the Nsight Compute backend, do not flush for us either
@nsight.analyze.kernel(runs=20, thermal_mode="off", verbosity=SILENT, cache_control="none")
def scale_flush(n: int, flush: bool) -> None:
    x = torch.randn(n, device="cuda")
    if flush:
        SCRATCH.fill_(1.0)  # evict x from L2: not measured, it is outside the annotation
    with nsight.annotate("x * 2"):
        _ = x * 2.0


with nt.section("3. Warm vs cold L2 by hand") as s:
    ENV.require("profiler")
    configs = [(SMALL, False), (SMALL, True), (LARGE, False), (LARGE, True)]
    df = pd.concat([scale_flush(configs=[c]).to_dataframe() for c in configs])  # one call per configuration
    t = df.set_index(["n", "flush"]).AvgValue
    sp_small = t[(SMALL, True)] / t[(SMALL, False)]
    sp_large = t[(LARGE, True)] / t[(LARGE, False)]
    print(nt.rules(ENV.backend, cache_control="none"))
    for n, name in ((SMALL, "fits in L2"), (LARGE, "8x L2")):
        print(f"  {name:10s}: warm {t[(n, False)] / 1e3:8.1f} us, flushed {t[(n, True)] / 1e3:8.1f} us "
              f"-> {2 * 4 * n / t[(n, False)]:7,.0f} vs {2 * 4 * n / t[(n, True)]:7,.0f} GB/s")
    if PEAK_GBS:
        print(f"  (the DRAM peak from this device's clocks is {PEAK_GBS:,.0f} GB/s; for the size that fits, "
              "the warm rate is L2 bandwidth, not DRAM)")
    nt.claim(sp_small > 1.1 and sp_large < 1.1, "a warm L2 beats a flushed one only for the size that fits in L2",
             f"cold/warm: {sp_small:.2f}x (fits), {sp_large:.2f}x (8x L2)")
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
# - Bandwidth has two ceilings: the datasheet's rounded figure, and the device's own,
#   2 × memory clock × bus width. Set a stream against the second, and read the DRAM
#   counters when a number looks too good: writes can still be in L2 when the kernel ends.
#
# ## Try it
#
# - In section 3, make the scratch buffer `L2 // 4 // 4` elements (a quarter of the L2)
#   instead of twice its size: the "flushed" time of the small vector moves back toward
#   the warm one -- a partial flush.
# - In section 2's script, replace `y = x * 2.0` by `x.mul_(2.0)` (in place: the same
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
