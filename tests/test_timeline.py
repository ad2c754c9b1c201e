"""The timeline readers and capture (``nspy_tutorial.timeline``), and notebook 07's analysis of a timeline.

* Nsight Systems' reader on a real capture: ``tests/fixtures/nsys-colab-t4/`` is the SQLite export (nsys
  2025.3.1, schema 3.20) of a CuPy program profiled on a Colab T4 (BSD-licensed, source in its README). Its kernels,
  CUDA runtime calls, NVTX ranges and the T4's facts from ``TARGET_INFO_GPU`` are read by name; copies with a table
  dropped, with the older ``EXPORT_META_DATA`` name, or with names that are not valid UTF-8 test what the reader
  says of each.
* torch.profiler's reader on a real Kineto trace (``tests/fixtures/timeline/kineto-gelu.json``: torch 2.11 on the
  H200, eager GELU on a small input and a compiled one on a large input).
* Both readers give one schema, so 07's ``per_range`` (GPU busy %, gaps, kernel time against wall time) runs on
  either; its numbers are checked against the captures' own rows.
* ``capture`` with a fake nsys (what it runs, what it keeps), its torch.profiler child on this CPU (no GPU: a
  clear error), and the missing-tool message.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from notebook_code import functions

from nspy_tutorial import backend, timeline
from nspy_tutorial.timeline import TimelineError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NSYS_T4 = FIXTURES / "nsys-colab-t4" / "power_iteration__baseline.sqlite"
KINETO = FIXTURES / "timeline" / "kineto-gelu.json"


@pytest.fixture(scope="module")
def t4() -> timeline.Timeline:
    return timeline.read_nsys(str(NSYS_T4))


@pytest.fixture(scope="module")
def kineto() -> timeline.Timeline:
    return timeline.read_kineto(str(KINETO))


def per_range(tl: timeline.Timeline) -> pd.DataFrame:
    """07's own analysis function, compiled from the notebook source."""
    return functions("07_kernel_fusion", "per_range", np=np, pd=pd, timeline=timeline).per_range(tl)


def raw(query: str, path: Path = NSYS_T4) -> list:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def copy_of_t4(tmp_path: Path, *statements: str) -> str:
    """A copy of the T4 capture with ``statements`` run on it."""
    path = tmp_path / "copy.sqlite"
    shutil.copy(NSYS_T4, path)
    path.chmod(0o644)
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    return str(path)


# --- Nsight Systems' SQLite export, a real Colab T4 capture ---------------------------------------

def test_the_schema_is_the_same_for_both_readers(t4, kineto):
    for tl in (t4, kineto):
        assert [list(tl.kernels), list(tl.calls), list(tl.ranges)] == [
            ["name", "start", "end", "correlation"], ["name", "start", "end", "correlation"], ["name", "start", "end"]]
        assert (tl.kernels.end >= tl.kernels.start).all() and (tl.ranges.end > tl.ranges.start).all()


def test_nsys_kernels_are_every_kernel_row_with_its_demangled_name_in_ns_from_the_first_event(t4):
    assert len(t4.kernels) == 3689 == raw("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    durations = raw("SELECT end - start FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert (t4.kernels.end - t4.kernels.start).sum() == pytest.approx(sum(d for (d,) in durations))
    names = t4.kernels.name.value_counts()
    assert names["cupy_multiply__float64_float64_float64"] == 609
    assert any(name.startswith("void gemv2T_kernel_val<") for name in names.index)  # demangled, templates kept
    first = min(t4.kernels.start.min(), t4.calls.start.min(), t4.ranges.start.min())
    assert first == 0.0


def test_nsys_runtime_calls_lose_their_api_version_suffix_and_keep_the_correlation_to_their_kernel(t4):
    counts = t4.calls.name.value_counts()
    assert len(t4.calls) == 7417
    assert counts["cudaLaunchKernel"] == 1994 and counts["cuLaunchKernel"] == 1695  # cudaLaunchKernel_v7000 in nsys
    launched = t4.calls.merge(t4.kernels, on="correlation", suffixes=("", " k"))
    assert len(launched) == 3689  # every kernel has its launch call
    assert set(launched.name) == {"cudaLaunchKernel", "cuLaunchKernel"}
    assert (launched["start k"] >= launched.start).all()  # a kernel starts after its launch began


def test_nsys_ranges_are_the_nvtx_push_pop_ranges_with_their_registered_names(t4):
    assert len(t4.ranges) == 786  # 787 NVTX events, one of them the CCCL domain's creation (no end)
    assert t4.ranges.name.value_counts()["cub::DeviceReduce::Sum"] == 565
    assert {"Setup", "Loop", "Step 0 to 10", "Compute & Residual 0", "Copy 0", "IO 0"} <= set(t4.ranges.name)


def test_nsys_gives_the_t4s_facts_and_its_own_version(t4):
    assert t4.tool == "Nsight Systems 2025.3.1.90"
    assert t4.gpu == {"name": "Tesla T4", "sms": 40, "l2_bytes": 4 << 20, "bandwidth_bytes_per_s": 320_064_000_000,
                      "clock_hz": 1_590_000_000, "cc_major": 7, "cc_minor": 5}


def test_the_gpu_busy_share_and_gaps_of_a_range_come_from_its_own_kernels(t4):
    table = per_range(t4)
    row = table.loc["Compute 0"]
    r = t4.ranges[t4.ranges.name == "Compute 0"].iloc[0]
    launched = t4.calls.merge(t4.kernels, on="correlation", suffixes=("", " k"))
    inside = launched[(launched.start >= r.start) & (launched.start < r.end)].sort_values("start k")
    assert row.kernels == len(inside) == 63
    assert row["wall us"] == pytest.approx((r.end - r.start) / 1e3)
    # one stream: kernels do not overlap, so busy = the kernels' time inside the range
    assert (inside["start k"].iloc[1:].to_numpy() >= inside["end k"].iloc[:-1].to_numpy()).all()
    clipped = inside["end k"].clip(upper=r.end) - inside["start k"].clip(upper=r.end)
    assert row["GPU busy %"] == pytest.approx(100 * clipped.sum() / (r.end - r.start))
    # the summed kernel time runs past the range: launched inside it, they ran after its CPU side ended
    assert row["kernel sum us"] > row["wall us"] and row["GPU busy %"] < 100
    gaps = inside["start k"].iloc[1:].to_numpy() - inside["end k"].iloc[:-1].to_numpy()
    assert row["median gap us"] == pytest.approx(np.median(gaps) / 1e3)


def test_a_range_whose_kernels_all_run_after_it_ended_shows_an_idle_gpu(t4):
    reductions = per_range(t4).loc["cub::DeviceReduce::Sum"]
    assert (reductions.kernels == 2).all() and (reductions["GPU busy %"] == 0).all()


def made(kernels: list, calls: list, ranges: list) -> timeline.Timeline:
    """A timeline from rows (ns), in the readers' schema."""
    frames = {kind: pd.DataFrame(rows, columns=timeline.COLUMNS[kind])
              for kind, rows in (("kernels", kernels), ("calls", calls), ("ranges", ranges))}
    return timeline.Timeline("made by hand", "none", gpu={}, **frames)


def test_overlapping_kernels_count_once_toward_busy():
    tl = made([("a", 10.0, 50.0, 1), ("b", 30.0, 60.0, 2), ("c", 80.0, 90.0, 3)],
              [("cudaLaunchKernel", 0.0, 5.0, 1), ("cudaLaunchKernel", 5.0, 8.0, 2), ("cudaLaunchKernel", 9.0, 12.0, 3)],
              [("r", 0.0, 100.0)])
    row = per_range(tl).loc["r"]
    assert row["GPU busy %"] == pytest.approx(60.0)  # [10, 60] and [80, 90]
    assert row["kernel sum us"] == pytest.approx(0.08)  # the sum counts the overlap twice
    assert row["median gap us"] == pytest.approx(0.01)  # 60 -> 80; b starts inside a: no gap
    assert row["us per launch"] == pytest.approx(11 / 3 / 1e3)


@pytest.mark.parametrize("table", list(timeline.NSYS_TABLES))
def test_a_missing_table_is_an_error_that_says_what_it_means(tmp_path, table):
    path = copy_of_t4(tmp_path, f"DROP TABLE {table}")
    with pytest.raises(TimelineError, match=rf"has no table {table}: ") as error:
        timeline.read_nsys(path)
    assert timeline.NSYS_TABLES[table] in str(error.value) and "2025.3.1.90" in str(error.value)


def test_an_empty_kernel_table_says_no_kernel_was_traced(tmp_path):
    path = copy_of_t4(tmp_path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(TimelineError, match="no GPU kernel was traced"):
        timeline.read_nsys(path)


def test_the_older_metadata_table_name_still_gives_the_version(tmp_path):
    path = copy_of_t4(tmp_path, "ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    assert timeline.read_nsys(path).tool == "Nsight Systems 2025.3.1.90"


def test_no_metadata_table_at_all_reads_as_an_unknown_version(tmp_path):
    assert timeline.read_nsys(copy_of_t4(tmp_path, "DROP TABLE META_DATA_EXPORT")).tool == "Nsight Systems unknown"


def test_a_missing_column_names_the_column_and_the_schema_this_reader_knows(tmp_path):
    path = copy_of_t4(tmp_path, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN demangledName TO kernelName")
    with pytest.raises(TimelineError, match=r"demangledName.*nsys 2025\.3.s schema"):
        timeline.read_nsys(path)


def test_names_that_are_not_valid_utf8_are_read_with_a_replacement_character(tmp_path):
    """The copied capture is all ASCII (its README); real exports may hold other bytes: they must not stop reading."""
    kernel_name = raw("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1")[0][0]
    path = copy_of_t4(tmp_path, f"UPDATE StringIds SET value = CAST(X'6B65726E656CFF5F31' AS TEXT) WHERE id = {kernel_name}")
    with pytest.raises(sqlite3.OperationalError, match="Could not decode to UTF-8"):  # sqlite3's default
        with sqlite3.connect(path) as db:
            db.execute("SELECT value FROM StringIds").fetchall()
    assert "kernel\ufffd_1" in set(timeline.read_nsys(path).kernels.name)


def test_a_file_that_is_not_sqlite_is_a_timeline_error(tmp_path):
    (tmp_path / "x.sqlite").write_text("not a database")
    with pytest.raises(TimelineError, match="file is not a database"):
        timeline.read_nsys(str(tmp_path / "x.sqlite"))


# --- torch.profiler's Kineto trace, real, from the H200 -------------------------------------------

def test_kineto_kernels_calls_and_ranges_in_ns(kineto):
    trace = json.loads(KINETO.read_text())["traceEvents"]
    kernels = [e for e in trace if e.get("cat") == "kernel"]
    assert len(kineto.kernels) == 30 and len(kineto.ranges) == 6
    durations = (kineto.kernels.end - kineto.kernels.start).to_numpy()
    assert durations == pytest.approx([1e3 * e["dur"] for e in kernels], abs=1)  # 1 ns: the trace's precision
    assert set(kineto.calls.name) == {"cudaLaunchKernel", "cuLaunchKernel", "cudaDeviceSynchronize"}
    assert kineto.tool == "torch.profiler (Kineto)" and kineto.gpu == {"name": "NVIDIA H200", "sms": 132}


def test_kineto_launches_carry_their_kernels_correlation(kineto):
    launched = kineto.calls.merge(kineto.kernels, on="correlation", suffixes=("", " k"))
    assert len(launched) == 30 and set(launched.name) == {"cudaLaunchKernel", "cuLaunchKernel"}
    assert launched[launched.name == "cuLaunchKernel"]["name k"].str.startswith("triton_").all()  # Triton's own


def test_per_range_on_the_kineto_trace_eager_small_is_launch_bound(kineto):
    table = per_range(kineto)
    eager = table.loc["eager gelu, small"]
    assert (eager.kernels == 9).all()
    assert (eager["GPU busy %"] < 5).all()  # ~1 us kernels, launches of several us each
    assert (eager["us per launch"] > 5 * eager["kernel sum us"] / 9).all()
    assert (eager["wall us"] > 20 * eager["kernel sum us"]).all()  # what a summed region time hides
    compiled = table.loc["compiled gelu, large"]
    assert (compiled.kernels == 1).all() and (compiled["median gap us"].isna()).all()


def test_a_trace_without_gpu_kernels_says_why(tmp_path):
    trace = json.loads(KINETO.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "kernel"]
    (tmp_path / "t.json").write_text(json.dumps(trace))
    with pytest.raises(TimelineError, match="no GPU kernel: torch.profiler recorded no CUDA activity"):
        timeline.read_kineto(str(tmp_path / "t.json"))


def test_a_trace_without_ranges_says_so(tmp_path):
    trace = json.loads(KINETO.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "user_annotation"]
    (tmp_path / "t.json").write_text(json.dumps(trace))
    with pytest.raises(TimelineError, match="no record_function range"):
        timeline.read_kineto(str(tmp_path / "t.json"))


# --- capture: the commands, the files kept, the child ------------------------------------------------

FAKE_NSYS = """#!/bin/sh
echo "$@" >> calls.txt
case "$1" in
  --version) echo "NVIDIA Nsight Systems version 2026.1.3.425-261338342291v0" ;;
  profile) touch "$6.nsys-rep"; echo "** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):" ;;
  export) cp "{fixture}" "$7" ;;
esac
"""


def test_capture_with_nsys_runs_the_seeds_command_then_exports_and_reads_sqlite(tmp_path, monkeypatch, capsys):
    nsys = tmp_path / "nsys"
    nsys.write_text(FAKE_NSYS.format(fixture=NSYS_T4))
    nsys.chmod(0o755)
    (tmp_path / "kernels.py").write_text("")
    monkeypatch.chdir(tmp_path)
    tl = timeline.capture("kernels.py", "trace", [(16, 4096)], nsys=str(nsys))
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert calls[0] == (f"profile --trace=cuda,nvtx,osrt --stats=true --force-overwrite=true -o trace-timeline "
                        f"{sys.executable} kernels.py trace [[16,4096]] 1")
    assert calls[1] == "export --type sqlite --force-overwrite true -o trace-timeline.sqlite trace-timeline.nsys-rep"
    assert tl.tool == "Nsight Systems 2026.1.3.425-261338342291v0" and tl.path == "trace-timeline.nsys-rep"
    assert len(tl.kernels) == 3689
    assert "cuda_gpu_kern_sum" in (tmp_path / "trace-timeline-stats.txt").read_text()
    assert [p.name for p in timeline.captures(tmp_path)] == [
        "trace-timeline-stats.txt", "trace-timeline.nsys-rep", "trace-timeline.sqlite"]
    printed = capsys.readouterr().out
    assert "$ " + str(nsys) + " profile --trace=cuda,nvtx,osrt" in printed
    assert all(len(line) <= 120 for line in printed.splitlines())


def test_capture_of_a_module_that_is_not_there_says_to_run_its_cell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TimelineError, match="run its %%writefile cell first"):
        timeline.capture("kernels.py", "trace", [(1,)], nsys=None)


def test_a_failing_nsys_is_a_timeline_error_with_its_last_lines(tmp_path, monkeypatch):
    nsys = tmp_path / "nsys"
    nsys.write_text("#!/bin/sh\necho 'Unable to profile: no CUDA driver'\nexit 1\n")
    nsys.chmod(0o755)
    (tmp_path / "kernels.py").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TimelineError, match="nsys exited 1:\nUnable to profile"):
        timeline.capture("kernels.py", "trace", [(1,)], nsys=str(nsys))


def test_the_torch_profiler_child_runs_the_module_and_on_a_machine_without_a_gpu_says_so(tmp_path, monkeypatch):
    (tmp_path / "kernels.py").write_text(
        "import torch\nCALLED = []\n\ndef work(n):\n    with torch.profiler.record_function('r'):\n"
        "        torch.ones(n).sum()\n    open('called.txt', 'a').write(f'{n}\\n')\n")
    monkeypatch.chdir(tmp_path)
    if shutil.which("nvidia-smi"):
        pytest.skip("this test is for a machine without a GPU")
    with pytest.raises(TimelineError, match="no GPU kernel"):
        timeline.capture("kernels.py", "work", [(8,)], nsys=None, runs=2)
    assert (tmp_path / "called.txt").read_text().split() == ["8", "8", "8"]  # a warm-up, then 2 runs traced
    trace = json.loads((tmp_path / "work-timeline.json").read_text())
    assert [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"] == ["r", "r"]


# --- finding nsys, and what to say without it ----------------------------------------------------------

def fake_nsys(folder: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "nsys"
    path.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0'\n")
    path.chmod(0o755)
    return path


def test_find_nsys_takes_path_first_then_the_newest_versioned_folder(tmp_path, monkeypatch):
    old, new = fake_nsys(tmp_path / "2025.3.1" / "bin"), fake_nsys(tmp_path / "2026.1.3" / "bin")
    monkeypatch.setattr(backend, "NSYS_PLACES", (str(tmp_path / "*" / "bin" / "nsys"),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert backend.find_nsys() == str(new)
    monkeypatch.setenv("PATH", str(old.parent))
    assert backend.find_nsys() == str(old)
    monkeypatch.setattr(backend, "NSYS_PLACES", ())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert backend.find_nsys() is None


def test_nsys_version_reads_its_version_line(tmp_path):
    assert backend.nsys_version(str(fake_nsys(tmp_path / "bin"))) == "2025.3.1.90-253135822126v0"
    assert backend.nsys_version(str(tmp_path / "missing")) == "unknown"


@pytest.mark.parametrize("colab, says", [
    (True, "on Colab: apt-get install -y nsight-systems-2026.1.3"),
    (False, "NVIDIA's installers at https://developer.nvidia.com/nsight-systems/get-started"),
])
def test_without_nsys_the_message_names_who_draws_instead_and_how_to_install(colab, says):
    text = backend.nsys_missing(colab)
    assert "torch.profiler draws the timeline instead" in text and says in text
    assert all(len(line) <= 120 for line in text.splitlines())


def test_the_install_is_apt_update_then_the_pinned_package_non_interactive_shown_as_it_comes(monkeypatch):
    from nspy_tutorial import bootstrap

    ran = []
    monkeypatch.setattr(bootstrap, "install_on_colab", lambda what, cmd, size: ran.append(cmd) or None)
    assert bootstrap.install_nsys() is None
    assert [cmd[-1] for cmd in ran] == ["update", "nsight-systems-2026.1.3"]
    assert all(cmd[:3] == ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"] and "-y" in cmd for cmd in ran)


def test_a_failed_apt_step_stops_the_install_and_says_why(monkeypatch):
    from nspy_tutorial import bootstrap

    monkeypatch.setattr(bootstrap, "install_on_colab", lambda what, cmd, size: f"the install of {what} exited 100")
    assert bootstrap.install_nsys() == "the install of apt's package lists exited 100"
