"""Launchers for spmm and its backward."""

from cupy_csrattn.gpu.aggregate import aggregate
from cupy_csrattn.gpu.attention import run_span, span_for
from cupy_csrattn.gpu.sddmm import edge_dot


def spmm(graph, weights, values, out):
    """Given weights on the head-span kernels (weight kind "weights": each edge's weight read
    in edge order) where the shape fits them, else, and without weights, on the row kernels
    of aggregate.cu."""
    if weights is None:
        aggregate("ones", graph, values, out)
        return
    shape = span_for("forward", weights, weights, values, out) if values.shape[2] else None
    if shape is not None:
        run_span("forward", shape, "weights", graph, weights, weights, 0.0, values, out)
    else:
        aggregate("weights", graph, values, out, weights=weights, scale=1.0)


def spmm_backward(graph, weights, values, grad_out, grad_weights, grad_values):
    if grad_weights is not None:
        edge_dot(graph, grad_out, values, 1.0, grad_weights)
    graph_t, perm = graph.transpose()
    if weights is None:
        aggregate("ones", graph_t, grad_out, grad_values)
    else:
        aggregate("weights_perm", graph_t, grad_out, grad_values, weights=weights, perm=perm, scale=1.0)
