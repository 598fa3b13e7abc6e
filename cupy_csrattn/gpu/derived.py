"""Arrays derived from a GPU graph that the launchers need, built once and cached on the graph."""

import numpy as np

from cupy_csrattn import backend


def edge_ends(graph):
    """(index dtype, row_of_edge, indices) for the sddmm kernels, which take both as idx_t:
    the graph's own index dtype and indices where its row numbers fit that dtype; else (more
    than 2**31 rows with int32 indices) int64, the indices converted once."""

    def build():
        rows = graph.row_of_edge()
        if graph.num_dst - 1 <= np.iinfo(graph.index_dtype).max:
            return np.dtype(graph.index_dtype), rows.astype(graph.index_dtype, copy=False), graph.indices
        return np.dtype(np.int64), rows.astype(np.int64, copy=False), graph.indices.astype(np.int64)

    return graph.cached("gpu_edge_ends", build)


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
