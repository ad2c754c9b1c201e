"""Specifications for nspy_tutorial.profiling (helpers around nsight-python results)."""

import pandas as pd
import pytest

from nspy_tutorial.profiling import (
    kernel_counts,
    predicted_kernel_count_error,
    profile_per_config,
    sum_kernels,
    tflops,
)


def test_sum_kernels_is_a_binary_function_as_nsight_requires():
    # nsight-python asserts combine_kernel_metrics.__code__.co_argcount == 2
    assert sum_kernels.__code__.co_argcount == 2
    assert sum_kernels(3, 4) == 7


def test_kernel_counts_counts_names_joined_by_a_bar():
    df = pd.DataFrame({"Kernel": ["gemm", "gemm|splitk_reduce", "a|b|c"]})
    assert list(kernel_counts(df)) == [1, 2, 3]


def test_uneven_counts_that_do_not_divide_predict_the_error():
    # the H200 case: 512 -> 2 kernels, 2048 and 8192 -> 1 kernel: 4/3 = 1.33 per run
    assert predicted_kernel_count_error([2, 1, 1], runs=3) is True


def test_equal_counts_predict_no_error():
    assert predicted_kernel_count_error([1, 1, 1], runs=5) is False


def test_uneven_counts_that_divide_evenly_are_not_caught_by_nsight():
    # 3 + 1 kernels over 2 configs = 2 per run: nsight's check passes, attribution is wrong
    assert predicted_kernel_count_error([3, 1], runs=4) is False


def test_tflops_of_a_2048_cube_in_one_millisecond():
    value, unit = tflops(1e6, 2048)
    assert unit == "TFLOP/s"
    assert value == pytest.approx(2 * 2048**3 / 1e-3 / 1e12)


class FakeResults:
    def __init__(self, config):
        self.config = config

    def to_dataframe(self):
        return pd.DataFrame({"n": [self.config], "AvgValue": [float(self.config)]})


def test_profile_per_config_calls_once_per_config_and_stacks_in_order():
    calls = []

    def bench(configs):
        calls.append(list(configs))
        return FakeResults(configs[0])

    df = profile_per_config(bench, [512, 2048, 8192])
    assert calls == [[512], [2048], [8192]]
    assert list(df.n) == [512, 2048, 8192]
    assert list(df.index) == [0, 1, 2]
