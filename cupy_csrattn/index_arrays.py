"""The index arrays and node counts a CSRGraph is built from: as arrays of the graph's
device and an index dtype, or a TypeError/ValueError naming the argument."""

import operator

import numpy as np

from cupy_csrattn import backend


def index_input(name, x):
    """x as a NumPy or CuPy array (backend.as_array), an empty list or tuple as integers
    (np.asarray([]) would be float64)."""
    return backend.as_array(name, np.zeros(0, np.int32) if isinstance(x, (list, tuple)) and not x else x)


def index_array(name, array, on_gpu):
    """array as a 1-D C-contiguous int32/int64 array on the graph's device (uint64 left to the
    caller); TypeError/ValueError naming it."""
    if backend.is_cupy_array(array):
        on_gpu = True
    dtype = array.dtype
    if dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {dtype}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if on_gpu and not backend.is_cupy_array(array):
        # CuPy copies a NumPy array to the GPU through a C-contiguous one on the host.
        if not array.flags.c_contiguous:
            _check_copy(name, array, dtype, on_gpu=False)
        _check_copy(name, array, dtype, on_gpu=True)
        array = backend.to_device(array, True)
    if dtype in (np.int32, np.int64):
        # The GPU kernels read an index array through its data pointer, as a dense run of
        # elements: a strided view (a[::2], a[::-1]) would be read as the buffer it lies in.
        if array.flags.c_contiguous:
            return array
        _check_copy(name, array, dtype, on_gpu)
        return array.copy()
    if dtype.itemsize < 4 or dtype == np.uint32:
        # Every value of these types fits: int32 for the narrow ones, int64 for uint32.
        converted = np.dtype(np.int32 if dtype.itemsize < 4 else np.int64)
        _check_copy(name, array, converted, on_gpu)
        return array.astype(converted)
    return array  # uint64: converted by the caller once its values are known to fit


def _check_copy(name, array, dtype, on_gpu):
    """Before a copy of index array ``name`` in ``dtype`` is made: MemoryError naming it where
    the copy cannot fit. A zero-stride (broadcast) array holds little memory but copies at its
    whole size."""
    nbytes = len(array) * np.dtype(dtype).itemsize
    backend.check_memory(f"a copy of {name} ({len(array)} elements of {np.dtype(dtype).name})", nbytes, on_gpu)


def uint64_fits(name, array):
    """ValueError naming ``name`` when a uint64 array holds values beyond int64 (a host sync)."""
    if array.dtype == np.uint64 and len(array) and int(array.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values too large for int64")


def node_count(name, value):
    """value as a node count (an int >= 0 whose count + 1, the length of a CSR indptr over
    those nodes, fits int64); TypeError for bool or non-integers, ValueError out of range."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if value >= np.iinfo(np.int64).max:
        raise ValueError(f"{name} must be less than 2**63 - 1 (int64 node ids), got {value}")
    return value


# Node counts that are implied (the largest id + 1) or declared by a file, rather than given
# as an argument, are allowed this many always, and more only up to NODES_PER_EDGE per edge:
# what is allocated per node (an indptr) then stays within a small multiple of what the
# edges cost already, where one stray id would otherwise ask for terabytes.
NODES_ALWAYS_ALLOWED = 1 << 20
NODES_PER_EDGE = 16


def node_limit(num_edges, max_nodes=None):
    """The largest node count taken without question: ``max_nodes`` when given, else
    ``max(NODES_ALWAYS_ALLOWED, NODES_PER_EDGE * num_edges)``."""
    if max_nodes is not None:
        return max_nodes
    return max(NODES_ALWAYS_ALLOWED, NODES_PER_EDGE * int(num_edges))


def count_of_ids(name, high):
    """high + 1: the node count that ids up to ``high`` (in ``name``; -1 for none) imply; a
    ValueError naming ``name`` where that is no node count (see node_count)."""
    if high + 1 >= np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds node id {high}; node ids must be less than 2**63 - 2 (int64 node ids)")
    return high + 1


def check_row_count(dst_name, high_dst, count_name, num_dst, num_edges, inferred):
    """A ValueError naming the ids or the count, before the graph's indptr (and bincount's
    counts), num_dst + 1 entries, is allocated: a count implied by an id far beyond what the
    edges need (as the loaders refuse one; one stray id would ask for terabytes), or one of
    more entries than an array can hold (NumPy's error for it names no argument)."""
    limit = node_limit(num_edges)
    if inferred and num_dst > limit:
        edges = f"{num_edges} edge{'' if num_edges == 1 else 's'}"
        raise ValueError(
            f"{dst_name} holds node id {high_dst}, which makes {num_dst} destination nodes (rows of the graph's "
            f"indptr): more than the {limit} allowed for {edges} without {count_name} (max({NODES_ALWAYS_ALLOWED}, "
            f"{NODES_PER_EDGE} per edge)); pass {count_name}={num_dst} if the graph really has that many, or "
            "renumber them"
        )
    if (num_dst + 1) * np.dtype(np.int64).itemsize > np.iinfo(np.intp).max:
        raise ValueError(
            f"{count_name} = {num_dst} is more destination nodes than an indptr can hold: {num_dst} + 1 "
            "64-bit entries are larger than the largest possible array"
        )
