"""What every loader shares: its options checked first, and what it does last (edges to a
graph, the values' dtype, self-loops, the result)."""

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.datasets.base import check_count, csr_from_edges
from cupy_csrattn.datasets.generators import add_self_loops


def check_options(transpose, add_loops, return_values, dtype, max_nodes):
    """The options every loader takes, checked before the file is read: the flags as bools,
    ``dtype`` as a NumPy dtype of numbers (bool, integer, float or complex) or None,
    ``max_nodes`` as an int or None; TypeError or ValueError naming the argument."""
    transpose = backend.flag("transpose", transpose)
    add_loops = backend.flag("add_self_loops", add_loops)
    return_values = backend.flag("return_values", return_values)
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}") from None
        if dtype.kind not in "biufc":
            raise ValueError(f"dtype must be a bool, integer, float or complex dtype, got {dtype}")
    if max_nodes is not None:
        max_nodes = check_count("max_nodes", max_nodes)
    return transpose, add_loops, return_values, dtype, max_nodes


def graph_of_edges(src, dst, num_dst, num_src, values, add_loops, dtype, path):
    """CSRGraph (edges stably sorted by destination) and the values in its edge order."""
    graph, perm = csr_from_edges(src, dst, num_dst, num_src)
    if values is not None:
        values = values[perm]
    return finish(graph, values, add_loops, dtype, path)


def finish(graph, values, add_loops, dtype, path):
    """The values cast to ``dtype`` (if given) and, with ``add_loops``, a self-loop on every node."""
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


def as_result(graph, values, return_values):
    """What a loader returns: the graph, or (graph, values) with ``return_values``."""
    return (graph, values) if return_values else graph
