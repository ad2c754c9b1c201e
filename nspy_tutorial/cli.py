"""The ``nspy-tutorial`` command line; :func:`main` installs the signal handling first: Ctrl-C, SIGTERM or SIGHUP
(the terminal closed) at any moment prints one line ``interrupted (SIGINT)``, exits 130 (SIGTERM: 143, SIGHUP: 129),
leaves ``--out`` as it was."""

import contextlib
import signal
import sys

EPILOG = """\
exit codes:
  0    every notebook ran without a FAILED section (SKIPPED sections are fine)
  1    a notebook FAILED (a FAILED section, a cell error or --timeout, unreadable); the others keep their results
  2    usage error: a bad option or folder, or an NSPY_TUTORIAL_* value it does not accept
  129  SIGHUP (the terminal closed): the running kernel is stopped, --out is left as it was
  130  Ctrl-C (SIGINT): the running kernel is stopped, --out is left as it was
  143  SIGTERM: the same

environment variables (README.md says more):
  NSPY_TUTORIAL_STRICT=1          a FAILED section re-raises, so the notebook stops there (also: true, yes, on)
  NSPY_TUTORIAL_REQUIRE=NEED,...  a section that lacks one of these needs is FAILED, not SKIPPED, whatever it
                                  lacked first; needs: {needs},
                                  cc<major>.<minor> (e.g. cc8.0)
  NSPY_TUTORIAL_BACKEND=cupti     use the CUPTI backend, do not load Nsight Compute (unset: Nsight Compute if it loads)
  NSPY_TUTORIAL_RESULTS=FILE      where sections append their JSON records; the run sets it, one per notebook
  NSPY_TUTORIAL_WORKDIR=DIR       every notebook writes only under DIR/<notebook> (default ./nspy_work/<notebook>)"""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum: int, frame: object) -> None:
    """SIGINT, SIGTERM or SIGHUP: stop as after Ctrl-C, with the signal's number as the KeyboardInterrupt's argument."""
    raise KeyboardInterrupt(signum)


def build_parser():  # -> argparse.ArgumentParser (imported here: the signal handlers come first)
    """The command line: one ``run`` subcommand; its --help ends with the exit codes and variables."""
    import argparse
    from pathlib import Path

    from nspy_tutorial.sections import NEEDS

    def positive_seconds(text: str) -> int:
        if not (text.isdigit() and int(text) > 0):
            raise argparse.ArgumentTypeError(
                f"must be a whole number of seconds above 0, got {text!r} (for a long cell, give a large value)")
        return int(text)

    parser = argparse.ArgumentParser(prog="nspy-tutorial", description="Run the nspy-tutorial notebooks, write a card.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser(
        "run", help="execute the notebooks headless", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG.format(needs=", ".join(NEEDS)),
        description="Execute the NN_*.ipynb notebooks in order with pytest and nbmake, each in its own kernel,\n"
                    "and write <out>/results.md, <out>/results.json and executed copies in <out>/notebooks/.")
    add = run_parser.add_argument
    add("--notebooks-dir", type=Path,
        help="folder holding NN_*.ipynb (default: notebooks/ of the clone the package is installed from, editable)")
    add("--out", type=Path, default=Path("results"),
        help="output folder; its card and notebooks/ are replaced when the run is complete (default: results)")
    add("--only", nargs="+", metavar="NN",
        help="run only these notebook numbers, e.g. --only 02 05; into an --out that holds an earlier card, the "
             "other notebooks' executed copies and rows are kept (the card counts them all and names the ones this "
             "run redid; the exit code is this run's)")
    add("--timeout", type=positive_seconds, default=1800, help="seconds allowed per cell (default: 1800)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nspy-tutorial`` console script; returns the exit code."""
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in STOP_SIGNALS}
    out = None
    try:
        args = build_parser().parse_args(argv)
        out = args.out
        from nspy_tutorial import runner
        from nspy_tutorial.sections import SettingError

        try:
            return runner.run(args.notebooks_dir, args.out, args.only, args.timeout)
        except (runner.RunnerError, SettingError) as error:
            print(f"nspy-tutorial: error: {error}", file=sys.stderr)
            return runner.EXIT_USAGE
    except KeyboardInterrupt as stop:
        for signum in previous:  # a second Ctrl-C while saying so changes nothing
            signal.signal(signum, signal.SIG_IGN)
        signum = stop.args[0] if stop.args else signal.SIGINT
        kept = f"; {out} left as it was" if out is not None else ""
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(f"interrupted ({signal.Signals(signum).name}){kept}", file=sys.stderr, flush=True)
        return 128 + signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
