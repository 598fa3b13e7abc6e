"""spmm (weighted and unweighted) against the per-row loop reference."""
import numpy as np
import pytest

import reference as ref
from cases import CASE_BY_NAME, case_params, check_case
from graphs import hub, named_graph
from helpers import check_result, make_graph, poison, to_xp

SPMM_CASES = case_params("spmm")


@pytest.mark.parametrize("F", [1, 32, 33])
def test_feature_widths(xp, api, F):
    """F = 1, a full warp and one past it."""
    check_case(xp, api, CASE_BY_NAME["spmm"], named_graph("warp_boundaries"), 2, F,
               np.float32, seed=F)


@pytest.mark.parametrize("case", [CASE_BY_NAME["spmm"], CASE_BY_NAME["spmm_unweighted"]],
                         ids=str)
def test_hub_row(xp, api, case):
    check_case(xp, api, case, hub(), None, 3, np.float64, seed=2)


def test_unweighted_equals_weights_of_one(xp, api):
    graph = named_graph("duplicates")
    rng = np.random.default_rng(3)
    values = rng.standard_normal((graph.num_src, 3, 5))
    g = make_graph(xp, graph)
    ones = np.ones((len(graph.indices), 3))
    unweighted = api.spmm(g, None, to_xp(xp, values))
    weighted = api.spmm(g, to_xp(xp, ones), to_xp(xp, values))
    check_result(xp, unweighted, ref.spmm(graph.indptr, graph.indices, None, values), np.float64)
    check_result(xp, weighted, ref.spmm(graph.indptr, graph.indices, ones, values), np.float64)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, api, H, weighted):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(4)
    head = () if H is None else (H,)
    weights = rng.standard_normal((len(graph.indices),) + head) if weighted else None
    values = rng.standard_normal((graph.num_src,) + head + (7,))
    out = poison(xp, (len(graph.indptr) - 1,) + head + (7,), np.float64)
    got = api.spmm(make_graph(xp, graph), to_xp(xp, weights), to_xp(xp, values), out=out)
    assert got is out
    check_result(xp, out, ref.spmm(graph.indptr, graph.indices, weights, values), np.float64)
