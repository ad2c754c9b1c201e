"""Helpers for the nspy-tutorial notebooks (GPU kernel profiling with nsight-python).

A notebook's first code cell calls :func:`setup`; every section runs inside
:class:`section`; :func:`summary` closes the notebook. Nothing here imports torch or
nsight at import time: the import order is the bootstrap's job.
"""

from nspy_tutorial.bootstrap import Environment, setup
from nspy_tutorial.display import banner, short_kernel_name, show
from nspy_tutorial.nvml_device import handle as nvml_handle
from nspy_tutorial.rules import rules
from nspy_tutorial.sections import Skip, claim, section, summary

__all__ = ["Environment", "Skip", "banner", "claim", "nvml_handle", "rules", "section", "setup", "short_kernel_name",
           "show", "summary"]
