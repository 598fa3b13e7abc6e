"""load_mtx: Matrix Market files.

Coordinate files are read by :mod:`cupy_csrattn.datasets.text` (numpy.loadtxt, and a line
scan that names a malformed line), not by scipy.io.mmread: scipy's reader accepts entries
that this loader reports as errors ("2 2 1x" and "2 2 1,5" read as 1, "1.5" in an integer
file as 1, extra columns and non-square symmetric matrices accepted) and its messages do not
name the file. Dense ("array") files, rare for graphs, go to scipy.io.mmread.
"""

import os

import numpy as np
import scipy.io

from cupy_csrattn.datasets.loading import as_result, graph_of_edges
from cupy_csrattn.datasets.text import MAX_NODE_ID, TextFile, check_ids, read_bytes

_FIELDS = {
    "real": "float",
    "double": "float",
    "integer": "int",
    "unsigned-integer": "int",
    "complex": "complex",
    "pattern": None,
}
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
_VALUE_KINDS = {None: [], "int": ["int"], "float": ["float"], "complex": ["float", "float"]}


def load_mtx(path, *, transpose=False, add_self_loops=False, dtype=None, return_values=False):
    """Load a Matrix Market (.mtx) file as a graph.

    Entry ``(i, j)`` of the matrix is an edge from source ``j`` to destination ``i``: row
    ``i`` of the matrix becomes row ``i`` of the graph, as with ``scipy.io.mmread(path)``
    followed by :meth:`CSRGraph.from_scipy`. ``transpose=True`` reads entry ``(i, j)`` as an
    edge from ``i`` to ``j`` (the graph of the transposed matrix).

    Parameters
    ----------
    path : str or os.PathLike
        A Matrix Market file (``coordinate`` or ``array`` format); ``.gz`` is decompressed.
    transpose : bool
        Use the transposed matrix.
    add_self_loops : bool
        Give every node without one a self-loop (value 1); needs a square matrix.
    dtype : dtype, optional
        dtype of the values; by default float64 for ``real``, int64 for ``integer`` and
        complex128 for ``complex`` files.
    return_values : bool
        Also return the entries' values in the graph's edge order (None for ``pattern``).

    Returns
    -------
    graph : CSRGraph
        Shape ``(M, N)`` of the matrix (``(N, M)`` transposed). Symmetric, skew-symmetric and
        Hermitian files are expanded to both triangles, as scipy does; repeated entries
        stay distinct edges. Edges of a row keep the file's order.
    values : (E,) array or None
        Only with ``return_values=True``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        ``"{path}:{line}: ..."`` for a bad header or size line, an entry with the wrong
        number of columns, a non-integer or out-of-range index, a value that is not a
        number, or more or fewer entries than the size line declares.
    """
    path = os.fspath(path)
    raw = read_bytes(path)
    fmt, field, symmetry = _header(path, raw)
    if fmt == "array":
        return _load_dense(path, transpose, add_self_loops, dtype, return_values)
    text = TextFile(path, raw, "%")
    size_line, start, (num_rows, num_cols, num_entries) = _sizes(text)
    kind = _FIELDS[field]
    what = (
        f"'row column{'' if kind is None else ' value'}{' imaginary' if kind == 'complex' else ''}' "
        f"for a {field} matrix"
    )
    try:
        table = text.table(start, size_line + 1, ["int", "int"] + _VALUE_KINDS[kind], what)
    except ValueError:
        found = text.count_data_lines(start, size_line + 1)
        if found != num_entries:  # reported before a malformed entry
            raise _count_error(text, size_line, start, found, num_entries) from None
        raise
    if table.num_rows != num_entries:
        raise _count_error(text, size_line, start, table.num_rows, num_entries)
    row = check_ids(table, table.columns[0], 0, True, num_rows, "rows")
    col = check_ids(table, table.columns[1], 1, True, num_cols, "columns")
    values = None
    if kind == "complex":
        values = table.columns[2] + 1j * table.columns[3]
    elif kind is not None:
        values = table.columns[2]
    if symmetry != "general":
        if num_rows != num_cols:
            raise text.error(size_line, f"a {symmetry} matrix must be square, got {num_rows} x {num_cols}")
        row, col, values = _both_triangles(row, col, values, symmetry)
    dst, src, num_dst, num_src = row, col, num_rows, num_cols
    if transpose:
        dst, src, num_dst, num_src = col, row, num_cols, num_rows
    graph, values = graph_of_edges(src, dst, num_dst, num_src, values, add_self_loops, dtype, path)
    return as_result(graph, values, return_values)


def _header(path, raw):
    """(format, field, symmetry) of the banner line, lower case; ValueError if unsupported."""
    end = raw.find(b"\n")
    banner = (raw if end < 0 else raw[:end]).decode(errors="replace").strip()
    words = banner.lower().split()
    if not words or words[0] != "%%matrixmarket":
        raise ValueError(f"{path}:1: not a Matrix Market file: the first line must start with %%MatrixMarket")
    if (
        len(words) != 5
        or words[1] != "matrix"
        or words[2] not in ("coordinate", "array")
        or words[3] not in _FIELDS
        or words[4] not in _SYMMETRIES
    ):
        raise ValueError(
            f"{path}:1: unsupported Matrix Market header {banner!r}; expected "
            f"'%%MatrixMarket matrix coordinate|array "
            f"{'|'.join(_FIELDS)} {'|'.join(_SYMMETRIES)}'"
        )
    return words[2], words[3], words[4]


def _sizes(text):
    """(line, offset of the next line, [rows, columns, entries]) of the size line."""
    size = next(text.data_lines(), None)
    if size is None:
        raise ValueError(f"{text.path}:{text.num_lines()}: the size line 'rows columns entries' is missing")
    line, tokens, start = size
    if len(tokens) != 3:
        raise text.error(line, f"expected the size line 'rows columns entries', got {len(tokens)} columns")
    sizes = []
    for token in tokens:
        try:
            sizes.append(int(token))
        except ValueError:
            raise text.error(line, f"size {token.decode(errors='replace')!r} is not an integer") from None
    if min(sizes) < 0:
        raise text.error(line, f"negative size in {sizes}")
    if max(sizes[:2]) >= MAX_NODE_ID:
        raise text.error(line, f"size too large in {sizes}")
    return line, start, sizes


def _both_triangles(row, col, values, symmetry):
    """The entries of a symmetric, skew-symmetric or Hermitian file with their mirror images
    (off the diagonal) appended, as scipy.io.mmread expands them."""
    off = row != col
    row, col = np.concatenate([row, col[off]]), np.concatenate([col, row[off]])
    if values is not None:
        mirrored = values[off]
        if symmetry == "skew-symmetric":
            mirrored = -mirrored
        elif symmetry == "hermitian":
            mirrored = np.conj(mirrored)
        values = np.concatenate([values, mirrored])
    return row, col, values


def _count_error(text, size_line, start, found, num_entries):
    """ValueError for a file with more or fewer entries than its size line declares."""
    declared = f"declared on line {size_line + 1}"
    if found > num_entries:
        line = text.line_of_row(start, size_line + 1, num_entries)
        return text.error(line, f"more entries than the {num_entries} {declared}")
    return ValueError(
        f"{text.path}:{text.num_lines()}: the file ends after {found} of the {num_entries} entries {declared}"
    )


def _load_dense(path, transpose, add_loops, dtype, return_values):
    """Dense ('array') Matrix Market files: the nonzero entries become the edges."""
    try:
        dense = np.asarray(scipy.io.mmread(path))
    except Exception as error:
        raise ValueError(f"{path}: cannot read the dense Matrix Market file: {error}") from None
    if transpose:
        dense = dense.T
    dst, src = np.nonzero(dense)
    values = dense[dst, src]
    graph, values = graph_of_edges(src, dst, dense.shape[0], dense.shape[1], values, add_loops, dtype, path)
    return as_result(graph, values, return_values)
