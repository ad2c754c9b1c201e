# %% [markdown]
# # 09 · CUPTI against Nsight Compute, and two more clocks
#
# **What you will learn**
# - how nsight-python's two tools time the *same* matmuls: the Nsight Compute backend
#   (replay, cache and clock control, any metric) and the experimental **CUPTI backend**
#   (each kernel timed once as it runs, durations only) -- side by side with their spread,
#   and what each answer cost in wall time;
# - why only one of them can live in a process, and how to run the other one next to it:
#   CUPTI in a child process started with `NSPY_NCU_INIT_AT_IMPORT=0`, or Nsight Compute
#   through the `ncu` command line with its cache and clock settings matched to
#   nsight-python's defaults;
# - what CUDA events and a wall clock add to a kernel's duration (launch overhead) --
#   large for a microsecond kernel, small for a long one;
# - four things CUPTI cannot do, each shown on your GPU: hardware counters, cache and
#   clock control, timing a region that launched no kernel -- plus a small check you can
#   reuse that turns such an empty result into a clear error -- and sharing CUPTI with
#   `torch.profiler`.
#
# Which way round the comparison runs depends on your machine: the notebook uses
# whichever backend `nt.setup` activated *in this process* and starts the other tool
# *outside* it. Every nsight-python call runs with `verbosity=SILENT` (nothing printed
# by nsight itself) and `thermal_mode="off"` (notebook 08 is about thermal control).
#
# | section | needs |
# |---|---|
# | 0. who measures what | nothing (runs without a GPU) |
# | 1. the in-process tool | any nsight-python backend |
# | 2. the other tool | `ncu` (any version) when CUPTI is in-process; cupti-python when Nsight Compute is |
# | 3, plot, 4 | sections 1 and 2 (3, plot), section 1 (4) |
# | 5-8. CUPTI's limits | a backend; CUPTI in this process, or cupti-python for a child |

# %%
{{SETUP}}

# %%
import glob
import inspect
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import matplotlib.pyplot as plt
import nsight
import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from nspy_tutorial import backend, child, ncu_cli

pd.set_option("display.width", 200)
SILENT = nsight.VerbosityLevel.SILENT
TIME = "gpu__time_duration.sum"
SIZES = [512, 1024, 2048, 4096]  # the seed's fp32 matmuls, n x n x n
RUNS = 10
N_ADD = 1 << 14  # a 16K-element add: a kernel of about a microsecond
OUT_DIR = tempfile.mkdtemp(prefix="nspy_09_")
IN_PROCESS = ENV.backend  # "cupti", "ncu" or None: the tool nt.setup activated in this process
IN_SIDE = OUT_SIDE = CUPTI_CHILD = None  # filled by sections 1, 2 and 5


def total(x, y):
    """combine_kernel_metrics: a run's duration is the sum of the kernels it launched."""
    return x + y


def fresh_prefix() -> str:
    """A new, empty output folder for one decorated function (its CSVs are then easy to find)."""
    return tempfile.mkdtemp(dir=OUT_DIR) + "/"


def per_run(prefix: str) -> pd.DataFrame:
    """Every run's row from the raw CSVs nsight-python wrote (output_csv=True), one file per call."""
    files = sorted(glob.glob(f"{prefix}profiled_data-*.csv"))
    return pd.concat([pd.read_csv(f) for f in files], ignore_index=True)


def spread(ns) -> dict:
    """Mean with its Student-t 95 % half-width, and the robust view: median, MAD, min (all in us)."""
    v = np.asarray(ns, dtype=float)
    sd, med = v.std(ddof=1), np.median(v)
    half = stats.t.ppf(0.975, len(v) - 1) * sd / np.sqrt(len(v))
    return {"runs": len(v), "mean_us": v.mean() / 1e3, "t95_us": half / 1e3, "median_us": med / 1e3,
            "MAD_us": np.median(np.abs(v - med)) / 1e3, "min_us": v.min() / 1e3, "RSD_%": 100 * sd / v.mean()}


def welch(a, b) -> tuple[float, float]:
    """mean(b) - mean(a) and its Welch 95 % half-width (unequal variances, Welch-Satterthwaite)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return b.mean() - a.mean(), 0.0
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return b.mean() - a.mean(), stats.t.ppf(0.975, dof) * np.sqrt(va + vb)

# %% [markdown]
# ## 0. Who measures what on this machine
#
# nsight-python loads exactly **one tool per process** (`nsight.activate`; see
# `nsight/tools_manager.py`). Nsight Compute is loaded at `import nsight` unless
# `NSPY_NCU_INIT_AT_IMPORT=0`, and once loaded it cannot be unloaded -- `nsight.deactivate()`
# only warns. So a comparison needs a second process:
#
# - **Nsight Compute active here** (ncu ≥ 2026.2.1, e.g. Colab after notebook 01): CUPTI
#   runs in a child Python process that sets `NSPY_NCU_INIT_AT_IMPORT=0`, loads libcupti
#   13.4+ *before* torch, and calls `nsight.activate(nsight.Tool.CUPTI)`.
# - **CUPTI active here** (an older ncu): Nsight Compute's side comes from the `ncu`
#   command line in launch mode on a small script, with `--cache-control all
#   --clock-control none` -- nsight-python's defaults, **not** ncu's own
#   (`--clock-control base`), so that the command line measures what nsight-python's
#   Nsight Compute backend would.
#
# The CUPTI collector does not even accept the two control options -- read from its
# signature below.

# %%
with nt.section("0. Who measures what on this machine") as s:
    cupti_params = [p for p in inspect.signature(nsight.collection.cupti.CUPTICollector.__init__).parameters
                    if p != "self"]
    print(f"  CUPTICollector.__init__ takes: {', '.join(cupti_params)}")
    nt.claim("cache_control" not in cupti_params and "clock_control" not in cupti_params,
             "the CUPTI collector takes neither cache_control nor clock_control")
    if IN_PROCESS == "cupti":
        plan = "CUPTI in this process; Nsight Compute from the ncu command line on a script"
        captions = {"CUPTI": nt.rules("cupti"),
                    "Nsight Compute": nt.rules("ncu-cli", cache_control="all", clock_control="none")}
    elif IN_PROCESS == "ncu":
        plan = "Nsight Compute in this process; CUPTI in a child process"
        captions = {"Nsight Compute": nt.rules("ncu"), "CUPTI": nt.rules("cupti")}
    else:
        plan = f"no nsight-python backend in this process ({ENV.gpu_problem or ENV.backend_reason}): nothing is measured"
        captions = {}
    print(f"  plan: {plan}")
    for tool, caption in captions.items():
        print(f"  {tool:15s} {caption}")
    s.result = plan

# %% [markdown]
# ## 1. In this process: the active backend times four matmuls
#
# The seed's benchmark: fp32 matmuls of 512 to 4096, 10 runs each, fresh inputs each run
# created **outside** the annotation. Two details that keep the numbers honest:
#
# - **one call per size.** cuBLAS picks its algorithm by size, and some algorithms launch
#   two kernels (a split-K reduction, for example); nsight-python requires the same number
#   of kernels per run within one call, and `combine_kernel_metrics=total` adds the
#   kernels of one run up.
# - **a warm-up of each size first**, outside any annotation, so that no run pays for
#   cuBLAS's first-call setup.
#
# `output_csv=True` keeps every run's value (`profiled_data-matmul-<k>.csv`): the medians
# and spreads below come from those, not from the aggregated row. The wall time of the
# four calls is what the measurement cost.

# %%
def matmul_bench(prefix: str):
    @nsight.analyze.kernel(runs=RUNS, thermal_mode="off", verbosity=SILENT, combine_kernel_metrics=total,
                           output_csv=True, output_prefix=prefix)
    def matmul(n: int) -> None:
        a = torch.randn(n, n, device="cuda")  # not measured: outside the annotation
        b = torch.randn(n, n, device="cuda")
        with nsight.annotate("matmul"):
            _ = a @ b
    return matmul


def warm_up(sizes) -> None:
    """Each size once, outside any annotation: cuBLAS's first-call costs are not measured."""
    for n in sizes:
        _ = torch.randn(n, n, device="cuda") @ torch.randn(n, n, device="cuda")
    torch.cuda.synchronize()


def runs_from_raw(raw: pd.DataFrame) -> pd.DataFrame:
    """(n, run, ns, kernels, Kernel) from nsight-python's raw rows; combined kernel names are joined by '|'."""
    out = raw[["n", "Value", "Kernel"]].rename(columns={"Value": "ns"})
    return out.assign(run=out.groupby("n").cumcount(), kernels=out.Kernel.str.count(r"\|") + 1)


def show_spread(side: dict) -> pd.DataFrame:
    """Print whose rules, the spread per size and each size's kernels for one tool's runs; return the table."""
    print(f"  {side['tool']}, {side['where']}: {side['rules']}")
    table = pd.DataFrame([{"n": n, **spread(side["runs"][side["runs"].n == n].ns)} for n in SIZES])
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    for n in SIZES:
        first = side["runs"][side["runs"].n == n].Kernel.iloc[0]
        print(f"  n={n}: {side['kernels'][n]} kernel(s) per run: "
              + ", ".join(nt.short_kernel_name(k) for k in first.split("|")))
    return table


with nt.section("1. In this process: the active backend times four matmuls") as s:
    ENV.require("profiler")
    prefix = fresh_prefix()
    matmul = matmul_bench(prefix)
    warm_up(SIZES)
    start = time.perf_counter()
    for n in SIZES:
        matmul(configs=[n])  # one call per size
    wall = time.perf_counter() - start
    runs = runs_from_raw(per_run(prefix))
    tool = {"cupti": "CUPTI", "ncu": "Nsight Compute"}[IN_PROCESS]
    IN_SIDE = {"tool": tool, "where": "this process", "runs": runs, "profiled_s": wall, "process_s": None,
               "kernels": runs.groupby("n").kernels.first().to_dict(),
               "rules": nt.rules(IN_PROCESS)}
    table = show_spread(IN_SIDE)
    nt.claim((runs.groupby("n").size() == RUNS).all(), f"every size has {RUNS} runs")
    nt.claim(table.median_us.is_monotonic_increasing and table.median_us.is_unique,
             "the duration grows with the matrix size", " < ".join(f"{v:,.1f}" for v in table.median_us) + " us")
    s.result = (f"{tool}: n={SIZES[-1]} median {table.median_us.iloc[-1]:,.1f} us; "
                f"{len(SIZES)} x {RUNS} runs profiled in {wall:.1f} s")

# %% [markdown]
# ## 2. In another process: the other tool
#
# **If CUPTI is active here**, Nsight Compute's side comes from the `ncu` command line.
# The script below is the same benchmark without nsight-python: an NVTX range named
# `matmul` plays the part of `nsight.annotate("matmul")`, and `--nvtx-include matmul/`
# profiles only what is launched inside it. Two settings make it comparable with
# nsight-python's Nsight Compute backend: `--cache-control all` (flush before each
# kernel, the default of both) and `--clock-control none` (let the GPU boost --
# nsight-python's default; the command line's own default, `base`, would lock the clocks
# lower). ncu prints one row per kernel launch in launch order; with the kernels per run
# that section 1 found for each size, the launches split into runs.
#
# **If Nsight Compute is active here**, CUPTI runs in a child process. The order inside
# that script is the lesson: `NSPY_NCU_INIT_AT_IMPORT=0` so that `import nsight` does
# not load Nsight Compute, the newer libcupti (13.4+, which cupti-python needs) loaded
# **by path before torch** can load its own older copy, then
# `nsight.activate(nsight.Tool.CUPTI)`, and only then torch. The child is started
# without the profiler-injection variables this process carries
# (`ncu_cli.child_environment()`), and prints its runs as one JSON line. cupti-python
# comes from this notebook's packages if they have it; if not, `cupti_child()` looks in a
# folder of its own -- and on Colab installs it there first (`pip install --target`, the
# command is printed), as the original tutorial did: only the child puts that folder on
# its `PYTHONPATH`, so this process's torch keeps its own libcupti.

# %%
NCU_SCRIPT = textwrap.dedent('''
    import json, sys, time
    import torch
    sizes, runs = [int(n) for n in sys.argv[1].split(",")], int(sys.argv[2])
    for n in sizes:  # warm-up outside the NVTX range: ncu does not profile these
        _ = torch.randn(n, n, device="cuda") @ torch.randn(n, n, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for n in sizes:
        for _ in range(runs):
            a = torch.randn(n, n, device="cuda")  # outside the range, like outside nsight.annotate
            b = torch.randn(n, n, device="cuda")
            torch.cuda.nvtx.range_push("matmul")
            _ = a @ b
            torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("NSPY_RESULT " + json.dumps({"profiled_s": time.perf_counter() - start}))
''')

CUPTI_SCRIPT = textwrap.dedent('''
    import ctypes, glob, json, os, sys, tempfile, time
    libcupti, sizes, runs = sys.argv[1], [int(n) for n in sys.argv[2].split(",")], int(sys.argv[3])
    os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"        # 1. import nsight without loading Nsight Compute
    ctypes.CDLL(libcupti, mode=ctypes.RTLD_GLOBAL)     # 2. libcupti 13.4+ by path, before torch loads its own
    import nsight
    nsight.activate(nsight.Tool.CUPTI)                 # 3. the CUPTI backend
    import pandas as pd
    import torch                                       # 4. only now torch and CUDA

    def total(x, y):
        return x + y

    prefix = tempfile.mkdtemp(prefix="nspy_09_cupti_") + "/"

    @nsight.analyze.kernel(runs=runs, thermal_mode="off", verbosity=nsight.VerbosityLevel.SILENT,
                           combine_kernel_metrics=total, output_csv=True, output_prefix=prefix)
    def matmul(n):
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        with nsight.annotate("matmul"):
            _ = a @ b

    for n in sizes:  # warm-up, outside any annotation
        _ = torch.randn(n, n, device="cuda") @ torch.randn(n, n, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    for n in sizes:
        matmul(configs=[n])  # one call per size
    profiled_s = time.perf_counter() - start
    raw = pd.concat([pd.read_csv(f) for f in sorted(glob.glob(prefix + "profiled_data-*.csv"))])
    print("NSPY_RESULT " + json.dumps({"tool": nsight.get_active_tool().value, "profiled_s": profiled_s,
          "rows": [[int(n), float(v), str(k)] for n, v, k in zip(raw.n, raw.Value, raw.Kernel)]}))
''')

CUPTI_DIR = os.path.join(tempfile.gettempdir(), "nspy_cupti")  # cupti-python for the child only (the seed's way)
CUPTI_INSTALL = [sys.executable, "-m", "pip", "install", "-q", "--target", CUPTI_DIR, "--no-deps",
                 "cupti-python>=13.4", "nvidia-cuda-cupti~=13.4", "pyelftools"]
CUPTI_REMEDY = ("`pip install 'nsight-python[cupti]'` (cupti-python, which needs libcupti 13.4+) and restart the "
                f"kernel, or install it beside this notebook's packages for the child only: `{ncu_cli.command_text(CUPTI_INSTALL)}`")


def cupti_child() -> tuple[backend.CuptiLibrary, dict]:
    """libcupti 13.4+ and the extra environment a CUPTI child process needs.

    This process's packages first; else CUPTI_DIR, where on Colab the cell installs
    cupti-python and its libcupti itself (printing the command), as the original tutorial
    did: beside the notebook's packages, on the child's PYTHONPATH only, so the notebook's
    torch keeps its own libcupti. Raises nt.Skip when neither is there.
    """
    library = backend.find_cupti_library()
    if backend.cupti_problem(library, backend.cupti_python_available()) is None:
        return library, {}
    if ENV.on_colab and not os.path.isdir(os.path.join(CUPTI_DIR, "cupti")):
        print(f"  $ {ncu_cli.command_text(CUPTI_INSTALL)}")
        subprocess.run(CUPTI_INSTALL, check=True)
    library = backend.find_cupti_library([CUPTI_DIR]) if os.path.isdir(CUPTI_DIR) else None
    has_cupti = os.path.isdir(os.path.join(CUPTI_DIR, "cupti"))
    problem = backend.cupti_problem(library, has_cupti)
    if problem:
        raise nt.Skip(f"CUPTI cannot run in a child process here: {problem}", CUPTI_REMEDY, needs="cupti")
    return library, {"PYTHONPATH": os.pathsep.join(p for p in (CUPTI_DIR, os.environ.get("PYTHONPATH")) if p)}


def runs_from_ncu(launches: pd.DataFrame, kernels: dict) -> pd.DataFrame:
    """Split ncu's launches (launch order) into runs: size by size, RUNS runs, kernels[n] launches per run."""
    expected = RUNS * sum(kernels[n] for n in SIZES)
    if len(launches) != expected:
        raise RuntimeError(f"ncu profiled {len(launches)} launches inside 'matmul'; {RUNS} runs x {kernels} "
                           f"kernels per run (section 1) predict {expected}: the split into runs would be wrong")
    rows, i = [], 0
    for n in SIZES:
        for r in range(RUNS):
            part = launches.iloc[i:i + kernels[n]]
            i += kernels[n]
            rows.append({"n": n, "run": r, "ns": part.ns.sum(), "kernels": kernels[n],
                         "Kernel": "|".join(part["Kernel Name"])})
    return pd.DataFrame(rows)


with nt.section("2. In another process: the other tool") as s:
    ENV.require("profiler")
    if IN_SIDE is None:
        raise nt.Skip("needs section 1's in-process measurements (kernels per run), and it did not run",
                      "see section 1's SKIPPED or FAILED reason above")
    args = [",".join(map(str, SIZES)), str(RUNS)]
    if IN_PROCESS == "cupti":
        ENV.require("ncu-cli")
        script = ncu_cli.write_script(NCU_SCRIPT, "matmuls.py", OUT_DIR)
        cmd = ncu_cli.ncu_command(ENV.ncu_path, script, args, [TIME], ["matmul"],
                                  cache_control="all", clock_control="none")  # nsight-python's defaults
        print(f"  $ {ncu_cli.command_text(cmd)}")
        start = time.perf_counter()
        stdout = ncu_cli.run(cmd, timeout=300)
        process_s = time.perf_counter() - start
        launches = ncu_cli.parse_csv(stdout)
        launches = launches[launches["Metric Name"] == TIME].sort_values("ID").reset_index(drop=True)
        launches["ns"] = [1e9 * ncu_cli.to_base_units(v, u)  # ncu scales its units: nsecond, usecond, ...
                          for v, u in zip(launches["Metric Value"], launches["Metric Unit"])]
        runs = runs_from_ncu(launches, IN_SIDE["kernels"])
        OUT_SIDE = {"tool": "Nsight Compute", "where": f"ncu {'.'.join(map(str, ENV.ncu_version or ()))} command line",
                    "runs": runs, "profiled_s": child.parse_result(stdout)["profiled_s"], "process_s": process_s,
                    "kernels": IN_SIDE["kernels"],
                    "rules": nt.rules("ncu-cli", cache_control="all", clock_control="none")}
    else:
        library, extra_env = cupti_child()
        print(f"  child: NSPY_NCU_INIT_AT_IMPORT=0, preloading {library.path} "
              f"(libcupti {backend.version_text(library.version)})")
        script = ncu_cli.write_script(CUPTI_SCRIPT, "cupti_matmuls.py", OUT_DIR)
        done = child.run_json(script, [library.path, *args], env=extra_env, timeout=300)
        nt.claim(done.result["tool"] == "cupti", "the child profiled with the CUPTI backend", done.result["tool"])
        runs = runs_from_raw(pd.DataFrame(done.result["rows"], columns=["n", "Value", "Kernel"]))
        OUT_SIDE = {"tool": "CUPTI", "where": "a child process", "runs": runs, "profiled_s": done.result["profiled_s"],
                    "process_s": done.seconds, "kernels": runs.groupby("n").kernels.first().to_dict(),
                    "rules": nt.rules("cupti")}
    table = show_spread(OUT_SIDE)
    nt.claim((runs.groupby("n").size() == RUNS).all(), f"every size has {RUNS} runs")
    s.result = (f"{OUT_SIDE['tool']} ({OUT_SIDE['where']}): n={SIZES[-1]} median {table.median_us.iloc[-1]:,.1f} us; "
                f"profiled in {OUT_SIDE['profiled_s']:.1f} s, whole process {OUT_SIDE['process_s']:.1f} s")

# %% [markdown]
# ## 3. Side by side: durations, spread and what each answer cost
#
# For each size: each tool's mean with its Student-t 95 % interval (10 runs: the t quantile
# is 2.26, not nsight-python's 1.96), the median and MAD (robust to one slow run), and the
# difference of the means with a **Welch** 95 % interval -- the two tools' runs are
# independent samples with different spreads. An interval that contains 0 means *no
# difference detected at this run count*, not "equal".
#
# What to expect, and why the tools may differ:
#
# - both time `gpu__time_duration.sum`, the kernel's own duration, so for a long matmul
#   they should be close;
# - Nsight Compute flushes the caches before each kernel; CUPTI sees the caches as the
#   preceding `torch.randn` left them (the 512 inputs fit in any L2). A long matmul
#   barely feels it; a kernel of a few microseconds can -- on the H200 this notebook was
#   tested on, the 512 matmul (about 13 us) took a third longer under Nsight Compute,
#   the 4096 one (2.7 ms) 0.3 % longer;
# - neither locks the clocks here, but Nsight Compute pauses the GPU between kernels to
#   set up each one, so a kernel may start on a clock that is still ramping up.
#
# The cost: the wall time of the profiled work (4 sizes × 10 runs) in each tool, and for
# the out-of-process tool also the whole process (Python, torch and CUDA start-up
# included).

# %%
with nt.section("3. Side by side: durations, spread and what each answer cost") as s:
    ENV.require("profiler")
    if IN_SIDE is None or OUT_SIDE is None:
        raise nt.Skip("needs both tools' runs from sections 1 and 2, and at least one did not run",
                      "see the SKIPPED or FAILED reasons of sections 1 and 2 above")
    rows = []
    for n in SIZES:
        a = IN_SIDE["runs"][IN_SIDE["runs"].n == n].ns.to_numpy()
        b = OUT_SIDE["runs"][OUT_SIDE["runs"].n == n].ns.to_numpy()
        d, half = welch(a, b)
        row = {"n": n}
        for side, st in ((IN_SIDE, spread(a)), (OUT_SIDE, spread(b))):
            row[f"{side['tool']}: mean +/- t95, us"] = f"{st['mean_us']:,.2f} +/- {st['t95_us']:,.2f}"
            row[f"{side['tool']}: median (MAD)"] = f"{st['median_us']:,.2f} ({st['MAD_us']:,.2f})"
        row.update({"diff_%": 100 * d / a.mean(), "welch95_%": 100 * half / a.mean(),
                    "verdict": "differ" if abs(d) > half else "no difference detected"})
        rows.append(row)
    SIDE_BY_SIDE = pd.DataFrame(rows)
    print(f"  diff = mean of {OUT_SIDE['tool']} ({OUT_SIDE['where']}) minus mean of {IN_SIDE['tool']} "
          f"({IN_SIDE['where']}), in % of the {IN_SIDE['tool']} mean; {RUNS} runs each")
    diff = [f"{d:+.2f} +/- {h:.2f}" for d, h in zip(SIDE_BY_SIDE["diff_%"], SIDE_BY_SIDE["welch95_%"])]
    shown = SIDE_BY_SIDE.drop(columns=["diff_%", "welch95_%"])
    shown.insert(len(shown.columns) - 1, "diff, % (Welch 95 %)", diff)
    print(shown.to_string(index=False))
    for side in (IN_SIDE, OUT_SIDE):
        print(f"  {side['tool']:15s} {side['rules']}")
    print("\n  what each answer cost (wall time):")
    for side in (IN_SIDE, OUT_SIDE):
        whole = f", whole process {side['process_s']:.1f} s" if side["process_s"] is not None else ""
        print(f"  {side['tool']:15s} ({side['where']}): profiled work {side['profiled_s']:.2f} s{whole}")
    nt.claim(IN_SIDE["kernels"] == OUT_SIDE["kernels"], "both tools saw the same number of kernels per run",
             f"{IN_SIDE['kernels']}")
    for side in (IN_SIDE, OUT_SIDE):
        med = side["runs"].groupby("n").ns.median().loc[SIZES]
        nt.claim(med.is_monotonic_increasing and med.is_unique, f"{side['tool']}: the duration grows with the size")
    big = SIDE_BY_SIDE.iloc[-1]
    s.result = (f"n={SIZES[-1]}: {OUT_SIDE['tool']} {big['diff_%']:+.1f} % +/- {big['welch95_%']:.1f} % vs "
                f"{IN_SIDE['tool']}; profiled work {IN_SIDE['tool']} {IN_SIDE['profiled_s']:.1f} s, "
                f"{OUT_SIDE['tool']} {OUT_SIDE['profiled_s']:.1f} s")

# %% [markdown]
# The plot shows the same numbers: durations per size with their t-intervals (on log
# axes the two tools overlap unless they differ a lot), the relative difference with its
# Welch interval, and the wall time each tool needed for the same 40 measurements.

# %%
with nt.section("Plot: durations, difference and cost per tool") as s:
    ENV.require("profiler")
    if globals().get("SIDE_BY_SIDE") is None:
        raise nt.Skip("needs the table of section 3, which did not run", "see section 3's reason above")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for i, side in enumerate((IN_SIDE, OUT_SIDE)):
        st = pd.DataFrame([spread(side["runs"][side["runs"].n == n].ns) for n in SIZES])
        axes[0].errorbar(np.array(SIZES) * (1 + 0.04 * i), st.mean_us, yerr=st.t95_us, fmt="o-", capsize=3,
                         label=f"{side['tool']} ({side['where']})")
    axes[0].set_xscale("log", base=2); axes[0].set_yscale("log")
    axes[0].set_xlabel("n (fp32 n x n x n matmul)"); axes[0].set_ylabel("kernel time, us (mean +/- t95)")
    axes[0].legend(fontsize=7)
    axes[1].errorbar(SIZES, SIDE_BY_SIDE["diff_%"], yerr=SIDE_BY_SIDE["welch95_%"], fmt="o", capsize=3)
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].set_xscale("log", base=2); axes[1].set_xlabel("n")
    axes[1].set_ylabel(f"{OUT_SIDE['tool']} - {IN_SIDE['tool']}, % (Welch 95 %)")
    labels = [f"{side['tool']}\n{part}" for side in (IN_SIDE, OUT_SIDE)
              for part in (["profiled work"] + (["whole process"] if side["process_s"] is not None else []))]
    values = [v for side in (IN_SIDE, OUT_SIDE)
              for v in ([side["profiled_s"]] + ([side["process_s"]] if side["process_s"] is not None else []))]
    axes[2].bar(labels, values, color=["C0"] + ["C1"] * (len(values) - 1))
    axes[2].tick_params(axis="x", labelsize=7); axes[2].set_ylabel("wall time, s")
    axes[2].set_title(f"{len(SIZES)} sizes x {RUNS} runs", fontsize=9)
    plt.tight_layout(); plt.show()
    s.result = f"plotted {2 * len(SIZES)} duration points and {len(values)} wall times"

# %% [markdown]
# ## 4. Two more clocks: CUDA events and wall time
#
# A profiler's duration is the kernel alone, start to end on the GPU. Two clocks people
# reach for instead measure more:
#
# - **CUDA events** -- `torch.cuda.Event(enable_timing=True)` recorded before and after
#   the op: GPU timestamps that also include whatever the GPU waited for between them
#   (PyTorch's dispatch and the kernel launch, if the GPU was idle);
# - **wall time** -- `time.perf_counter()` around the op and a `synchronize()`: also the
#   Python calls and the synchronisation itself.
#
# Both are measured in the same loop, so each wall interval contains its event interval.
# The kernel durations come from this process's backend: the matmuls from section 1, a
# 16K-element add profiled here with `cache_control="none"` (events see warm caches too;
# under CUPTI the option is ignored anyway). Expect the overhead to dominate the
# microsecond add and to be a few percent of a long matmul.

# %%
def clocks(op, runs: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """CUDA-event and wall-clock durations (ns) of op(), measured in the same loop after a warm-up."""
    op()
    torch.cuda.synchronize()
    events, wall = [], []
    for _ in range(runs):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        begin.record()
        op()
        end.record()
        end.synchronize()
        wall.append((time.perf_counter() - t0) * 1e9)
        events.append(begin.elapsed_time(end) * 1e6)  # elapsed_time is in ms
    return np.array(events), np.array(wall)


def add_bench(prefix: str, runs: int = 20):
    @nsight.analyze.kernel(runs=runs, thermal_mode="off", verbosity=SILENT, cache_control="none",
                           output_csv=True, output_prefix=prefix)
    def add(n: int) -> None:
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        with nsight.annotate("add"):
            _ = x + y
    return add


with nt.section("4. Two more clocks: CUDA events and wall time") as s:
    ENV.require("profiler")
    if IN_SIDE is None:
        raise nt.Skip("needs section 1's matmul durations, and section 1 did not run",
                      "see section 1's SKIPPED or FAILED reason above")
    prefix = fresh_prefix()
    add_bench(prefix)(configs=[N_ADD])
    kernel = {"16K add": per_run(prefix).Value.median()}
    x, y = torch.randn(N_ADD, device="cuda"), torch.randn(N_ADD, device="cuda")
    ops = {"16K add": lambda: x + y}
    for n in SIZES:
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        ops[f"matmul {n}"] = (lambda a=a, b=b: a @ b)
        kernel[f"matmul {n}"] = IN_SIDE["runs"][IN_SIDE["runs"].n == n].ns.median()
    rows = []
    for name, op in ops.items():
        ev, wall = clocks(op)
        rows.append({"op": name, "kernel_us": kernel[name] / 1e3, "events_us": np.median(ev) / 1e3,
                     "wall_us": np.median(wall) / 1e3, "events/kernel": np.median(ev) / kernel[name],
                     "overhead_%": 100 * (np.median(ev) - kernel[name]) / kernel[name],
                     "wall>=events": f"{(wall >= ev).sum()}/{len(ev)}"})
    CLOCKS = pd.DataFrame(rows)
    print(f"  medians of 20 runs; kernel = {IN_SIDE['tool']} ({IN_PROCESS}):")
    print(CLOCKS.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    print(f"  kernel column, add: {nt.rules(IN_PROCESS, cache_control='none')}")
    print(f"  kernel column, matmuls: {IN_SIDE['rules']}")
    tiny, big = CLOCKS.iloc[0], CLOCKS.iloc[-1]
    nt.claim((CLOCKS.wall_us >= CLOCKS.events_us).all(), "the wall clock is never below the CUDA events (median)")
    nt.claim(tiny["events/kernel"] > 2, "for the microsecond add, CUDA events measure mostly overhead",
             f"events {tiny.events_us:.1f} us vs kernel {tiny.kernel_us:.2f} us: {tiny['events/kernel']:.1f}x")
    nt.claim(big["overhead_%"] < tiny["overhead_%"], "the events' overhead is a smaller share of a long kernel",
             f"{big['overhead_%']:+.1f} % for {big.op} vs {tiny['overhead_%']:+.0f} % for the add")
    s.result = (f"16K add: kernel {tiny.kernel_us:.2f} us, events {tiny.events_us:.1f} us, wall {tiny.wall_us:.1f} us; "
                f"{big.op}: events {big['overhead_%']:+.1f} % over the kernel")

# %% [markdown]
# ## 5. CUPTI's limits (1): no hardware counters
#
# Under CUPTI the only metric is `gpu__time_duration.sum`. Ask for a counter and
# nsight-python refuses -- not when you decorate (the collector is created lazily, at the
# first call, for whichever tool is active by then: `NsightProfiler._get_collector` in
# `nsight/collection/core.py`), but when the decorated function is first **called**:
# `ValueError("metrics must be ['gpu__time_duration.sum']")` from `CUPTICollector.__init__`.
#
# If CUPTI is this process's backend, that happens right here. If Nsight Compute is, the
# same function collects the counter here, and CUPTI's side of sections 5 to 8 runs in
# one child process (the script below, same preamble as in section 2).

# %%
LIMITS_SCRIPT = textwrap.dedent('''
    import ctypes, glob, json, os, sys, tempfile
    os.environ["NSPY_NCU_INIT_AT_IMPORT"] = "0"        # no Nsight Compute in this process
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # libcupti 13.4+ by path, before torch
    import nsight
    nsight.activate(nsight.Tool.CUPTI)
    import pandas as pd
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    n_add, n_l2, n_mm = (int(a) for a in sys.argv[2:5])
    SILENT, found = nsight.VerbosityLevel.SILENT, {}

    @nsight.analyze.kernel(runs=1, metrics=["dram__bytes_read.sum"], thermal_mode="off", verbosity=SILENT)
    def add_bytes(n):                                  # section 5: a hardware counter
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        with nsight.annotate("add"):
            _ = x + y
    try:
        add_bytes(configs=[n_add])
        found["counter_error"] = None
    except ValueError as exc:
        found["counter_error"] = str(exc)

    found["x2_median_ns"] = {}                         # section 6: cache and clock control
    for cache, clock in (("all", "none"), ("none", "none"), ("all", "base")):
        prefix = tempfile.mkdtemp() + "/"
        @nsight.analyze.kernel(runs=20, cache_control=cache, clock_control=clock, thermal_mode="off",
                               verbosity=SILENT, output_csv=True, output_prefix=prefix)
        def scale(n):
            x = torch.randn(n, device="cuda")
            with nsight.annotate("x * 2"):
                _ = x * 2.0
        scale(configs=[n_l2])
        raw = pd.read_csv(glob.glob(prefix + "profiled_data-*.csv")[0])
        found["x2_median_ns"][f"{cache}/{clock}"] = float(raw.Value.median())

    @nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)
    def copy(n):                                       # section 7: a memcpy, no kernel
        x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
        with nsight.annotate("copy"):
            y.copy_(x)
    found["copy_rows"] = len(copy(configs=[n_add]).to_dataframe())

    a = torch.randn(n_mm, n_mm, device="cuda")         # section 8: torch.profiler, CUPTI active
    _ = a @ a
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            _ = a @ a
        torch.cuda.synchronize()
    found["cuda_events"] = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    print("NSPY_RESULT " + json.dumps(found))
''')
COUNTER_ERROR = "metrics must be ['gpu__time_duration.sum']"


def l2_sized() -> int:
    """float32 elements in a vector of a quarter of this GPU's L2: it fits, warm, after torch.randn."""
    return ENV.facts.l2_bytes // 4 // 4


with nt.section("5. CUPTI's limits (1): no hardware counters") as s:
    ENV.require("profiler")

    @nsight.analyze.kernel(runs=1, metrics=["dram__bytes_read.sum"], thermal_mode="off", verbosity=SILENT)
    def add_bytes(n: int) -> None:
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        with nsight.annotate("add"):
            _ = x + y

    print("  decorated with metrics=['dram__bytes_read.sum']: no error yet")
    if IN_PROCESS == "cupti":
        try:
            add_bytes(configs=[N_ADD])
            error = None
        except ValueError as exc:
            error = str(exc)
        print(f"  first call, CUPTI in this process -> ValueError: {error}")
    else:
        df = add_bytes(configs=[N_ADD]).to_dataframe()
        print(f"  first call, Nsight Compute in this process: dram__bytes_read.sum = {df.AvgValue.iloc[0]:,.0f} "
              f"{df.Unit.iloc[0]} (x and y are {2 * 4 * N_ADD:,} bytes; caches flushed before the kernel)")
        library, extra_env = cupti_child()
        script = ncu_cli.write_script(LIMITS_SCRIPT, "cupti_limits.py", OUT_DIR)
        CUPTI_CHILD = child.run_json(script, [library.path, str(N_ADD), str(l2_sized()), str(SIZES[0])],
                                     env=extra_env, timeout=300).result
        error = CUPTI_CHILD["counter_error"]
        print(f"  first call, CUPTI in a child process -> ValueError: {error}")
    nt.claim(error == COUNTER_ERROR, "under CUPTI a hardware counter is refused with this ValueError", repr(error))
    s.result = f"CUPTI ({'this process' if IN_PROCESS == 'cupti' else 'child'}) refused dram__bytes_read.sum: {error}"

# %% [markdown]
# ## 6. CUPTI's limits (2): cache and clock control are ignored
#
# The CUPTI collector takes neither option (section 0), so under CUPTI these three
# decorators time the same thing: nsight-python's default (`cache_control="all"`,
# `clock_control="none"`), no flush (`"none"`), and clocks locked to base (`"base"`).
# The kernel is `x * 2` on a vector of a quarter of the L2, which `torch.randn` has just
# written: warm. Under the Nsight Compute backend `"all"` would flush it first and `"base"`
# would lower the clock (notebook 04 measures both).
#
# For contrast, each decorator also runs a configuration that flushes the L2 **by hand**
# (a scratch buffer twice the L2 size written before the annotation): that is what a
# cache flush does to this kernel -- and what `cache_control="all"` does not do under CUPTI.

# %%
def scale_bench(cache: str, clock: str, prefix: str):
    @nsight.analyze.kernel(runs=20, cache_control=cache, clock_control=clock, thermal_mode="off", verbosity=SILENT,
                           output_csv=True, output_prefix=prefix)
    def scale(n: int, flush: bool) -> None:
        x = torch.randn(n, device="cuda")
        if flush:
            SCRATCH.fill_(1.0)  # evict x from the L2 by hand: not measured
        with nsight.annotate("x * 2"):
            _ = x * 2.0
    return scale


with nt.section("6. CUPTI's limits (2): cache and clock control are ignored") as s:
    ENV.require("profiler")
    variants = [("all", "none"), ("none", "none"), ("all", "base")]
    if IN_PROCESS == "cupti":
        SCRATCH = torch.empty(2 * ENV.facts.l2_bytes // 4, device="cuda")
        rows = []
        for cache, clock in variants:
            prefix = fresh_prefix()
            scale_bench(cache, clock, prefix)(configs=[(l2_sized(), False), (l2_sized(), True)])
            med = per_run(prefix).groupby("flush").Value.median()
            rows.append({"cache_control": cache, "clock_control": clock, "warm_us": med[False] / 1e3,
                         "flushed_by_hand_us": med[True] / 1e3, "by_hand/warm": med[True] / med[False]})
        del SCRATCH
        table = pd.DataFrame(rows)
        where = "this process"
    else:
        if CUPTI_CHILD is None:
            raise nt.Skip("CUPTI's side runs in the child process started by section 5, which did not run",
                          "see section 5's reason above; " + CUPTI_REMEDY, needs="cupti")
        table = pd.DataFrame([{"cache_control": cache, "clock_control": clock,
                               "warm_us": CUPTI_CHILD["x2_median_ns"][f"{cache}/{clock}"] / 1e3}
                              for cache, clock in variants])
        where = "a child process"
    print(f"  x * 2 on {4 * l2_sized() / 2**20:.1f} MiB, medians of 20 runs, CUPTI in {where}:")
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"  {nt.rules('cupti', cache_control='all', clock_control='base')}")
    ratio = table.warm_us.max() / table.warm_us.min()
    nt.claim(ratio < 1.05, "under CUPTI the three cache/clock settings give the same warm time (within 5 %)",
             f"max/min {ratio:.3f}")
    extra = (f"; a flush by hand makes it {table['by_hand/warm'].median():.2f}x slower"
             if "by_hand/warm" in table else "")
    s.result = f"CUPTI: all/none/base within {100 * (ratio - 1):.1f} % of each other{extra}"

# %% [markdown]
# ## 7. CUPTI's limits (3): a region without a kernel gives an empty table
#
# `y.copy_(x)` between two float32 tensors on the GPU is a **memcpy**, not a kernel. The
# CUPTI collector times only kernels (`CONCURRENT_KERNEL` activity records, tied to the
# annotation through their launch calls), so nothing is attributed to the annotation; `extract_df_from_data` in `nsight/extraction.py` loops over
# the annotations that have kernels -- none -- and returns an empty frame. Its
# "No kernels were profiled" error is only raised for an annotation that is *present* with
# no data, so no error is raised at all: the frame has all its columns and no rows, and
# downstream code fails somewhere unrelated (`df.AvgValue.iloc[0]` → `IndexError`) or
# silently plots nothing.
#
# The fix is a check at the source. `measured` below turns a missing annotation into an
# error that names it and the likely cause; use it on any result you read. Converting the
# dtype (`float32` → `float16`) makes the same copy a kernel, which is measured.
#
# Under the Nsight Compute backend the outcome of a kernel-less region is whatever Nsight
# Compute and nsight-python make of it (an empty report, an error); the cell prints it.

# %%
def measured(result, annotations) -> pd.DataFrame:
    """The result's DataFrame, or a clear error naming every annotation that got no row."""
    df = pd.DataFrame() if result is None else result.to_dataframe()
    seen = set(df["Annotation"]) if "Annotation" in df else set()
    missing = [a for a in annotations if a not in seen]
    if missing:
        raise RuntimeError(
            f"no measurement for annotation(s) {missing}: the profiler attributed no kernel to them. Likely causes: "
            "the region only copies or sets memory (e.g. tensor.copy_ between tensors of the same dtype, "
            ".to('cuda')), which runs as a memcpy/memset rather than a kernel; or the work was launched outside "
            "the `with nsight.annotate(...)` block.")
    return df


@nsight.analyze.kernel(runs=3, thermal_mode="off", verbosity=SILENT)
def copy_region(n: int, dtype: str) -> None:
    x = torch.randn(n, device="cuda")
    y = torch.empty(n, device="cuda", dtype=getattr(torch, dtype))
    with nsight.annotate("copy"):
        y.copy_(x)  # float32 -> float32: a memcpy; float32 -> float16: a conversion kernel


with nt.section("7. CUPTI's limits (3): a region without a kernel gives an empty table") as s:
    ENV.require("profiler")
    if IN_PROCESS == "cupti":
        plain_copy = copy_region(configs=[(1 << 20, "float32")])
        rows = len(plain_copy.to_dataframe())
        print(f"  float32 -> float32 copy under CUPTI: to_dataframe() has {rows} rows, and no error was raised")
        nt.claim(rows == 0, "under CUPTI a memcpy-only region yields an empty DataFrame")
    else:
        try:
            plain_copy = copy_region(configs=[(1 << 20, "float32")])
            print(f"  float32 -> float32 copy under Nsight Compute: to_dataframe() has "
                  f"{len(plain_copy.to_dataframe())} rows")
        except Exception as exc:  # shown, not hidden: whatever Nsight Compute makes of a region with no kernel
            plain_copy = None
            print(f"  float32 -> float32 copy under Nsight Compute raised {type(exc).__name__}: "
                  f"{str(exc).strip().splitlines()[0][:160]}")
    try:
        measured(plain_copy, ["copy"])
        message = None
    except RuntimeError as exc:
        message = str(exc)
    print(f"  measured(...) -> RuntimeError: {message}")
    nt.claim(message is not None and "['copy']" in message, "the check turns the missing row into an error naming it")
    converted = measured(copy_region(configs=[(1 << 20, "float16")]), ["copy"])
    print(f"  float32 -> float16 copy: {converted.AvgValue.iloc[0] / 1e3:.2f} us, kernel {nt.short_kernel_name(converted.Kernel.iloc[0])}")
    if IN_PROCESS == "cupti":
        s.result = "CUPTI: memcpy region -> empty DataFrame, no error; measured() names it; a converting copy is timed"
    else:
        if CUPTI_CHILD is None:
            raise nt.Skip("CUPTI's side runs in the child process started by section 5, which did not run",
                          "see section 5's reason above; " + CUPTI_REMEDY, needs="cupti")
        print(f"  the same memcpy region under CUPTI (child): {CUPTI_CHILD['copy_rows']} rows")
        nt.claim(CUPTI_CHILD["copy_rows"] == 0, "under CUPTI a memcpy-only region yields an empty DataFrame")
        s.result = ("memcpy region: Nsight Compute " + ("raised" if plain_copy is None else "gave an empty table")
                    + ", CUPTI (child) an empty DataFrame; measured() names it")

# %% [markdown]
# ## 8. CUPTI's limits (4): `torch.profiler` goes blind while nsight's CUPTI is active
#
# `torch.profiler` records CUDA kernels through CUPTI too, and nsight-python's CUPTI
# backend holds CUPTI from `nsight.activate(nsight.Tool.CUPTI)` until `nsight.deactivate()`
# (it subscribes in `cupti.init()`). In one process the two do not share it: with the
# backend active, `torch.profiler` records no CUDA events. The same five matmuls in a
# child process without nsight show what `torch.profiler` normally sees. Then the cell
# profiles once more with nsight-python and prints whether its CUPTI backend still gets
# kernel records after `torch.profiler` has started and stopped its own CUPTI session --
# on the project's H200 it did **not** (an empty table), so the safe rule is: never mix
# `torch.profiler` into a process that profiles with nsight's CUPTI backend, or restart
# the kernel before profiling again.
#
# Under the Nsight Compute backend this notebook does not predict the in-process count: it
# prints what it sees. This section comes last on purpose: whatever a second profiler does
# to the process's CUPTI state cannot affect the measurements above.

# %%
PLAIN_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch  # no nsight in this process: torch.profiler has CUPTI to itself
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    n = int(sys.argv[1])
    a = torch.randn(n, n, device="cuda")
    _ = a @ a
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            _ = a @ a
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    print("NSPY_RESULT " + json.dumps({"cuda_events": len(kernels), "names": sorted(set(kernels))}))
''')


def cuda_events_seen(n: int) -> int:
    """How many CUDA (device) events torch.profiler records for five n x n matmuls in this process."""
    a = torch.randn(n, n, device="cuda")
    _ = a @ a
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            _ = a @ a
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)


with nt.section("8. CUPTI's limits (4): torch.profiler sees nothing while nsight's CUPTI is active") as s:
    ENV.require("profiler")
    n = SIZES[0]
    here = cuda_events_seen(n)
    print(f"  this process ({IN_SIDE['tool'] if IN_SIDE else IN_PROCESS} backend): "
          f"torch.profiler recorded {here} CUDA events for 5 matmuls")
    plain = child.run_json(ncu_cli.write_script(PLAIN_SCRIPT, "plain_profiler.py", OUT_DIR), [str(n)], timeout=180)
    print(f"  a child without nsight: {plain.result['cuda_events']} CUDA events "
          f"({', '.join(nt.short_kernel_name(k) for k in plain.result['names'])})")
    nt.claim(plain.result["cuda_events"] >= 5, "without nsight, torch.profiler sees at least one kernel per matmul",
             f"{plain.result['cuda_events']} events")
    if IN_PROCESS == "cupti":
        nt.claim(here == 0, "with nsight's CUPTI backend active, torch.profiler records no CUDA event", f"{here}")
        after = add_bench(fresh_prefix(), runs=3)(configs=[N_ADD]).to_dataframe()
        if after.empty:
            print("  nsight-python afterwards: an EMPTY table -- its CUPTI backend got no kernel records once\n"
                  "  torch.profiler had run in this process. Restart the kernel before profiling again.")
        else:
            print(f"  nsight-python afterwards: still measures (add {after.AvgValue.iloc[0] / 1e3:.2f} us)")
        s.result = (f"torch.profiler: {here} CUDA events beside nsight's CUPTI, {plain.result['cuda_events']} without "
                    f"nsight; nsight's CUPTI afterwards: {'no records (restart needed)' if after.empty else 'still measures'}")
    else:
        if CUPTI_CHILD is None:
            raise nt.Skip("CUPTI's side runs in the child process started by section 5, which did not run",
                          "see section 5's reason above; " + CUPTI_REMEDY, needs="cupti")
        print(f"  a child with nsight's CUPTI backend active: {CUPTI_CHILD['cuda_events']} CUDA events")
        s.result = (f"torch.profiler: {here} CUDA events beside Nsight Compute, {CUPTI_CHILD['cuda_events']} beside "
                    f"nsight's CUPTI (child), {plain.result['cuda_events']} without nsight")

# %% [markdown]
# ## Takeaways
#
# - One tool per process: Nsight Compute, once loaded at `import nsight`, stays. To compare,
#   run the other tool next door -- CUPTI in a child with `NSPY_NCU_INIT_AT_IMPORT=0` and
#   libcupti 13.4+ loaded before torch, or the `ncu` command line on a script.
# - Matched settings first: the `ncu` command line locks clocks to base by default;
#   nsight-python does not. Compare like with like (`--clock-control none`), and print
#   whose rules produced each column.
# - Compare two tools with an interval on the difference (Welch), not by eyeballing two
#   means; 10 runs take the t quantile 2.26.
# - CUPTI is the cheap, always-available clock: kernel durations, no replay, warm caches,
#   free clocks. It cannot read counters, flush caches or lock clocks, it shuts
#   `torch.profiler` out while active (and `torch.profiler` may leave it blind afterwards),
#   and a region with no kernel gives no row and no error.
# - CUDA events and wall clocks time your *code*, launch and dispatch included: fine for a
#   long kernel, misleading by an order of magnitude for a microsecond one.
#
# ## Try it
#
# - Change `clock_control="none"` to `"base"` in section 2's `ncu` command (the command
#   line's own default) -- or, under the Nsight Compute backend, add `clock_control="base"`
#   to `matmul_bench` -- and watch the Nsight Compute column move away from CUPTI's.
# - In section 4, time `x + y` for `N_ADD = 1 << 24` (64 MiB): where does the events'
#   overhead stop mattering?
#
# Docs: [tools and `nsight.activate`](https://docs.nvidia.com/nsight-python/tools.html),
# [`nsight.analyze.kernel`](https://docs.nvidia.com/nsight-python/analyze.html),
# [the Nsight Compute collector](https://docs.nvidia.com/nsight-python/collection/ncu.html);
# the CUPTI collector's source:
# [`nsight/collection/cupti.py`](https://github.com/NVIDIA/nsight-python).

# %%
nt.summary();
