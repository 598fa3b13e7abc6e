"""load_npz: graphs in .npz files (scipy.sparse.save_npz, CSR arrays, or a PyG edge_index)."""

import math
import os
import warnings
import zipfile
import zlib

import numpy as np
import scipy.sparse

from cupy_csrattn import backend
from cupy_csrattn.datasets.base import NodeLimitError, csr_from_edges, too_many_nodes
from cupy_csrattn.datasets.loading import as_result, check_options, finish
from cupy_csrattn.datasets.text import MAX_NODE_ID, file_name
from cupy_csrattn.graph import CSRGraph


def load_npz(path, *, transpose=False, add_self_loops=False, dtype=None, return_values=False, max_nodes=None):
    """Load a graph from a .npz file.

    Three layouts are recognised:

    - a ``scipy.sparse.save_npz`` file (any format scipy writes): row ``i`` of the matrix is
      destination ``i`` and its column indices are the sources, as in :func:`load_mtx`;
      values are the matrix's stored data;
    - ``np.savez`` arrays ``indptr`` and ``indices`` (the graph's own CSR arrays), with
      optional ``num_src`` and ``data`` (or ``values``);
    - ``np.savez`` array ``edge_index`` of shape (2, E), row 0 the sources and row 1 the
      destinations (PyG), with optional ``num_nodes`` and ``data`` (or ``values``).

    Index arrays (``indptr``, ``indices``, ``edge_index``, a scipy archive's ``row``, ``col``
    and ``offsets``) and counts (``num_src``, ``num_nodes``, integer scalars) must have an
    integer dtype: node ids are never rounded.
    ``data`` must be numeric with one entry (row) per edge.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The file.
    transpose : bool
        Swap destinations and sources.
    add_self_loops : bool
        Give every node without one a self-loop (value 1); needs a square graph.
    dtype : dtype, optional
        dtype of the values (the file's by default).
        It must hold every value up to rounding: a value it would change otherwise (500 in
        int8, 1.5 or NaN in an integer dtype, an imaginary part in a real one, 1e300 in
        float32) is a ValueError naming it.
    return_values : bool
        Also return the values in the graph's edge order (None when the file has none).
    max_nodes : int, optional
        Largest node count accepted where the file declares it (``num_nodes``, ``num_src``,
        a scipy matrix's shape) or implies it (the largest id + 1) rather than holding an
        array that long. By default ``max(2**20, 16 * edges)``, so that a tiny file cannot
        ask for terabytes; pass the node count (or more) for sparser ids.

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
        above, or holds an invalid structure: a non-integer index array or count, ``data``
        of another length than the edges, a node count above ``max_nodes``; or when an array
        is damaged (not a .npy member, a bad CRC, deflate data that do not decompress) or
        its .npy header declares more bytes than its member holds (checked before reading).
    MemoryError
        ``"{path}: ..."`` when an array the file holds is larger than this machine's memory
        (checked before reading).
    TypeError
        ``transpose``, ``add_self_loops`` or ``return_values`` that is not a bool, ``dtype``
        that is not a dtype, ``max_nodes`` that is not an integer (checked before the file
        is read; so is ``dtype``'s kind: not a bool, integer, float or complex dtype is a
        ValueError).
    """
    transpose, add_self_loops, return_values, dtype, max_nodes = check_options(
        transpose, add_self_loops, return_values, dtype, max_nodes
    )
    path = file_name(path)
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
                graph, values = _graph_of_scipy_npz(path, archive, keys, transpose, max_nodes)
            elif {"indptr", "indices"} <= keys:
                graph, values = _graph_of_csr_arrays(archive, keys, transpose, max_nodes)
            elif "edge_index" in keys:
                graph, values = _graph_of_edge_index(archive, keys, transpose, max_nodes)
            else:
                raise ValueError(
                    "no graph found: expected a scipy.sparse.save_npz file, or arrays "
                    f"'indptr' and 'indices', or 'edge_index'; found {sorted(keys)}"
                )
        except MemoryError as error:  # an array's declared size (see _check_member)
            raise MemoryError(f"{path}: {error}") from None
        except (ValueError, TypeError) as error:
            if str(error).startswith(path):
                raise
            if isinstance(error, NodeLimitError):  # still a NodeLimitError: a caller may name its own limit
                raise error.after(f"{path}: ") from None
            raise ValueError(f"{path}: {error}") from None
    graph, values = finish(graph, values, add_self_loops, dtype, path)
    return as_result(graph, values, return_values)


def _graph_of_csr_arrays(archive, keys, transpose, max_nodes):
    """Arrays ``indptr``, ``indices`` and optional ``num_src`` and ``data``/``values``."""
    num_src = _count(archive, "num_src") if "num_src" in keys else None
    graph = CSRGraph(_array(archive, "indptr"), _array(archive, "indices"), num_src)
    problem = too_many_nodes(graph.num_src, graph.num_edges, max_nodes)
    if problem:  # the rows are an array in the file; the columns only a number
        what = "'num_src' declares" if num_src is not None else "the largest index in 'indices' + 1 gives"
        raise problem.after(f"{what} ")
    values = _values(archive, keys, graph.num_edges, "indices")
    if transpose:
        graph, values = _transposed(graph, values)
    return graph, values


def _graph_of_edge_index(archive, keys, transpose, max_nodes):
    """Array ``edge_index`` (sources, destinations) and optional ``num_nodes`` and ``data``/``values``."""
    edge_index = _integer_array(archive, "edge_index")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"array 'edge_index' must have shape (2, E), got {edge_index.shape}")
    num_edges = edge_index.shape[1]
    if num_edges and edge_index.min() < 0:
        raise ValueError("array 'edge_index' has negative node ids")
    largest = int(edge_index.max()) if num_edges else -1
    if largest >= MAX_NODE_ID:
        raise ValueError(f"array 'edge_index' has node id {largest}, beyond what 64-bit indices can address")
    src, dst = edge_index.astype(np.int64, copy=False)
    if transpose:
        src, dst = dst, src
    if "num_nodes" in keys:
        num_nodes = _count(archive, "num_nodes")
        if largest >= num_nodes:
            raise ValueError(f"array 'edge_index' has node ids >= num_nodes = {num_nodes}")
        what = "'num_nodes' declares"
    else:
        num_nodes = largest + 1
        what = f"node id {largest} in array 'edge_index' makes"
    problem = too_many_nodes(num_nodes, num_edges, max_nodes)
    if problem:
        raise problem.after(f"{what} ")
    values = _values(archive, keys, num_edges, "edge_index")
    graph, perm = csr_from_edges(src, dst, num_nodes, num_nodes)
    return graph, (values[perm] if values is not None else None)


def _declared(archive, key):
    """(shape, dtype, header bytes) of array ``key`` as its .npy header declares them, or None
    where the archive gives no access to its members (then np.load reads it unchecked);
    ValueError naming it where the member is no .npy array."""
    zip_file = getattr(archive, "zip", None)
    if zip_file is None:
        return None
    name = f"{key}.npy" if f"{key}.npy" in zip_file.namelist() else key
    with zip_file.open(name) as member:
        try:
            version = np.lib.format.read_magic(member)
            read_header = getattr(np.lib.format, f"read_array_header_{min(version[0], 2)}_0")
            shape, _, dtype = read_header(member)
        except ValueError as error:
            raise ValueError(f"array '{key}' is not a .npy array ({error})") from None
        return shape, dtype, member.tell(), zip_file.getinfo(name).file_size


def _check_member(archive, key):
    """Before array ``key`` of the archive is read: np.load allocates the shape its .npy header
    declares, then reads, so a file of a few hundred bytes could ask for terabytes. A header
    declaring more bytes than its member holds is a ValueError naming the array, one beyond this
    machine's memory a MemoryError; a damaged member (a bad CRC, deflate data that do not
    decompress) is a ValueError naming it."""
    try:
        declared = _declared(archive, key)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        raise ValueError(f"array '{key}' cannot be read ({type(error).__name__}: {error})") from None
    if declared is None:
        return
    shape, dtype, header_bytes, member_bytes = declared
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > member_bytes - header_bytes:
        raise ValueError(
            f"array '{key}' declares shape {shape} of {dtype} ({nbytes} bytes), but its member holds"
            f" {member_bytes - header_bytes} bytes of data"
        )
    backend.check_memory(f"array '{key}' of shape {shape} and dtype {dtype}", nbytes, on_gpu=False)


def _array(archive, key):
    """Array ``key`` of the archive, checked first (``_check_member``); a member that turns out
    damaged as it is read is a ValueError naming it."""
    _check_member(archive, key)
    try:
        return archive[key]
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
        raise ValueError(f"array '{key}' cannot be read ({type(error).__name__}: {error})") from None


def _integer_array(archive, key):
    """Array ``key`` of the archive; ValueError naming it unless its dtype is an integer one."""
    array = _array(archive, key)
    if array.dtype.kind not in "iu":
        raise ValueError(f"array '{key}' must have an integer dtype, got {array.dtype} (node ids are not rounded)")
    return array


def _count(archive, key):
    """Integer scalar ``key`` of the archive (a node count) as an int; ValueError naming it."""
    array = _integer_array(archive, key)
    if array.size != 1:
        raise ValueError(f"array '{key}' must be a single integer, got shape {array.shape}")
    value = int(array.reshape(()))
    if not 0 <= value <= MAX_NODE_ID:
        raise ValueError(f"'{key}' must be in 0..2**62 (what 64-bit indices can address), got {value}")
    return value


def _values(archive, keys, num_edges, index_key):
    """Array ``data`` (or ``values``), one entry per edge of ``index_key``; ValueError naming it otherwise."""
    key = next((key for key in ("data", "values") if key in keys), None)
    if key is None:
        return None
    values = _array(archive, key)
    if values.dtype.kind not in "biufc":
        raise ValueError(f"array '{key}' must be numeric, got dtype {values.dtype}")
    if values.ndim == 0 or values.shape[0] != num_edges:
        count = values.shape[0] if values.ndim else 0
        length = "a scalar" if values.ndim == 0 else f"{count} entr{'y' if count == 1 else 'ies'}"
        raise ValueError(f"array '{key}' has {length}, but '{index_key}' has {num_edges} edges")
    return values


_COMPLEX_WARNING = np.exceptions.ComplexWarning if hasattr(np, "exceptions") else np.ComplexWarning  # NumPy < 1.25


# The index arrays of each format scipy.sparse.save_npz writes (dia's offsets, coo's nD coords too).
_SCIPY_INDEX_KEYS = ("indptr", "indices", "row", "col", "coords", "offsets")


def _graph_of_scipy_npz(path, archive, keys, transpose, max_nodes):
    # scipy's reader converts float index arrays to integers, cutting 0.5 to 0, and keeps data
    # of any dtype (text, say): both are refused here as in the other layouts.
    invalid = "not a valid scipy.sparse.save_npz file"
    for key in keys:  # scipy's reader loads each array it uses unchecked
        _check_member(archive, key)
    for key in (key for key in _SCIPY_INDEX_KEYS if key in keys):
        dtype = _stored_dtype(archive, key)
        if dtype is not None and dtype.kind not in "iu":
            raise ValueError(
                f"{invalid}: array '{key}' must have an integer dtype, got {dtype} (node ids are not rounded)"
            )
    data_dtype = _stored_dtype(archive, "data") if "data" in keys else None
    if data_dtype is not None and data_dtype.kind not in "biufc":
        raise ValueError(f"{invalid}: array 'data' must be numeric, got dtype {data_dtype}")
    # scipy's reader trusts the archive: a malformed one raises KeyError or AttributeError, or
    # warns that it drops imaginary parts, from inside it (a missing array, a 'format' that is
    # not text, complex indices): each is a ValueError here.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", _COMPLEX_WARNING)
            matrix = scipy.sparse.load_npz(path)
    except MemoryError:
        raise
    except Exception as error:
        raise ValueError(f"not a valid scipy.sparse.save_npz file ({type(error).__name__}: {error})") from None
    if matrix.ndim != 2:  # save_npz writes 1-D and n-D sparse arrays too
        raise ValueError(f"holds a {matrix.ndim}-D sparse array of shape {matrix.shape}; a graph needs a 2-D matrix")
    # A dimension that the file holds an index pointer array for costs nothing more; the others
    # are only numbers in the file, and the graph may need an array that long.
    declared = {"csr": (1,), "bsr": (1,), "csc": (0,)}.get(matrix.format, (0, 1))
    for axis in declared:
        problem = too_many_nodes(matrix.shape[axis], matrix.nnz, max_nodes)
        if problem:
            raise problem.after(f"the {matrix.format} matrix's shape {matrix.shape} declares ")
    if transpose:
        matrix = matrix.T
    if matrix.format == "csr":
        return CSRGraph(matrix.indptr, matrix.indices, matrix.shape[1]), matrix.data
    coo = matrix.tocoo()
    graph, perm = csr_from_edges(coo.col, coo.row, *coo.shape)
    return graph, coo.data[perm]


def _stored_dtype(archive, key):
    """The dtype of array ``key`` of the archive, read from its .npy header (checked by
    ``_check_member``; scipy's reader loads the array itself next: it is not read twice)."""
    declared = _declared(archive, key)
    return archive[key].dtype if declared is None else declared[1]


def _transposed(graph, values):
    graph_t, perm = graph.transpose()
    return graph_t, (values[perm] if values is not None else None)
