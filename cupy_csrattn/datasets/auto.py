"""load: a graph file read by the loader that its name calls for."""

import os

from cupy_csrattn.datasets.edge_list import load_edge_list
from cupy_csrattn.datasets.mtx import load_mtx
from cupy_csrattn.datasets.npz import load_npz


def load(path, **kwargs):
    """Load a graph file, choosing the loader by its name.

    ``.mtx`` (or ``.mtx.gz``) -> :func:`load_mtx`, ``.npz`` -> :func:`load_npz`, anything
    else -> :func:`load_edge_list`. Keyword arguments go to that loader.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    **kwargs
        Options of the chosen loader.

    Returns
    -------
    CSRGraph, or (CSRGraph, values) with ``return_values=True``
    """
    name = os.fspath(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".mtx"):
        return load_mtx(path, **kwargs)
    if name.endswith(".npz"):
        return load_npz(path, **kwargs)
    return load_edge_list(path, **kwargs)
