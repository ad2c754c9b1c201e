"""Specifications for nspy_tutorial.sections.enter_workdir: one folder per notebook for every file it writes."""

import os
import sys
import tempfile

import pytest

from nspy_tutorial import sections as workdir
from nspy_tutorial.sections import SettingError


def test_enter_makes_the_notebooks_folder_under_the_root_variable_and_works_there(tmp_path, monkeypatch):
    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path / "root"))
    path = workdir.enter_workdir("06_roofline")
    assert path == tmp_path / "root" / "06_roofline"
    assert os.getcwd() == str(path)


def test_a_module_written_in_the_folder_imports(tmp_path, monkeypatch):
    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path))
    workdir.enter_workdir("07_kernel_fusion")
    (tmp_path / "07_kernel_fusion" / "fusion_kernels_for_test.py").write_text("ANSWER = 42\n")
    import fusion_kernels_for_test

    assert fusion_kernels_for_test.ANSWER == 42
    del sys.modules["fusion_kernels_for_test"]


def test_temporary_files_go_to_the_folders_tmp_for_this_process_and_its_children(tmp_path, monkeypatch):
    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path))
    path = workdir.enter_workdir("08_collectors_and_thermal")
    made = tempfile.mkdtemp(prefix="nspy_")
    assert os.path.dirname(made) == str(path / "tmp")
    assert os.environ["TMPDIR"] == str(path / "tmp")


def test_without_the_variable_the_root_is_nspy_work_where_the_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(workdir.WORKDIR_VAR)
    monkeypatch.chdir(tmp_path)
    assert workdir.enter_workdir("02_first_profile") == tmp_path / "nspy_work" / "02_first_profile"


def test_the_root_is_fixed_at_first_use_so_entering_again_does_not_nest(tmp_path, monkeypatch):
    monkeypatch.setenv(workdir.WORKDIR_VAR, "relative-root")
    monkeypatch.chdir(tmp_path)
    first = workdir.enter_workdir("03_run_counts")
    assert workdir.enter_workdir("03_run_counts") == first == tmp_path / "relative-root" / "03_run_counts"


def test_a_work_folder_that_cannot_be_made_is_an_error_naming_the_variable(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(workdir.WORKDIR_VAR, str(tmp_path / "a-file"))
    with pytest.raises(SettingError, match=rf"^{workdir.WORKDIR_VAR}='{tmp_path / 'a-file'}': cannot make the work "
                                           rf"folder {tmp_path / 'a-file' / '06_roofline' / 'tmp'} \(.*\); set "
                                           rf"{workdir.WORKDIR_VAR} to a folder you can write to$"):
        workdir.enter_workdir("06_roofline")
