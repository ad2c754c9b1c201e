"""Specifications for nspy_tutorial.gpu_facts.nvml_handle: NVML's handle for the GPU CUDA runs on.

A fake NVML lists two GPUs; ``CUDA_VISIBLE_DEVICES`` and a fake torch decide which is CUDA's.
"""

import sys
from types import SimpleNamespace

import pytest

from nspy_tutorial import gpu_facts


class FakeNvml:
    """Two GPUs of a mixed host, as NVML lists them (PCI order)."""

    GPUS = [("NVIDIA A100-SXM4-80GB", "GPU-aaaa1111-0000"), ("NVIDIA H100 80GB HBM3", "GPU-bbbb2222-0000")]

    def nvmlDeviceGetCount(self):
        return len(self.GPUS)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.GPUS[index]

    def nvmlDeviceGetUUID(self, handle):
        return handle[1].encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return next(gpu for gpu in self.GPUS if gpu[1] == uuid)


@pytest.fixture(autouse=True)
def no_cuda_yet(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_without_cuda_visible_devices_it_is_nvml_device_0():
    assert gpu_facts.nvml_handle(FakeNvml())[0] == "NVIDIA A100-SXM4-80GB"


def test_cuda_visible_devices_1_is_the_second_gpu_not_nvml_device_0(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu_facts.nvml_handle(FakeNvml())[0] == "NVIDIA H100 80GB HBM3"


def test_a_uuid_or_a_unique_uuid_prefix_picks_that_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb2222-0000,0")
    assert gpu_facts.nvml_handle(FakeNvml())[1] == "GPU-bbbb2222-0000"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    assert gpu_facts.nvml_handle(FakeNvml())[1] == "GPU-bbbb2222-0000"


def test_once_cuda_runs_the_gpu_is_found_by_torchs_uuid_whatever_the_variable_says(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fake_cuda = SimpleNamespace(is_initialized=lambda: True, current_device=lambda: 0,
                                get_device_properties=lambda index: SimpleNamespace(uuid="bbbb2222-0000"))
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=fake_cuda))
    assert gpu_facts.nvml_handle(FakeNvml())[0] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("value, message", [("2", "NVML lists 2 GPU"), ("GPU-cccc", "matches 0 GPU"),
                                            ("", "hides every GPU"), ("-1", "hides every GPU")])
def test_a_variable_naming_no_listed_gpu_is_a_clear_error(monkeypatch, value, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    with pytest.raises(LookupError, match=message):
        gpu_facts.nvml_handle(FakeNvml())
