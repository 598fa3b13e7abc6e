"""Launchers of cuda/sddmm.cu."""

from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu._launch import BLOCK_THREADS, acc_dtype, i32, i64, launch, vector_width


def edge_dot(graph, dst_feat, src_feat, scale, out):
    """out[e, h] = scale * <dst_feat[row(e), h], src_feat[col(e), h]>; features (N, H, D)."""
    heads, dim = dst_feat.shape[1], dst_feat.shape[2]
    pairs = graph.num_edges * heads
    launch("sddmm", f"sddmm_dot_v{vector_width(dim, dst_feat, src_feat)}", dst_feat.dtype, graph.index_dtype, ((pairs + BLOCK_THREADS - 1) // BLOCK_THREADS,),
           (i64(graph.num_edges), i32(heads), i32(dim), plans.row_of_edge(graph), graph.indices, dst_feat,
            src_feat, acc_dtype(dst_feat.dtype).type(scale), out))
