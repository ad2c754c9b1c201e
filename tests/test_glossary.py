"""Specifications for docs/glossary.md and the links to it.

Notebooks and the README link a term as ``…/docs/glossary.md#slug``; the slug is GitHub's anchor
of a ``## Term`` heading (GitHub renders the heading, lower-cases it, drops every character that
is not a letter, digit, space, ``-`` or ``_``, and turns spaces into hyphens). A link whose slug
no heading has lands at the top of the page on GitHub, silently: these tests catch it.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
GLOSSARY_URL = "https://github.com/nspy-tutorial/nspy-tutorial/blob/main/docs/glossary.md"
LINK = re.compile(r"glossary\.md#([^)\s\"'>\]`]*)")
spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
build_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_notebooks)

# The terms issue 32 asked the glossary to explain, by their slugs.
REQUIRED = """sm warp cuda-core tensor-core occupancy gpc memory-bandwidth dram l2-cache sm-clock boost-clock
base-clock held-clock clock-control cache-control kernel-replay nvtx-range annotation cupti nsight-compute
nsight-systems torchprofiler pct_of_peak_sustained_elapsed-vs-_active hmma wgmma mmasync fp8 tf32 split-k
epilogue kernel-fusion launch-overhead gpu-busy-percentage roofline arithmetic-intensity ridge-point
compute-bound memory-bound neither-latency-bound warp-stall-reasons roofs-measured-vs-datasheet run-to-run-band
timer-step rsd robust-rsd mad students-t-interval welchs-t-test welch-satterthwaite-degrees-of-freedom
holm-correction brown-forsythe-test spearman-rank-correlation warm-up-run tlimit stablemeasurement""".split()


def github_slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(text: str) -> list[str]:
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]


def entries(text: str) -> dict[str, str]:
    """Each term's heading and the text under it, up to the next heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {heading.strip(): body.strip() for heading, body in zip(parts[1::2], parts[2::2])}


def linked_slugs(path: Path) -> list[tuple[str, str]]:
    """(where, slug) of every glossary link in a file."""
    return [(f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}", m[1])
            for text in [path.read_text(encoding="utf-8")] for m in LINK.finditer(text)]


def linking_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "notebooks" / "src").glob("*.py")),
            *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "nspy_tutorial").glob("*.py"))]


@pytest.mark.parametrize(("heading", "slug"), [
    ("SM", "sm"), ("Student's t interval", "students-t-interval"), ("torch.profiler", "torchprofiler"),
    ("`pct_of_peak_sustained_elapsed` vs `_active`", "pct_of_peak_sustained_elapsed-vs-_active"),
    ("Neither (latency-bound)", "neither-latency-bound"), ("Roofs: measured vs datasheet", "roofs-measured-vs-datasheet"),
    ("T.Limit", "tlimit"), ("GPU busy %", "gpu-busy-"),
])
def test_slugs_follow_githubs_rule(heading, slug):
    assert github_slug(heading) == slug


def test_the_glossary_has_no_two_headings_with_one_anchor():
    slugs = [github_slug(h) for h in headings(GLOSSARY.read_text(encoding="utf-8"))]
    assert sorted({s for s in slugs if slugs.count(s) > 1}) == []


def test_the_glossary_explains_every_term_the_series_was_asked_to():
    slugs = {github_slug(h) for h in headings(GLOSSARY.read_text(encoding="utf-8"))}
    assert [slug for slug in REQUIRED if slug not in slugs] == []


def test_each_term_is_a_short_plain_definition():
    for heading, body in entries(GLOSSARY.read_text(encoding="utf-8")).items():
        definition = body.split("\n\n")[0]
        assert definition and not definition.startswith(("NVIDIA:", "PyTorch:", "SciPy:")), heading
        assert len(definition) <= 600, f"{heading}: {len(definition)} characters; say it in one to three sentences"


def test_every_glossary_link_lands_on_a_heading():
    slugs = {github_slug(h) for h in headings(GLOSSARY.read_text(encoding="utf-8"))}
    broken = [(where, slug) for path in linking_files() for where, slug in linked_slugs(path) if slug not in slugs]
    assert broken == [], f"glossary links to no heading: {broken} (headings: docs/glossary.md)"


def test_a_link_to_a_missing_term_is_caught(tmp_path):
    page = tmp_path / "x.md"
    page.write_text(f"see [occupancy]({GLOSSARY_URL}#occupancy) and [HMMA]({GLOSSARY_URL}#hmma-pipe)\n")
    slugs = {github_slug(h) for h in headings(GLOSSARY.read_text(encoding="utf-8"))}
    found = [slug for _, slug in (("x", m[1]) for m in LINK.finditer(page.read_text()))]
    assert found == ["occupancy", "hmma-pipe"] and [s for s in found if s not in slugs] == ["hmma-pipe"]


def test_every_notebook_links_the_glossary_beside_its_colab_badge():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        assert f"]({GLOSSARY_URL})" in "".join(first["source"]).splitlines()[0], path.name


def test_the_builder_puts_the_glossary_link_in_every_notebook_it_builds(tmp_path):
    source = tmp_path / "99_new.py"
    source.write_text("# %% [markdown]\n# # 99 · New\n# %%\nx = 1\n")
    first = build_notebooks.build(source).cells[0].source.splitlines()[0]
    assert first.startswith("[![Open In Colab]") and first.endswith(f"]({GLOSSARY_URL})")
