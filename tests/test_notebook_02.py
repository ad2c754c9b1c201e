"""Notebook 02 reads NVML for the GPU its kernels ran on (issue 14.10).

NVML numbers every GPU of the machine and ignores ``CUDA_VISIBLE_DEVICES``: with
``CUDA_VISIBLE_DEVICES=1``, NVML's device 0 is another GPU, so section 3's idle and busy
clocks would be read from a GPU that ran nothing. ``nt.nvml_handle()`` maps CUDA's device to
NVML by UUID (tested with a fake NVML in test_nvml_device.py).
"""

from __future__ import annotations

from notebook_code import source


def test_02_reads_the_clock_of_the_gpu_cuda_runs_on():
    text = source("02_first_profile")
    assert "nvmlDeviceGetHandleByIndex" not in text
    assert "gpu = nt.nvml_handle()" in text
    assert "Device(0)" not in text  # the rated clock too comes from the device the matmuls ran on
