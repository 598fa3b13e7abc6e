"""edge_softmax and its backward on the CPU."""

from cupy_csrattn.cpu import segment_softmax, segment_sums


def edge_softmax(graph, scores, out):
    segment_sums.write(out, segment_softmax.softmax(graph, scores, out=out))


def edge_softmax_backward(graph, probs, grad_probs, out):
    segment_sums.write(out, segment_softmax.softmax_grad(graph, probs, grad_probs, out=out))
