"""Launchers for attention_aggregate and its backward (cuda/aggregate.cu, softmax.cu, sddmm.cu)."""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu import sddmm, softmax
from cupy_csrattn.gpu._launch import acc_dtype, scratch
from cupy_csrattn.gpu.aggregate import aggregate


def _row_lse(graph, scores):
    lse = scratch((graph.num_dst, scores.shape[1]), acc_dtype(scores.dtype))
    softmax.run_rows("lse", graph, scores, lse_out=lse)
    return lse


def attention_aggregate(graph, scores, values, out, lse):
    if values.shape[2] == 0:  # no features: only the lse has anything to say
        if lse is not None:
            softmax.run_rows("lse", graph, scores, lse_out=lse)
        return
    aggregate("softmax", graph, values, out, weights=scores, lse_out=lse)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    if lse is None:
        lse = _row_lse(graph, scores)
    # grad_scores first holds dp = <grad_out[row], values[col]>, then p * (dp - sum_row p * dp).
    sddmm.edge_dot(graph, grad_out, values, 1.0, grad_scores)
    softmax.run_rows("grad_scores", graph, scores, g=grad_scores, lse_in=lse, out=grad_scores)
    graph_t, perm = plans.transposed(graph)
    aggregate("probs_perm", graph_t, grad_out, grad_values, weights=scores, perm=perm, lse_in=lse)
