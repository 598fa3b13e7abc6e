"""gatv2_attention and its backward on the CPU.

score[e, h] = sum_k att[h, k] * leaky_relu(z[e, h, k]) with z = x_dst[dst] + x_src[src];
the weights are the row softmax of the scores and the messages are x_src[src].

Forward: the scores in blocks of edges (nothing of size (E, H, D) is materialized: a block
holds about edge_dots' block of elements), in the compute dtype; then the row softmax and
the weighted gather-sum of segment_softmax and segment_sums, as for gat_attention.

Backward, as for gat_attention: the weights from lse, grad_scores = p * (dp - D) in float64
(cpu.attention.score_grads) with dp = <grad_out[dst], x_src[src]> and D = <grad_out[d], out[d]>,
as the GPU kernels take it. Then z is
recomputed per row block (in the compute dtype, as the forward saw it), and the float64
terms grad_scores * att * leaky_relu'(z) are summed over each row for grad_x_dst, and over
the rows of the cached transposed graph (each source's edges) for grad_x_src, beside the
message gradient sum_e p * grad_out[dst]; grad_att adds grad_scores * leaky_relu(z) over
every edge in float64.
"""

import numpy as np

from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.cpu import edge_dots, segment_softmax, segment_sums
from cupy_csrattn.cpu.attention import leaky_relu, leaky_relu_grad_factor, score_grads


def _compute_dtype(x_dst, x_src, att):
    return accumulation_dtype(np.result_type(x_dst, x_src, att))


def _scores(graph, x_dst, x_src, att, negative_slope):
    """(E, H) scores in the compute dtype."""
    dtype = _compute_dtype(x_dst, x_src, att)
    heads, head_dim = att.shape
    att = np.asarray(att, dtype=dtype)
    scores = np.empty((graph.num_edges, heads), dtype=dtype)
    for edges, dst_rows in edge_dots.edge_blocks(graph, x_dst, heads * head_dim):
        z = dst_rows.astype(dtype)  # a copy: z is computed in place
        z += np.take(x_src, graph.indices[edges], axis=0)
        edge_dots.feature_dot(leaky_relu(z, negative_slope), att[None], out=scores[edges])
    return scores


def gatv2_attention(graph, x_dst, x_src, att, negative_slope, out, lse):
    scores = _scores(graph, x_dst, x_src, att, negative_slope)
    probs, weightless = segment_softmax.softmax_weights(graph, scores, lse=lse)
    segment_sums.gather_sum(graph, probs, x_src, out)
    segment_softmax.zero_weightless(out, weightless)


def _score_grad_sums(graph, row_feat, col_feat, att, negative_slope, grad_scores, skip, grad_att=None):
    """(rows, H, D) float64: for each row of ``graph``, the sum over its edges e of
    grad_scores[e, h] * att[h, k] * leaky_relu'(z[k]), z = row_feat[row] + col_feat[col] (in
    the compute dtype). Adds grad_scores[e, h] * leaky_relu(z[k]) over every edge into
    ``grad_att`` (H, D) float64, when given. The edges and heads of the (E, H) mask ``skip``
    (or None), those of the rows without weight, add nothing: leaky_relu(z) (or att) is
    infinite there, which made their scores -inf."""
    dtype = _compute_dtype(row_feat, col_feat, att)
    heads, head_dim = att.shape
    att64 = np.asarray(att, dtype=np.float64)
    result = np.zeros((graph.num_dst, heads, head_dim))
    blocks = segment_sums.row_blocks(graph, heads * head_dim)
    for block in blocks:
        num_edges = block.edges.stop - block.edges.start
        z = np.repeat(row_feat[block.rows], block.degrees, axis=0).astype(dtype)
        z += np.take(col_feat, graph.indices[block.edges], axis=0)
        g = grad_scores[block.edges]
        terms = leaky_relu_grad_factor(z, negative_slope)
        terms *= g[:, :, None]
        terms *= att64
        dead = None if skip is None else skip[block.edges]
        if dead is not None:
            terms[dead] = 0
        sums = blocks.row_sums(block, terms.reshape(num_edges, heads * head_dim))
        result[block.rows] = sums.reshape(len(block.degrees), heads, head_dim)
        if grad_att is not None:
            activations = leaky_relu(z, negative_slope)
            if dead is not None:
                activations[dead] = 0
            grad_att += np.einsum("eh,ehk->hk", g, activations)
    return result


def gatv2_attention_backward(
    graph, x_dst, x_src, att, out, grad_out, lse, negative_slope, grad_x_dst, grad_x_src, grad_att
):
    heads, head_dim = att.shape
    if heads * head_dim == 0:  # every gradient is empty
        return
    probs = segment_softmax.probs_from_lse(graph, _scores(graph, x_dst, x_src, att, negative_slope), lse)
    rows, edges = segment_softmax.without_weight(graph, np.isneginf(lse))
    grad_scores = score_grads(graph, probs, grad_out, x_src, out, edges)
    att_sum = np.zeros((heads, head_dim))
    segment_sums.write(
        grad_x_dst, _score_grad_sums(graph, x_dst, x_src, att, negative_slope, grad_scores, edges, grad_att=att_sum)
    )
    segment_sums.write(grad_att, att_sum)
    graph_t, perm = graph.transpose()
    source_terms = _score_grad_sums(
        graph_t,
        x_src,
        x_dst,
        att,
        negative_slope,
        np.take(grad_scores, perm, axis=0),
        None if edges is None else np.take(edges, perm, axis=0),
    )
    messages = np.empty(grad_x_src.shape, dtype=accumulation_dtype(grad_x_src.dtype))
    segment_sums.gather_sum(graph, probs, segment_softmax.without_rows(grad_out, rows), messages, transpose=True)
    source_terms += messages
    segment_sums.write(grad_x_src, source_terms)
