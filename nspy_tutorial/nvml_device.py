"""The NVML handle of the GPU this process's CUDA runs on -- not simply NVML's device 0.

NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``; CUDA numbers
only the visible ones. On a shared server where a job was given ``CUDA_VISIBLE_DEVICES=1``,
NVML's device 0 is *another* GPU: its clock, its temperature and, on a mixed host, its name
(so the wrong datasheet row). nsight-python 1.1 maps the CUDA device to NVML by UUID for its
own thermal check; :func:`handle` does the same for the helpers and the notebooks.

* Once CUDA has started (torch initialised it): by the UUID of torch's current device.
* Before (the bootstrap probes the GPU without starting CUDA): from the first entry of
  ``CUDA_VISIBLE_DEVICES`` -- a UUID (``GPU-...``, or a unique prefix of one) is exact; a
  number is taken as NVML's index, which matches CUDA's numbering when
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default orders the fastest GPU first). Unset:
  device 0, which is CUDA's device 0 on a single-GPU machine.
"""

from __future__ import annotations

import os
import sys
from typing import Any


class NoSuchGpu(LookupError):
    """``CUDA_VISIBLE_DEVICES`` names a GPU that NVML does not list, or hides every GPU."""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cuda_uuid() -> str | None:
    """``GPU-<uuid>`` of torch's current CUDA device, or None if CUDA has not started."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return f"GPU-{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}"


def visible_entry(environ: dict[str, str] | None = None) -> str | None:
    """The first entry of ``CUDA_VISIBLE_DEVICES`` (CUDA's device 0), or None when it is unset."""
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entry = value.split(",")[0].strip()
    if not entry or entry.startswith("-"):
        raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU")
    return entry


def handle(pynvml: Any = None, environ: dict[str, str] | None = None) -> Any:
    """The NVML handle of CUDA's device 0 (or torch's current device once CUDA runs).

    ``pynvml`` must be initialised (``nvmlInit``); tests pass a fake one.
    """
    if pynvml is None:
        import pynvml
    uuid = cuda_uuid()
    if uuid is not None:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    entry = visible_entry(environ)
    if entry is None:
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    if entry.isdigit():
        index = int(entry)
        count = pynvml.nvmlDeviceGetCount()
        if index >= count:
            raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES starts with {entry}, but NVML lists {count} GPU(s)")
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    wanted = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
    matches = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        device = pynvml.nvmlDeviceGetHandleByIndex(index)
        if _text(pynvml.nvmlDeviceGetUUID(device)).startswith(wanted):
            matches.append(device)
    if len(matches) != 1:
        raise NoSuchGpu(f"CUDA_VISIBLE_DEVICES starts with {entry!r}, which matches {len(matches)} GPU(s) NVML lists")
    return matches[0]
