"""``nspy-tutorial run``: one ``pytest --nbmake`` process over copies of the notebooks, with the card plug-in
(:mod:`card`). All lands in a hidden folder inside ``--out``; a complete run then replaces ``results.json``,
``results.md`` and ``notebooks/`` there (``--out`` itself stays: a mount point works); a run of ``--only`` some
notebooks keeps the others' rows and executed copies (:func:`card.merge_cards`). Ctrl-C, SIGTERM or SIGHUP
stops pytest, which stops the kernel; ``--out`` is left as it was."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from nspy_tutorial import card
from nspy_tutorial.bootstrap import backend_choice
from nspy_tutorial.sections import WORKDIR_VAR, check_settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
REPOSITORY = "https://github.com/nspy-tutorial/nspy-tutorial"  # scripts/build_notebooks.py REPO
CLONE_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"  # in a clone (an editable install)
NOTEBOOK_NAME = re.compile(r"^(\d+)_.+\.ipynb$")
PARTIAL = ".nspy-partial-"  # the hidden folder inside --out that a run writes into
STOP_GRACE_SECONDS = 15  # how long a stopped pytest may take to stop its kernel


class RunnerError(Exception):
    """A problem with the command line or the folders, reported in one line (exit 2)."""


def find_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """The ``NN_*.ipynb`` notebooks in numeric order; ``only`` keeps some numbers ("2", "02")."""
    if not notebooks_dir.is_dir():
        raise RunnerError(
            f"notebooks folder not found: {notebooks_dir}. The notebooks live in the repository, not in the "
            f"installed package: git clone {REPOSITORY}, pip install -e the clone, or pass --notebooks-dir "
            "<clone>/notebooks")
    found = {path: int(NOTEBOOK_NAME.match(path.name)[1]) for path in notebooks_dir.iterdir()
             if NOTEBOOK_NAME.match(path.name)}
    if not found:
        raise RunnerError(f"no NN_*.ipynb notebooks in {notebooks_dir}")
    notebooks = sorted(found, key=lambda path: (found[path], path.name))
    unknown = [value for value in only or [] if not (value.isdigit() and int(value) in found.values())]
    if unknown:
        names = ", ".join(path.name.split("_", 1)[0] for path in notebooks)
        raise RunnerError(f"--only {' '.join(unknown)}: no such notebook number; available: {names}")
    return [path for path in notebooks if not only or found[path] in {int(value) for value in only}]


def prepare_out(out: Path) -> Path:
    """Make ``out`` (missing, or a previous results folder) and in it the hidden folder the run writes into."""
    if out.exists() and not out.is_dir():
        raise RunnerError(f"--out {out} is a file, not a folder: pass --out a folder (missing, or a results folder)")
    others = [p for p in out.iterdir() if not p.name.startswith(PARTIAL)] if out.is_dir() else []
    if others and not (out / "results.json").exists():  # (a killed run's hidden folder does not count)
        raise RunnerError(f"--out {out} exists and does not look like a results folder (no results.json); "
                          "refusing to replace it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=PARTIAL, dir=out))
    except OSError as error:
        raise RunnerError(f"--out {out}: cannot write there ({error.strerror or error}); "
                          "pass --out a folder you can write to") from None


def run_pytest(notebooks: list[Path], staging: Path, scratch: Path, timeout: int) -> int:
    """pytest, nbmake and the card plug-in alone, in a session of its own, on copies of the notebooks; echo its
    progress lines. On Ctrl-C/SIGTERM send it SIGINT, which stops its kernel, and kill it after
    :data:`STOP_GRACE_SECONDS` (the kernel, losing its parent, exits)."""
    (staging / "notebooks").mkdir()
    copies = [str(shutil.copy(path, staging / "notebooks")) for path in notebooks]
    (scratch / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    env = {**os.environ, WORKDIR_VAR: str(scratch / "work"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    read_fd, write_fd = os.pipe()
    command = [sys.executable, "-m", "pytest", "-c", str(scratch / "pytest.ini"), "-p", "nbmake.pytest_plugin",
               "-p", "nspy_tutorial.card", "-p", "no:cacheprovider", "--noconftest", "-q", "--nbmake", "--overwrite",
               f"--nbmake-timeout={timeout}", f"--nspy-card={staging}", f"--nspy-progress-fd={write_fd}", *copies]
    with open(scratch / "log", "wb") as output:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                   pass_fds=(write_fd,), start_new_session=True)
    os.close(write_fd)
    try:
        with open(read_fd, encoding="utf-8") as progress:
            for line in progress:
                print(line, end="", flush=True)
        return process.wait()
    except KeyboardInterrupt:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C changes nothing now
            signal.signal(signum, signal.SIG_IGN)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise


def earlier_card(out: Path) -> dict | None:
    """The card an earlier run left in ``out`` (None if none), which a run of ``--only`` some notebooks merges into."""
    try:
        earlier = json.loads((out / "results.json").read_text(encoding="utf-8"))
        return earlier if [e["notebook"] for e in earlier["notebooks"]] and earlier["started_at"] else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError, LookupError, TypeError) as error:
        raise RunnerError(f"--out {out}: its results.json is not a card this command wrote ({type(error).__name__}: "
                          f"{error}), so --only cannot keep the other notebooks' results: pass another --out") from None


def run(notebooks_dir: Path | None, out: Path, only: list[str] | None, timeout: int) -> int:
    """Run the notebooks (default: the clone's), publish the card in ``out``; return the exit code (this run's)."""
    check_settings()
    backend_choice()
    notebooks = find_notebooks(notebooks_dir or CLONE_NOTEBOOKS, only)
    out = out.absolute()
    missing = [path for path in (out, *out.parents) if not path.exists()]  # what the run creates
    staging, published = None, False
    try:
        staging = prepare_out(out)
        earlier = earlier_card(out) if only else None
        with tempfile.TemporaryDirectory(prefix="nspy-run-") as scratch:
            code = run_pytest(notebooks, staging, Path(scratch), timeout)
            if not (staging / "results.json").exists():
                log = (Path(scratch) / "log").read_text(encoding="utf-8", errors="replace").strip()
                print(f"nspy-tutorial: pytest wrote no results card (exit {code}); {out} left as it was. "
                      f"Its output:\n{log}", file=sys.stderr)
                return EXIT_FAILED
        ran = json.loads((staging / "results.json").read_text(encoding="utf-8"))
        if earlier is not None:
            merged = card.merge_cards(earlier, ran)
            for name in {e["notebook"] for e in merged["notebooks"]} - {e["notebook"] for e in ran["notebooks"]}:
                if (out / "notebooks" / f"{name}.ipynb").exists():  # an executed copy this run did not redo
                    shutil.copy2(out / "notebooks" / f"{name}.ipynb", staging / "notebooks")
            (staging / "results.json").write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
            (staging / "results.md").write_text(card.card_markdown(merged), encoding="utf-8")
        for name in ("results.json", "results.md", "notebooks"):  # replaced inside out, which may be a mount point
            if (out / name).is_dir():
                shutil.rmtree(out / name)
            os.replace(staging / name, out / name)  # a file is replaced in one step
        published = True
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if missing and not published:
            shutil.rmtree(missing[-1], ignore_errors=True)
    print(json.loads((out / "results.json").read_text(encoding="utf-8"))["headline"])
    print(f"Results card: {out / 'results.md'} (data: {out / 'results.json'})")
    return EXIT_OK if ran["totals"]["notebooks_failed"] == 0 else EXIT_FAILED
