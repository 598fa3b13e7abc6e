"""attention_aggregate, graph_attention, gat_attention and their backward on the CPU.

Forward: scores per edge, row softmax, weighted gather-sum. Backward recomputes the
probabilities from lse; with dp[e] = <grad_out[dst], values[src]> and
D[d] = sum_e p[e] dp[e] = <grad_out[d], out[d]>, the grad of the scores is p * (dp - D).

The forward runs in the compute dtype of the inputs (backend.accumulation_dtype). dp, D
and p * (dp - D) are computed in float64: dp - D cancels (exactly, for a row whose values
are all equal), so float32 rounding of dp and D would dominate the result. The grads of the
scores are rounded to the compute dtype once, before the products that scatter them.
"""

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.cpu import edge_dots, segment_softmax, segment_sums


def _aggregate(graph, scores, values, out, lse):
    probs = segment_softmax.softmax(graph, scores, lse=lse)
    segment_sums.gather_sum(graph, probs, values, out)


def _row_dot(out, grad_out):
    """(N, H) float64 <out[d, h], grad_out[d, h]>."""
    return edge_dots.feature_dot(np.asarray(out, dtype=np.float64), np.asarray(grad_out, dtype=np.float64))


def _score_grads(graph, probs, grad_out, values, row_dot):
    """float64 p * (dp - D) with dp = <grad_out[dst], values[src]>."""
    grads = edge_dots.edge_dot(graph, grad_out, values, dtype=np.float64)
    grads -= segment_sums.expand_rows(graph, row_dot)
    grads *= probs
    return grads


def attention_aggregate(graph, scores, values, out, lse):
    _aggregate(graph, scores, values, out, lse)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    if lse is None:
        probs = segment_softmax.softmax(graph, scores)
    else:
        probs = segment_softmax.probs_from_lse(graph, scores, lse)
    grad_probs = edge_dots.edge_dot(graph, grad_out, values, dtype=np.float64)
    segment_softmax.softmax_grad(graph, probs, grad_probs, out=grad_scores)
    segment_sums.gather_sum(graph, probs, grad_out, grad_values, transpose=True)


def _dot_scores(graph, q, k, scale):
    scores = edge_dots.edge_dot(graph, q, k)
    scores *= scale
    return scores


def graph_attention(graph, q, k, v, scale, out, lse):
    _aggregate(graph, _dot_scores(graph, q, k, scale), v, out, lse)


def graph_attention_backward(graph, q, k, v, out, grad_out, lse, scale, grad_q, grad_k, grad_v):
    probs = segment_softmax.probs_from_lse(graph, _dot_scores(graph, q, k, scale), lse)
    grad_scores = _score_grads(graph, probs, grad_out, v, _row_dot(out, grad_out))
    grad_scores *= scale
    grad_scores = grad_scores.astype(probs.dtype)
    segment_sums.gather_sum(graph, grad_scores, k, grad_q)
    segment_sums.gather_sum(graph, grad_scores, q, grad_k, transpose=True)
    segment_sums.gather_sum(graph, probs, grad_out, grad_v, transpose=True)


def _gat_logits(graph, a_dst, a_src):
    dtype = backend.accumulation_dtype(np.result_type(a_dst, a_src))
    logits = segment_sums.expand_rows(graph, np.asarray(a_dst, dtype=dtype))
    logits += np.take(np.asarray(a_src, dtype=dtype), graph.indices, axis=0)
    return logits


def _leaky_relu(z, negative_slope):
    return np.where(z > 0, z, negative_slope * z)


def gat_attention(graph, a_dst, a_src, values, negative_slope, out, lse):
    scores = _leaky_relu(_gat_logits(graph, a_dst, a_src), negative_slope)
    _aggregate(graph, scores, values, out, lse)


def gat_attention_backward(
    graph, a_dst, a_src, values, out, grad_out, lse, negative_slope, grad_a_dst, grad_a_src, grad_values
):
    logits = _gat_logits(graph, a_dst, a_src)
    probs = segment_softmax.probs_from_lse(graph, _leaky_relu(logits, negative_slope), lse)
    grad_logits = _score_grads(graph, probs, grad_out, values, _row_dot(out, grad_out))
    # leaky_relu' is 1 for z > 0 and negative_slope otherwise (also at exactly 0).
    grad_logits *= np.where(logits > 0, 1.0, negative_slope)
    # Sums of grad_logits cancel too (a row's sum is 0 without the slope): kept in float64.
    segment_sums.write(grad_a_dst, segment_sums.segment_sum(graph, grad_logits))
    segment_sums.write(grad_a_src, segment_sums.source_sum(graph, grad_logits))
    segment_sums.gather_sum(graph, probs, grad_out, grad_values, transpose=True)
