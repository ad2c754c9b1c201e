"""Specifications for scripts/build_notebooks.py's source format (beyond the in-sync check)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
build_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_notebooks)


def test_a_writefile_cell_becomes_jupyters_writefile_magic_over_plain_python():
    cells = build_notebooks.parse_cells("# %% [markdown]\n# # Title\n# %% writefile fusion_kernels.py\nimport torch\n")
    assert cells == [("markdown", "# Title"), ("code", "%%writefile fusion_kernels.py\nimport torch")]


@pytest.mark.parametrize("marker", ["# %% writefile", "# %% writefile fusion kernels.py", "# %%writefile k.py"])
def test_a_malformed_writefile_marker_is_an_error_naming_the_form(marker):
    with pytest.raises(ValueError, match="use '# %% writefile name.py'"):
        build_notebooks.parse_cells(f"# %% [markdown]\n# # T\n{marker}\nx = 1\n")
