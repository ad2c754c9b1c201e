"""Build notebooks/NN_topic.ipynb from the percent-format sources in notebooks/src/.

Why a source format: notebooks are reviewed and edited as plain Python; the .ipynb files
are generated, committed without outputs, in canonical nbformat, with Colab metadata
(GPU accelerator, T4), an Open-in-Colab badge with a link to the glossary beside it, and the
standard setup cell.

Source format: cells start with ``# %%`` (code) or ``# %% [markdown]`` (markdown lines
start with ``# ``). The token ``{{SETUP}}`` on its own line becomes the setup cell
(``{{SETUP_MANUAL}}``: notebook 01's, which only looks). ``# %% writefile NAME.py`` starts a
code cell that Jupyter's own ``%%writefile NAME.py`` writes to a file: the module of kernels
a notebook imports and the ``ncu`` command line runs. In the source its body is plain Python,
so it is linted like the rest; only the generated cell carries the magic line.

Usage: python scripts/build_notebooks.py [--check]   (--check: fail if a notebook is stale)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

REPO = "nspy-tutorial/nspy-tutorial"
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"
BADGE = (
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/{repo}/blob/main/notebooks/{name})"
)
# Beside the badge of every notebook: the words the series uses, one page (docs/glossary.md).
GLOSSARY = "https://github.com/{repo}/blob/main/docs/glossary.md"
HEADER = BADGE + " · [Glossary: the terms these notebooks use](" + GLOSSARY + ")"
SETUP = '''\
# Setup -- run this cell first. {comment}
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("nspy_tutorial") is None:  # e.g. on Colab: install the helpers
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "nspy-tutorial @ git+https://github.com/{repo}"], check=True)
    importlib.invalidate_caches()

import nspy_tutorial as nt

ENV = nt.setup("{stem}"{args})'''
# {{SETUP}}: the one-call setup of every notebook; {{SETUP_MANUAL}}: notebook 01's, which only
# looks and leaves installing, the libcupti preload and `import nsight` to its own cells.
# (Both tokens are valid Python, so linters can read the sources.)
SETUP_KINDS = {
    "{{SETUP}}": ("Before anything touches the GPU: `import nsight` (in setup) loads\n"
         "# Nsight Compute before CUDA starts. On Colab each notebook is a fresh runtime: this cell installs what it needs.",
                  ""),
    "{{SETUP_MANUAL}}": ("In this notebook it only looks: GPU (through NVML,\n"
               "# which does not start CUDA) and the ncu installs. The cells below do the rest in the open.",
               ', steps="manual"'),
}


WRITEFILE = re.compile(r"^# %% writefile (?P<name>[A-Za-z_][A-Za-z0-9_]*\.py)$")


def parse_cells(text: str) -> list[tuple[str, str]]:
    """Split percent-format text into (kind, source) pairs.

    A ``# %% writefile NAME.py`` cell becomes a code cell whose first line is
    ``%%writefile NAME.py``.
    """
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            writefile = WRITEFILE.match(line)
            if "writefile" in line and not writefile:
                raise ValueError(f"malformed writefile cell marker {line!r}; use '# %% writefile name.py'")
            if writefile:
                cells.append(("code", [f"%%writefile {writefile['name']}"]))
            else:
                cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            cells[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"text before the first '# %%' marker: {line!r}")
    out = []
    for kind, lines in cells:
        if kind == "markdown":
            lines = [l[2:] if l.startswith("# ") else l.lstrip("#") for l in lines]
        source = "\n".join(lines).strip("\n")
        if source:
            out.append((kind, source))
    return out


def build(src: Path) -> nbformat.NotebookNode:
    stem = src.stem
    name = f"{stem}.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "accelerator": "GPU",
        "colab": {"gpuType": "T4", "name": name, "provenance": []},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(parse_cells(src.read_text())):
        token = source.strip()
        if token.startswith("{{SETUP") and token.endswith("}}"):
            if token not in SETUP_KINDS:
                raise ValueError(f"{src}: unknown setup cell {token!r}; use one of {sorted(SETUP_KINDS)}")
            comment, args = SETUP_KINDS[token]
            kind, source = "code", SETUP.format(repo=REPO, stem=stem, comment=comment, args=args)
        if i == 0:
            if kind != "markdown":
                raise ValueError(f"{src}: the first cell must be the markdown title")
            source = HEADER.format(repo=REPO, name=name) + "\n\n" + source
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        cell = make(source)
        cell.id = f"{stem[:2]}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook is stale")
    args = parser.parse_args(argv)
    stale = []
    for src in sorted(SRC.glob("[0-9][0-9]_*.py")):
        target = OUT / f"{src.stem}.ipynb"
        text = render(build(src))
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(target.name)
        else:
            target.write_text(text)
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(f"stale notebooks (run python scripts/build_notebooks.py): {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
