"""Argument checks shared by every op. Each error names the argument it is about."""

import math

import numpy as np
import scipy.sparse

from cupy_csrattn import backend
from cupy_csrattn.graph import CSRGraph, graph_and_edge_order


def resolve_graph(graph):
    """(CSRGraph, edge_order): edge_order is None, or the permutation for CSC/COO matrices.

    graph edge ``e`` is the matrix's stored entry ``edge_order[e]``.
    """
    if isinstance(graph, CSRGraph):
        return graph, None
    if scipy.sparse.issparse(graph) or backend.is_cupyx_sparse(graph):
        return graph_and_edge_order(graph, "full", name="graph", copy=False)
    if isinstance(graph, (tuple, list)) and len(graph) in (2, 3):
        if all(_ndim(part) == 1 for part in graph[:2]):
            return CSRGraph(*graph, copy=False), None  # lives for one call: no copy needed
        raise TypeError(
            f"graph as a {type(graph).__name__} must be (indptr, indices[, num_src]) with 1-D indptr and indices"
        )
    raise TypeError(
        "graph must be a CSRGraph, a scipy or cupyx sparse matrix, or a tuple "
        f"(indptr, indices[, num_src]), got {type(graph).__name__}"
    )


def _ndim(part):
    """np.ndim(part), or -1 where part is no array: a ragged sequence (np.ndim raises NumPy's
    ValueError) or an object whose conversion raises anything else."""
    try:
        return np.ndim(part)
    except Exception:
        return -1


# The dtypes the kernels compute in; every other dtype, floating point included, is refused.
FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def float_array(name, x):
    """x as a NumPy or CuPy array (see backend.as_array); TypeError unless float16, float32 or float64.

    Other floating-point dtypes (long double, bfloat16, the float8 and smaller types of
    ml_dtypes) get a TypeError naming the dtype and what to convert to.
    """
    if x is None:
        raise TypeError(f"{name} must be a floating-point array, got None")
    x = backend.as_array(name, x)
    dtype = x.dtype
    if dtype in FLOAT_DTYPES:
        return x
    if dtype.kind == "f" and dtype.itemsize > 8:  # np.longdouble where it is wider than float64
        raise TypeError(
            f"{name} has dtype {dtype} (long double), which cupy_csrattn does not support: it computes in at "
            "most float64; convert it to float64"
        )
    if dtype.kind == "f" or "float" in dtype.name:  # also ml_dtypes' floats, whose kind is "V"
        raise TypeError(
            f"{name} has dtype {dtype.name}, which cupy_csrattn does not support (only float16, float32 and "
            "float64); convert it to float16 or float32"
        )
    raise TypeError(f"{name} must be a real floating-point array, got dtype {dtype}")


def edge_array(name, x, graph, heads="any", heads_of=None, feature_axis=False):
    """Check an (E, *S) edge array, or an (E, *S, D) one with feature_axis; returns its
    trailing shape S (a tuple, () for (E,) or (E, D)).

    With ``heads`` (a tuple) S must equal it: it is the trailing shape of argument ``heads_of``.
    """
    if x.ndim < (2 if feature_axis else 1):
        wanted = "(E, D) or (E, *S, D)" if feature_axis else "(E,) or (E, *S)"
        raise ValueError(f"{name} must be {wanted}, got shape {x.shape}")
    if x.shape[0] != graph.num_edges:
        raise ValueError(f"{name} has {x.shape[0]} rows, but the graph has {graph.num_edges} edges")
    found = tuple(x.shape[1:-1]) if feature_axis else tuple(x.shape[1:])
    if heads != "any" and found != heads:
        tail = ("D",) if feature_axis else ()
        _mismatch(name, x, found, heads, heads_of, _shape_text(graph.num_edges, heads, tail))
    return found


# Where a graph has fewer nodes than an array has rows, the count may have been inferred from
# the largest id (as PyG's num_nodes is) while nodes past it have no edges.
_COUNT_HINTS = {
    "source": " (built without num_src, a graph has max(indices) + 1 source nodes: pass num_src)",
    "destination": " (from_edge_index without num_dst makes max(dst) + 1 destination nodes: pass num_dst)",
}


def node_array(name, x, num_rows, rows_name, heads="any", feature_axis=True, heads_of=None):
    """Check a node array of shape (N, *S, F) (or (N, *S) without feature_axis).

    Returns (S, F): S is the trailing shape between the rows and the feature axis (a tuple,
    () for (N, F) or (N,)); F is None without feature_axis. heads="any" accepts any S;
    otherwise S must equal ``heads``, the trailing shape of argument ``heads_of``.
    """
    base = 2 if feature_axis else 1
    if x.ndim < base:
        wanted = "(N, F) or (N, *S, F)" if feature_axis else "(N,) or (N, *S)"
        raise ValueError(f"{name} must be {wanted}, got shape {x.shape}")
    if x.shape[0] != num_rows:
        hint = _COUNT_HINTS[rows_name] if x.shape[0] > num_rows else ""
        raise ValueError(f"{name} has {x.shape[0]} rows, but the graph has {num_rows} {rows_name} nodes{hint}")
    found = tuple(x.shape[1:-1]) if feature_axis else tuple(x.shape[1:])
    features = x.shape[-1] if feature_axis else None
    if heads != "any" and found != heads:
        hint = ""
        if feature_axis and found + (1,) == heads:  # DGL's and PyG's (E, H, 1) edge data beside (N, H, F)
            hint = f"; {name}[..., None, :] (a view) has the axis of size 1 it lacks"
        _mismatch(name, x, found, heads, heads_of, _shape_text(num_rows, heads, ("F",) if feature_axis else ()), hint)
    return found, features


def _mismatch(name, x, found, heads, heads_of, expected, hint=""):
    """The ValueError of an array whose trailing shape differs from another argument's."""
    raise ValueError(
        f"{name} has shape {tuple(x.shape)}, trailing shape {found}, but {heads_of} has trailing shape "
        f"{heads}: {name} must be {expected}{hint}"
    )


def same_features(name, x, features, other_name):
    if x.shape[-1] != features:
        raise ValueError(f"{name} has {x.shape[-1]} features in its last axis, but {other_name} has {features}")


def _shape_text(rows, heads, tail):
    return "(" + ", ".join(str(n) for n in (rows, *heads, *tail)) + ("," if not heads and not tail else "") + ")"


def finite_scalar(name, value):
    """float(value) of a finite real number; TypeError naming ``name`` for a bool, a
    timedelta64 (an integer type to NumPy) or a non-number, ValueError where not finite."""
    if isinstance(value, (bool, np.bool_, np.timedelta64)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return finite_float(name, value)


def finite_float(name, value):
    """float(value) of a real number; ValueError naming it where that is not finite, an
    integer past float's range included (float() raises OverflowError)."""
    try:
        value = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be finite, got an integer beyond float's range (1.8e308)") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def dtype_list(name, given, supported):
    """The dtypes ``given`` names (an iterable of dtype-likes, or one), each one of ``supported``
    (NumPy dtypes); all of ``supported`` when ``given`` is None."""
    if given is None:
        return list(supported)
    if isinstance(given, (str, type, np.dtype)):
        given = [given]
    try:
        given = list(given)
    except TypeError:
        raise TypeError(f"{name} must be a dtype or an iterable of dtypes, got {type(given).__name__}") from None
    chosen = []
    for entry in given:
        try:
            dtype = np.dtype(entry)
        except (TypeError, ValueError):  # ValueError: a malformed spec, ("f8", -1)
            raise TypeError(f"{name} must hold dtypes, got {entry!r}") from None
        if dtype not in supported:
            names = ", ".join(d.name for d in supported)
            raise ValueError(f"{name} must hold dtypes among {names}, got {dtype.name}")
        chosen.append(dtype)
    return chosen


def choice(name, value, options):
    """ValueError naming ``name`` unless value is one of the strings ``options`` (tested as a
    string first: ``in`` would compare an array element by element and raise NumPy's error)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be one of {options}, got a {type(value).__name__}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")


def result_dtypes(*arrays, scalars=None):
    """(result dtype, lse dtype) of float inputs: NumPy promotion; lse float32 for float16.

    None entries (optional inputs not given) take no part. ``scalars`` ({name: value}, finite
    floats) are refused where they overflow the compute dtype (the lse dtype: float32 for
    float16 and float32 data), in which both backends multiply by them."""
    dtype = np.result_type(*[a.dtype for a in arrays if a is not None])
    lse_dtype = np.dtype(np.float32) if dtype == np.float16 else dtype
    for name, value in (scalars or {}).items():
        if abs(value) > float(np.finfo(lse_dtype).max):
            raise ValueError(f"{name}={value:g} overflows {lse_dtype}, the type {dtype} data is computed in")
    return dtype, lse_dtype


def out_array(name, out, shape, dtype, on_gpu):
    """Check a caller's out= array: exact shape and dtype, C-contiguous, on the computing device."""
    if on_gpu and not backend.is_cupy_array(out):
        raise TypeError(f"{name} must be a CuPy array when the op runs on the GPU, got {type(out).__name__}")
    if not on_gpu and not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array when the op runs on the CPU, got {type(out).__name__}")
    if isinstance(out, np.ma.MaskedArray):  # written through its data, it would come back under its old mask
        raise TypeError(
            f"{name} is a masked array, whose mask would hide elements of the result; pass a plain array "
            f"(np.asarray({name}))"
        )
    if isinstance(out, np.matrix):  # stays 2-D when reshaped to the backends' (N, H, F) layout
        raise TypeError(f"{name} is a numpy.matrix, which cannot take the result's layout; pass np.asarray({name})")
    if out.dtype != dtype:
        raise TypeError(f"{name} has dtype {out.dtype}, expected {np.dtype(dtype)}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not getattr(out.flags, "writeable", True):  # NumPy only: CuPy arrays have no read-only flag
        raise ValueError(f"{name} is read-only (writeable=False); pass a writeable array")
    if on_gpu and out.device.id != backend.cupy.cuda.Device().id:
        raise ValueError(f"{name} is on GPU {out.device.id}, but the op runs on GPU {backend.cupy.cuda.Device().id}")
