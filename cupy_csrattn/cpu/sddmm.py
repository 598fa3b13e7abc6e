"""sddmm ("dot" and "add") and their backward on the CPU."""
import numpy as np

from cupy_csrattn.cpu import segments


def sddmm_dot(graph, dst, src, scale, out):
    scores = segments.edge_dot(graph, dst, src)
    scores *= scale
    segments.write(out, scores)


def sddmm_add(graph, dst, src, out):
    scores = segments.expand_rows(graph, segments.as_compute(dst))
    scores += np.take(segments.as_compute(src), graph.indices, axis=0)
    segments.write(out, scores)


def sddmm_dot_backward(graph, dst, src, grad_scores, scale, grad_dst, grad_src):
    weights = segments.as_compute(grad_scores) * scale
    segments.gather_sum(graph, weights, src, grad_dst)
    segments.gather_sum(graph, weights, dst, grad_src, transpose=True)


def sddmm_add_backward(graph, grad_scores, grad_dst, grad_src):
    segments.write(grad_dst, segments.segment_sum(graph, grad_scores))
    segments.write(grad_src, segments.source_sum(graph, grad_scores))
