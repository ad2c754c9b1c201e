"""Notebook 02 on a CPU: the GPU's parts (section 1), the plain decorator first (2), every % of peak with its clocks
(3: the datasheet's, and the one the kernel ran near), the rated clock read on the GPU CUDA runs on (4), and the
refusal of a two-kernel region checked by what the reader reads, split-K by name (5).

The clock basis is tested on the two recorded H200 runs (``fixtures/recorded/02_first_profile-matmul-*.json``): the
fp32 matmul read 75 % of the datasheet on a fresh machine and 57 % on the one whose SM clock a killed ncu had left
at 1,500 MHz; at the clock each ran near both read 75 %, and only the capped run says its clock was held.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from notebook_code import FIXTURES, RUNS, fixture, flat, functions, source

import nspy_tutorial as nt_module
from nspy_tutorial import sections
from nspy_tutorial.clock import ClockState
from nspy_tutorial.gpu_facts import DeviceFacts, load_datasheets

STEM = "02_first_profile"
NB = functions(STEM, "rows_of", "refusal", "says_kernel_count", "split_k", "tensor_cores", "fp32_lanes",
               "clock_basis", nt=nt_module, pd=pd, re=re, SPLIT_K=re.compile(r"split_?k", re.IGNORECASE))
SHEETS = load_datasheets()


def test_02_reads_the_clock_of_the_gpu_cuda_runs_on():
    text = source(STEM)
    assert "nvmlDeviceGetHandleByIndex" not in text
    assert "gpu = nt.nvml_handle()" in flat(text)
    assert "Device(0)" not in text  # the rated clock too comes from the device the matmuls ran on


def test_02_starts_profiling_with_the_plain_decorator_and_calls_the_decorated_function():
    text = source(STEM)
    code = [line for line in text.splitlines() if not line.startswith("#")]
    first = next(i for i, line in enumerate(code) if "nsight.analyze.kernel" in line)
    assert code[first:first + 2] == ["@nsight.analyze.kernel", "def matmul(n: int) -> None:"]
    assert "result = matmul(N)" in text
    assert "matmul.__wrapped__" in text  # later sections wrap the same, undecorated function again


def test_02_finds_no_error_by_frame_introspection():
    assert "inspect" not in source(STEM)


# --- section 1: the GPU's parts ---------------------------------------------------------------

@pytest.mark.parametrize("cc, generation", [((6, 1), "none"), ((7, 0), "1st generation (Volta)"),
                                            ((7, 5), "2nd generation (Turing)"), ((8, 0), "3rd generation (Ampere)"),
                                            ((8, 6), "3rd generation (Ampere)"), ((8, 9), "4th generation (Ada)"),
                                            ((9, 0), "4th generation (Hopper)"), ((10, 0), "5th generation"),
                                            ((12, 0), "5th generation (Blackwell)")])
def test_the_tensor_core_generation_follows_from_the_compute_capability(cc, generation):
    assert NB.tensor_cores(cc).startswith(generation)
    assert ("fp8" in NB.tensor_cores(cc)) == (cc >= (8, 9))  # 05's FP8 GEMM runs where cc >= 8.9


@pytest.mark.parametrize("gpu, sms, lanes", [("H200 SXM", 132, 128), ("T4", 40, 64), ("A100 SXM4 80GB", 108, 64),
                                             ("L4", 58, 128), ("L40S", 142, 128), ("A10", 72, 128)])
def test_the_datasheets_fp32_peak_gives_a_whole_number_of_lanes_per_sm(gpu, sms, lanes):
    sheet = SHEETS[gpu]
    found = NB.fp32_lanes(sheet.fp32_tflops.value, sms, sheet.clock_mhz.value)
    assert found == pytest.approx(lanes, rel=0.02)  # the notebook's claim, on the datasheet table's rows


def test_no_datasheet_clock_means_no_lanes():
    assert NB.fp32_lanes(35.0, 80, None) is None and NB.fp32_lanes(None, 80, 1700) is None


def test_every_counter_02_names_exists_on_the_h200_with_ncu_2025_3_1():
    names = set((FIXTURES / "recorded" / "h200-ncu-2025.3.1-section-metrics.txt").read_text().split())
    cited = re.findall(r'^    "[^"]+": "([\w.<>]+)",$', source(STEM).split("COUNTERS = {")[1].split("}")[0], re.M)
    assert len(cited) == 8
    for name in cited:
        assert name.replace("<reason>", "long_scoreboard") in names, name


def cell(heading: str) -> str:
    """The code cell that follows the markdown cell starting with ``heading``."""
    text = source(STEM)
    after = text[text.index(heading):]
    return re.search(r"^# %%\n(.*?)(?=^# %%)", after, flags=re.M | re.S).group(1)


class Notebook:
    def __init__(self):
        self.claims, self.result = [], None

    @contextlib.contextmanager
    def section(self, name):
        yield self

    def claim(self, condition, statement, evidence=""):
        self.claims.append((bool(condition), statement))
        if not condition:
            raise sections.ClaimFailed(statement)

    rules = staticmethod(lambda source: f"measured by {source}")
    short_kernel_name = staticmethod(nt_module.short_kernel_name)


H200 = DeviceFacts("NVIDIA H200", (9, 0), 132, 60 << 20, 140 << 30, 1980, 3201, 6016)
T4 = DeviceFacts("Tesla T4", (7, 5), 40, 4 << 20, 15 << 30, 1590, 5001, 256)


def run_section_1(facts, sheet, max_threads=2048):
    """Section 1's cell on a fake device: ``facts`` as setup reads them, cuda.core's warp size and threads per SM."""
    nt = Notebook()
    counters = re.search(r"^COUNTERS = \{.*?^\}\n", source(STEM), flags=re.M | re.S).group(0)
    namespace = dict(nt=nt, ENV=SimpleNamespace(require=lambda what: None, facts=facts, datasheet=sheet,
                                                gpu_name=facts.name),
                     torch=SimpleNamespace(cuda=SimpleNamespace(current_device=lambda: 0)),
                     Device=lambda i: SimpleNamespace(properties=SimpleNamespace(warp_size=32,
                                                                                 max_threads_per_multiprocessor=max_threads)),
                     tensor_cores=NB.tensor_cores, fp32_lanes=NB.fp32_lanes, math=math)
    exec(counters, namespace)
    out = io.StringIO()
    text = cell("# ## 1. The GPU's parts")
    with contextlib.redirect_stdout(out):
        exec(compile(text[text.index('with nt.section("1.'):], "section 1", "exec"), namespace)
    return nt, out.getvalue()


def test_section_1_prints_each_part_with_the_h200s_numbers_and_its_counter():
    nt, printed = run_section_1(H200, SHEETS["H200 SXM"])
    assert all(ok for ok, _ in nt.claims) and len(nt.claims) == 1
    assert "128 fp32 lanes per SM" in printed and "4th generation (Hopper)" in printed
    assert "at most 64 warps per SM" in printed and "60 MB" in printed
    assert "4,814 GB/s = 2 x 3,201 MHz x 6,016 bit / 8" in printed  # what 04 printed as the clock-derived peak
    assert printed.count("busy: ") == 8 and max(len(line) for line in printed.splitlines()) <= 120
    assert nt.result == ("132 SMs x 128 fp32 lanes, 64 warps per SM, 4th generation (Hopper) Tensor Cores, L2 60 MB, "
                         "DRAM 4,814 GB/s")


def test_section_1_on_a_t4_and_on_a_gpu_the_datasheet_table_lacks():
    nt, printed = run_section_1(T4, SHEETS["T4"], max_threads=1024)
    assert "64 fp32 lanes" in printed and "2nd generation (Turing)" in printed and "32 warps per SM" in printed
    assert "320 GB/s" in printed
    nt, printed = run_section_1(DeviceFacts("NVIDIA Mystery", (8, 6), 84, 6 << 20, 24 << 30, 1860, None, None), None)
    assert nt.claims == [] and "lanes unknown" in printed and "bandwidth unknown" in printed


def test_section_1_fails_its_claim_when_the_datasheet_row_does_not_fit_the_device():
    wrong = DeviceFacts("NVIDIA H200", (9, 0), 100, 60 << 20, 140 << 30, 1980, 3201, 6016)  # 100 SMs: 169 lanes
    with pytest.raises(sections.ClaimFailed, match="lanes per SM a power of two"):
        run_section_1(wrong, SHEETS["H200 SXM"])


# --- section 3: % of peak with its clocks -------------------------------------------------------

def recorded(name: str) -> dict:
    return json.loads((FIXTURES / "recorded" / f"02_first_profile-matmul-{name}.json").read_text())


def clock_state(kept: dict) -> ClockState:
    """What setup's clock watch reads from the run's idle samples (nspy_tutorial.clock's rule)."""
    from nspy_tutorial.clock import classify

    samples = [(mhz, 0) for mhz in kept["idle_sm_mhz"]]
    return ClockState(classify(samples, kept["max_sm_mhz"]), (min(kept["idle_sm_mhz"]), max(kept["idle_sm_mhz"])),
                      kept["max_sm_mhz"])


def basis(kept: dict) -> tuple[list[str], float]:
    tflops = 2 * kept["n"] ** 3 / (kept["avg_ns"] * 1e-9) / 1e12
    ran = sorted(kept["sm_mhz_during_profile"])[len(kept["sm_mhz_during_profile"]) // 2]
    lines = NB.clock_basis(tflops, kept["fp32_tflops"], kept["fp32_clock_mhz"], ran, "NVML's reading", clock_state(kept))
    return lines, float(re.search(r"-> (\d+) % of it", lines[2]).group(1))


def test_the_recorded_normal_run_reads_75_percent_of_the_datasheet_at_the_clock_it_assumes():
    lines, at_clock = basis(recorded("normal"))
    assert lines[0] == "50.3 TFLOP/s = 75 % of the datasheet's 67 TFLOP/s at 1,980 MHz"
    assert lines[1] == "the SM clock it ran near: 1,980 MHz, NVML's reading" and at_clock == 75
    assert not any("HELD" in line for line in lines)


def test_the_recorded_capped_run_names_its_held_clock_and_reads_the_same_75_percent_at_it():
    kept = recorded("capped")
    lines, at_clock = basis(kept)
    assert lines[0].startswith(f"38.2 TFLOP/s = {kept['printed_pct_of_datasheet']} % of the datasheet's")
    assert lines[2] == "the peak at 1,500 MHz: 50.8 TFLOP/s -> 75 % of it"
    assert lines[3].startswith("setup found the SM clock HELD at 1,500 MHz, 76% of its 1,980: ")
    assert at_clock == basis(recorded("normal"))[1]  # the verdict holds on both machines; the datasheet % does not
    assert all(len(line) <= 118 for line in lines)


def test_without_a_clock_reading_only_the_datasheet_percent_is_given():
    lines = NB.clock_basis(50.3, 67, 1980, None, "NVML's reading during the profile (None-None MHz)", None)
    assert len(lines) == 2 and "not known here" in lines[1]
    assert "the datasheet states no clock" in NB.clock_basis(50.3, 67, None, 1980, "x", None)[0]


class Result:
    def __init__(self, df):
        self.df = df

    def to_dataframe(self):
        return self.df


def run_section_3(backend: str, during_mhz, clock=None, kernel_mhz_hz=1.41e9):
    """Section 3's cell on the recorded normal run's row, with a fake Sampler reading and (for the Nsight Compute
    backend) a fake profile of gpc__cycles_elapsed.avg.per_second."""
    nt = Notebook()
    kept = recorded("normal")
    columns = ["Annotation", "n", "Metric", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns", "CI95_Lower",
               "CI95_Upper", "RelativeStdDevPct", "StableMeasurement", "Kernel", "GPU", "Host", "ComputeClock",
               "MemoryClock", "Unit", "Normalized", "Geomean"]
    asked = []

    def kernel(**settings):
        asked.append(settings["metrics"])
        return lambda func: (lambda n: Result(pd.DataFrame({"AvgValue": [kernel_mhz_hz]})))

    namespace = dict(nt=nt, pd=pd, N=kept["n"], t_ns=float(kept["avg_ns"]), df=pd.DataFrame(columns=columns),
                     ENV=SimpleNamespace(require=lambda what: None, backend=backend, clock=clock,
                                         datasheet=SHEETS["H200 SXM"]),
                     during=SimpleNamespace(mhz=during_mhz), SILENT=None, rows_of=NB.rows_of,
                     clock_basis=NB.clock_basis, matmul=SimpleNamespace(__wrapped__=None),
                     nsight=SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)))
    source_3 = cell("# ## 3. Read the row")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source_3, "section 3", "exec"), namespace)
    return nt, out.getvalue(), asked, namespace


def test_section_3_under_cupti_gives_nvmls_reading_during_the_profile_said_as_such():
    nt, printed, asked, ns = run_section_3("cupti", (1980, 1410, 1980))
    assert asked == [] and ns["RAN_MHZ"] == 1980
    assert "NVML's reading during the profile (1410-1980 MHz; CUPTI does not measure it)" in printed
    assert nt.result == "50.3 TFLOP/s = 75% of the fp32 datasheet (1,980 MHz), 75% at the 1,980 MHz it ran near"


def test_section_3_without_an_nvml_reading_gives_the_datasheet_percent_only_and_says_why():
    nt, printed, _, ns = run_section_3("cupti", None)
    assert ns["RAN_MHZ"] is None and "NVML read nothing during the profile" in printed
    assert nt.result == "50.3 TFLOP/s = 75% of the fp32 datasheet"


def test_section_3_under_nsight_compute_measures_the_clock_and_says_a_held_one():
    held = ClockState("held", (1500, 1500), 1980)
    nt, printed, asked, ns = run_section_3("ncu", (1500, 1500, 1500), clock=held, kernel_mhz_hz=1.5e9)
    assert asked == [["gpc__cycles_elapsed.avg.per_second"]] and ns["RAN_MHZ"] == 1500
    assert "1,500 MHz, measured by Nsight Compute (gpc__cycles_elapsed.avg.per_second)" in printed
    assert "HELD at 1,500 MHz" in printed and nt.result.endswith("; SM clock held at 1,500 MHz")


@pytest.mark.parametrize("run", RUNS)
def test_a_gpu_runs_matmul_row_states_a_percent_at_its_clock_at_or_under_the_peak(run):
    _, table = fixture("02_first_profile--matmul", run)
    row = table.iloc[0]
    tflops = 2 * int(row["n"]) ** 3 / (float(row["AvgValue"]) * 1e-9) / 1e12
    lines = NB.clock_basis(tflops, 67, 1980, float(row["sm_mhz"]), "kept", None)
    assert 30 <= float(re.search(r"-> (\d+) % of it", lines[2]).group(1)) <= 100


# --- section 5: the refusal by what it says, split-K by name -------------------------------------

# Kernel columns as the two backends write them: CUPTI mangled, Nsight Compute the bare function name.
SPLIT_CUPTI = ("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb1ELb0ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT3_"
               "EEPKT1_PKT2_PT4_PKS3_")
GEMM_SPLIT_NCU = "nvjet_sm90_sss_64x64_64x8_1x1_v_bz_splitK_TNT"
GEMM_NCU = "nvjet_sm90_sss_128x128_64x4_2x1_v_bz_TNT"
# nsight-python 1.1.0's words (extraction.py), as the recorded H200 runs printed them
REFUSAL_110 = ("More than one (total=2) kernel is launched within the a + b * c annotation.\nWe expect one kernel per "
               "annotation.\nTry one of the following solutions:")
# 1.1.1 'now reports the kernel and run counts' (its release notes); a wording of that kind
REFUSAL_111 = "Annotation 'a + b * c' launched 2 kernels in each of 1 runs; expected 1 per annotation."


def raise_(error):
    raise error


def test_split_k_finds_the_name_in_either_backends_form_and_nothing_else():
    assert len(NB.split_k(f"{GEMM_SPLIT_NCU}|splitKreduce_kernel")) == 2
    assert NB.split_k(f"{GEMM_NCU}|{SPLIT_CUPTI}") == [nt_module.short_kernel_name(SPLIT_CUPTI)]
    assert NB.split_k(f"{GEMM_NCU}|vectorized_elementwise_kernel") == []


def test_the_refusal_is_the_runtime_error_and_says_the_kernel_count_in_either_version():
    for words in (REFUSAL_110, REFUSAL_111):
        error = NB.refusal(lambda: raise_(RuntimeError(words)))
        assert isinstance(error, RuntimeError) and NB.says_kernel_count(error)
    assert NB.refusal(lambda: None) is None
    assert not NB.says_kernel_count(RuntimeError("CUDA error: an illegal memory access was encountered"))
    with pytest.raises(ValueError):
        NB.refusal(lambda: int("not nsight's refusal"))  # any other error propagates


def run_section_5(unfused_call, matmul_kernels: dict) -> tuple[Notebook, str]:
    """Section 5's cell: ``unfused_call`` stands for the profile without combine_kernel_metrics; the matmul's Kernel
    column per size is ``matmul_kernels[n]`` (the others one plain GEMM)."""
    nt = Notebook()

    def kernel(**settings):
        if "combine_kernel_metrics" not in settings:
            return lambda func: (lambda n: unfused_call())
        return lambda func: (lambda n: Result(pd.DataFrame({"AvgValue": [9000.0],
                                                            "Kernel": ["mul_kernel|add_kernel"]})))

    def quietly(configs):
        return Result(pd.DataFrame({"AvgValue": [1.0], "Kernel": [matmul_kernels.get(configs[0], GEMM_NCU)]}))

    namespace = dict(nt=nt, ENV=SimpleNamespace(require=lambda what: None, backend="cupti"), SILENT=None, add=None,
                     nsight=SimpleNamespace(analyze=SimpleNamespace(kernel=kernel)), torch=None, re=re,
                     rows_of=NB.rows_of, profile_matmul_quietly=quietly,
                     kernel_names=lambda column: [nt.short_kernel_name(k) for k in column.split("|")])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell("# ## 5. When one call launches several kernels"), "section 5", "exec"), namespace)
    return nt, out.getvalue()


@pytest.mark.parametrize("words", [REFUSAL_110, REFUSAL_111])
def test_section_5_passes_with_either_versions_refusal_and_names_split_k(words):
    nt, printed = run_section_5(lambda: raise_(RuntimeError(words)),
                                {256: f"{GEMM_SPLIT_NCU}|splitKreduce_kernel", 512: f"{GEMM_NCU}|{GEMM_NCU}"})
    assert all(ok for ok, _ in nt.claims) and len(nt.claims) == 2
    assert f"without combine_kernel_metrics: RuntimeError: {words.splitlines()[0]}" in printed
    assert nt.result.endswith("; split-K at [256]") and "other splits (read the names) at [512]" in printed
    assert "256: 2, 512: 2, 1024: 1" in nt.result


def test_section_5_claim_fails_when_nsight_accepts_a_two_kernel_region():
    with pytest.raises(sections.ClaimFailed, match="refuses a two-kernel region"):
        run_section_5(lambda: Result(pd.DataFrame({"AvgValue": [1.0], "Kernel": ["mul|add"]})), {})


def test_section_5_claim_fails_on_a_runtime_error_that_is_not_the_refusal():
    with pytest.raises(sections.ClaimFailed, match="saying how many kernels"):
        run_section_5(lambda: raise_(RuntimeError("CUDA error: out of memory")), {})
