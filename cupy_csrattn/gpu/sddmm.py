"""Launchers of cuda/sddmm.cu, and sddmm's backward through the aggregation kernels."""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu.aggregate import aggregate
from cupy_csrattn.gpu._launch import BLOCK_THREADS, acc_dtype, i32, i64, launch, vector_width


def _pair_grid(graph, heads):
    return ((graph.num_edges * heads + BLOCK_THREADS - 1) // BLOCK_THREADS,)


def edge_dot(graph, dst_feat, src_feat, scale, out):
    """out[e, h] = scale * <dst_feat[row(e), h], src_feat[col(e), h]>; features (N, H, D)."""
    heads, dim = dst_feat.shape[1], dst_feat.shape[2]
    launch("sddmm", f"sddmm_dot_v{vector_width(dim, dst_feat, src_feat)}", dst_feat.dtype, graph.index_dtype,
           _pair_grid(graph, heads),
           (i64(graph.num_edges), i32(heads), i32(dim), plans.row_of_edge(graph), graph.indices, dst_feat,
            src_feat, acc_dtype(dst_feat.dtype).type(scale), out))


def sddmm_dot(graph, dst, src, scale, out):
    edge_dot(graph, dst, src, scale, out)


def sddmm_add(graph, dst, src, out):
    heads = dst.shape[1]
    launch("sddmm", "sddmm_add", dst.dtype, graph.index_dtype, _pair_grid(graph, heads),
           (i64(graph.num_edges), i32(heads), plans.row_of_edge(graph), graph.indices, dst, src, out))


def sddmm_dot_backward(graph, dst, src, grad_scores, scale, grad_dst, grad_src):
    # grad_dst = scale * sum over the row of grad_scores * src; grad_src likewise on the transpose.
    aggregate("weights", graph, src, grad_dst, weights=grad_scores)
    graph_t, perm = graph.transpose()
    aggregate("weights_perm", graph_t, dst, grad_src, weights=grad_scores, perm=perm)
    if scale != 1.0:
        grad_dst *= scale
        grad_src *= scale


def sddmm_add_backward(graph, grad_scores, grad_dst, grad_src):
    # Row sums and source sums of grad_scores: aggregations of values that are all ones.
    heads = grad_scores.shape[1]
    ones = plans.unit_values(graph, heads, grad_scores.dtype)
    aggregate("weights", graph, ones[:graph.num_src], grad_dst.reshape(graph.num_dst, heads, 1), weights=grad_scores)
    graph_t, perm = graph.transpose()
    aggregate("weights_perm", graph_t, ones[:graph.num_dst], grad_src.reshape(graph.num_src, heads, 1),
              weights=grad_scores, perm=perm)
