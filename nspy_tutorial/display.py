"""Small printing helpers shared by every notebook.

They keep the notebooks' output uniform: a banner line above each section and a
plain-text table (``show``) for a few DataFrame columns, scaled into readable units.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

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
