# %% [markdown]
# # 09 · CUPTI against Nsight Compute, and two more clocks
#
# **What you will learn**
# - how nsight-python's two tools time the *same* kernels: the experimental **CUPTI backend**
#   (each kernel timed once as it runs, durations only) and **Nsight Compute** (each kernel
#   replayed alone, caches flushed, any metric) -- with a Welch interval on each difference;
# - where Nsight Compute's extra time on a short kernel comes from, tested on your GPU: a run
#   without the cache flush (`cache_control="none"`), a fit of what is left on kernel count and
#   kernel length, and the clock each kernel ran at (`gpc__cycles_elapsed.avg.per_second`);
# - how far one setting moves between two calls (the **run-to-run band** of notebook 03), and
#   why a difference is called real only beyond it;
# - why only one of the two tools can live in a process, and how to run the other one next to
#   it, on the same file;
# - what CUDA events and a wall clock add to a kernel's duration, timed over the very launches
#   CUPTI timed and again with no profiler attached;
# - what CUPTI cannot do, tried on your GPU, with an empty-result check that holds whether
#   nsight-python returns an empty table or raises.
#
# | section | needs |
# |---|---|
# | 0. who measures what | nothing (runs without a GPU) |
# | 1. CUPTI times the workload | any nsight-python backend (CUPTI here, or in a child process with cupti-python) |
# | 2. Nsight Compute times it, flushed and not | the Nsight Compute backend, else the `ncu` command line (any version) |
# | 3. side by side, 4. events and wall time | sections 1 and 2 (3); section 1, and a child with no profiler (4) |
# | 5. what CUPTI cannot do, 6. `torch.profiler` | a backend; CUPTI here, or cupti-python for a child |
#
# Every nsight-python call below runs with `verbosity=SILENT` and `thermal_mode="off"`
# (notebook 08 is about thermal control).

# %%
{{SETUP}}

# %% [markdown]
# ## The workload, written once
#
# One file holds everything this notebook measures. `workload()` is one *run*: a 16K-element
# add (a kernel of a microsecond or two) and fp32 matmuls of 512 to 4096, the sizes on which the
# original tutorial this series grew from (a Japanese nsight-python tutorial for Colab) compared
# the two tools. Each is in an annotation of its own. cuBLAS may split a small matmul into a
# GEMM (the matrix multiply kernel) and a second kernel that adds up the partial sums
# ([split-K](https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md#split-k)),
# so the kernels per run differ by size, and nsight-python checks them per annotation.
# `per_run` (`combine_kernel_metrics`) adds a run's kernels up. Inside each annotation, CUDA
# events and `time.perf_counter()` bracket the launch: they are not kernels, so the profilers
# ignore them, and section 4 compares them with the kernel times of the same launches.
#
# The file runs four ways. The notebook imports it. The `ncu` command line runs it (the
# `__main__` block replays `workload` as nsight-python would). `python cupti_ncu_kernels.py plain`
# replays it the same way with no profiler attached, then tries `torch.profiler` alone
# (sections 4 and 6). And when Nsight Compute holds this
# process, a child runs `python cupti_ncu_kernels.py cupti <function>`, where the order at
# the top is the lesson: `NSPY_NCU_INIT_AT_IMPORT=0` (so `import nsight` does not load Nsight
# Compute), libcupti 13.4+ loaded **by path before torch** can load its own, then
# `nsight.activate(nsight.Tool.CUPTI)`, and only then torch.
#
# Which libcupti torch loads depends on its CUDA build: torch links `libcupti.so.<major>` of
# `torch.version.cuda`. A CUDA 13 torch asks for `libcupti.so.13`, and the 13.4+ copy loaded
# first answers for it: one libcupti in the process. A CUDA 12 torch asks for `libcupti.so.12`,
# a different name: the preload cannot stand in, both libraries load, nsight's CUPTI backend
# uses the new one and `torch.profiler` its own (section 6 shows what that means). Section 0
# prints which case this machine is.
#
# How does the file know that nsight-python found no kernel in a region? nsight-python 1.1.0
# returns a table without that annotation; 1.1.1 raises a `RuntimeError` saying that no kernel
# was profiled. `measured()` turns either answer into one `LookupError` that names the
# annotation, and lets every other error through (a CUDA error is a `RuntimeError` too, with
# other words).

# %% writefile cupti_ncu_kernels.py
"""09's workload: imported by the notebook, run by the ncu command line, by a CUPTI child and with no profiler."""
import os
import sys

# the CUPTI child: these steps, in this order
if __name__ == "__main__" and sys.argv[1:2] == ["cupti"]:
    os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"  # 1. import nsight without loading Nsight Compute
    from nspy_tutorial import backend

    LIBCUPTI = backend.find_cupti_library()
    backend.preload_cupti(LIBCUPTI)  # 2. libcupti 13.4+ by path, before torch's own
    import nsight

    nsight.activate(nsight.Tool.CUPTI)  # 3. the CUPTI backend
import json
from time import perf_counter

import nsight
import torch  # 4. only now torch (and CUDA)
from torch.profiler import ProfilerActivity, profile

SILENT = nsight.VerbosityLevel.SILENT
SIZES, N_ADD, RUNS = (512, 1024, 2048, 4096), 1 << 14, 10  # fp32 n x n x n matmuls; a 16K add; runs
CLOCKS = []  # (annotation, CUDA-event ns, wall ns) of every launch workload() makes


def inputs():  # fresh inputs for each operation: the 16K add, then the matmuls
    shapes = [("add", (N_ADD,))] + [(f"matmul {n}", (n, n)) for n in SIZES]
    return [
        (name, torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda"))
        for name, shape in shapes
    ]


def warm_up():
    """Each operation once, outside any annotation: cuBLAS's first-call setup is not measured."""
    _ = [a + b if name == "add" else a @ b for name, a, b in inputs()]
    torch.cuda.synchronize()


def workload():
    """One run: each operation in an annotation of its own, bracketed by CUDA events and a wall clock."""
    for name, a, b in inputs():  # created outside the annotations: not measured
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()  # an idle GPU at the first event, as when timing by hand
        with nsight.annotate(name):
            start = perf_counter()
            begin.record()
            _ = a + b if name == "add" else a @ b
            end.record()
            end.synchronize()
            wall = perf_counter() - start
        CLOCKS.append((name, begin.elapsed_time(end) * 1e6, wall * 1e9))


def per_run(x, y):
    """combine_kernel_metrics: times add; a further metric (the clock) is time-weighted: cycles / time."""
    out = x + y
    out[1:] = (x[1:] * x[0] + y[1:] * y[0]) / out[0]
    return out


def cupti_workload():
    """The workload under the CUPTI backend: nsight-python's table and the events of the same launches."""
    warm_up()
    CLOCKS.clear()
    table = nsight.analyze.kernel(
        runs=RUNS, combine_kernel_metrics=per_run, thermal_mode="off", verbosity=SILENT
    )(workload)().to_dataframe()
    return {"table": table, "events": list(CLOCKS)}


def region(n, what):
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    with nsight.annotate(what):
        # copy_ between float32 tensors: a memcpy, not a kernel
        _ = x + x if what == "add" else y.copy_(x)


def raised(call, kind):  # the message of the `kind` exception call() raises, or None
    try:
        call()
    except kind as exc:
        return str(exc)


def measured(call, annotations):
    """call()'s table, or a LookupError naming the annotations without a row, whichever way nsight-python said so."""
    try:
        df, said = call().to_dataframe(), "a table without them"
    # 1.1.1 raises a RuntimeError that says no kernel was profiled; any other RuntimeError propagates
    except RuntimeError as exc:
        if "no kernel" not in str(exc).lower():
            raise
        df, said = {}, f"RuntimeError: {exc}"
    missing = [a for a in annotations if a not in set(df.get("Annotation", []))]
    if missing:
        raise LookupError(
            f"no row for {missing} (nsight-python gave {said}): no kernel there? A memcpy is not one"
        )
    return df


def cupti_limits():
    """Two things the CUPTI backend (the active tool) cannot do, each tried: what nsight-python said."""
    counter = nsight.analyze.kernel(
        runs=1, metrics=["dram__bytes_read.sum"], thermal_mode="off", verbosity=SILENT
    )
    copy = nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)(region)
    return {
        "counter_error": raised(lambda: counter(region)(N_ADD, "add"), ValueError),
        "copy_error": raised(lambda: measured(lambda: copy(N_ADD, "copy"), ["copy"]), LookupError),
    }


def profiler_events(n=SIZES[0]):
    """CUDA (device) events torch.profiler records for five n x n matmuls in this process (4. beside CUPTI?)."""
    a = torch.randn(n, n, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _ = [a @ a for _ in range(5)]
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def profiler_beside_cupti():
    """torch.profiler while nsight's CUPTI backend is active; then nsight-python once more (None: it measured the add)."""
    seen = profiler_events()
    add = nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)(region)
    return {
        "cuda_events": seen,
        "nsight_after": raised(lambda: measured(lambda: add(N_ADD, "add"), ["add"]), LookupError),
    }


if __name__ == "__main__":
    from nspy_tutorial import ncu_cli

    warm_up()  # as before the in-process measurements: cuBLAS's first-call setup outside
    # a CUPTI-side measurement; its result (tables included) as one JSON line
    if sys.argv[1] == "cupti":
        found = {**globals()[sys.argv[2]](), "libcupti": LIBCUPTI.path}
        as_json = json.dumps(found, default=lambda df: json.loads(df.to_json(orient="split")))
        print("NSPY_RESULT " + as_json)
    else:  # the ncu command line (configs x runs, as nsight-python), or "plain": no profiler
        plain = sys.argv[1] == "plain"
        ncu_cli.replay(globals(), ["workload", "[[]]", str(RUNS)] if plain else None)
        if plain:  # the clocks of those runs, then torch.profiler with CUPTI to itself
            print("NSPY_RESULT " + json.dumps({"events": CLOCKS, "cuda_events": profiler_events()}))

# %%
import os

import cupti_ncu_kernels as ck
import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
from scipy import stats
from torch.version import cuda as TORCH_CUDA

from nspy_tutorial import backend, clock, lifetime, ncu_cli
from nspy_tutorial.lessons import run_to_run_pct, welch_shift

TIME, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
# the pinned cupti-python and libcupti 13.4, in a folder of their own
CUPTI_INSTALL = backend.cupti_install_command()
CUPTI_REMEDY = (
    "`pip install 'nspy-tutorial[cupti]'`, or for the child only: "
    f"`{ncu_cli.command_text(CUPTI_INSTALL)}`"
)
# sections 1, 2 and 4 set them: each tool's measurement, NVML's clock during CUPTI's, no profiler
CUPTI = NCU = PLAIN = CUPTI_MHZ = None


def cupti_child(function: str) -> dict:
    """`python cupti_ncu_kernels.py cupti <function>`, with cupti-python from here or its own folder (Colab: pip)."""
    if backend.cupti_problem(backend.find_cupti_library(), backend.cupti_python_available()):
        if ENV.on_colab and backend.use_cupti_target()[1]:
            print(f"  $ {ncu_cli.command_text(CUPTI_INSTALL)}")
            code, output = lifetime.run(CUPTI_INSTALL, dict(os.environ), 600)
            if code:
                raise nt.Skip(f"pip failed: {output.strip()[-200:]}", CUPTI_REMEDY, needs="cupti")
        problem = backend.use_cupti_target()[1]  # else on this process's path and its children's
        if problem:
            why = f"CUPTI cannot run in a child process here: {problem}"
            raise nt.Skip(why, CUPTI_REMEDY, needs="cupti")
    found = ncu_cli.run_json("cupti_ncu_kernels.py", ["cupti", function], timeout=300)
    print(f"  CUPTI child: NSPY_NCU_INIT_AT_IMPORT=0, {found['libcupti']}, nsight, CUPTI, torch")
    return found | {"table": pd.DataFrame(**found["table"])} if "table" in found else found


def torch_cupti(torch_cuda: str | None) -> tuple[bool | None, str]:
    """Whether torch links the libcupti nsight's CUPTI needs (libcupti.so.13, preloaded 13.4+), and what follows."""
    if torch_cuda is None:
        return None, "this torch is built without CUDA: it loads no libcupti"
    major, needed = int(torch_cuda.split(".")[0]), backend.MIN_CUPTI_VERSION[0]
    return major == needed, f"torch (CUDA {torch_cuda}) asks for libcupti.so.{major}: " + (
        "the preloaded 13.4+ copy has that name and serves torch too -- one libcupti in the process"
        if major == needed
        else f"not libcupti.so.{needed}, so the preload cannot stand in -- two libcupti in one process"
    )


# %% [markdown]
# ## 0. Who measures what on this machine
#
# nsight-python loads exactly **one tool per process** (`nsight.activate`). Nsight Compute is
# loaded at `import nsight` unless `NSPY_NCU_INIT_AT_IMPORT=0`, and once loaded it stays
# (`nsight.deactivate()` only warns). So the comparison needs a second process:
#
# - **Nsight Compute active here** (ncu ≥ 2026.2.1, e.g. on Colab, where this notebook's setup
#   cell installs one): CUPTI's side runs in a child, on the same file (the order above).
# - **CUPTI active here** (an older ncu): Nsight Compute's side comes from the `ncu` command line
#   in launch mode on the same file, with nsight-python's defaults (`--cache-control all
#   --clock-control none`, not the command line's own `--clock-control base`).

# %%
with nt.section("0. Who measures what on this machine") as s:
    ONE_LIBCUPTI, note = torch_cupti(TORCH_CUDA)
    print(f"  libcupti: {note}")
    s.result = f"{ENV.backend or 'no'} backend here; each tool in a process of its own"

# %% [markdown]
# ## 1. CUPTI times the workload
#
# Ten runs of `workload()`, each kernel timed once as it ran: no replay, caches as warm as the
# preceding `torch.randn` left them, clocks as the GPU chose. The one `if` decides where CUPTI
# runs; `cupti_workload()` in the file does the measuring either way. The seconds printed after
# `[OK]` are what the answer cost (with a child: its start-up too); compare them with section 2's.
#
# CUPTI measures no clock. So while it runs, `clock.Sampler` reads the GPU's SM clock through
# NVML about a hundred times a second: not the clock of any one kernel, but an upper bound on it -- no kernel
# of that call ran above the highest reading. Section 3 needs that bound.


# %%
def times(table: pd.DataFrame, metric: str = TIME) -> pd.DataFrame:
    """One row per annotation: mean and SD (us for a time, MHz for a clock), runs, kernels per run."""
    rows = table[table.Metric == metric].set_index("Annotation")
    scale = 1e6 if metric == TIME else 1e-6
    unit = rows.Unit.map(lambda u: ncu_cli.to_base_units(1.0, u)) * scale
    found = {"mean": rows.AvgValue * unit, "sd": rows.StdDev * unit, "runs": rows.NumRuns}
    return pd.DataFrame(found).assign(kernels=rows.Kernel.str.count(r"\|") + 1)


with nt.section("1. CUPTI times the workload") as s:
    ENV.require("profiler", also="cupti")  # CUPTI: in this process or in a child
    # CUPTI is this process's tool (an older ncu), or Nsight Compute holds it (e.g. Colab): a child
    with clock.Sampler() as nvml:
        CUPTI = ck.cupti_workload() if ENV.backend == "cupti" else cupti_child("cupti_workload")
    CUPTI_MHZ = nvml.mhz  # (median, lowest, highest), or None where NVML could not be read
    print(f"  {nt.rules('cupti')}")
    nt.show(times(CUPTI["table"]).reset_index(names="op"), ["op", "mean", "sd", "runs", "kernels"])
    heard = f"{CUPTI_MHZ[1]:,}-{CUPTI_MHZ[2]:,} MHz" if CUPTI_MHZ else "not read"
    print(f"  SM clock while CUPTI measured (NVML's readings, not CUPTI's): {heard}")
    s.result = f"CUPTI: {len(CUPTI['table'])} operations x {ck.RUNS} runs; NVML's SM clock {heard}"

# %% [markdown]
# ## 2. Nsight Compute times the same workload, flushed and not
#
# Nsight Compute replays each kernel alone. Its default, `cache_control="all"`, flushes the
# caches before every kernel -- also between a split-K GEMM and its reduction, so the reduction
# reads the GEMM's partial sums from DRAM instead of the L2. A second call with
# `cache_control="none"` takes the flush away and keeps everything else. A third call repeats
# `"all"`: the same setting twice, two calls apart, shows how far a kernel moves between calls
# when nothing changed (section 3 needs that). All collect the clock each kernel ran at,
# `gpc__cycles_elapsed.avg.per_second` (cycles elapsed / duration), and leave the clocks free
# (`clock_control="none"`) as CUPTI does. Three runs each: every run replays every kernel, and
# section 3's intervals say whether three were enough to tell.

# %%
NCU_SETTINGS = dict(
    runs=3,
    metrics=[TIME, CLOCK],
    combine_kernel_metrics=ck.per_run,
    thermal_mode="off",
    verbosity=ck.SILENT,
)
CALLS = {"all": "all", "none": "none", "again": "all"}  # name -> cache_control

with nt.section("2. Nsight Compute times the same workload, flushed and not") as s:
    ENV.require("profiler")
    tables, source = {}, "ncu" if ENV.backend == "ncu" else "ncu-cli"
    for name, cache in CALLS.items():
        if source == "ncu":  # nsight-python's Nsight Compute backend, in this process
            ck.warm_up()
            decorated = nsight.analyze.kernel(cache_control=cache, **NCU_SETTINGS)(ck.workload)
            tables[name] = decorated().to_dataframe()
        else:  # an older ncu: the ncu command line on the same file, one call per setting
            ENV.require("ncu-cli")
            tables[name] = ncu_cli.nsight_table(
                "cupti_ncu_kernels.py",
                ck.workload,
                ncu=ENV.ncu_path,
                configs=[()],
                cache_control=cache,
                report=f"workload-{name}.ncu-rep",
                **NCU_SETTINGS,
            )
        print(f"  {name}: {nt.rules(source, cache_control=cache, clock_control='none')}")
    NCU = tables
    s.result = f"Nsight Compute ({source}): cache_control all, none, all again; 3 runs each"

# %% [markdown]
# ## 3. Side by side, and a plot: how much longer, and why
#
# Two differences per kernel, each with a **Welch** 95 % interval (notebook 03: independent
# samples, each with its own spread and run count; with so few runs the t quantile is well
# above nsight-python's 1.96). An interval that contains 0 means *no difference detected at
# this run count*, not "equal".
#
# - **The flush** (`all` − `none`, in % of the unflushed time: 03's `welch_shift`). The two
#   settings ran in two `ncu` processes, and a kernel moves a little between two calls whatever
#   the settings. 03's `run_to_run_pct` turns the two `"all"` calls of section 2 into the
#   **run-to-run band**: the largest move between two calls of one setting that these data leave
#   open. A flush is called real only where its interval excludes 0 *and* it lies beyond the band.
#   For a split-K matmul (two kernels per run) the flush also falls between its two kernels.
# - **What is left without the flush** (`none` − CUPTI, in µs per kernel). Two causes could
#   make it. A cost per kernel of being replayed by Nsight Compute: the same for every kernel,
#   whatever its length. And the clock: a kernel bound by the SM clock takes longer in
#   proportion to its length when it ran at a lower clock under Nsight Compute than under CUPTI.
#   So one fit separates them: extra time = *a* × kernels + *b* × length (CUPTI's µs), by
#   **weighted least squares** (each operation weighted by 1/SE², the inverse square of its
#   difference's standard error, so a long matmul's few µs of noise weigh little). Its 95 %
#   intervals use Student's t with n − 2 degrees of freedom, widened by the **Birge ratio**
#   (the weighted scatter of the points about the fit per degree of freedom) where the points
#   scatter more than their own errors allow. *a* is the cost per kernel; *b* a share of the
#   length.
# - **The clock's share.** Nsight Compute measured the clock each kernel ran at. CUPTI measured
#   none, but no kernel of its call ran above NVML's highest reading (section 1). So NVML's
#   highest reading / Nsight Compute's clock − 1 (its lowest over the kernels) bounds the share
#   of the length the clock can add. Where NVML could not be read, the rated maximum stands in,
#   and the cell says so. On a GPU whose clock is held (setup's banner says so), the highest
#   reading is the lock, not the rated maximum, and the bound stays true.
#
# The fit's verdicts: a cost per kernel (where *a*'s interval excludes 0), and for *b*: none
# detected (its interval holds 0), within what the clock can add, or more than the clock can
# add. The plot shows each kernel's extra µs against its length on a linear scale with a line
# at 0: an interval that crosses it is no extra time detected. The fit is drawn with its 95 %
# band (the verdicts in the legend), and the dashed line is the fit's cost per kernel plus the
# most the clock can add. A long matmul should barely notice either cause: there the tools
# should agree within 5 %.


# %%
def welch(a, b):
    """mean(b) - mean(a), its standard error and Welch-Satterthwaite degrees of freedom (rows or columns)."""
    va, vb = a["sd"] ** 2 / a["runs"], b["sd"] ** 2 / b["runs"]
    dof = (va + vb) ** 2 / (va**2 / (a["runs"] - 1) + vb**2 / (b["runs"] - 1))
    return b["mean"] - a["mean"], np.sqrt(va + vb), dof


def batch(table: pd.DataFrame, op: str) -> tuple:
    """One kernel's batch as 03's functions take it: (mean, SD, runs)."""
    return tuple(table.loc[op, ["mean", "sd", "runs"]])


def compare(cupti: pd.DataFrame, ncu: dict, ceiling_mhz: float) -> pd.DataFrame:
    """Per kernel: means (us), Nsight Compute's clock, the flush (%) and its band, the unflushed extra time (us per
    kernel, 95 % half-width, standard error) and the most the clock can add to it (us) below `ceiling_mhz`."""
    c = times(cupti)
    a, n, again = (times(ncu[name]).loc[c.index] for name in ("all", "none", "again"))
    mhz = times(ncu["none"], CLOCK)["mean"].loc[c.index]
    out = pd.DataFrame({"kernels": c.kernels, "CUPTI us": c["mean"], "all us": a["mean"]})
    out["none us"], out["none MHz"] = n["mean"], mhz
    flush = [welch_shift(batch(n, op), batch(a, op)) for op in c.index]  # all - none, % of none
    out["flush %"] = [shift for shift, _, _ in flush]
    out["flush ±"] = [half for _, half, _ in flush]
    out["band %"] = [run_to_run_pct(batch(a, op), batch(again, op)) for op in c.index]
    extra, se, dof = welch(c, n)
    out["us/kernel"], out["se"] = extra / c.kernels, se
    out["±"] = np.nan_to_num(stats.t.ppf(0.975, dof) * se) / c.kernels
    out["clock can add us"] = c["mean"] * (ceiling_mhz / mhz - 1).clip(lower=0)
    return out.reset_index(names="op")


def fit_extra(side: pd.DataFrame, at=((1, 0), (0, 1))) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of each kernel's unflushed extra time (us) on its kernels and its length (CUPTI us):
    (us per kernel, share of the length), and the 95 % half-width of the fit at each (kernels, length) of `at`
    (t, n - 2 dof, widened by the Birge ratio); the default's two are those of the two terms themselves."""
    d = (side["us/kernel"] * side.kernels).to_numpy(float)
    x = side[["kernels", "CUPTI us"]].to_numpy(float)
    w = 1 / np.maximum(side.se.to_numpy(float), 1e-3) ** 2  # 1 ns, the durations' unit, at least
    cov = np.linalg.inv(x.T @ (x * w[:, None]))
    coef = cov @ x.T @ (w * d)
    dof = len(d) - 2
    birge = max(1.0, float(w @ (d - x @ coef) ** 2) / dof)
    at = np.asarray(at, float)
    return coef, stats.t.ppf(0.975, dof) * np.sqrt(np.sum(at @ cov * at, axis=1) * birge)


def overhead(side: pd.DataFrame, share: float) -> tuple[str, str]:
    """The fit in words: the cost per kernel, and the share of the length against `share` (the most the clock adds)."""
    (a, b), (ha, hb) = fit_extra(side)
    per = f"{a:.2f} ± {ha:.2f} us per kernel" if a - ha > 0 else "no cost per kernel detected"
    if b - hb <= 0 <= b + hb:
        length = "no share of the length detected"
    elif b + hb < 0:
        length = "a negative share of the length"
    elif b - hb <= share:
        length = "a share of the length, within what the clock can add"
    else:
        length = "a share of the length, more than the clock can add"
    return per, f"{length} ({100 * b:+.2f} ± {100 * hb:.2f} %)"


def reading(r) -> str:
    """One kernel's row of compare() in words: the flush where its interval excludes 0, and against the band."""
    if abs(r["flush %"]) <= r["flush ±"]:
        return "no flush detected"
    beyond = abs(r["flush %"]) > r["band %"]
    where = ("beyond" if beyond else "within") + f" the run-to-run band of {r['band %']:.1f} %"
    split = " (also between its kernels)" if beyond and r["kernels"] > 1 else ""
    return f"flush {r['flush %']:+.1f} %{split}, {where}" + ("" if beyond else ": not called real")


with nt.section("3. Side by side, and a plot: how much longer, and why") as s:
    ENV.require("profiler", also="cupti")
    cupti = nt.needs(CUPTI, section="1", need="cupti")
    ncu = nt.needs(NCU, section="2", need="ncu-cli")
    rated = ncu["all"].ComputeClock.iloc[0] / 1e3  # the GPU's rated maximum, MHz
    ceiling = CUPTI_MHZ[2] if CUPTI_MHZ else rated
    SIDE = compare(cupti["table"], ncu, ceiling)
    share = max(0.0, ceiling / SIDE["none MHz"].min() - 1)
    per, length = overhead(SIDE, share)
    print(f"  CUPTI: {nt.rules('cupti')}")
    print(f"  Nsight Compute: {nt.rules('ncu-cli', clock_control='none')}")
    nt.show(SIDE, ["op", "kernels", "CUPTI us", "all us", "none us", "none MHz"])
    print("\n  flush: % of 'none', ± 95 %, band of two 'all' calls; extra: none - CUPTI per kernel")
    nt.show(SIDE, ["op", "flush %", "flush ±", "band %", "us/kernel", "±", "clock can add us"])
    basis = f"NVML's highest reading during CUPTI, {ceiling:,.0f} MHz" if CUPTI_MHZ else "rated"
    print("\n".join(f"  {r['op']}: {reading(r)}" for r in SIDE.to_dict("records")))
    print(f"  unflushed, a fit over all kernels: {per}\n  and {length}")
    print(f"  the clock can add at most {100 * share:.2f} % ({basis} / Nsight Compute's lowest)")
    x = SIDE["CUPTI us"] / SIDE.kernels  # one kernel's length
    y, err = SIDE["us/kernel"], SIDE["±"]
    line = np.geomspace(x.min(), x.max())
    (a, b), half = fit_extra(SIDE, [(1, us) for us in line])  # one kernel of each length
    fit = a + b * line
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.axhline(0, c="black", lw=0.8)
    ax.errorbar(x, y, err, fmt="o", capsize=3, label="each operation, with its Welch 95 % interval")
    ax.plot(line, fit, c="C1")
    label = f"fit and its 95 % band: {per}\n  + {length}"
    ax.fill_between(line, fit - half, fit + half, color="C1", alpha=0.25, label=label)
    most = f"its cost per kernel + the most the clock can add ({100 * share:.2f} % of the length)"
    ax.plot(line, a + share * line, "--", c="grey", label=most)
    for xi, yi, op in zip(x, y, SIDE.op):
        ax.annotate(op, (xi, yi), textcoords="offset points", xytext=(6, -10), fontsize=7)
    # x log (lengths span three decades), y linear with a zero line: an interval that holds 0 shows it
    bottom, top = min(0, *(y - err), *(fit - half)), max(*(y + err), *(fit + half))
    ax.set(xscale="log", ylim=(bottom - (top - bottom) / 20, top + (top - bottom) / 20))
    ax.set(xlabel="one kernel's length under CUPTI (us)", ylabel="extra time per kernel (us)")
    tool = "Nsight Compute" if ENV.backend == "ncu" else "ncu command line"
    ax.set_title(f"{ENV.gpu_name}: {tool} (cache none, clocks free) − CUPTI, per kernel")
    ax.legend(fontsize=7, loc="upper left")
    plt.tight_layout()
    counts = {name: list(times(t).kernels) for name, t in (("CUPTI", cupti["table"]), *ncu.items())}
    same = len({tuple(v) for v in counts.values()}) == 1
    nt.claim(same, "every measurement saw the same kernels per run", str(counts))
    big = SIDE.iloc[-1]
    apart = 100 * (big["all us"] / big["CUPTI us"] - 1)
    nt.claim(abs(apart) < 5, f"for {big.op} the two tools agree within 5 %", f"{apart:+.2f} %")
    s.result = f"unflushed: {per}, {length.split(' (')[0]}; {big.op} {apart:+.1f} %"


# %% [markdown]
# ## 4. Two more clocks on the same launches: CUDA events and wall time
#
# A profiler's duration is the kernel alone. Two clocks people reach for measure more:
# **CUDA events** recorded before and after the op (GPU timestamps that also hold the launch
# and PyTorch's dispatch, since the GPU was idle at the first event) and **wall time**
# (`time.perf_counter()` around the op and the event's synchronisation: the Python calls too;
# it brackets the events, so it can only be longer). Section 1 took both inside the
# annotations, around the very launches CUPTI timed -- but CUPTI traced those launches, and
# tracing could change what a launch costs. So the same `workload()` runs again in a child process with
# **no profiler attached** (no nsight tool, nothing injected): the clocks a reader timing by
# hand gets. The mean of (events − kernel) is the events' mean minus CUPTI's kernel mean. Two
# sets of rules make this table, and the cell prints both: the kernel column is CUPTI's, the
# events and wall columns are the workload's own clocks, under CUPTI's tracing and under none.
#
# Expect a similar overhead for every op -- most of what the events measure for the add, a
# small share of a long matmul -- and expect it to move: it is launch and dispatch time on
# the CPU, not GPU time. The cell gives each overhead's size in words, and calls it **noisy**
# where the launches scatter (SD over the runs) by more than the kernel itself lasts: there
# one launch's events cannot even resolve the kernel.


# %%
def event_clocks(traced: list, plain: list, cupti: pd.DataFrame) -> pd.DataFrame:
    """Per op and profiler (CUPTI, none), us: kernel (CUPTI's), events (mean, SD), wall, events - kernel, in words."""
    both = {"CUPTI": traced, "none": plain}
    runs = [(op, who, e, w) for who, got in both.items() for op, e, w in got]
    table = pd.DataFrame(runs, columns=["op", "profiler", "e", "w"])
    g = table.groupby(["op", "profiler"], sort=False)
    out = pd.DataFrame({"events us": g.e.mean(), "SD us": g.e.std(), "wall us": g.w.mean()}) / 1e3
    out.insert(0, "kernel us", times(cupti)["mean"].reindex(out.index, level="op"))
    out["overhead us"] = out["events us"] - out["kernel us"]
    words = ["a few us", "tens of us", "hundreds of us", "milliseconds"]
    size = pd.cut(out["overhead us"], [-np.inf, 10, 100, 1000, np.inf], right=False, labels=words)
    noisy = np.where(out["SD us"] > out["kernel us"], ", noisy", "")
    return out.assign(**{"in words": size.astype(str) + noisy}).reset_index()


with nt.section("4. Two more clocks on the same launches: CUDA events and wall time") as s:
    ENV.require("profiler", also="cupti")
    cupti = nt.needs(CUPTI, section="1", need="cupti")
    # the same workload in a child with no nsight tool and no profiler
    PLAIN = ncu_cli.run_json("cupti_ncu_kernels.py", ["plain"], timeout=300)
    EVENTS = event_clocks(cupti["events"], PLAIN["events"], cupti["table"])
    print(f"  kernel us: {nt.rules('cupti')}")
    print("  events, wall: workload()'s own clocks, under CUPTI's tracing or no profiler")
    nt.show(EVENTS, list(EVENTS.columns))
    hand = EVENTS[EVENTS.profiler == "none"].reset_index(drop=True)  # no profiler: as timed by hand
    share = 100 * hand["overhead us"] / hand["events us"]
    mostly = "for the microsecond add, CUDA events measure mostly overhead"
    nt.claim(share[0] > 50, mostly, f"{share[0]:.0f} %")
    little = f"for {hand.op.iloc[-1]} the overhead is under 5 %"
    nt.claim(share.iloc[-1] < 5, little, f"{share.iloc[-1]:.2f} %")
    add = EVENTS.query("op == 'add'")
    s.result = "events - kernel, add: " + "; ".join(
        f"{us:,.0f} us with profiler {who} ({words})"
        for who, us, words in zip(add.profiler, add["overhead us"], add["in words"])
    )

# %% [markdown]
# ## 5. What CUPTI cannot do
#
# `cupti_limits()` in the file tries two things under CUPTI:
#
# 1. **A hardware counter.** Under CUPTI the only metric is `gpu__time_duration.sum`; ask for a
#    counter and nsight-python refuses -- not at decoration (the collector is built lazily, for
#    whichever tool is active), but at the first **call**, with a `ValueError`.
# 2. **A region without a kernel.** `y.copy_(x)` between two float32 tensors is a memcpy, not a
#    kernel: CUPTI attributes nothing to the annotation. `measured()` turns nsight-python's
#    answer, whichever version gave it (an empty table, or a `RuntimeError`), into one error
#    naming the annotation.
#
# Cache and clock control are not among CUPTI's settings at all: notebook 04 reads the CUPTI
# collector's signature, and flushes the L2 by hand where a cold cache is wanted.

# %%
with nt.section("5. What CUPTI cannot do") as s:
    ENV.require("profiler", also="cupti")
    LIMITS = ck.cupti_limits() if ENV.backend == "cupti" else cupti_child("cupti_limits")
    print(f"  a counter -> ValueError: {LIMITS['counter_error']}")
    print(f"  memcpy: measured() -> {LIMITS['copy_error']}")
    nt.claim(
        LIMITS["counter_error"] is not None,
        "under CUPTI the call that asks for a hardware counter is refused",
    )
    nt.claim(
        "['copy']" in (LIMITS["copy_error"] or ""),
        "a memcpy-only region gives no row, and measured() names it",
    )
    s.result = "a counter refused at the call; a memcpy-only region: no row, named"

# %% [markdown]
# ## 6. `torch.profiler` goes blind while nsight's CUPTI is active
#
# `torch.profiler` records CUDA kernels through CUPTI too, and nsight-python's CUPTI backend holds
# it from `nsight.activate(nsight.Tool.CUPTI)` on. The same five matmuls are profiled in a child
# where no nsight tool is active (section 4's child, when it ran), and beside nsight's CUPTI
# (here, or in a CUPTI child of their own, so that a crash there loses only this result). Then
# nsight-python profiles once more: does its CUPTI backend still get kernel records after
# `torch.profiler` started and stopped its own session? With one libcupti in the process
# (section 0) expect `torch.profiler` to see nothing; with two (a CUDA 12 torch), this run
# shows what happens. This section comes last on purpose:
# what a second profiler does to the process cannot touch the measurements above.
#
# Read two things: the CUDA events `torch.profiler` recorded beside nsight's CUPTI, and
# whether nsight-python, profiling `x + x` afterwards, still gets a row. That region launches
# one kernel, so no row there means nsight's CUPTI recorded no kernel either: it went blind
# too, not a region without a kernel (the memcpy hint of the error it raises is written for
# section 5's copy, and does not apply). Why is not tested here. The presumed cause: with one
# libcupti the two profilers share one CUPTI, which takes one subscriber at a time, so
# `torch.profiler` gets no records while nsight holds it, and stopping its session turns the
# recording off for nsight as well.

# %%
with nt.section("6. torch.profiler goes blind while nsight's CUPTI is active") as s:
    ENV.require("profiler", also="cupti")
    alone = PLAIN or ncu_cli.run_json("cupti_ncu_kernels.py", ["plain"], timeout=300)
    plain = alone["cuda_events"]  # no nsight tool active
    here = ENV.backend == "cupti"
    beside = ck.profiler_beside_cupti() if here else cupti_child("profiler_beside_cupti")
    sees = "with no nsight tool active, torch.profiler sees each matmul"
    nt.claim(plain >= 5, sees, f"{plain} events, 5 matmuls")
    blind = "no kernel record, blind too (restart to profile again)"
    after = blind if beside["nsight_after"] else "a row, as before"
    events = beside["cuda_events"]
    print(f"  beside nsight's CUPTI: {events} CUDA events")
    print(f"  then nsight-python on x + x (one kernel): {after}")
    if ONE_LIBCUPTI:  # one libcupti, one subscriber (section 0)
        nt.claim(events == 0, "beside nsight's CUPTI, torch.profiler records no CUDA event")
    s.result = (
        f"torch.profiler: {events} CUDA events beside CUPTI, {plain} without; nsight after: {after}"
    )

# %% [markdown]
# ## Takeaways
#
# - One tool per process. To compare, run the other tool next door on the same file: CUPTI in a
#   child (`NSPY_NCU_INIT_AT_IMPORT=0`, libcupti 13.4+ before torch), or the `ncu` command line.
# - Compare like with like (`--clock-control none`, as nsight-python), print whose rules made each
#   column, and put a Welch interval on each difference.
# - When Nsight Compute and CUPTI disagree on a short kernel, test the reasons instead of naming
#   one: a `cache_control="none"` call isolates the flush, a second call of one setting gives the
#   run-to-run band a difference must exceed, and a fit on kernel count and length separates a
#   cost per kernel (which a % hides) from a share of the length, bounded by the clocks measured
#   (NVML's during CUPTI's call, Nsight Compute's own) -- a bound that holds on a held clock too.
# - CUPTI is the cheap clock: durations, no replay, warm caches, free clocks. No counters, no cache
#   or clock control, no clock reading (NVML's is the nearest), no row for a kernel-less region, and
#   no `torch.profiler` beside it.
# - CUDA events and wall clocks time your *code*, launch and dispatch included: fine for a long
#   kernel, mostly overhead for a microsecond one -- tens of µs that move from launch to launch and
#   from process to process, with or without a profiler tracing them (section 4 printed both).
#
# ## Try it
#
# - Add `clock_control="base"` to `NCU_SETTINGS` (the command line's own default) and watch the
#   clock column drop and the Nsight Compute times move away from CUPTI's.
# - Add a size to `SIZES` in the file, e.g. 256: does cuBLAS split it too, and what does the flush
#   between its kernels cost?
#
# Docs: [tools and `nsight.activate`](https://docs.nvidia.com/nsight-python/tools.html),
# [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html),
# [the Nsight Compute collector](https://docs.nvidia.com/nsight-python/collection/ncu.html);
# the CUPTI collector's source: [`nsight/collection/cupti.py`](https://github.com/NVIDIA/nsight-python).

# %%
nt.summary()
