"""What every csrattn subcommand shares: the program name, the two errors, the progress bar."""

import argparse
import shutil
import sys
import time

PROG = "csrattn"


class UsageError(Exception):
    """A bad command line: exit status 2."""


class CommandError(Exception):
    """A failure while running a command: exit status 1."""


def bounded_int(text, minimum, maximum=None, why=""):
    """``text`` as an int from ``minimum`` to ``maximum`` (``why``, after the maximum, says
    where it comes from); argparse.ArgumentTypeError otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most {maximum}{why}")
    return value


def positive_int(text):
    """argparse type: an integer of at least 1."""
    return bounded_int(text, 1)


#: The most heads or features per head a command takes: the kernels take H and F as C ints.
KERNEL_INT_MAX = 2**31 - 1


def kernel_size(text):
    """argparse type: an integer from 1 to KERNEL_INT_MAX (a head count, a feature width).

    Refused as the command line is read: a larger one fails only once timing has begun,
    allocating arrays of E * H elements or passing H to a kernel's int parameter.
    """
    return bounded_int(text, 1, KERNEL_INT_MAX, " (the kernels take it as a 32-bit int)")


def nonnegative_int(text):
    """argparse type: an integer of at least 0 (a seed, say)."""
    return bounded_int(text, 0)


def progress_wanted(args):
    """Draw progress bars: not --quiet, and stderr is a terminal."""
    return not args.quiet and sys.stderr.isatty()


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal.

    Parameters
    ----------
    total : int
        Number of steps.
    label : str
        Text before the bar.
    enabled : bool, optional
        Draw or not; by default only when ``stream`` is a TTY.
    stream : file, optional
        ``sys.stderr`` by default.
    """

    def __init__(self, total, label, enabled=None, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self.started = time.perf_counter()
        self._drawn_at = 0.0
        self._width = 0
        self._note = ""
        self._draw(force=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def advance(self, steps=1, note=""):
        """Count ``steps`` more steps done; ``note`` is shown after the bar."""
        self.done = min(self.total, self.done + steps)
        self._note = note
        self._draw(force=self.done == self.total)

    def write(self, text):
        """Print ``text`` on stdout without tearing the bar."""
        self._clear()
        print(text, flush=True)
        self._draw(force=True)

    def close(self):
        """Remove the bar from the terminal."""
        self._clear()
        self.enabled = False

    def _clear(self):
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _draw(self, force=False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        columns = shutil.get_terminal_size((80, 24)).columns - 1
        fraction = self.done / self.total if self.total else 1.0
        bar_width = 24
        filled = int(round(bar_width * fraction))
        elapsed = now - self.started
        eta = ""
        if 0 < self.done < self.total:
            eta = f" eta {elapsed / self.done * (self.total - self.done):.0f}s"
        bar = "#" * filled + "." * (bar_width - filled)
        line = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:.0f}s{eta} {self._note}"[:columns]
        self.stream.write("\r" + line + " " * max(0, self._width - len(line)))
        self.stream.flush()
        self._width = len(line)
