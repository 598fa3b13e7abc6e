"""load_edge_list: text files with one edge ``src dst [value ...]`` per line."""

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.datasets.base import check_count, check_host_memory, index_dtype, too_many_nodes
from cupy_csrattn.datasets.loading import as_result, check_options, graph_of_edges
from cupy_csrattn.datasets.text import MAX_NODE_ID, TextFile, check_ids, check_markers, file_name, read_bytes


def load_edge_list(
    path,
    *,
    delimiter=None,
    comments=("#", "%"),
    one_based=False,
    transpose=False,
    num_nodes=None,
    add_self_loops=False,
    dtype=None,
    return_values=False,
    max_nodes=None,
):
    """Load a text edge list: one edge ``src dst [value ...]`` per line.

    The first column is the **source** and the second the **destination** (PyG's
    ``edge_index`` order, SNAP's ``FromNodeId ToNodeId``): the line ``u v`` puts source
    ``u`` into row ``v``. ``transpose=True`` reads the lines as ``dst src`` instead.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The file; a name ending in ``.gz`` is decompressed.
    delimiter : str or bytes, optional
        Column separator. By default any run of whitespace or commas separates columns, so
        whitespace- and comma-separated files both load; a run of delimiters counts as one.
    comments : str, bytes, sequence of them, or None
        Comment markers: from a marker to the end of its line is ignored. ``#`` (SNAP) and
        ``%`` (KONECT) by default; ``None`` for none.
    one_based : bool
        Node ids start at 1 (then an id of 0 is an error). Not detected automatically: a
        zero-based file whose node 0 has no edges would be misread.
    transpose : bool
        Lines are ``dst src`` rather than ``src dst``.
    num_nodes : int, optional
        Number of nodes (the graph is ``num_nodes x num_nodes``), at most ``2**62``; by
        default the largest id + 1. Ids out of range are an error. Given explicitly, it is
        taken as asked, however far above the largest id (``max_nodes`` does not apply).
    add_self_loops : bool
        Give every node without one a self-loop (value 1 in the values).
    dtype : dtype, optional
        dtype of the values (float64 by default).
        It must hold every value up to rounding: a value it would change otherwise (500 in
        int8, 1.5 or NaN in an integer dtype, an imaginary part in a real one, 1e300 in
        float32) is a ValueError naming it. For an integer dtype, integer values are read
        exactly (past 2**53, where float64 rounds them).
    return_values : bool
        Also return the third column, in the graph's edge order (None for 2 columns).
    max_nodes : int, optional
        Largest node count accepted from the ids when ``num_nodes`` is not given. By
        default ``max(2**20, 16 * edges)``: the graph's node arrays then cost at most a few
        times what its edges cost, and a one-line file such as ``0 10000000000`` is an error
        (naming the line of the largest id) instead of an attempt to allocate 75 GiB. A file
        whose ids are that sparse needs ``num_nodes`` (or a larger ``max_nodes``), or
        renumbered nodes.

    Returns
    -------
    graph : CSRGraph
        Square graph with int32 indices when they fit, else int64; edges of a row keep the
        file's order.
    values : (E,) array or None
        Only with ``return_values=True``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        ``"{path}:{line}: ..."`` for a line with a column count other than the first data
        line's (which must be at least 2), a non-integer, negative or out-of-range id, a 0
        in a one-based file, a third column that is not a number or is a finite number beyond
        float64's range (``1e400``; an infinity written as one loads), or an id making more than
        ``max_nodes`` nodes (see there). Also ``num_nodes`` above ``2**62``.
    TypeError
        ``delimiter`` or ``comments`` that is not a string, ``num_nodes`` or ``max_nodes``
        that is not an integer, ``one_based``, ``transpose``, ``add_self_loops`` or
        ``return_values`` that is not a bool, ``dtype`` that is not a dtype (all checked
        before the file is read; so is ``dtype``'s kind: not a bool, integer, float or
        complex dtype is a ValueError).

    Notes
    -----
    Blank lines and comment lines are skipped; columns after the third are ignored (KONECT
    timestamps, for example).
    """
    transpose, add_self_loops, return_values, dtype, max_nodes = check_options(
        transpose, add_self_loops, return_values, dtype, max_nodes
    )
    one_based = backend.flag("one_based", one_based)
    comments = check_markers("comments", comments, sequence=True)
    separators = [b","] if delimiter is None else check_markers("delimiter", delimiter, sequence=False)
    if num_nodes is not None:
        num_nodes = check_count("num_nodes", num_nodes)
        if num_nodes > MAX_NODE_ID:
            raise ValueError(f"num_nodes must be <= 2**62 (what 64-bit indices can address), got {num_nodes}")
        # the graph's indptr and its row counts (int64), one entry per node each, before the file is read
        nbytes = (num_nodes + 1) * np.dtype(index_dtype(num_nodes)).itemsize + num_nodes * 8
        check_host_memory(f"load_edge_list(num_nodes={num_nodes})", nbytes)
    path = file_name(path)
    text = TextFile(path, read_bytes(path), comments, separators)
    first_line = next(text.data_lines(), None)
    if first_line is None:
        n, empty = num_nodes or 0, np.zeros(0, np.int64)
        graph, values = graph_of_edges(empty, empty, n, n, None, add_self_loops, dtype, path)
        return as_result(graph, values, return_values)
    line, tokens, _ = first_line
    ncol = len(tokens)
    if ncol < 2:
        raise text.error(line, f"expected at least 2 columns (source and destination), got {ncol}")
    # source, destination, value; columns after the third must be on every line but are not parsed
    kinds = ["int", "int", "float", *["skip"] * (ncol - 3)][:ncol]
    table = text.table(0, 0, kinds, "as on the first data line")
    left, right = (check_ids(table, table.columns[c], c, one_based, num_nodes, "num_nodes") for c in (0, 1))
    src, dst = (right, left) if transpose else (left, right)
    if num_nodes is None:
        num_nodes = _inferred_num_nodes(table, left, right, one_based, max_nodes)
    values = table.columns[2] if ncol >= 3 else None
    if values is not None and dtype is not None and dtype.kind in "iu":
        values = _exact_integers(text, ncol, dtype, values)
    graph, values = graph_of_edges(src, dst, num_nodes, num_nodes, values, add_self_loops, dtype, path)
    return as_result(graph, values, return_values)


def _exact_integers(text, ncol, dtype, values):
    """The value column read again as integers, for an integer ``dtype``, where a value is at
    least 2**53: read as float64, such a value is rounded before the cast could see it change
    (2**53 + 1 would load as 2**53). Kept as read where a token is no integer of the dtype's
    sign (then the cast judges the value)."""
    if not (np.abs(values) >= 2.0**53).any():
        return values
    kinds = ["skip", "skip", "uint" if dtype.kind == "u" else "int", *["skip"] * (ncol - 3)]
    try:
        return text.table(0, 0, kinds, "as on the first data line").columns[0]
    except ValueError:
        return values


def _inferred_num_nodes(table, left, right, one_based, max_nodes):
    """The largest id + 1; ValueError naming its line when that is more than the node limit."""
    column = 0 if left.max() >= right.max() else 1
    ids = (left, right)[column]
    num_nodes = int(ids.max()) + 1
    problem = too_many_nodes(num_nodes, len(ids), max_nodes, fix="num_nodes")
    if problem:
        row = int(np.argmax(ids))
        where = table.text.where(table.line_of(row))
        raise problem.after(f"{where}column {column + 1}: node id {int(ids[row]) + (1 if one_based else 0)} makes ")
    return num_nodes
