"""sddmm ("dot" and "add") and their backward on the CPU."""

import numpy as np

from cupy_csrattn.cpu import edge_dots, segment_sums


def sddmm(graph, dst, src, op, scale, out):
    """op "dot": scale * <dst[row], src[col]> per edge and head; "add": dst[row] + src[col]."""
    if op == "dot":
        _sddmm_dot(graph, dst, src, scale, out)
    else:
        _sddmm_add(graph, dst, src, out)


def sddmm_backward(graph, dst, src, grad_scores, op, scale, grad_dst, grad_src):
    if op == "dot":
        _sddmm_dot_backward(graph, dst, src, grad_scores, scale, grad_dst, grad_src)
    else:
        _sddmm_add_backward(graph, grad_scores, grad_dst, grad_src)


def _sddmm_dot(graph, dst, src, scale, out):
    scores = edge_dots.edge_dot(graph, dst, src)
    scores *= scale
    segment_sums.write(out, scores)


def _sddmm_add(graph, dst, src, out):
    scores = segment_sums.expand_rows(graph, segment_sums.as_compute(dst))
    scores += np.take(segment_sums.as_compute(src), graph.indices, axis=0)
    segment_sums.write(out, scores)


def _sddmm_dot_backward(graph, dst, src, grad_scores, scale, grad_dst, grad_src):
    weights = segment_sums.as_compute(grad_scores) * scale
    segment_sums.gather_sum(graph, weights, src, grad_dst)
    segment_sums.gather_sum(graph, weights, dst, grad_src, transpose=True)


def _sddmm_add_backward(graph, grad_scores, grad_dst, grad_src):
    segment_sums.write(grad_dst, segment_sums.segment_sum(graph, grad_scores))
    segment_sums.write(grad_src, segment_sums.source_sum(graph, grad_scores))
