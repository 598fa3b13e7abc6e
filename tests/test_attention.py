"""attention_aggregate, graph_attention and gat_attention (with and without return_lse)."""
import math

import numpy as np
import pytest

import reference as ref
from cases import CASE_BY_NAME, case_params, check_case
from graphs import hub, named_graph
from helpers import array_module_of, check_result, lse_dtype, make_graph, poison, to_np, to_xp

FUSED = ("attention_aggregate", "graph_attention", "gat_attention")
FUSED_CASES = case_params(*FUSED)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hub_row_aggregate(xp, api, dtype):
    check_case(xp, api, CASE_BY_NAME["attention_aggregate_lse"], hub(), None, 3, dtype, seed=2)


def test_hub_row_gat(xp, api):
    check_case(xp, api, CASE_BY_NAME["gat_attention_lse_slope"], hub(), None, 2, np.float32,
               seed=3)


@pytest.mark.parametrize("F", [1, 32, 33, 130])
def test_feature_widths(xp, api, F):
    check_case(xp, api, CASE_BY_NAME["attention_aggregate_lse"], named_graph("warp_boundaries"),
               2, F, np.float32, seed=F)


@pytest.mark.parametrize("func", FUSED)
def test_return_lse_false_gives_one_array(xp, api, func):
    case = CASE_BY_NAME[func]
    graph = named_graph("odd_sizes")
    args, _ = case.make(np.random.default_rng(4), graph, 3, 5, np.float64)
    result = getattr(api, func)(make_graph(xp, graph), *to_xp(xp, args))
    assert array_module_of(result) == xp.__name__ and not isinstance(result, tuple)
    result = getattr(api, func)(make_graph(xp, graph), *to_xp(xp, args), return_lse=False)
    assert array_module_of(result) == xp.__name__ and not isinstance(result, tuple)


@pytest.mark.parametrize("H", [None, 3])
def test_aggregate_equals_spmm_of_softmax(xp, api, H):
    graph = named_graph("duplicates")
    rng = np.random.default_rng(5)
    head = () if H is None else (H,)
    scores = to_xp(xp, rng.standard_normal((len(graph.indices),) + head))
    values = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (6,)))
    g = make_graph(xp, graph)
    fused, lse = api.attention_aggregate(g, scores, values, return_lse=True)
    unfused = api.spmm(g, api.edge_softmax(g, scores), values)
    check_result(xp, fused, to_np(unfused), np.float64)
    check_result(xp, lse, ref.edge_softmax(graph.indptr, to_np(scores))[1], np.float64)


@pytest.mark.parametrize("H", [None, 3])
def test_graph_attention_equals_aggregate_of_sddmm(xp, api, H):
    graph = named_graph("unsorted_columns")
    rng = np.random.default_rng(6)
    head = () if H is None else (H,)
    q = to_xp(xp, rng.standard_normal((len(graph.indptr) - 1,) + head + (4,)))
    k = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (4,)))
    v = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (3,)))
    g = make_graph(xp, graph)
    # default scale is 1/sqrt(D), D = 4
    fused, lse = api.graph_attention(g, q, k, v, return_lse=True)
    scores = api.sddmm(g, q, k, op="dot", scale=0.5)
    out, lse_unfused = api.attention_aggregate(g, scores, v, return_lse=True)
    check_result(xp, fused, to_np(out), np.float64)
    check_result(xp, lse, to_np(lse_unfused), np.float64)
    explicit = api.graph_attention(g, q, k, v, scale=1 / math.sqrt(4))
    check_result(xp, explicit, to_np(out), np.float64)


@pytest.mark.parametrize("slope", [0.2, 0.01, 1.0])
def test_gat_equals_aggregate_of_leaky_relu_add(xp, api, slope):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(7)
    a_dst = rng.standard_normal((len(graph.indptr) - 1, 2))
    a_src = rng.standard_normal((graph.num_src, 2))
    values = rng.standard_normal((graph.num_src, 2, 5))
    g = make_graph(xp, graph)
    z = to_np(api.sddmm(g, to_xp(xp, a_dst), to_xp(xp, a_src), op="add"))
    scores = np.where(z > 0, z, slope * z)
    expected = ref.attention_aggregate(graph.indptr, graph.indices, scores, values)
    got = api.gat_attention(g, to_xp(xp, a_dst), to_xp(xp, a_src), to_xp(xp, values),
                            negative_slope=slope, return_lse=True)
    check_result(xp, got[0], expected[0], np.float64)
    check_result(xp, got[1], expected[1], np.float64)


@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("case_name", ["attention_aggregate", "graph_attention", "gat_attention"])
@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, api, case_name, H, return_lse):
    case = CASE_BY_NAME[case_name]
    graph = named_graph("zero_degree_rows")
    args, _ = case.make(np.random.default_rng(8), graph, H, 5, np.float32)
    head = () if H is None else (H,)
    out = poison(xp, (len(graph.indptr) - 1,) + head + (5,), np.float32)
    result = getattr(api, case_name)(make_graph(xp, graph), *to_xp(xp, args), out=out,
                                     return_lse=return_lse)
    expected_out, expected_lse = getattr(ref, case_name)(graph.indptr, graph.indices, *args)
    if return_lse:
        assert isinstance(result, tuple) and len(result) == 2
        assert result[0] is out
        check_result(xp, result[1], expected_lse, lse_dtype(np.float32))
    else:
        assert result is out
    check_result(xp, out, expected_out, np.float32)
