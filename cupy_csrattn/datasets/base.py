"""What the generators and the loaders share: argument checks, index dtypes, edges to CSR."""

import math
import numbers

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn._validate import finite_float
from cupy_csrattn.graph import CSRGraph
from cupy_csrattn.index_arrays import NODES_ALWAYS_ALLOWED, NODES_PER_EDGE, node_limit

INT32_MAX = np.iinfo(np.int32).max


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


def check_host_memory(call, nbytes):
    """Before a generator allocates (see backend.check_memory); ``call`` names the sizes that
    asked for ``nbytes`` of arrays."""
    backend.check_memory(call, nbytes, on_gpu=False)


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


class NodeLimitError(ValueError):
    """A node count above a loader's limit (:func:`too_many_nodes`).

    The message is ``context`` (the file, the line, what declares the count) and the refusal
    made of ``count``, ``num_edges``, ``max_nodes`` and ``fix``, kept apart so that a caller
    that sets the limit its own way can name that way instead of the loader's argument: the
    csrattn command has no ``max_nodes=`` but ``--max-nodes`` (:meth:`message`).
    """

    def __init__(self, context, count, num_edges, max_nodes, fix="max_nodes"):
        self.context, self.count, self.num_edges, self.max_nodes, self.fix = context, count, num_edges, max_nodes, fix
        super().__init__(self.message())

    def __reduce__(self):  # the arguments of __init__, not the message (pickle, copy)
        return type(self), (self.context, self.count, self.num_edges, self.max_nodes, self.fix)

    def message(self, option=None):
        """The message; with ``option`` (a command-line option, "--max-nodes") it names the
        option as the way to set the limit, in place of the loader's arguments."""
        count, limit = self.count, node_limit(self.num_edges, self.max_nodes)
        if self.max_nodes is not None:
            given = f"max_nodes = {self.max_nodes}" if option is None else f"{option} {self.max_nodes}"
            return f"{self.context}{count} nodes, more than {given}"
        edges = f"{self.num_edges} edge{'' if self.num_edges == 1 else 's'}"
        without, fix = (
            ("an explicit argument", f"{self.fix}={count}") if option is None else (option, f"{option} {count}")
        )
        return (
            f"{self.context}{count} nodes, more than the {limit} allowed for {edges} without {without} "
            f"(max({NODES_ALWAYS_ALLOWED}, {NODES_PER_EDGE} per edge)); pass {fix} if the graph really has "
            "that many nodes, or renumber them"
        )

    def after(self, prefix):
        """The same refusal with ``prefix`` before its context."""
        return NodeLimitError(prefix + self.context, self.count, self.num_edges, self.max_nodes, self.fix)


def too_many_nodes(count, num_edges, max_nodes, fix="max_nodes"):
    """A :class:`NodeLimitError` saying why ``count`` nodes are refused (to be raised with
    the place before it, :meth:`NodeLimitError.after`), or None when they are not; ``fix``
    names the argument that allows them."""
    if count <= node_limit(num_edges, max_nodes):
        return None
    return NodeLimitError("", count, num_edges, max_nodes, fix)


def csr_from_edges(src, dst, num_dst, num_src):
    """(CSRGraph, perm) of in-range edges: :meth:`CSRGraph.from_edge_index` with compact indices.

    Edges are stably sorted by destination; graph edge ``e`` is input edge ``perm[e]``. The
    graph's indptr and indices are int32 when every node id and edge offset fits, else int64,
    whatever the dtype of ``src`` (from_edge_index keeps that dtype, so it is chosen here).
    """
    dtype = index_dtype(max(num_dst, num_src), len(dst))
    return CSRGraph.from_edge_index(src.astype(dtype, copy=False), dst, num_dst, num_src)
