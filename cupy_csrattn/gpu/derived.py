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
