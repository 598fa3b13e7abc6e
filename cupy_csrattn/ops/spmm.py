"""spmm and spmm_backward: edge-weighted neighbour sums."""

import math

import numpy as np
import scipy.sparse

from cupy_csrattn import _validate, backend
from cupy_csrattn.cpu import spmm as cpu_spmm
from cupy_csrattn.gpu import spmm as gpu_spmm
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register


def _matrix_weights(graph, g, values):
    """With weights=None: the sparse matrix's data as (E,) weights, else None (all ones).

    The data must hold one weight per stored entry (``g``, the matrix's graph, has one edge
    per entry): a ValueError naming graph.data otherwise. Integer or bool data (an adjacency
    matrix) take the dtype of values, where ``A @ X`` would promote int32 and int64 data to
    float64; a ValueError where they pass float16's range with float16 values. Floating-point
    data take part in the result dtype like any weights.
    """
    if not (scipy.sparse.issparse(graph) or backend.is_cupyx_sparse(graph)):
        return None
    data = backend.as_array("graph.data", graph.data)
    if data.ndim != 1:
        raise ValueError(f"graph.data must be 1-D, one weight per stored entry, got shape {tuple(data.shape)}")
    _validate.edge_array("graph.data", data, g)
    if data.dtype.kind in "biu" and values.dtype in _validate.FLOAT_DTYPES:
        _fits_float16("graph.data", data, values.dtype)
        return data.astype(values.dtype)
    return _validate.float_array("graph.data", data)


def _fits_float16(name, data, dtype):
    """ValueError naming ``name`` where integer ``data`` taken as float16 (``dtype``) would
    overflow; a host sync, only for float16 and integer types reaching past its range."""
    limit = int(np.finfo(np.float16).max)
    if dtype != np.float16 or data.dtype.kind == "b" or np.iinfo(data.dtype).max <= limit or not data.size:
        return
    low, high = int(data.min()), int(data.max())
    if max(-low, high) > limit:
        value = high if high > limit else low
        raise ValueError(f"{name} holds {value}, beyond the range of float16 ({limit}), the dtype of values")


def _check(graph, g, weights, values):
    """(weights, values, heads, heads_of, features, merge_heads): heads is the trailing shape S
    of the arrays, taken from argument heads_of; merge_heads: a matrix's (E,) data weight
    every head alike, so (N, *S, F) values are computed as (N, prod(S) * F)."""
    values = _validate.float_array("values", values)
    if weights is None:
        heads, features = _validate.node_array("values", values, g.num_src, "source")
        weights = _matrix_weights(graph, g, values)
        return weights, values, heads, "values", features, weights is not None and heads != ()
    weights = _validate.float_array("weights", weights)
    heads = _validate.edge_array("weights", weights, g)
    _, features = _validate.node_array("values", values, g.num_src, "source", heads=heads, heads_of="weights")
    return weights, values, heads, "weights", features, False


def _node_input(place, x, dtype, merge_heads):
    """A node array in canonical layout: (N, 1, H * F) when merge_heads, else (N, H, F) (the
    heads merged in the placed array, a C-contiguous one: a reshape of the caller's could copy
    it unchecked)."""
    x = place.node_input(x, dtype)
    return x.reshape(x.shape[0], 1, math.prod(x.shape[1:])) if merge_heads else x


def _weights_name(given):
    """The argument spmm's weights come from: a sparse matrix's data where none were given."""
    return "weights" if given is not None else "graph.data"


@register(cpu=cpu_spmm.spmm, gpu=gpu_spmm.spmm, kernels=("aggregate",), bytes=traffic.aggregate)
def spmm(graph, weights, values, *, out=None):
    """Edge-weighted sum of source features into each destination.

    ``out[d, h, :] = sum_{e in row d} weights[e, h] * values[src(e), h, :]``

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    weights : (E, *S) float array, or None
        None: the weights are ``graph.data`` when graph is a scipy/cupyx sparse matrix (so
        ``spmm(A, None, X)`` equals ``A @ X``; integer or bool data take the dtype of values),
        and 1 for a CSRGraph or (indptr, indices[, num_src]). Then values may be
        (num_src, *S, F), every head weighted alike.
    values : (num_src, *S, F) float array
        With weights, S is that of the weights.
    out : (num_dst, *S, F) array, optional

    Returns
    -------
    out : (num_dst, *S, F) array; rows with no edges are zero.
    """
    g, order = _validate.resolve_graph(graph)
    given = weights
    weights, values, _, _, _, merge_heads = _check(graph, g, weights, values)
    floats = [values] if weights is None else [weights, values]
    dtype, _ = _validate.result_dtypes(*floats)
    place = Placement(g, order, {_weights_name(given): weights, "values": values})
    weights_c = None if weights is None else place.edge_input(weights, dtype)
    values_c = _node_input(place, values, dtype, merge_heads)
    shape = (g.num_dst,) + tuple(values.shape[1:])
    work, result = place.output("out", out, shape, dtype, (g.num_dst,) + values_c.shape[1:])
    place.run(spmm.op, weights_c, values_c, work)
    return result


@register(
    cpu=cpu_spmm.spmm_backward,
    gpu=gpu_spmm.spmm_backward,
    kernels=("aggregate", "sddmm"),
    bytes=traffic.aggregate_backward,
    forward="spmm",
)
def spmm_backward(graph, weights, values, grad_out):
    """Gradients of spmm.

    ``grad_weights[e, h] = <grad_out[dst(e), h, :], values[src(e), h, :]>`` and
    ``grad_values[s, h, :] = sum_{e: src(e) = s} weights[e, h] * grad_out[dst(e), h, :]``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    weights : (E, *S) float array, or None
        None as for spmm: a sparse matrix's data (grad_values then uses them), else all ones.
    values : (num_src, *S, F) float array
    grad_out : (num_dst, *S, F) float array

    Returns
    -------
    grad_weights : (E, *S) array, or None when weights is None (also for a sparse
        matrix: its data are not a parameter of the call)
    grad_values : (num_src, *S, F) array
    """
    g, order = _validate.resolve_graph(graph)
    given = weights
    with_grad_weights = weights is not None
    weights, values, heads, heads_of, features, merge_heads = _check(graph, g, weights, values)
    grad_out = _validate.float_array("grad_out", grad_out)
    _validate.node_array("grad_out", grad_out, g.num_dst, "destination", heads=heads, heads_of=heads_of)
    _validate.same_features("grad_out", grad_out, features, "values")
    floats = [values, grad_out] + ([] if weights is None else [weights])
    dtype, _ = _validate.result_dtypes(*floats)
    place = Placement(g, order, {_weights_name(given): weights, "values": values, "grad_out": grad_out})
    weights_c = None if weights is None else place.edge_input(weights, dtype)
    values_c = _node_input(place, values, dtype, merge_heads)
    grad_out_c = _node_input(place, grad_out, dtype, merge_heads)
    grad_weights_c = grad_weights = None
    if with_grad_weights:
        grad_weights_c, grad_weights = place.output(
            "grad_weights", None, weights.shape, dtype, weights_c.shape, edge=True
        )
    grad_values_c, grad_values = place.output("grad_values", None, values.shape, dtype, values_c.shape)
    place.run(spmm_backward.op, weights_c, values_c, grad_out_c, grad_weights_c, grad_values_c)
    return grad_weights, grad_values
