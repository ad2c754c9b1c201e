"""Specifications for reading an ncu report back by NVTX range (ncu_cli.read_report).

No GPU here, so ``ncu_report`` is replaced by a stand-in with the same API shape
(load_report -> ranges -> actions with name, metric_names, metric_by_name, nvtx_state).
"""

import sys
import types

import pytest

from nspy_tutorial import ncu_cli


class Metric:
    def __init__(self, value):
        self._value = value

    def value(self):
        return self._value


class Domain:
    def __init__(self, names):
        self._names = tuple(names)

    def push_pop_ranges(self):
        return self._names


class State:
    def __init__(self, names):
        self._domains = {0: Domain(names), 7: Domain([])}

    def domains(self):
        return tuple(self._domains)

    def domain_by_id(self, i):
        return self._domains[i]


class Action:
    def __init__(self, name, ranges, metrics):
        self._name, self._state, self._metrics = name, State(ranges), metrics

    def name(self):
        return self._name

    def nvtx_state(self):
        return self._state

    def metric_names(self):
        return tuple(self._metrics)

    def metric_by_name(self, m):
        return Metric(self._metrics[m]) if m in self._metrics else None


class Range:
    def __init__(self, actions):
        self._actions = actions

    def num_actions(self):
        return len(self._actions)

    def action_by_idx(self, i):
        return self._actions[i]


class Report:
    def __init__(self, ranges):
        self._ranges = ranges

    def num_ranges(self):
        return len(self._ranges)

    def range_by_idx(self, i):
        return self._ranges[i]


@pytest.fixture
def fake_report(monkeypatch):
    def install(actions_per_range):
        module = types.ModuleType("ncu_report")
        module.load_report = lambda path: Report([Range(a) for a in actions_per_range])
        monkeypatch.setitem(sys.modules, "ncu_report", module)

    return install


def test_read_report_labels_each_launch_with_its_range_in_launch_order(fake_report):
    fake_report([
        [Action("gemm", ["r_matmul"], {"t": 10.0, "b": 1.0}), Action("reduce", ["r_matmul"], {"t": 2.0, "b": 0.5})],
        [Action("elementwise", ["r_scale"], {"t": 5.0, "b": 8.0})],
    ])
    df = ncu_cli.read_report("x.ncu-rep", ["t", "b"], ["r_scale", "r_matmul"])
    assert df["ID"].tolist() == [0, 1, 2]
    assert df["Range"].tolist() == ["r_matmul", "r_matmul", "r_scale"]
    assert df["Kernel Name"].tolist() == ["gemm", "reduce", "elementwise"]
    assert df["t"].tolist() == [10.0, 2.0, 5.0]


def test_read_report_matches_whole_names_not_substrings(fake_report):
    fake_report([[Action("k", ["r_unfused"], {"t": 1.0}), Action("k", ["r_fused"], {"t": 1.0})]])
    df = ncu_cli.read_report("x", ["t"], ["r_fused", "r_unfused"])
    assert df["Range"].tolist() == ["r_unfused", "r_fused"]


def test_read_report_leaves_launches_outside_the_ranges_unlabelled(fake_report):
    fake_report([[Action("k", ["other"], {"t": 1.0}), Action("k", ["r_a"], {"t": 1.0})]])
    ranges = ncu_cli.read_report("x", ["t"], ["r_a"])["Range"]
    assert ranges.isna().tolist() == [True, False] and ranges.iloc[1] == "r_a"


def test_read_report_says_so_when_no_launch_has_nvtx_state(fake_report):
    fake_report([[Action("k", [], {"t": 1.0})]])
    with pytest.raises(ncu_cli.NcuCliError, match="--nvtx"):
        ncu_cli.read_report("x", ["t"], ["r_a"])


def test_read_report_names_a_missing_metric(fake_report):
    fake_report([[Action("k", ["r_a"], {"t": 1.0})]])
    with pytest.raises(ncu_cli.NcuCliError, match=r"no metric \['dram__bytes_read.sum'\]"):
        ncu_cli.read_report("x", ["t", "dram__bytes_read.sum"], ["r_a"])


def test_read_report_refuses_an_empty_report(fake_report):
    fake_report([[]])
    with pytest.raises(ncu_cli.NcuCliError, match="no profiled kernel"):
        ncu_cli.read_report("x", ["t"], ["r_a"])


def test_profile_script_report_runs_ncu_into_the_report_and_reads_it(fake_report, tmp_path, capsys):
    fake_report([[Action("k", ["r_a"], {"t": 3.0})]])
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    report = str(tmp_path / "out.ncu-rep")
    df = ncu_cli.profile_script_report(str(fake), "s.py", ["2"], ["t"], ["r_a"], report, show_command=True)
    printed = capsys.readouterr().out
    assert f"-f -o {report}" in printed and "--csv" not in printed
    assert "--nvtx-include r_a/" in printed and "--metrics t" in printed
    assert df["t"].tolist() == [3.0]
