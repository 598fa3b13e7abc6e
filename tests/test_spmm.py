"""spmm (weighted and unweighted) against the per-row loop reference."""

import numpy as np
import pytest
from helpers import poison

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import check_result
from cupy_csrattn.testing.graphs import hub, named_graph


@pytest.mark.parametrize("F", [1, 32, 33])
def test_feature_widths(xp, F):
    """F = 1, a full warp and one past it."""
    check_case(xp, CASE_BY_NAME["spmm"], named_graph("warp_boundaries"), 2, F, np.float32, seed=F)


@pytest.mark.parametrize("case", [CASE_BY_NAME["spmm"], CASE_BY_NAME["spmm_unweighted"]], ids=str)
def test_hub_row(xp, case):
    check_case(xp, case, hub(), None, 3, np.float64, seed=2)


def test_unweighted_equals_weights_of_one(xp):
    graph = named_graph("duplicates")
    rng = np.random.default_rng(3)
    values = rng.standard_normal((graph.num_src, 3, 5))
    g = make_graph(xp, graph)
    ones = np.ones((len(graph.indices), 3))
    unweighted = ca.spmm(g, None, to_xp(xp, values))
    weighted = ca.spmm(g, to_xp(xp, ones), to_xp(xp, values))
    check_result(xp, unweighted, ref.spmm(graph.indptr, graph.indices, None, values), np.float64)
    check_result(xp, weighted, ref.spmm(graph.indptr, graph.indices, ones, values), np.float64)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, H, weighted):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(4)
    head = () if H is None else (H,)
    weights = rng.standard_normal((len(graph.indices),) + head) if weighted else None
    values = rng.standard_normal((graph.num_src,) + head + (7,))
    out = poison(xp, (len(graph.indptr) - 1,) + head + (7,), np.float64)
    got = ca.spmm(make_graph(xp, graph), to_xp(xp, weights), to_xp(xp, values), out=out)
    assert got is out
    check_result(xp, out, ref.spmm(graph.indptr, graph.indices, weights, values), np.float64)
