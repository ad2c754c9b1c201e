"""Helpers for the nspy-tutorial notebooks (GPU kernel profiling with nsight-python).

A notebook's first code cell calls :func:`setup`; every section runs inside
:class:`section`; :func:`summary` closes the notebook. Nothing here imports torch or
nsight at import time: the import order is the bootstrap's job.

``setup`` and ``Environment`` (the bootstrap) are imported on first use, so that
``import nspy_tutorial`` stays quick: the ``nspy-tutorial`` command (``cli``) installs its
signal handlers right after it.
"""

import importlib

from nspy_tutorial.display import banner, short_kernel_name, show
from nspy_tutorial.nvml_device import handle as nvml_handle
from nspy_tutorial.rules import rules
from nspy_tutorial.sections import Skip, claim, section, summary

_FROM_BOOTSTRAP = ("Environment", "setup")

__all__ = ["Environment", "Skip", "banner", "claim", "nvml_handle", "rules", "section", "setup", "short_kernel_name",
           "show", "summary"]


def __getattr__(name: str):
    """``setup`` and ``Environment`` from the bootstrap, and submodules (``nt.bootstrap``), on first use."""
    if name in _FROM_BOOTSTRAP:
        value = getattr(importlib.import_module("nspy_tutorial.bootstrap"), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"nspy_tutorial.{name}")
        except ModuleNotFoundError as missing:
            if missing.name != f"nspy_tutorial.{name}":
                raise
    raise AttributeError(f"module 'nspy_tutorial' has no attribute {name!r}")
