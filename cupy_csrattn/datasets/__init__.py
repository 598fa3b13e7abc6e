"""Graphs in, without hand-written glue: seeded generators and file loaders.

Everything here returns a :class:`~cupy_csrattn.CSRGraph` on the CPU (NumPy arrays; move
it with ``graph.to_gpu()``) in the library's convention: **row ``d`` is a destination node
and its column indices are the source nodes whose messages ``d`` aggregates**.

Generators (vectorized, no Python loop per edge, deterministic for a given ``seed``):

- :func:`uniform_graph`: every row has the same number of random sources;
- :func:`rmat_graph`: R-MAT / Kronecker power-law graphs with the Graph500 parameters;
- :func:`contextual_sbm`: a contextual stochastic block model (planted classes, mostly
  intra-class edges, node features drawn per class) for node classification.

Loaders, each naming the file and line of a malformed entry in its ``ValueError``:

- :func:`load_mtx`: Matrix Market; entry ``(i, j)`` is an edge from source ``j`` to
  destination ``i`` (row ``i`` of the matrix is row ``i`` of the graph, as in scipy);
- :func:`load_npz`: ``scipy.sparse.save_npz`` files (same orientation), or ``np.savez``
  files holding ``indptr``/``indices`` or a PyG-style ``edge_index``;
- :func:`load_edge_list`: text files with one edge ``src dst`` per line (PyG's
  ``edge_index`` order: the second column is the destination row);
- :func:`load`: one of the above, chosen by the file name.

Every loader takes ``transpose=True`` to flip that orientation and ``add_self_loops=True``
to give every node a self-loop; :func:`add_self_loops` does the same to any graph.

A loader refuses a node count that the file declares (a .mtx size line, an .npz
``num_nodes``) or implies (the largest id + 1) when it is far beyond what the file's edges
need: more than ``max(2**20, 16 * edges)``, so that a tiny file cannot ask for terabytes.
Every loader takes ``max_nodes=`` to allow more (and :func:`load_edge_list` an explicit
``num_nodes=``); sizes of ``2**62`` or more, beyond what 64-bit indices address, never load.
"""

from cupy_csrattn.datasets.auto import load
from cupy_csrattn.datasets.edge_list import load_edge_list
from cupy_csrattn.datasets.generators import add_self_loops, contextual_sbm, rmat_graph, uniform_graph
from cupy_csrattn.datasets.mtx import load_mtx
from cupy_csrattn.datasets.npz import load_npz

__all__ = [
    "add_self_loops",
    "contextual_sbm",
    "load",
    "load_edge_list",
    "load_mtx",
    "load_npz",
    "rmat_graph",
    "uniform_graph",
]
