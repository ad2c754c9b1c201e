"""Small printing helpers shared by every notebook.

They keep the notebooks' output uniform: a banner line above each section and a
plain-text table (``show``) for a few DataFrame columns, scaled into readable units.
"""

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
    print("\n" + "=" * WIDTH)
    print(title)
    print("=" * WIDTH)


def show(
    df: pd.DataFrame,
    cols: Sequence[str],
    scale: Mapping[str, float] | None = None,
    fmt: str = "{:,.2f}",
) -> pd.DataFrame:
    """Print ``cols`` of ``df`` as an indented table and return what was printed.

    ``scale`` multiplies named columns (e.g. ``{"AvgValue": 1e-3}`` for ns -> us);
    ``fmt`` formats every float. The input frame is never modified.
    """
    import pandas as pd

    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise KeyError(
            f"show(): columns {missing} are not in the DataFrame; it has {list(df.columns)}"
        )
    out = df[list(cols)].copy()
    for col, factor in (scale or {}).items():
        out[col] = pd.to_numeric(out[col]) * factor
    text = out.to_string(index=False, float_format=lambda v: fmt.format(v))
    print(textwrap.indent(text, "  "))
    return out


# Template arguments that say what an elementwise kernel computes ("CUDAFunctor_add",
# "addcmul_cuda", "MulFunctor", "softmax_warp_forward"): worth keeping in a short name.
_DETAIL = re.compile(r"\w*(?:Functor|_cuda|_forward|_backward)\w*")


def _mangled_parts(name: str) -> tuple[list[str], list[str]]:
    """The qualified name of an Itanium-mangled symbol, and the identifiers after it."""
    i = 3 if name.startswith("_ZN") else 2
    qualified: list[str] = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        length = int(name[i:j])
        qualified.append(name[j:j + length])
        i = j + length
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
    """A kernel's name short enough for one line, in whichever form it arrives.

    The CUPTI backend gives mangled names (``_ZN2at6native29vectorized_elementwise_kernel...``).
    nsight-python's Nsight Compute backend -- and ``ncu_cli.nsight_table``, which reads reports
    the same way -- gives the *bare function name* (``vectorized_elementwise_kernel``, ncu's
    default ``action.name()``): no namespace, no template arguments, so two different kernels can
    share one name (measured on the GPU test machine). A report read with ``ncu_report`` can give
    the demangled form (``action.name(ncu_report.IAction.NameBase_DEMANGLED)``:
    ``void at::native::vectorized_elementwise_kernel<4, ...>(...)``), which this also shortens.

    Keeps the qualified function name and, when the template arguments name one, the
    functor that says what it computes: ``at::native::vectorized_elementwise_kernel<CUDAFunctor_add>``.
    Names that are neither (``nvjet_sm90_...``, ``triton_poi_fused_...``) pass unchanged.
    """
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
        details = [d.split("::")[-1] for d in re.findall(r"[\w:]*(?:Functor|_cuda|_forward|_backward)\w*", args)]
    details = [d for d in details if d and d != base.split("::")[-1]]
    return f"{base}<{details[0]}>" if details else base or name
