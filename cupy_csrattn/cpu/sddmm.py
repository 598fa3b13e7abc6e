"""sddmm ("dot" and "add") and their backward on the CPU."""
from cupy_csrattn.cpu import segments


def sddmm_dot(graph, dst, src, scale, out):
    scores = segments.edge_dot(graph, segments.as_f64(dst), segments.as_f64(src))
    scores *= scale
    out[...] = scores


def sddmm_add(graph, dst, src, out):
    out[...] = segments.as_f64(dst)[segments.rows_of_edges(graph)] + segments.as_f64(src)[graph.indices]


def sddmm_dot_backward(graph, dst, src, grad_scores, scale, grad_dst, grad_src):
    weights = segments.as_f64(grad_scores) * scale
    grad_dst[...] = segments.gather_sum(graph, weights, segments.as_f64(src))
    grad_src[...] = segments.gather_sum(graph, weights, segments.as_f64(dst), transpose=True)


def sddmm_add_backward(graph, grad_scores, grad_dst, grad_src):
    grad_scores = segments.as_f64(grad_scores)
    grad_dst[...] = segments.segment_sum(graph, grad_scores)
    grad_src[...] = segments.source_sum(graph, grad_scores)
