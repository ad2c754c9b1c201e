"""The ``nspy-tutorial`` command line; :func:`main` installs the signal handling first: Ctrl-C or SIGTERM at
any moment prints one line ``interrupted (SIGINT)``, exits 130 (SIGTERM: 143), leaves ``--out`` as it was.
"""

import signal
import sys
import threading


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: the run stops as after Ctrl-C, and says which signal it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def variables() -> list[tuple[str, str]]:
    """The ``NSPY_TUTORIAL_*`` variables: (name=value, what it does), from the modules that read them."""
    from nspy_tutorial import bootstrap, sections

    needs = ", ".join((*sections.NEEDS, "cc<major>.<minor>"))
    return [
        (f"{sections.STRICT_VAR}=1", "a FAILED section re-raises, so the notebook stops there "
                                     "(on: 1, true, yes, on; off: 0, false, no, off, empty)"),
        (f"{sections.REQUIRE_VAR}=NEED,...", "a section that lacks one of these needs is FAILED, not SKIPPED, "
                                             f"whatever it lacked first; needs: {needs} (e.g. cc8.0)"),
        (f"{bootstrap.BACKEND_VAR}={'|'.join(bootstrap.BACKEND_CHOICES)}",
         "do not load Nsight Compute; use the CUPTI backend (unset: Nsight Compute if it loads, else CUPTI)"),
        (f"{sections.RESULTS_VAR}=FILE", "where sections append their JSON records; the run sets it, one per notebook"),
        (f"{sections.WORKDIR_VAR}=DIR", f"every notebook writes only under DIR/<notebook> (default ./"
                                       f"{sections.DEFAULT_ROOT}/<notebook>); the run sets a scratch folder it removes"),
    ]


def build_parser():  # -> argparse.ArgumentParser (imported here: the signal handlers come first)
    """The command line: one ``run`` subcommand; its --help ends with the exit codes and variables."""
    import argparse
    import textwrap
    from pathlib import Path

    def listing(title: str, rows: list[tuple[object, str]]) -> str:
        width = max(len(str(key)) for key, _ in rows)
        return "\n".join([f"{title}:", *(textwrap.fill(text, 100, initial_indent=f"  {str(key):<{width}}  ",
                                                       subsequent_indent=" " * (width + 4)) for key, text in rows)])

    class RunParser(argparse.ArgumentParser):
        def format_help(self) -> str:
            from nspy_tutorial.runner import EXIT_FAILED, EXIT_OK, EXIT_USAGE

            exit_codes = [
                (EXIT_OK, "every notebook ran without a FAILED section (SKIPPED sections are fine)"),
                (EXIT_FAILED, "a notebook FAILED: a FAILED section, a cell error or --timeout, an unreadable "
                              "notebook; the other notebooks keep their results"),
                (EXIT_USAGE, "usage error: a bad option or folder, or an NSPY_TUTORIAL_* value it does not accept"),
                (128 + signal.SIGINT, "Ctrl-C (SIGINT): the running kernel is stopped, --out is left as it was"),
                (128 + signal.SIGTERM, "SIGTERM: the same"),
            ]
            self.epilog = listing("exit codes", exit_codes) + "\n\n" + listing("environment variables", variables())
            return super().format_help()

    def positive_seconds(text: str) -> int:
        if not (text.isdigit() and int(text) > 0):
            raise argparse.ArgumentTypeError(
                f"must be a whole number of seconds above 0, got {text!r} (for a long cell, give a large value)")
        return int(text)

    parser = argparse.ArgumentParser(prog="nspy-tutorial", description="Run the nspy-tutorial notebooks, write a card.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=RunParser)
    run_parser = commands.add_parser(
        "run", help="execute the notebooks headless", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Execute the NN_*.ipynb notebooks in order with pytest and nbmake, each in its own kernel,\n"
                    "and write <out>/results.md, <out>/results.json and executed copies in <out>/notebooks/.")
    add = run_parser.add_argument
    add("--notebooks-dir", type=Path,
        help="folder holding NN_*.ipynb (default: notebooks/ of the clone the package is installed from, editable)")
    add("--out", type=Path, default=Path("results"),
        help="output folder; its card and notebooks/ are replaced when the run is complete (default: results)")
    add("--only", nargs="+", metavar="NN", help="run only these notebook numbers, e.g. --only 02 05")
    add("--timeout", type=positive_seconds, default=1800, help="seconds allowed per cell (default: 1800)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nspy-tutorial`` console script; returns the exit code."""
    previous = {}
    if threading.current_thread() is threading.main_thread():  # where Python delivers signals
        previous = {signum: signal.signal(signum, _raise_interrupted) for signum in (signal.SIGINT, signal.SIGTERM)}
    out = None
    try:
        args = build_parser().parse_args(argv)
        out = args.out
        from nspy_tutorial import runner

        try:
            return runner.run(args.notebooks_dir, args.out, args.only, args.timeout)
        except runner.RunnerError as error:
            print(f"nspy-tutorial: error: {error}", file=sys.stderr)
            return runner.EXIT_USAGE
    except KeyboardInterrupt as stop:
        for signum in previous:  # a second Ctrl-C while saying so changes nothing
            signal.signal(signum, signal.SIG_IGN)
        signum = getattr(stop, "signum", signal.SIGINT)
        kept = f"; {out} left as it was" if out is not None else ""
        print(f"interrupted ({signal.Signals(signum).name}){kept}", file=sys.stderr, flush=True)
        return 128 + signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
