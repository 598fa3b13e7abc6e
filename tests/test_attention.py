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
from cupy_csrattn.testing.compare import array_module_of, assert_close, check_result, lse_dtype, to_np
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


# ------------------------------------------------------------------ edge terms


def _edge_inputs(rng, graph, op, H, F):
    """(node inputs, edge keyword, edge array) of graph_attention (q, k, v of one width) or gat_attention."""
    n_dst, n_src, E = len(graph.indptr) - 1, graph.num_src, len(graph.indices)
    if op == "graph_attention":
        nodes = (rng.standard_normal((n_dst, H, F)), rng.standard_normal((n_src, H, F)))
        return (*nodes, rng.standard_normal((n_src, H, F))), "edge_feat", rng.standard_normal((E, H, F))
    nodes = (rng.standard_normal((n_dst, H)), rng.standard_normal((n_src, H)))
    return (*nodes, rng.standard_normal((n_src, H, F))), "edge_score", rng.standard_normal((E, H))


@pytest.mark.parametrize("op", ["graph_attention", "gat_attention"])
def test_zero_edge_terms_change_nothing(xp, op):
    """Zero edge features (scores) give the results of the call without them, and a zero-free
    gradient of their own."""
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(9)
    nodes, keyword, edge = _edge_inputs(rng, graph, op, 2, 3)
    g, nodes = make_graph(xp, graph), to_xp(xp, nodes)
    zero = xp.zeros(edge.shape)
    out, lse = getattr(ca, op)(g, *nodes, return_lse=True)
    out_zero, lse_zero = getattr(ca, op)(g, *nodes, return_lse=True, **{keyword: zero})
    check_result(xp, out_zero, to_np(out), np.float64)
    check_result(xp, lse_zero, to_np(lse), np.float64)
    grad_out = to_xp(xp, rng.standard_normal(out.shape))
    backward = getattr(ca, op + "_backward")
    grads = backward(g, *nodes, out, grad_out, lse)
    grads_zero = backward(g, *nodes, out, grad_out, lse, **{keyword: zero})
    assert len(grads) == 3 and len(grads_zero) == 4 and grads_zero[3].shape == edge.shape
    for got, want in zip(grads_zero, grads):
        check_result(xp, got, to_np(want), np.float64)


def test_edge_feat_is_a_key_and_value_of_its_own(xp):
    """graph_attention with edge_feat equals, without it, the call on the graph whose edge e
    reads source e of the per-edge keys k[src] + edge_feat and values v[src] + edge_feat."""
    graph = named_graph("duplicates")
    rng = np.random.default_rng(10)
    (q, k, v), _, edge_feat = _edge_inputs(rng, graph, "graph_attention", 2, 4)
    E = len(graph.indices)
    per_edge = make_graph(xp, (graph.indptr, np.arange(E, dtype=graph.indices.dtype), E))
    keys, values = k[graph.indices] + edge_feat, v[graph.indices] + edge_feat
    want, want_lse = ca.graph_attention(per_edge, *to_xp(xp, (q, keys, values)), scale=0.4, return_lse=True)
    got, lse = ca.graph_attention(
        make_graph(xp, graph), *to_xp(xp, (q, k, v)), scale=0.4, edge_feat=to_xp(xp, edge_feat), return_lse=True
    )
    check_result(xp, got, to_np(want), np.float64)
    check_result(xp, lse, to_np(want_lse), np.float64)


@pytest.mark.parametrize("op", ["graph_attention", "gat_attention"])
@pytest.mark.parametrize("edge_dtype,node_dtype", [(np.float32, np.float64), (np.float64, np.float32)])
def test_edge_terms_take_part_in_promotion(xp, op, edge_dtype, node_dtype):
    graph = named_graph("odd_sizes")
    nodes, keyword, edge = _edge_inputs(np.random.default_rng(11), graph, op, 3, 2)
    nodes, edge = tuple(x.astype(node_dtype) for x in nodes), edge.astype(edge_dtype)
    g = make_graph(xp, graph)
    out, lse = getattr(ca, op)(g, *to_xp(xp, nodes), return_lse=True, **{keyword: to_xp(xp, edge)})
    assert out.dtype == lse.dtype == np.float64
    grads = getattr(ca, op + "_backward")(g, *to_xp(xp, nodes), out, out, lse, **{keyword: to_xp(xp, edge)})
    assert all(grad.dtype == np.float64 for grad in grads)
    expected = getattr(ref, op)(graph.indptr, graph.indices, *nodes, **{keyword: edge})
    assert_close(out, expected[0], np.float32)  # at the tolerance of the float32 input's rounding
    grad_out = to_np(out)  # the output as its own gradient, as above
    expected = getattr(ref, op + "_backward")(graph.indptr, graph.indices, *nodes, grad_out, **{keyword: edge})
    assert len(grads) == len(expected)
    for grad, want in zip(grads, expected):
        assert_close(grad, want, np.float32)


def test_graph_attention_without_query_features(xp):
    """D = 0 with the default scale (1 / sqrt(D) is no number there): every score is 0, so
    each row's output is the plain mean of its neighbours' values and its lse log(degree);
    the backward's gradients are those of that mean (grad_q and grad_k empty)."""
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(12)
    degrees = np.diff(graph.indptr)
    q = np.zeros((len(degrees), 2, 0))
    k = np.zeros((graph.num_src, 2, 0))
    v = rng.standard_normal((graph.num_src, 2, 3))
    g = make_graph(xp, graph)
    out, lse = ca.graph_attention(g, to_xp(xp, q), to_xp(xp, k), to_xp(xp, v), return_lse=True)
    rows = np.repeat(np.arange(len(degrees)), degrees)
    sums = np.zeros((len(degrees), 2, 3))
    np.add.at(sums, rows, v[graph.indices])
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(degrees[:, None, None] > 0, sums / degrees[:, None, None], 0.0)
        check_result(xp, out, mean, np.float64)
        check_result(xp, lse, np.repeat(np.log(degrees)[:, None], 2, axis=1), np.float64)
    grad_out = rng.standard_normal(out.shape)
    grad_q, grad_k, grad_v = ca.graph_attention_backward(
        g, to_xp(xp, q), to_xp(xp, k), to_xp(xp, v), out, to_xp(xp, grad_out), lse
    )
    assert grad_q.shape == q.shape and grad_k.shape == k.shape
    expected_grad_v = np.zeros_like(v)
    np.add.at(expected_grad_v, graph.indices, (grad_out / np.maximum(degrees, 1)[:, None, None])[rows])
    check_result(xp, grad_v, expected_grad_v, np.float64)


def test_reference_graph_attention_without_query_features(xp):
    """The naive reference takes D = 0 with the default scale as the op does (every score 0),
    forward and backward: it raised ZeroDivisionError computing 1 / sqrt(0)."""
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(13)
    q = np.zeros((len(graph.indptr) - 1, 2, 0))
    k = np.zeros((graph.num_src, 2, 0))
    v = rng.standard_normal((graph.num_src, 2, 3))
    g = make_graph(xp, graph)
    out, lse = ca.graph_attention(g, to_xp(xp, q), to_xp(xp, k), to_xp(xp, v), return_lse=True)
    want_out, want_lse = ref.graph_attention(graph.indptr, graph.indices, q, k, v)
    check_result(xp, out, want_out, np.float64)
    check_result(xp, lse, want_lse, np.float64)
    grad_out = rng.standard_normal(want_out.shape)
    grads = ca.graph_attention_backward(g, to_xp(xp, q), to_xp(xp, k), to_xp(xp, v), out, to_xp(xp, grad_out), lse)
    wants = ref.graph_attention_backward(graph.indptr, graph.indices, q, k, v, grad_out)
    for grad, want in zip(grads, wants, strict=True):
        check_result(xp, grad, want, np.float64)


@pytest.mark.parametrize("op", ["graph_attention", "gat_attention"])
def test_edge_data_with_a_misaligned_view(xp, op):
    """Inputs one element into their buffers with edge data and heads of 64 (too wide for the
    head-span kernels' element-by-element loads at that address): the GPU ran the heads as
    one chunk of the array itself and recursed without end; now on aligned copies."""
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(13)
    nodes, keyword, edge = _edge_inputs(rng, graph, op, 4, 64)

    def misaligned(x):
        flat = xp.zeros(x.size + 1, dtype=np.float32)
        flat[1:] = to_xp(xp, x.astype(np.float32).ravel())
        return flat[1:].reshape(x.shape)

    nodes, edge = tuple(x.astype(np.float32) for x in nodes), edge.astype(np.float32)
    g = make_graph(xp, graph)
    got = getattr(ca, op)(g, *(misaligned(x) for x in nodes), **{keyword: misaligned(edge)})
    expected = getattr(ref, op)(graph.indptr, graph.indices, *nodes, **{keyword: edge})[0]
    check_result(xp, got, expected, np.float32)
