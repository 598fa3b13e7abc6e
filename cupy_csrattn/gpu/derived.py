"""Arrays derived from a GPU graph that the launchers need, built once and cached on the graph."""

import numpy as np

from cupy_csrattn import backend


def row_of_edge(graph):
    """(E,) row of each edge in the graph's index dtype (the sddmm kernels' idx_t)."""
    return graph.cached("gpu_row_of_edge", lambda: graph.row_of_edge().astype(graph.index_dtype, copy=False))


def unit_values(graph, heads, dtype):
    """A (max(num_dst, num_src), H, 1) array of ones: as the values of an aggregation, it
    turns it into a plain sum of weights over each row (of the graph or its transpose)."""
    return graph.cached(
        ("gpu_unit_values", heads, np.dtype(dtype).str),
        lambda: backend.cupy.ones((max(graph.num_dst, graph.num_src), heads, 1), dtype),
    )


def transpose_edge_orders(graph):
    """(perm, inverse) for moving (E, H) edge arrays to and from the order of
    graph.transpose(): its edge e is edge perm[e] here, and edge e here is its edge
    inverse[e]. Both of the graph's index dtype when E fits in it (the kernel takes them as
    idx_t), else int64."""

    def build():
        _, perm = graph.transpose()
        dtype = graph.index_dtype if graph.num_edges <= np.iinfo(graph.index_dtype).max + 1 else np.dtype(np.int64)
        inverse = backend.cupy.empty(graph.num_edges, dtype)
        inverse[perm] = backend.cupy.arange(graph.num_edges, dtype=dtype)
        return perm.astype(dtype, copy=False), inverse

    return graph.cached("gpu_transpose_edge_orders", build)
