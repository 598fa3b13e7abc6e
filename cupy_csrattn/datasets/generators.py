"""Seeded graph generators (vectorized, deterministic for a given seed) and add_self_loops."""

import warnings

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.datasets.base import (
    MAX_COUNT,
    check_count,
    check_host_memory,
    check_product,
    check_real,
    csr_from_edges,
    index_dtype,
)
from cupy_csrattn.graph import CSRGraph

_RMAT_CHUNK = 1 << 18


def _rng(seed):
    """A NumPy Generator from ``seed`` (a non-negative integer, a sequence of them, a
    SeedSequence or a Generator); TypeError or ValueError naming ``seed`` otherwise."""
    if isinstance(seed, (bool, np.bool_, float, str, bytes)):  # NumPy would take some of these, or say why not
        raise TypeError(f"seed must be a non-negative integer or a numpy.random.Generator, got {type(seed).__name__}")
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as error:
        raise type(error)(f"seed must be a non-negative integer or a numpy.random.Generator: {error}") from None


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
    num_nodes = check_count("num_nodes", num_nodes)
    degree = check_count("degree", degree)
    num_src = num_nodes if num_src is None else check_count("num_src", num_src)
    check_product("num_nodes * degree", num_nodes, degree)
    num_edges = num_nodes * degree
    if num_edges and num_src == 0:
        raise ValueError("num_src must be >= 1 when the graph has edges")
    check_uniform_memory(num_nodes, degree, num_src)
    dtype = index_dtype(num_src, num_edges)
    indptr = (np.arange(num_nodes + 1, dtype=np.int64) * degree).astype(dtype)
    indices = _rng(seed).integers(0, max(num_src, 1), num_edges, dtype=dtype)
    return CSRGraph(indptr, indices, num_src, check="fast")


def check_uniform_memory(num_nodes, degree, num_src):
    """MemoryError (or ValueError) naming the sizes where uniform_graph's arrays cannot fit this
    machine's memory (checked counts); the benchmark asks before its graphs' turn comes."""
    num_edges = num_nodes * degree
    size = np.dtype(index_dtype(num_src, num_edges)).itemsize  # indptr made in int64, then cast; the indices
    check_host_memory(
        f"uniform_graph(num_nodes={num_nodes}, degree={degree})", (num_nodes + 1) * (8 + size) + num_edges * size
    )


def check_rmat_memory(scale, edge_factor):
    """As check_uniform_memory, for rmat_graph: its edges' two work arrays, then the graph's
    indices and indptr."""
    num_nodes = 1 << scale
    size = np.dtype(np.int32 if scale <= 30 else np.int64).itemsize
    check_host_memory(
        f"rmat_graph(scale={scale}, edge_factor={edge_factor})",
        edge_factor * num_nodes * 3 * size + (num_nodes + 1) * size,
    )


def rmat_graph(
    scale, edge_factor=16, *, a=0.57, b=0.19, c=0.19, self_loops=True, duplicates=True, scramble_ids=False, seed=0
):
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
        Quadrant probabilities (Graph500: 0.57, 0.19, 0.19; d = 0.05): real numbers in
        [0, 1] with ``a + b + c <= 1``; NaN or a string is an error naming the argument.
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
    scale = check_count("scale", scale)
    edge_factor = check_count("edge_factor", edge_factor)
    if scale > 40:
        raise ValueError(f"scale must be <= 40, got {scale}")
    check_product("edge_factor * 2**scale", edge_factor, 1 << scale)
    self_loops = backend.flag("self_loops", self_loops)
    duplicates = backend.flag("duplicates", duplicates)
    scramble_ids = backend.flag("scramble_ids", scramble_ids)
    a, b, c = (check_real(name, value, 0.0, 1.0) for name, value in (("a", a), ("b", b), ("c", c)))
    d = 1.0 - a - b - c
    if d < -1e-12:
        raise ValueError(f"a, b, c must be >= 0 with a + b + c <= 1, got a={a}, b={b}, c={c}")
    rng = _rng(seed)
    num_nodes = 1 << scale
    num_edges = edge_factor * num_nodes
    work = np.int32 if scale <= 30 else np.int64
    check_rmat_memory(scale, edge_factor)
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
        dst[start : start + count] = dst_chunk
        src[start : start + count] = src_chunk
    if scramble_ids:
        relabel = rng.permutation(num_nodes).astype(work)
        dst, src = relabel[dst], relabel[src]
    if not self_loops:
        keep = dst != src
        dst, src = dst[keep], src[keep]
    if not duplicates:
        keys = np.unique(dst.astype(np.int64) * num_nodes + src)
        dst, src = (keys // num_nodes).astype(work), (keys % num_nodes).astype(work)
    return csr_from_edges(src, dst, num_nodes, num_nodes)[0]


def contextual_sbm(num_nodes, num_classes, *, degree=10, homophily=0.8, num_features=16, feature_noise=1.0, seed=0):
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
        Mean in-degree of a row: a finite real number >= 0 (a string is a TypeError).
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
    num_nodes = check_count("num_nodes", num_nodes)
    num_classes = check_count("num_classes", num_classes, 1)
    num_features = check_count("num_features", num_features)
    if num_nodes < num_classes:
        raise ValueError(f"num_nodes ({num_nodes}) must be >= num_classes ({num_classes})")
    homophily = check_real("homophily", homophily, 0.0, 1.0)
    degree = check_real("degree", degree, 0.0)
    feature_noise = check_real("feature_noise", feature_noise, 0.0)
    if degree * num_nodes >= MAX_COUNT:
        raise ValueError(f"degree * num_nodes = {degree * num_nodes:g} edges is more than 64-bit indices can address")
    check_product("num_nodes * num_features", num_nodes, num_features)
    # the int64 node arrays (labels, members, degrees), the features drawn in float64 and
    # returned in float32, and per expected edge its class, source class and offset in int64
    check_host_memory(
        f"contextual_sbm(num_nodes={num_nodes}, degree={degree:g}, num_features={num_features})",
        num_nodes * 24 + num_nodes * num_features * 20 + int(num_nodes * degree) * 24,
    )
    rng = _rng(seed)
    labels = rng.permutation(np.arange(num_nodes, dtype=np.int64) % num_classes)
    members = np.argsort(labels, kind="stable")  # node ids grouped by class
    class_size = np.bincount(labels, minlength=num_classes)
    class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]])

    degrees = rng.poisson(degree, num_nodes)
    dtype = index_dtype(num_nodes, int(degrees.sum()))
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
    with np.errstate(over="ignore"):
        features = (means[labels] + feature_noise * rng.standard_normal((num_nodes, num_features))).astype(np.float32)
    if not np.isfinite(features).all():
        raise ValueError(f"feature_noise = {feature_noise:g} makes features overflow float32")
    return graph, features, labels


def add_self_loops(graph, values=None, *, fill_value=1.0, skip_existing=True):
    """The graph with a self-loop ``d -> d`` appended to the end of every row.

    Parameters
    ----------
    graph : CSRGraph
        A square graph (``num_dst == num_src``).
    values : (E,) or (E, ...) array, optional
        Per-edge values to carry along; the new loops get ``fill_value``.
    fill_value : scalar or array
        Value of the added loops in ``values`` (an array broadcasts over ``values.shape[1:]``).
        It must fit the values' dtype: a fraction, or a number out of range, for integer
        values is a ValueError rather than being cut; so is a complex number for real values
        and a finite number that overflows to infinity (rounding is fine).
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
    skip_existing = backend.flag("skip_existing", skip_existing)
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
    dtype = np.promote_types(cpu.index_dtype, index_dtype(num_nodes, new_edges))
    indices = np.empty(new_edges, dtype=dtype)
    indices[old_position] = cpu.indices
    indices[loop_position] = loop_rows
    result = CSRGraph(new_indptr.astype(dtype), indices, num_nodes, check="none")
    if on_gpu:
        result = result.to_gpu()
    if values is None:
        return result
    xp = graph.xp
    values = xp.asarray(backend.as_array("values", values))  # as_array: a masked array is refused
    if values.dtype.kind not in "biufc":  # a loop's value would be fill_value cast to text, a date, an object
        raise TypeError(f"values must hold numbers (bool, integer, floating or complex), got dtype {values.dtype}")
    if values.shape[:1] != (num_edges,):
        raise ValueError(
            f"values has {values.shape[0] if values.ndim else 0} rows, but the graph has {num_edges} edges"
        )
    fill = _fill_for(values.dtype, fill_value)
    if _broadcast_shape(fill.shape, values.shape[1:]) != values.shape[1:]:
        raise ValueError(
            f"fill_value has shape {fill.shape}, which does not broadcast over the values' trailing shape "
            f"{values.shape[1:]}"
        )
    new_values = xp.empty((new_edges,) + values.shape[1:], dtype=values.dtype)
    new_values[xp.asarray(old_position)] = values
    new_values[xp.asarray(loop_position)] = xp.asarray(fill)
    return result, new_values


def _fill_for(dtype, fill_value):
    """``fill_value`` as an array of ``dtype``; TypeError or ValueError naming it when it does not fit.

    Numbers must keep their value in ``dtype`` up to rounding: a fraction or an out-of-range
    number for integer values, a finite number that overflows floating values, or a complex
    number for real values, is refused rather than cut.
    """
    fill = np.asarray(fill_value.get() if backend.is_cupy_array(fill_value) else fill_value)
    if fill.dtype == object and isinstance(fill_value, int):  # a Python int beyond 64 bits
        try:
            fill = np.asarray(float(fill_value) if dtype.kind in "fc" else None)
        except OverflowError:
            fill = np.asarray(None)
        if fill.dtype == object:
            raise ValueError(f"fill_value {fill_value!r} cannot be stored in values of dtype {dtype}")
    if fill.dtype.kind not in "biufc":
        raise TypeError(f"fill_value must be a number for values of dtype {dtype}, got {fill_value!r}")
    if dtype.kind != "c" and fill.dtype.kind == "c" and np.any(fill.imag != 0):
        raise ValueError(f"fill_value {fill_value!r} is complex, but the values are real ({dtype})")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cast = fill.real.astype(dtype) if dtype.kind != "c" else fill.astype(dtype)
    overflow = dtype.kind in "fc" and np.any(np.isinf(cast) & np.isfinite(fill))
    if overflow or (dtype.kind in "biu" and not np.array_equal(cast, fill)):
        raise ValueError(
            f"fill_value {fill_value!r} cannot be stored in values of dtype {dtype} (it would become "
            f"{cast.tolist()!r}); pass values of a floating dtype or a fill_value that fits"
        )
    return cast


def _broadcast_shape(*shapes):
    """The shape ``shapes`` broadcast to, or None where they do not broadcast."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None
