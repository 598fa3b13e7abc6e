"""edge_softmax and edge_softmax_backward."""

import math

import numpy as np
import scipy.sparse

from cupy_csrattn import _validate, backend
from cupy_csrattn.cpu import softmax as cpu_softmax
from cupy_csrattn.gpu import softmax as gpu_softmax
from cupy_csrattn.ops import traffic
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.ops.registry import register

NORM_BY = ("dst", "src")

# Normalizing by source runs over the rows of the graph's transpose, one per source node,
# however few the edges (a tuple graph's num_src is its largest index + 1: one stray id of
# 2**29 made a graph of 3 edges take over 24 GiB and the process be killed). Its indptr, the
# rows' degrees and blocks and the per-row, per-head softmax state peaked at 56 + 7 * H bytes
# per source node on the CPU backend (tracemalloc, 3 edges, 2**22 sources, H = 1 to 32).
SOURCE_ROW_BYTES, SOURCE_ROW_HEAD_BYTES = 64, 8


def _check_source_rows(place, norm_by, edge_array):
    """Before normalizing by source: MemoryError where its per-source state cannot fit."""
    if norm_by == "src":
        heads = math.prod(edge_array.shape[1:])
        nbytes = place.graph.num_src * (SOURCE_ROW_BYTES + SOURCE_ROW_HEAD_BYTES * heads)
        what = f"normalizing by source (num_src={place.graph.num_src} source nodes, H={heads})"
        backend.check_memory(what, nbytes, place.on_gpu)


@register(
    cpu=cpu_softmax.edge_softmax,
    gpu=gpu_softmax.edge_softmax,
    kernels=("softmax", "sddmm"),  # sddmm.cu's gather_edges serves norm_by="src"
    bytes=traffic.edge_softmax,
)
def edge_softmax(graph, scores=None, *, out=None, norm_by="dst"):
    """Softmax of edge scores over each destination row (or each source's edges), per head.

    ``probs[e, h] = exp(scores[e, h] - m) / sum_{e' in row(e)} exp(scores[e', h] - m)``
    with ``m`` the row maximum; with ``norm_by="src"`` the sum and the maximum run over the
    edges leaving the source of ``e`` instead (DGL's ``edge_softmax(g, e, norm_by="src")``).

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix (CSR, CSC, COO) or (indptr, indices[, num_src])
        Row ``d`` lists the source neighbours of destination ``d``.
    scores : (E, *S) float array, optional
        Edge scores in the graph's edge order (a sparse matrix's stored order). May be
        omitted when ``graph`` is a sparse matrix: its data are the scores, and the result is
        a sparse matrix of the same class and structure (with structure arrays of its own:
        changing the result never changes ``graph``).
    out : (E, *S) array, optional
        Written with the result and returned.
    norm_by : {"dst", "src"}
        "dst": normalize over the edges entering each destination (the rows of the graph);
        "src": over the edges leaving each source (the rows of ``graph.transpose()``, cached
        on a CSRGraph). For a sparse matrix: over its rows, or over its columns.

    Returns
    -------
    probs : (E, *S) array of the scores' dtype (or a sparse matrix, see above).
        Rows (or sources) whose scores are all -inf get zero weights; a NaN score makes its
        own row (or source) and head NaN.
    """
    _validate.choice("norm_by", norm_by, NORM_BY)
    matrix = None
    if scores is None and not (scipy.sparse.issparse(graph) or backend.is_cupyx_sparse(graph)):
        raise TypeError("scores is required unless graph is a sparse matrix whose data are the scores")
    g, order = _validate.resolve_graph(graph)  # first: it names graph for an unsupported format
    name = "scores"
    if scores is None:
        matrix, scores, name = graph, graph.data, "graph.data"  # an adjacency's int or bool data
    scores = _validate.float_array(name, scores)
    if matrix is not None and scores.ndim != 1:  # the result is a matrix of the same structure
        raise ValueError(f"graph.data must be 1-D, one score per stored entry, got shape {tuple(scores.shape)}")
    _validate.edge_array(name, scores, g)
    dtype, _ = _validate.result_dtypes(scores)
    if matrix is not None and matrix.format == "coo" and scipy.sparse.issparse(matrix) and dtype == np.float16:
        raise TypeError(
            "graph.data is float16, and scipy.sparse builds no COO matrix of float16 (the result takes graph's"
            " format): pass graph.tocsr(), or set its data to float32"
        )
    place = Placement(g, order, dict(scores=scores))
    _check_source_rows(place, norm_by, scores)
    canonical = place.edge_input(scores, dtype)
    work, result = place.output("out", out, scores.shape, dtype, canonical.shape, edge=True)
    place.run(edge_softmax.op, canonical, norm_by, work)
    if matrix is None:
        return result
    # The result owns its structure: an in-place method on it (sort_indices, ...) must not reach graph.
    if matrix.format == "coo":
        return type(matrix)((result, (matrix.row.copy(), matrix.col.copy())), shape=matrix.shape)
    return type(matrix)((result, matrix.indices.copy(), matrix.indptr.copy()), shape=matrix.shape)


@register(
    cpu=cpu_softmax.edge_softmax_backward,
    gpu=gpu_softmax.edge_softmax_backward,
    kernels=("softmax", "sddmm"),
    bytes=traffic.edge_softmax_backward,
    forward="edge_softmax",
)
def edge_softmax_backward(graph, probs, grad_probs, *, out=None, norm_by="dst"):
    """Gradient of edge_softmax with respect to its scores.

    ``grad_scores[e] = probs[e] * (grad_probs[e] - sum_{e' in row(e)} probs[e'] * grad_probs[e'])``,
    the sum running over the edges leaving the source of ``e`` with ``norm_by="src"``.

    ``S`` is the trailing shape shared by the call's edge and node arrays: none, ``(H,)`` or any
    tuple, each of its elements a head.

    Parameters
    ----------
    graph : CSRGraph, scipy/cupyx sparse matrix or (indptr, indices[, num_src])
    probs : (E, *S) float array
        The output of edge_softmax.
    grad_probs : (E, *S) float array
        Gradient of the loss with respect to probs.
    out : (E, *S) array, optional
    norm_by : {"dst", "src"}
        The forward's norm_by.

    Returns
    -------
    grad_scores : (E, *S) array
    """
    _validate.choice("norm_by", norm_by, NORM_BY)
    g, order = _validate.resolve_graph(graph)
    probs = _validate.float_array("probs", probs)
    grad_probs = _validate.float_array("grad_probs", grad_probs)
    heads = _validate.edge_array("probs", probs, g)
    _validate.edge_array("grad_probs", grad_probs, g, heads=heads, heads_of="probs")
    dtype, _ = _validate.result_dtypes(probs, grad_probs)
    place = Placement(g, order, dict(probs=probs, grad_probs=grad_probs))
    _check_source_rows(place, norm_by, probs)
    probs_c = place.edge_input(probs, dtype)
    grad_c = place.edge_input(grad_probs, dtype)
    work, result = place.output("out", out, probs.shape, dtype, probs_c.shape, edge=True)
    place.run(edge_softmax_backward.op, probs_c, grad_c, norm_by, work)
    return result
