"""Byte models: the least bytes one call of each op moves (inputs read once, outputs written
once, plus one gather of the source rows per edge: no reuse assumed). Divided by the
measured copy bandwidth they give the op's memory roofline time.

Each takes (graph, dtype, H, F); graph_attention's q and k have F features as v has. The fused
ops' models also take ``edge_terms``: True counts their optional edge array (graph_attention's
edge_feat, gat_attention's edge_score) and its gradient.
"""

import numpy as np


def _sizes(graph, dtype):
    return graph.num_edges, graph.num_dst, graph.indices.itemsize, np.dtype(dtype).itemsize


def edge_softmax(graph, dtype, H, F):
    E, _, _, isz = _sizes(graph, dtype)
    return 2 * E * H * isz + graph.indptr.nbytes


def edge_softmax_backward(graph, dtype, H, F):
    E, _, _, isz = _sizes(graph, dtype)
    return 3 * E * H * isz + graph.indptr.nbytes


def aggregate(graph, dtype, H, F):
    """spmm and attention_aggregate: indices and weights per edge, a source row gathered per
    edge, the output rows written."""
    E, N, idx, isz = _sizes(graph, dtype)
    return E * (idx + H * isz + H * F * isz) + N * H * F * isz


def aggregate_backward(graph, dtype, H, F):
    """Their backward: a pass over rows and one over the transpose (its permutation read), each
    gathering a node row per edge, reading and writing the edge arrays and node rows."""
    E, N, idx, isz = _sizes(graph, dtype)
    return E * (2 * idx + 8 + 2 * H * isz + 2 * H * F * isz) + 2 * N * H * F * isz + E * H * isz


def sddmm(graph, dtype, H, F):
    """indices, dst rows once, src rows gathered per edge, scores written."""
    E, N, idx, isz = _sizes(graph, dtype)
    return graph.indptr.nbytes + E * (idx + H * F * isz + H * isz) + N * H * F * isz


def sddmm_backward(graph, dtype, H, F):
    """A pass over rows and one over the transpose (its permutation read), each reading the
    indices and the scores' gradient and gathering a node row per edge; both gradients written."""
    E, N, idx, isz = _sizes(graph, dtype)
    return E * (2 * idx + 8 + 2 * H * isz + 2 * H * F * isz) + 2 * N * H * F * isz


def graph_attention(graph, dtype, H, F, edge_terms=False):
    """indices, q once, k and v gathered per edge, out written; with edge_terms (edge_feat
    given, D = F), edge_feat read once."""
    E, N, idx, isz = _sizes(graph, dtype)
    edge_bytes = E * H * F * isz if edge_terms else 0
    return E * (idx + 2 * H * F * isz) + 2 * N * H * F * isz + edge_bytes


def graph_attention_backward(graph, dtype, H, F, edge_terms=False):
    """forward + backward: the forward, then three passes (over rows, and twice over sources on
    the transpose) that each read the indices and gather two node rows per edge; with
    edge_terms, each pass also reads edge_feat, and grad_edge_feat is written once."""
    E, N, idx, isz = _sizes(graph, dtype)
    edge_bytes = 4 * E * H * F * isz if edge_terms else 0
    forward = graph_attention(graph, dtype, H, F, edge_terms)
    return forward + 3 * E * (idx + 2 * H * F * isz) + 6 * N * H * F * isz + edge_bytes


def gat_attention(graph, dtype, H, F, edge_terms=False):
    """indices, a_dst once, a_src and values gathered per edge, out written; with edge_terms
    (edge_score given), edge_score read once."""
    E, N, idx, isz = _sizes(graph, dtype)
    edge_bytes = E * H * isz if edge_terms else 0
    return E * (idx + H * isz + H * F * isz) + N * H * isz + N * H * F * isz + edge_bytes


def gat_attention_backward(graph, dtype, H, F, edge_terms=False):
    """forward + backward, as for graph_attention_backward (edge_score read by each pass,
    grad_edge_score written once)."""
    E, N, idx, isz = _sizes(graph, dtype)
    edge_bytes = 4 * E * H * isz if edge_terms else 0
    forward = gat_attention(graph, dtype, H, F, edge_terms)
    return forward + 3 * E * (idx + H * isz + H * F * isz) + 4 * N * H * F * isz + edge_bytes


def gatv2_attention(graph, dtype, H, F):
    """indices, x_dst once, x_src gathered per edge (serving the score and the message), att
    once, out written; F is the head width D."""
    E, N, idx, isz = _sizes(graph, dtype)
    return E * (idx + H * F * isz) + 2 * N * H * F * isz + H * F * isz


def gatv2_attention_backward(graph, dtype, H, F):
    """forward + backward: the forward, row_dot (out and grad_out read), then a pass over rows
    and one over the transpose (its indices) that each read the indices and gather two node
    rows per edge (x_src and x_dst, and grad_out for the destinations), and write their gradient."""
    E, N, idx, isz = _sizes(graph, dtype)
    node = N * H * F * isz
    return gatv2_attention(graph, dtype, H, F) + 2 * node + 2 * E * (idx + 2 * H * F * isz) + 4 * node
