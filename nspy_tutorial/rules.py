"""Whose rules produced a number: one caption line, :func:`rules`, above every measured table.

nsight-python's Nsight Compute backend replays each kernel once per metric pass (defaults: caches
flushed before every pass, clocks free to boost); its CUPTI backend times each kernel once as it runs
(no replay, no flush, no clock control, durations only); the ``ncu`` command line replays like the
backend but locks the clocks to base by default.
"""

from __future__ import annotations

SOURCES = ("ncu", "cupti", "ncu-cli")
_CACHE = {"all": "caches flushed before every pass", "none": "caches not flushed (warm from earlier work)"}
_CLOCK = {"none": "clocks free to boost", "base": "clocks locked to base"}


def rules(source: str | None, cache_control: str | None = None, clock_control: str | None = None) -> str:
    """One line saying which tool measured (``"ncu"``: the Nsight Compute backend, ``"cupti"``, ``"ncu-cli"``:
    the command line) and under which cache and clock rules (unspecified: that tool's defaults)."""
    if source not in SOURCES:
        raise ValueError(f"rules(): unknown source {source!r}; use one of {', '.join(SOURCES)}")
    if source == "cupti":
        ignored = [f"{name}={value!r}" for name, value in (("cache_control", cache_control),
                                                              ("clock_control", clock_control)) if value]
        note = f" ({', '.join(ignored)} ignored)" if ignored else ""
        return ("measured by nsight-python's CUPTI backend: each kernel timed once as it ran, no replay; "
                f"caches as warm as the preceding work left them; clocks as the GPU chose{note}; durations only")
    cache, clock = cache_control or "all", clock_control or ("none" if source == "ncu" else "base")  # the defaults
    if cache not in _CACHE or clock not in _CLOCK:
        raise ValueError("rules(): cache_control must be all/none and clock_control none/base, "
                         f"got {cache!r}/{clock!r}")
    who = ("nsight-python's Nsight Compute backend" if source == "ncu"
           else "the ncu command line, launch mode on a separate script")
    return (f"measured by {who}: each kernel replayed once per metric pass; "
            f"{_CACHE[cache]} (cache_control={cache!r}); {_CLOCK[clock]} (clock_control={clock!r})")
