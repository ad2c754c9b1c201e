"""Specification of the datasheet table and its lookup (``nspy_tutorial.gpu_facts``).

Device names contain each other ("A100" contains "A10", "L40S" starts with "L4",
"GH200" contains "H200"), so each naming trap is its own test.
"""

from __future__ import annotations

import csv
import io
import math
from importlib import resources

import pytest

from nspy_tutorial import gpu_facts
from nspy_tutorial.gpu_facts import Datasheet, Peak, datasheet_for, load_datasheets


@pytest.fixture(scope="module")
def sheets() -> dict[str, Datasheet]:
    return load_datasheets()


def row(name: str) -> str | None:
    found = datasheet_for(name)
    return None if found is None else found.gpu


# --------------------------------------------------------------------------
# The packaged table
# --------------------------------------------------------------------------


def packaged_rows() -> list[dict[str, str]]:
    text = resources.files("nspy_tutorial").joinpath("resources", gpu_facts.DATASHEET_FILE).read_text()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def test_the_table_is_plain_numbers_empty_for_a_missing_feature():
    for row in packaged_rows():
        for column in ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp8_tflops", "mem_bandwidth_gbs"):
            assert row[column] == "" or float(row[column]) > 0, (row["gpu"], column, row[column])
        assert set(row["uncertain"].split()) <= set(row) and row["source"], row["gpu"]


def test_every_row_has_match_words():
    assert all(sheet.match for sheet in load_datasheets().values())


def test_each_rows_own_device_names_find_that_row():
    for table_row in packaged_rows():
        names = [name.strip() for name in table_row["device_names"].split(";") if name.strip()]
        assert names, table_row["gpu"]
        for name in names:
            assert row(name) == table_row["gpu"], name


def test_every_row_has_an_fp32_peak_and_a_memory_bandwidth(sheets):
    for sheet in sheets.values():
        assert sheet.fp32_tflops.value and sheet.fp32_tflops.value > 0, sheet.gpu
        assert sheet.mem_bandwidth_gbs.value and sheet.mem_bandwidth_gbs.value > 0, sheet.gpu


# --------------------------------------------------------------------------
# Lookup traps
# --------------------------------------------------------------------------


def test_a100_sxm4_80gb_is_the_a100_80gb_row_not_a10():
    assert row("NVIDIA A100-SXM4-80GB") == "A100 SXM4 80GB"


def test_a10_is_the_a10_row_not_a100_or_a10g():
    assert row("NVIDIA A10") == "A10"


def test_a10g_is_the_a10g_row():
    assert row("NVIDIA A10G") == "A10G (AWS)"


def test_l40s_is_the_l40s_row():
    assert row("NVIDIA L40S") == "L40S"


def test_l4_is_the_l4_row():
    assert row("NVIDIA L4") == "L4"


def test_h100_pcie_gets_its_own_row():
    assert row("NVIDIA H100 PCIe") == "H100 PCIe"


def test_h100_nvl_gets_its_own_row():
    assert row("NVIDIA H100 NVL") == "H100 NVL"


def test_h100_80gb_hbm3_is_the_h100_sxm5_row():
    assert row("NVIDIA H100 80GB HBM3") == "H100 SXM5"


def test_gh200_is_unknown_not_h100_or_h200():
    assert datasheet_for("NVIDIA GH200 480GB") is None


@pytest.mark.parametrize("name", ["AMD Radeon", "NVIDIA Future GPU"])
def test_unknown_gpu_gets_none(name):
    assert datasheet_for(name) is None


def test_a100_pcie_40gb_not_in_the_table_still_gets_the_a100_family_row():
    found = datasheet_for("NVIDIA A100-PCIE-40GB")
    assert found is not None
    assert found.gpu == "A100 SXM4 40GB"
    assert found.fp16_tflops.value == 312


def test_lookup_ignores_case_and_surrounding_spaces():
    found = datasheet_for("  nvidia h200 ")
    assert found is not None and found.gpu == "H200 SXM"


def test_a_v100_the_table_does_not_name_gets_the_v100_row():
    found = datasheet_for("Tesla V100-PCIE-16GB")
    assert found is not None and found.gpu == "V100 SXM2"


# --------------------------------------------------------------------------
# Peaks
# --------------------------------------------------------------------------


def test_t4_has_no_tf32_or_bf16_peak_and_fp16_65(sheets):
    t4 = sheets["T4"]
    assert t4.peak_tflops("tf32") == Peak(None)
    assert t4.peak_tflops("bf16") == Peak(None)
    assert t4.peak_tflops("fp16") == Peak(65.0)


def test_h200_fp16_peak_is_the_f32_accumulate_figure(sheets):
    assert sheets["H200 SXM"].peak_tflops("fp16").value == 989.4


def test_memory_bandwidth_ignores_the_parenthesised_datasheet_note(sheets):
    assert sheets["T4"].mem_bandwidth_gbs == Peak(320.0)


def test_geforce_fp16_peak_is_the_f32_accumulate_figure(sheets):
    assert sheets["RTX 4090"].fp16_tflops.value == 165.2


def test_uncertain_figures_are_marked(sheets):
    assert sheets["A10G (AWS)"].tf32_tflops == Peak(35.0, uncertain=True)
    assert sheets["A10G (AWS)"].fp32_tflops == Peak(35.0, uncertain=False)
    assert sheets["B200 (HGX)"].fp32_tflops == Peak(75.0, uncertain=True)
    assert sheets["H100 NVL"].mem_bandwidth_gbs == Peak(3900.0, uncertain=True)


def test_load_datasheets_reads_every_column_of_a_row(sheets):
    a10g = sheets["A10G (AWS)"]
    assert (a10g.match, a10g.source) == (("A10G",), "AWS A10G datasheet")
    assert (a10g.fp32_tflops, a10g.tf32_tflops, a10g.fp8_tflops) == (Peak(35.0), Peak(35.0, True), Peak(None))
    assert a10g.clock_mhz == Peak(None)


@pytest.mark.parametrize(
    ("peak", "text"),
    [(Peak(19.5), "19.5"), (Peak(35.0, True), "35?"), (Peak(None), "n/a")],
)
def test_peak_prints_its_value_and_uncertainty(peak, text):
    assert str(peak) == text


# --------------------------------------------------------------------------
# Peak clocks
# --------------------------------------------------------------------------


def test_the_peak_clock_is_the_one_the_datasheet_states_each_peak_at(sheets):
    h200, t4 = sheets["H200 SXM"], sheets["T4"]
    assert (h200.peak_clock_mhz("fp32"), h200.peak_clock_mhz("fp16"), h200.peak_clock_mhz("bf16")) == (1980, 1830, 1830)
    assert t4.peak_clock_mhz("fp16") == t4.peak_clock_mhz("fp32") == 1590  # no separate tensor clock: the one clock
    assert sheets["B200 (HGX)"].peak_clock_mhz("fp16") is None  # the table does not say


def test_every_stated_tensor_peak_is_a_whole_power_of_two_flops_per_sm_cycle_at_its_clock():
    """A check of the clock column against the peaks: SMs x flop/cycle/SM x clock = the datasheet figure
    (H100/H200 SXM 132 SMs, T4 40, A100 108; within the datasheet's rounding)."""
    sms = {"H200 SXM": 132, "H100 SXM5": 132, "T4": 40, "A100 SXM4 40GB": 108, "H100 PCIe": 114, "L4": 58}
    sheets = load_datasheets()
    for gpu, count in sms.items():
        per_cycle = sheets[gpu].fp16_tflops.value * 1e12 / (count * sheets[gpu].peak_clock_mhz("fp16") * 1e6)
        assert abs(per_cycle / 2 ** round(math.log2(per_cycle)) - 1) < 0.01, (gpu, per_cycle)


# --------------------------------------------------------------------------
# The FP8 column (05 section 7 sets an e4m3 GEMM against it)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["T4", "A10", "A10G (AWS)", "A100 SXM4 40GB", "A100 SXM4 80GB", "A100 PCIe 80GB",
                                 "V100 SXM2", "RTX 3090"])
def test_a_gpu_without_fp8_tensor_cores_has_no_fp8_peak(sheets, gpu):
    """Turing, Volta and Ampere have no FP8 tensor cores (compute capability below 8.9)."""
    assert sheets[gpu].peak_tflops("fp8") == Peak(None)


def test_every_fp8_peak_is_twice_the_dense_fp16_one_so_none_kept_a_sparse_or_fp16_accumulate_figure(sheets):
    """FP8 tensor cores do twice the FP16 (FP32-accumulate) work per cycle on Ada and Hopper: a sparse figure
    would read 4x, a GeForce FP16-accumulate one 4x too (the RTX 4090's 660.6)."""
    with_fp8 = {gpu: sheet for gpu, sheet in sheets.items() if sheet.fp8_tflops.value}
    assert set(with_fp8) == {"L4", "H100 SXM5", "H100 PCIe", "H100 NVL", "H200 SXM", "L40S", "RTX 4090", "B200 (HGX)"}
    for gpu, sheet in with_fp8.items():
        assert sheet.fp8_tflops.value / sheet.fp16_tflops.value == pytest.approx(2, rel=0.02), gpu


def test_every_fp8_row_names_where_its_figure_comes_from():
    for table_row in packaged_rows():
        if table_row["fp8_tflops"] and table_row["basis"] == "sp/2":
            assert "FP8" in table_row["source"] and "sparsity" in table_row["source"], table_row["gpu"]


def test_the_fp8_peak_is_stated_at_the_tensor_clock_and_is_a_power_of_two_flops_per_sm_cycle(sheets):
    """H100/H200 SXM: 1978.9 TFLOP/s = 132 SMs x 8192 flop/cycle x 1830 MHz (the H100 PCIe: 114 SMs, 1620 MHz)."""
    sms = {"H200 SXM": 132, "H100 SXM5": 132, "H100 PCIe": 114, "L4": 58}
    assert sheets["H200 SXM"].peak_clock_mhz("fp8") == 1830
    for gpu, count in sms.items():
        per_cycle = sheets[gpu].fp8_tflops.value * 1e12 / (count * sheets[gpu].peak_clock_mhz("fp8") * 1e6)
        assert abs(per_cycle / 2 ** round(math.log2(per_cycle)) - 1) < 0.01, (gpu, per_cycle)
