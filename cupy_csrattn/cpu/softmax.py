"""edge_softmax and its backward on the CPU."""
from cupy_csrattn.cpu import segments


def edge_softmax(graph, scores, out):
    segments.write(out, segments.softmax(graph, scores, out=out))


def edge_softmax_backward(graph, probs, grad_probs, out):
    segments.write(out, segments.softmax_grad(graph, probs, grad_probs, out=out))
