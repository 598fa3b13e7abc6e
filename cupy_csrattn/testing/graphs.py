"""Named CSR graphs that break kernels, for the tests and ``csrattn check``.

Every builder returns a fresh ``GraphData(indptr, indices, num_src)`` of NumPy integer
arrays (a tuple, so it unpacks and can be passed to the ops as a graph tuple).
Row d of the CSR structure is destination node d; ``indices`` are source nodes.
"""

from collections import namedtuple

import numpy as np

GraphData = namedtuple("GraphData", ["indptr", "indices", "num_src"])

HUB_DEGREE = 100_003  # one row of 100k+ edges, not a multiple of 32 or 4


def num_dst_of(graph):
    return len(graph.indptr) - 1


def row_of_edges(indptr):
    """Destination row of every edge, (E,) int64."""
    indptr = np.asarray(indptr, dtype=np.int64)
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def from_degrees(degrees, num_src, seed, dtype=np.int32, sort_rows=False):
    """Random source indices for a degree sequence (duplicates happen when num_src is small)."""
    rng = np.random.default_rng(seed)
    indptr = np.zeros(len(degrees) + 1, dtype=dtype)
    np.cumsum(np.asarray(degrees, dtype=np.int64), out=indptr[1:])
    indices = rng.integers(0, max(num_src, 1), size=int(indptr[-1])).astype(dtype)
    if sort_rows:
        for d in range(len(degrees)):
            indices[indptr[d] : indptr[d + 1]].sort()
    return GraphData(indptr, indices, num_src)


def from_rows(rows, num_src, dtype=np.int32):
    """Graph from explicit per-row source lists, kept in the given order."""
    indptr = np.zeros(len(rows) + 1, dtype=dtype)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.array([s for r in rows for s in r], dtype=dtype)
    return GraphData(indptr, indices, num_src)


# ---------------------------------------------------------------- named builders


def empty():
    """0 destination rows, 0 sources, 0 edges."""
    return GraphData(np.zeros(1, np.int32), np.zeros(0, np.int32), 0)


def empty_with_sources():
    """0 destination rows but 4 source nodes."""
    return GraphData(np.zeros(1, np.int32), np.zeros(0, np.int32), 4)


def all_rows_empty():
    """6 rows, none with an edge."""
    return GraphData(np.zeros(7, np.int32), np.zeros(0, np.int32), 4)


def zero_degree_rows():
    """Zero-degree rows mixed in, first and last rows empty."""
    return from_degrees([0, 3, 0, 0, 5, 1, 0, 2, 0, 4, 0], num_src=8, seed=11)


def single_edge():
    return GraphData(np.array([0, 1], np.int32), np.array([0], np.int32), 1)


def duplicates():
    """Repeated (dst, src) pairs are distinct edges."""
    return from_rows([[2, 2, 2], [0, 1, 0, 1], [3], [3, 3], [1, 0, 1, 0, 1]], num_src=4)


def unsorted_columns():
    return from_rows([[5, 1, 4, 0], [3, 2], [6, 0, 5], [], [2, 6, 1, 0, 4, 3]], num_src=7)


def int64_indices():
    g = from_degrees([2, 0, 7, 1, 3, 4], num_src=9, seed=3, dtype=np.int64)
    assert g.indices.dtype == np.int64 and g.indptr.dtype == np.int64
    return g


def odd_sizes():
    """13 rows, 37 edges: E is not a multiple of 32 or 4."""
    degrees = [3, 1, 4, 1, 5, 0, 2, 6, 5, 3, 5, 0, 2]
    assert sum(degrees) == 37
    return from_degrees(degrees, num_src=11, seed=5)


def warp_boundaries():
    """Row lengths around warp multiples (31/32/33, 63/64/65, 127); E = 455."""
    degrees = [31, 32, 33, 1, 63, 64, 65, 0, 127, 39]
    assert sum(degrees) % 4 != 0 and sum(degrees) % 32 != 0
    return from_degrees(degrees, num_src=50, seed=7)


def wide():
    """num_src much larger than num_dst."""
    return from_degrees([4, 6, 1, 3, 2], num_src=41, seed=13)


def tall():
    """num_dst much larger than num_src (every source heavily shared)."""
    return from_degrees([1, 2, 3, 0, 2, 1, 3, 2, 1, 1, 2, 3, 1, 2, 1, 1], num_src=3, seed=17)


def hub():
    """One row of 100,003 edges among small rows; slow with the loop reference."""
    return from_degrees([2, HUB_DEGREE, 0, 3, 1], num_src=4099, seed=19)


SMALL_GRAPHS = {
    "empty": empty,
    "empty_with_sources": empty_with_sources,
    "all_rows_empty": all_rows_empty,
    "zero_degree_rows": zero_degree_rows,
    "single_edge": single_edge,
    "duplicates": duplicates,
    "unsorted_columns": unsorted_columns,
    "int64_indices": int64_indices,
    "odd_sizes": odd_sizes,
    "warp_boundaries": warp_boundaries,
    "wide": wide,
    "tall": tall,
}
SMALL_GRAPH_NAMES = sorted(SMALL_GRAPHS)
NAMED_GRAPHS = dict(SMALL_GRAPHS, hub=hub)


def named_graph(name):
    return NAMED_GRAPHS[name]()
