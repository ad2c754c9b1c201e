"""Specification of the section guard (``nspy_tutorial.sections``).

Every section ends OK, SKIPPED or FAILED; the environment variables
NSPY_TUTORIAL_STRICT, NSPY_TUTORIAL_RESULTS and NSPY_TUTORIAL_REQUIRE change
what a failure does, where records go, and which skips count as failures.
"""

from __future__ import annotations

import json

import pytest

from nspy_tutorial import sections
from nspy_tutorial.sections import (
    FAILED,
    OK,
    SKIPPED,
    ClaimFailed,
    SettingError,
    Skip,
    claim,
    first_line,
    records,
    section,
    summary,
)

RECORD_KEYS = {"notebook", "section", "status", "result", "reason", "remedy", "needs", "seconds"}


@pytest.fixture(autouse=True)
def clean_guard(monkeypatch: pytest.MonkeyPatch):
    """No records, a known notebook name and none of the guard's variables set."""
    for name in ("NSPY_TUTORIAL_STRICT", "NSPY_TUTORIAL_RESULTS", "NSPY_TUTORIAL_REQUIRE"):
        monkeypatch.delenv(name, raising=False)
    old_name = sections._NOTEBOOK["name"]
    monkeypatch.setattr(sections, "_RECORDS", {})
    sections.set_notebook("99_test")
    yield
    sections.set_notebook(old_name)


def only_record() -> sections.SectionRecord:
    recs = sections.records()
    assert len(recs) == 1, recs
    return recs[0]


# --------------------------------------------------------------------------
# OK
# --------------------------------------------------------------------------


def test_section_that_sets_its_result_is_ok_with_that_result(capsys):
    with section("1. Works") as s:
        s.result = "fp32 matmul 1.23 ms"
    rec = only_record()
    assert (rec.notebook, rec.section, rec.status, rec.result) == ("99_test", "1. Works", OK, "fp32 matmul 1.23 ms")
    assert rec.reason is None and rec.remedy is None
    assert s.status == OK
    assert "[OK] fp32 matmul 1.23 ms" in capsys.readouterr().out


def test_section_that_finishes_without_a_result_line_is_failed():
    with section("1. Forgot the result"):
        pass
    rec = only_record()
    assert rec.status == FAILED
    assert rec.result is None
    assert "without setting its one-line result" in rec.reason
    assert "s.result" in rec.remedy


def test_section_without_result_raises_in_strict_mode(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with pytest.raises(ClaimFailed, match="1. Forgot the result"):
        with section("1. Forgot the result"):
            pass
    assert only_record().status == FAILED


# --------------------------------------------------------------------------
# SKIPPED
# --------------------------------------------------------------------------


def test_skip_inside_a_section_records_skipped_with_reason_and_remedy(capsys):
    with section("2. Needs a GPU") as s:
        raise Skip("needs a GPU: none here", "change the runtime type", needs="gpu")
    rec = only_record()
    assert rec.status == SKIPPED
    assert rec.reason == "needs a GPU: none here"
    assert rec.remedy == "change the runtime type"
    assert rec.result is None
    assert s.status == SKIPPED
    out = capsys.readouterr().out
    assert "[SKIPPED] needs a GPU: none here" in out
    assert "what to do: change the runtime type" in out


def test_skip_is_suppressed_and_the_code_after_the_section_runs():
    after = []
    with section("2. Skipped"):
        raise Skip("why", "what to do")
    after.append("ran")
    assert after == ["ran"]


def test_skip_stays_skipped_in_strict_mode(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with section("2. Skipped"):
        raise Skip("why", "what to do", needs="gpu")
    assert only_record().status == SKIPPED


# --------------------------------------------------------------------------
# FAILED
# --------------------------------------------------------------------------


def test_unexpected_exception_is_failed_with_its_type_and_first_line(capsys):
    with section("3. Breaks"):
        raise ZeroDivisionError("division by zero\nsecond line")
    rec = only_record()
    assert rec.status == FAILED
    assert rec.reason == "ZeroDivisionError: division by zero"
    assert rec.remedy == "see the traceback above"


def test_unexpected_exception_prints_its_traceback(capsys):
    def inner_helper():
        raise ValueError("bad value")

    with section("3. Breaks"):
        inner_helper()
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "Traceback (most recent call last)" in printed
    assert "inner_helper" in printed
    assert "ValueError: bad value" in printed
    assert "[FAILED] ValueError: bad value" in captured.out


def test_unexpected_exception_is_suppressed_when_not_strict():
    after = []
    with section("3. Breaks"):
        raise RuntimeError("boom")
    after.append("ran")
    assert after == ["ran"]
    assert only_record().status == FAILED


@pytest.mark.parametrize("value", ["1", "yes", "true", "TRUE", "On", " yes "])
def test_strict_mode_reraises_the_original_exception(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", value)
    original = RuntimeError("boom")
    with pytest.raises(RuntimeError) as raised:
        with section("3. Breaks"):
            raise original
    assert raised.value is original
    assert only_record().status == FAILED


@pytest.mark.parametrize("value", ["0", "false", "False", "no", "NO", "off", ""])
def test_strict_off_spellings_are_not_strict(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", value)
    with section("3. Breaks"):
        raise RuntimeError("boom")
    assert only_record().status == FAILED


@pytest.mark.parametrize("value", ["2", "maybe", "ja", "enabled"])
def test_strict_with_an_unknown_spelling_fails_the_cell_before_the_section_runs(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", value)
    ran = []
    with pytest.raises(SettingError) as raised:
        with section("3. Anything"):
            ran.append(1)
    message = str(raised.value)
    assert f"NSPY_TUTORIAL_STRICT={value!r}" in message
    assert "1/0, true/false, yes/no or on/off" in message
    assert ran == [] and sections.records() == []


def test_strict_with_an_unknown_spelling_also_fails_summary(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "maybe")
    with pytest.raises(SettingError, match="NSPY_TUTORIAL_STRICT"):
        summary()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_and_system_exit_are_never_swallowed(interrupt):
    with pytest.raises(interrupt):
        with section("4. Interrupted"):
            raise interrupt()
    assert sections.records() == []


# --------------------------------------------------------------------------
# NSPY_TUTORIAL_RESULTS
# --------------------------------------------------------------------------


def test_results_file_gets_one_json_line_per_section_with_exactly_the_record_keys(monkeypatch, tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"pre": "existing line"}\n')
    monkeypatch.setenv("NSPY_TUTORIAL_RESULTS", str(results))
    with section("1. Works") as s:
        s.result = "done"
    with section("2. Skipped"):
        raise Skip("why", "what to do")
    with section("3. Breaks"):
        raise RuntimeError("boom")

    lines = results.read_text().splitlines()
    assert lines[0] == '{"pre": "existing line"}'  # appended, not overwritten
    rows = [json.loads(line) for line in lines[1:]]
    assert len(rows) == 3
    for row in rows:
        assert set(row) == RECORD_KEYS
        assert row["notebook"] == "99_test"
        assert isinstance(row["seconds"], float) and row["seconds"] >= 0
    assert [(r["section"], r["status"]) for r in rows] == [
        ("1. Works", OK),
        ("2. Skipped", SKIPPED),
        ("3. Breaks", FAILED),
    ]
    assert rows[0]["result"] == "done"
    assert (rows[1]["reason"], rows[1]["remedy"]) == ("why", "what to do")
    assert rows[2]["reason"] == "RuntimeError: boom"


def test_no_results_file_is_written_when_the_variable_is_unset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with section("1. Works") as s:
        s.result = "done"
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------
# NSPY_TUTORIAL_REQUIRE
# --------------------------------------------------------------------------


def test_required_ncu_turns_an_ncu_skip_into_failed(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu")
    with section("5. Counters"):
        raise Skip("Nsight Compute did not load", "install ncu", needs="ncu")
    rec = only_record()
    assert rec.status == FAILED
    assert "required `ncu` is missing" in rec.reason
    assert "Nsight Compute did not load" in rec.reason
    assert rec.remedy == "install ncu"


def test_required_ncu_skip_raises_in_strict_mode(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu")
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    skip = Skip("Nsight Compute did not load", "install ncu", needs="ncu")
    with pytest.raises(ClaimFailed, match="required `ncu` is missing") as raised:
        with section("5. Counters"):
            raise skip
    assert raised.value.__cause__ is skip
    assert only_record().status == FAILED


def test_required_ncu_leaves_a_gpu_skip_skipped(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu")
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with section("2. Needs a GPU"):
        raise Skip("needs a GPU", "change the runtime type", needs="gpu")
    assert only_record().status == SKIPPED


def test_require_accepts_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", " gpu , ncu ")
    with section("2. Needs a GPU"):
        raise Skip("needs a GPU", "change the runtime type", needs="gpu")
    assert only_record().status == FAILED


def test_require_accepts_a_compute_capability_need(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "cc8.0")
    with section("1. TF32"):
        raise Skip("TF32 needs compute capability >= 8.0", "use an Ampere GPU", needs="cc8.0")
    assert only_record().status == FAILED


@pytest.mark.parametrize("value", ["bogus", "gpu,bogus", "cuda", "cc8", "GPU, ncu ,nc"])
def test_require_with_an_unknown_need_fails_naming_the_valid_ones(monkeypatch, value):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", value)
    with pytest.raises(SettingError) as raised:
        with section("1. Anything"):
            pass
    message = str(raised.value)
    assert f"NSPY_TUTORIAL_REQUIRE={value!r}" in message
    assert "valid needs: gpu, profiler, ncu, ncu-cli, cupti, triton, counters, cc<major>.<minor> (e.g. cc8.0)" in message


def test_require_is_case_insensitive(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "GPU")
    with section("2. Needs a GPU"):
        raise Skip("needs a GPU", "change the runtime type", needs="gpu")
    assert only_record().status == FAILED


def test_a_skip_lacking_several_needs_fails_when_any_of_them_is_required(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu")
    with section("5. Counters"):
        raise Skip("needs a GPU: none here", "change the runtime type", needs=("gpu", "ncu"))
    rec = only_record()
    assert rec.status == FAILED
    assert rec.reason == "required `ncu` is missing: needs a GPU: none here"
    assert rec.needs == "gpu"  # the first need: what the card groups by


def test_a_skip_lacking_several_needs_stays_skipped_when_none_is_required(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "triton")
    with section("5. Counters"):
        raise Skip("needs a GPU: none here", "change the runtime type", needs=("gpu", "ncu"))
    rec = only_record()
    assert (rec.status, rec.needs) == (SKIPPED, "gpu")


def test_skip_needs_is_the_first_need_and_lacks_all_of_them():
    assert (Skip("r", "m", needs="gpu").needs, Skip("r", "m", needs="gpu").lacks) == ("gpu", ("gpu",))
    assert (Skip("r", "m", needs=("gpu", "cc8.0")).needs, Skip("r", "m", needs=("gpu", "cc8.0")).lacks) == (
        "gpu", ("gpu", "cc8.0"))
    assert (Skip("r", "m").needs, Skip("r", "m").lacks) == ("", ())


def test_skip_records_what_it_needs():
    with section("2. Needs a GPU"):
        raise Skip("needs a GPU", "change the runtime type", needs="gpu")
    with section("3. Needs section 2"):
        raise Skip("section 2 was skipped", "run it on a GPU")
    assert [r.needs for r in sections.records()] == ["gpu", None]


def test_skip_without_needs_is_never_turned_into_a_failure(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_REQUIRE", "ncu,")
    with section("2. Skipped"):
        raise Skip("why", "what to do")
    assert only_record().status == SKIPPED


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


def test_rerunning_a_section_with_the_same_name_replaces_its_record():
    with section("1. First"):
        raise RuntimeError("boom")
    with section("2. Second") as s:
        s.result = "second"
    with section("1. First") as s:
        s.result = "fixed"
    recs = sections.records()
    assert [(r.section, r.status, r.result) for r in recs] == [
        ("1. First", OK, "fixed"),
        ("2. Second", OK, "second"),
    ]


# --------------------------------------------------------------------------
# summary()
# --------------------------------------------------------------------------


def run_one_of_each() -> None:
    with section("1. Works") as s:
        s.result = "fp32 1.0 ms"
    with section("2. Skipped"):
        raise Skip("needs a GPU", "change the runtime type")
    with section("3. Breaks"):
        raise RuntimeError("boom")


def test_summary_prints_each_section_and_the_counts(capsys):
    run_one_of_each()
    capsys.readouterr()
    assert summary() is None  # the notebook's last cell echoes nothing after the printed summary
    out = capsys.readouterr().out
    assert [r.section for r in records()] == ["1. Works", "2. Skipped", "3. Breaks"]
    assert "SUMMARY  99_test" in out
    assert "1. Works" in out and "fp32 1.0 ms" in out
    assert "2. Skipped" in out and "needs a GPU -> change the runtime type" in out
    assert "3. Breaks" in out and "RuntimeError: boom -> see the traceback above" in out
    assert "1 OK, 1 SKIPPED, 1 FAILED" in out


def test_summary_raises_in_strict_mode_when_a_section_failed(monkeypatch):
    run_one_of_each()  # not strict yet: the failure is recorded, not raised
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with pytest.raises(ClaimFailed, match="1 section\\(s\\) FAILED in 99_test"):
        summary()


def test_summary_does_not_raise_in_strict_mode_without_failures(monkeypatch):
    monkeypatch.setenv("NSPY_TUTORIAL_STRICT", "1")
    with section("1. Works") as s:
        s.result = "done"
    with section("2. Skipped"):
        raise Skip("why", "what to do")
    summary()
    assert [r.status for r in records()] == [OK, SKIPPED]


# --------------------------------------------------------------------------
# claim()
# --------------------------------------------------------------------------


def test_true_claim_prints_check_and_its_statement(capsys):
    claim(2 > 1, "two exceeds one", evidence="2 vs 1")
    assert capsys.readouterr().out == "  check: two exceeds one (2 vs 1)\n"


def test_false_claim_raises_claim_failed_naming_the_statement():
    with pytest.raises(ClaimFailed, match=r"claim no longer holds: bf16 beats fp32 \(0.5x\)"):
        claim(False, "bf16 beats fp32", evidence="0.5x")


def test_claim_failed_is_an_assertion_error():
    assert issubclass(ClaimFailed, AssertionError)


def test_false_claim_inside_a_section_makes_it_failed():
    with section("6. Claims"):
        claim(0, "speedup above 1")
    rec = only_record()
    assert rec.status == FAILED
    assert rec.reason == "ClaimFailed: claim no longer holds: speedup above 1"


# --------------------------------------------------------------------------
# first_line
# --------------------------------------------------------------------------


def test_first_line_keeps_a_short_first_line_whole():
    assert first_line("  ValueError: bad value\nsecond line") == "ValueError: bad value"


def test_first_line_cuts_a_long_line_at_a_word_boundary_with_an_ellipsis():
    text = " ".join(f"word{i:03d}" for i in range(100))  # 799 characters
    cut = first_line(text, limit=50)
    assert len(cut) <= 50 and cut.endswith("...")
    kept = cut[:-3].split(" ")
    assert kept == text.split(" ")[: len(kept)]  # whole words only
    assert len(kept) == 6  # as many as fit: 6 * 7 characters + 5 spaces + "..." = 50


def test_first_line_never_cuts_a_single_long_word():
    path = "/very/long/" + "x" * 300
    assert first_line(path, limit=50) == path


def test_failed_reason_from_a_long_message_ends_on_a_whole_word():
    with section("3. Breaks"):
        raise RuntimeError("boom " + "detail " * 60)
    reason = only_record().reason
    assert reason.endswith("detail...") and len(reason) <= len("RuntimeError: ") + 200


def test_needs_gives_back_a_result_an_earlier_section_made():
    assert sections.needs("a table", section="2") == "a table"


def test_a_section_after_a_skipped_one_skips_with_that_sections_reason_remedy_and_need():
    with section("1. Needs a GPU"):
        raise Skip("NVML sees no GPU", "run on a machine with an NVIDIA GPU", needs=("gpu", "profiler"))
    with section("2. Uses section 1") as s:
        sections.needs(None, section="1", need="ncu-cli")
    record = sections.records()[-1]
    assert s.status == SKIPPED and record.needs == "gpu"  # counted under the earlier section's need
    assert record.reason == "needs section 1's result; section 1: SKIPPED, NVML sees no GPU"
    assert record.remedy == "run on a machine with an NVIDIA GPU"


def test_a_section_whose_earlier_one_has_not_run_says_to_run_it_first():
    with section("4. Plot") as s:
        sections.needs(None, section="3", need="ncu-cli")
    record = sections.records()[-1]
    assert s.status == SKIPPED and record.needs == "ncu-cli"
    assert (record.reason, record.remedy) == ("needs section 3's result; section 3 has not run", "run section 3 first")
