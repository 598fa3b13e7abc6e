"""load: a graph file read by the loader that its name calls for."""

from cupy_csrattn.datasets.edge_list import load_edge_list
from cupy_csrattn.datasets.mtx import load_mtx
from cupy_csrattn.datasets.npz import load_npz
from cupy_csrattn.datasets.text import file_name, is_gzip_name


def load(path, **kwargs):
    """Load a graph file, choosing the loader by its name.

    ``.mtx`` (or ``.mtx.gz``) -> :func:`load_mtx`, ``.npz`` -> :func:`load_npz`, anything
    else -> :func:`load_edge_list`. Keyword arguments go to that loader.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The file; its name picks the loader whatever its case (``.MTX.GZ`` too).
    **kwargs
        Options of the chosen loader.

    Returns
    -------
    CSRGraph, or (CSRGraph, values) with ``return_values=True``
    """
    name = file_name(path).lower()
    if is_gzip_name(name):
        name = name[:-3]
    if name.endswith(".mtx"):
        return load_mtx(path, **kwargs)
    if name.endswith(".npz"):
        return load_npz(path, **kwargs)
    return load_edge_list(path, **kwargs)
