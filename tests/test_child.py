"""Specifications for nspy_tutorial.ncu_cli.run_json (a script in a fresh process, one JSON result back)."""

import pytest

from nspy_tutorial import ncu_cli as child


def write(folder, name: str, source: str) -> str:
    (folder / name).write_text(source)
    return str(folder / name)


def test_run_json_takes_the_last_marked_line_among_other_output(tmp_path):
    lines = ["==PROF== Connected", 'NSPY_RESULT {"a": 1}', '"ID","x"', 'NSPY_RESULT {"a": 2}', "==PROF== done"]
    script = write(tmp_path, "noisy.py", "".join(f"print({line!r})\n" for line in lines))
    assert child.run_json(script) == {"a": 2}


def test_run_json_reports_a_result_line_that_is_not_json(tmp_path):
    script = write(tmp_path, "broken.py", "print('NSPY_RESULT {oops')\n")
    with pytest.raises(child.ChildError, match=r"not JSON[\s\S]*NSPY_RESULT \{oops"):
        child.run_json(script)


def test_run_json_returns_the_result(tmp_path):
    script = write(tmp_path, "ok.py",
                   "import json, sys\nprint('noise')\nprint('NSPY_RESULT ' + json.dumps({'args': sys.argv[1:]}))\n")
    assert child.run_json(script, ["7", "x"]) == {"args": ["7", "x"]}


def test_run_json_passes_extra_variables_and_drops_the_injection_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/x/libcupti.so")
    script = write(tmp_path, "env.py",
                   "import json, os\nprint('NSPY_RESULT ' + json.dumps({'inj': os.environ.get('NVTX_INJECTION64_PATH'),"
                   " 'flag': os.environ.get('NSPY_NCU_INIT_AT_IMPORT')}))\n")
    assert child.run_json(script, env={"NSPY_NCU_INIT_AT_IMPORT": "0"}) == {"inj": None, "flag": "0"}


def test_run_json_reports_a_failing_child_with_its_last_lines(tmp_path):
    script = write(tmp_path, "bad.py", "import sys\nprint('about to fail')\nsys.exit(3)\n")
    with pytest.raises(child.ChildError, match=r"exited 3[\s\S]*about to fail"):
        child.run_json(script)


def test_run_json_reports_a_child_that_printed_no_result(tmp_path):
    script = write(tmp_path, "silent.py", "print('forgot the result')\n")
    with pytest.raises(child.ChildError, match=r"no line starting[\s\S]*forgot the result"):
        child.run_json(script)


def test_run_json_stops_a_child_that_runs_too_long(tmp_path):
    script = write(tmp_path, "slow.py", "import time\ntime.sleep(30)\n")
    with pytest.raises(child.ChildError, match="longer than 1 s"):
        child.run_json(script, timeout=1)
