"""Random inputs, backend moves and the graph argument in each accepted form, for the tests
and ``csrattn check``."""

import numpy as np
import scipy.sparse

from cupy_csrattn.graph import CSRGraph

try:  # for cupyx sparse matrices as the graph argument; CuPy is optional
    import cupyx.scipy.sparse as cupyx_sparse
except ImportError:  # pragma: no cover - depends on the environment
    cupyx_sparse = None


def to_xp(xp, a):
    """NumPy arrays (alone or in a tuple / dict) -> arrays of backend xp; all else as is."""
    if isinstance(a, tuple):
        return tuple(to_xp(xp, x) for x in a)
    if isinstance(a, dict):
        return {k: to_xp(xp, v) for k, v in a.items()}
    if isinstance(a, np.ndarray):
        return xp.asarray(a)
    return a


def make_graph(xp, graph, kind="csrgraph"):
    """The graph argument in one of the accepted forms, on backend xp.

    kind: "csrgraph" (CSRGraph of xp arrays), "tuple3" (indptr, indices, num_src),
    "csr" (scipy.sparse / cupyx.scipy.sparse csr_matrix with data 1).
    """
    indptr, indices, num_src = graph
    if kind == "csrgraph":
        return CSRGraph(to_xp(xp, indptr), to_xp(xp, indices), num_src)
    if kind == "tuple3":
        return (to_xp(xp, indptr), to_xp(xp, indices), num_src)
    if kind == "csr":
        shape = (len(indptr) - 1, num_src)
        data = np.ones(len(indices))
        if xp is np:
            return scipy.sparse.csr_matrix((data, indices, indptr), shape=shape)
        return cupyx_sparse.csr_matrix((xp.asarray(data), xp.asarray(indices), xp.asarray(indptr)), shape=shape)
    raise ValueError(f"unknown graph kind {kind!r}")


def edge_array(rng, num_edges, H, dtype, scale=1.0):
    shape = (num_edges,) if H is None else (num_edges, H)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def node_vectors(rng, num_nodes, H, F, dtype, scale=1.0):
    shape = (num_nodes, F) if H is None else (num_nodes, H, F)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def node_scalars(rng, num_nodes, H, dtype, scale=1.0):
    shape = (num_nodes,) if H is None else (num_nodes, H)
    return (rng.standard_normal(shape) * scale).astype(dtype)
