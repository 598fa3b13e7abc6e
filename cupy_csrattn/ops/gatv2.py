"""Fused GATv2 attention: gatv2_attention and its backward.

GATv2 (Brody et al., "How Attentive are Graph Attention Networks?") applies the attention
vector after the nonlinearity, so an edge's score depends on both endpoints' features:

    score[e, h] = sum_k att[h, k] * leaky_relu(x_dst[dst(e), h, k] + x_src[src(e), h, k])
    out[d, h]   = sum_{e in row d} softmax_e(score)[e, h] * x_src[src(e), h, :]

(PyG's ``GATv2Conv`` with ``share_weights=False``: ``x_dst = x @ W_r``, ``x_src = x @ W_l``.)
The same conventions as graph_attention and gat_attention (see ops/attention.py).
"""

from cupy_csrattn import _validate
from cupy_csrattn.cpu import gatv2 as cpu_gatv2
from cupy_csrattn.gpu import gatv2 as gpu_gatv2
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.attention import check_saved, forward_outputs, run_backward
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register


def _check_gatv2(g, x_dst, x_src, att, negative_slope):
    x_dst = _validate.float_array("x_dst", x_dst)
    x_src = _validate.float_array("x_src", x_src)
    att = _validate.float_array("att", att)
    heads, head_dim = _validate.node_array("x_dst", x_dst, g.num_dst, "destination")
    _validate.node_array("x_src", x_src, g.num_src, "source", heads=heads, heads_of="x_dst")
    _validate.same_features("x_src", x_src, head_dim, "x_dst")
    att_shape = (*heads, head_dim)
    if tuple(att.shape) != att_shape:
        raise ValueError(f"att has shape {tuple(att.shape)}; to match x_dst it must be (*S, D) = {att_shape}")
    negative_slope = _validate.finite_scalar("negative_slope", negative_slope)
    return x_dst, x_src, att, heads, head_dim, negative_slope


def _place_inputs(place, dtype, heads, head_dim, x_dst, x_src, att):
    x_dst_c = place.node_input(x_dst, dtype)
    x_src_c = place.node_input(x_src, dtype)
    att_c = place.dense_input(att, dtype, (x_dst_c.shape[1], head_dim))
    return x_dst_c, x_src_c, att_c


@register(
    cpu=cpu_gatv2.gatv2_attention,
    gpu=gpu_gatv2.gatv2_attention,
    kernels=("gatv2", "aggregate"),
    bytes=traffic.gatv2_attention,
)
def gatv2_attention(graph, x_dst, x_src, att, *, negative_slope=0.2, out=None, return_lse=False):
    """Fused GATv2 attention: softmax over each row of sum_k att[k] * leaky_relu(x_dst[d] + x_src[s])[k],
    weighting x_src[s].

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    x_dst : (num_dst, [*S,] D) float array
        S: any trailing shape of heads ((H,) most often), shared by every argument.
    x_src : (num_src, [*S,] D) float array
        Enters the scores and is the message.
    att : ([*S,] D) float array
    negative_slope : float
    out : (num_dst, [*S,] D) array, optional
    return_lse : bool
        Also return the per-row log-sum-exp of the scores (needed by the backward).

    Returns
    -------
    out : (num_dst, [*S,] D) array; zero for rows with no edges.
    lse : (num_dst, [*S]) array, only with return_lse
        -inf for rows with no edges (or all scores -inf); float32 for float16 inputs.
    """
    g, order = _validate.resolve_graph(graph)
    x_dst, x_src, att, heads, head_dim, negative_slope = _check_gatv2(g, x_dst, x_src, att, negative_slope)
    dtype, lse_dtype = _validate.result_dtypes(x_dst, x_src, att, scalars={"negative_slope": negative_slope})
    place = Placement(g, order, dict(x_dst=x_dst, x_src=x_src, att=att))
    x_dst_c, x_src_c, att_c = _place_inputs(place, dtype, heads, head_dim, x_dst, x_src, att)
    out_c, lse_c, result = forward_outputs(
        place, g, heads, head_dim, dtype, lse_dtype, out, return_lse, x_dst_c.shape[1]
    )
    place.run(gatv2_attention.op, x_dst_c, x_src_c, att_c, negative_slope, out_c, lse_c)
    return result


@register(
    cpu=cpu_gatv2.gatv2_attention_backward,
    gpu=gpu_gatv2.gatv2_attention_backward,
    kernels=("gatv2", "aggregate", "attention"),
    bytes=traffic.gatv2_attention_backward,
    forward="gatv2_attention",
)
def gatv2_attention_backward(graph, x_dst, x_src, att, out, grad_out, lse, *, negative_slope=0.2):
    """Gradients of gatv2_attention with respect to x_dst, x_src and att.

    With ``z = x_dst[d] + x_src[s]``, ``p`` the weights recomputed from lse and
    ``ds = p * (<grad_out[d], x_src[s]> - <grad_out[d], out[d]>)`` per edge and head:
    ``grad_x_dst[d] = sum_e ds * att * leaky_relu'(z)``,
    ``grad_x_src[s] = sum_e (p * grad_out[d] + ds * att * leaky_relu'(z))`` and
    ``grad_att = sum over every edge of ds * leaky_relu(z)``, where leaky_relu'(z) is 1 for
    z > 0 and negative_slope otherwise (also at 0).

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    x_dst, x_src, att : float arrays, shaped as for gatv2_attention
    out : (num_dst, *S, D) float array, the forward's output
    grad_out : (num_dst, *S, D) float array
    lse : (num_dst, *S) float array, the forward's log-sum-exp
    negative_slope : float

    Returns
    -------
    grad_x_dst, grad_x_src, grad_att : arrays shaped like x_dst, x_src, att
    """
    g, order = _validate.resolve_graph(graph)
    x_dst, x_src, att, heads, head_dim, negative_slope = _check_gatv2(g, x_dst, x_src, att, negative_slope)
    out, grad_out, lse = check_saved(g, heads, "x_dst", head_dim, out, grad_out, lse, "x_src")
    dtype, lse_dtype = _validate.result_dtypes(
        x_dst, x_src, att, out, grad_out, scalars={"negative_slope": negative_slope}
    )
    place = Placement(g, order, dict(x_dst=x_dst, x_src=x_src, att=att, out=out, grad_out=grad_out, lse=lse))
    x_dst_c, x_src_c, att_c = _place_inputs(place, dtype, heads, head_dim, x_dst, x_src, att)
    out_c, grad_out_c = (place.node_input(x, dtype) for x in (out, grad_out))
    lse_c = place.node_input(lse, lse_dtype, per_node_scalar=True)
    return run_backward(
        place,
        gatv2_attention_backward.op,
        dtype,
        (x_dst_c, x_src_c, att_c, out_c, grad_out_c, lse_c, negative_slope),
        (("x_dst", x_dst, x_dst_c), ("x_src", x_src, x_src_c), ("att", att, att_c)),
    )
