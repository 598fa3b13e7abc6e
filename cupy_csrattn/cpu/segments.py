"""Per-row reductions and sparse products shared by the CPU ops.

Rows are reduced with ufunc.reduceat over the non-empty rows only (reduceat gives an empty
segment the next element, not the identity). Weighted gathers go through scipy.sparse
products one head at a time, so no (E, F) array is ever materialized.
"""
import numpy as np
import scipy.sparse

# Edges per block for per-edge dot products: bounds the gathered temporaries to
# about this many float64 elements per operand.
_DOT_BLOCK_ELEMENTS = 1 << 21


def as_f64(x):
    return np.asarray(x, dtype=np.float64)


def rows_of_edges(graph):
    return graph.row_of_edge()


def _nonempty(graph):
    def build():
        degrees = np.diff(graph.indptr)
        rows = np.flatnonzero(degrees)
        return rows, graph.indptr[:-1][rows].astype(np.intp)
    return graph.cached("cpu_nonempty_rows", build)


def segment_max(graph, x):
    """(N, H) row maxima of an (E, H) array; -inf for empty rows; NaN propagates."""
    result = np.full((graph.num_dst, x.shape[1]), -np.inf)
    rows, starts = _nonempty(graph)
    if len(rows):
        result[rows] = np.maximum.reduceat(x, starts, axis=0)
    return result


def segment_sum(graph, x):
    """(N, H) row sums of an (E, H) array; 0 for empty rows."""
    result = np.zeros((graph.num_dst, x.shape[1]))
    rows, starts = _nonempty(graph)
    if len(rows):
        result[rows] = np.add.reduceat(x, starts, axis=0)
    return result


def source_sum(graph, x):
    """(num_src, H): for each source node, the sum of x over its outgoing edges."""
    result = np.empty((graph.num_src, x.shape[1]))
    for head in range(x.shape[1]):
        result[:, head] = np.bincount(graph.indices, weights=x[:, head], minlength=graph.num_src)
    return result


def _scipy_index_arrays(graph):
    # The index dtype scipy would pick, so that building a matrix per head copies nothing.
    largest = max(graph.num_edges, graph.num_dst, graph.num_src)
    dtype = np.int32 if largest < np.iinfo(np.int32).max else np.int64
    return graph.indices.astype(dtype, copy=False), graph.indptr.astype(dtype, copy=False)


def weighted_matrix(graph, weights):
    """scipy CSR array with the graph's structure and the given (E,) float64 weights."""
    indices, indptr = graph.cached("cpu_scipy_index", lambda: _scipy_index_arrays(graph))
    return scipy.sparse.csr_array((weights, indices, indptr), shape=graph.shape)


def gather_sum(graph, weights, values, transpose=False):
    """(N, H, F) per head: sum over edges of weights[e, h] * values[other end of e, h].

    Without transpose: out[d] sums over the edges of row d, gathering values[src].
    With transpose: out[s] sums over the edges leaving s, gathering values[dst].
    weights=None means 1.
    """
    heads, features = values.shape[1], values.shape[2]
    rows_out = graph.num_src if transpose else graph.num_dst
    result = np.empty((rows_out, heads, features))
    ones = np.ones(graph.num_edges) if weights is None else None
    for head in range(heads):
        matrix = weighted_matrix(graph, ones if weights is None else weights[:, head])
        if transpose:
            matrix = matrix.T
        result[:, head, :] = matrix @ np.ascontiguousarray(values[:, head, :])
    return result


def edge_dot(graph, dst_feat, src_feat):
    """(E, H): <dst_feat[dst(e), h], src_feat[src(e), h]> over the last axis, in blocks."""
    heads, features = dst_feat.shape[1], dst_feat.shape[2]
    result = np.empty((graph.num_edges, heads))
    rows = rows_of_edges(graph)
    block = max(1, _DOT_BLOCK_ELEMENTS // max(1, heads * features))
    for start in range(0, graph.num_edges, block):
        edges = slice(start, start + block)
        result[edges] = np.einsum("ehf,ehf->eh", dst_feat[rows[edges]], src_feat[graph.indices[edges]])
    return result


def softmax(graph, scores):
    """(probs (E, H), lse (N, H)) of float64 scores.

    An empty row or one whose scores are all -inf has zero weights and lse -inf; a NaN
    (or +inf) score makes its own row and head NaN.
    """
    rows = rows_of_edges(graph)
    row_max = segment_max(graph, scores)
    shift = np.where(np.isneginf(row_max), 0.0, row_max)
    with np.errstate(invalid="ignore", over="ignore"):
        probs = np.exp(scores - shift[rows])
    total = segment_sum(graph, probs)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = shift + np.log(total)
        total_per_edge = total[rows]
        np.divide(probs, total_per_edge, out=probs, where=total_per_edge != 0)
    return probs, lse


def probs_from_lse(graph, scores, lse):
    """exp(scores - lse[row]) with rows of lse -inf at zero weight."""
    lse_per_edge = lse[rows_of_edges(graph)]
    with np.errstate(invalid="ignore", over="ignore"):
        probs = np.exp(scores - lse_per_edge)
    probs[np.isneginf(lse_per_edge)] = 0.0
    return probs


def softmax_grad(graph, probs, grad_probs):
    """grad of the scores given the probabilities and the grad of the probabilities."""
    row_dot = segment_sum(graph, probs * grad_probs)
    return probs * (grad_probs - row_dot[rows_of_edges(graph)])
