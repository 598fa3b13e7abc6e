"""spmm and its backward on the CPU."""

from cupy_csrattn.cpu import edge_dots, segment_sums


def spmm(graph, weights, values, out):
    segment_sums.gather_sum(graph, weights, values, out)


def spmm_backward(graph, weights, values, grad_out, grad_weights, grad_values):
    if grad_weights is not None:
        segment_sums.write(grad_weights, edge_dots.edge_dot(graph, grad_out, values))
    segment_sums.gather_sum(graph, weights, grad_out, grad_values, transpose=True)
