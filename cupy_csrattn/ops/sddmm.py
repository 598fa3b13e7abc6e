"""sddmm and sddmm_backward: per-edge scores from destination and source features."""

from cupy_csrattn import _validate
from cupy_csrattn.cpu import sddmm as cpu_sddmm
from cupy_csrattn.gpu import sddmm as gpu_sddmm
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register

_OPS = ("dot", "add")


def _check(g, dst_feat, src_feat, op):
    _validate.choice("op", op, _OPS)
    dst_feat = _validate.float_array("dst_feat", dst_feat)
    src_feat = _validate.float_array("src_feat", src_feat)
    with_features = op == "dot"
    heads, features = _validate.node_array("dst_feat", dst_feat, g.num_dst, "destination", feature_axis=with_features)
    _validate.node_array(
        "src_feat", src_feat, g.num_src, "source", heads=heads, feature_axis=with_features, heads_of="dst_feat"
    )
    if with_features:
        _validate.same_features("src_feat", src_feat, features, "dst_feat")
    return dst_feat, src_feat, heads


@register(cpu=cpu_sddmm.sddmm, gpu=gpu_sddmm.sddmm, kernels=("sddmm",), bytes=traffic.sddmm)
def sddmm(graph, dst_feat, src_feat, *, op="dot", scale=1.0, out=None):
    """Per-edge scores from the features of its two ends.

    "dot": ``scores[e, h] = scale * <dst_feat[dst(e), h, :], src_feat[src(e), h, :]>``;
    "add": ``scores[e, h] = dst_feat[dst(e), h] + src_feat[src(e), h]`` (GAT's a_dst + a_src).

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    dst_feat : float array
        "dot": (num_dst, *S, D); "add": (num_dst, *S).
    src_feat : float array
        "dot": (num_src, *S, D); "add": (num_src, *S).
    op : {"dot", "add"}
    scale : float
        Multiplies "dot" scores; must be 1.0 for "add".
    out : (E, *S) array, optional

    Returns
    -------
    scores : (E, *S) array
    """
    g, order = _validate.resolve_graph(graph)
    dst_feat, src_feat, heads = _check(g, dst_feat, src_feat, op)
    scale = _validate.finite_scalar("scale", scale)
    if op == "add" and scale != 1.0:
        raise ValueError(f"scale applies to op='dot' only, got scale={scale} with op='add'")
    dtype, _ = _validate.result_dtypes(dst_feat, src_feat, scalars={"scale": scale})
    place = Placement(g, order, dict(dst_feat=dst_feat, src_feat=src_feat))
    per_node_scalar = op == "add"
    dst_c = place.node_input(dst_feat, dtype, per_node_scalar)
    src_c = place.node_input(src_feat, dtype, per_node_scalar)
    shape = (g.num_edges, *heads)
    work, result = place.output("out", out, shape, dtype, (g.num_edges, dst_c.shape[1]), edge=True)
    place.run(sddmm.op, dst_c, src_c, op, scale, work)
    return result


@register(
    cpu=cpu_sddmm.sddmm_backward,
    gpu=gpu_sddmm.sddmm_backward,
    kernels=("aggregate",),
    bytes=traffic.sddmm_backward,
    forward="sddmm",
)
def sddmm_backward(graph, dst_feat, src_feat, grad_scores, *, op="dot", scale=1.0):
    """Gradients of sddmm with respect to dst_feat and src_feat.

    "dot": ``grad_dst[d] = scale * sum_{e in row d} grad_scores[e] * src_feat[src(e)]`` and
    ``grad_src[s] = scale * sum_{e: src(e) = s} grad_scores[e] * dst_feat[dst(e)]``;
    "add": the row sums and source sums of grad_scores.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    dst_feat, src_feat : float arrays, shaped as for sddmm
    grad_scores : (E, *S) float array
    op : {"dot", "add"}
    scale : float

    Returns
    -------
    grad_dst_feat : array shaped like dst_feat
    grad_src_feat : array shaped like src_feat
    """
    g, order = _validate.resolve_graph(graph)
    dst_feat, src_feat, heads = _check(g, dst_feat, src_feat, op)
    grad_scores = _validate.float_array("grad_scores", grad_scores)
    _validate.edge_array("grad_scores", grad_scores, g, heads=heads, heads_of="dst_feat")
    scale = _validate.finite_scalar("scale", scale)
    if op == "add" and scale != 1.0:
        raise ValueError(f"scale applies to op='dot' only, got scale={scale} with op='add'")
    dtype, _ = _validate.result_dtypes(dst_feat, src_feat, grad_scores, scalars={"scale": scale})
    place = Placement(g, order, dict(dst_feat=dst_feat, src_feat=src_feat, grad_scores=grad_scores))
    per_node_scalar = op == "add"
    dst_c = place.node_input(dst_feat, dtype, per_node_scalar)
    src_c = place.node_input(src_feat, dtype, per_node_scalar)
    grad_c = place.edge_input(grad_scores, dtype)
    grad_dst_c, grad_dst = place.output("grad_dst_feat", None, dst_feat.shape, dtype, dst_c.shape)
    grad_src_c, grad_src = place.output("grad_src_feat", None, src_feat.shape, dtype, src_c.shape)
    place.run(sddmm_backward.op, dst_c, src_c, grad_c, op, scale, grad_dst_c, grad_src_c)
    return grad_dst, grad_src
