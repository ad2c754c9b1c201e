"""The ``nspy-tutorial`` command itself (``nspy_tutorial.cli``): signals during start-up, ``--help``.

The start-up tests run the console script as pip's wrapper runs it (the entry point named in
pyproject.toml), in a session of its own, and signal its whole process group the way a
terminal's Ctrl-C does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from nspy_tutorial import bootstrap, cli, sections

ROOT = Path(__file__).resolve().parents[1]


def entry_point() -> tuple[str, str]:
    """(module, function) of the ``nspy-tutorial`` console script in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    match = re.search(r'^nspy-tutorial\s*=\s*"([\w.]+):(\w+)"', scripts, re.MULTILINE)
    assert match, scripts
    return match.group(1), match.group(2)


def console_script(*args: str) -> list[str]:
    """The command line of ``nspy-tutorial ARGS`` as pip's generated wrapper runs it."""
    module, function = entry_point()
    wrapper = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", wrapper, *args]


def default_signals() -> None:
    """In the child: SIGINT and SIGTERM as in a shell's foreground job (pytest may have them ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def caught(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (the SigCgt mask of /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            mask = next(line.split()[1] for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signum - 1) & 1)


def test_the_console_script_starts_in_the_module_that_installs_the_handlers_first():
    assert entry_point() == ("nspy_tutorial.cli", "main")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="signals a process group")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_start_up_is_one_line_and_the_exit_code(tmp_path, signum, code):
    """The signal arrives as soon as the command's handlers are in place (SIGHUP caught, as /proc says),
    long before its pytest could have started: the start-up, whatever the machine's load."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('never')")])
    nbformat.write(notebook, notebooks / "01_a.ipynb")
    out = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        console_script("run", "--notebooks-dir", str(notebooks), "--out", str(out)),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 30
    while not caught(process.pid, cli.STOP_SIGNALS[-1]) and time.monotonic() < deadline:  # the last installed
        time.sleep(0.005)
    os.killpg(process.pid, signum)  # what Ctrl-C does: the whole foreground process group
    output, _ = process.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert process.returncode == code, output
    assert "Traceback" not in output, output
    said = [line for line in output.splitlines() if "interrupted" in line]
    assert said in ([f"interrupted ({name})"], [f"interrupted ({name}); {out} left as it was"]), output  # --out read yet?
    assert output.splitlines()[-1].startswith("interrupted"), output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["notebooks"]


# --------------------------------------------------------------------------
# --help
# --------------------------------------------------------------------------


def run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_run_help_lists_every_exit_code(capsys):
    text = run_help(capsys)
    codes = text.split("exit codes:", 1)[1].split("\n\n", 1)[0]
    listed = [int(line.split()[0]) for line in codes.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert listed == [0, 1, 2, 129, 130, 143]
    assert "SIGINT" in codes and "SIGTERM" in codes and "SIGHUP" in codes and "FAILED" in codes and "usage" in codes


def test_run_help_lists_every_variable_and_every_need_from_the_code(capsys):
    text = " ".join(run_help(capsys).split())  # unwrapped
    for name in (sections.STRICT_VAR, sections.REQUIRE_VAR, sections.RESULTS_VAR, bootstrap.BACKEND_VAR,
                 sections.WORKDIR_VAR):
        assert f"{name}=" in text, name
    needs = text.split(f"{sections.REQUIRE_VAR}=", 1)[1]
    for need in (*sections.NEEDS, "cc<major>.<minor>"):
        assert need in needs, need
    assert "counters" in sections.NEEDS
    assert "cupti" in text.split(f"{bootstrap.BACKEND_VAR}=", 1)[1].split()[0]


def test_help_needs_none_of_the_slow_imports():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    probe = ("import sys\nfrom nspy_tutorial import cli\ntry:\n    cli.main(['run', '--help'])\n"
             "except SystemExit:\n    pass\nprint(sorted(m for m in ('nbformat', 'nbclient', 'zmq') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_command_imports_nothing_of_the_package_before_its_handlers():
    """The signal test's margin: `import nspy_tutorial` (run by the console script first) stays light."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    probe = "import sys; import nspy_tutorial.cli; print(sorted(m for m in sys.modules if m.startswith('nspy_tutorial')))"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["['nspy_tutorial',", "'nspy_tutorial.cli']"], done.stderr


def test_readme_documents_every_variable_the_help_lists(capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^  (NSPY_TUTORIAL_\w+)=", run_help(capsys), re.MULTILINE)
    assert len(listed) == 5, listed
    for name in listed:
        assert f"`{name}" in readme, name
    assert "| `counters` |" in readme
