"""Text files for the loaders: numpy.loadtxt reads the data, a line scan names a bad line.

Both split a line into tokens the same way: from a comment marker to the end of the line is
ignored, every separator (a comma, say) reads as a space, and the tokens are the runs of
bytes other than ASCII whitespace. Lines end at ``\\n`` (a ``\\r`` without one after it counts
as ``\\n``) and are numbered as in the file.

numpy.loadtxt (compiled, and strict: every token must be a whole number of its column's
kind and every line must have as many tokens as there are columns) parses the data. Its
errors count rows without the comment and blank lines and do not name the file, so when it
fails, or when a loader finds a bad id in what it parsed, the offending line is looked for:
loadtxt over pieces of about a megabyte finds the piece, and a scan of that piece's lines in
Python finds the line and says what is wrong with it (``"{path}:{line}: ..."``). That scan
is hand-written for this reason only, and runs only on those error paths.
"""

import gzip
import io
import itertools
import os
import re
import warnings
import zlib

import numpy as np

from cupy_csrattn import backend

# Ids at or above this are refused: no real graph comes near it, and the node count
# (largest id + 1) must stay far from the end of int64.
MAX_NODE_ID = 1 << 62

# "skip" columns must hold a token but are not parsed: loadtxt truncates any token to S1.
_DTYPES = {"int": np.int64, "uint": np.uint64, "float": np.float64, "skip": "S1"}
# Bytes that loadtxt (reading latin-1) takes for whitespace and the tokens do not: made
# unparsable, so that a token holding one fails there as it does in the line scan.
_OTHER_SPACES = b"\x1c\x1d\x1e\x1f\x85\xa0"
_UNPARSABLE = bytes.maketrans(_OTHER_SPACES, b"\x01" * len(_OTHER_SPACES))
_PIECE = 1 << 20  # bytes of text per loadtxt call while looking for a bad line
_READ_PIECE = 1 << 26  # bytes per read of a file
_INTEGER = re.compile(rb"[+-]?[0-9]+")
_UNSIGNED = re.compile(rb"\+?[0-9]+")  # loadtxt refuses any minus sign for uint64, "-0" too
_INT64 = np.iinfo(np.int64)
_UINT64 = np.iinfo(np.uint64)


def is_gzip_name(path):
    """Whether a file's name (str, bytes or os.PathLike) ends in .gz, in any case."""
    return file_name(path).lower().endswith(".gz")


def file_name(path):
    """``path`` (str, bytes or os.PathLike) as a str, a bytes name decoded as the file system
    does: what the loaders open and name in their errors (where a bytes one reads b'...', and
    str methods on it raise TypeError); a TypeError naming ``path`` for anything else."""
    try:
        return os.fsdecode(os.fspath(path))
    except TypeError:
        raise TypeError(f"path must be a str, bytes or os.PathLike file name, got {type(path).__name__}") from None


def read_bytes(path):
    """The file's bytes (gunzipped for a .gz name); FileNotFoundError naming it."""
    path = file_name(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    opener = gzip.open if is_gzip_name(path) else open
    try:
        with opener(path, "rb") as file:
            raw = _read_bounded(path, file)
    except (OSError, EOFError, zlib.error) as error:  # zlib.error: a .gz whose deflate data are damaged
        if isinstance(error, (FileNotFoundError, PermissionError)):
            raise
        raise ValueError(f"{path}: cannot read the file: {error}") from None
    raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw  # UTF-8 byte order mark
    # Lines that end in a lone \r (classic Mac OS, some spreadsheet exports) would otherwise be
    # one long line: an edge list's extra columns are not parsed, so every edge after the
    # first would be dropped without a word. Editors and Python's universal newlines end a line there.
    if raw.count(b"\r") != raw.count(b"\r\n"):
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return raw


def _read_bounded(path, file):
    """All of ``file``'s bytes, read a piece at a time: a MemoryError naming ``path`` once they
    pass this machine's memory (a pipe or device that never ends, a .gz that inflates beyond
    it), before the read itself exhausts it."""
    limit = backend.host_memory_bytes()
    pieces, total = [], 0
    while piece := file.read(_READ_PIECE):
        total += len(piece)
        if limit is not None and total > limit:
            raise MemoryError(
                f"{path}: the file holds more than this machine's {limit / 2**30:.1f} GiB of memory"
                + (" once decompressed" if is_gzip_name(path) else "")
            )
        pieces.append(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _as_bytes(text):
    return text.encode() if isinstance(text, str) else text


def check_markers(name, value, sequence):
    """A loader's ``delimiter`` (``sequence=False``: one str or bytes) or ``comments``
    (``sequence=True``: also a list, tuple or set of them, or None) as a list of bytes;
    TypeError or ValueError naming the argument."""
    if value is None and sequence:
        return []
    if isinstance(value, (str, bytes)):
        items = [value]
    elif sequence and isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    else:
        items = None
    if items is None or not all(isinstance(item, (str, bytes)) for item in items):
        kinds = "a str or bytes, a list of them, or None" if sequence else "a str or bytes"
        shown = type(value).__name__ if items is None else [type(item).__name__ for item in items]
        raise TypeError(f"{name} must be {kinds}, got {shown}")
    items = [_as_bytes(item) for item in items]
    if any(b"\n" in item or b"\r" in item for item in items):
        raise ValueError(f"{name} must not contain a line break, got {value!r}")
    return items


class TextFile:
    """A text file's bytes and the rules that split its lines into tokens.

    Parameters
    ----------
    path : str or os.PathLike
        The file's name, for error messages.
    raw : bytes
        Its contents.
    comments : str, bytes, sequence of them, or None
        Comment markers.
    separators : sequence of str or bytes
        Strings read as a space (whitespace-only ones change nothing and are dropped).
    """

    def __init__(self, path, raw, comments, separators=()):
        self.path = file_name(path)
        self.raw = raw
        markers = [comments] if isinstance(comments, (str, bytes)) else list(comments or ())
        self.markers = [_as_bytes(m) for m in markers if m]
        self.separators = [_as_bytes(s) for s in separators if s.strip()]

    def error(self, line, message):
        """ValueError naming the file and the line (0-based ``line``, shown 1-based)."""
        return ValueError(f"{self.where(line)}{message}")

    def where(self, line):
        """ "path:line: ", the start of an error message about 0-based ``line``."""
        return f"{self.path}:{int(line) + 1}: "

    def num_lines(self):
        """Number of lines; a final newline does not start another."""
        raw = self.raw
        return raw.count(b"\n") + (1 if raw and not raw.endswith(b"\n") else 0)

    def tokens(self, text):
        """The tokens of one line's bytes."""
        for marker in self.markers:
            cut = text.find(marker)
            if cut >= 0:
                text = text[:cut]
        for separator in self.separators:
            text = text.replace(separator, b" ")
        return text.split()

    def data_lines(self, offset=0, line=0, stop=None):
        """(line, tokens, next) of each line with tokens in bytes ``offset:stop``.

        ``offset`` starts line number ``line`` (0-based); ``next`` is the offset of the next line.
        """
        raw = self.raw
        stop = len(raw) if stop is None else stop
        while offset < stop:
            end = raw.find(b"\n", offset, stop)
            end = stop if end < 0 else end
            tokens = self.tokens(raw[offset:end])
            if tokens:
                yield line, tokens, end + 1
            offset, line = end + 1, line + 1

    def table(self, offset, line, kinds, what):
        """The data lines from byte ``offset`` (line ``line``) on, parsed by numpy.loadtxt.

        ``kinds[c]`` is the kind of column ``c``: "int" (int64), "uint" (uint64), "float" (float64) or "skip"
        (any token, not parsed); every data line must have ``len(kinds)`` tokens. Returns a
        :class:`Table` with one column per kind other than "skip". Raises a ValueError naming
        the first line with another number of tokens (``what`` describes the columns), or if
        there is none, the first with a token that is not of its column's kind.
        """
        try:
            data = self._load(self.raw[offset:], _dtype(kinds))
        except (ValueError, OverflowError) as error:
            raise self._first_bad_line(offset, line, kinds, what, error) from None
        columns = [data[f"f{c}"] for c, kind in enumerate(kinds) if kind != "skip"]
        table = Table(self, offset, line, columns, len(data))
        for column, kind in enumerate(kinds):
            if kind == "float":
                self._check_range(table, data[f"f{column}"], column)
        return table

    def _check_range(self, table, values, column):
        """ValueError naming the first line whose token in ``column`` is a finite number beyond
        float64's range: loadtxt reads 1e400 as inf, another number than the file's. The file's
        pieces up to its last infinity are counted again, and only those holding one are read
        for their tokens; a file without an infinity is not read again."""
        infinite = np.flatnonzero(np.isinf(values))
        first_row = 0
        for start, _, end in self._pieces(table.offset, table.line):
            if not len(infinite) or first_row > infinite[-1]:
                return
            rows = self._count(start, end)
            here = infinite[(infinite >= first_row) & (infinite < first_row + rows)]
            if len(here):
                tokens = self._load(self.raw[start:end], np.dtype("S"), usecols=column)[here - first_row]
                written = np.char.lower(np.char.lstrip(tokens, b"+-"))
                bad = np.flatnonzero((written != b"inf") & (written != b"infinity"))
                if len(bad):
                    row, token = int(here[bad[0]]), tokens[bad[0]].decode(errors="replace")
                    message = f"{token!r} is beyond float64's range (it would read as {values[row]})"
                    raise table.error(row, f"column {column + 1}: {message}")
            first_row += rows

    def count_data_lines(self, offset=0, line=0):
        """Number of lines with tokens from byte ``offset`` on."""
        return sum(self._count(start, end) for start, _, end in self._pieces(offset, line))

    def line_of_row(self, offset, line, row):
        """The line of data line number ``row`` (0-based) from byte ``offset`` (line ``line``) on."""
        for start, first, end in self._pieces(offset, line):
            rows = self._count(start, end)
            if row < rows:
                return next(itertools.islice(self.data_lines(start, first, end), row, None))[0]
            row -= rows
        raise IndexError(f"the file has no data row {row}")

    def _count(self, start, end):
        return len(self._load(self.raw[start:end], np.dtype("S1"), usecols=0))

    def _load(self, body, dtype, usecols=None):
        """numpy.loadtxt of ``body``, split into lines and tokens as tokens() does."""
        markers = self.markers
        # Separators and \r (whitespace within a line here, a line end to loadtxt) become
        # spaces, _OTHER_SPACES unparsable bytes. A marker holding any byte involved could
        # match differently afterwards: then the comments go first, as in tokens().
        changed = set(b"".join(self.separators) + b" \r\x01" + _OTHER_SPACES)
        if any(changed.intersection(m) for m in markers):
            body = re.sub(b"(?:" + b"|".join(re.escape(m) for m in markers) + rb")[^\n]*", b"", body)
            markers = []
        for separator in self.separators + [b"\r"]:
            body = body.replace(separator, b" ")
        if any(byte in body for byte in _OTHER_SPACES):
            body = body.translate(_UNPARSABLE)
        if len(markers) > 1 and all(len(m) == 1 for m in markers):
            # loadtxt strips one one-character marker in compiled code, more line by line in Python
            for marker in markers[1:]:
                body = body.replace(marker, markers[0])
            markers = markers[:1]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "loadtxt: input contained no data", UserWarning)
            # NumPy before 2.3 reads "1.5" as an integer 1 with only a DeprecationWarning.
            warnings.simplefilter("error", DeprecationWarning)
            return np.loadtxt(
                io.BytesIO(body),
                dtype=dtype,
                delimiter=None,
                usecols=usecols,
                ndmin=1,
                encoding="latin1",
                comments=[m.decode("latin1") for m in markers] or None,
            )

    def _pieces(self, offset, line):
        """(start, line, end) of consecutive pieces of whole lines of about _PIECE bytes."""
        raw = self.raw
        while offset < len(raw):
            end = raw.find(b"\n", min(offset + _PIECE, len(raw)))
            end = len(raw) if end < 0 else end + 1
            yield offset, line, end
            line += raw.count(b"\n", offset, end)
            offset = end

    def _first_bad_line(self, offset, line, kinds, what, error):
        """ValueError naming a data line that loadtxt cannot read (see table()).

        loadtxt, piece by piece, finds the first piece holding a line with a wrong number of
        tokens (all columns read as "skip"), or else a bad token; only that piece is scanned.
        """
        for check_tokens in (False, True):
            dtype = _dtype(kinds if check_tokens else ["skip"] * len(kinds))
            for start, first, end in self._pieces(offset, line):
                try:
                    self._load(self.raw[start:end], dtype)
                except (ValueError, OverflowError):
                    bad = self._bad_line_in(start, first, end, kinds, what, check_tokens)
                    if bad is not None:
                        return bad
        return ValueError(f"{self.path}: cannot parse the file: {error}")

    def _bad_line_in(self, start, line, end, kinds, what, check_tokens):
        """ValueError for the first bad line in bytes ``start:end``, or None."""
        for number, tokens, _ in self.data_lines(start, line, end):
            if len(tokens) != len(kinds):
                return self.error(number, f"expected {len(kinds)} columns ({what}), got {len(tokens)}")
            for column, (token, kind) in enumerate(zip(tokens, kinds)):
                problem = _token_problem(token, kind) if check_tokens else None
                if problem:
                    return self.error(number, f"column {column + 1}: {token.decode(errors='replace')!r} {problem}")
        return None


def _dtype(kinds):
    return np.dtype([(f"f{c}", _DTYPES[kind]) for c, kind in enumerate(kinds)])


def is_integer_token(token):
    """Whether ``token`` (bytes) is an integer as numpy.loadtxt reads one: digits after an
    optional sign (int() also takes "1_0" for 10, which loadtxt refuses)."""
    return _INTEGER.fullmatch(token) is not None


def _token_problem(token, kind):
    """Why numpy.loadtxt does not read ``token`` as a value of ``kind`` ("int", "uint", "float"), or None."""
    if kind == "uint":
        if not _UNSIGNED.fullmatch(token):
            return "is not a non-negative integer"
        if int(token) > _UINT64.max:
            return "does not fit in a 64-bit unsigned integer"
    elif kind == "int":
        if not is_integer_token(token):
            return "is not an integer"
        if not _INT64.min <= int(token) <= _INT64.max:
            return "does not fit in a 64-bit integer"
    elif kind == "float":
        try:
            float(token)
        except ValueError:
            return "is not a number"
        if b"_" in token:  # float() reads "1_0" as 10.0, loadtxt does not
            return "is not a number"
    return None


class Table:
    """Columns that :meth:`TextFile.table` parsed, and the way back from a row to its line."""

    def __init__(self, text, offset, line, columns, num_rows):
        self.text = text
        self.offset = offset
        self.line = line
        self.columns = columns
        self.num_rows = num_rows

    def line_of(self, row):
        """The file line (0-based) of data row ``row``."""
        return self.text.line_of_row(self.offset, self.line, row)

    def error(self, row, message):
        """ValueError naming the line of data row ``row``."""
        return self.text.error(self.line_of(row), message)


def check_ids(table, ids, column, one_based, limit, limit_name):
    """Ids of one column as 0-based int64; errors name the line of the first bad id.

    Ids must be >= 1 (``one_based``) or >= 0, and below ``limit`` (+ 1 when one-based), or
    below :data:`MAX_NODE_ID` without a limit; ``limit_name`` names the limit in messages.
    """
    low = 1 if one_based else 0
    bad = np.flatnonzero((ids < low) | (ids >= (limit + low if limit is not None else MAX_NODE_ID)))
    if len(bad):
        row = bad[0]
        value = int(ids[row])
        if value < 0:
            message = f"column {column + 1}: negative node id {value}"
        elif value == 0 and one_based:
            message = f"column {column + 1}: id 0 in a one-based file"
        elif limit is not None:
            message = (
                f"column {column + 1}: id {value} is out of range {low}..{limit + low - 1} ({limit_name} = {limit})"
            )
        else:
            message = f"column {column + 1}: node id {value} is too large"
        raise table.error(row, message)
    return ids - low if low else ids
