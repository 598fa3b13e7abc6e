"""What the generators and the loaders share: argument checks, index dtypes, edges to CSR."""

import numpy as np

from cupy_csrattn.graph import CSRGraph

INT32_MAX = np.iinfo(np.int32).max


def index_dtype(num_nodes, num_edges=0):
    """int32 where every node id and edge offset fits, else int64."""
    return np.int32 if max(num_nodes, num_edges) <= INT32_MAX else np.int64


def check_count(name, value, minimum=0):
    """``value`` as an int >= ``minimum``; TypeError or ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def csr_from_edges(src, dst, num_dst, num_src):
    """(CSRGraph, perm) of in-range edges: :meth:`CSRGraph.from_edge_index` with compact indices.

    Edges are stably sorted by destination; graph edge ``e`` is input edge ``perm[e]``. The
    graph's indptr and indices are int32 when every node id and edge offset fits, else int64,
    whatever the dtype of ``src`` (from_edge_index keeps that dtype, so it is chosen here).
    """
    dtype = index_dtype(max(num_dst, num_src), len(dst))
    return CSRGraph.from_edge_index(src.astype(dtype, copy=False), dst, num_dst, num_src)
