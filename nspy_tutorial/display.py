"""Printing helpers shared by every notebook: a banner above each section, a plain-text table of a few
DataFrame columns in readable units (:func:`show`), kernel names short enough for one line, and the caption
:func:`rules` above every measured table: which tool measured, under which cache and clock rules."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where it is used: `nspy-tutorial run` starts without it
    import pandas as pd

WIDTH = 78


def banner(title: str) -> None:
    """Print ``title`` between two rules, so sections stand out in long outputs."""
    print(f"\n{'=' * WIDTH}\n{title}\n{'=' * WIDTH}")


def show(df: pd.DataFrame, cols: Sequence[str], scale: Mapping[str, float] | None = None,
         fmt: str = "{:,.2f}") -> pd.DataFrame:
    """Print ``cols`` of ``df`` as an indented table, ``scale`` multiplying named columns; return what was printed."""
    import pandas as pd

    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise KeyError(f"show(): columns {missing} are not in the DataFrame; it has {list(df.columns)}")
    out = df[list(cols)].copy()
    for col, factor in (scale or {}).items():
        out[col] = pd.to_numeric(out[col]) * factor
    print(textwrap.indent(out.to_string(index=False, float_format=fmt.format), "  "))
    return out


# Template arguments that say what an elementwise kernel computes ("CUDAFunctor_add",
# "addcmul_cuda", "MulFunctor", "softmax_warp_forward"): worth keeping in a short name.
_DETAIL = re.compile(r"[\w:]*(?:Functor|_cuda|_forward|_backward)\w*")


def _mangled_parts(name: str) -> tuple[list[str], list[str]]:
    """The qualified name of an Itanium-mangled symbol, and the identifiers after it."""
    i = 3 if name.startswith("_ZN") else 2
    qualified: list[str] = []
    while digits := re.match(r"\d+", name[i:]):
        start = i + digits.end()
        i = start + int(digits.group())
        qualified.append(name[start:i])
        if not name.startswith("_ZN"):
            break
    rest = []  # every <length><identifier> that starts at a run of digits; overlaps are harmless
    for m in re.finditer(r"(?<!\d)(\d+)", name[i:]):
        start, length = i + m.end(), int(m.group(1))
        candidate = name[start:start + length]
        if length and len(candidate) == length and re.fullmatch(r"[A-Za-z_]\w*", candidate):
            rest.append(candidate)
    return qualified, rest


def short_kernel_name(name: str) -> str:
    """A kernel's name for one line, mangled or not: the qualified name and the functor a template argument
    names (``at::native::vectorized_elementwise_kernel<CUDAFunctor_add>``); others pass unchanged."""
    name = name.strip()
    if name.startswith("_Z") and len(name) > 2 and (name[2].isdigit() or name.startswith("_ZN")):
        qualified, rest = _mangled_parts(name)
        qualified = ["(anonymous)" if q.startswith("_GLOBAL__N") else q for q in qualified]
        base = "::".join(qualified)
        details = [r for r in rest if _DETAIL.fullmatch(r)]
    else:
        plain = name[5:] if name.startswith("void ") else name
        cut = min((k for k in (plain.find("<"), plain.find("(")) if k >= 0), default=len(plain))
        base, args = plain[:cut], plain[cut:]
        details = [d.split("::")[-1] for d in _DETAIL.findall(args)]
    details = [d for d in details if d and d != base.split("::")[-1]]
    return f"{base}<{details[0]}>" if details else base or name


SOURCES = ("ncu", "cupti", "ncu-cli")
_CACHE = {"all": "caches flushed before every pass", "none": "caches not flushed (warm from earlier work)"}
_CLOCK = {"none": "clocks free to boost", "base": "clocks locked to base"}


def rules(source: str | None, cache_control: str | None = None, clock_control: str | None = None) -> str:
    """One line saying which tool measured (``ncu``, ``cupti``, ``ncu-cli``) under which cache and clock rules."""
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
