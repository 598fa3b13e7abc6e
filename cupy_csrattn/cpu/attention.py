"""attention_aggregate, graph_attention, gat_attention and their backward on the CPU.

Forward: scores per edge, row softmax, weighted gather-sum. Backward recomputes the
probabilities from lse; with dp[e] = <grad_out[dst], values[src]> and
D[d] = sum_e p[e] dp[e], the grad of the scores is p * (dp - D).

Edge terms. graph_attention's edge_feat (E, H, D) is added to the key and the value of each
edge: the scores and dp take <x[dst], node[src] + edge_feat[e]> (edge_dots.edge_dot), and the
weighted sums over a row add sum_e w[e] * edge_feat[e] (segment_sums.segment_sum with weights)
to the gather-sum of the node rows. gat_attention's edge_score (E, H) is added to the logits;
its gradient is the logits' gradient itself.

A row without weight (its scores all -inf, lse -inf) adds nothing to any gradient, as a row
without edges (segment_softmax.without_weight): its weights are 0, but its values and
grad_out, and the q, key or a_dst whose -inf made its scores, may be infinite, and 0 * inf
would be NaN. Its edges' score gradients are set to 0, and its node rows enter the sums over
the sources as zeros.

The CPU backward of the fused ops takes D as the GPU kernels do, D[d] = <grad_out[d], out[d]>
(one dot product per row, in float64), so that both backends compute the same function of
their arguments: with a float16 ``out`` the two definitions of D differ by out's rounding,
which the cancelling difference dp - D magnifies. dp is computed in the compute dtype of the
inputs (backend.accumulation_dtype), with no float64 copies of the (edges, H, F) gathers;
p * (dp - D) in float64 (segment_softmax.softmax_grad), where the subtraction cancels. The
grads of the scores are rounded to the compute dtype once, before the products that scatter
them.
"""

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.cpu import edge_dots, segment_softmax, segment_sums


def _aggregate(graph, scores, values, out, lse):
    probs, weightless = segment_softmax.softmax_weights(graph, scores, lse=lse)
    segment_sums.gather_sum(graph, probs, values, out)
    segment_softmax.zero_weightless(out, weightless)


def score_grads(graph, probs, grad_out, values, out, weightless_edges, edge_feat=None):
    """float64 p * (dp - D) with dp = <grad_out[dst], values[src] + edge_feat[e]> (edge_feat
    zero when None) in the compute dtype and D = <grad_out[d], out[d]> in float64 (as the GPU
    kernels take it); 0 on the (E, H) mask ``weightless_edges`` (or None) of the rows without
    weight (segment_softmax.without_weight), whose values or grad_out may be infinite."""
    row_dot = edge_dots.feature_dot(np.asarray(out, dtype=np.float64), np.asarray(grad_out, dtype=np.float64))
    grad_probs = edge_dots.edge_dot(graph, grad_out, values, edge_feat=edge_feat)
    grads = segment_softmax.softmax_grad(graph, probs, grad_probs, row_dot=row_dot)
    if weightless_edges is not None:
        grads[weightless_edges] = 0
    return grads


def _messages_sum(graph, weights, values, edge_feat, out):
    """out[d] = sum over the edges e of row d of weights[e] * (values[src(e)] + edge_feat[e])
    per head (edge_feat zero when None), summed in the compute dtype and rounded to out's once."""
    if edge_feat is None:
        segment_sums.gather_sum(graph, weights, values, out)
        return
    total = segment_sums.segment_sum(graph, edge_feat, weights=weights)
    total += segment_sums.gather_sum(graph, weights, values, np.empty_like(total))
    segment_sums.write(out, total)


def attention_aggregate(graph, scores, values, out, lse):
    _aggregate(graph, scores, values, out, lse)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    if lse is None:
        probs, weightless = segment_softmax.softmax_weights(graph, scores)
    else:
        probs, weightless = segment_softmax.probs_from_lse(graph, scores, lse), np.isneginf(lse)
    rows, edges = segment_softmax.without_weight(graph, weightless)
    grad_probs = edge_dots.edge_dot(graph, grad_out, values)
    segment_softmax.softmax_grad(graph, probs, grad_probs, out=grad_scores)
    if edges is not None:
        grad_scores[edges] = 0
    segment_sums.gather_sum(graph, probs, segment_softmax.without_rows(grad_out, rows), grad_values, transpose=True)


def _dot_scores(graph, q, k, scale, edge_feat):
    scores = edge_dots.edge_dot(graph, q, k, edge_feat=edge_feat)
    scores *= scale
    return scores


def graph_attention(graph, q, k, v, scale, out, lse, edge_feat=None):
    probs, weightless = segment_softmax.softmax_weights(graph, _dot_scores(graph, q, k, scale, edge_feat), lse=lse)
    _messages_sum(graph, probs, v, edge_feat, out)
    segment_softmax.zero_weightless(out, weightless)


def graph_attention_backward(
    graph, q, k, v, out, grad_out, lse, scale, grad_q, grad_k, grad_v, edge_feat=None, grad_edge_feat=None
):
    probs = segment_softmax.probs_from_lse(graph, _dot_scores(graph, q, k, scale, edge_feat), lse)
    rows, edges = segment_softmax.without_weight(graph, np.isneginf(lse))
    # Scaled in float64 and rounded to the compute dtype in one pass.
    grad_scores = np.empty_like(probs)
    grads = score_grads(graph, probs, grad_out, v, out, edges, edge_feat)
    np.multiply(grads, scale, out=grad_scores, casting="same_kind")
    _messages_sum(graph, grad_scores, k, edge_feat, grad_q)
    # Rows without weight add nothing: their q (or a key) is infinite, which made their scores
    # -inf, and their grad_out may be.
    if rows is not None:
        grad_q[rows] = 0
    q, grad_out = segment_softmax.without_rows(q, rows), segment_softmax.without_rows(grad_out, rows)
    segment_sums.gather_sum(graph, grad_scores, q, grad_k, transpose=True)
    segment_sums.gather_sum(graph, probs, grad_out, grad_v, transpose=True)
    if grad_edge_feat is not None:
        _edge_feat_grad(graph, grad_scores, q, probs, grad_out, grad_edge_feat)


def _edge_feat_grad(graph, grad_scores, q, probs, grad_out, out):
    """out[e] = grad_scores[e] * q[dst(e)] + probs[e] * grad_out[dst(e)] per head (the edge
    feature enters the key and the value), a row block at a time in the compute dtype."""
    dtype = backend.accumulation_dtype(np.result_type(grad_scores, q, probs, grad_out))
    heads, features = out.shape[1], out.shape[2]
    for block in segment_sums.row_blocks(graph, heads * features):
        key_terms = np.repeat(q[block.rows], block.degrees, axis=0).astype(dtype)
        key_terms *= grad_scores[block.edges, :, None]
        value_terms = np.repeat(grad_out[block.rows], block.degrees, axis=0).astype(dtype)
        value_terms *= probs[block.edges, :, None]
        key_terms += value_terms
        out[block.edges] = key_terms


def _gat_logits(graph, a_dst, a_src, edge_score):
    optional = () if edge_score is None else (edge_score,)
    dtype = backend.accumulation_dtype(np.result_type(a_dst, a_src, *optional))
    logits = segment_sums.expand_rows(graph, np.asarray(a_dst, dtype=dtype))
    logits += np.take(np.asarray(a_src, dtype=dtype), graph.indices, axis=0)
    if edge_score is not None:
        logits += edge_score
    return logits


def leaky_relu(z, negative_slope):
    """z where z > 0, else negative_slope * z.

    For 0 < negative_slope <= 1 that is max(z, negative_slope * z), the same values
    (signed zeros, infinities and NaN included) in a tenth of np.where's time.
    """
    scaled = z * negative_slope
    if 0 < negative_slope <= 1:
        return np.maximum(scaled, z, out=scaled)
    return np.where(z > 0, z, scaled)


def leaky_relu_grad_factor(z, negative_slope):
    """float64 derivative of leaky_relu at z: 1 for z > 0, negative_slope otherwise (also
    at exactly 0). For |negative_slope| <= 1 as (z > 0) * (1 - s) + s, several times faster
    than np.where: exactly s, and 1 to within an ulp (beyond that, (1 - s) + s drifts from 1
    and is 0 from |s| = 2**53)."""
    if not -1 <= negative_slope <= 1:
        return np.where(z > 0, 1.0, float(negative_slope))
    factor = (z > 0).astype(np.float64)
    factor *= 1.0 - negative_slope
    factor += negative_slope
    return factor


def gat_attention(graph, a_dst, a_src, values, negative_slope, out, lse, edge_score=None):
    scores = leaky_relu(_gat_logits(graph, a_dst, a_src, edge_score), negative_slope)
    _aggregate(graph, scores, values, out, lse)


def gat_attention_backward(
    graph,
    a_dst,
    a_src,
    values,
    out,
    grad_out,
    lse,
    negative_slope,
    grad_a_dst,
    grad_a_src,
    grad_values,
    edge_score=None,
    grad_edge_score=None,
):
    logits = _gat_logits(graph, a_dst, a_src, edge_score)
    probs = segment_softmax.probs_from_lse(graph, leaky_relu(logits, negative_slope), lse)
    rows, edges = segment_softmax.without_weight(graph, np.isneginf(lse))
    grad_logits = score_grads(graph, probs, grad_out, values, out, edges)
    grad_logits *= leaky_relu_grad_factor(logits, negative_slope)
    # Sums of grad_logits cancel too (a row's sum is 0 without the slope): kept in float64.
    segment_sums.write(grad_a_dst, segment_sums.segment_sum(graph, grad_logits))
    segment_sums.write(grad_a_src, segment_sums.source_sum(graph, grad_logits))
    segment_sums.gather_sum(graph, probs, segment_softmax.without_rows(grad_out, rows), grad_values, transpose=True)
    if grad_edge_score is not None:
        segment_sums.write(grad_edge_score, grad_logits)
