# %% [markdown]
# # 09 · CUPTI against Nsight Compute, and two more clocks
#
# **What you will learn**
# - how nsight-python's two tools time the *same* kernels: the experimental **CUPTI backend**
#   (each kernel timed once as it runs, durations only) and **Nsight Compute** (each kernel
#   replayed alone, caches flushed, any metric) -- with a Welch interval on each difference;
# - where Nsight Compute's extra time on a short kernel comes from, tested on your GPU: a run
#   without the cache flush (`cache_control="none"`) and the clock each kernel ran at
#   (`gpc__cycles_elapsed.avg.per_second`);
# - why only one of the two tools can live in a process, and how to run the other one next to
#   it, on the same file;
# - what CUDA events and a wall clock add to a kernel's duration, timed over the very launches
#   CUPTI timed and again with no profiler attached;
# - four things CUPTI cannot do, each tried on your GPU, and a small check that turns an empty
#   result into a clear error.
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
# the two tools. Each is in an annotation of its own: cuBLAS may split a small matmul into a GEMM
# and a reduction (split-K), so the kernels per run differ by size, and nsight-python checks
# them per annotation.
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

# %% writefile cupti_ncu_kernels.py
"""09's workload: imported by the notebook, run by the ncu command line, by a CUPTI child and with no profiler."""
import inspect
import os
import sys

if __name__ == "__main__" and sys.argv[1:2] == [
    "cupti"
]:  # the CUPTI child: these steps, in this order
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
        _ = (
            x + x if what == "add" else y.copy_(x)
        )  # copy_ between float32 tensors: a memcpy, not a kernel


def raised(call, kind):  # the message of the `kind` exception call() raises, or None
    try:
        call()
    except kind as exc:
        return str(exc)


def measured(call, annotations):
    """call()'s table, or a LookupError naming the annotations without a row, whichever way nsight-python said so."""
    try:
        df, said = call().to_dataframe(), "a table without them"
    except (
        RuntimeError
    ) as exc:  # no table at all: nsight's own error only (where it was raised); CUDA's propagates
        if not inspect.trace()[-1].frame.f_globals.get("__name__", "").startswith("nsight"):
            raise
        df, said = {}, f"RuntimeError: {exc}"
    missing = [a for a in annotations if a not in set(df.get("Annotation", []))]
    if missing:
        raise LookupError(
            f"no row for {missing} (nsight-python gave {said}): no kernel there? A memcpy is not one"
        )
    return df


def cupti_limits():
    """Three things the CUPTI backend (the active tool) cannot do, each tried; plain values back."""
    counter = nsight.analyze.kernel(
        runs=1, metrics=["dram__bytes_read.sum"], thermal_mode="off", verbosity=SILENT
    )
    found = {
        "counter_error": raised(lambda: counter(region)(N_ADD, "add"), ValueError),
        "x2_us": {},
    }  # 1. a counter
    n = torch.cuda.get_device_properties(0).L2_cache_size // 16  # float32 x: a quarter of the L2
    scratch = torch.empty(8 * n, device="cuda")  # twice the L2: filling it evicts x

    def scale(n, flush):
        x = torch.randn(n, device="cuda")
        if flush:
            scratch.fill_(1.0)  # 2. a flush by hand, outside the annotation
        with nsight.annotate("x * 2"):
            _ = x * 2.0

    for cache, clock in (("all", "none"), ("none", "none"), ("all", "base")):
        df = nsight.analyze.kernel(
            runs=10, cache_control=cache, clock_control=clock, thermal_mode="off", verbosity=SILENT
        )(scale)(configs=[(n, False), (n, True)]).to_dataframe()
        found["x2_us"][f"{cache}/{clock}"] = list(
            df.MinValue / 1e3
        )  # fastest run: [warm, flushed by hand]
    copy = nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)(
        region
    )  # 3. a region with no kernel
    return found | {
        "copy_error": raised(lambda: measured(lambda: copy(N_ADD, "copy"), ["copy"]), LookupError)
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
    seen, add = (
        profiler_events(),
        nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)(region),
    )
    return {
        "cuda_events": seen,
        "nsight_after": raised(lambda: measured(lambda: add(N_ADD, "add"), ["add"]), LookupError),
    }


if __name__ == "__main__":
    from nspy_tutorial import ncu_cli

    warm_up()  # as before the in-process measurements: cuBLAS's first-call setup outside
    if (
        sys.argv[1] == "cupti"
    ):  # a CUPTI-side measurement; its result (tables included) as one JSON line
        found = {**globals()[sys.argv[2]](), "libcupti": LIBCUPTI.path}
        print(
            "NSPY_RESULT "
            + json.dumps(
                found, default=lambda df: json.loads(df.to_json(orient="split", index=False))
            )
        )
    else:  # the ncu command line (configs x runs, as nsight-python), or "plain": no profiler
        ncu_cli.replay(
            globals(), ["workload", "[[]]", str(RUNS)] if sys.argv[1] == "plain" else None
        )
        if (
            sys.argv[1] == "plain"
        ):  # the clocks of those runs, then torch.profiler with CUPTI to itself
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

from nspy_tutorial import backend, lifetime, ncu_cli

TIME, CLOCK = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
CUPTI_INSTALL = (
    backend.cupti_install_command()
)  # the pinned cupti-python and libcupti 13.4, in a folder of their own
CUPTI_REMEDY = f"`pip install 'nspy-tutorial[cupti]'`, or for the child only: `{ncu_cli.command_text(CUPTI_INSTALL)}`"
CUPTI = NCU = PLAIN = (
    None  # sections 1, 2 and 4 set them: each tool's measurement, and one with no profiler
)


def cupti_child(function: str) -> dict:
    """`python cupti_ncu_kernels.py cupti <function>`, with cupti-python from here or its own folder (Colab: pip)."""
    if backend.cupti_problem(backend.find_cupti_library(), backend.cupti_python_available()):
        if ENV.on_colab and backend.use_cupti_target()[1]:
            print(f"  $ {ncu_cli.command_text(CUPTI_INSTALL)}")
            code, output = lifetime.run(CUPTI_INSTALL, dict(os.environ), 600)
            if code:
                raise nt.Skip(f"pip failed: {output.strip()[-200:]}", CUPTI_REMEDY, needs="cupti")
        if problem := backend.use_cupti_target()[
            1
        ]:  # else on this process's path and its children's
            raise nt.Skip(
                f"CUPTI cannot run in a child process here: {problem}", CUPTI_REMEDY, needs="cupti"
            )
    found = ncu_cli.run_json("cupti_ncu_kernels.py", ["cupti", function], timeout=300)
    print(
        f"  CUPTI child: NSPY_NCU_INIT_AT_IMPORT=0, preloaded {found['libcupti']}, then nsight, CUPTI, torch"
    )
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
    s.result = f"{ENV.backend or 'no'} backend here; each tool in a process of its own, on cupti_ncu_kernels.py"

# %% [markdown]
# ## 1. CUPTI times the workload
#
# Ten runs of `workload()`, each kernel timed once as it ran: no replay, caches as warm as the
# preceding `torch.randn` left them, clocks as the GPU chose. The one `if` decides where CUPTI
# runs; `cupti_workload()` in the file does the measuring either way. The seconds printed after
# `[OK]` are what the answer cost (with a child: its start-up too); compare them with section 2's.


# %%
def times(table: pd.DataFrame, metric: str = TIME) -> pd.DataFrame:
    """One row per annotation: mean and SD (us for a time, MHz for a clock), runs, kernels per run."""
    rows = table[table.Metric == metric].set_index("Annotation")
    unit = rows.Unit.map(lambda u: ncu_cli.to_base_units(1.0, u)) * (
        1e6 if metric == TIME else 1e-6
    )
    return pd.DataFrame(
        {
            "mean": rows.AvgValue * unit,
            "sd": rows.StdDev * unit,
            "runs": rows.NumRuns,
            "kernels": rows.Kernel.str.count(r"\|") + 1,
        }
    )


with nt.section("1. CUPTI times the workload") as s:
    ENV.require("profiler", also="cupti")  # CUPTI: in this process or in a child
    # CUPTI is this process's tool (an older ncu), or Nsight Compute holds it (e.g. Colab): CUPTI in a child, same file
    CUPTI = ck.cupti_workload() if ENV.backend == "cupti" else cupti_child("cupti_workload")
    s.result = f"CUPTI: {len(CUPTI['table'])} operations x {ck.RUNS} runs"
    print(f"  {nt.rules('cupti')}")
    nt.show(times(CUPTI["table"]).reset_index(names="op"), ["op", "mean", "sd", "runs", "kernels"])

# %% [markdown]
# ## 2. Nsight Compute times the same workload, flushed and not
#
# Nsight Compute replays each kernel alone. Its default, `cache_control="all"`, flushes the
# caches before every kernel -- also between a split-K GEMM and its reduction, so the reduction
# reads the GEMM's partial sums from DRAM instead of the L2. A second run with
# `cache_control="none"` takes the flush away and keeps everything else. Both collect the clock
# each kernel ran at, `gpc__cycles_elapsed.avg.per_second` (cycles elapsed / duration), and
# leave the clocks free (`clock_control="none"`) as CUPTI does. Three runs each: every run replays
# every kernel, and section 3's Welch intervals say whether three were enough to tell.

# %%
NCU_SETTINGS = dict(
    runs=3,
    metrics=[TIME, CLOCK],
    combine_kernel_metrics=ck.per_run,
    thermal_mode="off",
    verbosity=ck.SILENT,
)

with nt.section("2. Nsight Compute times the same workload, flushed and not") as s:
    ENV.require("profiler")
    tables, source = {}, "ncu" if ENV.backend == "ncu" else "ncu-cli"
    for cache in ("all", "none"):
        if source == "ncu":  # nsight-python's Nsight Compute backend, in this process
            ck.warm_up()
            tables[cache] = nsight.analyze.kernel(cache_control=cache, **NCU_SETTINGS)(
                ck.workload
            )().to_dataframe()
        else:  # an older ncu: the ncu command line on the same file, one run per setting
            ENV.require("ncu-cli")
            tables[cache] = ncu_cli.nsight_table(
                "cupti_ncu_kernels.py",
                ck.workload,
                ncu=ENV.ncu_path,
                configs=[()],
                cache_control=cache,
                report=f"workload-{cache}.ncu-rep",
                **NCU_SETTINGS,
            )
        print(f"  {nt.rules(source, cache_control=cache, clock_control='none')}")
    NCU = tables
    s.result = (
        f"Nsight Compute ({source}): cache_control all and none, {NCU_SETTINGS['runs']} runs each"
    )

# %% [markdown]
# ## 3. Side by side, and a plot: how much longer, and why
#
# For each kernel: the three means, and their differences in % of CUPTI's mean with a **Welch**
# 95 % interval (independent samples, different spreads and run counts; with so few runs the
# t quantile is well above nsight-python's 1.96). An interval that contains 0 means *no
# difference detected at this run count*, not "equal". Then read three columns together:
#
# - **all − none**: what the flush costs: a cold L2 at each kernel's start, and for a split-K
#   matmul (two kernels per run) also the flush between its GEMM and its reduction, which then
#   reads the partial sums from DRAM. A run's kernels are added up, so this table cannot split
#   those two; the `kernels` column says which rows carry both. The two settings ran in two
#   separate `ncu` processes, and the Welch interval covers only the scatter within each: a
#   difference of about a percent can be the move between two calls (notebook 05 §4 measures
#   one), not the flush -- read a small "flush" with that in mind.
# - **the clock columns**: the clock each kernel ran at under Nsight Compute, against the GPU's
#   rated maximum (`ComputeClock`). A kernel bound by the SM clock takes max/clock times as long,
#   so `max/clock − 1` is the most the clock can add (`clock bound us`: that share of CUPTI's
#   time). CUPTI cannot read the clock, and a busy GPU need not run near its maximum (notebook
#   08 watched a long load settle well below it). The bound does not need it to: CUPTI's runs
#   cannot have been faster than at the maximum, so whatever clock they had, this bounds the
#   clock's share from above.
# - **none − CUPTI**: what is left without the flush, in % and in **µs per kernel**. A cost that
#   is the same for every kernel, whatever its length, is a large % of a short kernel and almost
#   nothing of a long one, so a % alone can call the same cost "more than the clock can explain"
#   in one run and "the clock can account for it" in the next. So the cell first asks whether
#   one **cost per kernel** fits every row: the cost the precise rows agree on (each weighted by
#   its precision, so a long matmul's few µs of noise weigh little), times a row's kernels, plus
#   up to the clock's bound, must meet each row's interval -- and the clock
#   must not be able to add that much to the shortest kernel. Where all of that holds, each row
#   reads "fits the per-kernel overhead": a cost per kernel of being measured by Nsight Compute,
#   not the clock (its replay, presumably: this section does not test the cause). If not, each
#   row is read against the clock alone: "the clock can account for it", or "more than the clock
#   can explain".
# - **one cost, or a rising one?** A long kernel's wide interval, plus the clock's bound, can take
#   in more than the short kernels pay, so "every row fits" does not make the cost the same for
#   every length. The cell therefore also ranks µs per kernel against the kernel's length
#   (Spearman). Where they rise together (p < 0.05) it says so: about the fitted cost on the short
#   kernels, more on the longer ones (by how much, printed), within their intervals plus what the
#   clock can add -- not one fixed cost. Only where no such trend shows does it name a **fixed
#   overhead**. With five kernels a rank test is weak: a trend it misses is not shown to be absent.
#
# A long matmul should barely notice either: there the tools should agree within 5 %.


# %%
def welch(a, b):
    """mean(b) - mean(a) and its Welch 95 % half-width, from means, SDs and runs (one row or whole columns)."""
    va, vb = a["sd"] ** 2 / a["runs"], b["sd"] ** 2 / b["runs"]
    dof = (va + vb) ** 2 / (va**2 / (a["runs"] - 1) + vb**2 / (b["runs"] - 1))
    return b["mean"] - a["mean"], np.nan_to_num(
        stats.t.ppf(0.975, dof) * np.sqrt(va + vb)
    )  # no spread: 0


def reading(r) -> str:
    """One kernel's row of compare() in words: the flush (where its interval excludes 0), then the unflushed verdict."""
    said = [
        f"unflushed {r['none-CUPTI']:+.1f} % = {r['us/kernel']:+.2f} us per kernel: {r['unflushed']}"
    ]
    if abs(r["all-none"]) > r["all-none ±"]:
        said.insert(
            0,
            f"flush {r['all-none']:+.1f} %"
            + (" (also between its kernels)" if r["kernels"] > 1 else ""),
        )
    return "; ".join(said)


def compare(cupti: pd.DataFrame, ncu: dict) -> pd.DataFrame:
    """Per kernel: means (us), clocks (MHz), Welch differences in % of CUPTI (the unflushed also in us), verdicts."""
    c = times(cupti)
    a, n = times(ncu["all"]).loc[c.index], times(ncu["none"]).loc[c.index]
    out = pd.DataFrame(
        {
            "kernels": c.kernels,
            "CUPTI us": c["mean"],
            "all us": a["mean"],
            "none us": n["mean"],
            "clock all MHz": times(ncu["all"], CLOCK)["mean"],
            "clock none MHz": times(ncu["none"], CLOCK)["mean"],
            "max MHz": ncu["all"].ComputeClock.iloc[0] / 1e3,
        }
    )
    for name, x, y in (("all-CUPTI", c, a), ("all-none", n, a), ("none-CUPTI", c, n)):
        d, half = welch(x, y)
        out[name], out[name + " ±"] = 100 * d / c["mean"], 100 * half / c["mean"]
    bound = c["mean"] * (
        out["max MHz"] / out["clock none MHz"] - 1
    )  # us: the most the clock can add
    out["us/kernel"], out["clock bound us"] = (
        d / c.kernels,
        bound,
    )  # d, half: the unflushed difference, in us
    out["fixed us"], fits = fixed_overhead(d, half, c.kernels, bound)
    out["unflushed"] = np.select(
        [fits, abs(d) <= half, d + half < 0, d - half <= bound],
        [
            "fits the per-kernel overhead",
            "no difference detected",
            "faster than CUPTI",
            "the clock can account for it",
        ],
        "more than the clock can explain",
    )
    return out.reset_index(names="op")


def fixed_overhead(
    d: pd.Series, half: pd.Series, kernels: pd.Series, bound: pd.Series
) -> tuple[float, pd.Series]:
    """The per-kernel cost the precise rows agree on, the rows meeting it; NaN, none: not all, or the clock could add it."""
    weight = (
        kernels / half
    ) ** 2  # inverse variance: a long kernel's few us of noise per kernel weigh little
    cost = float((d / kernels * weight).sum() / weight.sum())
    fits = (d + half >= kernels * cost) & (
        d - half <= kernels * cost + bound
    )  # plus up to the clock's bound
    return (cost, fits) if fits.all() and cost > bound.min() else (float("nan"), fits & False)


def overhead(side: pd.DataFrame) -> str:
    """Nsight Compute's unflushed extra time over all kernels, in words: one fixed overhead, one rising with length, or not."""
    short, seen = side.loc[side["CUPTI us"].idxmin()], side.unflushed != "no difference detected"
    if not (side.unflushed == "fits the per-kernel overhead").any():
        return (
            "not a fixed overhead (see each kernel's reading)"
            if seen.any()
            else "no unflushed difference detected"
        )
    (rho, p), cost = stats.spearmanr(side["CUPTI us"], side["us/kernel"]), side["fixed us"].iloc[0]
    said = (
        f"an overhead per kernel rising with the kernel's length, not one fixed cost: about {cost:.2f} us on the short "
        f"kernels; the longer ones exceed it by up to {side['us/kernel'].max() - cost:.2f} us, within each row's interval"
        f" plus what the clock can add (Spearman {rho:+.2f}, p {p:.2f})"
        if rho > 0 and p < 0.05
        else f"a fixed overhead of about {cost:.2f} us per kernel, consistent with every row, no trend with length detected (Spearman {rho:+.2f}, p {p:.2f}; {len(side)} kernels, a weak test)"
    )
    return (
        said
        + f"; the clock could add at most {short['clock bound us']:.3f} us to the shortest ({short.op})"
    )


with nt.section("3. Side by side, and a plot: how much longer, and why") as s:
    ENV.require("profiler", also="cupti")
    cupti, ncu = (
        nt.needs(CUPTI, section="1", need="cupti"),
        nt.needs(NCU, section="2", need="ncu-cli"),
    )
    SIDE = compare(cupti["table"], ncu)
    nt.show(
        SIDE, SIDE.columns.drop(["max MHz", "unflushed", "fixed us"])
    )  # the verdicts are in the readings below
    print(
        "\n".join(f"  {r['op']}: {reading(r)}" for r in SIDE.to_dict("records"))
        + f"\n  unflushed, all kernels: {overhead(SIDE)}"
    )
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for shift, cache in (
        (-0.1, "all"),
        (0.1, "none"),
    ):  # each difference with its Welch 95 % interval
        ax.errorbar(
            np.arange(len(SIDE)) + shift,
            SIDE[f"{cache}-CUPTI"],
            yerr=SIDE[f"{cache}-CUPTI ±"],
            fmt="o",
            capsize=3,
            label=f"Nsight Compute, cache_control={cache!r}",
        )
    ax.set(
        xticks=range(len(SIDE)),
        xticklabels=SIDE.op,
        ylabel="difference, % of CUPTI's mean",
        title=ENV.gpu_name,
    )
    ax.axhline(0, color="grey", lw=0.8), ax.legend(fontsize=8), plt.tight_layout()
    counts = {name: list(times(t).kernels) for name, t in (("CUPTI", cupti["table"]), *ncu.items())}
    nt.claim(
        len({tuple(v) for v in counts.values()}) == 1,
        "all three measurements saw the same kernels per run",
        str(counts),
    )
    big = SIDE.iloc[-1]
    nt.claim(
        abs(big["all-CUPTI"]) < 5,
        f"for {big.op} the two tools agree within 5 %",
        f"{big['all-CUPTI']:+.2f} %",
    )
    s.result = (
        f"unflushed: {overhead(SIDE)}; {big.op}: {big['all-CUPTI']:+.1f} % under Nsight Compute"
    )

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
    rows = [
        (op, who, e, w)
        for who, events in (("CUPTI", traced), ("none", plain))
        for op, e, w in events
    ]
    g = pd.DataFrame(rows, columns=["op", "profiler", "events", "wall"]).groupby(
        ["op", "profiler"], sort=False
    )
    out = (
        pd.DataFrame(
            {"events us": g.events.mean(), "SD us": g.events.std(), "wall us": g.wall.mean()}
        )
        / 1e3
    )
    out.insert(0, "kernel us", times(cupti)["mean"].reindex(out.index, level="op"))
    out["overhead us"] = out["events us"] - out["kernel us"]
    size = pd.cut(
        out["overhead us"],
        [-np.inf, 10, 100, 1000, np.inf],
        right=False,
        labels=["a few us", "tens of us", "hundreds of us", "milliseconds"],
    ).astype(str)
    return out.assign(
        **{"in words": size + np.where(out["SD us"] > out["kernel us"], ", noisy", "")}
    ).reset_index()


with nt.section("4. Two more clocks on the same launches: CUDA events and wall time") as s:
    ENV.require("profiler", also="cupti")
    cupti = nt.needs(CUPTI, section="1", need="cupti")
    PLAIN = ncu_cli.run_json(
        "cupti_ncu_kernels.py", ["plain"], timeout=300
    )  # no nsight tool, no profiler
    EVENTS = event_clocks(cupti["events"], PLAIN["events"], cupti["table"])
    print(
        f"  kernel us: {nt.rules('cupti')}\n  events, wall: workload()'s own clocks, CUPTI tracing or no profiler"
    )
    nt.show(EVENTS, list(EVENTS.columns))
    hand = EVENTS[EVENTS.profiler == "none"].reset_index(drop=True)  # no profiler: as timed by hand
    share = 100 * hand["overhead us"] / hand["events us"]
    nt.claim(
        share[0] > 50,
        "for the microsecond add, CUDA events measure mostly overhead",
        f"{share[0]:.0f} %",
    )
    nt.claim(
        share.iloc[-1] < 5,
        f"for {hand.op.iloc[-1]} the overhead is under 5 %",
        f"{share.iloc[-1]:.2f} %",
    )
    add = EVENTS.query("op == 'add'")
    s.result = "events - kernel, add: " + "; ".join(
        f"{us:,.0f} us with profiler {who} ({words})"
        for who, us, words in zip(add.profiler, add["overhead us"], add["in words"])
    )

# %% [markdown]
# ## 5. What CUPTI cannot do
#
# `cupti_limits()` in the file tries three things under CUPTI:
#
# 1. **A hardware counter.** Under CUPTI the only metric is `gpu__time_duration.sum`; ask for a
#    counter and nsight-python refuses -- not at decoration (the collector is built lazily, for
#    whichever tool is active), but at the first **call**, with a `ValueError`.
# 2. **Cache and clock control.** The collector takes neither (notebook 04 reads its signature).
#    Three decorators (`all/none`, `none/none`, `all/base`) time `x * 2` on a vector of a quarter
#    of the L2, warm
#    from `torch.randn`, and a second configuration that flushes it **by hand** first. Had
#    `cache_control="all"` flushed, the warm configuration would be as slow as the flushed one;
#    that comparison sits inside one call, so the clock's state cannot decide it. The fastest
#    of the runs is compared: one slow run cannot move it.
# 3. **A region without a kernel.** `y.copy_(x)` between two float32 tensors is a memcpy, not a
#    kernel: CUPTI attributes nothing to the annotation. nsight-python 1.1.0 then returns an
#    empty table, with no error; 1.1.1 and later raise a `RuntimeError` (no kernel profiled).
#    `measured()` in the file takes the call and turns either answer into one error naming the
#    annotation, so the check does not depend on the version, nor on the wording of its message.

# %%
with nt.section("5. What CUPTI cannot do") as s:
    ENV.require("profiler", also="cupti")
    LIMITS = ck.cupti_limits() if ENV.backend == "cupti" else cupti_child("cupti_limits")
    x2 = pd.DataFrame(LIMITS["x2_us"], index=["warm us", "flushed by hand us"]).T.reset_index(
        names="cache/clock"
    )
    print(
        f"  a counter -> ValueError: {LIMITS['counter_error']}\n  memcpy: measured() -> {LIMITS['copy_error']}"
    )
    print(f"  {nt.rules('cupti', cache_control='all, none', clock_control='none, base')}")
    nt.show(x2, list(x2.columns), fmt="{:,.3f}")
    spread = x2["warm us"].max() / x2["warm us"].min()
    nt.claim(
        LIMITS["counter_error"] is not None,
        "under CUPTI the call that asks for a hardware counter is refused",
    )
    nt.claim(spread < 1.05, "the three cache/clock settings give the same warm time (within 5 %)")
    nt.claim(
        (x2["flushed by hand us"] > x2["warm us"]).all(),
        "cache_control='all' flushed nothing: in every setting the warm x * 2 beats the one flushed by hand",
    )
    nt.claim(
        "['copy']" in (LIMITS["copy_error"] or ""),
        "a memcpy-only region gives no row, and measured() names it",
    )
    s.result = f"counter refused; cache/clock settings within {100 * (spread - 1):.1f} %; memcpy region: no row"

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
    plain = (PLAIN or ncu_cli.run_json("cupti_ncu_kernels.py", ["plain"], timeout=300))[
        "cuda_events"
    ]  # no nsight tool
    beside = (
        ck.profiler_beside_cupti()
        if ENV.backend == "cupti"
        else cupti_child("profiler_beside_cupti")
    )
    nt.claim(
        plain >= 5,
        "with no nsight tool active, torch.profiler sees each matmul",
        f"{plain} events, 5 matmuls",
    )
    after = (
        "no kernel record, blind too (restart to profile again)"
        if beside["nsight_after"]
        else "a row, as before"
    )
    print(
        f"  beside nsight's CUPTI: {beside['cuda_events']} CUDA events; then nsight-python on x + x (one kernel): {after}"
    )
    if ONE_LIBCUPTI:  # one libcupti, one subscriber (section 0)
        nt.claim(
            beside["cuda_events"] == 0,
            "beside nsight's CUPTI, torch.profiler records no CUDA event",
        )
    s.result = f"torch.profiler: {beside['cuda_events']} CUDA events beside nsight's CUPTI, {plain} without; then nsight: {after}"

# %% [markdown]
# ## Takeaways
#
# - One tool per process. To compare, run the other tool next door on the same file: CUPTI in a
#   child (`NSPY_NCU_INIT_AT_IMPORT=0`, libcupti 13.4+ before torch), or the `ncu` command line.
# - Compare like with like (`--clock-control none`, as nsight-python), print whose rules made each
#   column, and put a Welch interval on each difference.
# - When Nsight Compute and CUPTI disagree on a short kernel, test the reasons instead of naming
#   one: a `cache_control="none"` run isolates the flush, the clock metric bounds the clock's share,
#   and the difference in µs per kernel shows a per-kernel overhead that a % hides (and whether it
#   grows with the kernel's length).
# - CUPTI is the cheap clock: durations, no replay, warm caches, free clocks. No counters, no cache
#   or clock control, no row for a kernel-less region, and no `torch.profiler` beside it.
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
