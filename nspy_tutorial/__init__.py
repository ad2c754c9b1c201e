"""Helpers for the nspy-tutorial notebooks: :func:`setup` first, each section in a :class:`section`, then
:func:`summary`. The names load on first use, so ``import nspy_tutorial`` imports neither torch nor nsight
(their order is the bootstrap's) and is quick: the ``nspy-tutorial`` command installs its signal handlers next.
"""

import importlib

_HOME = {
    "Environment": ("environment", "Environment"),
    "setup": ("bootstrap", "setup"),
    "banner": ("display", "banner"),
    "short_kernel_name": ("display", "short_kernel_name"),
    "show": ("display", "show"),
    "nvml_handle": ("gpu_facts", "nvml_handle"),
    "rules": ("display", "rules"),
    "Skip": ("sections", "Skip"),
    "claim": ("sections", "claim"),
    "needs": ("sections", "needs"),
    "section": ("sections", "section"),
    "summary": ("sections", "summary"),
}

__all__ = ["Environment", "Skip", "banner", "claim", "needs", "nvml_handle", "rules", "section", "setup",
           "short_kernel_name", "show", "summary"]


def __getattr__(name: str):
    """The names above, and submodules (``nt.bootstrap``), imported on first use."""
    if name in _HOME:
        module, attribute = _HOME[name]
        value = getattr(importlib.import_module(f"nspy_tutorial.{module}"), attribute)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"nspy_tutorial.{name}")
        except ModuleNotFoundError as missing:
            if missing.name != f"nspy_tutorial.{name}":
                raise
    raise AttributeError(f"module 'nspy_tutorial' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
