"""Specifications for how the results card reads (``results.md``, nspy_tutorial.card's rendering).

A newcomer without a GPU reads the card first: a reason shared by many skipped sections is said
once per notebook, a notebook where nothing ran says so instead of "OK", and no cell of the card
shows "None", "nan" or nothing at all. The data (``results.json``) keeps its statuses as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

from nspy_tutorial import card
from nspy_tutorial.sections import SectionRecord

ROOT = Path(__file__).resolve().parents[1]
NO_GPU_RUN = ROOT / "tests" / "fixtures" / "card" / "no-gpu" / "results.json"
GPU_REASON = ("needs a GPU: no NVIDIA driver or GPU found (NVMLError_LibraryNotFound: NVML Shared Library Not "
              "Found)")
GPU_REMEDY = "run on a machine with an NVIDIA GPU and its driver, or open the notebook in Colab with a T4 runtime"


def section(name: str, status: str, **fields: str | None) -> SectionRecord:
    return SectionRecord(notebook="01_a", section=name, status=status, seconds=0.1, **fields)


def no_gpu(name: str) -> SectionRecord:
    return section(name, "SKIPPED", reason=GPU_REASON, remedy=GPU_REMEDY, needs="gpu")


def markdown(*entries: dict) -> str:
    return card.card_markdown(card.build_card(list(entries), "start", "end"))


def block(text: str, notebook: str) -> str:
    """The part of the card under a notebook's own heading."""
    return text.split(f"\n## {notebook} ")[1].split("\n## ")[0]


def table_cells(text: str) -> list[str]:
    """Every cell of every Markdown table row in ``text`` (separator rows left out)."""
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [cell.strip() for row in rows for cell in row.strip().strip("|").split(" | ") if set(cell) != {"-"}]


def test_a_reason_shared_by_several_skips_is_said_once_above_the_notebooks_table():
    entry = card.notebook_entry("02_b", 1.0, [no_gpu(f"{i}. Step") for i in range(1, 5)])
    text = block(markdown(entry), "02_b")
    assert text.count(GPU_REASON) == 1 and text.count(GPU_REMEDY) == 1
    assert f"**All 4 sections below: SKIPPED** — {GPU_REASON}; **what to do:** {GPU_REMEDY}" in text
    assert "| 1. Step | SKIPPED | (see above) | (see above) |" in text


def test_a_shared_reason_says_how_many_of_the_sections_it_covers_when_others_ran():
    entry = card.notebook_entry("01_a", 1.0, [section("1. Look", "OK", result="r"), no_gpu("2. A"), no_gpu("3. B")])
    assert "**2 of 3 sections below: SKIPPED** —" in block(markdown(entry), "01_a")


def test_a_reason_that_quotes_the_shared_one_points_above_instead_of_repeating_it():
    dependent = section("4. Plot", "SKIPPED", reason=f"needs section 1's result; section 1: SKIPPED, {GPU_REASON}",
                        remedy=GPU_REMEDY, needs="gpu")
    entry = card.notebook_entry("07_d", 1.0, [no_gpu("1. A"), no_gpu("2. B"), dependent])
    text = block(markdown(entry), "07_d")
    assert "| 4. Plot | SKIPPED | needs section 1's result; section 1: SKIPPED, (see above) | (see above) |" in text
    assert text.count(GPU_REASON) == 1


def test_a_reason_only_one_section_has_stays_in_its_row():
    entry = card.notebook_entry("05_c", 1.0, [section("1. TF32", "SKIPPED", reason="needs cc 8.0", remedy="use an A100",
                                                      needs="cc8.0"), section("2. Sweep", "OK", result="fine")])
    text = block(markdown(entry), "05_c")
    assert "below: SKIPPED" not in text and "| 1. TF32 | SKIPPED | needs cc 8.0 | use an A100 |" in text


def test_a_notebook_where_every_section_skipped_says_nothing_ran_and_why():
    entry = card.notebook_entry("02_b", 1.0, [no_gpu("1. A"), no_gpu("2. B")])
    text = markdown(entry)
    assert "| 02_b | nothing ran: no GPU | 0 | 2 | 0 |" in text
    assert "\n## 02_b — nothing ran: no GPU\n" in text
    assert "(1 of them ran nothing)" in text
    assert entry["status"] == "OK"  # the data, which decides the exit code, is not the card's wording


def test_a_notebook_where_one_section_ran_keeps_its_status():
    entry = card.notebook_entry("04_d", 1.0, [section("0. Defaults", "OK", result="read"), no_gpu("1. Measure")])
    assert "| 04_d | OK | 1 | 1 | 0 |" in markdown(entry)


def test_nothing_ran_names_each_missing_thing_once():
    skips = [no_gpu("1. A"), section("2. B", "SKIPPED", reason="no Triton", remedy="install it", needs="triton"),
             no_gpu("3. C")]
    assert card.shown_status(card.notebook_entry("07_e", 1.0, skips)) == "nothing ran: no GPU, no Triton"


def test_a_notebook_stopped_by_an_error_stays_failed_even_if_its_sections_skipped():
    entry = card.notebook_entry("03_c", 1.0, [no_gpu("1. A")], error="cell 3 of 9: ZeroDivisionError", cell=3)
    assert card.shown_status(entry) == "FAILED"


def test_missing_values_show_as_a_dash_never_none_nan_or_an_empty_cell():
    sections = [section("1. Result None", "OK", result=None), section("2. Result nan", "OK", result="nan"),
                section("3. Result text None", "OK", result="None"), section("4. Blank", "OK", result="  "),
                section("5. No reason", "SKIPPED", reason=None, remedy=None, needs="gpu")]
    text = markdown(card.notebook_entry("10_e", 1.0, sections))
    cells = table_cells(text)
    assert not [c for c in cells if c in ("", "None", "nan", "NaN", "<NA>")], cells
    assert "| 1. Result None | OK | — | — |" in text and "| 10_e | OK | 4 | 1 | 0 | 1.0 | — |" in text


def test_a_result_that_merely_contains_a_word_like_none_is_shown_as_written():
    entry = card.notebook_entry("01_a", 1.0, [section("1. Plan", "OK", result="none of the backends; plan below")])
    assert "| 1. Plan | OK | none of the backends; plan below | — |" in markdown(entry)


def test_the_recorded_no_gpu_card_says_the_gpu_reason_at_most_once_per_notebook():
    data = json.loads(NO_GPU_RUN.read_text(encoding="utf-8"))
    text = card.card_markdown(data)
    reason = next(s["reason"] for e in data["notebooks"] for s in e["sections"] if s["needs"] == "gpu")
    for entry in data["notebooks"]:
        assert block(text, entry["notebook"]).count(reason) <= 1, entry["notebook"]
    idle = [e["notebook"] for e in data["notebooks"] if all(s["status"] == "SKIPPED" for s in e["sections"])]
    assert idle and all(f"| {name} | nothing ran: no GPU |" in text for name in idle)
    assert not [c for c in table_cells(text) if c in ("", "None", "nan")]
