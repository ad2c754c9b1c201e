"""Small helpers around nsight-python's results that several notebooks share.

* :func:`sum_kernels` -- the ``combine_kernel_metrics`` used throughout: a library call
  (cuBLAS, eager PyTorch expressions) may launch several kernels in one annotation.
* :func:`profile_per_config` -- run a decorated benchmark one configuration at a time.
  nsight-python checks that every annotation launched the *same number of kernels* in
  every configuration and run; cuBLAS picks a different algorithm per matrix size, and
  some algorithms launch more than one kernel, so a sweep over sizes can
  fail with "Expect same number of kernels per run" -- or, worse, pass with kernels
  attributed to the wrong configuration when the totals happen to divide evenly.
  One call per configuration only needs the count to be constant across runs.
* :func:`kernel_counts` -- how many kernels each row combined (from the Kernel column).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd


def sum_kernels(x: Any, y: Any) -> Any:
    """``combine_kernel_metrics`` that adds the metrics of the kernels in one annotation."""
    return x + y


def profile_per_config(bench: Callable[..., Any], configs: Iterable[Any]) -> pd.DataFrame:
    """Call ``bench(configs=[c])`` for each config and stack the DataFrames.

    ``bench`` must be decorated with ``@nsight.analyze.kernel`` *without* ``configs=``
    (nsight-python refuses configs given both at decoration and at call time).
    """
    frames = [bench(configs=[config]).to_dataframe() for config in configs]
    return pd.concat(frames, ignore_index=True)


def kernel_counts(df: pd.DataFrame) -> pd.Series:
    """Kernels per annotation and run: nsight-python joins combined names with '|'."""
    return df["Kernel"].astype(str).str.count(r"\|") + 1


def predicted_kernel_count_error(counts_per_config: list[int], runs: int) -> bool:
    """Whether one call over all configs fails nsight-python's kernel-count check.

    nsight-python divides the number of kernels an annotation launched in the whole
    call by (configs x runs); it raises only when that is not a whole number.
    """
    total = sum(counts_per_config) * runs
    return total % (len(counts_per_config) * runs) != 0


def tflops(time_ns: float, n: int) -> tuple[float, str]:
    """``derive_metric`` for an n x n x n matmul: 2 n^3 flops over the measured time."""
    return 2 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s"
