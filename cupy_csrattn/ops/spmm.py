"""spmm and spmm_backward: edge-weighted neighbour sums."""

from cupy_csrattn import _validate
from cupy_csrattn.cpu import spmm as cpu_spmm
from cupy_csrattn.gpu import spmm as gpu_spmm
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register


def _check(g, weights, values):
    values = _validate.float_array("values", values)
    if weights is None:
        heads, features = _validate.node_array("values", values, g.num_src, "source")
        return None, values, heads, features
    weights = _validate.float_array("weights", weights)
    heads = _validate.edge_array("weights", weights, g)
    _, features = _validate.node_array("values", values, g.num_src, "source", heads=heads)
    return weights, values, heads, features


@register(cpu=cpu_spmm.spmm, gpu=gpu_spmm.spmm, kernels=("aggregate",), bytes=traffic.aggregate)
def spmm(graph, weights, values, *, out=None):
    """Edge-weighted sum of source features into each destination.

    ``out[d, h, :] = sum_{e in row d} weights[e, h] * values[src(e), h, :]``

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    weights : (E,) or (E, H) float array, or None
        None means every weight is 1 (then values may be (num_src, F) or (num_src, H, F)).
    values : (num_src, F) or (num_src, H, F) float array
        (num_src, F) with (E,) weights; (num_src, H, F) with (E, H) weights.
    out : (num_dst, F) or (num_dst, H, F) array, optional

    Returns
    -------
    out : (num_dst, F) or (num_dst, H, F) array; rows with no edges are zero.
    """
    g, order = _validate.resolve_graph(graph)
    weights, values, heads, features = _check(g, weights, values)
    floats = [values] if weights is None else [weights, values]
    dtype, _ = _validate.result_dtypes(*floats)
    place = Placement(g, order, floats)
    weights_c = None if weights is None else place.edge_input(weights, dtype)
    values_c = place.node_input(values, dtype, heads)
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

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    weights : (E,) or (E, H) float array, or None (all ones)
    values : (num_src, F) or (num_src, H, F) float array
    grad_out : (num_dst, F) or (num_dst, H, F) float array

    Returns
    -------
    grad_weights : (E,) or (E, H) array, or None when weights is None
    grad_values : (num_src, F) or (num_src, H, F) array
    """
    g, order = _validate.resolve_graph(graph)
    weights, values, heads, features = _check(g, weights, values)
    grad_out = _validate.float_array("grad_out", grad_out)
    _validate.node_array("grad_out", grad_out, g.num_dst, "destination", heads=heads)
    _validate.same_features("grad_out", grad_out, features, "values")
    floats = [values, grad_out] + ([] if weights is None else [weights])
    dtype, _ = _validate.result_dtypes(*floats)
    place = Placement(g, order, floats)
    weights_c = None if weights is None else place.edge_input(weights, dtype)
    values_c = place.node_input(values, dtype, heads)
    grad_out_c = place.node_input(grad_out, dtype, heads)
    grad_weights_c = grad_weights = None
    if weights is not None:
        grad_weights_c, grad_weights = place.output(
            "grad_weights", None, weights.shape, dtype, weights_c.shape, edge=True
        )
    grad_values_c, grad_values = place.output("grad_values", None, values.shape, dtype, values_c.shape)
    place.run(spmm_backward.op, weights_c, values_c, grad_out_c, grad_weights_c, grad_values_c)
    place.finish()
    return grad_weights, grad_values
