"""What the generators and the loaders share: argument checks, index dtypes, edges to CSR."""

import math
import numbers

import numpy as np

from cupy_csrattn._validate import finite_float
from cupy_csrattn.graph import CSRGraph

INT32_MAX = np.iinfo(np.int32).max

# Node counts a file may declare or imply without an explicit argument: this many always,
# and more only up to NODES_PER_EDGE per edge, so that what a loader allocates for
# its nodes stays within a small multiple of what the file's edges cost already.
NODES_ALWAYS_ALLOWED = 1 << 20
NODES_PER_EDGE = 16


def index_dtype(num_nodes, num_edges=0):
    """int32 where every node id and edge offset fits, else int64."""
    return np.int32 if max(num_nodes, num_edges) <= INT32_MAX else np.int64


# The most nodes, edges or elements a generator makes: offsets and products of two counts
# stay far from the end of int64.
MAX_COUNT = 1 << 62


def check_count(name, value, minimum=0):
    """``value`` as an int >= ``minimum`` and <= MAX_COUNT; TypeError or ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > MAX_COUNT:
        raise ValueError(f"{name} must be at most 2**62, got {value}")
    return int(value)


def check_product(names, *counts):
    """ValueError naming ``names`` when the product of ``counts`` (checked counts) exceeds MAX_COUNT."""
    if math.prod(counts) > MAX_COUNT:
        raise ValueError(f"{names} = {math.prod(counts)} is more than 2**62, the most a generator makes")


def check_real(name, value, low=None, high=None):
    """``value`` as a finite float, >= ``low`` and <= ``high`` when given; TypeError or ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = finite_float(name, value)
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def node_limit(num_edges, max_nodes=None):
    """The largest node count a loader accepts without question: ``max_nodes`` when given,
    else ``max(NODES_ALWAYS_ALLOWED, NODES_PER_EDGE * num_edges)``."""
    if max_nodes is not None:
        return max_nodes
    return max(NODES_ALWAYS_ALLOWED, NODES_PER_EDGE * int(num_edges))


def too_many_nodes(count, num_edges, max_nodes, fix="max_nodes"):
    """Why ``count`` nodes are refused (the end of a loader's message: "{count} nodes, more than
    ..."), or None when they are not; ``fix`` names the argument that allows them."""
    limit = node_limit(num_edges, max_nodes)
    if count <= limit:
        return None
    if max_nodes is not None:
        return f"{count} nodes, more than max_nodes = {max_nodes}"
    edges = f"{num_edges} edge{'' if num_edges == 1 else 's'}"
    return (
        f"{count} nodes, more than the {limit} allowed for {edges} without an explicit argument "
        f"(max({NODES_ALWAYS_ALLOWED}, {NODES_PER_EDGE} per edge)); pass {fix}={count} if the graph "
        "really has that many nodes, or renumber them"
    )


def csr_from_edges(src, dst, num_dst, num_src):
    """(CSRGraph, perm) of in-range edges: :meth:`CSRGraph.from_edge_index` with compact indices.

    Edges are stably sorted by destination; graph edge ``e`` is input edge ``perm[e]``. The
    graph's indptr and indices are int32 when every node id and edge offset fits, else int64,
    whatever the dtype of ``src`` (from_edge_index keeps that dtype, so it is chosen here).
    """
    dtype = index_dtype(max(num_dst, num_src), len(dst))
    return CSRGraph.from_edge_index(src.astype(dtype, copy=False), dst, num_dst, num_src)
