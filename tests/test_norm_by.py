"""edge_softmax(norm_by="src") and its backward: each source's outgoing edges are normalized.

Checked against a dense softmax along the other axis (as DGL tests it), the loop reference,
sparse matrices (normalized over their columns), the NaN / -inf semantics and bad input.
"""

import numpy as np
import pytest
import scipy.sparse
import scipy.special

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.compare import check_result, to_np
from cupy_csrattn.testing.graphs import GraphData, from_rows, named_graph, row_of_edges


def _unique_pairs_graph(rng, num_dst, num_src, density):
    """A graph without duplicate edges and with unsorted rows, some rows and sources empty."""
    mask = rng.random((num_dst, num_src)) < density
    mask[:, 3] = False  # a source without edges
    mask[4] = False  # a destination without edges
    rows = [list(rng.permutation(np.flatnonzero(mask[d]))) for d in range(num_dst)]
    return from_rows(rows, num_src), mask


@pytest.mark.parametrize("H", [None, 1, 3])
def test_matches_dense_softmax_over_destinations(xp, H):
    """probs[e] = softmax over the column src(e) of a dense (num_dst, num_src) score matrix
    whose missing entries are -inf."""
    rng = np.random.default_rng(30)
    graph, mask = _unique_pairs_graph(rng, 17, 11, 0.4)
    heads = () if H is None else (H,)
    dense = rng.standard_normal((17, 11) + heads) * 2
    dense[~mask] = -np.inf
    dst, src = row_of_edges(graph.indptr), graph.indices.astype(np.int64)
    scores = dense[dst, src]
    with np.errstate(invalid="ignore"):  # the columns without edges are all -inf
        expected = scipy.special.softmax(dense, axis=0)[dst, src]
    got = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores), norm_by="src")
    check_result(xp, got, expected, np.float64)
    sums = np.zeros((11,) + heads)
    np.add.at(sums, src, to_np(got))
    np.testing.assert_allclose(sums[np.bincount(src, minlength=11) > 0], 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_hub_source_with_duplicates(xp, dtype):
    """One source with thousands of edges spread over the rows (duplicates included): a long
    row of the transpose, split on the GPU."""
    rng = np.random.default_rng(31)
    rows = [list(rng.integers(0, 5, rng.integers(0, 9))) + [0] * 300 for _ in range(20)]
    graph = from_rows(rows, 5)
    scores = (rng.standard_normal((len(graph.indices), 2)) * 3).astype(dtype)
    got = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores), norm_by="src")
    check_result(xp, got, ref.edge_softmax(graph.indptr, scores, graph.indices, "src")[0], dtype)
    grad = rng.standard_normal(scores.shape).astype(dtype)
    probs = ref.edge_softmax(graph.indptr, scores, graph.indices, "src")[0].astype(dtype)
    got = ca.edge_softmax_backward(make_graph(xp, graph), to_xp(xp, probs), to_xp(xp, grad), norm_by="src")
    check_result(xp, got, ref.edge_softmax_backward(graph.indptr, probs, grad, graph.indices, "src"), dtype)


def test_equals_dst_softmax_of_the_transpose(xp):
    """Normalizing by source is normalizing the rows of the transposed graph, in its edge order."""
    graph = named_graph("duplicates")
    rng = np.random.default_rng(32)
    scores = rng.standard_normal((len(graph.indices), 2))
    g = make_graph(xp, graph)
    graph_t, perm = g.transpose()
    by_src = to_np(ca.edge_softmax(g, to_xp(xp, scores), norm_by="src"))
    on_transpose = to_np(ca.edge_softmax(graph_t, to_xp(xp, scores[to_np(perm)])))
    np.testing.assert_array_equal(by_src[to_np(perm)], on_transpose)


def test_semantics_of_special_scores(xp):
    """A source whose scores are all -inf gets zero weights; a NaN score makes its own
    source and head NaN and no other; sources that are empty do not matter."""
    # edges: (dst, src) = (0, 0) (0, 1) (1, 1) (1, 2) (2, 0) (2, 2) (3, 4); source 3 has no edges
    graph = GraphData(np.array([0, 2, 4, 6, 7]), np.array([0, 1, 1, 2, 0, 2, 4]), 5)
    scores = np.array(
        [[1.0, -np.inf], [2.0, 0.5], [-np.inf, np.nan], [0.0, 1.0], [3.0, -np.inf], [-1.0, 2.0], [-np.inf, 7.0]]
    )
    result = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores), norm_by="src")
    got = to_np(result)
    expected = ref.edge_softmax(graph.indptr, scores, graph.indices, "src")[0]
    assert got[6, 0] == 0.0 and got[6, 1] == 1.0  # source 4: one edge, -inf in head 0
    assert got[0, 1] == 0.0 and got[4, 1] == 0.0  # source 0, head 1: all -inf
    assert np.isnan(got[[1, 2], 1]).all()  # source 1, head 1 holds the NaN
    assert not np.isnan(np.delete(got[:, 1], [1, 2])).any() and not np.isnan(got[:, 0]).any()
    check_result(xp, result, expected, np.float64, equal_nan=True)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_matrix_is_normalized_over_its_columns(xp, fmt):
    rng = np.random.default_rng(33)
    dense = np.where(rng.random((6, 9)) < 0.5, rng.standard_normal((6, 9)), 0.0)
    dense[:, 2] = 0.0  # an empty column
    matrix = getattr(scipy.sparse, f"{fmt}_matrix")(dense)
    if xp is not np:
        cupyx_sparse = pytest.importorskip("cupyx.scipy.sparse")
        matrix = getattr(cupyx_sparse, f"{fmt}_matrix")(matrix)
    result = ca.edge_softmax(matrix, norm_by="src")
    assert type(result) is type(matrix) and result.format == fmt
    got = to_np(result.toarray())
    masked = np.where(dense != 0, dense, -np.inf)
    with np.errstate(invalid="ignore"):
        expected = np.where(dense != 0, scipy.special.softmax(masked, axis=0), 0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("op", ["edge_softmax", "edge_softmax_backward"])
@pytest.mark.parametrize("norm_by", ["row", "SRC", None, 1, np.array(["dst", "src"]), np.array("dst")])
def test_norm_by_must_be_dst_or_src(xp, op, norm_by):
    graph = named_graph("odd_sizes")
    scores = to_xp(xp, np.ones(len(graph.indices)))
    args = (scores,) if op == "edge_softmax" else (scores, scores)
    with pytest.raises(ValueError, match="norm_by"):
        getattr(ca, op)(make_graph(xp, graph), *args, norm_by=norm_by)
