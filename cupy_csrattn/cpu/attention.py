"""attention_aggregate, graph_attention, gat_attention and their backward on the CPU.

Forward: scores per edge, row softmax, weighted gather-sum. Backward recomputes the
probabilities from lse; with dp[e] = <grad_out[dst], values[src]> and
D[d] = sum_e p[e] dp[e] = <grad_out[d], out[d]>, the grad of the scores is p * (dp - D).
"""
import numpy as np

from cupy_csrattn.cpu import segments
from cupy_csrattn.cpu.segments import as_f64


def _aggregate(graph, scores, values, out, lse):
    probs, row_lse = segments.softmax(graph, scores)
    out[...] = segments.gather_sum(graph, probs, values)
    if lse is not None:
        lse[...] = row_lse


def _row_dot(out, grad_out):
    return np.einsum("nhf,nhf->nh", as_f64(out), as_f64(grad_out))


def _probs(graph, scores, lse):
    return segments.probs_from_lse(graph, scores, as_f64(lse))


def attention_aggregate(graph, scores, values, out, lse):
    _aggregate(graph, as_f64(scores), as_f64(values), out, lse)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    scores, values, grad_out = as_f64(scores), as_f64(values), as_f64(grad_out)
    probs = segments.softmax(graph, scores)[0] if lse is None else _probs(graph, scores, lse)
    grad_probs = segments.edge_dot(graph, grad_out, values)
    grad_scores[...] = segments.softmax_grad(graph, probs, grad_probs)
    grad_values[...] = segments.gather_sum(graph, probs, grad_out, transpose=True)


def _dot_scores(graph, q, k, scale):
    scores = segments.edge_dot(graph, as_f64(q), as_f64(k))
    scores *= scale
    return scores


def graph_attention(graph, q, k, v, scale, out, lse):
    _aggregate(graph, _dot_scores(graph, q, k, scale), as_f64(v), out, lse)


def graph_attention_backward(graph, q, k, v, out, grad_out, lse, scale, grad_q, grad_k, grad_v):
    grad_out = as_f64(grad_out)
    probs = _probs(graph, _dot_scores(graph, q, k, scale), lse)
    row_dot = _row_dot(out, grad_out)
    grad_scores = probs * (segments.edge_dot(graph, grad_out, as_f64(v)) - row_dot[segments.rows_of_edges(graph)])
    grad_scores *= scale
    grad_q[...] = segments.gather_sum(graph, grad_scores, as_f64(k))
    grad_k[...] = segments.gather_sum(graph, grad_scores, as_f64(q), transpose=True)
    grad_v[...] = segments.gather_sum(graph, probs, grad_out, transpose=True)


def _gat_logits(graph, a_dst, a_src):
    return as_f64(a_dst)[segments.rows_of_edges(graph)] + as_f64(a_src)[graph.indices]


def _leaky_relu(z, negative_slope):
    return np.where(z > 0, z, negative_slope * z)


def gat_attention(graph, a_dst, a_src, values, negative_slope, out, lse):
    scores = _leaky_relu(_gat_logits(graph, a_dst, a_src), negative_slope)
    _aggregate(graph, scores, as_f64(values), out, lse)


def gat_attention_backward(graph, a_dst, a_src, values, out, grad_out, lse, negative_slope,
                           grad_a_dst, grad_a_src, grad_values):
    grad_out = as_f64(grad_out)
    logits = _gat_logits(graph, a_dst, a_src)
    probs = _probs(graph, _leaky_relu(logits, negative_slope), lse)
    row_dot = _row_dot(out, grad_out)
    grad_logits = probs * (segments.edge_dot(graph, grad_out, as_f64(values)) - row_dot[segments.rows_of_edges(graph)])
    grad_logits *= np.where(logits > 0, 1.0, negative_slope)
    grad_a_dst[...] = segments.segment_sum(graph, grad_logits)
    grad_a_src[...] = segments.source_sum(graph, grad_logits)
    grad_values[...] = segments.gather_sum(graph, probs, grad_out, transpose=True)
