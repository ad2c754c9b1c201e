"""scripts/readme_figures.py on a small synthetic executed run (no kernel, no GPU).

The run is what ``nspy-tutorial run --out`` writes: results.json (the runner's own card) and
executed notebooks whose setup cell printed the environment banner (the bootstrap's own
lines) and whose plot sections output PNG images.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial import card
from nspy_tutorial.backend import NcuInstall
from nspy_tutorial.display import WIDTH
from nspy_tutorial.environment import Environment, banner_lines
from nspy_tutorial.gpu_facts import DeviceFacts, datasheet_for
from nspy_tutorial.sections import SectionRecord

ROOT = Path(__file__).resolve().parents[1]
OLD_NCU = NcuInstall("/usr/local/cuda/bin/ncu", (2025, 3, 1, 0))
STARTED = "2026-05-03T10:00:00+00:00"


def load_script():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


figures = load_script()


def h200_banner(notebook: str) -> str:
    facts = DeviceFacts(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=60 * 2**20,
                        memory_bytes=141 * 2**30, max_sm_clock_mhz=1980, max_mem_clock_mhz=3201)
    env = Environment(
        notebook=notebook, on_colab=False, gpu_name="NVIDIA H200", gpu_problem=None, driver="580.00",
        ncu_path=OLD_NCU.path, ncu_version=OLD_NCU.version, backend="cupti",
        backend_reason="Nsight Compute is not active (too old); CUPTI backend active (kernel durations only)",
        ncu_problem="too old", cupti_problem=None, facts=facts, datasheet=datasheet_for("NVIDIA H200"),
    )
    return "\n" + "=" * WIDTH + f"\nEnvironment  ({notebook})\n" + "=" * WIDTH + "\n" + "\n".join(
        "  " + line for line in banner_lines(env)) + "\n"


def png(tag: str) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + tag.encode()


def cell(source: str, printed: str = "", *images: bytes) -> nbformat.NotebookNode:
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)] if printed else []
    outputs += [nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(image).decode(),
                                                             "text/plain": "<Figure size 640x480 with 1 Axes>"})
                for image in images]
    return nbformat.v4.new_code_cell(source, outputs=outputs)


def banner_of(section: str) -> str:
    return "\n" + "=" * WIDTH + f"\n{section}\n" + "=" * WIDTH + "\n"


NOTEBOOKS = {
    "06_roofline": ["1. This GPU's roofs", "3. Transformer ops on the roofline", "4. The roofline plot"],
    "07_kernel_fusion": ["1. Unfused vs fused", "5. The timeline plot: where the GPU waits"],
    "09_cupti_vs_ncu": ["3. Side by side", "Plot: durations, difference and cost per tool", "4. Two more clocks"],
}


def make_run(folder: Path, drop_image: str | None = None) -> Path:
    """A run folder: results.json from the runner's card, three executed notebooks."""
    (folder / "notebooks").mkdir(parents=True)
    results = []
    for stem, names in NOTEBOOKS.items():
        cells = [cell(f'ENV = nt.setup("{stem}")', h200_banner(stem))]
        for name in names:
            images: list[bytes] = []
            if "roofline" in name and "plot" not in name:
                images = [png("decoy: a roofline section without the word")]
            if "plot" in name.lower():
                images = [] if stem == drop_image else [png(f"{stem} first"), png(f"{stem} plot")]
            # 09 opens its plot section with a name held in a variable: found by its printed banner
            source = "with nt.section(PLOT) as s:" if stem.startswith("09") and "Plot" in name else (
                f'with nt.section("{name}") as s:\n    s.result = "done"')
            cells.append(cell(source, banner_of(name) + "[OK] done", *images))
            if stem == "09_cupti_vs_ncu" and "Side" in name:
                cells.append(cell("plt.show()", "", png("09 after section 3")))
        cells.append(cell("nt.summary()", "SUMMARY"))
        nbformat.write(nbformat.v4.new_notebook(cells=cells), folder / "notebooks" / f"{stem}.ipynb")
        records = [SectionRecord(stem, name, "OK", result="done", seconds=1.0) for name in names]
        results.append(card.notebook_entry(stem, 3.0, records))
    data = card.build_card(results, STARTED, "2026-05-03T10:03:00+00:00")
    (folder / "results.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    return folder


README = f"""# nspy-tutorial

Intro.

## What you will see

{figures.START}
(nothing yet)
{figures.END}

## Next part

Kept as it is.
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    return tmp_path


def test_the_figures_come_from_the_plot_sections_images_byte_for_byte(tmp_path, repo):
    run = make_run(tmp_path / "run")
    assert figures.main([str(run), "--docs", str(repo / "docs"), "--readme", str(repo / "README.md")]) == 0
    assert (repo / "docs" / "roofline.png").read_bytes() == png("06_roofline plot")  # the last, not the decoy
    assert (repo / "docs" / "timeline.png").read_bytes() == png("07_kernel_fusion plot")
    assert (repo / "docs" / "cupti-vs-ncu.png").read_bytes() == png("09_cupti_vs_ncu plot")  # by its banner
    assert sorted(p.name for p in (repo / "docs").iterdir()) == [
        "cupti-vs-ncu.png", "results-table.md", "roofline.png", "timeline.png"]


def test_the_card_is_the_runners_own_table(tmp_path, repo):
    run = make_run(tmp_path / "run")
    figures.main([str(run), "--docs", str(repo / "docs"), "--readme", str(repo / "README.md")])
    table = (repo / "docs" / "results-table.md").read_text(encoding="utf-8")
    data = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert table.endswith(card.card_markdown(data))
    assert table.startswith("<!-- Written by scripts/readme_figures.py")
    assert "| 4. The roofline plot | OK | done |" in table


def test_the_readme_part_is_regenerated_between_its_markers_with_captions_from_the_run(tmp_path, repo):
    run = make_run(tmp_path / "run")
    args = [str(run), "--docs", str(repo / "docs"), "--readme", str(repo / "README.md")]
    figures.main(args)
    text = (repo / "README.md").read_text(encoding="utf-8")
    head, rest = text.split(figures.START)
    part, tail = rest.split(figures.END)
    assert head == README.split(figures.START)[0] and tail == README.split(figures.END)[1]
    assert "(nothing yet)" not in part
    versions = figures.banner_value(h200_banner("x"), "nsight")  # as installed here: nsight-python ..., cupti-python ...
    machine = f"NVIDIA H200 with the CUPTI backend and the ncu 2025.3.1.0 command line ({versions}), 2026-05-03"
    assert "![06_roofline · 4. The roofline plot](docs/roofline.png)" in part
    assert "![07_kernel_fusion · 5. The timeline plot: where the GPU waits](docs/timeline.png)" in part
    assert "![09_cupti_vs_ncu · Plot: durations, difference and cost per tool](docs/cupti-vs-ncu.png)" in part
    assert part.count(machine) == 4  # the headline's sentence and each caption
    assert "**3 sections" not in part and f"**{json.loads((run / 'results.json').read_text())['headline']}**" in part
    assert "[docs/results-table.md](docs/results-table.md)" in part
    figures.main(args)
    assert (repo / "README.md").read_text(encoding="utf-8") == text  # idempotent


def test_a_missing_figure_names_the_sections_it_looked_at_and_writes_nothing(tmp_path, repo, capsys):
    run = make_run(tmp_path / "run", drop_image="07_kernel_fusion")
    assert figures.main([str(run), "--docs", str(repo / "docs"), "--readme", str(repo / "README.md")]) == 1
    error = capsys.readouterr().err
    assert "timeline.png: no image in a section of 07_kernel_fusion named with 'plot'" in error
    assert "'5. The timeline plot: where the GPU waits' (0 images)" in error
    assert not (repo / "docs").exists()
    assert (repo / "README.md").read_text(encoding="utf-8") == README


def test_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path, repo, capsys):
    assert figures.main([str(tmp_path), "--docs", str(repo / "docs"), "--readme", str(repo / "README.md")]) == 1
    assert "results.json not found" in capsys.readouterr().err


def test_the_repository_readme_has_the_generated_part_once():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(figures.START) == 1 and text.count(figures.END) == 1
    assert text.index("## What you will see") < text.index(figures.START) < text.index(figures.END)


def test_a_run_of_some_notebooks_is_named_with_its_only_option():
    partial = {"started_at": STARTED, "headline": "4 sections ran OK",
               "notebooks": [{"notebook": "06_roofline"}, {"notebook": "09_cupti_vs_ncu"}]}
    assert "A recorded run of `nspy-tutorial run --only 06 09` on 2026-05-03" in figures.readme_part(partial, [], "docs")
