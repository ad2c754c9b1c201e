"""Notebook 02: the GPU NVML reads, the plain decorator first, refusals by behaviour, split-K by name.

Notebook 02 reads NVML for the GPU its kernels ran on (issue 14.10).

NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``: with
``CUDA_VISIBLE_DEVICES=1``, NVML's device 0 is another GPU, so section 3's idle and busy
clocks would be read from a GPU that ran nothing. ``nt.nvml_handle()`` maps CUDA's device to
NVML by UUID (tested with a fake NVML in test_nvml_device.py).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from notebook_code import flat, functions, source

import nspy_tutorial as nt_module
from nspy_tutorial import sections


def test_02_reads_the_clock_of_the_gpu_cuda_runs_on():
    text = source("02_first_profile")
    assert "nvmlDeviceGetHandleByIndex" not in text
    assert "gpu = nt.nvml_handle()" in flat(text)
    assert "Device(0)" not in text  # the rated clock too comes from the device the matmuls ran on


# --- section 1 starts as nsight-python's first example does ------------------------------------------

def test_02_starts_with_the_plain_decorator_and_calls_the_decorated_function():
    text = source("02_first_profile")
    code = [line for line in text.splitlines() if not line.startswith("#")]
    first = next(i for i, line in enumerate(code) if "nsight.analyze.kernel" in line)
    assert code[first:first + 2] == ["@nsight.analyze.kernel", "def matmul(n: int) -> None:"]
    assert "result = matmul(N)" in text
    assert "matmul.__wrapped__" in text  # later sections wrap the same, undecorated function again


# --- section 4: refusals by behaviour, split-K by name ---------------------------------------------

STEM = "02_first_profile"
NB = functions(STEM, "refusal", "rows_of", "split_k", nt=nt_module, pd=pd, re=re, inspect=inspect,
               SPLIT_K=re.compile(r"split_?k", re.IGNORECASE))
NSIGHT_MODULE = {"__name__": "nsight.extraction"}  # a function compiled here counts as nsight-python's own code
exec("def refuse(message):\n    raise RuntimeError(message)\n", NSIGHT_MODULE)

# Kernel columns as the two backends write them: CUPTI mangled, Nsight Compute the bare function name.
SPLIT_CUPTI = ("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb1ELb0ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT3_"
               "EEPKT1_PKT2_PT4_PKS3_")
GEMM_SPLIT_NCU = "nvjet_sm90_sss_64x64_64x8_1x1_v_bz_splitK_TNT"
GEMM_NCU = "nvjet_sm90_sss_128x128_64x4_2x1_v_bz_TNT"


def test_split_k_finds_the_name_in_either_backends_form_and_nothing_else():
    assert len(NB.split_k(f"{GEMM_SPLIT_NCU}|splitKreduce_kernel")) == 2
    assert NB.split_k(f"{GEMM_NCU}|{SPLIT_CUPTI}") == [nt_module.short_kernel_name(SPLIT_CUPTI)]
    assert NB.split_k(f"{GEMM_NCU}|vectorized_elementwise_kernel") == []


def test_refusal_in_02_is_recognised_by_where_nsight_raised_it():
    assert NB.refusal(lambda: NSIGHT_MODULE["refuse"]("annotation 'a + b * c' launched 2 kernels per run (1.1.1)"))
    assert NB.refusal(lambda: None) is None
    with pytest.raises(ValueError):
        NB.refusal(lambda: int("not from nsight"))


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


class Result:
    def __init__(self, df):
        self.df = df

    def to_dataframe(self):
        return self.df


def run_section_4(unfused_call, matmul_kernels: dict) -> tuple[Notebook, str]:
    """Section 4's cell: ``unfused_call`` stands for the profile without combine_kernel_metrics; the matmul's Kernel
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
                     refusal=NB.refusal, rows_of=NB.rows_of, profile_matmul_quietly=quietly,
                     kernel_names=lambda column: [nt.short_kernel_name(k) for k in column.split("|")])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell("# ## 4. When one call launches several kernels"), "section 4", "exec"), namespace)
    return nt, out.getvalue()


def cell(heading: str) -> str:
    text = source(STEM)
    after = text[text.index(heading):]
    return re.search(r"^# %%\n(.*?)(?=^# %%)", after, flags=re.M | re.S).group(1)


def test_section_4_passes_with_nsight_python_1_1_1s_reworded_refusal_and_names_split_k():
    nt, printed = run_section_4(lambda: NSIGHT_MODULE["refuse"]("2 kernels in annotation 'a + b * c' per run"),
                                {256: f"{GEMM_SPLIT_NCU}|splitKreduce_kernel", 512: f"{GEMM_NCU}|{GEMM_NCU}"})
    assert all(ok for ok, _ in nt.claims) and len(nt.claims) == 2
    assert "split-K named at [256]" in nt.result
    assert "other splits (read the names) at [512]" in printed


def test_section_4_claim_fails_when_nsight_accepts_a_two_kernel_region():
    with pytest.raises(sections.ClaimFailed, match="refuses a two-kernel region"):
        run_section_4(lambda: Result(pd.DataFrame({"AvgValue": [1.0], "Kernel": ["mul|add"]})), {})
