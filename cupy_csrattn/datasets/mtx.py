"""load_mtx: Matrix Market files.

Files are read by :mod:`cupy_csrattn.datasets.text` (numpy.loadtxt, and a line scan that
names a malformed line), not by scipy.io.mmread: scipy's reader accepts entries that this
loader reports as errors ("2 2 1x" and "2 2 1,5" read as 1, "1.5" in an integer file as 1,
extra columns and non-square symmetric matrices accepted), its messages do not name the
file, and some malformed dense ("array") files crash it (scipy 1.17: one that ends with a value
followed by "%%MatrixMarket" and no line end).
"""

import numpy as np

from cupy_csrattn.datasets.base import too_many_nodes
from cupy_csrattn.datasets.loading import as_result, check_options, graph_of_edges
from cupy_csrattn.datasets.text import MAX_NODE_ID, TextFile, check_ids, file_name, is_integer_token, read_bytes

_FIELDS = {
    "real": "float",
    "double": "float",
    "integer": "int",
    "unsigned-integer": "uint",
    "complex": "complex",
    "pattern": None,
}
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
_VALUE_KINDS = {None: [], "int": ["int"], "uint": ["uint"], "float": ["float"], "complex": ["float", "float"]}


def load_mtx(path, *, transpose=False, add_self_loops=False, dtype=None, return_values=False, max_nodes=None):
    """Load a Matrix Market (.mtx) file as a graph.

    Entry ``(i, j)`` of the matrix is an edge from source ``j`` to destination ``i``: row
    ``i`` of the matrix becomes row ``i`` of the graph, as with ``scipy.io.mmread(path)``
    followed by :meth:`CSRGraph.from_scipy`. ``transpose=True`` reads entry ``(i, j)`` as an
    edge from ``i`` to ``j`` (the graph of the transposed matrix).

    Parameters
    ----------
    path : str, bytes or os.PathLike
        A Matrix Market file (``coordinate`` or ``array`` format); ``.gz`` is decompressed.
    transpose : bool
        Use the transposed matrix.
    add_self_loops : bool
        Give every node without one a self-loop (value 1); needs a square matrix.
    dtype : dtype, optional
        dtype of the values; by default float64 for ``real``, int64 for ``integer``, uint64
        for ``unsigned-integer`` and complex128 for ``complex`` files.
        It must hold every value up to rounding: a value it would change otherwise (500 in
        int8, 1.5 or NaN in an integer dtype, an imaginary part in a real one, 1e300 in
        float32) is a ValueError naming it.
    return_values : bool
        Also return the entries' values in the graph's edge order (None for ``pattern``).
    max_nodes : int, optional
        Largest row or column count accepted from the size line. By default
        ``max(2**20, 16 * entries)`` (a dense file: its values): the graph's node arrays then
        cost at most a few times what its entries cost, and a 3-line file declaring ``10**12``
        rows is an error naming its size line instead of an attempt to allocate terabytes.
        Pass the matrix's size (or more) to load a matrix with that many more rows or columns
        than entries.

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
        ``"{path}:{line}: ..."`` for a bad header or size line (a size of ``2**62`` or more,
        beyond what 64-bit indices can address; more rows or columns than ``max_nodes``), an
        entry with the wrong number of columns, a non-integer or out-of-range index, a value
        that is not a number or is a finite number beyond float64's range (``1e400``; an
        infinity written as one loads), or more or fewer entries than the size line declares.
    TypeError
        ``transpose``, ``add_self_loops`` or ``return_values`` that is not a bool, ``dtype``
        that is not a dtype, ``max_nodes`` that is not an integer (checked before the file
        is read; so is ``dtype``'s kind: not a bool, integer, float or complex dtype is a
        ValueError).
    """
    transpose, add_self_loops, return_values, dtype, max_nodes = check_options(
        transpose, add_self_loops, return_values, dtype, max_nodes
    )
    path = file_name(path)
    raw = read_bytes(path)
    fmt, field, symmetry = _header(path, raw)
    text = TextFile(path, raw, "%")
    if fmt == "array":
        return _load_dense(text, field, symmetry, transpose, add_self_loops, dtype, return_values, max_nodes)
    size_line, start, (num_rows, num_cols, num_entries) = _sizes(text, ("rows", "columns", "entries"))
    problem = too_many_nodes(max(num_rows, num_cols), num_entries, max_nodes)
    if problem:
        raise problem.after(f"{text.where(size_line)}the size line declares a {num_rows} x {num_cols} matrix: ")
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
    if words[3] == "unsigned-integer" and words[4] == "skew-symmetric":
        # its mirrored entries are the negated values, which no unsigned value is
        raise ValueError(f"{path}:1: an unsigned-integer matrix cannot be skew-symmetric")
    return words[2], words[3], words[4]


def _sizes(text, names):
    """(line, offset of the next line, sizes) of the size line, whose sizes are ``names``."""
    expected = " ".join(names)
    size = next(text.data_lines(), None)
    if size is None:
        raise ValueError(f"{text.path}:{text.num_lines()}: the size line '{expected}' is missing")
    line, tokens, start = size
    if len(tokens) != len(names):
        raise text.error(line, f"expected the size line '{expected}', got {len(tokens)} columns")
    sizes = []
    for name, token in zip(names, tokens):
        # The entries' own rule: int() alone would read a size "1_0" as 10, where an entry "1_0" is refused.
        try:
            value = int(token) if is_integer_token(token) else None
        except ValueError:  # more digits than int() converts
            value = None
        if value is None:
            raise text.error(line, f"size {token.decode(errors='replace')!r} is not an integer")
        if value < 0:
            raise text.error(line, f"negative size: {name} = {value}")
        if value >= MAX_NODE_ID:
            raise text.error(line, f"{name} = {value} is beyond what 64-bit indices can address (< 2**62)")
        sizes.append(value)
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


def _load_dense(text, field, symmetry, transpose, add_loops, dtype, return_values, max_nodes):
    """Dense ('array') files: values column by column (of a symmetric, skew-symmetric or
    Hermitian matrix, its lower triangle, without the diagonal if skew), one a line (two for
    complex); the nonzero entries become the edges, each row's in column order."""
    size_line, start, (num_rows, num_cols) = _sizes(text, ("rows", "columns"))
    kind = _FIELDS[field]
    if kind is None:
        raise text.error(0, "a pattern matrix must be in coordinate format, not array")
    if symmetry != "general" and num_rows != num_cols:
        raise text.error(size_line, f"a {symmetry} matrix must be square, got {num_rows} x {num_cols}")
    skew = symmetry == "skew-symmetric"
    expected = num_rows * num_cols if symmetry == "general" else num_rows * (num_rows + (-1 if skew else 1)) // 2
    problem = too_many_nodes(max(num_rows, num_cols), expected, max_nodes)
    if problem:  # only an empty matrix (0 x N) declares more nodes than values
        raise problem.after(f"{text.where(size_line)}the size line declares a {num_rows} x {num_cols} matrix: ")
    declared = f"values of the {num_rows} x {num_cols} {symmetry} matrix declared on line {size_line + 1}"
    what = f"'value{' imaginary' if kind == 'complex' else ''}' for a {field} matrix"
    table = text.table(start, size_line + 1, _VALUE_KINDS[kind], what)
    if table.num_rows < expected:
        raise ValueError(
            f"{text.path}:{text.num_lines()}: the file ends after {table.num_rows} of the {expected} {declared}"
        )
    if table.num_rows > expected:
        raise table.error(expected, f"more than the {expected} {declared}")
    values = table.columns[0] + 1j * table.columns[1] if kind == "complex" else table.columns[0]
    if symmetry == "general":
        col, row = np.divmod(np.arange(expected, dtype=np.int64), max(num_rows, 1))
    else:
        # Column j holds rows j.. (j + 1.. if skew): the upper triangle's positions, row by row,
        # with row and column exchanged.
        col, row = np.triu_indices(num_rows, k=1 if skew else 0)
    keep = values != 0
    row, col, values = row[keep], col[keep], values[keep]
    if symmetry != "general":
        row, col, values = _both_triangles(row, col, values, symmetry)
    dst, src, num_dst, num_src = (col, row, num_cols, num_rows) if transpose else (row, col, num_rows, num_cols)
    order = np.lexsort((src, dst))  # row by row, each row's entries by column
    dst, src, values = dst[order], src[order], values[order]
    graph, values = graph_of_edges(src, dst, num_dst, num_src, values, add_loops, dtype, text.path)
    return as_result(graph, values, return_values)
