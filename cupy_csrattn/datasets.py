"""Graphs in, without hand-written glue: seeded generators and file loaders.

Everything here returns a :class:`~cupy_csrattn.CSRGraph` on the CPU (NumPy arrays; move
it with ``graph.to_gpu()``) in the library's convention: **row ``d`` is a destination node
and its column indices are the source nodes whose messages ``d`` aggregates**.

Generators (vectorized, no Python loop per edge, deterministic for a given ``seed``):

- :func:`uniform_graph`: every row has the same number of random sources;
- :func:`rmat_graph`: R-MAT / Kronecker power-law graphs with the Graph500 parameters;
- :func:`contextual_sbm`: a contextual stochastic block model (planted classes, mostly
  intra-class edges, node features drawn per class) for node classification.

Loaders, each naming the file and line of a malformed entry in its ``ValueError``:

- :func:`load_mtx`: Matrix Market; entry ``(i, j)`` is an edge from source ``j`` to
  destination ``i`` (row ``i`` of the matrix is row ``i`` of the graph, as in scipy);
- :func:`load_npz`: ``scipy.sparse.save_npz`` files (same orientation), or ``np.savez``
  files holding ``indptr``/``indices`` or a PyG-style ``edge_index``;
- :func:`load_edge_list`: text files with one edge ``src dst`` per line (PyG's
  ``edge_index`` order: the second column is the destination row);
- :func:`load`: one of the above, chosen by the file name.

Every loader takes ``transpose=True`` to flip that orientation and ``add_self_loops=True``
to give every node a self-loop; :func:`add_self_loops` does the same to any graph.
"""
import gzip
import os
import re
import warnings

import numpy as np
import scipy.sparse

from cupy_csrattn.graph import CSRGraph

__all__ = [
    "add_self_loops",
    "contextual_sbm",
    "load",
    "load_edge_list",
    "load_mtx",
    "load_npz",
    "rmat_graph",
    "uniform_graph",
]

_INT32_MAX = np.iinfo(np.int32).max
# Ids at or above this are refused: np.fromstring saturates an overflowing integer at
# 2**63 - 1 instead of failing, and no real graph comes near it.
_MAX_NODE_ID = 1 << 62
_RMAT_CHUNK = 1 << 18


def _rng(seed):
    return np.random.default_rng(seed)


def _index_dtype(num_nodes, num_edges=0):
    """int32 where every node id and edge offset fits, else int64."""
    return np.int32 if max(num_nodes, num_edges) <= _INT32_MAX else np.int64


def _csr_from_edges(src, dst, num_dst, num_src):
    """(CSRGraph, perm): edges stably sorted by destination; graph edge e is input edge perm[e].

    Like CSRGraph.from_edge_index, for ids already known to be in range, and several
    times faster on large graphs: one sort of 64-bit keys (destination, input position)
    instead of a stable argsort.
    """
    num_edges = len(dst)
    dtype = _index_dtype(max(num_dst, num_src), num_edges)
    if num_edges < (1 << 32) and num_dst <= _INT32_MAX:
        keys = dst.astype(np.int64) << 32
        keys |= np.arange(num_edges, dtype=np.int64)
        keys.sort()
        perm = keys & 0xFFFFFFFF
    else:
        perm = np.argsort(dst, kind="stable").astype(np.int64, copy=False)
    indptr = np.zeros(num_dst + 1, dtype=dtype)
    if num_edges:
        np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    indices = src[perm].astype(dtype, copy=False)
    return CSRGraph(indptr, indices, num_src, check="fast"), perm


def _check_count(name, value, minimum=0):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


# ---------------------------------------------------------------------------------------
# Generators

def uniform_graph(num_nodes, degree, *, num_src=None, seed=0):
    """Random graph in which every destination row has exactly ``degree`` sources.

    The sources of each edge are drawn independently and uniformly, so a row may hold
    duplicate sources and self-loops (distinct edges, as everywhere in the library).

    Parameters
    ----------
    num_nodes : int
        Number of destination rows (``num_dst``).
    degree : int
        In-degree of every row.
    num_src : int, optional
        Number of source nodes; ``num_nodes`` by default (a square graph).
    seed : int or numpy.random.Generator
        Seed of the random sources.

    Returns
    -------
    CSRGraph
        ``num_nodes * degree`` edges; int32 indices when they fit, else int64.
    """
    num_nodes = _check_count("num_nodes", num_nodes)
    degree = _check_count("degree", degree)
    num_src = num_nodes if num_src is None else _check_count("num_src", num_src)
    num_edges = num_nodes * degree
    if num_edges and num_src == 0:
        raise ValueError("num_src must be >= 1 when the graph has edges")
    dtype = _index_dtype(num_src, num_edges)
    indptr = (np.arange(num_nodes + 1, dtype=np.int64) * degree).astype(dtype)
    indices = _rng(seed).integers(0, max(num_src, 1), num_edges, dtype=dtype)
    return CSRGraph(indptr, indices, num_src, check="fast")


def rmat_graph(scale, edge_factor=16, *, a=0.57, b=0.19, c=0.19, self_loops=True,
               duplicates=True, scramble_ids=False, seed=0):
    """R-MAT (recursive Kronecker) power-law graph, Graph500 parameters by default.

    Each of the ``edge_factor * 2**scale`` edges picks one quadrant of the adjacency matrix
    ``scale`` times over: top-left with probability ``a``, top-right ``b``, bottom-left
    ``c``, bottom-right ``d = 1 - a - b - c``; the matrix row is the destination. With
    ``a + b > 0.5`` low-numbered rows collect most edges, so the in-degrees (row lengths)
    are heavy-tailed: a few hub rows with thousands of edges and many short or empty rows.

    Parameters
    ----------
    scale : int
        The graph has ``2**scale`` nodes (both destinations and sources).
    edge_factor : int
        Edges generated per node, before self-loops or duplicates are removed.
    a, b, c : float
        Quadrant probabilities (Graph500: 0.57, 0.19, 0.19; d = 0.05).
    self_loops : bool
        Keep edges from a node to itself; ``False`` drops them.
    duplicates : bool
        Keep repeated ``(dst, src)`` pairs as distinct edges; ``False`` keeps one of each.
    scramble_ids : bool
        Relabel the nodes by a random permutation (as Graph500 does) so that the hubs are
        spread over the id range instead of sitting at the lowest ids.
    seed : int or numpy.random.Generator
        Seed of the generator.

    Returns
    -------
    CSRGraph
        Square graph of ``2**scale`` nodes; within a row, edges keep generation order
        (sorted by source when ``duplicates=False``).
    """
    scale = _check_count("scale", scale)
    edge_factor = _check_count("edge_factor", edge_factor)
    if scale > 40:
        raise ValueError(f"scale must be <= 40, got {scale}")
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < -1e-12:
        raise ValueError(f"a, b, c must be >= 0 with a + b + c <= 1, got a={a}, b={b}, c={c}")
    rng = _rng(seed)
    num_nodes = 1 << scale
    num_edges = edge_factor * num_nodes
    work = np.int32 if scale <= 30 else np.int64
    dst = np.empty(num_edges, dtype=work)
    src = np.empty(num_edges, dtype=work)
    # Chunks of edges small enough to stay in cache through all `scale` passes (3x faster
    # than whole-array passes); one pass per bit of the node ids.
    thresholds = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    for start in range(0, num_edges, _RMAT_CHUNK):
        count = min(_RMAT_CHUNK, num_edges - start)
        dst_chunk = np.zeros(count, dtype=work)
        src_chunk = np.zeros(count, dtype=work)
        for _ in range(scale):
            r = rng.random(count, dtype=np.float32)
            # quadrant 0 (a), 1 (b), 2 (c), 3 (d): bit 1 is the row (destination) bit,
            # bit 0 the column (source) bit.
            quadrant = sum((r >= t).view(np.int8) for t in thresholds)
            dst_chunk <<= 1
            dst_chunk |= quadrant >> 1
            src_chunk <<= 1
            src_chunk |= quadrant & 1
        dst[start:start + count] = dst_chunk
        src[start:start + count] = src_chunk
    if scramble_ids:
        relabel = rng.permutation(num_nodes).astype(work)
        dst, src = relabel[dst], relabel[src]
    if not self_loops:
        keep = dst != src
        dst, src = dst[keep], src[keep]
    if not duplicates:
        keys = np.unique(dst.astype(np.int64) * num_nodes + src)
        dst, src = (keys // num_nodes).astype(work), (keys % num_nodes).astype(work)
    return _csr_from_edges(src, dst, num_nodes, num_nodes)[0]


def contextual_sbm(num_nodes, num_classes, *, degree=10, homophily=0.8, num_features=16,
                   feature_noise=1.0, seed=0):
    """Contextual stochastic block model: planted classes, graph and features both informative.

    Nodes are split into ``num_classes`` classes of (nearly) equal size. Every destination
    row gets a Poisson(``degree``) number of edges; each edge's source is, with probability
    ``homophily``, a uniformly random node of the row's own class, and otherwise a uniformly
    random node of a uniformly chosen other class. Node features are the class mean plus
    Gaussian noise: ``features[v] = means[labels[v]] + feature_noise * N(0, I)`` with the
    class means drawn from ``N(0, I)``; ``feature_noise`` sets how hard the classes are to
    tell apart from the features alone (averaging over a homophilous neighbourhood, what
    attention layers do, removes much of that noise).

    Parameters
    ----------
    num_nodes : int
        Number of nodes (``num_dst == num_src``); at least ``num_classes``.
    num_classes : int
        Number of classes, >= 1.
    degree : float
        Mean in-degree of a row.
    homophily : float in [0, 1]
        Expected fraction of edges whose two ends share a class (edge homophily). With one
        class every edge is intra-class.
    num_features : int
        Feature dimension.
    feature_noise : float
        Standard deviation of the per-feature noise around the class mean.
    seed : int or numpy.random.Generator
        Seed of the generator.

    Returns
    -------
    graph : CSRGraph
        Square graph of ``num_nodes`` nodes. Self-loops and repeated pairs may occur (rarely);
        a row may be empty (probability ``exp(-degree)``); see :func:`add_self_loops`.
    features : (num_nodes, num_features) float32 array
    labels : (num_nodes,) int64 array
        Class of every node, in ``range(num_classes)``.
    """
    num_nodes = _check_count("num_nodes", num_nodes)
    num_classes = _check_count("num_classes", num_classes, 1)
    num_features = _check_count("num_features", num_features)
    if num_nodes < num_classes:
        raise ValueError(f"num_nodes ({num_nodes}) must be >= num_classes ({num_classes})")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    if not degree >= 0:
        raise ValueError(f"degree must be >= 0, got {degree}")
    if not feature_noise >= 0:
        raise ValueError(f"feature_noise must be >= 0, got {feature_noise}")
    rng = _rng(seed)
    labels = rng.permutation(np.arange(num_nodes, dtype=np.int64) % num_classes)
    members = np.argsort(labels, kind="stable")  # node ids grouped by class
    class_size = np.bincount(labels, minlength=num_classes)
    class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]])

    degrees = rng.poisson(degree, num_nodes)
    dtype = _index_dtype(num_nodes, int(degrees.sum()))
    indptr = np.zeros(num_nodes + 1, dtype=dtype)
    np.cumsum(degrees, out=indptr[1:])
    num_edges = int(indptr[-1])
    dst_class = np.repeat(labels, degrees)
    if num_classes > 1:
        inside = rng.random(num_edges) < homophily
        shift = rng.integers(1, num_classes, num_edges)  # another class, uniformly
        src_class = np.where(inside, dst_class, (dst_class + shift) % num_classes)
    else:
        src_class = dst_class
    offset = (rng.random(num_edges) * class_size[src_class]).astype(np.int64)
    indices = members[class_start[src_class] + offset].astype(dtype)
    graph = CSRGraph(indptr, indices, num_nodes, check="fast")

    means = rng.standard_normal((num_classes, num_features))
    features = means[labels] + feature_noise * rng.standard_normal((num_nodes, num_features))
    return graph, features.astype(np.float32), labels


def add_self_loops(graph, values=None, *, fill_value=1.0, skip_existing=True):
    """The graph with a self-loop ``d -> d`` appended to the end of every row.

    Parameters
    ----------
    graph : CSRGraph
        A square graph (``num_dst == num_src``).
    values : (E,) or (E, ...) array, optional
        Per-edge values to carry along; the new loops get ``fill_value``.
    fill_value : scalar
        Value of the added loops in ``values``.
    skip_existing : bool
        Leave rows that already hold a self-loop unchanged (``True``), or add one to every
        row regardless (``False``).

    Returns
    -------
    graph : CSRGraph
        Old edges keep their order within each row; the loop comes last. A GPU graph comes
        back on the GPU (the work is done on the host).
    values : array
        Only when ``values`` was given: the values in the new graph's edge order.
    """
    if not isinstance(graph, CSRGraph):
        raise TypeError(f"graph must be a CSRGraph, got {type(graph).__name__}")
    if graph.num_dst != graph.num_src:
        raise ValueError(f"add_self_loops needs a square graph, got shape {graph.shape}")
    on_gpu = graph.device == "gpu"
    cpu = graph.to_cpu()
    indptr = cpu.indptr.astype(np.int64)
    num_nodes, num_edges = cpu.num_dst, cpu.num_edges
    degrees = np.diff(indptr)
    rows = np.repeat(np.arange(num_nodes, dtype=np.int64), degrees)
    needs_loop = np.ones(num_nodes, dtype=bool)
    if skip_existing:
        needs_loop[rows[cpu.indices == rows]] = False
    new_indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degrees + needs_loop, out=new_indptr[1:])
    shift = new_indptr[:-1] - indptr[:-1]  # loops added in the rows before each row
    old_position = np.arange(num_edges, dtype=np.int64) + shift[rows]
    loop_rows = np.flatnonzero(needs_loop)
    loop_position = new_indptr[loop_rows + 1] - 1
    new_edges = int(new_indptr[-1])
    dtype = np.promote_types(cpu.index_dtype, _index_dtype(num_nodes, new_edges))
    indices = np.empty(new_edges, dtype=dtype)
    indices[old_position] = cpu.indices
    indices[loop_position] = loop_rows
    result = CSRGraph(new_indptr.astype(dtype), indices, num_nodes, check="none")
    if on_gpu:
        result = result.to_gpu()
    if values is None:
        return result
    xp = graph.xp
    values = xp.asarray(values)
    if values.shape[:1] != (num_edges,):
        raise ValueError(f"values has {values.shape[0] if values.ndim else 0} rows, "
                         f"but the graph has {num_edges} edges")
    new_values = xp.empty((new_edges,) + values.shape[1:], dtype=values.dtype)
    new_values[xp.asarray(old_position)] = values
    new_values[xp.asarray(loop_position)] = fill_value
    return result, new_values


# ---------------------------------------------------------------------------------------
# Text parsing shared by the loaders

def _read_bytes(path):
    """The file's bytes (gunzipped for a .gz name); FileNotFoundError naming it."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as file:
            raw = file.read()
    except (OSError, EOFError) as error:
        if isinstance(error, (FileNotFoundError, PermissionError)):
            raise
        raise ValueError(f"{path}: cannot read the file: {error}") from None
    return raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw  # UTF-8 byte order mark


class _Text:
    """A text file as whitespace-separated tokens, with each line's token count.

    Comments (from a marker to the end of its line) are blanked and delimiters turned into
    spaces first, so the line structure, and every line number, stays as in the file.
    """

    def __init__(self, path, raw, comments, delimiter):
        self.path = os.fspath(path)
        markers = [comments] if isinstance(comments, (str, bytes)) else list(comments or ())
        markers = [m.encode() if isinstance(m, str) else m for m in markers if m]
        present = [m for m in markers if m in raw]
        if present:
            pattern = b"(?:" + b"|".join(re.escape(m) for m in present) + rb")[^\n]*"
            raw = re.sub(pattern, b"", raw)
        if delimiter is None:
            raw = raw.replace(b",", b" ")
        else:
            delimiter = delimiter.encode() if isinstance(delimiter, str) else delimiter
            if delimiter.strip():
                raw = raw.replace(delimiter, b" ")
        self.buf = raw
        chars = np.frombuffer(raw, dtype=np.uint8)
        newlines = np.flatnonzero(chars == 10)
        self.line_start = np.concatenate([[0], newlines + 1]).astype(np.int64)
        if len(raw) and self.line_start[-1] == len(raw):
            self.line_start = self.line_start[:-1]  # the file ends with a newline
        if not len(raw):
            self.line_start = self.line_start[:0]
            self.counts = np.zeros(0, dtype=np.int64)
        else:
            # exactly the bytes that bytes.split() and np.fromstring skip: \t \n \v \f \r and space
            blank = (chars == 32) | ((chars >= 9) & (chars <= 13))
            token_start = ~blank
            token_start[1:] &= blank[:-1]
            # tokens per line: differences of the number of tokens before each line start
            starts = np.flatnonzero(token_start)
            before = np.append(np.searchsorted(starts, self.line_start), len(starts))
            self.counts = np.diff(before)
        self.data_lines = np.flatnonzero(self.counts)  # 0-based numbers of lines with tokens

    def error(self, line_index, message):
        """ValueError naming the file and the (1-based) line."""
        return ValueError(f"{self.path}:{int(line_index) + 1}: {message}")

    def line_text(self, line_index):
        start = int(self.line_start[line_index])
        end = self.buf.find(b"\n", start)
        return self.buf[start:] if end < 0 else self.buf[start:end]

    def check_columns(self, first, ncol, what):
        """All data lines from data row ``first`` on have ``ncol`` tokens, else an error."""
        counts = self.counts[self.data_lines[first:]]
        bad = np.flatnonzero(counts != ncol)
        if len(bad):
            line = self.data_lines[first + bad[0]]
            raise self.error(line, f"expected {ncol} columns ({what}), got {counts[bad[0]]}")

    def _row_offset(self, row):
        return int(self.line_start[self.data_lines[row]]) if row < len(self.data_lines) else len(self.buf)

    def parse(self, first, ncol, kinds):
        """The leading ``len(kinds)`` columns of data rows ``first:``; ``kinds[c]`` is "int" or "float".

        Raises a ValueError naming the line of the first token that is not an integer
        (for "int" columns) or a number (for "float" columns).
        """
        num_rows = len(self.data_lines) - first
        region = self.buf[self._row_offset(first):]
        if len(kinds) == ncol and all(kind == "int" for kind in kinds):
            values = _fromstring(region, np.int64)
            if values is not None and len(values) == num_rows * ncol:
                table = values.reshape(num_rows, ncol)
                return [table[:, c] for c in range(ncol)]
            self._raise_first_bad(first, num_rows, ncol, kinds,
                                  lambda a, b: _fromstring(self.buf[self._row_offset(first + a):
                                                                    self._row_offset(first + b)], np.int64))
        tokens = region.split()
        columns = []
        for c, kind in enumerate(kinds):
            dtype = np.int64 if kind == "int" else np.float64
            column_tokens = tokens[c::ncol]
            values = _fromstring(b" ".join(column_tokens), dtype)
            if values is None or len(values) != num_rows:
                self._raise_first_bad(first, num_rows, ncol, kinds,
                                      lambda a, b: _fromstring(b" ".join(column_tokens[a:b]), dtype))
            columns.append(values)
        return columns

    def _raise_first_bad(self, first, num_rows, ncol, kinds, parse_rows):
        """Bisect for the first row that fails to parse (about two passes over the data)."""
        def ok(a, b):
            values = parse_rows(a, b)
            return values is not None
        low, high = 0, num_rows
        while high - low > 64:
            mid = (low + high) // 2
            if ok(low, mid):
                low = mid
            else:
                high = mid
        for row in range(low, high):
            line = self.data_lines[first + row]
            fields = self.line_text(line).split()
            for c, kind in enumerate(kinds):
                token = fields[c] if c < len(fields) else b""
                if not _token_ok(token, kind):
                    what = "an integer" if kind == "int" else "a number"
                    raise self.error(line, f"column {c + 1}: {token.decode(errors='replace')!r} is not {what}")
        raise self.error(self.data_lines[first + low], "could not parse this line")


def _fromstring(text, dtype):
    """Whitespace-separated numbers of ``text``, or None if any token does not parse."""
    if not text.strip():
        return np.zeros(0, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # older NumPy warns and stops early instead of raising
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


def _token_ok(token, kind):
    try:
        if kind == "int":
            int(token)
        else:
            float(token)
    except ValueError:
        return False
    return _fromstring(token, np.int64 if kind == "int" else np.float64) is not None


def _check_ids(text, first, ids, column, one_based, limit, limit_name):
    """Ids of one column as 0-based int64; errors name the line of the first bad id."""
    low = 1 if one_based else 0
    bad = np.flatnonzero((ids < low) | (ids >= (limit + low if limit is not None else _MAX_NODE_ID)))
    if len(bad):
        row = bad[0]
        value = int(ids[row])
        line = text.data_lines[first + row]
        if value < 0:
            message = f"column {column + 1}: negative node id {value}"
        elif value == 0 and one_based:
            message = f"column {column + 1}: id 0 in a one-based file"
        elif limit is not None:
            message = (f"column {column + 1}: id {value} is out of range {low}..{limit + low - 1} "
                       f"({limit_name} = {limit})")
        else:
            message = f"column {column + 1}: node id {value} is too large"
        raise text.error(line, message)
    return ids - low if low else ids


def _graph_of_edges(src, dst, num_dst, num_src, values, add_loops, dtype, path):
    """CSRGraph (edges stably sorted by destination) and the values in its edge order."""
    graph, perm = _csr_from_edges(src, dst, num_dst, num_src)
    if values is not None:
        values = values[perm]
    return _finish(graph, values, add_loops, dtype, path)


def _finish(graph, values, add_loops, dtype, path):
    if values is not None and dtype is not None:
        values = values.astype(dtype, copy=False)
    if add_loops:
        if graph.num_dst != graph.num_src:
            raise ValueError(f"{path}: add_self_loops needs a square graph, got shape {graph.shape}")
        if values is None:
            graph = add_self_loops(graph)
        else:
            graph, values = add_self_loops(graph, values)
    return graph, values


def _result(graph, values, return_values):
    return (graph, values) if return_values else graph


# ---------------------------------------------------------------------------------------
# Loaders

def load_edge_list(path, *, delimiter=None, comments=("#", "%"), one_based=False, transpose=False,
                   num_nodes=None, add_self_loops=False, dtype=None, return_values=False):
    """Load a text edge list: one edge ``src dst [value ...]`` per line.

    The first column is the **source** and the second the **destination** (PyG's
    ``edge_index`` order, SNAP's ``FromNodeId ToNodeId``): the line ``u v`` puts source
    ``u`` into row ``v``. ``transpose=True`` reads the lines as ``dst src`` instead.

    Parameters
    ----------
    path : str or os.PathLike
        The file; a name ending in ``.gz`` is decompressed.
    delimiter : str, optional
        Column separator. By default any run of whitespace or commas separates columns, so
        whitespace- and comma-separated files both load; a run of delimiters counts as one.
    comments : str or sequence of str
        Comment markers: from a marker to the end of its line is ignored. ``#`` (SNAP) and
        ``%`` (KONECT) by default; ``None`` for none.
    one_based : bool
        Node ids start at 1 (then an id of 0 is an error). Not detected automatically: a
        zero-based file whose node 0 has no edges would be misread.
    transpose : bool
        Lines are ``dst src`` rather than ``src dst``.
    num_nodes : int, optional
        Number of nodes (the graph is ``num_nodes x num_nodes``); by default the largest
        id + 1. Ids out of range are an error.
    add_self_loops : bool
        Give every node without one a self-loop (value 1 in the values).
    dtype : dtype, optional
        dtype of the values (float64 by default).
    return_values : bool
        Also return the third column, in the graph's edge order (None for 2 columns).

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
        in a one-based file, or a third column that is not a number.

    Notes
    -----
    Blank lines and comment lines are skipped; columns after the third are ignored (KONECT
    timestamps, for example).
    """
    text = _Text(path, _read_bytes(path), comments, delimiter)
    if num_nodes is not None:
        num_nodes = _check_count("num_nodes", num_nodes)
    if len(text.data_lines) == 0:
        n = num_nodes or 0
        graph = CSRGraph(np.zeros(n + 1, np.int32), np.zeros(0, np.int32), n, check="none")
        graph, values = _finish(graph, None, add_self_loops, dtype, path)
        return _result(graph, values, return_values)
    ncol = int(text.counts[text.data_lines[0]])
    if ncol < 2:
        raise text.error(text.data_lines[0], f"expected at least 2 columns (source and destination), got {ncol}")
    text.check_columns(0, ncol, "as on the first data line")
    kinds = ["int", "int"] + (["float"] if ncol >= 3 else [])
    columns = text.parse(0, ncol, kinds)  # columns after the third are not parsed
    first, second = (_check_ids(text, 0, columns[c], c, one_based, num_nodes, "num_nodes") for c in (0, 1))
    src, dst = (second, first) if transpose else (first, second)
    if num_nodes is None:
        num_nodes = int(max(src.max(), dst.max())) + 1
    values = columns[2] if ncol >= 3 else None
    graph, values = _graph_of_edges(src, dst, num_nodes, num_nodes, values, add_self_loops, dtype, path)
    return _result(graph, values, return_values)


_MTX_FIELDS = {"real": "float", "double": "float", "integer": "int", "unsigned-integer": "int",
               "complex": "complex", "pattern": None}
_MTX_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


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
    raw = _read_bytes(path)
    end = raw.find(b"\n")
    banner = (raw if end < 0 else raw[:end]).decode(errors="replace").strip()
    words = banner.lower().split()
    if not words or words[0] != "%%matrixmarket":
        raise ValueError(f"{path}:1: not a Matrix Market file: the first line must start with %%MatrixMarket")
    if len(words) != 5 or words[1] != "matrix" or words[2] not in ("coordinate", "array") \
            or words[3] not in _MTX_FIELDS or words[4] not in _MTX_SYMMETRIES:
        raise ValueError(f"{path}:1: unsupported Matrix Market header {banner!r}; expected "
                         f"'%%MatrixMarket matrix coordinate|array "
                         f"{'|'.join(_MTX_FIELDS)} {'|'.join(_MTX_SYMMETRIES)}'")
    fmt, field, symmetry = words[2], words[3], words[4]
    if fmt == "array":
        return _load_mtx_array(path, transpose, add_self_loops, dtype, return_values)
    text = _Text(path, raw, comments=("%",), delimiter=" ")
    if len(text.data_lines) == 0:
        raise ValueError(f"{path}:{len(text.counts)}: the size line 'rows columns entries' is missing")
    size_line = text.data_lines[0]
    if text.counts[size_line] != 3:
        raise text.error(size_line, f"expected the size line 'rows columns entries', got "
                                    f"{text.counts[size_line]} columns")
    sizes = []
    for token in text.line_text(size_line).split():
        try:
            sizes.append(int(token))
        except ValueError:
            raise text.error(size_line, f"size {token.decode(errors='replace')!r} is not an integer") from None
    num_rows, num_cols, num_entries = sizes
    if min(sizes) < 0:
        raise text.error(size_line, f"negative size in {sizes}")
    kind = _MTX_FIELDS[field]
    ncol = {None: 2, "int": 3, "float": 3, "complex": 4}[kind]
    found = len(text.data_lines) - 1
    if found > num_entries:
        raise text.error(text.data_lines[1 + num_entries],
                         f"more entries than the {num_entries} declared on line {size_line + 1}")
    if found < num_entries:
        raise ValueError(f"{path}:{len(text.counts)}: the file ends after {found} of the {num_entries} "
                         f"entries declared on line {size_line + 1}")
    text.check_columns(1, ncol, f"'row column{'' if kind is None else ' value'}"
                                f"{' imaginary' if kind == 'complex' else ''}' for a {field} matrix")
    kinds = ["int", "int"] + {None: [], "int": ["int"], "float": ["float"],
                              "complex": ["float", "float"]}[kind]
    columns = text.parse(1, ncol, kinds) if found else [np.zeros(0, np.int64)] * ncol
    row = _check_ids(text, 1, columns[0], 0, True, num_rows, "rows")
    col = _check_ids(text, 1, columns[1], 1, True, num_cols, "columns")
    values = None
    if kind == "complex":
        values = columns[2] + 1j * columns[3]
    elif kind is not None:
        values = columns[2]
    if symmetry != "general":
        if num_rows != num_cols:
            raise text.error(size_line, f"a {symmetry} matrix must be square, got {num_rows} x {num_cols}")
        off = row != col
        row, col = np.concatenate([row, col[off]]), np.concatenate([col, row[off]])
        if values is not None:
            mirrored = values[off]
            if symmetry == "skew-symmetric":
                mirrored = -mirrored
            elif symmetry == "hermitian":
                mirrored = np.conj(mirrored)
            values = np.concatenate([values, mirrored])
    dst, src, num_dst, num_src = row, col, num_rows, num_cols
    if transpose:
        dst, src, num_dst, num_src = col, row, num_cols, num_rows
    graph, values = _graph_of_edges(src, dst, num_dst, num_src, values, add_self_loops, dtype, path)
    return _result(graph, values, return_values)


def _load_mtx_array(path, transpose, add_loops, dtype, return_values):
    """Dense ('array') Matrix Market files: the nonzero entries become the edges."""
    import scipy.io
    try:
        dense = np.asarray(scipy.io.mmread(path))
    except Exception as error:
        raise ValueError(f"{path}: cannot read the dense Matrix Market file: {error}") from None
    if transpose:
        dense = dense.T
    dst, src = np.nonzero(dense)
    values = dense[dst, src]
    graph, values = _graph_of_edges(src, dst, dense.shape[0], dense.shape[1], values, add_loops, dtype, path)
    return _result(graph, values, return_values)


def load_npz(path, *, transpose=False, add_self_loops=False, dtype=None, return_values=False):
    """Load a graph from a .npz file.

    Three layouts are recognised:

    - a ``scipy.sparse.save_npz`` file (any format scipy writes): row ``i`` of the matrix is
      destination ``i`` and its column indices are the sources, as in :func:`load_mtx`;
      values are the matrix's stored data;
    - ``np.savez`` arrays ``indptr`` and ``indices`` (the graph's own CSR arrays), with
      optional ``num_src`` and ``data`` (or ``values``);
    - ``np.savez`` array ``edge_index`` of shape (2, E), row 0 the sources and row 1 the
      destinations (PyG), with optional ``num_nodes`` and ``data`` (or ``values``).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    transpose : bool
        Swap destinations and sources.
    add_self_loops : bool
        Give every node without one a self-loop (value 1); needs a square graph.
    dtype : dtype, optional
        dtype of the values (the file's by default).
    return_values : bool
        Also return the values in the graph's edge order (None when the file has none).

    Returns
    -------
    graph : CSRGraph
    values : (E,) array or None
        Only with ``return_values=True``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        ``"{path}: ..."`` when the file is not a .npz archive, holds none of the layouts
        above, or holds an invalid structure.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as error:
        raise ValueError(f"{path}: not a readable .npz file ({type(error).__name__}: {error})") from None
    if not hasattr(archive, "files"):
        raise ValueError(f"{path}: holds a single array, not a .npz archive of a graph")
    with archive:
        keys = set(archive.files)
        try:
            if {"format", "shape"} <= keys:
                graph, values = _graph_of_scipy_npz(path, transpose)
            elif {"indptr", "indices"} <= keys:
                num_src = int(archive["num_src"]) if "num_src" in keys else None
                graph = CSRGraph(archive["indptr"], archive["indices"], num_src)
                values = _npz_values(archive, keys)
                if transpose:
                    graph, values = _transposed(graph, values)
            elif "edge_index" in keys:
                edge_index = archive["edge_index"]
                if edge_index.ndim != 2 or edge_index.shape[0] != 2:
                    raise ValueError(f"edge_index must have shape (2, E), got {edge_index.shape}")
                src, dst = edge_index[0].astype(np.int64), edge_index[1].astype(np.int64)
                if transpose:
                    src, dst = dst, src
                if "num_nodes" in keys:
                    num_nodes = int(archive["num_nodes"])
                else:
                    num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
                if len(src) and min(src.min(), dst.min()) < 0:
                    raise ValueError("edge_index has negative node ids")
                if len(src) and max(src.max(), dst.max()) >= num_nodes:
                    raise ValueError(f"edge_index has node ids >= num_nodes = {num_nodes}")
                values = _npz_values(archive, keys)
                graph, perm = _csr_from_edges(src, dst, num_nodes, num_nodes)
                values = values[perm] if values is not None else None
            else:
                raise ValueError("no graph found: expected a scipy.sparse.save_npz file, or arrays "
                                 f"'indptr' and 'indices', or 'edge_index'; found {sorted(keys)}")
        except (ValueError, TypeError) as error:
            if str(error).startswith(path):
                raise
            raise ValueError(f"{path}: {error}") from None
    graph, values = _finish(graph, values, add_self_loops, dtype, path)
    return _result(graph, values, return_values)


def _npz_values(archive, keys):
    for key in ("data", "values"):
        if key in keys:
            return archive[key]
    return None


def _graph_of_scipy_npz(path, transpose):
    matrix = scipy.sparse.load_npz(path)
    if transpose:
        matrix = matrix.T
    if matrix.format == "csr":
        return CSRGraph(matrix.indptr, matrix.indices, matrix.shape[1]), matrix.data
    coo = matrix.tocoo()
    graph, perm = _csr_from_edges(coo.col, coo.row, *coo.shape)
    return graph, coo.data[perm]


def _transposed(graph, values):
    graph_t, perm = graph.transpose()
    return graph_t, (values[perm] if values is not None else None)


def load(path, **kwargs):
    """Load a graph file, choosing the loader by its name.

    ``.mtx`` (or ``.mtx.gz``) -> :func:`load_mtx`, ``.npz`` -> :func:`load_npz`, anything
    else -> :func:`load_edge_list`. Keyword arguments go to that loader.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    **kwargs
        Options of the chosen loader.

    Returns
    -------
    CSRGraph, or (CSRGraph, values) with ``return_values=True``
    """
    name = os.fspath(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".mtx"):
        return load_mtx(path, **kwargs)
    if name.endswith(".npz"):
        return load_npz(path, **kwargs)
    return load_edge_list(path, **kwargs)
