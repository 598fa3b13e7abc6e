"""edge_softmax and its backward on the CPU."""
from cupy_csrattn.cpu import segments


def edge_softmax(graph, scores, out):
    out[...] = segments.softmax(graph, segments.as_f64(scores))[0]


def edge_softmax_backward(graph, probs, grad_probs, out):
    out[...] = segments.softmax_grad(graph, segments.as_f64(probs), segments.as_f64(grad_probs))
