"""Launchers of attention_aggregate (aggregate.cu, softmax.cu, sddmm.cu) and of the fused
graph_attention and gat_attention (attention.cu), forward and backward.

The fused ops allocate nothing per edge: besides their outputs, the backward holds one
(N, H) array (row_dot) and uses the graph's cached plan and transpose.
"""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu import sddmm, softmax
from cupy_csrattn.gpu._launch import BLOCK_THREADS, NULL, acc_dtype, i32, i64, launch, scratch
from cupy_csrattn.gpu.aggregate import aggregate, run_rows


def _row_lse(graph, scores):
    lse = scratch((graph.num_dst, scores.shape[1]), acc_dtype(scores.dtype))
    softmax.run_rows("lse", graph, scores, lse_out=lse)
    return lse


def attention_aggregate(graph, scores, values, out, lse):
    if values.shape[2] == 0 and lse is None:  # nothing to write
        return
    aggregate("softmax", graph, values, out, weights=scores, lse_out=lse)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    if lse is None:
        lse = _row_lse(graph, scores)
    # grad_scores first holds dp = <grad_out[row], values[col]>, then p * (dp - sum_row p * dp).
    sddmm.edge_dot(graph, grad_out, values, 1.0, grad_scores)
    softmax.run_rows("grad_scores", graph, scores, g=grad_scores, lse_in=lse, out=grad_scores)
    graph_t, perm = graph.transpose()
    aggregate("probs_perm", graph_t, grad_out, grad_values, weights=scores, perm=perm, lse_in=lse)


# -- fused ops: score "dot" (a, b = q, k; c = scale) or "gat" (a, b = a_dst, a_src; c = slope)

def _score_args(a, b, c, lse=None, grad_out=None, v=None, row_dot=None):
    """The trailing arguments of every attention.cu row kernel (ATTENTION_ARGS)."""
    head_dim = a.shape[2] if a.ndim == 3 else 0
    return (a, b, i32(head_dim), acc_dtype(a.dtype).type(c), NULL if lse is None else lse,
            NULL if grad_out is None else grad_out, NULL if v is None else v,
            i32(0 if v is None else v.shape[2]), NULL if row_dot is None else row_dot)


def _fused_forward(score, graph, a, b, c, values, out, lse):
    run_rows("attention", f"attention_{score}_forward", graph, values, out, _score_args(a, b, c),
             softmax=True, lse_out=lse, fused=True)


def _row_dot(graph, grad_out, out):
    """(N, H) <grad_out[n, h], out[n, h]> in the accumulation dtype."""
    row_dot = scratch(out.shape[:2], acc_dtype(out.dtype))
    pairs = row_dot.size
    launch("attention", "attention_row_dot", out.dtype, graph.index_dtype,
           ((pairs + BLOCK_THREADS - 1) // BLOCK_THREADS,), (i64(pairs), i32(out.shape[2]), grad_out, out, row_dot))
    return row_dot


def graph_attention(graph, q, k, v, scale, out, lse):
    _fused_forward("dot", graph, q, k, scale, v, out, lse)


def gat_attention(graph, a_dst, a_src, values, negative_slope, out, lse):
    _fused_forward("gat", graph, a_dst, a_src, negative_slope, values, out, lse)


def _fused_backward(score, graph, a, b, c, v, out, grad_out, lse, grad_a, grad_b, grad_v, a_values, b_values):
    """grad_a sums over rows with values b_values, grad_b over sources with values a_values
    (k and q for "dot"; ones for "gat"), grad_v over sources with values grad_out."""
    row_dot = _row_dot(graph, grad_out, out)
    grad_args = _score_args(a, b, c, lse=lse, grad_out=grad_out, v=v, row_dot=row_dot)
    run_rows("attention", f"attention_{score}_grad", graph, b_values, grad_a, grad_args, fused=True)
    graph_t, _ = graph.transpose()
    run_rows("attention", f"attention_{score}_grad_t", graph_t, a_values, grad_b, grad_args, fused=True)
    run_rows("attention", f"attention_{score}_probs_t", graph_t, grad_out, grad_v, _score_args(a, b, c, lse=lse),
             fused=True)


def graph_attention_backward(graph, q, k, v, out, grad_out, lse, scale, grad_q, grad_k, grad_v):
    _fused_backward("dot", graph, q, k, scale, v, out, grad_out, lse, grad_q, grad_k, grad_v, q, k)


def gat_attention_backward(graph, a_dst, a_src, values, out, grad_out, lse, negative_slope,
                           grad_a_dst, grad_a_src, grad_values):
    heads = a_dst.shape[1]
    ones = plans.unit_values(graph, heads, values.dtype)
    _fused_backward("gat", graph, a_dst, a_src, negative_slope, values, out, grad_out, lse,
                    grad_a_dst.reshape(graph.num_dst, heads, 1), grad_a_src.reshape(graph.num_src, heads, 1),
                    grad_values, ones[:graph.num_dst], ones[:graph.num_src])
