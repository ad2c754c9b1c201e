"""Specifications for nspy_tutorial.display.rules: the caption saying whose rules made a number."""

import pytest

from nspy_tutorial.display import READABLE
from nspy_tutorial.display import rules as wrapped


def rules(*args, **kwargs) -> str:
    """The caption as one line (it prints wrapped: where it breaks is not what these tests are about)."""
    return " ".join(wrapped(*args, **kwargs).split())


def test_cupti_says_one_execution_warm_caches_and_durations_only():
    text = rules("cupti")
    assert "CUPTI" in text and "no replay" in text and "warm" in text and "durations only" in text


def test_cupti_names_the_controls_it_ignores():
    assert "cache_control='all' ignored" in rules("cupti", cache_control="all")


def test_nsight_compute_backend_defaults_flush_and_leave_clocks_free():
    text = rules("ncu")
    assert "Nsight Compute backend" in text
    assert "cache_control='all'" in text and "clock_control='none'" in text


def test_ncu_command_line_defaults_lock_clocks_to_base():
    text = rules("ncu-cli")
    assert "command line" in text and "clock_control='base'" in text and "locked to base" in text


def test_explicit_controls_override_the_tool_defaults():
    assert "caches not flushed" in rules("ncu", cache_control="none")


def test_an_unknown_source_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown source 'nsys'"):
        rules("nsys")


def test_the_caption_prints_in_lines_a_reader_can_read_with_room_for_a_label():
    text = wrapped("ncu-cli", cache_control="none", clock_control="none")
    assert len(text.splitlines()) > 1 and all(len(line) <= READABLE - 10 for line in text.splitlines())
