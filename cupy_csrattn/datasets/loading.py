"""What every loader shares: its options checked first, and what it does last (edges to a
graph, the values' dtype, self-loops, the result)."""

import warnings

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.datasets.base import check_count, csr_from_edges
from cupy_csrattn.datasets.generators import add_self_loops


def check_options(transpose, add_loops, return_values, dtype, max_nodes):
    """The options every loader takes, checked before the file is read: the flags as bools,
    ``dtype`` as a NumPy dtype of numbers (bool, integer, float or complex) or None,
    ``max_nodes`` as an int or None; TypeError or ValueError naming the argument."""
    transpose = backend.flag("transpose", transpose)
    add_loops = backend.flag("add_self_loops", add_loops)
    return_values = backend.flag("return_values", return_values)
    if dtype is not None:
        # NumPy reads some control characters as type codes ("\n" as uint64, "\t" as int64):
        # a name with whitespace or control characters is not a dtype the caller meant.
        if isinstance(dtype, str) and not (dtype.isprintable() and dtype == dtype.strip()):
            raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}")
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be a NumPy dtype, got {dtype!r}") from None
        if dtype.kind not in "biufc":
            raise ValueError(f"dtype must be a bool, integer, float or complex dtype, got {dtype}")
    if max_nodes is not None:
        max_nodes = check_count("max_nodes", max_nodes)
    return transpose, add_loops, return_values, dtype, max_nodes


def graph_of_edges(src, dst, num_dst, num_src, values, add_loops, dtype, path):
    """CSRGraph (edges stably sorted by destination) and the values in its edge order."""
    graph, perm = csr_from_edges(src, dst, num_dst, num_src)
    if values is not None:
        values = values[perm]
    return finish(graph, values, add_loops, dtype, path)


def finish(graph, values, add_loops, dtype, path):
    """The values cast to ``dtype`` (if given) and, with ``add_loops``, a self-loop on every node."""
    if values is not None and dtype is not None:
        values = _cast_values(values, dtype, path)
    if add_loops:
        if graph.num_dst != graph.num_src:
            raise ValueError(f"{path}: add_self_loops needs a square graph, got shape {graph.shape}")
        if values is None:
            graph = add_self_loops(graph)
        else:
            graph, values = add_self_loops(graph, values)
    return graph, values


def _cast_values(values, dtype, path):
    """``values`` as ``dtype``; a ValueError naming ``dtype`` where that changes a value.

    A value must survive the cast up to rounding, as add_self_loops asks of its fill_value:
    ``astype`` alone wraps 500 to -12 in int8, cuts 1.5 to 1 and NaN to the smallest integer,
    overflows 1e300 to inf in float32 and drops imaginary parts, and the file's data would be
    other numbers without a word.
    """
    if values.dtype == dtype:
        return values
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # ComplexWarning, invalid casts: judged below
        cast = values.astype(dtype)
        changed = np.zeros(values.shape, dtype=bool)
        if values.dtype.kind == "c" and dtype.kind != "c":
            changed |= values.imag != 0
        if dtype.kind in "biu":
            changed |= cast != values
        else:
            changed |= np.isinf(cast) & np.isfinite(values)
    if changed.any():
        first = np.unravel_index(np.argmax(changed), changed.shape)
        raise ValueError(
            f"{path}: dtype={dtype} cannot hold the value {values[first].item()!r} (it would become "
            f"{cast[first].item()!r}); pass a dtype that holds the file's values ({values.dtype} does), or none"
        )
    return cast


def as_result(graph, values, return_values):
    """What a loader returns: the graph, or (graph, values) with ``return_values``."""
    return (graph, values) if return_values else graph
