"""spmm and its backward on the CPU."""
from cupy_csrattn.cpu import segments


def spmm(graph, weights, values, out):
    segments.gather_sum(graph, weights, values, out)


def spmm_backward(graph, weights, values, grad_out, grad_weights, grad_values):
    if grad_weights is not None:
        segments.write(grad_weights, segments.edge_dot(graph, grad_out, values))
    segments.gather_sum(graph, weights, grad_out, grad_values, transpose=True)
