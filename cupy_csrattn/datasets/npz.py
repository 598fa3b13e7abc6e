"""load_npz: graphs in .npz files (scipy.sparse.save_npz, CSR arrays, or a PyG edge_index)."""

import os

import numpy as np
import scipy.sparse

from cupy_csrattn.datasets.base import csr_from_edges
from cupy_csrattn.datasets.loading import as_result, finish
from cupy_csrattn.graph import CSRGraph


def load_npz(path, *, transpose=False, add_self_loops=False, dtype=None, return_values=False):
    """Load a graph from a .npz file.

    Three layouts are recognised:

    - a ``scipy.sparse.save_npz`` file (any format scipy writes): row ``i`` of the matrix is
      destination ``i`` and its column indices are the sources, as in :func:`load_mtx`;
      values are the matrix's stored data;
    - ``np.savez`` arrays ``indptr`` and ``indices`` (the graph's own CSR arrays), with
      optional ``num_src`` and ``data`` (or ``values``);
    - ``np.savez`` array ``edge_index`` of shape (2, E), row 0 the sources and row 1 the
      destinations (PyG), with optional ``num_nodes`` and ``data`` (or ``values``).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    transpose : bool
        Swap destinations and sources.
    add_self_loops : bool
        Give every node without one a self-loop (value 1); needs a square graph.
    dtype : dtype, optional
        dtype of the values (the file's by default).
    return_values : bool
        Also return the values in the graph's edge order (None when the file has none).

    Returns
    -------
    graph : CSRGraph
    values : (E,) array or None
        Only with ``return_values=True``.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        ``"{path}: ..."`` when the file is not a .npz archive, holds none of the layouts
        above, or holds an invalid structure.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as error:
        raise ValueError(f"{path}: not a readable .npz file ({type(error).__name__}: {error})") from None
    if not hasattr(archive, "files"):
        raise ValueError(f"{path}: holds a single array, not a .npz archive of a graph")
    with archive:
        keys = set(archive.files)
        try:
            if {"format", "shape"} <= keys:
                graph, values = _graph_of_scipy_npz(path, transpose)
            elif {"indptr", "indices"} <= keys:
                num_src = int(archive["num_src"]) if "num_src" in keys else None
                graph = CSRGraph(archive["indptr"], archive["indices"], num_src)
                values = _npz_values(archive, keys)
                if transpose:
                    graph, values = _transposed(graph, values)
            elif "edge_index" in keys:
                edge_index = archive["edge_index"]
                if edge_index.ndim != 2 or edge_index.shape[0] != 2:
                    raise ValueError(f"edge_index must have shape (2, E), got {edge_index.shape}")
                src, dst = edge_index[0].astype(np.int64), edge_index[1].astype(np.int64)
                if transpose:
                    src, dst = dst, src
                if "num_nodes" in keys:
                    num_nodes = int(archive["num_nodes"])
                else:
                    num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
                if len(src) and min(src.min(), dst.min()) < 0:
                    raise ValueError("edge_index has negative node ids")
                if len(src) and max(src.max(), dst.max()) >= num_nodes:
                    raise ValueError(f"edge_index has node ids >= num_nodes = {num_nodes}")
                values = _npz_values(archive, keys)
                graph, perm = csr_from_edges(src, dst, num_nodes, num_nodes)
                values = values[perm] if values is not None else None
            else:
                raise ValueError(
                    "no graph found: expected a scipy.sparse.save_npz file, or arrays "
                    f"'indptr' and 'indices', or 'edge_index'; found {sorted(keys)}"
                )
        except (ValueError, TypeError) as error:
            if str(error).startswith(path):
                raise
            raise ValueError(f"{path}: {error}") from None
    graph, values = finish(graph, values, add_self_loops, dtype, path)
    return as_result(graph, values, return_values)


def _npz_values(archive, keys):
    for key in ("data", "values"):
        if key in keys:
            return archive[key]
    return None


def _graph_of_scipy_npz(path, transpose):
    matrix = scipy.sparse.load_npz(path)
    if transpose:
        matrix = matrix.T
    if matrix.format == "csr":
        return CSRGraph(matrix.indptr, matrix.indices, matrix.shape[1]), matrix.data
    coo = matrix.tocoo()
    graph, perm = csr_from_edges(coo.col, coo.row, *coo.shape)
    return graph, coo.data[perm]


def _transposed(graph, values):
    graph_t, perm = graph.transpose()
    return graph_t, (values[perm] if values is not None else None)
