"""attention_aggregate and its backward: softmax-weighted aggregation of given edge scores, fused.

The same conventions as the fused attentions (see ops/attention.py).
"""

from cupy_csrattn import _validate
from cupy_csrattn.cpu import attention as cpu_attention
from cupy_csrattn.gpu import attention as gpu_attention
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.attention import forward_outputs
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register


def _check_aggregate(g, scores, values):
    scores = _validate.float_array("scores", scores)
    values = _validate.float_array("values", values)
    heads = _validate.edge_array("scores", scores, g)
    _, features = _validate.node_array("values", values, g.num_src, "source", heads=heads, heads_of="scores")
    return scores, values, heads, features


@register(
    cpu=cpu_attention.attention_aggregate,
    gpu=gpu_attention.attention_aggregate,
    kernels=("aggregate",),
    bytes=traffic.aggregate,
)
def attention_aggregate(graph, scores, values, *, out=None, return_lse=False):
    """Softmax-weighted neighbour sum, fused: ``spmm(graph, edge_softmax(graph, scores), values)``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    scores : (E, *S) float array
    values : (num_src, *S, F) float array
    out : (num_dst, *S, F) array, optional
    return_lse : bool
        Also return the per-row log-sum-exp of the scores.

    Returns
    -------
    out : (num_dst, *S, F) array; zero for rows with no edges.
    lse : (num_dst, *S) array, only with return_lse
        -inf for rows with no edges (or all scores -inf); float32 for float16 inputs.
    """
    g, order = _validate.resolve_graph(graph)
    scores, values, heads, features = _check_aggregate(g, scores, values)
    dtype, lse_dtype = _validate.result_dtypes(scores, values)
    place = Placement(g, order, dict(scores=scores, values=values))
    scores_c = place.edge_input(scores, dtype)
    values_c = place.node_input(values, dtype)
    out_c, lse_c, result = forward_outputs(
        place, g, heads, features, dtype, lse_dtype, out, return_lse, scores_c.shape[1]
    )
    place.run(attention_aggregate.op, scores_c, values_c, out_c, lse_c)
    return result


@register(
    cpu=cpu_attention.attention_aggregate_backward,
    gpu=gpu_attention.attention_aggregate_backward,
    kernels=("aggregate", "softmax", "sddmm"),
    bytes=traffic.aggregate_backward,
    forward="attention_aggregate",
)
def attention_aggregate_backward(graph, scores, values, grad_out, *, lse=None):
    """Gradients of attention_aggregate with respect to scores and values.

    With ``p`` the softmax weights and ``dp[e] = <grad_out[dst(e)], values[src(e)]>``:
    ``grad_scores = p * (dp - sum_{row} p * dp)``,
    ``grad_values[s] = sum_{e: src(e) = s} p[e] * grad_out[dst(e)]``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    scores : (E, *S) float array
    values : (num_src, *S, F) float array
    grad_out : (num_dst, *S, F) float array
    lse : (num_dst, *S) float array, optional
        The forward's log-sum-exp; recomputed when omitted.

    Returns
    -------
    grad_scores : (E, *S) array
    grad_values : (num_src, *S, F) array
    """
    g, order = _validate.resolve_graph(graph)
    scores, values, heads, features = _check_aggregate(g, scores, values)
    grad_out = _validate.float_array("grad_out", grad_out)
    _validate.node_array("grad_out", grad_out, g.num_dst, "destination", heads=heads, heads_of="scores")
    _validate.same_features("grad_out", grad_out, features, "values")
    if lse is not None:
        lse = _validate.float_array("lse", lse)
        _validate.node_array("lse", lse, g.num_dst, "destination", heads=heads, feature_axis=False, heads_of="scores")
    dtype, lse_dtype = _validate.result_dtypes(scores, values, grad_out)
    place = Placement(g, order, dict(scores=scores, values=values, grad_out=grad_out, lse=lse))
    scores_c = place.edge_input(scores, dtype)
    values_c = place.node_input(values, dtype)
    grad_out_c = place.node_input(grad_out, dtype)
    lse_c = None if lse is None else place.node_input(lse, lse_dtype, per_node_scalar=True)
    grad_scores_c, grad_scores = place.output("grad_scores", None, scores.shape, dtype, scores_c.shape, edge=True)
    grad_values_c, grad_values = place.output("grad_values", None, values.shape, dtype, values_c.shape)
    place.run(attention_aggregate_backward.op, scores_c, values_c, grad_out_c, lse_c, grad_scores_c, grad_values_c)
    return grad_scores, grad_values
