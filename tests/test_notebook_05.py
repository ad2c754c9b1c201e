"""Notebook 05's analysis, as the notebook has it, on tables made by nsight-python's own code.

05 measures in the notebook's own process (under CUPTI on the GPU test machine, under the Nsight
Compute backend on Colab). These tests build its tables on a CPU with nsight-python's own
extraction and aggregation (``extract_df_from_data``, ``aggregate_data``) from SYNTHETIC kernel
records (not measured), and run the notebook's functions and cells on them:

* a refusal by nsight-python is recognised by where the error was raised, not by its words
  (1.1.1 rewords the kernel-count errors), and an empty table (1.1.0's "no kernel profiled")
  stops a section as 1.1.1's RuntimeError does;
* section 4's new check: ``AvgValue x NormalizationValue`` gives back section 2's raw mean;
* section 6: the clock beside the largest sizes, measured (Nsight Compute) or not (CUPTI).
Every claim is also shown to fail on data that contradicts it.
"""

from __future__ import annotations

import contextlib
import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from notebook_code import fixture, functions, source
from nsight import extraction, transformation, utils
from nsight.utils import VerbosityLevel
from scipy import stats

from nspy_tutorial import ncu_cli, sections

STEM = "05_precision_sweeps"
TIME, SM_HZ = "gpu__time_duration.sum", "gpc__cycles_elapsed.avg.per_second"
PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]
PEAKS = {"fp32": (67.0, 1980.0), "tf32": (494.7, 1830.0), "fp16": (989.4, 1830.0), "bf16": (989.4, 1830.0)}  # H200
NB = functions(STEM, "one_call_fails", "rows_of", "refusal", "check_normalised", "holm", "per_run", "beside_the_clock",
               "rate_change", nt=sections, pd=pd, np=np, math=math, stats=stats, ncu_cli=ncu_cli,
               inspect=__import__("inspect"), SM_HZ=SM_HZ, PROXY="nvml_mhz_at_entry_Avg")


def sweep(n): ...  # the signature of the notebook's benchmark function: one configuration column, n


def table(times: dict, runs: int = 5, normalize_against=None, hz: dict | None = None, kernels: dict | None = None,
          seed: int = 0, proxy: dict | None = None) -> pd.DataFrame:
    """nsight-python's to_dataframe() table for SYNTHETIC runs: ``times[(precision, n)]`` the mean ns (runs spread
    0.3 %), ``hz`` the SM clock per (precision, n) (adds the clock metric, as under Nsight Compute), ``kernels`` the
    kernels per run, ``proxy`` an NVML reading per (precision, n) as the ANNOTATION collector's column."""
    rng = np.random.default_rng(seed)
    metrics = [TIME, SM_HZ] if hz else [TIME]
    sizes = sorted({n for _, n in times})
    data = {}
    for precision in dict.fromkeys(p for p, _ in times):
        records = []
        for n in sizes:
            k = (kernels or {}).get((precision, n), 1)
            for _ in range(runs):
                t = times[(precision, n)] * (1 + rng.normal(0, 0.003))
                values = [t / k, hz[(precision, n)]] if hz else [t / k]
                records += [utils.ActionData(name=f"gemm_{i}", values=np.array(values), compute_clock=1980000,
                                             memory_clock=3201000, gpu="NVIDIA H200",
                                             units=["ns", "hz"][:len(metrics)]) for i in range(k)]
        data[precision] = records
    combine = NB.per_run if hz else (lambda a, b: a + b)
    raw = extraction.extract_df_from_data(data, metrics, [(n,) for n in sizes], runs, sweep, None,
                                          VerbosityLevel.SILENT, combine)
    out = transformation.aggregate_data(raw, sweep, normalize_against, VerbosityLevel.SILENT)
    if proxy:
        out["nvml_mhz_at_entry_Avg"] = [proxy[(a, n)] for a, n in zip(out.Annotation, out.n)]
    return out


# --- nsight-python 1.1.0 and 1.1.1: refusals by behaviour, no kernel profiled either way ------------

NSIGHT_MODULE = {"__name__": "nsight.extraction"}  # a function compiled here counts as nsight-python's own code
exec("def refuse(message):\n    raise RuntimeError(message)\n", NSIGHT_MODULE)


def refuse_elsewhere(message):
    raise RuntimeError(message)  # raised in this test module: PyTorch or CUDA, as far as refusal() can tell


def test_refusal_is_recognised_by_where_nsight_raised_it_whatever_the_words():
    assert NB.refusal(lambda: NSIGHT_MODULE["refuse"]("Expect same number of kernels per run. Got average of "
                                                      "1.3333333333333333 per run")).startswith("RuntimeError: Expect")
    reworded = "Annotation 'fp32' launched 4 kernels in 3 runs; warm up code that autotunes on its first call"
    assert NB.refusal(lambda: NSIGHT_MODULE["refuse"](reworded)) == f"RuntimeError: {reworded}"
    assert NB.refusal(lambda: None) is None


def test_nsight_pythons_real_kernel_count_check_is_a_refusal():
    """nsight-python's own extraction refusing uneven kernel counts (4 kernels over 3 runs)."""
    records = {"fp32": [utils.ActionData(name="gemm", values=np.array([1000.0]), compute_clock=1980000,
                                         memory_clock=3201000, gpu="NVIDIA H200", units=["ns"])] * 4}
    refused = NB.refusal(lambda: extraction.extract_df_from_data(records, [TIME], [(512,), (2048,), (8192,)], 1,
                                                                  sweep, None, VerbosityLevel.SILENT))
    assert refused is not None and refused.startswith("RuntimeError:")


def test_an_error_raised_outside_nsight_is_not_a_refusal():
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        NB.refusal(lambda: refuse_elsewhere("CUDA out of memory"))


class Result:
    def __init__(self, df):
        self.df = df

    def to_dataframe(self):
        return self.df


def test_an_empty_table_stops_like_the_runtime_error_of_nsight_python_1_1_1():
    with pytest.raises(RuntimeError, match="No kernels were profiled"):
        NB.rows_of(Result(pd.DataFrame(columns=["Annotation", "AvgValue"])))
    full = table({("fp32", 512): 10_000.0})
    assert NB.rows_of(Result(full)) is full


# --- section 3: predicted vs observed, on a stub of nsight.analyze.kernel ----------------------------

class Notebook:
    def __init__(self):
        self.claims, self.result = [], None

    @contextlib.contextmanager
    def section(self, name):
        yield self

    def claim(self, condition, statement, evidence=""):
        self.claims.append((bool(condition), statement, evidence))
        if not condition:
            raise sections.ClaimFailed(statement)

    @staticmethod
    def rules(source):
        return f"measured by {source}"

    needs = staticmethod(sections.needs)


def cell(heading: str) -> str:
    """The code cell that follows the markdown cell starting with ``heading``."""
    text = source(STEM)
    after = text[text.index(heading):]
    return re.search(r"^# %%\n(.*?)(?=^# %%)", after, flags=re.M | re.S).group(1)


def run_section_3(counts: dict, call):
    """Section 3's cell with per-size kernel counts ``counts`` and ``call`` standing for the profiled call."""
    nt = Notebook()
    kernel = SimpleNamespace(analyze=SimpleNamespace(kernel=lambda **settings: (lambda func: call)))
    sizes = [512, 2048, 8192]
    namespace = dict(nt=nt, ENV=SimpleNamespace(require=lambda what: None), nsight=kernel, SIZES=sizes, RUNS=5,
                     PRECISIONS=list(counts), COUNTS=pd.DataFrame(counts, index=sizes), SILENT=None, add=None,
                     sweep=None, one_call_fails=NB.one_call_fails, refusal=NB.refusal)
    exec(compile(cell("# ## 3. One call for all sizes"), "section 3", "exec"), namespace)
    return nt


UNEVEN = {"fp32": [1, 2, 1], "fp16": [1, 1, 1]}  # 4 kernels over 3 sizes: nsight must refuse
EVEN = {"fp32": [1, 1, 1], "fp16": [1, 1, 1]}


def test_section_3_passes_with_nsight_python_1_1_1s_reworded_refusal():
    nt = run_section_3(UNEVEN, lambda: NSIGHT_MODULE["refuse"]("annotation 'fp32': 4 kernels in 3 runs (1.1.1)"))
    assert all(ok for ok, _, _ in nt.claims)
    assert nt.result.endswith("fails as predicted: RuntimeError: annotation 'fp32': 4 kernels in 3 runs (1.1.1)")


def test_section_3_claim_fails_when_nsight_accepts_a_call_it_should_refuse():
    with pytest.raises(sections.ClaimFailed, match="refuses the call exactly when"):
        run_section_3(UNEVEN, lambda: None)


def test_section_3_claim_fails_when_nsight_refuses_a_call_whose_counts_divide():
    with pytest.raises(sections.ClaimFailed, match="refuses the call exactly when"):
        run_section_3(EVEN, lambda: NSIGHT_MODULE["refuse"]("No kernels were profiled"))


# --- section 4: AvgValue x NormalizationValue gives back section 2's raw mean ------------------------

AT_4096 = {"fp32": 2.69e6, "tf32": 3.34e5, "fp16": 1.78e5, "bf16": 1.73e5}  # ns, about an H200's
TIMES = {**{(p, 4096): t for p, t in AT_4096.items()}, **{(p, 8192): 8 * t for p, t in AT_4096.items()}}  # same rate


def section_2_times(drift: float = 1.0, seed: int = 1) -> pd.DataFrame:
    """Section 2's time rows: one call per size, as the notebook profiles them, the GPU ``drift`` times slower."""
    return pd.concat([table({k: v * drift for k, v in TIMES.items() if k[1] == n}, seed=seed + n) for n in (4096, 8192)],
                     ignore_index=True)


def test_the_normalised_table_passes_every_check_of_section_4(capsys):
    fastest, drift = NB.check_normalised(table(TIMES, normalize_against="fp32"), section_2_times(drift=1.02))
    assert drift == pytest.approx(100 * (1 - 1 / 1.02), abs=1.0)  # the largest move between the two calls, in %
    assert fastest.Annotation == "bf16" and fastest.AvgValue == pytest.approx(1.73 / 26.9, rel=0.02)
    out = capsys.readouterr().out
    assert "gives back section 2's raw mean" in out and "CI' of a normalised row" not in out


def test_the_raw_mean_check_fails_when_the_two_measurements_differ_by_more_than_ten_percent():
    """Every other check of section 4 holds (they read the normalised table alone); this one compares it with
    section 2's separate measurement of the same kernels."""
    with pytest.raises(sections.ClaimFailed, match="within 10 %"):
        NB.check_normalised(table(TIMES, normalize_against="fp32"), section_2_times(drift=1.15))


# --- section 6: the clock beside the largest sizes -------------------------------------------------

FALL = {(p, n): TIMES[(p, n)] * (1.06 if (p, n) == ("fp16", 8192) else 1.0) for p, n in TIMES}  # fp16 6 % slower
CLOCKS = {(p, n): (1.49e9 if (p, n) == ("fp16", 8192) else 1.58e9) for p, n in TIMES}  # ... at a 6 % lower clock
PROXY = {(p, n): 1980.0 - (100.0 if n == 8192 else 0.0) for p, n in TIMES}


def test_beside_the_clock_reads_the_measured_clock_and_the_peak_at_it():
    clock = NB.beside_the_clock(table(FALL, hz=CLOCKS, proxy=PROXY), PEAKS).set_index(["precision", "n"])
    fp16 = clock.loc[("fp16", 8192)]
    rate = 2 * 8192**3 / (FALL[("fp16", 8192)] * 1e-9) / 1e12
    assert fp16["TFLOP/s"] == pytest.approx(rate, rel=0.01) and fp16["SM MHz"] == pytest.approx(1490)
    assert fp16["% datasheet"] == pytest.approx(100 * fp16["TFLOP/s"] / 989.4)
    assert fp16["% at its clock"] == pytest.approx(100 * fp16["TFLOP/s"] / (989.4 * 1490 / 1830))
    assert fp16["NVML MHz outside kernel"] == 1880.0


def test_under_cupti_no_clock_is_read_and_the_proxy_stays_labelled():
    clock = NB.beside_the_clock(table(FALL, proxy=PROXY), PEAKS)
    assert clock["SM MHz"].isna().all() and clock["% at its clock"].isna().all()
    assert clock["% datasheet"].notna().all() and (clock["NVML MHz outside kernel"] > 0).all()


def test_a_split_run_reads_one_time_weighted_clock():
    at_4096 = {k: v for k, v in FALL.items() if k[1] == 4096}  # one call per size: the counts may differ by size
    clock = NB.beside_the_clock(table(at_4096, hz=CLOCKS, kernels={("fp32", 4096): 2}), PEAKS).set_index(
        ["precision", "n"])
    assert clock.loc[("fp32", 4096), "SM MHz"] == pytest.approx(1580)  # both halves at 1,580 MHz: not 2 x 1,580


def test_rate_change_puts_the_clock_beside_a_fall_and_calls_noise_not_distinguishable():
    change = NB.rate_change(NB.beside_the_clock(table(FALL, hz=CLOCKS), PEAKS), 4096, 8192, 2.0).set_index("precision")
    assert change.verdict["fp16"] == "falls"
    assert change.loc["fp16", "clock %"] == pytest.approx(100 * (1.49 / 1.58 - 1))
    assert abs(change.loc["fp16", "rate per cycle %"]) < 1  # the clock accounts for the fall
    assert (change.verdict.drop("fp16") == "not distinguishable").all(), change


RISE = {(p, n): TIMES[(p, n)] / (1.019 if (p, n) == ("tf32", 8192) else 1.0) for p, n in TIMES}  # tf32 +1.9 %


@pytest.mark.parametrize(("move", "verdict"), [(2.0, "within run-to-run variation"),
                                              (1.2, "rises (about the run-to-run variation)"), (0.7, "rises")])
def test_a_change_distinguishable_within_the_batch_is_read_against_the_move_measured_between_calls(move, verdict):
    """tf32 1.9 % faster at 8192, far beyond five runs' 0.3 % scatter (Welch, Holm): a rise within the batch, yet
    within run-to-run variation if one kernel moved 2 % between calls; about that size if it moved 1.2 %; a rise
    beyond twice the move."""
    change = NB.rate_change(NB.beside_the_clock(table(RISE), PEAKS), 4096, 8192, move).set_index("precision")
    assert change.p_holm["tf32"] < 1e-3 and change.loc["tf32", "rate %"] == pytest.approx(1.9, abs=0.5)
    assert change.verdict["tf32"] == verdict
    assert (change.verdict.drop("tf32") == "not distinguishable").all(), change  # noise is never a change


def kept_section_6(run: str) -> pd.DataFrame:
    """Section 6's verdicts from a run's kept tables: section 2's sweep and section 4's normalised call (its drift)."""
    _, df = fixture("05_precision_sweeps--sweep-tflops", run)
    _, normalized = fixture("05_precision_sweeps--sweep-normalized", run)
    _, drift = NB.check_normalised(normalized, df[df.Metric == TIME])
    small, large = sorted(set(normalized.n))
    return NB.rate_change(NB.beside_the_clock(df[df.n.isin([small, large])], PEAKS), small, large, drift).set_index(
        "precision")


NO_CHANGE = {"not distinguishable", "within run-to-run variation"}  # both: no change is claimed
ABOUT = "(about the run-to-run variation)"


def compatible(a: str, b: str) -> bool:
    """Two runs' verdicts on one change agree: the same, both no change, or one says it is about the size of the
    run-to-run variation and the other claims no change or the same direction."""
    claim = {v: "none" if v in NO_CHANGE else v.split()[0] for v in (a, b)}
    return a == b or claim[a] == claim[b] or (ABOUT in a + b and "none" in claim.values())


def test_the_two_run_rule_accepts_only_verdicts_that_do_not_contradict():
    assert compatible("rises", f"rises {ABOUT}") and compatible(f"falls {ABOUT}", "within run-to-run variation")
    assert not compatible("rises", "falls") and not compatible(f"rises {ABOUT}", f"falls {ABOUT}")
    assert not compatible("falls", "within run-to-run variation")  # a firm fall against no change is a flip


def test_two_kept_runs_give_verdicts_that_agree_or_say_the_change_is_about_the_run_to_run_variation():
    """Section 6 on two separate strict GPU runs' tables (each against its own measured move between calls)."""
    one, two = kept_section_6("run1"), kept_section_6("run2")
    assert list(one.index) == list(two.index) == PRECISIONS
    for p in PRECISIONS:
        assert compatible(one.verdict[p], two.verdict[p]), (p, one.verdict[p], two.verdict[p])


def run_section_6(backend: str, tables: dict, drift: float = 0.5, max_mhz: int = 1980) -> Notebook:
    """Section 6's cell: under 'ncu' the extra profile returns ``tables[n]``; under 'cupti' it reads section 2's df."""
    nt = Notebook()

    def kernel(**settings):
        return lambda func: (lambda configs: Result(tables[configs[0]]))

    ns = dict(nt=nt, DRIFT=drift, ENV=SimpleNamespace(require=lambda what: None, backend=backend,
                                                      facts=SimpleNamespace(max_sm_clock_mhz=max_mhz), datasheet=SimpleNamespace(
        peak_tflops=lambda p: SimpleNamespace(value=PEAKS[p][0]), peak_clock_mhz=lambda p: PEAKS[p][1])),
        nsight=SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)), SIZES=[2048, 4096, 8192], RUNS=5, SILENT=None,
        PRECISIONS=PRECISIONS, sweep=None, nvml_mhz_at_entry=None, df=pd.concat(tables.values(), ignore_index=True),
        one_call_per_size=lambda bench, sizes: pd.concat([NB.rows_of(bench(configs=[n])) for n in sizes]),
        pd=pd, np=np, stats=stats, ncu_cli=ncu_cli,
        SM_HZ=SM_HZ)
    exec(compile(cell("# ## 6. The clock beside the largest sizes"), "section 6", "exec"), ns)
    return nt


def test_section_6_under_nsight_compute_passes_and_names_the_clock():
    nt = run_section_6("ncu", {n: table({k: v for k, v in FALL.items() if k[1] == n}, hz=CLOCKS, proxy=PROXY)
                               for n in (4096, 8192)})
    assert [ok for ok, _, _ in nt.claims] == [True]
    assert "fp16 falls (-5.7%; clock -5.7%)" in nt.result and nt.result.endswith("a kernel moved 0.5% between calls")


def test_section_6_under_cupti_says_the_clock_is_not_measured_and_claims_nothing(capsys):
    nt = run_section_6("cupti", {n: table({k: v for k, v in FALL.items() if k[1] == n}, proxy=PROXY)
                                 for n in (4096, 8192)})
    assert nt.claims == []
    assert "fp16 falls (-5.7%; clock not measured)" in nt.result
    out = capsys.readouterr().out
    assert "the CUPTI backend measures no clock" in out and "outside the kernel" in out
    assert "max SM clock" not in out  # PROXY reads 1,880 MHz at 8192: not every sample at the max


def test_section_6_under_cupti_says_an_nvml_sample_at_the_max_clock_is_no_evidence(capsys):
    at_max = {k: 1980.0 for k in PROXY}
    run_section_6("cupti", {n: table({k: v for k, v in FALL.items() if k[1] == n}, proxy=at_max) for n in (4096, 8192)})
    assert "every sample reads the max SM clock, 1980 MHz: no evidence of the clock under load" in capsys.readouterr().out


@pytest.mark.parametrize(("drift", "says"), [(0.5, "fp16 falls (-5.7%"), (6.0, "fp16 within run-to-run variation (-5.7%"),
                                            (3.0, "fp16 falls (about the run-to-run variation) (-5.7%")])
def test_section_6_reads_each_change_against_section_4s_measured_drift(drift, says):
    """A 5.7 % fall is a fall when one kernel moved 0.5 % between calls; not one if it moved 6 %; about that size
    if it moved 3 %."""
    tables = {n: table({k: v for k, v in FALL.items() if k[1] == n}, proxy=PROXY) for n in (4096, 8192)}
    assert says in run_section_6("cupti", tables, drift=drift).result


def test_section_6_without_section_4s_drift_is_skipped_naming_section_4():
    tables = {n: table({k: v for k, v in FALL.items() if k[1] == n}, proxy=PROXY) for n in (4096, 8192)}
    with pytest.raises(sections.Skip, match="needs section 4's result"):
        run_section_6("cupti", tables, drift=None)


def test_section_6_claim_fails_when_a_kernel_beats_the_peak_at_its_clock():
    low = {k: (1.0e9 if k == ("bf16", 8192) else v) for k, v in CLOCKS.items()}  # bf16 above the peak at 1 GHz
    with pytest.raises(sections.ClaimFailed, match="no kernel beats its datasheet peak at the clock it ran at"):
        run_section_6("ncu", {n: table({k: v for k, v in FALL.items() if k[1] == n}, hz=low, proxy=PROXY)
                              for n in (4096, 8192)})


def test_two_synthetic_runs_agree_on_every_rate_change_verdict():
    """Two SYNTHETIC runs of the same GPU state (different noise): the verdicts agree, or one says 'not
    distinguishable'."""
    verdicts = [dict(NB.rate_change(NB.beside_the_clock(table(FALL, hz=CLOCKS, seed=seed), PEAKS), 4096, 8192, 2.0)
                     [["precision", "verdict"]].itertuples(index=False)) for seed in (11, 12)]
    for precision in PRECISIONS:
        assert verdicts[0][precision] == verdicts[1][precision] or "not distinguishable" in (
            verdicts[0][precision], verdicts[1][precision]), verdicts
