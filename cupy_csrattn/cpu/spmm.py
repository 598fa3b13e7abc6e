"""spmm and its backward on the CPU."""
from cupy_csrattn.cpu import segments


def spmm(graph, weights, values, out):
    weights = None if weights is None else segments.as_f64(weights)
    out[...] = segments.gather_sum(graph, weights, segments.as_f64(values))


def spmm_backward(graph, weights, values, grad_out, grad_weights, grad_values):
    grad_out = segments.as_f64(grad_out)
    weights = None if weights is None else segments.as_f64(weights)
    if grad_weights is not None:
        grad_weights[...] = segments.edge_dot(graph, grad_out, segments.as_f64(values))
    grad_values[...] = segments.gather_sum(graph, weights, grad_out, transpose=True)
