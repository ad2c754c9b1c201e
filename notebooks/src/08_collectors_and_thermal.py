# %% [markdown]
# # 08 · Info collectors and thermal control: what the GPU was doing while you measured
#
# **What you will learn**
# - how to attach your own values to every measurement with
#   `@nsight.experimental.collect(scope=...)` at each of the four scopes -- `ONCE`,
#   `CONFIG`, `RUN`, `ANNOTATION` -- and where each value lands: a plain column, four
#   aggregated `<name>_Avg/_Std/_Min/_Max` columns, the per-run CSV (and, with nsight-python
#   1.1.0 only, `collected_info.pkl`);
# - which collector names nsight-python refuses, and that a collector that *raises* only
#   gets a warning and an empty column;
# - what the first `RUN`-scope sample of the SM clock says after the GPU sat idle, and what
#   the `ANNOTATION` scope sees instead -- on your GPU, and why a clock that setup found held
#   cannot answer the question at all;
# - what `thermal_mode="auto"` (the default) does, read from nsight-python's source, and
#   whether it had anything to do on your GPU: thermal headroom, pauses, spread (standard
#   and robust) and wall time against `thermal_mode="off"`;
# - how to ask whether per-run kernel time follows the SM clock or the temperature without
#   fooling yourself: rank correlation, the warm-up trend removed, a correction for the
#   number of tests, and series of one experiment pooled so the verdict holds from run to run.
#
# Info collectors and thermal control work with either backend (Nsight Compute or CUPTI).
# The collectors read the GPU through NVML (`pynvml`), which needs no profiler. Every file
# this notebook writes goes into its work folder (printed by the setup cell).

# %%
{{SETUP}}

# %%
import time
from pathlib import Path

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import pynvml
import torch
from nsight import thermovision
from scipy import stats

from nspy_tutorial import evidence

SILENT = nsight.VerbosityLevel.SILENT
RUNS = 20  # runs per thermal series: run 0, then 19 for the rank tests (more: more power and time)
IDLE_S = 1.5  # seconds the GPU is left idle before each series (sections 2 and 3)
HEAT_S = 0.1  # seconds of un-annotated matmuls before each measured one: keeps the GPU under load
# setup watched the SM clock before anything ran: free, or held (and at what), as its banner said
CLOCK_SAID = ENV.clock.line().split(":")[0] if ENV.clock else "not read"
if ENV.has_gpu:
    torch.cuda.init()  # CUDA first: nt.nvml_handle() then finds this process's GPU by its UUID
    pynvml.nvmlInit()
    NVML = nt.nvml_handle()  # not NVML's device 0, which may be another GPU of a shared server
    LIMIT_W = pynvml.nvmlDeviceGetEnforcedPowerLimit(NVML) / 1000  # the power cap enforced now
    # three n x n fp16 matrices: 8192 -> 384 MiB of the GPU's free memory
    N_HEAT = 8192 if torch.cuda.mem_get_info()[0] >= 2 * 2**30 else 4096
    print(f"heating workload: {N_HEAT}^3 fp16 matmuls, {HEAT_S} s per run, {RUNS} runs per series")


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
# | `RUN` | before **every** run, after the thermal check | the configuration | `sm_clock_mhz`, `gpu_temp_c`, `power_w`, `run_start_s` |
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
#   collector. nsight-python 1.1.0 also writes `collected_info.pkl` next to it, the raw records
#   per run, and reads the values back from that file; 1.1.1 and later pass them in memory and
#   write no such file. So read collector values from the table (`to_dataframe()`, the CSVs),
#   not from the pickle: the cell opens it only where it exists, and says which case it met.
#
# NVML reports power in **milliwatts**; `power_w` divides by 1000. The collectors read the
# GPU this process runs on (`nt.nvml_handle()`, matched by UUID), not NVML's device 0. The
# benchmark has two annotations so you can see that a `RUN` value is shared by both regions
# of one run, while an `ANNOTATION` value is read separately at each region's entry.
#
# NVML's clock, temperature and power readings do not change within the milliseconds these
# runs take, so every row may carry the same three values, and a check on them could not
# tell a value read once per run from one read once per call. So one more `RUN` collector,
# `run_start_s`, reads `time.monotonic()`: its value must differ from run to run, and the
# check that both annotations of a run carry the same `RUN` values can now fail.


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


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def run_start_s(*config):
    return time.monotonic()


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def clock_at_entry_mhz(annotation_name, *config):
    return pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)


# output_prefix is a string prefix: a folder (in the work folder) ends with "/"
SCOPES_DIR, SIZES, SCOPE_RUNS = "scopes/", [1 << 20, 1 << 24], 5
RUN_SCOPE = ["sm_clock_mhz", "gpu_temp_c", "power_w", "run_start_s"]
NUMERIC = ["vector_mib", *RUN_SCOPE, "clock_at_entry_mhz"]
ALL = [driver_version, vector_mib, size_label, sm_clock_mhz, gpu_temp_c, power_w, run_start_s]


@nsight.analyze.kernel(
    configs=SIZES,
    runs=SCOPE_RUNS,
    thermal_mode="off",
    verbosity=SILENT,
    output_prefix=SCOPES_DIR,
    output_csv=True,
    info_collectors=[*ALL, clock_at_entry_mhz],
)
def scopes(n: int) -> None:
    x = torch.randn(n, device="cuda")
    with nsight.annotate("x * 2"):
        _ = x * 2.0
    with nsight.annotate("x + 1"):
        _ = x + 1.0


with nt.section("1. Collectors at four scopes: where each value lands") as s:
    ENV.require("profiler")
    pkl = Path(f"{SCOPES_DIR}collected_info.pkl")
    pkl.unlink(missing_ok=True)  # so that a pickle found below was written by this call
    df = scopes().to_dataframe()
    raw = pd.read_csv(evidence.newest_output(SCOPES_DIR, "profiled_data", "scopes"))
    print(f"  {nt.rules(ENV.backend)}\n\n  per-run CSV, a row per annotation x config x run:")
    print(raw[["Annotation", "n", "Value", *NUMERIC[1:]]].head(6).to_string(index=False))
    has_data = [c for c in NUMERIC if raw[c].notna().any()]
    raised = sorted(set(NUMERIC) - set(has_data))
    print(f"  collectors that raised (nsight only warned, stored None): {raised}")
    print("\n  to_dataframe(), collector columns:")
    for c in ["driver_version", "size_label", *has_data]:
        print(f"    {c:20s} -> {[k for k in df.columns if k == c or k.startswith(c + '_')]}")
    one = "ONCE and non-numeric values land as one column named after the collector"
    nt.claim("driver_version" in df and "size_label" in df, one)
    four = [{f"{c}_{x}" for x in ("Avg", "Std", "Min", "Max")} <= set(df.columns) for c in has_data]
    four_said = "each numeric CONFIG/RUN/ANNOTATION collector becomes _Avg/_Std/_Min/_Max columns"
    nt.claim(all(four) and not set(has_data) & set(df.columns), four_said)
    rows = f"{len(raw)} rows = 2 x {len(SIZES)} x {SCOPE_RUNS}"
    per_row = "the per-run CSV has one row per annotation, configuration and run"
    nt.claim(len(raw) == 2 * len(SIZES) * SCOPE_RUNS, per_row, rows)
    by_ann = [part.reset_index(drop=True) for _, part in raw.groupby("Annotation", sort=False)]
    run_cols = [c for c in RUN_SCOPE if c in has_data]
    same = by_ann[0][run_cols].equals(by_ann[1][run_cols]) and by_ann[0].run_start_s.is_unique
    once = "a RUN value is read once per run: both annotations share it, a new one each run"
    nt.claim(same, once)
    g = raw.groupby(["Annotation", "n"], sort=False)
    named = (("Avg", "mean"), ("Std", "std"), ("Min", "min"), ("Max", "max"))
    mine = {f"{c}_{name}": getattr(g[c], fn)() for c in has_data for name, fn in named}
    mine = pd.concat(mine, axis=1)
    theirs = df.set_index(["Annotation", "n"])[mine.columns].loc[mine.index]
    agree = np.allclose(theirs.to_numpy(float), mine.to_numpy(float), equal_nan=True)
    stat = "the aggregated columns are the mean, std (n-1), min and max of the per-run CSV's values"
    nt.claim(agree, stat, f"{len(has_data)} collectors x 4 statistics x {len(mine)} rows")
    # nsight-python 1.1.0 writes it; 1.1.1 and later pass the values in memory and write none
    if pkl.exists():
        info = pd.read_pickle(pkl)
        print(f"\n  collected_info.pkl: {len(info)} records, one a config and run; the first:")
        print(f"    {str(info[0])[:110]}")
        nt.claim(len(info) == len(SIZES) * SCOPE_RUNS, "collected_info.pkl has a record per run")
    else:
        print(f"\n  no collected_info.pkl (nsight-python {nsight.__version__}): read the table")
    low, high = int(raw.sm_clock_mhz.min()), int(raw.sm_clock_mhz.max())
    driver = df.driver_version.iloc[0]
    s.result = (
        f"{len(has_data)} numeric collectors -> 4 columns each; driver {driver}; "
        f"SM clock {low}-{high} MHz over {len(raw)} rows (setup: {CLOCK_SAID})"
    )


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
    print(f"\n  reserved names ({len(reserved)}): {', '.join(reserved[:10])},")
    print(f"    {', '.join(reserved[10:])}")
    s.result = f"a parameter's name and a reserved column ('GPU') refused; {len(reserved)} reserved"


# %% [markdown]
# ## 2. The first `RUN` sample after an idle GPU
#
# `RUN`-scope collectors are called **before** each run (`run_profile_session`: thermal
# check, then the `RUN` collectors, then your function). So the first sample of a series
# describes the GPU *before* any of the series' work: if the GPU dropped its clock while
# idle, that sample catches the idle clock; if it kept a high boost clock while idle and
# settles lower under a heavy load (a power or thermal limit), the first sample is the
# *highest*. Which one your GPU does is what this section shows; neither is wrong.
#
# To make the question sharp we **leave the GPU idle for `IDLE_S` seconds** (`time.sleep`)
# right before the call. Each run then does `HEAT_S` seconds of un-annotated fp16 matmuls
# (they keep the GPU under load and are not measured -- they are outside `nsight.annotate`)
# and then the measured matmul. So the `RUN` sample is taken at the start of a run, the
# `ANNOTATION` sample right before the measured kernel.
#
# What to look for in the table: the first row's `RUN` sample against the others, and the
# first row's kernel time against the others. The cell prints which way it went. Either
# way a `RUN` sample is the clock *between* runs, not during your kernel. Is the `ANNOTATION`
# sample, read right before the kernel, any closer? A compute-bound matmul's time goes as
# 1/clock, so run 0's time against the others' implies the clock run 0 ran at (if the others'
# samples are right); the cell prints it beside run 0's `ANNOTATION` sample. Far apart, the
# sample is a weak proxy for the kernel's clock; to know that clock, measure it
# (`gpc__cycles_elapsed.avg.per_second`, notebook 04).
#
# One case cannot answer the question at all: a clock that is **held** (locked by an
# administrator, or left locked by a profiler that was killed). The setup cell watched the
# SM clock before anything ran and says so in its banner (`ENV.clock`): a held clock neither
# drops while idle nor rises above the lock, so a first sample at the lock says nothing about
# an idle GPU. The cell then says *held* instead of "no idle-clock effect", and does not judge
# the `ANNOTATION` sample either (a clock that cannot move cannot show NVML lagging behind it).
# A series whose samples never moved at all is called *pinned* for the same reason.
#
# The benchmark also records two readings of the GPU's **thermal headroom** (degrees below
# the temperature at which it starts to slow down), taken exactly as nsight-python's thermal
# control reads it (`thermovision.ThermalController`, `device.temperature.margin`), and the
# time each run started. Section 3 needs them.

# %%
THERMO = thermovision.ThermalController()  # nsight's own thermal monitor; used here only to read
# set by sections 2 and 3: headroom readable? auto never paused? the two series
THERMO_OK, POOL, OFF, AUTO = False, False, None, None


@nsight.experimental.collect(scope=nsight.CollectionScope.RUN)
def headroom_c(*config):
    return int(THERMO.device.temperature.margin)  # what "auto" compares with thermal_wait


@nsight.experimental.collect(scope=nsight.CollectionScope.ANNOTATION)
def headroom_at_entry_c(annotation_name, *config):
    return int(THERMO.device.temperature.margin)


def profile_heated(mode: str) -> dict:
    """Idle IDLE_S seconds, then RUNS runs of the heated matmul with thermal_mode=mode; raw runs and wall time."""
    collectors = [run_start_s, sm_clock_mhz, gpu_temp_c, power_w, clock_at_entry_mhz]
    collectors += [headroom_c, headroom_at_entry_c] if THERMO_OK else []

    # combine_kernel_metrics: if cuBLAS splits the matmul, its kernels' times add up
    @nsight.analyze.kernel(
        runs=RUNS,
        thermal_mode=mode,
        verbosity=SILENT,
        output_prefix=f"thermal_{mode}/",
        output_csv=True,
        info_collectors=collectors,
        combine_kernel_metrics=lambda x, y: x + y,
    )
    def heated(n: int) -> None:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
        end = time.perf_counter() + HEAT_S
        while time.perf_counter() < end:  # load outside any annotation: not measured
            torch.mm(a, b)
            torch.cuda.synchronize()
        with nsight.annotate("fp16 matmul"):
            _ = a @ b

    time.sleep(IDLE_S)  # let the GPU idle, as it would between two cells
    before = int(THERMO.device.temperature.margin) if THERMO_OK else None
    start = time.perf_counter()
    df = heated(N_HEAT).to_dataframe()
    wall = time.perf_counter() - start
    raw = pd.read_csv(evidence.newest_output(f"thermal_{mode}/", "profiled_data", "heated"))
    return {"mode": mode, "df": df, "raw": raw, "wall": wall, "headroom_before": before}


def first_sample(raw: pd.DataFrame, clock=None) -> str:
    """Which way the first RUN-scope clock sample went against the median of the others, in words, where the data
    can show it: not on a clock setup found held (`clock`, ENV.clock), nor on one that never moved."""
    first, rest = raw.sm_clock_mhz.iloc[0], raw.sm_clock_mhz.iloc[1:].median()
    seen = f"({first:.0f} vs {rest:.0f} MHz)"
    if clock is not None and clock.state == "held":
        return f"HELD at {clock.held_mhz:,} MHz {seen}: held even idle, so no idle effect can show"
    if raw.sm_clock_mhz.nunique() == 1:
        return f"PINNED {seen}: every sample read the same clock, so no idle-clock effect can show"
    if first < 0.9 * rest:
        return f"BELOW the others' median {seen}: the clock of a GPU that had been idle"
    if first > 1.1 * rest:
        return f"ABOVE the others' median {seen}: kept while idle; under load it settles lower"
    return f"within 10 % of the others' median {seen}: no idle-clock effect seen"


def entry_proxy(raw: pd.DataFrame, clock=None) -> tuple[float, str]:
    """The clock run 0's time implies (time ~ 1/clock, from runs 1+'s medians); is its ANNOTATION sample within 10 %?
    Not tested on a clock setup found held: a clock that cannot move cannot show NVML lagging behind it."""
    entry = raw.clock_at_entry_mhz
    implied = entry.iloc[1:].median() * raw.Value.iloc[1:].median() / raw.Value.iloc[0]
    if clock is not None and clock.state == "held":
        return implied, "not tested: the clock is held"
    return implied, "close" if abs(entry.iloc[0] / implied - 1) <= 0.1 else "weak proxy"


with nt.section("2. The first RUN sample after an idle GPU") as s:
    ENV.require("profiler")
    THERMO_OK = THERMO.init()  # nsight's own check: can it read the thermal headroom on this GPU?
    print(f"  nsight's thermal monitor can read the headroom here: {THERMO_OK}")
    print(f"  setup's reading of the SM clock: {CLOCK_SAID}")
    OFF = profile_heated("off")
    raw = OFF["raw"]
    print(f"  {nt.rules(ENV.backend)}")
    print(f"  (slept {IDLE_S:g} s before the call; {RUNS} runs in {OFF['wall']:.1f} s)\n")
    first_runs = raw[["sm_clock_mhz", "clock_at_entry_mhz"]].assign(kernel_us=raw.Value / 1e3)
    print(first_runs.head(5).round(1).to_string())
    samples = f"{raw.sm_clock_mhz.notna().sum()} samples, {RUNS} runs"
    one_each = len(raw) == RUNS and raw.sm_clock_mhz.notna().all()
    nt.claim(one_each, "one RUN-scope clock sample per run", samples)
    t0, t_rest = raw.Value.iloc[0], raw.Value.iloc[1:].median()
    implied, proxy = entry_proxy(raw, ENV.clock)
    went, sample0 = first_sample(raw, ENV.clock), raw.clock_at_entry_mhz.iloc[0]
    print(f"\n  the first RUN sample is {went}")
    ratio = f"{t0 / t_rest:.2f}x the median of runs 1-{RUNS - 1} ({t_rest / 1e3:,.1f} us)"
    print(f"  run 0: kernel {t0 / 1e3:,.1f} us, {ratio}")
    sampled = f"its ANNOTATION sample read {sample0:.0f} MHz: {proxy}"
    print(f"  time ~ 1/clock puts run 0 at {implied:.0f} MHz; {sampled}")
    s.result = f"first RUN sample {went.split(':')[0]}; run 0 {t0 / t_rest:.2f}x the others; ANNOTATION: {proxy}"


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
# So a pause needs a headroom reading at or below `thermal_wait` right before a run. Our
# readings bracket nsight's: one just before the call, then each run's `ANNOTATION` reading,
# one kernel before nsight checks again for the next run. A pause also shows in time: it
# sleeps at least 0.5 s, so the gap between two run starts grows. We run the same workload
# with `"auto"`, after the same idle, and compare. The `"auto"` series comes second, on a GPU
# that was working a few seconds earlier: compare the starting temperatures too.
#
# Spread is shown two ways: `RelativeStdDevPct`, nsight's
# [RSD](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#rsd) (relative standard deviation: the standard deviation in % of the mean),
# and a robust one, 1.4826 × [MAD](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#mad) / median. The MAD (median absolute deviation)
# is the median distance of the runs from their median; times 1.4826 it estimates the standard
# deviation of normally distributed runs, and one slow run cannot dominate it. Look at both: a big
# RSD with a small robust spread is one or two outliers, not a noisy series. **If auto never
# paused, it had nothing to do, and any difference between the two rows is run-to-run
# variation, not thermal control.**
#
# If no thermal limit was reached, what holds the clock under this load? The `power_W`
# column is `power_w`'s range, and `top_power_%_of_cap` its highest sample against the power
# cap the GPU enforces (`nvmlDeviceGetEnforcedPowerLimit`). A highest sample at or near the cap,
# with the headroom far above `thermal_wait`, says power, not temperature, sets the clock.
# NVML's power reading is an average over a recent window, so it can trail a short burst. And
# the cap is enforced on power averaged over a window too, not on every instant, so a single
# sample can sit a little *above* the cap without anything being wrong. The result line says so
# where one does.


# %%
def robust_spread_pct(values) -> float:
    """1.4826 x MAD / median, in %: the standard deviation of a normal sample, without the pull of outliers."""
    values = np.asarray(values, float)
    return 100 * stats.median_abs_deviation(values, scale="normal") / np.median(values)


def summarise(run: dict) -> dict:
    """One series in a row: median time, RSD and robust spread, ranges the collectors read, top power."""
    raw = run["raw"]
    out = {"mode": run["mode"], "median_us": raw.Value.median() / 1e3}
    out["RSD_%"] = run["df"].RelativeStdDevPct.iloc[0]
    out["robust_%"] = robust_spread_pct(raw.Value)
    ranges = {"temp_C": "gpu_temp_c", "clock_MHz": "clock_at_entry_mhz"}
    for name, c in ranges.items():
        out[name] = f"{raw[c].min():.0f}-{raw[c].max():.0f}"
    out["top_power_%_of_cap"] = 100 * raw.power_w.max() / LIMIT_W
    if "headroom_c" in raw:
        low = min(raw.headroom_c.min(), raw.headroom_at_entry_c.min())
        out["headroom_C"] = f"{int(low)}-{int(raw.headroom_c.max())}"
    return out


def pause_evidence(run: dict, wait: int) -> tuple[int, int, str]:
    """(lowest headroom just before one of nsight's checks, gaps long enough for a pause, verdict in words)."""
    raw = run["raw"]
    # the headroom just before each of nsight's checks: before the call, then each run's ANNOTATION reading
    lowest = int(np.nanmin([run["headroom_before"], *raw.headroom_at_entry_c.iloc[:-1]]))
    gaps = np.diff(raw.run_start_s.to_numpy(float))
    long = int((gaps > np.median(gaps) + 0.4).sum())  # a pause sleeps at least 0.5 s more
    if lowest <= wait:
        reason = f"the headroom came down to {lowest} °C (thermal_wait {wait} °C)"
        gap = f"{long} gap(s) between run starts long enough to hold a cooling pause"
        return lowest, long, f"auto had reason to pause: {reason}; {gap}"
    above = f"the headroom before nsight's checks never went below {lowest} °C, above"
    rows = "the rows differ by run-to-run variation, not by thermal control"
    verdict = f"auto never paused: {above} its thermal_wait of {wait} °C; {rows}"
    return lowest, long, verdict + (f" ({long} long gap(s) from something else)" if long else "")


with nt.section("3. thermal_mode off vs auto: spread, wall time, headroom") as s:
    ENV.require("profiler")
    if OFF is None:
        why = "section 2 did not run, so there is no thermal_mode='off' series to compare with"
        raise nt.Skip(why, "run section 2 first (see its SKIPPED reason)", needs="profiler")
    wait, cont = THERMO.thermal_wait, THERMO.thermal_cont
    defaults = "nsight's defaults: pause at 10 C of headroom, resume at 20 C"
    nt.claim((wait, cont) == (10, 20), defaults, f"{wait}/{cont}")
    AUTO = profile_heated("auto")
    print(f"  {nt.rules(ENV.backend)}")
    print(f"  power cap the GPU enforces: {LIMIT_W:.0f} W (nvmlDeviceGetEnforcedPowerLimit)\n")
    table = pd.DataFrame([summarise(OFF), summarise(AUTO)])
    print(table.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    lowest = None
    if THERMO_OK:
        lowest, long, verdict = pause_evidence(AUTO, wait)
        could = f"auto could pause (headroom {lowest} C, {long} long gaps)"
        short = "auto never paused" if lowest > wait else could
    else:
        verdict = short = "no headroom reading: thermal control was off, auto ran as off"
    POOL = lowest is None or lowest > wait
    print("\n  " + verdict.replace("; ", ";\n  "))
    print(f"  wall time: auto {AUTO['wall']:.1f} s vs off {OFF['wall']:.1f} s")
    first_c = [int(run["raw"].gpu_temp_c.iloc[0]) for run in (OFF, AUTO)]
    print(f"  temperature at the first run: off {first_c[0]} C, auto {first_c[1]} C")
    # NVML enforces the cap on an average over a window, not on each sample
    top = table["top_power_%_of_cap"].max()
    over = ", a sample above it: the limit holds on average over a window" if top > 100 else ""
    rsd, robust = table["RSD_%"], table["robust_%"]
    s.result = (
        f"RSD off {rsd[0]:.2f}% / auto {rsd[1]:.2f}%, robust {robust[0]:.2f}% / {robust[1]:.2f}%; "
        f"{short}; power up to {top:.1f}% of the enforced limit{over}"
    )


# %% [markdown]
# ## 4. Does kernel time follow the SM clock or the temperature?
#
# The plot shows each series run by run: the measured kernel's time, the SM clock (the
# `RUN` sample at the start of the run and the `ANNOTATION` sample right before the kernel)
# and the GPU temperature.
#
# Which clock is tested? The `ANNOTATION` sample, `clock_at_entry_mhz`: NVML's reading as the
# annotation opens, not a measurement of the kernel's clock (the CUPTI backend measures none;
# under Nsight Compute, `gpc__cycles_elapsed.avg.per_second` would be one, as in notebook 04).
# Section 2 showed how far it can be from the clock a kernel ran at. So read its test for what
# such a proxy can show -- a clock that drifts or settles over many runs (a power limit taking
# hold), longer than NVML's reading lags -- and not for what it cannot: the clock during one
# short kernel. A negative ρ says that runs that began at a higher reading ran shorter; no hit
# says nothing about the clock inside a kernel. On a held clock the readings barely move, and a
# series that never moved has nothing to test (the table says so).
#
# Reading a correlation off such a series is easy to get wrong, so the test below is built
# against three traps:
#
# - **One point can make an r.** Run 0 follows the idle and can sit far from the others in
#   clock, temperature and time at once; Pearson's r (the plain correlation of the values) is
#   then mostly that one point. We leave run 0 out and use
#   **[Spearman's rank correlation](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#spearman-rank-correlation)** (ρ): the correlation of the
#   runs' ranks (1st, 2nd, ...) instead of their values, so a point can move ρ only by its rank.
# - **A shared trend is not a relation.** Temperature rises run after run as the GPU warms,
#   and the clock and the kernel time may drift with it: any two of them then correlate
#   through the run index alone. So we first test the trend itself (time against run index),
#   then correlate time with the clock and with the temperature **with the run-index trend
#   removed from both** (a partial rank correlation: the ranks' residuals after a straight
#   line in the run index, with n − 3 degrees of freedom).
# - **Many tests, some "hits" by chance.** Three tests per series, two series: six p-values
#   (three where the series are pooled, below). At the 5 % level each, with no relation at all,
#   at least one of m tests shows a false hit with chance 1 − 0.95^m: about one in four for
#   six (the cell prints it for its table). (A p-value is how often data at least this far
#   from "no relation" would turn up if there were none.)
#   **[Holm's correction](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#holm-correction)** keeps the whole table at the 5 % level: the
#   smallest of m p-values is multiplied by m, the next by m − 1, and so on, none allowed below
#   the one before it.
#
# Samples are also not independent (neighbouring runs share the GPU's state), which makes
# any p here optimistic. With about twenty runs per series only a strong relation can pass,
# and which series shows the hit can change from one run of this notebook to the next while
# the sign stays the same. So where section 3 found that auto never paused, the two series
# are one experiment done twice, and the cell **pools** them: ranks and the run-index trend
# removed within each series, then one partial rank correlation over both, with twice the
# runs. The trend test is pooled the same way: each series' ranks against its run index, less
# each series' own mean, in one correlation. What to look for: the `verdict` column -- the
# sign of ρ where the Holm-adjusted p is below 0.05, else "not distinguishable" -- and
# whether the sign makes physical sense (a higher clock, a shorter kernel). A cut at 0.05 is a
# convention, not a boundary in the data: with a few dozen runs, one standard error of ρ moves
# p several-fold, so an adjusted p within a factor of five of 0.05 (0.01 to 0.25) gets **"on
# the line"** after its verdict, a hit or a miss that another run of the same notebook may
# well turn over; the result line prints each adjusted p. No hit is not proof of no relation, only that these runs
# cannot show one.


# %%
def partial_rank_correlation(series: dict, other: str) -> tuple[float, float]:
    """Spearman's rho of kernel time and `other`, runs 1+ of each series of one experiment, a line in the
    run index removed from the ranks within each series (for `other` "run", the trend itself: only each
    series' mean); two-sided p (Student's t, n - 1 - 2 dof per series, n - 1 - 1 for the trend)."""

    def detrended(raw, column):
        run = np.arange(1, len(raw), dtype=float)
        ranks = stats.rankdata(run if column == "run" else raw[column].iloc[1:])
        return ranks - np.polyval(np.polyfit(run, ranks, int(other != "run")), run)

    rx = np.concatenate([detrended(raw, "Value") for raw in series.values()])
    ry = np.concatenate([detrended(raw, other) for raw in series.values()])
    if np.ptp(rx) < 1e-9 or np.ptp(ry) < 1e-9:
        return float("nan"), float("nan")  # a constant series: no correlation to speak of
    r, dof = float(np.corrcoef(rx, ry)[0, 1]), len(rx) - 1 - (1 + (other != "run")) * len(series)
    return r, float(2 * stats.t.sf(abs(r) * np.sqrt(dof / max(1 - r * r, 1e-12)), dof))


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment: the family of p-values keeps its error rate whatever their number."""
    p = np.asarray(p, float)
    order, out = np.argsort(p), np.empty(len(p))
    out[order] = np.minimum(1, np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]))
    return out


def verdict(rho: float, p: float) -> str:
    """rho's sign where the Holm-adjusted p is below 0.05, else not distinguishable; 'on the line' within a factor
    of 5 of 0.05 (0.01 to 0.25); a series that never moved has nothing to test."""
    if np.isnan(p):
        return "nothing to test: a series never moved"
    said = ("negative" if rho < 0 else "positive") if p < 0.05 else "not distinguishable"
    return said + (", on the line" if 0.01 <= p <= 0.25 else "")


def correlation_table(series: dict, pool: bool = False) -> pd.DataFrame:
    """Runs 1+: the warm-up trend (time vs run index), then time vs clock and vs temperature with the trend removed, per
    series or, with `pool`, once over all (one experiment done several times); Holm; verdict()."""
    groups = [series] if pool else [{mode: raw} for mode, raw in series.items()]
    rows = []
    for group in groups:
        for other in ("run", "clock_at_entry_mhz", "gpu_temp_c"):
            removed = f"time vs {other}, trend removed"
            test = "time vs run index (trend)" if other == "run" else removed
            n = sum(len(raw) - 1 for raw in group.values())
            rows.append(("+".join(group), test, *partial_rank_correlation(group, other), n))
    table = pd.DataFrame(rows, columns=["series", "test", "rho", "p", "n"])
    tested = table.p.notna()
    table.loc[tested, "p_holm"] = holm(table.p[tested])
    return table.assign(verdict=[verdict(r, p) for r, p in zip(table.rho, table.p_holm)])


with nt.section("4. Plot: time, SM clock and temperature per run; rank correlations") as s:
    ENV.require("profiler")
    series = {run["mode"]: run["raw"] for run in (OFF, AUTO) if run is not None}
    if not series:
        why = "sections 2 and 3 produced no series"
        raise nt.Skip(why, "run sections 2 and 3 first", needs="profiler")
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for i, (mode, raw) in enumerate(series.items()):
        axes[0].plot(raw.Value / 1e3, "o-", ms=3, color=f"C{i}", label=f"thermal_mode={mode!r}")
        axes[1].plot(raw.clock_at_entry_mhz, "o-", ms=3, color=f"C{i}", label=f"{mode}: at entry")
        axes[1].plot(raw.sm_clock_mhz, "x", ms=5, color=f"C{i}", label=f"{mode}: RUN sample")
        axes[2].plot(raw.gpu_temp_c, "o-", ms=3, color=f"C{i}", label=mode)
    for ax, label in zip(axes, ("kernel time (us)", "SM clock, NVML (MHz)", "GPU temperature (C)")):
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    axes[0].set_title(f"{N_HEAT}^3 fp16 matmul after {HEAT_S} s of load a run ({ENV.backend})")
    axes[2].set_xlabel("run")
    axes[2].xaxis.get_major_locator().set_params(integer=True)  # runs are whole numbers
    plt.tight_layout()
    both = POOL and len(series) == 2  # POOL: auto never paused (section 3)
    corr = correlation_table(series, pool=both)
    pooled = "off and auto pooled, as auto never paused" if both else "per series"
    m = int(corr.p.notna().sum())
    print(
        f"  {nt.rules(ENV.backend)}\n  the clock: NVML's reading as the annotation opens (a proxy)"
    )
    print(f"  Spearman rank correlations, run 0 left out, {pooled}; p Holm-adjusted:")
    print(corr.to_string(index=False, float_format="{:.2g}".format))
    chance = f"1 - 0.95^{m} = {1 - 0.95**m:.0%}"
    print(f"  with no relation at all, {m} tests at 5 % each show a false hit with chance {chance}")
    print(f"  setup's reading of the SM clock: {CLOCK_SAID}")
    said = [
        f"{'' if both else r.series + ' '}{'clock' if 'clock' in r.test else 'temperature'}: "
        f"{r.verdict} (rho {r.rho:+.2f}, p_holm {r.p_holm:.2g})"
        for r in corr[corr.test.str.endswith("removed")].itertuples()
    ]
    s.result = ("pooled: " if both else "per series: ") + "; ".join(said)


# %% [markdown]
# ## Takeaways
#
# - Info collectors put the *conditions* of a measurement next to it: driver, clocks,
#   temperature, power, whatever you can read. Numeric values per configuration, run or
#   annotation are aggregated into `_Avg/_Std/_Min/_Max`; the per-run CSV keeps every value.
#   Read the GPU CUDA runs on (`nt.nvml_handle()`), not NVML's device 0.
# - A collector that raises does not stop profiling: nsight-python warns once and stores
#   None. Check your collector columns for empty values.
# - `RUN` samples are taken at the **start** of a run: the first one describes the GPU
#   before the work, whichever way that goes on your GPU. An `ANNOTATION` sample is closer to
#   the kernel but still an NVML reading that may not have updated: compare it with the clock
#   run 0's time implies (section 2). To know the clock a kernel ran at, measure it
#   (`gpc__cycles_elapsed.avg.per_second`); a warm-up run before measuring avoids the
#   first-run question. And read the setup cell's clock line first: on a held clock (a lock), a
#   first sample at the lock says nothing about idle behaviour, and every figure sits lower.
# - `thermal_mode="auto"` only acts when the headroom drops to `thermal_wait`. Read the
#   headroom before crediting or blaming it for a difference; report a robust spread next
#   to the RSD, so one slow run is not read as a noisy mode. Far from the thermal limit, read
#   the power samples against the enforced power limit.
# - Correlating per-run series: ranks, not raw values; the shared trend removed; a
#   correction for the number of tests; p printed with its digits. Series of one experiment
#   pooled, and the sign reported, rather than whichever series happened to pass.
#
# ## Try it
#
# - Set `IDLE_S = 0` and run sections 2-4 again: does the first `RUN` sample still differ
#   from the others?
# - Raise `HEAT_S` (say to 2.0) to load the GPU longer and watch the temperature and the
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
nt.summary()
