"""Printing helpers of every notebook: section banners, a few DataFrame columns as a table (:func:`show`), kernel
names short enough for one line, :func:`rules`, the caption saying which tool measured under which rules,
:func:`say` (a long line wrapped to fit a reader's screen) and :func:`label_offsets` (plot labels that do not
collide)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas for the type hints only: `nspy-tutorial run` starts without it
    import pandas as pd

WIDTH = 78
READABLE = 120  # the longest printed line a learner should have to read


def banner(title: str) -> None:
    """Print ``title`` between two rules, so sections stand out in long outputs."""
    print(f"\n{'=' * WIDTH}\n{title}\n{'=' * WIDTH}")


def say(text: str, first: str = "  ", rest: str = "    ") -> None:
    """Print ``text`` wrapped to lines of at most :data:`READABLE` characters, indented like a check's line (each
    of its own lines wrapped alone; a long word, such as a path, is not broken)."""
    for line in text.splitlines() or [""]:
        print(textwrap.fill(line, READABLE, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                            break_on_hyphens=False))
        first = rest


def label_offsets(ax, marks: Sequence[tuple[float, float]], n: int, gap: float = 11) -> list[tuple[int, int]]:
    """Offsets in pixels for the labels of the first ``n`` of ``marks`` (data coordinates of every point drawn) that
    keep each label at least ``gap`` pixels from every mark and every label placed before it; the nearest spot
    otherwise. Call it once the axes' limits and layout are final (``fig.tight_layout()``)."""
    taken = [tuple(ax.transData.transform(mark)) for mark in marks]
    spots = [(12, 8), (12, -8), (-12, 8), (-12, -8), (24, 0), (-24, 0), (12, 22), (-12, -22), (0, 30), (0, -30)]
    found = []
    for x, y in taken[:n]:
        clear = [(u, v) for u, v in spots if min(max(abs(x + u - a), abs(y + v - b)) for a, b in taken) > gap]
        found.append((clear or spots)[0])
        taken.append((x + found[-1][0], y + found[-1][1]))
    return found


def show(df: pd.DataFrame, cols: Sequence[str], scale: Mapping[str, float] | None = None,
         fmt: str = "{:,.2f}") -> None:
    """Print ``cols`` of ``df`` as an indented table, ``scale`` multiplying the columns it names."""
    out = df[list(cols)].copy()
    for col, factor in (scale or {}).items():
        out[col] = out[col].astype(float) * factor
    print(textwrap.indent(out.to_string(index=False, float_format=fmt.format), "  "))


# Template arguments that say what an elementwise kernel computes ("CUDAFunctor_add", "addcmul_cuda", "MulFunctor",
# "softmax_warp_forward"): worth keeping in a short name.
_DETAIL = re.compile(r"[\w:]*(?:Functor|_cuda|_forward|_backward)\w*")


def _demangle(name: str) -> tuple[str, list[str]]:
    """An Itanium-mangled name's qualified name, and every ``<length><identifier>`` after it (overlaps are harmless)."""
    nested = name.startswith("_ZN")
    i = 3 if nested else 2
    qualified: list[str] = []
    while digits := re.match(r"\d+", name[i:]):
        start = i + digits.end()
        i = start + int(digits.group())
        qualified.append("(anonymous)" if name.startswith("_GLOBAL__N", start) else name[start:i])
        if not nested:
            break
    rest = name[i:]
    identifiers = [rest[m.end():m.end() + int(m.group())] for m in re.finditer(r"(?<!\d)\d+", rest)]
    return "::".join(qualified), identifiers


def short_kernel_name(name: str) -> str:
    """A kernel's name for one line, mangled (CUPTI) or not (Nsight Compute): the qualified name and the functor a
    template argument names (``at::native::vectorized_elementwise_kernel<CUDAFunctor_add>``); others pass unchanged."""
    name = name.strip()
    if re.match(r"_Z\d|_ZN", name):
        base, words = _demangle(name)
    else:
        plain = name.removeprefix("void ")
        cut = min((k for k in (plain.find("<"), plain.find("(")) if k >= 0), default=len(plain))
        base, words = plain[:cut], [d.split("::")[-1] for d in _DETAIL.findall(plain[cut:])]
    details = [w for w in words if _DETAIL.fullmatch(w) and w != base.split("::")[-1] and len(w) <= 40]  # a name,
    # not a run of mangled text that happens to end in one
    return f"{base}<{details[0]}>" if details else base or name


SOURCES = ("ncu", "cupti", "ncu-cli")
_CACHE = {"all": "caches flushed before every pass", "none": "caches not flushed (warm from earlier work)"}
_CLOCK = {"none": "clocks free to boost", "base": "clocks locked to base"}


def rules(source: str | None, cache_control: str | None = None, clock_control: str | None = None) -> str:
    """The caption saying which tool measured (``ncu``, ``cupti``, ``ncu-cli``) under which cache and clock rules,
    wrapped to lines a reader can read (at most :data:`READABLE` characters)."""
    return textwrap.fill(_rules(source, cache_control, clock_control), READABLE - 12, break_on_hyphens=False)  # room for a label


def _rules(source: str | None, cache_control: str | None, clock_control: str | None) -> str:
    if source not in SOURCES:
        raise ValueError(f"rules(): unknown source {source!r}; use one of {', '.join(SOURCES)}")
    if source == "cupti":
        ignored = [f"{name}={value!r}" for name, value in (("cache_control", cache_control),
                                                              ("clock_control", clock_control)) if value]
        note = f" ({', '.join(ignored)} ignored)" if ignored else ""
        return ("measured by nsight-python's CUPTI backend: each kernel timed once as it ran, no replay; "
                f"caches as warm as the preceding work left them; clocks as the GPU chose{note}; durations only")
    cache, clock = cache_control or "all", clock_control or ("none" if source == "ncu" else "base")  # the defaults
    who = ("nsight-python's Nsight Compute backend" if source == "ncu"
           else "the ncu command line, launch mode on a separate script")
    return (f"measured by {who}: each kernel replayed once per metric pass; "
            f"{_CACHE[cache]} (cache_control={cache!r}); {_CLOCK[clock]} (clock_control={clock!r})")
