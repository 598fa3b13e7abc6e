"""Fused attentions whose scores come from node arrays and an optional edge term:
graph_attention and gat_attention, and what the fused ops share.

    graph_attention: score[e, h] = scale * <q[dst(e), h], k[src(e), h] + edge_feat[e, h]>,
                     message v[src(e), h] + edge_feat[e, h]   (PyG's TransformerConv)
    gat_attention:   score[e, h] = leaky_relu(a_dst[dst(e), h] + a_src[src(e), h] + edge_score[e, h]),
                     message values[src(e), h]                 (PyG's GATConv)
    out[d, h] = sum_{e in row d} softmax_e(score)[e, h] * message[e, h]

The edge terms are optional (zero when omitted). The forward ops return ``out`` and, with
``return_lse=True``, the per-row log-sum-exp of the scores, which their backward ops use to
recompute the weights without storing them.
"""

import math

from cupy_csrattn import _validate, backend
from cupy_csrattn.cpu import attention as cpu_attention
from cupy_csrattn.gpu import attention as gpu_attention
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register


def forward_outputs(place, g, heads, features, dtype, lse_dtype, out, return_lse, canonical_heads):
    """out (num_dst, *S, F) and, with return_lse, lse (num_dst, *S), S the trailing shape ``heads``."""
    return_lse = backend.flag("return_lse", return_lse)
    out_c, out_result = place.output(
        "out", out, (g.num_dst, *heads, features), dtype, (g.num_dst, canonical_heads, features)
    )
    lse_c = lse_result = None
    if return_lse:
        lse_c, lse_result = place.output("lse", None, (g.num_dst, *heads), lse_dtype, (g.num_dst, canonical_heads))
    return out_c, lse_c, ((out_result, lse_result) if return_lse else out_result)


def check_saved(g, heads, heads_of, features, out, grad_out, lse, values_name):
    """Checks of the forward's out, the incoming grad_out and the forward's lse.

    heads_of: the argument whose trailing shape they must have; values_name: the op's name for
    the array whose feature width out must have (v or values).
    """
    out = _validate.float_array("out", out)
    grad_out = _validate.float_array("grad_out", grad_out)
    lse = _validate.float_array("lse", lse)
    for name, array in (("out", out), ("grad_out", grad_out)):
        _validate.node_array(name, array, g.num_dst, "destination", heads=heads, heads_of=heads_of)
        _validate.same_features(name, array, features, values_name)
    _validate.node_array("lse", lse, g.num_dst, "destination", heads=heads, feature_axis=False, heads_of=heads_of)
    return out, grad_out, lse


def run_backward(place, op, dtype, args, differentiated, edge_input=(None, None, None)):
    """Run the backward op ``op`` of a fused attention; returns its gradients.

    args: its canonical inputs and scalars, passed first; differentiated: (name, array,
    canonical array) of each input whose gradient follows them, in order; edge_input: the same
    of its optional edge input (array None when not given), passed with its gradient by keyword.
    The gradients are shaped like their inputs; the edge input's comes last, in its edge order.
    """
    grads = [place.output(f"grad_{name}", None, x.shape, dtype, x_c.shape) for name, x, x_c in differentiated]
    works = [work for work, _ in grads]
    name, x, x_c = edge_input
    optional = {}
    if x is not None:
        grads.append(place.output(f"grad_{name}", None, x.shape, dtype, x_c.shape, edge=True))
        optional = {name: x_c, f"grad_{name}": grads[-1][0]}
    place.run(op, *args, *works, **optional)
    return tuple(result for _, result in grads)


# -- graph_attention -----------------------------------------------------------------


def _check_qkv(g, q, k, v, scale, edge_feat):
    q = _validate.float_array("q", q)
    k = _validate.float_array("k", k)
    v = _validate.float_array("v", v)
    heads, head_dim = _validate.node_array("q", q, g.num_dst, "destination")
    _validate.node_array("k", k, g.num_src, "source", heads=heads, heads_of="q")
    _validate.same_features("k", k, head_dim, "q")
    _, features = _validate.node_array("v", v, g.num_src, "source", heads=heads, heads_of="q")
    if edge_feat is not None:
        # added to the key and to the value: its width is both q's and v's
        edge_feat = _validate.float_array("edge_feat", edge_feat)
        _validate.edge_array("edge_feat", edge_feat, g, heads=heads, heads_of="q", feature_axis=True)
        _validate.same_features("edge_feat", edge_feat, features, "v")
        _validate.same_features("edge_feat", edge_feat, head_dim, "q")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim) if head_dim else 1.0
    else:
        scale = _validate.finite_scalar("scale", scale)
    return q, k, v, edge_feat, heads, features, scale


@register(
    cpu=cpu_attention.graph_attention,
    gpu=gpu_attention.graph_attention,
    kernels=("attention", "aggregate"),
    bytes=traffic.graph_attention,
)
def graph_attention(graph, q, k, v, *, scale=None, edge_feat=None, out=None, return_lse=False):
    """Dot-product attention of each destination over its neighbours (graph transformer).

    ``out[d] = sum_{e in row d} softmax_e(scale * <q[d], k[s] + edge_feat[e]>) * (v[s] + edge_feat[e])``
    per head, with ``s = src(e)`` and edge_feat zero when omitted (PyG's ``TransformerConv``,
    with ``edge_dim`` when edge_feat is given).

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    q : (num_dst, *S, D) float array
    k : (num_src, *S, D) float array
    v : (num_src, *S, F) float array
    scale : float, optional
        Defaults to 1 / sqrt(D).
    edge_feat : (E, *S, D) float array, optional
        Added to the key and to the value of each edge, so D must equal F. In the graph's
        edge order (a sparse matrix's stored order, ``A.data``).
    out : (num_dst, *S, F) array, optional
    return_lse : bool
        Also return the per-row log-sum-exp of the scores (needed by the backward).

    Returns
    -------
    out : (num_dst, *S, F) array
    lse : (num_dst, *S) array, only with return_lse
    """
    g, order = _validate.resolve_graph(graph)
    q, k, v, edge_feat, heads, features, scale = _check_qkv(g, q, k, v, scale, edge_feat)
    dtype, lse_dtype = _validate.result_dtypes(q, k, v, edge_feat, scalars={"scale": scale})
    place = Placement(g, order, dict(q=q, k=k, v=v, edge_feat=edge_feat))
    q_c, k_c, v_c = (place.node_input(x, dtype) for x in (q, k, v))
    edge_feat_c = place.edge_input(edge_feat, dtype, features=True)
    out_c, lse_c, result = forward_outputs(place, g, heads, features, dtype, lse_dtype, out, return_lse, q_c.shape[1])
    place.run(graph_attention.op, q_c, k_c, v_c, scale, out_c, lse_c, edge_feat=edge_feat_c)
    return result


@register(
    cpu=cpu_attention.graph_attention_backward,
    gpu=gpu_attention.graph_attention_backward,
    kernels=("attention", "aggregate"),
    bytes=traffic.graph_attention_backward,
    forward="graph_attention",
)
def graph_attention_backward(graph, q, k, v, out, grad_out, lse, *, scale=None, edge_feat=None):
    """Gradients of graph_attention with respect to q, k, v and, when given, edge_feat.

    The weights ``p`` are recomputed from lse. With ``key = k[s] + edge_feat[e]``,
    ``value = v[s] + edge_feat[e]`` (edge_feat zero when omitted) and
    ``ds = p * (<grad_out[d], value> - <grad_out[d], out[d]>)`` per edge and head:
    ``grad_q[d] = scale * sum_e ds * key``, ``grad_k[s] = scale * sum_e ds * q[d]``,
    ``grad_v[s] = sum_e p * grad_out[d]`` and
    ``grad_edge_feat[e] = scale * ds * q[d] + p * grad_out[d]``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    q, k, v : float arrays, shaped as for graph_attention
    out : (num_dst, *S, F) float array, the forward's output
    grad_out : (num_dst, *S, F) float array
    lse : (num_dst, *S) float array, the forward's log-sum-exp
    scale : float, optional
        The forward's scale; defaults to 1 / sqrt(D).
    edge_feat : (E, *S, D) float array, optional
        The forward's edge features.

    Returns
    -------
    grad_q, grad_k, grad_v : arrays shaped like q, k, v
    grad_edge_feat : array shaped like edge_feat, in its edge order; only when edge_feat is given
    """
    g, order = _validate.resolve_graph(graph)
    q, k, v, edge_feat, heads, features, scale = _check_qkv(g, q, k, v, scale, edge_feat)
    out, grad_out, lse = check_saved(g, heads, "q", features, out, grad_out, lse, "v")
    dtype, lse_dtype = _validate.result_dtypes(q, k, v, out, grad_out, edge_feat, scalars={"scale": scale})
    place = Placement(g, order, dict(q=q, k=k, v=v, out=out, grad_out=grad_out, lse=lse, edge_feat=edge_feat))
    q_c, k_c, v_c, out_c, grad_out_c = (place.node_input(x, dtype) for x in (q, k, v, out, grad_out))
    lse_c = place.node_input(lse, lse_dtype, per_node_scalar=True)
    edge_feat_c = place.edge_input(edge_feat, dtype, features=True)
    return run_backward(
        place,
        graph_attention_backward.op,
        dtype,
        (q_c, k_c, v_c, out_c, grad_out_c, lse_c, scale),
        (("q", q, q_c), ("k", k, k_c), ("v", v, v_c)),
        ("edge_feat", edge_feat, edge_feat_c),
    )


# -- gat_attention -------------------------------------------------------------------


def _check_gat(g, a_dst, a_src, values, negative_slope, edge_score):
    a_dst = _validate.float_array("a_dst", a_dst)
    a_src = _validate.float_array("a_src", a_src)
    values = _validate.float_array("values", values)
    heads, _ = _validate.node_array("a_dst", a_dst, g.num_dst, "destination", feature_axis=False)
    _validate.node_array("a_src", a_src, g.num_src, "source", heads=heads, feature_axis=False, heads_of="a_dst")
    _, features = _validate.node_array("values", values, g.num_src, "source", heads=heads, heads_of="a_dst")
    if edge_score is not None:
        edge_score = _validate.float_array("edge_score", edge_score)
        _validate.edge_array("edge_score", edge_score, g, heads=heads, heads_of="a_dst")
    negative_slope = _validate.finite_scalar("negative_slope", negative_slope)
    return a_dst, a_src, values, edge_score, heads, features, negative_slope


@register(
    cpu=cpu_attention.gat_attention,
    gpu=gpu_attention.gat_attention,
    kernels=("attention", "aggregate"),
    bytes=traffic.gat_attention,
)
def gat_attention(graph, a_dst, a_src, values, *, negative_slope=0.2, edge_score=None, out=None, return_lse=False):
    """Fused GAT attention: softmax over each row of leaky_relu(a_dst[d] + a_src[s] + edge_score[e])
    weighting values[s].

    edge_score is zero when omitted (PyG's ``GATConv``; with ``edge_dim``, pass its edge term
    ``<att_edge, lin_edge(edge_attr)>`` per head as edge_score).

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    a_dst : (num_dst, *S) float array
    a_src : (num_src, *S) float array
    values : (num_src, *S, F) float array
    negative_slope : float
    edge_score : (E, *S) float array, optional
        Added to the score of each edge before the leaky_relu. In the graph's edge order (a
        sparse matrix's stored order, ``A.data``).
    out : (num_dst, *S, F) array, optional
    return_lse : bool
        Also return the per-row log-sum-exp of the scores (needed by the backward).

    Returns
    -------
    out : (num_dst, *S, F) array
    lse : (num_dst, *S) array, only with return_lse
    """
    g, order = _validate.resolve_graph(graph)
    a_dst, a_src, values, edge_score, heads, features, negative_slope = _check_gat(
        g, a_dst, a_src, values, negative_slope, edge_score
    )
    dtype, lse_dtype = _validate.result_dtypes(
        a_dst, a_src, values, edge_score, scalars={"negative_slope": negative_slope}
    )
    place = Placement(g, order, dict(a_dst=a_dst, a_src=a_src, values=values, edge_score=edge_score))
    a_dst_c = place.node_input(a_dst, dtype, per_node_scalar=True)
    a_src_c = place.node_input(a_src, dtype, per_node_scalar=True)
    values_c = place.node_input(values, dtype)
    edge_score_c = place.edge_input(edge_score, dtype)
    out_c, lse_c, result = forward_outputs(
        place, g, heads, features, dtype, lse_dtype, out, return_lse, values_c.shape[1]
    )
    place.run(gat_attention.op, a_dst_c, a_src_c, values_c, negative_slope, out_c, lse_c, edge_score=edge_score_c)
    return result


@register(
    cpu=cpu_attention.gat_attention_backward,
    gpu=gpu_attention.gat_attention_backward,
    kernels=("attention", "aggregate"),
    bytes=traffic.gat_attention_backward,
    forward="gat_attention",
)
def gat_attention_backward(graph, a_dst, a_src, values, out, grad_out, lse, *, negative_slope=0.2, edge_score=None):
    """Gradients of gat_attention with respect to a_dst, a_src, values and, when given, edge_score.

    With ``z = a_dst[d] + a_src[s] + edge_score[e]`` (edge_score zero when omitted), ``p`` the
    weights recomputed from lse and ``ds = p * (<grad_out[d], values[s]> - <grad_out[d], out[d]>)``,
    the grad of z is ``ds * (1 if z > 0 else negative_slope)``; grad_a_dst sums it over each row,
    grad_a_src over each source, grad_edge_score is it, and
    ``grad_values[s] = sum_e p * grad_out[d]``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    a_dst, a_src, values : float arrays, shaped as for gat_attention
    out : (num_dst, *S, F) float array, the forward's output
    grad_out : (num_dst, *S, F) float array
    lse : (num_dst, *S) float array, the forward's log-sum-exp
    negative_slope : float
    edge_score : (E, *S) float array, optional
        The forward's edge scores.

    Returns
    -------
    grad_a_dst, grad_a_src, grad_values : arrays shaped like a_dst, a_src, values
    grad_edge_score : array shaped like edge_score, in its edge order; only when edge_score is given
    """
    g, order = _validate.resolve_graph(graph)
    a_dst, a_src, values, edge_score, heads, features, negative_slope = _check_gat(
        g, a_dst, a_src, values, negative_slope, edge_score
    )
    out, grad_out, lse = check_saved(g, heads, "a_dst", features, out, grad_out, lse, "values")
    dtype, lse_dtype = _validate.result_dtypes(
        a_dst, a_src, values, out, grad_out, edge_score, scalars={"negative_slope": negative_slope}
    )
    place = Placement(
        g,
        order,
        dict(a_dst=a_dst, a_src=a_src, values=values, out=out, grad_out=grad_out, lse=lse, edge_score=edge_score),
    )
    a_dst_c = place.node_input(a_dst, dtype, per_node_scalar=True)
    a_src_c = place.node_input(a_src, dtype, per_node_scalar=True)
    values_c, out_c, grad_out_c = (place.node_input(x, dtype) for x in (values, out, grad_out))
    lse_c = place.node_input(lse, lse_dtype, per_node_scalar=True)
    edge_score_c = place.edge_input(edge_score, dtype)
    return run_backward(
        place,
        gat_attention_backward.op,
        dtype,
        (a_dst_c, a_src_c, values_c, out_c, grad_out_c, lse_c, negative_slope),
        (("a_dst", a_dst, a_dst_c), ("a_src", a_src, a_src_c), ("values", values, values_c)),
        ("edge_score", edge_score, edge_score_c),
    )
