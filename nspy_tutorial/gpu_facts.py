"""What we know about the GPU: datasheet peaks (by name) and what the device reports.

Two sources, kept apart on purpose:

* :func:`datasheet_for` looks a GPU's datasheet peaks (TFLOP/s, memory bandwidth) up by
  its device name in ``resources/gpu-datasheets.md`` (a copy of the project's reference
  table). Name matching is ordered, most specific first, because names contain each
  other: "A100" contains "A10", "L40S" starts with "L4", "GH200" contains "H200".
  An unknown GPU gets ``None``: the notebooks then say "peak unknown" instead of
  inventing one.
* :func:`device_facts` reads what the running device says about itself (SMs, L2, memory,
  clocks). Those numbers are never taken from the table: the H200 on our test machine,
  for instance, reports 60 MB of L2 where spec pages say 50 MB.
"""

from __future__ import annotations

import dataclasses
import re
from importlib import resources

DATASHEET_FILE = "gpu-datasheets.md"

# (tokens that must all appear in the device name, row label in the table), most
# specific first. Tokens are whole words of the upper-cased name split on spaces,
# dashes and underscores, so "A10" never matches "A100" or "A10G".
MATCH_RULES: list[tuple[frozenset[str], str]] = [
    (frozenset({"T4"}), "T4"),
    (frozenset({"L4"}), "L4"),
    (frozenset({"L40S"}), "L40S"),
    (frozenset({"A10G"}), "A10G (AWS)"),
    (frozenset({"A10"}), "A10"),
    (frozenset({"A100", "80GB", "PCIE"}), "A100 PCIe 80GB"),
    (frozenset({"A100", "80GB"}), "A100 SXM4 80GB"),
    (frozenset({"A100"}), "A100 SXM4 40GB"),
    (frozenset({"H100", "NVL"}), "H100 NVL"),
    (frozenset({"H100", "PCIE"}), "H100 PCIe"),
    (frozenset({"H100"}), "H100 SXM5"),
    (frozenset({"H200"}), "H200 SXM"),
    (frozenset({"V100"}), "V100 SXM2"),
    (frozenset({"RTX", "4090"}), "RTX 4090"),
    (frozenset({"RTX", "3090"}), "RTX 3090"),
    (frozenset({"B200"}), "B200 (HGX)"),
]


@dataclasses.dataclass(frozen=True)
class Peak:
    """One datasheet figure. ``value`` is None when the GPU lacks the feature (n/a)."""

    value: float | None
    uncertain: bool = False  # the table marks it '?' or gives a range / approximation

    def __str__(self) -> str:
        if self.value is None:
            return "n/a"
        return f"{self.value:g}" + ("?" if self.uncertain else "")


@dataclasses.dataclass(frozen=True)
class Datasheet:
    """Datasheet peaks of one GPU model, dense (no sparsity), at boost clock."""

    gpu: str
    names: tuple[str, ...]
    fp32_tflops: Peak
    tf32_tflops: Peak
    fp16_tflops: Peak  # FP32 accumulate: what PyTorch matmuls use
    bf16_tflops: Peak
    fp8_tflops: Peak
    mem_bandwidth_gbs: Peak
    matched_by: str = ""

    def peak_tflops(self, precision: str) -> Peak:
        """Peak for ``precision`` in {"fp32", "tf32", "fp16", "bf16", "fp8"}."""
        try:
            return getattr(self, f"{precision}_tflops")
        except AttributeError:
            raise ValueError(
                f"unknown precision {precision!r}; use fp32, tf32, fp16, bf16 or fp8"
            ) from None


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[\s\-_/]+", name.upper()) if t}


def parse_peak(cell: str) -> Peak:
    """Turn a table cell such as ``19.5``, ``35?``, ``~1100``, ``75-80?``, ``n/a``
    into a :class:`Peak`. A range gives its lower end, marked uncertain."""
    text = cell.strip().replace(",", "")
    if text.lower() in ("n/a", "", "?"):
        return Peak(None, uncertain=text == "?")
    uncertain = "?" in text or "~" in text or "-" in text
    match = re.search(r"\d+(?:\.\d+)?", text)
    if match is None:
        raise ValueError(f"cannot read a number from datasheet cell {cell!r}")
    return Peak(float(match.group()), uncertain)


def _first_of_pair(cell: str) -> str:
    """FP16 and FP8 cells may read 'a / b' (f32-accumulate / f16-accumulate)."""
    return cell.split(" / ")[0]


def load_datasheets(text: str | None = None) -> dict[str, Datasheet]:
    """Parse the datasheet table (the packaged copy unless ``text`` is given)."""
    if text is None:
        text = resources.files("nspy_tutorial").joinpath("resources").joinpath(DATASHEET_FILE).read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    col = {name: i for i, name in enumerate(header)}
    sheets: dict[str, Datasheet] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        gpu = cells[col["GPU"]]
        names = tuple(re.findall(r"`([^`]+)`", cells[col["torch/NVML name"]]))
        bandwidth = cells[col["Mem, BW GB/s"]].split(",")[-1]
        sheets[gpu] = Datasheet(
            gpu=gpu,
            names=names,
            fp32_tflops=parse_peak(cells[col["FP32"]]),
            tf32_tflops=parse_peak(cells[col["TF32"]]),
            fp16_tflops=parse_peak(_first_of_pair(cells[col["FP16 f32acc / f16acc"]])),
            bf16_tflops=parse_peak(cells[col["BF16"]]),
            fp8_tflops=parse_peak(_first_of_pair(cells[col["FP8"]])),
            mem_bandwidth_gbs=parse_peak(bandwidth.split("(")[0]),
        )
    return sheets


def datasheet_for(device_name: str, sheets: dict[str, Datasheet] | None = None) -> Datasheet | None:
    """The datasheet row for ``device_name`` (as torch/NVML report it), or None.

    An exact name from the table wins; otherwise the first rule of MATCH_RULES whose
    tokens all appear in the name. ``matched_by`` on the result says which.
    """
    sheets = load_datasheets() if sheets is None else sheets
    for sheet in sheets.values():
        if device_name.strip().lower() in (n.lower() for n in sheet.names):
            return dataclasses.replace(sheet, matched_by=f"exact name {device_name!r}")
    tokens = _tokens(device_name)
    for needed, label in MATCH_RULES:
        if needed <= tokens and label in sheets:
            return dataclasses.replace(
                sheets[label], matched_by=f"name tokens {sorted(needed)} -> row {label!r}"
            )
    return None


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What the running GPU reports about itself (never taken from the datasheet)."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    max_sm_clock_mhz: int | None
    max_mem_clock_mhz: int | None
    memory_bus_width_bits: int | None = None  # NVML; with the memory clock it bounds DRAM bandwidth

    @property
    def l2_mb(self) -> float:
        return self.l2_bytes / 2**20


def device_facts(index: int = 0) -> DeviceFacts:
    """Read the device's own numbers through torch (and NVML for clocks).

    Needs a GPU; initialises CUDA, so call it only after ``setup()``.
    """
    import torch  # imported here: the bootstrap must import nsight before torch

    props = torch.cuda.get_device_properties(index)
    sm_clock = mem_clock = bus_width = None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        sm_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        mem_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    except Exception as exc:  # NVML missing or not permitted: clocks stay unknown
        print(f"  (NVML clocks unavailable: {type(exc).__name__}: {exc})")
    else:
        try:
            bus_width = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        except Exception as exc:  # older drivers: the width stays unknown
            print(f"  (NVML memory bus width unavailable: {type(exc).__name__}: {exc})")
    return DeviceFacts(
        name=props.name,
        compute_capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        memory_bytes=int(props.total_memory),
        max_sm_clock_mhz=sm_clock,
        max_mem_clock_mhz=mem_clock,
        memory_bus_width_bits=bus_width,
    )
