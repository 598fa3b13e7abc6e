"""attention_aggregate, graph_attention and gat_attention (with and without return_lse)."""

import inspect
import math

import numpy as np
import pytest
from helpers import poison

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.ops.registry import OPS
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import array_module_of, check_result, lse_dtype, to_np
from cupy_csrattn.testing.graphs import hub, named_graph

# The fused ops: those that return the row-wise lse on request (each has a case of its own name).
FUSED = tuple(name for name, op in OPS.items() if "return_lse" in inspect.signature(op.function).parameters)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hub_row_aggregate(xp, dtype):
    check_case(xp, CASE_BY_NAME["attention_aggregate_lse"], hub(), None, 3, dtype, seed=2)


def test_hub_row_gat(xp):
    check_case(xp, CASE_BY_NAME["gat_attention_lse_slope"], hub(), None, 2, np.float32, seed=3)


@pytest.mark.parametrize("F", [1, 32, 33, 130])
def test_feature_widths(xp, F):
    check_case(xp, CASE_BY_NAME["attention_aggregate_lse"], named_graph("warp_boundaries"), 2, F, np.float32, seed=F)


def test_every_fused_op_has_a_case_of_its_name():
    assert FUSED and all(name in CASE_BY_NAME for name in FUSED), FUSED


@pytest.mark.parametrize("func", FUSED)
def test_return_lse_false_gives_one_array(xp, func):
    case = CASE_BY_NAME[func]
    graph = named_graph("odd_sizes")
    args, _ = case.make(np.random.default_rng(4), graph, 3, 5, np.float64)
    result = getattr(ca, func)(make_graph(xp, graph), *to_xp(xp, args))
    assert array_module_of(result) == xp.__name__ and not isinstance(result, tuple)
    result = getattr(ca, func)(make_graph(xp, graph), *to_xp(xp, args), return_lse=False)
    assert array_module_of(result) == xp.__name__ and not isinstance(result, tuple)


@pytest.mark.parametrize("H", [None, 3])
def test_aggregate_equals_spmm_of_softmax(xp, H):
    graph = named_graph("duplicates")
    rng = np.random.default_rng(5)
    head = () if H is None else (H,)
    scores = to_xp(xp, rng.standard_normal((len(graph.indices),) + head))
    values = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (6,)))
    g = make_graph(xp, graph)
    fused, lse = ca.attention_aggregate(g, scores, values, return_lse=True)
    unfused = ca.spmm(g, ca.edge_softmax(g, scores), values)
    check_result(xp, fused, to_np(unfused), np.float64)
    check_result(xp, lse, ref.edge_softmax(graph.indptr, to_np(scores))[1], np.float64)


@pytest.mark.parametrize("H", [None, 3])
def test_graph_attention_equals_aggregate_of_sddmm(xp, H):
    graph = named_graph("unsorted_columns")
    rng = np.random.default_rng(6)
    head = () if H is None else (H,)
    q = to_xp(xp, rng.standard_normal((len(graph.indptr) - 1,) + head + (4,)))
    k = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (4,)))
    v = to_xp(xp, rng.standard_normal((graph.num_src,) + head + (3,)))
    g = make_graph(xp, graph)
    # default scale is 1/sqrt(D), D = 4
    fused, lse = ca.graph_attention(g, q, k, v, return_lse=True)
    scores = ca.sddmm(g, q, k, op="dot", scale=0.5)
    out, lse_unfused = ca.attention_aggregate(g, scores, v, return_lse=True)
    check_result(xp, fused, to_np(out), np.float64)
    check_result(xp, lse, to_np(lse_unfused), np.float64)
    explicit = ca.graph_attention(g, q, k, v, scale=1 / math.sqrt(4))
    check_result(xp, explicit, to_np(out), np.float64)


@pytest.mark.parametrize("slope", [0.2, 0.01, 1.0])
def test_gat_equals_aggregate_of_leaky_relu_add(xp, slope):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(7)
    a_dst = rng.standard_normal((len(graph.indptr) - 1, 2))
    a_src = rng.standard_normal((graph.num_src, 2))
    values = rng.standard_normal((graph.num_src, 2, 5))
    g = make_graph(xp, graph)
    z = to_np(ca.sddmm(g, to_xp(xp, a_dst), to_xp(xp, a_src), op="add"))
    scores = np.where(z > 0, z, slope * z)
    expected = ref.attention_aggregate(graph.indptr, graph.indices, scores, values)
    got = ca.gat_attention(
        g, to_xp(xp, a_dst), to_xp(xp, a_src), to_xp(xp, values), negative_slope=slope, return_lse=True
    )
    check_result(xp, got[0], expected[0], np.float64)
    check_result(xp, got[1], expected[1], np.float64)


@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("case_name", FUSED)
@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, case_name, H, return_lse):
    case = CASE_BY_NAME[case_name]
    graph = named_graph("zero_degree_rows")
    args, _ = case.make(np.random.default_rng(8), graph, H, 5, np.float32)
    head = () if H is None else (H,)
    out = poison(xp, (len(graph.indptr) - 1,) + head + (5,), np.float32)
    result = getattr(ca, case_name)(make_graph(xp, graph), *to_xp(xp, args), out=out, return_lse=return_lse)
    expected_out, expected_lse = getattr(ref, case_name)(graph.indptr, graph.indices, *args)
    if return_lse:
        assert isinstance(result, tuple) and len(result) == 2
        assert result[0] is out
        check_result(xp, result[1], expected_lse, lse_dtype(np.float32))
    else:
        assert result is out
    check_result(xp, out, expected_out, np.float32)
