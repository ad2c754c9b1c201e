"""What we know about the GPU: datasheet peaks looked up by name (``resources/gpu-datasheets.csv``), and
what the device itself reports (:func:`device_facts`; never the table's: an H200 reports 60 MB of L2, not 50),
read through NVML's handle for the GPU CUDA runs on (:func:`nvml_handle`)."""

import csv
import dataclasses
import os
import re
import sys
from importlib import resources
from typing import Any

DATASHEET_FILE = "gpu-datasheets.csv"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclasses.dataclass(frozen=True)
class Peak:
    """One datasheet figure. ``value`` is None when the GPU lacks the feature (n/a)."""

    value: float | None
    uncertain: bool = False  # the table marks the figure as of lower confidence

    def __str__(self) -> str:
        return "n/a" if self.value is None else f"{self.value:g}{'?' if self.uncertain else ''}"


@dataclasses.dataclass(frozen=True)
class Datasheet:
    """Datasheet peaks of one GPU model, dense (no sparsity), at boost clock."""

    gpu: str
    fp32_tflops: Peak
    tf32_tflops: Peak
    fp16_tflops: Peak  # FP32 accumulate: what PyTorch matmuls use
    bf16_tflops: Peak
    fp8_tflops: Peak
    mem_bandwidth_gbs: Peak
    match: tuple[str, ...] = ()  # words a device name must contain for this row
    clock_mhz: Peak = Peak(None)  # the SM clock the peaks are stated at (fp32; the tensor ones unless...)
    tensor_clock_mhz: Peak = Peak(None)  # ...the datasheet states the tensor peaks at another clock
    source: str = ""

    def peak_tflops(self, precision: str) -> Peak:
        """Peak for ``precision`` in {"fp32", "tf32", "fp16", "bf16", "fp8"}."""
        return getattr(self, f"{precision}_tflops")

    def peak_clock_mhz(self, precision: str) -> float | None:
        """The SM clock (MHz) the ``precision`` peak is stated at (a kernel at clock f reaches at most
        ``peak x f / peak_clock_mhz``): ``tensor_clock_mhz`` for tensor precisions where given, else ``clock_mhz``."""
        tensor = self.tensor_clock_mhz.value if precision != "fp32" else None
        return tensor or self.clock_mhz.value


def words(name: str) -> set[str]:
    """The upper-cased whole words of a device name, split on spaces, dashes, underscores, slashes."""
    return {word for word in re.split(r"[\s\-_/]+", name.upper()) if word}


def load_datasheets() -> dict[str, Datasheet]:
    """The packaged datasheet table by row label."""
    text = resources.files("nspy_tutorial").joinpath("resources", DATASHEET_FILE).read_text(encoding="utf-8")
    sheets = {}
    for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        peaks = {column: Peak(float(row[column]) if row[column] else None, column in row["uncertain"].split())
                 for column in (*(f"{p}_tflops" for p in PRECISIONS), "mem_bandwidth_gbs", "clock_mhz",
                                "tensor_clock_mhz")}
        sheets[row["gpu"]] = Datasheet(gpu=row["gpu"], match=tuple(sorted(words(row["match"]))),
                                       source=row["source"], **peaks)
    return sheets


def datasheet_for(device_name: str) -> Datasheet | None:
    """The row whose ``match`` words are all whole words of ``device_name`` ("A10" is not one of "A100"), the one
    with the most if several match ("A100 80GB" before "A100"); None for a GPU the table lacks."""
    name_words = words(device_name)
    candidates = [sheet for sheet in load_datasheets().values() if sheet.match and set(sheet.match) <= name_words]
    return max(candidates, key=lambda sheet: len(sheet.match), default=None)


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


def device_facts() -> DeviceFacts:
    """The current CUDA device's own numbers, through torch and NVML; starts CUDA, so only after ``setup()``."""
    import torch  # imported here: the bootstrap must import nsight before torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    sm_clock = mem_clock = bus_width = None
    try:  # what NVML read before an error is kept (an older driver lacks only the bus width)
        import pynvml

        pynvml.nvmlInit()
        handle = nvml_handle(pynvml)
        sm_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        mem_clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus_width = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
    except Exception as exc:  # NVML missing or not permitted
        print(f"  (NVML: {type(exc).__name__}: {exc}; the clocks or bus width it had not read yet stay unknown)")
    return DeviceFacts(name=props.name, compute_capability=(props.major, props.minor),
                       sm_count=props.multi_processor_count, l2_bytes=int(getattr(props, "L2_cache_size", 0)),
                       memory_bytes=int(props.total_memory), max_sm_clock_mhz=sm_clock, max_mem_clock_mhz=mem_clock,
                       memory_bus_width_bits=bus_width)


def nvml_handle(pynvml: Any = None) -> Any:
    """The NVML handle of the GPU CUDA runs on, not simply NVML's device 0 (NVML ignores ``CUDA_VISIBLE_DEVICES``):
    once CUDA runs, torch's device by UUID; before, the first entry of ``CUDA_VISIBLE_DEVICES`` (a UUID or a
    unique prefix of one, or NVML's index); unset, device 0. ``pynvml``, initialised, may be a fake one."""
    if pynvml is None:
        import pynvml
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        uuid = torch.cuda.get_device_properties(torch.cuda.current_device()).uuid
        return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    entry = value.split(",")[0].strip()
    if not entry or entry.startswith("-"):
        raise LookupError(f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU")
    devices = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(pynvml.nvmlDeviceGetCount())]
    if entry.isdigit():
        matches = [devices[int(entry)]] if int(entry) < len(devices) else []
    else:
        wanted = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
        uuids = [pynvml.nvmlDeviceGetUUID(device) for device in devices]
        uuids = [uuid.decode() if isinstance(uuid, bytes) else uuid for uuid in uuids]  # bytes: older nvidia-ml-py
        matches = [device for device, uuid in zip(devices, uuids) if uuid.startswith(wanted)]
    if len(matches) != 1:
        raise LookupError(f"CUDA_VISIBLE_DEVICES starts with {entry!r}, which matches {len(matches)} GPU(s); NVML "
                          f"lists {len(devices)} GPU(s)")
    return matches[0]
