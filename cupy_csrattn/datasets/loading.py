"""What every loader does last: edges to a graph, the values' dtype, self-loops, the result."""

from cupy_csrattn.datasets.base import csr_from_edges
from cupy_csrattn.datasets.generators import add_self_loops


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
