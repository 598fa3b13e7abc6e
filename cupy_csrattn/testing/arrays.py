"""Random inputs, backend moves and the graph argument in each accepted form, for the tests
and ``csrattn check``."""

import numpy as np
import scipy.sparse

from cupy_csrattn import backend
from cupy_csrattn.graph import CSRGraph

# For cupyx sparse matrices as the graph argument. CuPy is optional, and one that is installed
# but raises on import (backend says why) must not break the import of this module, which
# `csrattn` loads for every command (info is what reports the broken CuPy).
if backend.cupy is None:
    cupyx_sparse = None
else:
    import cupyx.scipy.sparse as cupyx_sparse


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


def trailing_shape(H):
    """The trailing shape S of H: () for None, (H,) for an int, H itself for a tuple."""
    if H is None:
        return ()
    return tuple(H) if isinstance(H, tuple) else (H,)


def edge_array(rng, num_edges, H, dtype, scale=1.0):
    """(E, *S) random array; H as in trailing_shape."""
    return (rng.standard_normal((num_edges, *trailing_shape(H))) * scale).astype(dtype)


def node_vectors(rng, num_nodes, H, F, dtype, scale=1.0):
    """(N, *S, F) random array."""
    return (rng.standard_normal((num_nodes, *trailing_shape(H), F)) * scale).astype(dtype)


def node_scalars(rng, num_nodes, H, dtype, scale=1.0):
    """(N, *S) random array."""
    return (rng.standard_normal((num_nodes, *trailing_shape(H))) * scale).astype(dtype)
