"""The NVML handle of the GPU this process's CUDA runs on -- not simply NVML's device 0.

NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``: where a job was given
``CUDA_VISIBLE_DEVICES=1``, NVML's device 0 is another GPU (its clock, its temperature, on a mixed host
its name). Once CUDA runs, :func:`handle` finds the GPU by torch's UUID, as nsight-python does; before
(the bootstrap looks without starting CUDA), by the first entry of ``CUDA_VISIBLE_DEVICES``: a UUID or
a unique prefix of one, or a number taken as NVML's index (CUDA's own numbering when
``CUDA_DEVICE_ORDER=PCI_BUS_ID``); unset, device 0, which is CUDA's on a single-GPU machine.
"""

from __future__ import annotations

import os
import sys
from typing import Any


class NoSuchGpu(LookupError):
    """``CUDA_VISIBLE_DEVICES`` names a GPU that NVML does not list, or hides every GPU."""


def handle(pynvml: Any = None) -> Any:
    """The NVML handle of CUDA's device 0 (or torch's current device once CUDA runs); ``pynvml``, initialised
    (``nvmlInit``), may be a fake one."""
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
        raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU")
    count = pynvml.nvmlDeviceGetCount()
    if entry.isdigit():
        if int(entry) >= count:
            raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES starts with {entry}, but NVML lists {count} GPU(s)")
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    wanted = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
    matches = []
    for index in range(count):
        device = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = pynvml.nvmlDeviceGetUUID(device)  # bytes from older nvidia-ml-py
        if (uuid.decode() if isinstance(uuid, bytes) else uuid).startswith(wanted):
            matches.append(device)
    if len(matches) != 1:
        raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES starts with {entry!r}, which matches {len(matches)} GPU(s) NVML lists")
    return matches[0]
