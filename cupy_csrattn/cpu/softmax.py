"""edge_softmax and its backward on the CPU."""

from cupy_csrattn.cpu import segment_softmax, segment_sums


def edge_softmax(graph, scores, norm_by, out):
    if norm_by == "dst":
        segment_sums.write(out, segment_softmax.softmax(graph, scores, out=out))
        return
    # Each source's edges are a row of the transpose: normalize there, in its edge order.
    graph_t, perm = graph.transpose()
    out[perm] = segment_softmax.softmax(graph_t, scores[perm])


def edge_softmax_backward(graph, probs, grad_probs, norm_by, out):
    # A probability of exactly 0 adds nothing, whatever its grad_probs holds: a row of all -inf
    # scores has zero gradient, as in the attentions' backwards.
    if norm_by == "dst":
        grads = segment_softmax.softmax_grad(graph, probs, grad_probs, out=out, zero_weights_add_nothing=True)
        segment_sums.write(out, grads)
        return
    graph_t, perm = graph.transpose()
    out[perm] = segment_softmax.softmax_grad(graph_t, probs[perm], grad_probs[perm], zero_weights_add_nothing=True)
