"""The ``nspy-tutorial`` command line: its signal handling comes before the heavy imports.

The console script's entry point is :func:`main`. ``nspy-tutorial run`` needs nbformat,
nbclient, zmq and traitlets (:mod:`nspy_tutorial.runner`), whose imports take from a quarter
of a second to two seconds (once jupyterlab is installed, ``import nbformat`` alone takes
that long). This module imports only the standard library before it installs its handlers,
so Ctrl-C or SIGTERM at any moment of the start-up ends as it does mid-run: one line
``interrupted (SIGINT)`` on stderr, exit 130 (SIGTERM: 143), ``--out`` left as it was, and no
traceback. While the notebooks run, the runner's own handler (``runner.Stop``) takes over.

``--help`` is answered here too, without the heavy imports: it lists the exit codes and the
``NSPY_TUTORIAL_*`` variables, from the constants the code itself uses.
"""

from __future__ import annotations

import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived while the runner's own handler was not installed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class RunnerError(Exception):
    """A problem with the command line or the folders, reported without a traceback."""


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def exit_code(signum: int) -> int:
    """The shell's convention for a run stopped by a signal: 128 + its number."""
    return 128 + signum


def interrupted(signum: int, out: object | None) -> int:
    """Say so in one line; return the exit code (130 SIGINT, 143 SIGTERM)."""
    kept = f"; {out} left as it was" if out is not None else ""
    print(f"interrupted ({signal.Signals(signum).name}){kept}", file=sys.stderr, flush=True)
    return exit_code(signum)


def exit_codes() -> list[tuple[int, str]]:
    """The exit codes of ``nspy-tutorial run`` and what each means."""
    return [
        (EXIT_OK, "every notebook ran without a FAILED section (SKIPPED sections are fine)"),
        (EXIT_FAILED, "a notebook FAILED: a FAILED section, a cell error or --timeout, an unreadable "
                      "notebook; the other notebooks keep their results"),
        (EXIT_USAGE, "usage error: a bad option or folder, or an NSPY_TUTORIAL_* value it does not accept"),
        (exit_code(signal.SIGINT), "Ctrl-C (SIGINT): the running kernel is stopped, --out is left as it was"),
        (exit_code(signal.SIGTERM), "SIGTERM: the same"),
    ]


def variables() -> list[tuple[str, str]]:
    """The ``NSPY_TUTORIAL_*`` variables: (name=value, what it does), from the modules that read them."""
    from nspy_tutorial import bootstrap, ncu_cli, sections, workdir  # only for --help

    needs = ", ".join((*sections.NEEDS, "cc<major>.<minor>"))
    return [
        (f"{sections.STRICT_VAR}=1", "a FAILED section re-raises, so the notebook stops there "
                                     "(on: 1, true, yes, on; off: 0, false, no, off, empty)"),
        (f"{sections.REQUIRE_VAR}=NEED,...", "a section that lacks one of these needs is FAILED, not SKIPPED, "
                                             f"whatever it lacked first; needs: {needs} (e.g. cc8.0)"),
        (f"{bootstrap.BACKEND_VAR}={'|'.join(bootstrap.BACKEND_CHOICES)}",
         "do not load Nsight Compute; use the CUPTI backend (unset: Nsight Compute if it loads, else CUPTI)"),
        (f"{ncu_cli.KEEP_VAR}=DIR", "keep each table read from the ncu command line as DIR/<notebook>--<report>.json "
                                    "(the tests' fixtures)"),
        (f"{sections.RESULTS_VAR}=FILE", "where sections append their JSON records; set by the runner, "
                                         "one file per notebook"),
        (f"{workdir.WORKDIR_VAR}=DIR", f"every notebook writes only under DIR/<notebook> (default "
                                       f"./{workdir.DEFAULT_ROOT}/<notebook>); the runner sets a scratch "
                                       "folder and removes it"),
    ]


def _listing(title: str, rows: list[tuple[object, str]]) -> str:
    import textwrap

    width = max(len(str(key)) for key, _ in rows)
    lines = [f"{title}:"]
    for key, text in rows:
        body = textwrap.wrap(text, 100 - width - 4) or [""]
        lines.append(f"  {str(key):<{width}}  {body[0]}")
        lines += [f"  {'':<{width}}  {more}" for more in body[1:]]
    return "\n".join(lines)


def run_epilog() -> str:
    """The end of ``nspy-tutorial run --help``: exit codes and environment variables."""
    return "\n\n".join([
        _listing("exit codes", exit_codes()),
        _listing("environment variables", variables()),
    ])


def build_parser():  # -> argparse.ArgumentParser (imported here, after the handlers)
    """The command line: one ``run`` subcommand."""
    import argparse
    from pathlib import Path

    class RunParser(argparse.ArgumentParser):
        def format_help(self) -> str:
            self.epilog = run_epilog()  # imports the modules whose constants it lists
            return super().format_help()

    def positive_seconds(text: str) -> int:
        """argparse type for --timeout: a whole number of seconds above zero."""
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(
                f"must be a whole number of seconds above 0, got {text!r} (for a long cell, give a large value)"
            )
        return value

    parser = argparse.ArgumentParser(
        prog="nspy-tutorial", description="Run the nspy-tutorial notebooks and write a results card."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=RunParser)
    run_parser = commands.add_parser(
        "run", help="execute the notebooks headless",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Execute the NN_*.ipynb notebooks in order, each in its own kernel, and write\n"
                    "<out>/results.md, <out>/results.json and executed copies in <out>/notebooks/.",
    )
    add = run_parser.add_argument
    add("--notebooks-dir", type=Path, default=Path("notebooks"),
        help="folder holding NN_*.ipynb (default: notebooks, in a clone of the repository)")
    add("--out", type=Path, default=Path("results"),
        help="output folder, replaced at the end of the run (default: results)")
    add("--only", nargs="+", metavar="NN", help="run only these notebook numbers, e.g. --only 02 05")
    add("--timeout", type=positive_seconds, default=1800, help="seconds allowed per cell (default: 1800)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nspy-tutorial`` console script; returns the exit code."""
    previous = {}
    if threading.current_thread() is threading.main_thread():  # where Python delivers signals
        previous = {signum: signal.signal(signum, _raise_interrupted) for signum in SIGNALS}  # before anything slow
    out = None
    try:
        args = build_parser().parse_args(argv)
        out = args.out
        from nspy_tutorial import runner  # nbformat, nbclient, zmq: the slow part of the start

        return runner.run(args.notebooks_dir, args.out, args.only, args.timeout)
    except RunnerError as error:
        print(f"nspy-tutorial: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (Interrupted, KeyboardInterrupt) as stop:
        for signum in previous:  # a second Ctrl-C while saying so changes nothing
            signal.signal(signum, signal.SIG_IGN)
        return interrupted(stop.signum if isinstance(stop, Interrupted) else signal.SIGINT, out)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
