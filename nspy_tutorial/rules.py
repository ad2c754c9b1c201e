"""Whose rules produced a number: one caption line for every measured table.

The same kernel measured three ways gives three different kinds of number:

* nsight-python's **Nsight Compute backend** replays each kernel once per metric pass;
  ``cache_control="all"`` (its default) flushes the caches before every pass, and
  ``clock_control="none"`` (its default) leaves the clocks free to boost;
* nsight-python's **CUPTI backend** times each kernel once, as it runs: no replay, no
  flush (caches are as warm as the preceding work left them), no clock control --
  both options are ignored -- and durations only;
* the **ncu command line** in launch mode replays like the backend but with its own
  defaults: ``--cache-control all`` and ``--clock-control base`` (clocks locked to base).

A notebook prints :func:`rules` above each table so the reader knows which applies.
"""

from __future__ import annotations

SOURCES = ("ncu", "cupti", "ncu-cli")
_DEFAULTS = {"ncu": ("all", "none"), "ncu-cli": ("all", "base")}
_CACHE = {"all": "caches flushed before every pass", "none": "caches not flushed (warm from earlier work)"}
_CLOCK = {"none": "clocks free to boost", "base": "clocks locked to base"}


def rules(source: str | None, cache_control: str | None = None, clock_control: str | None = None) -> str:
    """One line saying which tool measured and under which cache and clock rules.

    ``source`` is ``"ncu"`` (nsight-python's Nsight Compute backend), ``"cupti"``
    (its CUPTI backend) or ``"ncu-cli"`` (the ncu command line). For the two
    Nsight Compute sources, unspecified controls mean that tool's defaults.
    """
    if source not in SOURCES:
        raise ValueError(f"rules(): unknown source {source!r}; use one of {', '.join(SOURCES)}")
    if source == "cupti":
        ignored = [f"{name}={value!r}" for name, value in (("cache_control", cache_control),
                                                              ("clock_control", clock_control)) if value]
        note = f" ({', '.join(ignored)} ignored)" if ignored else ""
        return ("measured by nsight-python's CUPTI backend: each kernel timed once as it ran, no replay; "
                f"caches as warm as the preceding work left them; clocks as the GPU chose{note}; durations only")
    default_cache, default_clock = _DEFAULTS[source]
    cache, clock = cache_control or default_cache, clock_control or default_clock
    if cache not in _CACHE or clock not in _CLOCK:
        raise ValueError(f"rules(): cache_control must be all/none and clock_control none/base, "
                         f"got {cache!r}/{clock!r}")
    who = ("nsight-python's Nsight Compute backend" if source == "ncu"
           else "the ncu command line, launch mode on a separate script")
    return (f"measured by {who}: each kernel replayed once per metric pass; "
            f"{_CACHE[cache]} (cache_control={cache!r}); {_CLOCK[clock]} (clock_control={clock!r})")
