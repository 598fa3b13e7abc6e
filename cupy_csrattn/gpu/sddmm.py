"""Launchers of cuda/sddmm.cu, and sddmm's backward through the aggregation kernels."""

from cupy_csrattn.gpu.aggregate import aggregate
from cupy_csrattn.gpu.derived import edge_ends, unit_values
from cupy_csrattn.gpu.kernels import launch, thread_grid, vector_width


def edge_dot(graph, dst_feat, src_feat, scale, out):
    """out[e, h] = scale * <dst_feat[row(e), h], src_feat[col(e), h]>; features (N, H, D);
    out in their dtype or in its accumulation dtype (sddmm_dot_acc: float16's sums kept in float32)."""
    heads, dim = dst_feat.shape[1], dst_feat.shape[2]
    index_dtype, rows, indices = edge_ends(graph)
    kind = "" if out.dtype == dst_feat.dtype else "_acc"
    launch(
        f"sddmm_dot{kind}_v{vector_width(dim, dst_feat, src_feat)}",
        dst_feat.dtype,
        index_dtype,
        thread_grid(graph.num_edges * heads),
        num_edges=graph.num_edges,
        H=heads,
        D=dim,
        row_of_edge=rows,
        indices=indices,
        A=dst_feat,
        B=src_feat,
        scale=scale,
        out=out,
    )


def gather_edges(graph, a, order, out):
    """out[e, h] = a[order[e], h] for (E, H) arrays; order from derived.transpose_edge_orders."""
    heads = a.shape[1]
    launch(
        "gather_edges",
        a.dtype,
        order.dtype,
        thread_grid(graph.num_edges * heads),
        num_edges=graph.num_edges,
        H=heads,
        order=order,
        a=a,
        out=out,
    )


def sddmm(graph, dst, src, op, scale, out):
    if op == "dot":
        edge_dot(graph, dst, src, scale, out)
        return
    index_dtype, rows, indices = edge_ends(graph)
    launch(
        "sddmm_add",
        dst.dtype,
        index_dtype,
        thread_grid(graph.num_edges * dst.shape[1]),
        num_edges=graph.num_edges,
        H=dst.shape[1],
        row_of_edge=rows,
        indices=indices,
        A=dst,
        B=src,
        out=out,
    )


def sddmm_backward(graph, dst, src, grad_scores, op, scale, grad_dst, grad_src):
    graph_t, perm = graph.transpose()
    if op == "dot":
        # grad_dst = sum over the row of (scale * grad_scores) * src; grad_src likewise on the
        # transpose (scaled in the sum: a float16 sum may overflow where the scaled one fits).
        aggregate("weights", graph, src, grad_dst, weights=grad_scores, scale=scale)
        aggregate("weights_perm", graph_t, dst, grad_src, weights=grad_scores, perm=perm, scale=scale)
        return
    # Row sums and source sums of grad_scores: aggregations of values that are all ones.
    heads = grad_scores.shape[1]
    ones = unit_values(graph, heads, grad_scores.dtype)
    grad_dst_sums = grad_dst.reshape(graph.num_dst, heads, 1)
    aggregate("weights", graph, ones[: graph.num_src], grad_dst_sums, weights=grad_scores, scale=1.0)
    aggregate(
        "weights_perm",
        graph_t,
        ones[: graph.num_dst],
        grad_src.reshape(graph.num_src, heads, 1),
        weights=grad_scores,
        perm=perm,
        scale=1.0,
    )
