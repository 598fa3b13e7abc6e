"""The csrattn command line: the parser and ``main`` (errors to exit statuses)."""

import argparse
import os
import sys

import cupy_csrattn
from cupy_csrattn import backend
from cupy_csrattn.cli import bench, check, info
from cupy_csrattn.cli.common import PROG, CommandError, UsageError


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit 2) instead of usage + message."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def build_parser():
    """The argparse parser of the csrattn command."""
    parser = Parser(
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Attention over sparse graphs in CSR form: environment report, self-check and benchmark.",
        epilog="Every command also runs without a GPU, on the CPU backend, and says so.\n"
        "Run 'csrattn COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (cupy_csrattn) {cupy_csrattn.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info.add_parser(commands)
    check.add_parser(commands)
    bench.add_parser(commands)
    return parser


def main(argv=None):
    """Run the csrattn command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 1 on a failure, 2 on a usage error, 130 when interrupted.
    """
    command = None
    for stream in (sys.stdout, sys.stderr):
        # A file name of bytes that are not UTF-8 (held as surrogate escapes) prints as \xff
        # rather than stopping the command with a UnicodeEncodeError where the streams are strict.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        command = args.command
        if command is None:
            raise UsageError(f"{PROG}: error: choose a command: info, check or bench (see {PROG} --help)")
        return int(args.func(args) or 0)
    except SystemExit as exit_:  # --help, --version
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except UsageError as error:
        print(str(error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a command that stopped reading (| head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as error:
        if os.environ.get("CSRATTN_DEBUG", "") not in ("", "0"):
            raise
        where = f"{PROG} {command}" if command else PROG
        kind = "" if isinstance(error, CommandError) else f"{type(error).__name__}: "
        print(f"{where}: error: {kind}{backend.first_line(error)}", file=sys.stderr)
        return 1
