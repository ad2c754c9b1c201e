# %% [markdown]
# # 08 · Info collectors and thermal control: what the GPU was doing while you measured
#
# **What you will learn**
# - how to attach your own values to every measurement with
#   `@nsight.experimental.collect(scope=...)` at each of the four scopes -- `ONCE`,
#   `CONFIG`, `RUN`, `ANNOTATION` -- and where each value lands: a plain column, four
#   aggregated `<name>_Avg/_Std/_Min/_Max` columns, the per-run CSV, `collected_info.pkl`;
# - which collector names nsight-python refuses, and that a collector that *raises* only
#   gets a warning and an empty column;
# - why the first `RUN`-scope sample of the SM clock can be the **idle** clock, and what the
#   `ANNOTATION` scope sees instead -- on your GPU;
# - what `thermal_mode="auto"` (the default) does, read from nsight-python's source, and
#   whether it had anything to do on your GPU: thermal headroom, pauses, spread and wall time
#   against `thermal_mode="off"`;
# - how per-run kernel time moves with SM clock and temperature, and how little 30 runs of
#   correlation can say.
#
# Info collectors and thermal control work with either backend (Nsight Compute or CUPTI).
# The collectors read the GPU through NVML (`pynvml`), which needs no profiler.

# %%
{{SETUP}}

# %%
import os
import pickle
import tempfile
import time

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import pynvml
import torch
from IPython.display import display
from nsight import thermovision
from scipy import stats

from nspy_tutorial import evidence

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 40)
SILENT = nsight.VerbosityLevel.SILENT
OUT_DIR = tempfile.mkdtemp(prefix="nspy_08_")  # every call below writes into its own folder here
RUNS = 30        # runs of the heating workload, as in the original tutorial
IDLE_S = 3.0     # seconds the GPU is left idle before a call (section 2)
HEAT_S = 0.25    # seconds of un-annotated matmuls before each measured one (sections 2-4)
N_HEAT = 4096
NVML = None
if ENV.has_gpu:
    pynvml.nvmlInit()
    NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
    # three n x n fp16 matrices: 8192 -> 384 MiB, fine for any GPU with 8 GiB or more
    N_HEAT = 8192 if ENV.facts.memory_bytes >= 8 * 2**30 else 4096
    print(f"heating workload: {N_HEAT}^3 fp16 matmuls, {HEAT_S} s per run, {RUNS} runs")


def add(x, y):
    """combine_kernel_metrics: if cuBLAS splits one matmul into several kernels, sum them."""
    return x + y

# %% [markdown]
# ## 1. Four scopes, and where each value lands
#
# A collector is a plain function marked with `@nsight.experimental.collect(scope=...)`
# and passed in `info_collectors=[...]`. Its **name** becomes the column name. What it
# receives, and when it is called (`nsight/collection/core.py`, `run_profile_session`):
#
# | scope | called | receives | example here |
# |---|---|---|---|
# | `ONCE` | once, before the first configuration | nothing | `driver_version` |
# | `CONFIG` | once per configuration, before its runs | the configuration (`n`) | `vector_mib`, `size_label` |
# | `RUN` | before **every** run, after the thermal check | the configuration | `sm_clock_mhz`, `gpu_temp_c`, `power_w` |
# | `ANNOTATION` | when `nsight.annotate(...)` is entered, before its NVTX range opens | annotation name, then the configuration | `clock_at_entry_mhz` |
#
# Where the values go (`nsight/transformation.py`, `aggregate_data`):
#
# - `ONCE` values, and any **non-numeric** value, become **one column** named after the
#   collector (non-numeric `CONFIG`/`RUN`/`ANNOTATION` values keep the first value of each row's runs);
# - **numeric** `CONFIG`, `RUN` and `ANNOTATION` values become four columns,
#   `<name>_Avg`, `_Std`, `_Min`, `_Max`, computed over the runs of each row -- a `CONFIG`
#   value gets them too, with `_Std` = 0;
# - the per-run CSV (`output_csv=True`) keeps the raw value of every run, one column per
#   collector; `collected_info.pkl` (next to it) keeps the raw records per run.
#
# NVML reports power in **milliwatts**; `power_w` divides by 1000. The benchmark has two
# annotations so you can see that a `RUN` value is shared by both regions of one run,
# while an `ANNOTATION` value is read separately at each region's entry.

# %%
@nsight.experimental.collect(scope=nsight.CollectionScope.ONCE)
def driver_version():
    version = pynvml.nvmlSystemGetDriverVersion()
    return version.decode() if isinstance(version, bytes) else version


@nsight.experimental.collect(scope=nsight.CollectionScope.CONFIG)
def vector_mib(n):
    return 4 * n / 2**20  # one float32 vector of n elements, in MiB


@nsight.experimental.collect(scope=nsight.CollectionScope.CONFIG)
def size_label(n):
    return f"{n / 2**20:g} Mi elements"  # not a number: stays one column


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def sm_clock_mhz(*config):
    return pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def gpu_temp_c(*config):
    return pynvml.nvmlDeviceGetTemperature(NVML, pynvml.NVML_TEMPERATURE_GPU)


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def power_w(*config):
    return pynvml.nvmlDeviceGetPowerUsage(NVML) / 1000  # NVML reports milliwatts


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def clock_at_entry_mhz(annotation_name, *config):
    return pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)


SCOPES_DIR = os.path.join(OUT_DIR, "scopes", "")  # output_prefix is a string prefix: end a folder with "/"
SIZES = [1 << 20, 1 << 24]
SCOPE_RUNS = 5
NUMERIC = ["vector_mib", "sm_clock_mhz", "gpu_temp_c", "power_w", "clock_at_entry_mhz"]


@nsight.analyze.kernel(configs=SIZES, runs=SCOPE_RUNS, thermal_mode="off", verbosity=SILENT,
                       output_prefix=SCOPES_DIR, output_csv=True,
                       info_collectors=[driver_version, vector_mib, size_label, sm_clock_mhz,
                                        gpu_temp_c, power_w, clock_at_entry_mhz])
def scopes(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with nsight.annotate("x * 2"):
        _ = x * 2.0
    with nsight.annotate("x + 1"):
        _ = x + 1.0


with nt.section("1. Collectors at four scopes: where each value lands") as s:
    ENV.require("profiler")
    df = scopes().to_dataframe()
    raw = pd.read_csv(evidence.newest_output(SCOPES_DIR, "profiled_data", "scopes"))
    print(f"  {nt.rules(ENV.backend)}")
    print("\n  per-run CSV (one row per annotation x configuration x run; first 6 rows):")
    display(raw[["Annotation", "n", "Value", "driver_version", "size_label"] + NUMERIC].head(6))
    has_data = [c for c in NUMERIC if raw[c].notna().any()]
    for c in sorted(set(NUMERIC) - set(has_data)):
        print(f"  {c}: no value in any run -- the collector raised; nsight-python only warned "
              f"and stored None (to_dataframe() then has one empty '{c}' column)")
    print("\n  to_dataframe(), collector columns:")
    for c in ["driver_version", "size_label"] + has_data:
        print(f"    {c:20s} -> {[k for k in df.columns if k == c or k.startswith(c + '_')]}")
    nt.claim("driver_version" in df and "size_label" in df,
             "ONCE and non-numeric values land as one column named after the collector")
    nt.claim(all({f"{c}_{x}" for x in ("Avg", "Std", "Min", "Max")} <= set(df.columns) and c not in df
                 for c in has_data),
             "each numeric CONFIG/RUN/ANNOTATION collector becomes _Avg/_Std/_Min/_Max columns")
    nt.claim(len(raw) == 2 * len(SIZES) * SCOPE_RUNS, "the per-run CSV has one row per annotation, configuration and run",
             f"{len(raw)} rows = 2 x {len(SIZES)} x {SCOPE_RUNS}")
    by_ann = {a: part.reset_index(drop=True) for a, part in raw.groupby("Annotation", sort=False)}
    run_cols = [c for c in ("sm_clock_mhz", "gpu_temp_c", "power_w") if c in has_data]
    nt.claim(by_ann["x * 2"][run_cols].equals(by_ann["x + 1"][run_cols]),
             "a RUN value is read once per run: both annotations of a run carry the same one")
    g = raw.groupby(["Annotation", "n"], sort=False)
    mine = pd.concat({f"{c}_{name}": getattr(g[c], fn)() for c in has_data
                      for name, fn in (("Avg", "mean"), ("Std", "std"), ("Min", "min"), ("Max", "max"))}, axis=1)
    theirs = df.set_index(["Annotation", "n"])[mine.columns].loc[mine.index]
    nt.claim(np.allclose(theirs.to_numpy(float), mine.to_numpy(float), equal_nan=True),
             "the aggregated columns are the mean, std (n-1), min and max of the per-run CSV's values",
             f"{len(has_data)} collectors x 4 statistics x {len(mine)} rows")
    with open(f"{SCOPES_DIR}collected_info.pkl", "rb") as f:
        info = pickle.load(f)
    print(f"\n  collected_info.pkl: {len(info)} records (one per configuration and run); the first:")
    print(f"    {info[0]}")
    nt.claim(len(info) == len(SIZES) * SCOPE_RUNS, "collected_info.pkl keeps one raw record per configuration and run")
    if "clock_at_entry_mhz" in has_data:
        print("\n  clock at annotation entry by region (mean over the runs, MHz):")
        print(df.pivot(index="n", columns="Annotation", values="clock_at_entry_mhz_Avg").to_string())
    s.result = (f"{len(has_data)} numeric collectors -> 4 columns each; driver {df.driver_version.iloc[0]}; "
                f"SM clock {int(raw.sm_clock_mhz.min())}-{int(raw.sm_clock_mhz.max())} MHz over {len(raw)} rows")

# %% [markdown]
# ### Names nsight-python refuses
#
# A collector's name is a column name, so it must not clash with a parameter of the
# benchmark function (that column would be overwritten) or with one of the columns
# nsight-python fills itself (`info_collector.RESERVED_COLUMN_NAMES`). Both are refused with
# a `ProfilerException` when the decorator is *applied* -- before anything runs, so this
# section needs no GPU.

# %%
with nt.section("1b. Collector names that clash are refused at decoration") as s:
    @nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
    def n(*config):  # the same name as the benchmark's parameter
        return 0

    @nsight.experimental.collect(scope=nsight.CollectionScope.ONCE)
    def GPU():  # a column nsight-python fills itself
        return "mine"

    refused = {}
    for bad in (n, GPU):
        try:
            @nsight.analyze.kernel(info_collectors=[bad], thermal_mode="off", verbosity=SILENT)
            def clash(n: int) -> None:
                pass
            refused[bad.__name__] = None
        except nsight.exceptions.ProfilerException as exc:
            refused[bad.__name__] = str(exc)
            print(f"  collector {bad.__name__!r}: ProfilerException: {str(exc).split('. ')[0]}.")
    nt.claim(all(refused.values()), "both names are refused when the decorator is applied")
    reserved = sorted(nsight.info_collector.RESERVED_COLUMN_NAMES)
    print(f"\n  reserved names ({len(reserved)}): {', '.join(reserved)}")
    del n, GPU
    s.result = f"a parameter name and a reserved column ('GPU') are refused; {len(reserved)} reserved names"

# %% [markdown]
# ## 2. The first `RUN` sample can be the idle clock
#
# `RUN`-scope collectors are called **before** each run (`run_profile_session`: thermal
# check, then the `RUN` collectors, then your function). A GPU left idle drops its clocks,
# so the first sample of a series can catch the idle clock; the GPU raises it only once work
# arrives. On the H200 this tutorial was tested on, an SM-clock collector read 345 MHz
# before the first of 30 runs and 1980 MHz before the others.
#
# To make the effect observable we **leave the GPU idle for 3 seconds** (`time.sleep`)
# right before the call. Each run then does 0.25 s of un-annotated fp16 matmuls (they heat
# the GPU and are not measured -- they are outside `nsight.annotate`) and then the measured
# matmul. So the `RUN` sample is taken at the start of a run, the `ANNOTATION` sample right
# before the measured kernel: the second is the closer of the two to the clock the kernel
# ran at. The table shows what your GPU did; nothing is asserted about it, because a GPU that
# does not drop its clock when idle (or drops it more slowly) is not wrong. The cell also looks
# back at section 1's per-run CSV, whose first sample came after the notebook's setup.
#
# The opposite can happen too: under a heavy load a GPU may settle *below* its idle boost
# clock (a power or thermal limit), and then the first sample -- taken before any load -- is
# the highest. Either way a `RUN` sample is the clock *between* runs, not during your kernel;
# to know the clock a kernel ran at, measure it (`gpc__cycles_elapsed.avg.per_second`,
# notebook 04).
#
# The benchmark also records two readings of the GPU's **thermal headroom** (degrees below
# the temperature at which it starts to slow down), taken exactly as nsight-python's thermal
# control reads it (`thermovision.ThermalController`, `device.temperature.margin`), and the
# time each run started. Section 3 needs them.

# %%
THERMO = thermovision.ThermalController()  # nsight's own thermal monitor; used here only to read
THERMO_OK = False                         # set by section 2: can nsight read the headroom here?
OFF = AUTO = None


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def headroom_c(*config):
    return int(THERMO.device.temperature.margin)  # what thermal_mode="auto" compares with thermal_wait


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def headroom_at_entry_c(annotation_name, *config):
    return int(THERMO.device.temperature.margin)


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def run_start_s(*config):
    return time.monotonic()


def keep_busy(a, b, seconds):
    """fp16 matmuls outside any annotation until `seconds` have passed: heat, not measurement."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(2):
            torch.mm(a, b)
        torch.cuda.synchronize()


def make_heated(mode: str, folder: str):
    """The heating benchmark with thermal_mode=mode, writing its CSVs under folder."""
    collectors = [run_start_s, sm_clock_mhz, gpu_temp_c, power_w, clock_at_entry_mhz]
    if THERMO_OK:
        collectors += [headroom_c, headroom_at_entry_c]

    @nsight.analyze.kernel(runs=RUNS, thermal_mode=mode, verbosity=SILENT, combine_kernel_metrics=add,
                           output_prefix=folder, output_csv=True, info_collectors=collectors)
    def heated(n: int) -> None:
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        keep_busy(a, b, HEAT_S)  # not annotated: not measured
        with nsight.annotate("fp16 matmul"):
            _ = a @ b
    return heated


def profile_heated(mode: str) -> dict:
    """Idle IDLE_S seconds, then RUNS runs of the heating benchmark; raw runs and wall time."""
    folder = os.path.join(OUT_DIR, f"thermal_{mode}", "")
    bench = make_heated(mode, folder)
    time.sleep(IDLE_S)  # let the GPU idle, as it would between two cells
    before = int(THERMO.device.temperature.margin) if THERMO_OK else None
    start = time.perf_counter()
    df = bench(N_HEAT).to_dataframe()
    wall = time.perf_counter() - start
    raw = pd.read_csv(evidence.newest_output(folder, "profiled_data", "heated"))
    return {"mode": mode, "df": df, "raw": raw, "wall": wall, "headroom_before": before}


with nt.section("2. The first RUN sample can be the idle clock") as s:
    ENV.require("profiler")
    THERMO_OK = THERMO.init()  # nsight's own check: can it read the thermal headroom on this GPU?
    print(f"  nsight's thermal monitor can read the headroom here: {THERMO_OK}")
    OFF = profile_heated("off")
    raw = OFF["raw"]
    print(f"  {nt.rules(ENV.backend)}")
    print(f"  (slept {IDLE_S:.0f} s before the call; {RUNS} runs in {OFF['wall']:.1f} s)\n")
    first5 = raw[["sm_clock_mhz", "clock_at_entry_mhz", "Value"]].head(5).assign(Value=raw.Value.head(5) / 1e3)
    print(first5.rename(columns={"sm_clock_mhz": "RUN sample MHz", "clock_at_entry_mhz": "ANNOTATION sample MHz",
                                 "Value": "kernel us"}).rename_axis("run").to_string())
    nt.claim(len(raw) == RUNS and raw.sm_clock_mhz.notna().all(), "one RUN-scope clock sample per run",
             f"{raw.sm_clock_mhz.notna().sum()} samples, {RUNS} runs")
    first, rest = raw.sm_clock_mhz.iloc[0], raw.sm_clock_mhz.iloc[1:].median()
    entry0 = raw.clock_at_entry_mhz.iloc[0]
    t0, t_rest = raw.Value.iloc[0], raw.Value.iloc[1:].median()
    scopes_csv = evidence.newest_output(SCOPES_DIR, "profiled_data", "scopes") if os.path.isdir(SCOPES_DIR) else None
    if scopes_csv:  # section 1's runs: the first one came right after the notebook's setup
        runs1 = pd.read_csv(scopes_csv)
        clocks1 = runs1[runs1.Annotation == runs1.Annotation.iloc[0]].sm_clock_mhz  # one row per config and run
        print(f"\n  section 1: first RUN sample {clocks1.iloc[0]} MHz, median of the others {clocks1.iloc[1:].median():.0f} MHz"
              + (" -- the idle clock, caught" if clocks1.iloc[0] < 0.9 * clocks1.iloc[1:].median() else ""))
    if first < 0.9 * rest:
        print(f"  here: the first RUN sample ({first} MHz) is below the median of the others ({rest:.0f} MHz) "
              f"-- the clock of a GPU that had been idle")
    elif first > 1.1 * rest:
        print(f"  here: the first RUN sample ({first} MHz) is ABOVE the median of the others ({rest:.0f} MHz): the "
              "GPU had not dropped its clock yet, and under this load it settles lower (power or thermal limit)")
    else:
        print(f"  here: the first RUN sample ({first} MHz) is close to the median of the others ({rest:.0f} MHz)")
    print(f"  run 0: ANNOTATION sample {entry0} MHz; its kernel took {t0 / 1e3:,.1f} us vs a median of "
          f"{t_rest / 1e3:,.1f} us for runs 1-{RUNS - 1} ({t0 / t_rest:.2f}x)")
    s.result = (f"SM clock before run 0: {first} MHz (RUN scope), {entry0} MHz at the annotation; "
                f"median of runs 1-{RUNS - 1}: {rest:.0f} MHz")

# %% [markdown]
# ## 3. `thermal_mode="off"` against `"auto"` (the default)
#
# What `"auto"` does, from `nsight/thermovision.py`: before **every** run it reads the
# GPU's thermal headroom (T.Limit: degrees left before the GPU slows itself down). If the
# headroom is at or below `thermal_wait` (default 10 °C) it **pauses** -- polling every
# 0.5 s -- until the headroom is back to `thermal_cont` (default 20 °C; `"auto"` adapts that
# value, `"manual"` keeps it). It waits at most `thermal_timeout` (180 s) at a time; `"auto"`
# then lowers `thermal_cont` by 3 °C and keeps waiting, down to 12 °C, before giving up with
# `CoolingTimeoutError`. If nsight cannot read the headroom, thermal control stays off
# (usually with a warning).
#
# So a pause needs a headroom reading of 10 °C or less right before a run. Our
# `ANNOTATION`-scope reading is taken just before each run's measured kernel, at most a
# kernel's length before nsight checks again for the next run; our `RUN`-scope reading comes
# right *after* nsight's check. We run the same 30-run workload with `"auto"`, after the same
# 3-second idle, and compare. The `"auto"` run comes second, so it starts on a GPU that was
# working a few seconds earlier: compare the starting temperatures in the table.
#
# Spread is shown two ways: `RelativeStdDevPct` (nsight's, standard deviation / mean) and a
# robust one, 1.4826 × MAD / median, which one slow run cannot dominate. If the headroom
# never came near 10 °C, auto mode had nothing to do, and any difference between the two
# rows is run-to-run variation, not thermal control.

# %%
def summarise(run: dict) -> dict:
    raw, row = run["raw"], run["df"].iloc[0]
    v = raw.Value.to_numpy(float)
    med = np.median(v)
    gaps = np.diff(raw.run_start_s.to_numpy(float))
    out = {"mode": run["mode"], "median_us": med / 1e3, "RSD_%": row.RelativeStdDevPct,
           "robust_%": 100 * 1.4826 * np.median(np.abs(v - med)) / med,
           "wall_s": run["wall"], "temp_C": f"{int(raw.gpu_temp_c.min())}-{int(raw.gpu_temp_c.max())}",
           "max_gap_s": gaps.max(), "median_gap_s": np.median(gaps)}
    if "headroom_c" in raw:
        out["headroom_min_C"] = int(min(raw.headroom_c.min(), raw.headroom_at_entry_c.min()))
    return out


with nt.section("3. thermal_mode off vs auto: spread, wall time, headroom") as s:
    ENV.require("profiler")
    if OFF is None:
        raise nt.Skip("section 2 did not run, so there is no thermal_mode='off' series to compare with",
                      "run section 2 first (see its SKIPPED reason)", needs="profiler")
    wait, cont = THERMO.thermal_wait, THERMO.thermal_cont
    nt.claim((wait, cont) == (10, 20), "nsight pauses at <= 10 C of headroom and resumes at 20 C by default",
             f"thermal_wait={wait}, thermal_cont={cont}")
    AUTO = profile_heated("auto")
    print(f"  {nt.rules(ENV.backend)}\n")
    table = pd.DataFrame([summarise(OFF), summarise(AUTO)])
    print(table.to_string(index=False, float_format=lambda x: f"{x:,.3f}"))
    if not THERMO_OK:
        verdict = "this GPU does not report its thermal headroom, so thermal_mode='auto' ran exactly like 'off'"
        short = "no headroom reading here: auto == off"
    else:
        h = AUTO["raw"]
        nt.claim(h.headroom_c.min() >= wait,
                 "in auto mode every run started with the headroom above thermal_wait (nsight checked just before)",
                 f"lowest RUN-scope reading {int(h.headroom_c.min())} C, thermal_wait {wait} C")
        # what nsight saw before each run: our reading just before the call, then each run's reading just
        # before its kernel (nsight checks again as soon as that kernel is launched)
        near = [AUTO["headroom_before"]] + list(h.headroom_at_entry_c.iloc[:-1])
        lowest = int(min(near))
        if lowest > wait + 1:
            verdict = (f"auto mode had nothing to do: the headroom before a run never went below {lowest} C, "
                       f"{lowest - wait} C above the {wait} C pause threshold")
            short = f"auto had nothing to do (lowest headroom {lowest} C vs {wait} C threshold)"
        else:
            gap, typical = table.max_gap_s.iloc[1], table.median_gap_s.iloc[1]
            paused = gap > typical + 0.4  # a pause sleeps at least 0.5 s on top of a run's own time
            verdict = (f"the headroom came down to {lowest} C, within reach of the {wait} C threshold; the largest "
                       f"gap between run starts was {gap:.2f} s (median {typical:.2f} s): "
                       + ("long enough to hold a cooling pause" if paused else
                          "no gap long enough for a cooling pause (one adds at least 0.5 s)"))
            short = (f"headroom down to {lowest} C; " + ("a pause-sized gap" if paused else "no pause-sized gap")
                     + f" ({gap:.2f} s)")
    print(f"\n  {verdict}")
    d_wall = AUTO["wall"] - OFF["wall"]
    print(f"  wall time: auto {AUTO['wall']:.1f} s vs off {OFF['wall']:.1f} s ({d_wall:+.1f} s)")
    if short.startswith(("auto had nothing", "no headroom")):
        print("  no pause happened, so this difference is not cooling time; auto mode's only work here was "
              "one headroom read before each run")
    print(f"  temperature at the first run: off {int(OFF['raw'].gpu_temp_c.iloc[0])} C, "
          f"auto {int(AUTO['raw'].gpu_temp_c.iloc[0])} C")
    s.result = (f"RSD off {table['RSD_%'].iloc[0]:.2f}% / auto {table['RSD_%'].iloc[1]:.2f}%, "
                f"wall {OFF['wall']:.1f}/{AUTO['wall']:.1f} s; {short}")

# %% [markdown]
# ## 4. Per-run kernel time against SM clock and temperature
#
# The per-run CSV of each series, run by run: the measured kernel's time, the SM clock
# (the `RUN` sample at the start of the run and the `ANNOTATION` sample right before the
# kernel), and the GPU temperature.
#
# Below the plot, Pearson correlations of kernel time with the clock at annotation entry and
# with temperature, over all runs and without run 0 (which may carry the idle clock). With
# n = 30, a correlation is distinguishable from zero at the 5 % level only if |r| exceeds
# about 0.36 (from Student's t with n − 2 degrees of freedom), and a steady GPU gives a
# clock and a temperature that hardly move -- so expect mostly noise, and read r together
# with its p-value, not alone.

# %%
def correlation(x: pd.Series, y: pd.Series) -> tuple[float, float] | None:
    """Pearson r and its p-value, or None if either series is constant."""
    if x.nunique() < 2 or y.nunique() < 2:
        return None
    r, p = stats.pearsonr(x.to_numpy(float), y.to_numpy(float))
    return float(r), float(p)


with nt.section("4. Plot: time, SM clock and temperature per run; correlations") as s:
    ENV.require("profiler")
    series = {run["mode"]: run["raw"] for run in (OFF, AUTO) if run is not None}
    if not series:
        raise nt.Skip("sections 2 and 3 produced no series", "run sections 2 and 3 first", needs="profiler")
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for i, (mode, raw) in enumerate(series.items()):
        x = np.arange(len(raw))
        axes[0].plot(x, raw.Value / 1e3, "o-", ms=3, color=f"C{i}", label=f"thermal_mode={mode!r}")
        axes[1].plot(x, raw.clock_at_entry_mhz, "o-", ms=3, color=f"C{i}", label=f"{mode}: at annotation entry")
        axes[1].plot(x, raw.sm_clock_mhz, "x", ms=5, color=f"C{i}", label=f"{mode}: RUN sample")
        axes[2].plot(x, raw.gpu_temp_c, "o-", ms=3, color=f"C{i}", label=mode)
    axes[0].set_ylabel("kernel time (us)")
    axes[1].set_ylabel("SM clock (MHz)")
    axes[2].set_ylabel("GPU temperature (C)")
    axes[2].set_xlabel("run")
    for ax in axes:
        ax.legend(fontsize=7)
    axes[0].set_title(f"{N_HEAT}^3 fp16 matmul after {HEAT_S} s of heating per run ({ENV.backend} backend)")
    plt.tight_layout()
    plt.show()
    print(f"  {nt.rules(ENV.backend)}")
    checks, lines = [], []
    for mode, raw in series.items():
        for label, part in (("all runs", raw), ("runs 1+", raw.iloc[1:])):
            n = len(part)
            t_crit = stats.t.ppf(0.975, n - 2)
            r_crit = t_crit / np.sqrt(n - 2 + t_crit**2)
            for other in ("clock_at_entry_mhz", "gpu_temp_c"):
                found = correlation(part.Value, part[other])
                if found is None:
                    lines.append(f"  {mode:4s} {label:8s} time vs {other:18s}: constant over n={n} -> no correlation")
                    continue
                r, p = found
                checks.append((abs(r) > r_crit) == (p < 0.05))
                lines.append(f"  {mode:4s} {label:8s} time vs {other:18s}: r = {r:+.2f}  p = {p:.2f}  n = {n} "
                             f"({'distinguishable from 0' if p < 0.05 else 'not distinguishable from 0'}; "
                             f"|r| must exceed {r_crit:.2f})")
    print("\n".join(lines))
    if checks:
        nt.claim(all(checks), "the critical |r| from Student's t and scipy's p-value agree on every correlation",
                 f"{len(checks)} correlations")
    s.result = f"{len(series)} series of {RUNS} runs plotted; {len(checks)} correlations with n and p"

# %% [markdown]
# ## Takeaways
#
# - Info collectors put the *conditions* of a measurement next to it: driver, clocks,
#   temperature, power, whatever you can read. Numeric values per configuration, run or
#   annotation are aggregated into `_Avg/_Std/_Min/_Max`; the per-run CSV keeps every value.
# - A collector that raises does not stop profiling: nsight-python warns once and stores
#   None. Check your collector columns for empty values.
# - `RUN` samples are taken at the **start** of a run. The first one can catch an idle
#   GPU; a sample closer to the kernel (`ANNOTATION` scope) is a better description of the
#   clock it ran at. A warm-up run before measuring avoids the question.
# - `thermal_mode="auto"` only acts when the headroom drops to `thermal_wait` (10 °C). On a
#   well-cooled GPU it has nothing to do; on a hot one it buys stable clocks with wall time.
#   Read the headroom before crediting or blaming it for a difference.
# - Thirty runs of a steady GPU say little about correlations: give n and p with every r.
#
# ## Try it
#
# - Set `IDLE_S = 0` and run sections 2-4 again: does the first `RUN` sample still show the
#   idle clock?
# - Raise `HEAT_S` (say to 2.0) to heat the GPU longer and watch the temperature and the
#   headroom; on a small or poorly cooled GPU, `thermal_mode="auto"` may then start pausing.
#
# Docs: [nsight-python](https://docs.nvidia.com/nsight-python/) (`nsight.analyze.kernel`:
# `info_collectors`, `thermal_mode`, `output_csv`); example
# [13_custom_info_collectors.py](https://github.com/NVIDIA/nsight-python/blob/main/examples/13_custom_info_collectors.py).
# Source:
# [info_collector.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/info_collector.py),
# [thermovision.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/thermovision.py),
# [collection/core.py](https://github.com/NVIDIA/nsight-python/blob/main/nsight/collection/core.py).

# %%
nt.summary();
