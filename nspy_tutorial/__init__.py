"""Helpers for the nspy-tutorial notebooks: :func:`setup` first, each section in a :class:`section`, then
:func:`summary`. The names load on first use, so ``import nspy_tutorial`` imports neither torch nor nsight
(their order is the bootstrap's) and is quick: the ``nspy-tutorial`` command installs its signal handlers next."""

import importlib

_HOME = {"Environment": "environment", "setup": "bootstrap", "nvml_handle": "gpu_facts",
         "banner": "display", "label_offsets": "display", "rules": "display", "say": "display",
         "short_kernel_name": "display", "show": "display",
         "Skip": "sections", "claim": "sections", "needs": "sections", "section": "sections", "summary": "sections"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    """A name of ``__all__``, imported from its module on first use."""
    if name not in _HOME:
        raise AttributeError(f"module 'nspy_tutorial' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nspy_tutorial.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
