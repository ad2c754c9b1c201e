"""10 §2a reads nsight-python's own report, which only the Nsight Compute backend writes: its need is `ncu`.

So ``NSPY_TUTORIAL_REQUIRE=ncu`` must fail it also on a machine without a GPU, where it lacks the
GPU first (README, "What each section needs"). The section's own code runs here, up to its skip.
"""

from __future__ import annotations

import ast

import pytest
from notebook_code import source

import nspy_tutorial as nt
from nspy_tutorial import sections
from nspy_tutorial.bootstrap import Environment

SECTION = "2a. nsight-python's own report (Nsight Compute backend)"


def run_section_without_gpu() -> sections.SectionRecord:
    """Execute 10 §2a's ``with nt.section(...)`` block with an environment that has no GPU and no backend."""
    tree = ast.parse(source("10_keeping_the_evidence").replace("{{SETUP}}", "pass"))
    (block,) = [node for node in tree.body if isinstance(node, ast.With) and SECTION in ast.unparse(node.items[0])]
    env = Environment(notebook="10_keeping_the_evidence", on_colab=False, gpu_name=None, gpu_problem="no NVIDIA GPU",
                      driver=None, ncu_path=None, ncu_version=None, backend=None, backend_reason="no GPU",
                      ncu_problem="no GPU", cupti_problem="no GPU")
    sections._RECORDS.clear()
    exec(compile(ast.Module(body=[block], type_ignores=[]), "10_keeping_the_evidence.py", "exec"),
         {"nt": nt, "ENV": env})
    (record,) = sections.records()
    return record


@pytest.mark.parametrize(("required", "status"), [("", "SKIPPED"), ("ncu", "FAILED")])
def test_without_a_gpu_2a_skips_unless_ncu_is_required(monkeypatch, required, status):
    monkeypatch.setenv(sections.STRICT_VAR, "0")
    monkeypatch.setenv(sections.REQUIRE_VAR, required)
    monkeypatch.delenv(sections.RESULTS_VAR, raising=False)
    record = run_section_without_gpu()
    assert (record.status, record.needs) == (status, "gpu")
