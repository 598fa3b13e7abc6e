"""edge_softmax against the per-row loop reference."""

import numpy as np
import pytest
from helpers import poison

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import check_result, to_np
from cupy_csrattn.testing.graphs import hub, named_graph


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hub_row(xp, dtype):
    check_case(xp, CASE_BY_NAME["edge_softmax"], hub(), None, 1, dtype, seed=2)


@pytest.mark.parametrize("H", [None, 3])
def test_rows_sum_to_one(xp, H):
    graph = named_graph("warp_boundaries")
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((len(graph.indices),) + (() if H is None else (H,)))
    probs = to_np(ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores)))
    assert (probs >= 0).all() and (probs <= 1).all()
    sums = np.add.reduceat(probs, graph.indptr[:-1][np.diff(graph.indptr) > 0], axis=0)
    np.testing.assert_allclose(sums, 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_huge_scores_do_not_overflow(xp, dtype):
    """The row max is subtracted: scores around +-3e4 (exp overflows float64) stay finite."""
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(4)
    scores = (3e4 + rng.standard_normal(len(graph.indices)) * 3).astype(dtype)
    scores[graph.indptr[4]] = -3e4
    got = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores))
    check_result(xp, got, ref.edge_softmax(graph.indptr, scores)[0], dtype)


def test_shift_invariance_per_row(xp):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((len(graph.indices), 2))
    row_shift = rng.standard_normal((len(graph.indptr) - 1, 2)) * 50
    shifted = scores + np.repeat(row_shift, np.diff(graph.indptr), axis=0)
    g = make_graph(xp, graph)
    a = ca.edge_softmax(g, to_xp(xp, scores))
    b = ca.edge_softmax(g, to_xp(xp, shifted))
    check_result(xp, b, to_np(a), np.float64)


@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, H):
    graph = named_graph("unsorted_columns")
    rng = np.random.default_rng(6)
    shape = (len(graph.indices),) + (() if H is None else (H,))
    scores = rng.standard_normal(shape).astype(np.float32)
    out = poison(xp, shape, np.float32)
    got = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores), out=out)
    assert got is out
    check_result(xp, out, ref.edge_softmax(graph.indptr, scores)[0], np.float32)
