"""Semantics every op shares: empty and -inf rows, NaN isolation, dtypes, promotion,
untouched inputs, out=, sparse-matrix graphs and their edge order."""

import copy
import inspect
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import case_params, is_numpy, poison, require_cupy

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.ops.registry import OPS
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, CASES, check_case, check_outputs
from cupy_csrattn.testing.compare import array_module_of, check_result, lse_dtype, to_np
from cupy_csrattn.testing.graphs import GraphData, from_rows, named_graph, num_dst_of, row_of_edges

INF = math.inf

# The ops that return the row-wise lse on request (each has a case of its own name).
LSE_OPS = tuple(name for name, op in OPS.items() if "return_lse" in inspect.signature(op.function).parameters)


def _head(H):
    return () if H is None else (H,)


# ------------------------------------------------------------------ empty rows


@pytest.mark.parametrize("H", [None, 3])
@pytest.mark.parametrize("func", LSE_OPS)
def test_empty_rows_give_zero_output_and_lse_minus_inf(xp, func, H):
    graph = named_graph("zero_degree_rows")
    args, _ = CASE_BY_NAME[func].make(np.random.default_rng(0), graph, H, 4, np.float64)
    out, lse = getattr(ca, func)(make_graph(xp, graph), *to_xp(xp, args), return_lse=True)
    out, lse = to_np(out), to_np(lse)
    empty = np.diff(graph.indptr) == 0
    assert empty.any() and (~empty).any()
    assert (out[empty] == 0).all()
    assert np.isneginf(lse[empty]).all()
    assert np.isfinite(lse[~empty]).all() and np.isfinite(out).all()


@pytest.mark.parametrize("func", ["spmm", "attention_aggregate"])
def test_all_rows_empty_give_zeros(xp, func):
    graph = named_graph("all_rows_empty")
    args, _ = CASE_BY_NAME[func].make(np.random.default_rng(1), graph, 2, 3, np.float32)
    out = to_np(getattr(ca, func)(make_graph(xp, graph), *to_xp(xp, args)))
    assert out.shape == (num_dst_of(graph), 2, 3) and (out == 0).all()


# ------------------------------------------------------------------ all -inf rows


def _graph_and_neg_inf_scores(H=3):
    """Row 1 of head 0 is all -inf; row 2 is all -inf in every head; row 4 has one -inf."""
    graph = from_rows([[0, 1], [2, 0, 1], [3], [], [1, 2, 3]], num_src=4)
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((len(graph.indices), H))
    scores[2:5, 0] = -INF
    scores[5, :] = -INF
    scores[6, 1] = -INF
    return graph, scores


def test_all_neg_inf_row_softmax_gives_zero_weights(xp):
    graph, scores = _graph_and_neg_inf_scores()
    probs = ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores))
    expected = ref.edge_softmax(graph.indptr, scores)[0]
    assert (expected[2:5, 0] == 0).all() and (expected[5] == 0).all()
    check_result(xp, probs, expected, np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_neg_inf_row_aggregate_gives_zero_and_lse_minus_inf(xp, dtype):
    graph, scores = _graph_and_neg_inf_scores()
    values = np.random.default_rng(3).standard_normal((graph.num_src, 3, 4))
    scores, values = scores.astype(dtype), values.astype(dtype)
    out, lse = ca.attention_aggregate(make_graph(xp, graph), to_xp(xp, scores), to_xp(xp, values), return_lse=True)
    expected_out, expected_lse = ref.attention_aggregate(graph.indptr, graph.indices, scores, values)
    assert (expected_out[1, 0] == 0).all() and np.isneginf(expected_lse[[1, 2, 2, 2], [0, 0, 1, 2]]).all()
    check_result(xp, out, expected_out, dtype)
    check_result(xp, lse, expected_lse, dtype)


@pytest.mark.parametrize("fill", [INF, math.nan], ids=["inf", "nan"])
def test_all_neg_inf_row_output_is_zero_whatever_the_values(xp, fill):
    """A row without weight outputs zero even where its sources' values are infinite or NaN
    (zero weight times inf would be NaN): as a row without edges. Rows with weight on such a
    source are the reference's (NaN or inf)."""
    graph, scores = _graph_and_neg_inf_scores()
    values = np.random.default_rng(5).standard_normal((graph.num_src, 3, 4))
    values[3] = fill  # row 2's only source, all -inf in every head; row 4 weighs it
    values[2, 0] = fill  # a source of row 1, all -inf in head 0
    out, lse = ca.attention_aggregate(make_graph(xp, graph), to_xp(xp, scores), to_xp(xp, values), return_lse=True)
    with np.errstate(invalid="ignore"):
        expected_out, expected_lse = ref.attention_aggregate(graph.indptr, graph.indices, scores, values)
    assert (expected_out[2] == 0).all() and (expected_out[1, 0] == 0).all()
    assert not np.isfinite(expected_out[4]).all()
    np.testing.assert_array_equal(to_np(out)[2], 0)
    np.testing.assert_array_equal(to_np(out)[1, 0], 0)
    check_result(xp, out, expected_out, np.float64, equal_nan=True)
    check_result(xp, lse, expected_lse, np.float64)


def test_gat_all_neg_inf_row(xp):
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(4)
    a_dst = rng.standard_normal((num_dst_of(graph), 2))
    a_dst[2, 1] = -INF
    a_src = rng.standard_normal((graph.num_src, 2))
    values = rng.standard_normal((graph.num_src, 2, 3))
    out, lse = ca.gat_attention(
        make_graph(xp, graph), to_xp(xp, a_dst), to_xp(xp, a_src), to_xp(xp, values), return_lse=True
    )
    expected = ref.gat_attention(graph.indptr, graph.indices, a_dst, a_src, values)
    assert (expected[0][2, 1] == 0).all() and expected[1][2, 1] == -INF
    check_result(xp, out, expected[0], np.float64)
    check_result(xp, lse, expected[1], np.float64)


@pytest.mark.parametrize("pass_lse", [False, True])
def test_all_neg_inf_row_backward_is_zero_not_nan(xp, pass_lse):
    """Zero weights have zero gradient: no NaN from exp(-inf - lse) with lse = -inf."""
    graph, scores = _graph_and_neg_inf_scores()
    rng = np.random.default_rng(5)
    values = rng.standard_normal((graph.num_src, 3, 4))
    grad_out = rng.standard_normal((num_dst_of(graph), 3, 4))
    g = make_graph(xp, graph)
    kwargs = {}
    if pass_lse:
        kwargs["lse"] = to_xp(xp, ref.attention_aggregate(graph.indptr, graph.indices, scores, values)[1])
    grad_scores, grad_values = ca.attention_aggregate_backward(
        g, to_xp(xp, scores), to_xp(xp, values), to_xp(xp, grad_out), **kwargs
    )
    expected = ref.attention_aggregate_backward(graph.indptr, graph.indices, scores, values, grad_out)
    check_result(xp, grad_scores, expected[0], np.float64)
    check_result(xp, grad_values, expected[1], np.float64)


# Backwards over rows without weight: on the graph of _graph_and_neg_inf_scores, row 1 (head 0)
# and row 2 (every head) have no weight; row 4 weighs every source of theirs. Each case names
# the kind of each gradient: per edge, per destination node (a row's own), or other.
_GRADIENT_KINDS = {
    "edge_softmax_backward": ("edge",),
    "attention_aggregate_backward": ("edge", "other"),
    "attention_aggregate_backward_lse": ("edge", "other"),
    "gat_attention_backward": ("dst", "other", "other"),
    "gat_attention_backward_edge_score": ("dst", "other", "other", "edge"),
    "graph_attention_backward": ("dst", "other", "other"),
    "graph_attention_backward_edge_feat": ("dst", "other", "other", "edge"),
    "gatv2_attention_backward": ("dst", "other", "other"),
}
# Where the infinite or NaN inputs go: the values of the weightless rows' sources, or those
# rows' grad_out (edge_softmax_backward: grad_probs). gatv2's values are x_src, which enter
# its scores too, and edge_softmax_backward has none.
WEIGHTLESS_CASES = [
    (case, where)
    for case in _GRADIENT_KINDS
    for where in ("values", "grad_out")
    if where == "grad_out" or not case.startswith(("edge_softmax", "gatv2"))
]


def _weightless_backward(case, where, fill):
    """(graph, op, positional arrays, keyword arrays, reference gradients) of one case: the
    fused ops' a_dst, q or x_dst is -inf where the rows have no weight (with a_src, k and att
    finite and k, att positive in that element), and ``fill`` in their values or grad_out."""
    graph, scores = _graph_and_neg_inf_scores()
    indptr, indices = graph.indptr, graph.indices
    rng = np.random.default_rng(12)
    E, N, S, H, F = len(indices), num_dst_of(graph), graph.num_src, 3, 4
    values, grad_out = rng.standard_normal((S, H, F)), rng.standard_normal((N, H, F))
    if where == "values":
        values[3] = fill  # row 2's only source
        values[2, 0] = fill  # a source of row 1
    else:
        grad_out[2] = fill
        grad_out[1, 0] = fill
    op, edge = case.removesuffix("_lse").removesuffix("_edge_score").removesuffix("_edge_feat"), {}
    if op == "edge_softmax_backward":
        probs = ref.edge_softmax(indptr, scores)[0]
        grad_probs = rng.standard_normal((E, H))
        grad_probs[probs == 0] = fill  # the zero weights of rows 1 and 2, and one of row 4
        return graph, op, (probs, grad_probs), {}, ref.edge_softmax_backward(indptr, probs, grad_probs)
    if op == "attention_aggregate_backward":
        want = ref.attention_aggregate_backward(indptr, indices, scores, values, grad_out)
        if case.endswith("_lse"):
            edge["lse"] = ref.attention_aggregate(indptr, indices, scores, values)[1]
        return graph, op, (scores, values, grad_out), edge, want
    if op == "gat_attention_backward":
        inputs = [rng.standard_normal((N, H)), rng.standard_normal((S, H)), values]
        inputs[0][1, 0] = inputs[0][2] = -INF  # leaky_relu(-inf + a_src) = -inf
        if case.endswith("_edge_score"):
            edge["edge_score"] = rng.standard_normal((E, H))
    elif op == "graph_attention_backward":
        inputs = [rng.standard_normal((N, H, F)), rng.standard_normal((S, H, F)), values]
        inputs[1][..., 0] = 1 + np.abs(inputs[1][..., 0])
        inputs[0][1, 0, 0] = inputs[0][2, :, 0] = -INF  # -inf times a positive key element
        if case.endswith("_edge_feat"):
            edge["edge_feat"] = rng.standard_normal((E, H, F))
            edge["edge_feat"][..., 0] = np.abs(edge["edge_feat"][..., 0])  # the key stays positive there
    else:
        att = rng.standard_normal((H, F))
        att[:, 0] = 0.5 + np.abs(att[:, 0])
        inputs = [rng.standard_normal((N, H, F)), values, att]
        inputs[0][1, 0, 0] = inputs[0][2, :, 0] = -INF  # a positive att times leaky_relu(-inf)
    forward, backward = getattr(ref, op.removesuffix("_backward")), getattr(ref, op)
    out, lse = forward(indptr, indices, *inputs, **edge)
    assert (np.isneginf(lse) == np.isneginf(ref.attention_aggregate(indptr, indices, scores, values)[1])).all()
    want = backward(indptr, indices, *inputs, grad_out, **edge)
    return graph, op, (*inputs, out, grad_out, lse), edge, want


@pytest.mark.parametrize("fill", [INF, -INF, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("case,where", WEIGHTLESS_CASES)
def test_weightless_row_backward_is_zero_whatever_the_inputs(xp, case, where, fill):
    """A row without weight (scores all -inf: zero weights, lse -inf) adds nothing to any
    gradient, as a row without edges, even where its sources' values or its grad_out are
    infinite or NaN (its zero weights times them would be NaN): its edges' and its own
    gradients are zero, and an infinite grad_out there reaches no gradient. Rows with weight
    on an infinite value are the reference's (NaN or inf). edge_softmax_backward takes the
    probabilities: a zero one adds nothing, its grad_probs entering no sum."""
    with np.errstate(invalid="ignore"):  # the reference's products of inf and 0
        graph, op, args, kwargs, wants = _weightless_backward(case, where, fill)
    with np.errstate(all="raise"):  # IEEE arithmetic on the CPU, as everywhere
        gots = getattr(ca, op)(make_graph(xp, graph), *to_xp(xp, args), **to_xp(xp, kwargs))
    gots = gots if isinstance(gots, tuple) else (gots,)
    wants = wants if isinstance(wants, tuple) else (wants,)
    weightless = np.isneginf(ref.edge_softmax(graph.indptr, _graph_and_neg_inf_scores()[1])[1])
    if op == "edge_softmax_backward":
        dead_edges = args[0] == 0
    else:
        dead_edges = np.repeat(weightless, np.diff(graph.indptr), axis=0)
    assert dead_edges.any() and not dead_edges.all()
    assert len(gots) == len(wants) == len(_GRADIENT_KINDS[case])
    for kind, got, want in zip(_GRADIENT_KINDS[case], gots, wants):
        zero = {"edge": dead_edges, "dst": weightless}.get(kind)
        if zero is not None:
            assert (want[zero] == 0).all()
            np.testing.assert_array_equal(to_np(got)[zero], 0)
        if where == "grad_out":
            assert np.isfinite(want).all()
        check_result(xp, got, want, np.float64, equal_nan=True)
    if where == "values":  # row 4 weighs the infinite (or NaN) values: not all its gradients are finite
        assert not all(np.isfinite(want).all() for want in wants)


# ------------------------------------------------------------------ NaN and +inf

NAN_ROW, NAN_HEAD = 4, 1  # zero_degree_rows: row 4 has 5 edges


def _nan_setup(func):
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(6)
    H = 3
    if func in ("edge_softmax", "attention_aggregate"):
        scores = rng.standard_normal((len(graph.indices), H))
        scores[graph.indptr[NAN_ROW] + 2, NAN_HEAD] = np.nan
        args = (scores,) if func == "edge_softmax" else (scores, rng.standard_normal((graph.num_src, H, 4)))
    elif func == "gat_attention":
        a_dst = rng.standard_normal((num_dst_of(graph), H))
        a_dst[NAN_ROW, NAN_HEAD] = np.nan
        args = (a_dst, rng.standard_normal((graph.num_src, H)), rng.standard_normal((graph.num_src, H, 4)))
    else:
        q = rng.standard_normal((num_dst_of(graph), H, 5))
        q[NAN_ROW, NAN_HEAD, 3] = np.nan
        args = (q, rng.standard_normal((graph.num_src, H, 5)), rng.standard_normal((graph.num_src, H, 4)))
    return graph, args


@pytest.mark.parametrize("func", ["edge_softmax", "attention_aggregate", "gat_attention", "graph_attention"])
def test_nan_stays_in_its_row_and_head(xp, func):
    graph, args = _nan_setup(func)
    result = getattr(ca, func)(
        make_graph(xp, graph), *to_xp(xp, args), **({} if func == "edge_softmax" else {"return_lse": True})
    )
    if func == "edge_softmax":
        got = [to_np(result)]
        expected = [ref.edge_softmax(graph.indptr, args[0])[0]]
        nan_mask = np.zeros(got[0].shape, bool)
        nan_mask[graph.indptr[NAN_ROW] : graph.indptr[NAN_ROW + 1], NAN_HEAD] = True
        masks = [nan_mask]
    else:
        got = [to_np(r) for r in result]
        expected = list(getattr(ref, func)(graph.indptr, graph.indices, *args))
        out_mask = np.zeros(got[0].shape, bool)
        out_mask[NAN_ROW, NAN_HEAD] = True
        lse_mask = np.zeros(got[1].shape, bool)
        lse_mask[NAN_ROW, NAN_HEAD] = True
        masks = [out_mask, lse_mask]
    for g_arr, e_arr, mask in zip(got, expected, masks):
        np.testing.assert_array_equal(np.isnan(g_arr), mask)
        np.testing.assert_array_equal(np.isnan(e_arr), mask)  # the reference agrees
        check_result(xp, to_xp(xp, np.where(mask, 0, g_arr)), np.where(mask, 0, e_arr), np.float64)


def _poisoned(a, fill):
    """A copy of float array ``a`` filled with ``fill``: +inf, -inf, or "mixed" (its first three
    elements +inf, -inf and NaN)."""
    a = a.copy()
    if fill == "mixed":
        a.reshape(-1)[:3] = (INF, -INF, math.nan)
    else:
        a[...] = fill
    return a


@pytest.mark.parametrize("fill", [INF, -INF, "mixed"], ids=["inf", "-inf", "mixed"])
@pytest.mark.parametrize("case", case_params())
def test_non_finite_inputs_raise_no_floating_point_warning(xp, case, fill):
    """NaN and +-inf in any input: no NumPy floating-point warning, and no FloatingPointError
    under np.errstate(all="raise"), on the CPU as on the GPU; a forward's results are the
    reference's (the Semantics of the README: a +inf score's row and head NaN, lse too). A
    backward is given out and lse of finite inputs, which the reference recomputes instead."""
    graph = named_graph("zero_degree_rows")
    args, kwargs = case.make(np.random.default_rng(3), graph, 3, 4, np.float32)
    floats = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    assert floats
    for i in floats:
        poisoned = tuple(_poisoned(a, fill) if j == i else a for j, a in enumerate(args))
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            got = case.run(make_graph(xp, graph), to_xp(xp, poisoned), kwargs)
        if not case.op.endswith("_backward"):
            with np.errstate(all="ignore"):
                expected = case.reference(graph, poisoned, kwargs)
            check_outputs(xp, case, got, expected, poisoned, kwargs, equal_nan=True)


@pytest.mark.parametrize("func", ["attention_aggregate_backward", "gat_attention_backward"])
def test_lse_past_the_data_dtype_narrows_without_warning(xp, func):
    """An lse given in float64 for float32 data is taken in float32: 1e300 rounds to inf there,
    as CuPy's conversion does, with no NumPy overflow warning (an error under
    np.seterr(all="raise")); the gradients are those of lse = inf in float32."""
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(21)
    N, E, H = num_dst_of(graph), len(graph.indices), 2
    values, grad_out = (
        rng.standard_normal((graph.num_src, H, 3), np.float32),
        rng.standard_normal((N, H, 3), np.float32),
    )
    if func == "attention_aggregate_backward":
        first = (rng.standard_normal((E, H), np.float32), values, grad_out)
        call = lambda lse: ca.attention_aggregate_backward(make_graph(xp, graph), *to_xp(xp, first), lse=to_xp(xp, lse))
    else:
        a_dst, a_src = rng.standard_normal((N, H), np.float32), rng.standard_normal((graph.num_src, H), np.float32)
        first = (a_dst, a_src, values, grad_out, grad_out)
        call = lambda lse: ca.gat_attention_backward(make_graph(xp, graph), *to_xp(xp, first), to_xp(xp, lse))
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        got = call(np.full((N, H), 1e300))
    expected = call(np.full((N, H), np.inf, np.float32))
    for g, e in zip(got, expected):
        assert g.dtype == np.float32
        np.testing.assert_array_equal(to_np(g), to_np(e))


def test_pos_inf_score_gives_nan_in_its_row_and_head(xp):
    """As scipy.special.softmax: a +inf score makes its row and head NaN."""
    import scipy.special

    graph = named_graph("zero_degree_rows")
    scores = np.random.default_rng(7).standard_normal((len(graph.indices), 2))
    start, stop = graph.indptr[NAN_ROW], graph.indptr[NAN_ROW + 1]
    scores[start + 1, 0] = INF
    probs = to_np(ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores)))
    with np.errstate(invalid="ignore"):
        assert np.isnan(scipy.special.softmax(scores[start:stop, 0])).all()
    mask = np.zeros(probs.shape, bool)
    mask[start:stop, 0] = True
    np.testing.assert_array_equal(np.isnan(probs), mask)
    expected = ref.edge_softmax(graph.indptr, scores)[0]
    np.testing.assert_allclose(probs[~mask], expected[~mask], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("H", [2, 40])
@pytest.mark.parametrize("func", ["attention_aggregate", "gat_attention", "graph_attention"])
def test_pos_inf_score_in_an_aggregation_gives_nan_in_its_row_and_head(xp, func, H):
    """A +inf score makes its row and head NaN in the output and the lse, as in edge_softmax
    (its weights are NaN); every other row and head is the reference's. H = 40: the kernels
    for more heads than lanes; on the GPU, H = 2 takes the head-span kernels for the fused ops."""
    graph = named_graph("zero_degree_rows")
    rng = np.random.default_rng(9)
    N, Ns = num_dst_of(graph), graph.num_src
    values = rng.standard_normal((Ns, H, 4))
    if func == "attention_aggregate":
        scores = rng.standard_normal((len(graph.indices), H))
        scores[graph.indptr[NAN_ROW] + 1, NAN_HEAD] = INF
        args = (scores, values)
    elif func == "gat_attention":
        a_dst = rng.standard_normal((N, H))
        a_dst[NAN_ROW, NAN_HEAD] = INF
        args = (a_dst, rng.standard_normal((Ns, H)), values)
    else:  # q . k = +inf on every edge of the row and head: +inf in q, k > 0 there
        q = rng.standard_normal((N, H, 4))
        q[NAN_ROW, NAN_HEAD, 0] = INF
        k = rng.standard_normal((Ns, H, 4))
        k[:, NAN_HEAD, 0] = np.abs(k[:, NAN_HEAD, 0]) + 0.5
        args = (q, k, values)
    out, lse = (to_np(r) for r in getattr(ca, func)(make_graph(xp, graph), *to_xp(xp, args), return_lse=True))
    want_out, want_lse = getattr(ref, func)(graph.indptr, graph.indices, *args)
    out_mask = np.zeros(out.shape, bool)
    out_mask[NAN_ROW, NAN_HEAD] = True
    lse_mask = np.zeros(lse.shape, bool)
    lse_mask[NAN_ROW, NAN_HEAD] = True
    np.testing.assert_array_equal(np.isnan(out), out_mask)
    np.testing.assert_array_equal(np.isnan(want_out), out_mask)  # the reference agrees
    np.testing.assert_array_equal(np.isnan(lse), lse_mask)
    check_result(xp, to_xp(xp, np.where(out_mask, 0, out)), np.where(out_mask, 0, want_out), np.float64)
    check_result(xp, to_xp(xp, np.where(lse_mask, 0, lse)), np.where(lse_mask, 0, want_lse), np.float64)


# ------------------------------------------------------------------ dtypes

ALL_CASES = case_params()


@pytest.mark.parametrize("case", ALL_CASES)
def test_float16_in_float16_out(xp, case):
    """float16 returns float16 (lse float32) and matches the float64 reference at fp16 tolerance."""
    graph = named_graph("zero_degree_rows")
    args, kwargs = case.make(np.random.default_rng(8), graph, 3, 5, np.float16)
    expected = case.reference(graph, args, kwargs)
    got = case.run(make_graph(xp, graph), to_xp(xp, args), to_xp(xp, kwargs))
    for i, arr in enumerate(got):
        if arr is not None:
            assert arr.dtype == (np.float32 if i == case.lse_index else np.float16), (i, arr.dtype)
    check_outputs(xp, case, got, expected, args, kwargs)


def _promotable(case, which):
    args, kwargs = case.make(np.random.default_rng(0), named_graph("single_edge"), None, 2, np.float64)
    if len(case.float_args(args, kwargs)) < 2:
        return False
    # inputs that must agree with each other (lse, out from the forward) are made at the
    # base dtype; casting the first input would make them disagree at float64 precision
    return which == "last" or not (case.aux or case.name == "attention_aggregate_backward_lse")


PROMOTION_PARAMS = [
    pytest.param(case, which, pair, id=f"{case.name}-{which}-{pair[0].__name__}+{pair[1].__name__}")
    for case in CASES
    for which in ("first", "last")
    for pair in ((np.float64, np.float32), (np.float32, np.float16))
    if _promotable(case, which)
]


@pytest.mark.parametrize("case,which,pair", PROMOTION_PARAMS)
def test_mixed_float_dtypes_promote(xp, case, which, pair):
    """One input at a narrower float dtype: the result has np.result_type of the inputs."""
    base, narrow = pair
    graph = named_graph("duplicates")
    args, kwargs = case.make(np.random.default_rng(9), graph, 2, 3, base)
    positions = [i for i, a in enumerate(args) if a is not None and i not in case.aux]
    where = positions[0] if which == "first" else positions[-1]
    args = tuple(a.astype(narrow) if i == where else a for i, a in enumerate(args))
    expected = case.reference(graph, args, kwargs)
    got = case.run(make_graph(xp, graph), to_xp(xp, args), to_xp(xp, kwargs))
    for i, arr in enumerate(got):
        if arr is not None:
            want = lse_dtype(base) if i == case.lse_index else np.dtype(base)
            assert arr.dtype == want, (i, arr.dtype, want)
    check_outputs(xp, case, got, expected, args, kwargs)


def _float_inputs(case):
    """Where a case's float inputs are: positions of its arguments, names of its keywords (lse,
    which takes no part in the promotion, apart)."""
    args, kwargs = case.make(np.random.default_rng(0), named_graph("single_edge"), None, 2, np.float32)
    positions = [i for i, a in enumerate(args) if a is not None and i not in case.aux]
    return positions + [k for k, v in kwargs.items() if isinstance(v, np.ndarray) and k != "lse"]


@pytest.mark.parametrize(
    "case,where", [pytest.param(case, w, id=f"{case.name}-{w}") for case in CASES for w in _float_inputs(case)]
)
def test_one_wider_input_widens_the_results(xp, case, where):
    """Every float input takes part in the promotion (a backward's saved out and grad_out, edge
    features by keyword): one input at float64 among float32 ones gives float64 results."""
    graph = named_graph("duplicates")
    args, kwargs = case.make(np.random.default_rng(19), graph, 2, 3, np.float32)
    args = tuple(a.astype(np.float64) if i == where else a for i, a in enumerate(args))
    kwargs = {k: (v.astype(np.float64) if k == where else v) for k, v in kwargs.items()}
    got = case.run(make_graph(xp, graph), to_xp(xp, args), to_xp(xp, kwargs))
    assert [None if a is None else a.dtype for a in got] == [None if a is None else np.float64 for a in got]


# ------------------------------------------------------------------ inputs and out=


def _strided(xp, a):
    """Same values, not C-contiguous (every other element of a wider buffer)."""
    if a is None:
        return None
    wide = xp.zeros(a.shape + (2,), dtype=a.dtype)
    wide[..., 0] = xp.asarray(a)
    view = wide[..., 0]
    assert a.size <= 1 or not view.flags.c_contiguous
    return view


@pytest.mark.parametrize("case", ALL_CASES)
def test_inputs_never_modified(xp, case):
    graph = named_graph("unsorted_columns")
    args, kwargs = case.make(np.random.default_rng(10), graph, 3, 4, np.float32)
    xargs, xkwargs = to_xp(xp, args), to_xp(xp, kwargs)  # on NumPy: the very arrays of args
    before_args, before_kwargs = copy.deepcopy((args, kwargs))  # what they held before the calls
    indptr, indices = to_xp(xp, graph.indptr.copy()), to_xp(xp, graph.indices.copy())
    g = ca.CSRGraph(indptr, indices, graph.num_src)
    case.run(g, xargs, xkwargs)
    case.run((indptr, indices, graph.num_src), xargs, xkwargs)
    for before, after in zip(before_args, xargs):
        if before is not None:
            np.testing.assert_array_equal(to_np(after), before)
    for name, value in before_kwargs.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(to_np(xkwargs[name]), value)
    np.testing.assert_array_equal(to_np(indptr), graph.indptr)
    np.testing.assert_array_equal(to_np(indices), graph.indices)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)


@pytest.mark.parametrize("case", ALL_CASES)
def test_non_contiguous_inputs(xp, case):
    graph = named_graph("odd_sizes")
    args, kwargs = case.make(np.random.default_rng(11), graph, 3, 4, np.float64)
    strided = tuple(_strided(xp, a) for a in args)
    kw = {k: (_strided(xp, v) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
    got = case.run(make_graph(xp, graph), strided, kw)
    check_outputs(xp, case, got, case.reference(graph, args, kwargs), args, kwargs)


@pytest.mark.parametrize("case", ALL_CASES)
def test_non_contiguous_graph_arrays(xp, case):
    """indptr and indices as strided views, in a tuple graph and in CSRGraph(copy=False), which
    keep the caller's arrays: the GPU kernels read an index array through its data pointer, so
    a view was read as the buffer it lies in (other sources, and indices out of range)."""
    graph = named_graph("odd_sizes")
    args, kwargs = case.make(np.random.default_rng(13), graph, 3, 4, np.float64)
    expected = case.reference(graph, args, kwargs)
    indptr, indices = _strided(xp, graph.indptr), _strided(xp, graph.indices)
    for g in ((indptr, indices, graph.num_src), ca.CSRGraph(indptr, indices, graph.num_src, copy=False)):
        got = case.run(g, to_xp(xp, args), to_xp(xp, kwargs))
        check_outputs(xp, case, got, expected, args, kwargs)


def _other_byte_order(a):
    return a.astype(a.dtype.newbyteorder("S")) if isinstance(a, np.ndarray) else a


@pytest.mark.parametrize("case", ALL_CASES)
def test_numpy_inputs_of_the_other_byte_order(xp, case):
    """NumPy arrays of the other byte order (a FITS file's, a big-endian machine's) are read
    as their values, the graph's indices too: on the GPU as well, where a copy of their
    bytes as they are would read other numbers (and indices out of bounds)."""
    graph = named_graph("odd_sizes")
    args, kwargs = case.make(np.random.default_rng(12), graph, 3, 4, np.float64)
    swapped = tuple(_other_byte_order(a) for a in args)
    kw = {k: _other_byte_order(v) for k, v in kwargs.items()}
    g = ca.CSRGraph(_other_byte_order(graph.indptr), _other_byte_order(graph.indices), graph.num_src)
    assert g.indptr.dtype.isnative and g.indices.dtype.isnative
    got = case.run(g if is_numpy(xp) else g.to_gpu(), swapped, kw)
    check_outputs(xp, case, got, case.reference(graph, args, kwargs), args, kwargs)


@pytest.mark.parametrize("case", case_params(where=lambda c: c.out_index is not None))
def test_out_returned_and_filled(xp, case):
    """out= pre-filled with NaN: every element must be written, and out itself returned."""
    graph = named_graph("zero_degree_rows")
    args, kwargs = case.make(np.random.default_rng(12), graph, 3, 5, np.float32)
    expected = case.reference(graph, args, kwargs)
    out = poison(xp, expected[case.out_index].shape, np.float32)
    got = case.run(make_graph(xp, graph), to_xp(xp, args), dict(to_xp(xp, kwargs), out=out))
    assert got[case.out_index] is out
    check_outputs(xp, case, got, expected, args, kwargs)


def _square_graph():
    """num_src = num_dst, so that a node output may be a node input: a hub row, empty rows, a
    duplicate edge."""
    return from_rows([[0, 1, 2, 3, 4, 5, 6, 7, 8], [], [2, 2, 5], [0], [], [8, 7], [3], [1, 4, 6], []], num_src=9)


def _overlapping(xp, x, shape, offset):
    """(a copy of x, an array of ``shape``) as C-contiguous float32 views of one buffer, the
    second starting ``offset`` elements after the first."""
    buffer = xp.zeros(max(x.size, offset + math.prod(shape)) + offset, np.float32)
    first = buffer[: x.size].reshape(x.shape)
    first[...] = xp.asarray(x)
    return first, buffer[offset : offset + math.prod(shape)].reshape(shape)


@pytest.mark.parametrize("case", case_params(where=lambda c: c.out_index is not None))
def test_out_sharing_memory_with_an_input(xp, case):
    """out= an input itself, or a view overlapping one (one element on): the result of the call
    with separate arrays. The kernels write each output row while others still read the inputs
    (a node row of values is a neighbour of many rows), so such an out gets its result after."""
    graph = _square_graph()
    args, kwargs = case.make(np.random.default_rng(13), graph, 3, 5, np.float32)
    expected = case.reference(graph, args, kwargs)
    shape = expected[case.out_index].shape
    floats = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype == np.float32]
    assert floats
    for i in floats:
        for offset in (0, 1) if args[i].shape == shape else (1,):
            shared, out = _overlapping(xp, args[i], shape, offset)
            given = tuple(shared if j == i else a for j, a in enumerate(to_xp(xp, args)))
            got = case.run(make_graph(xp, graph), given, dict(to_xp(xp, kwargs), out=out))
            assert got[case.out_index] is out
            check_outputs(xp, case, got, expected, args, kwargs)


def test_an_out_sharing_memory_with_an_input_is_not_handed_to_the_backend():
    """Placement gives the backend a fresh array for such an out= and copies the result in."""
    from cupy_csrattn.graph import CSRGraph
    from cupy_csrattn.ops.placement import Placement

    graph = CSRGraph(*_square_graph())
    values = np.arange(9 * 2, dtype=np.float32).reshape(9, 2)
    place = Placement(graph, None, {"values": values})
    work, result = place.output("out", values, (9, 2), np.float32, (9, 2))
    assert result is values and not np.may_share_memory(work, values)
    separate = np.empty((9, 2), np.float32)
    work, result = place.output("out", separate, (9, 2), np.float32, (9, 2))
    assert result is separate and np.shares_memory(work, separate)  # no copy without a reason


def test_may_share_memory_compares_byte_bounds():
    """backend.may_share_memory on arrays known by address (as CuPy's are): bounds from shape and
    strides, whatever allocation holds them; empty arrays share nothing."""
    from types import SimpleNamespace

    from cupy_csrattn.backend import may_share_memory

    def at(address, shape, strides, itemsize=4):
        return SimpleNamespace(
            data=SimpleNamespace(ptr=address),
            shape=shape,
            strides=strides,
            size=math.prod(shape),
            dtype=np.dtype(f"f{itemsize}"),
        )

    a = at(1000, (4, 2), (8, 4))  # bytes [1000, 1032)
    assert may_share_memory(a, at(1028, (1,), (4,)))
    assert not may_share_memory(a, at(1032, (3,), (4,)))
    assert not may_share_memory(at(968, (8,), (4,)), a)
    assert may_share_memory(a, at(1040, (4,), (-4,)))  # reversed: bytes [1028, 1044)
    assert may_share_memory(at(1004, (2,), (100,)), a)  # strided: [1004, 1108)
    assert not may_share_memory(a, at(1008, (0, 2), (8, 4)))  # empty
    buffer = np.arange(10.0)
    assert may_share_memory(buffer[:5], buffer[4:]) and not may_share_memory(buffer[:5], buffer[5:])


# ------------------------------------------------------------------ graph forms


def test_duplicate_edges_are_distinct(xp):
    graph = from_rows([[1, 1], [0, 1, 1, 1]], num_src=2)
    scores = np.array([0.3, 0.3, 2.0, -1.0, -1.0, 0.5])
    probs = to_np(ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores)))
    np.testing.assert_allclose(probs[:2], [0.5, 0.5], rtol=1e-12)
    np.testing.assert_allclose(probs[2:], ref.edge_softmax(np.array([0, 4]), scores[2:])[0], rtol=1e-12)
    assert probs[3] == probs[4] and probs[3] < probs[5]


@pytest.mark.parametrize("kind", ["csrgraph", "tuple3", "csr"])
@pytest.mark.parametrize("case", case_params("edge_softmax", "spmm", "attention_aggregate", "gat_attention_backward"))
def test_graph_forms_agree(xp, case, kind):
    """CSRGraph, (indptr, indices, num_src) and a sparse CSR matrix give the same results."""
    check_case(xp, case, named_graph("unsorted_columns"), 2, 3, np.float64, seed=13, kind=kind)


def test_two_tuple_graph(xp):
    """(indptr, indices) works when every source index appears (num_src inferred)."""
    graph = from_rows([[2, 0], [1], [0, 1, 2]], num_src=3)
    rng = np.random.default_rng(14)
    scores = rng.standard_normal(len(graph.indices))
    values = rng.standard_normal((3, 4))
    got = ca.attention_aggregate(
        (to_xp(xp, graph.indptr), to_xp(xp, graph.indices)), to_xp(xp, scores), to_xp(xp, values)
    )
    check_result(xp, got, ref.attention_aggregate(graph.indptr, graph.indices, scores, values)[0], np.float64)


# ------------------------------------------------------------------ sparse matrices


def _sparse_module(xp):
    if is_numpy(xp):
        import scipy.sparse

        return scipy.sparse
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


def _stored_coo():
    """Entries in a scrambled order, with duplicate (row, col) pairs and an empty row."""
    rng = np.random.default_rng(15)
    rows = np.array([3, 0, 2, 0, 3, 3, 0, 2, 5, 3, 0, 5], np.int32)
    cols = np.array([1, 4, 0, 4, 2, 1, 0, 3, 4, 0, 2, 4], np.int32)
    data = rng.standard_normal(len(rows)) * 2
    return rows, cols, data, (6, 5)


def _build_sparse(xp, fmt, cls):
    """A sparse matrix of format fmt; its stored data order differs from CSR order for csc/coo."""
    sparse = _sparse_module(xp)
    if cls == "array" and not is_numpy(xp):
        pytest.skip("cupyx.scipy.sparse has no sparse array classes")
    rows, cols, data, shape = _stored_coo()
    name = f"coo_{cls}"
    coo = getattr(sparse, name)((to_xp(xp, data), (to_xp(xp, rows), to_xp(xp, cols))), shape=shape)
    if fmt == "coo":
        return coo
    # build csr/csc directly from compressed arrays so duplicates stay unsummed and unsorted
    major = rows if fmt == "csr" else cols
    minor = cols if fmt == "csr" else rows
    order = np.argsort(major, kind="stable")
    indptr = np.zeros(shape[0 if fmt == "csr" else 1] + 1, np.int32)
    indptr[1:] = np.cumsum(np.bincount(major, minlength=len(indptr) - 1))
    matrix = getattr(sparse, f"{fmt}_{cls}")(
        (to_xp(xp, data[order]), to_xp(xp, minor[order]), to_xp(xp, indptr)), shape=shape
    )
    return matrix


def _data_order(A):
    """(row, col) of every stored entry, in A.data order, as NumPy arrays."""
    if A.format == "coo":
        return to_np(A.row).astype(np.int64), to_np(A.col).astype(np.int64)
    indptr, indices = to_np(A.indptr), to_np(A.indices).astype(np.int64)
    major = row_of_edges(indptr)
    return (major, indices) if A.format == "csr" else (indices, major)


def _reference_graph(A):
    """CSR GraphData of A plus perm: CSR edge e is A's stored entry perm[e]."""
    rows, cols = _data_order(A)
    perm = np.argsort(rows, kind="stable")
    indptr = np.zeros(A.shape[0] + 1, np.int64)
    indptr[1:] = np.cumsum(np.bincount(rows, minlength=A.shape[0]))
    return GraphData(indptr, cols[perm], A.shape[1]), perm


def _to_data_order(csr_edge_values, perm):
    result = np.empty_like(csr_edge_values)
    result[perm] = csr_edge_values
    return result


FORMATS = [(fmt, cls) for fmt in ("csr", "csc", "coo") for cls in ("matrix", "array")]


@pytest.mark.parametrize("fmt,cls", FORMATS)
def test_edge_softmax_of_sparse_matrix_keeps_class_and_structure(xp, fmt, cls):
    A = _build_sparse(xp, fmt, cls)
    data_before = to_np(A.data).copy()
    result = ca.edge_softmax(A)
    assert type(result) is type(A)
    assert result.format == A.format and result.shape == A.shape
    if fmt == "coo":
        np.testing.assert_array_equal(to_np(result.row), to_np(A.row))
        np.testing.assert_array_equal(to_np(result.col), to_np(A.col))
    else:
        np.testing.assert_array_equal(to_np(result.indptr), to_np(A.indptr))
        np.testing.assert_array_equal(to_np(result.indices), to_np(A.indices))
    graph, perm = _reference_graph(A)
    expected = _to_data_order(ref.edge_softmax(graph.indptr, to_np(A.data)[perm])[0], perm)
    check_result(xp, result.data, expected, np.float64)
    np.testing.assert_array_equal(to_np(A.data), data_before)  # A itself untouched
    assert result.data is not A.data


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_graph_edge_arrays_follow_stored_order(xp, fmt):
    """With a CSC/COO graph, edge arrays in and out are in A.data order."""
    A = _build_sparse(xp, fmt, "matrix")
    graph, perm = _reference_graph(A)
    rng = np.random.default_rng(16)
    E = len(perm)
    scores = rng.standard_normal((E, 2))  # in A.data order
    values = rng.standard_normal((A.shape[1], 2, 3))
    dst = rng.standard_normal((A.shape[0], 2, 4))
    src = rng.standard_normal((A.shape[1], 2, 4))

    probs = ca.edge_softmax(A, to_xp(xp, scores))
    check_result(xp, probs, _to_data_order(ref.edge_softmax(graph.indptr, scores[perm])[0], perm), np.float64)
    out = ca.attention_aggregate(A, to_xp(xp, scores), to_xp(xp, values))
    check_result(xp, out, ref.attention_aggregate(graph.indptr, graph.indices, scores[perm], values)[0], np.float64)
    out = ca.spmm(A, to_xp(xp, scores), to_xp(xp, values))
    check_result(xp, out, ref.spmm(graph.indptr, graph.indices, scores[perm], values), np.float64)
    edge = ca.sddmm(A, to_xp(xp, dst), to_xp(xp, src), op="dot")
    check_result(xp, edge, _to_data_order(ref.sddmm(graph.indptr, graph.indices, dst, src), perm), np.float64)
    grad_scores, _ = ca.attention_aggregate_backward(A, to_xp(xp, scores), to_xp(xp, values), to_xp(xp, dst[..., :3]))
    expected = ref.attention_aggregate_backward(graph.indptr, graph.indices, scores[perm], values, dst[..., :3])[0]
    check_result(xp, grad_scores, _to_data_order(expected, perm), np.float64)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_out_with_a_sparse_matrix_graph(xp, fmt):
    """out= with a CSC or COO matrix as the graph (edge arrays in its stored order, computed in
    CSR order and scattered back): the call fills out and returns it."""
    A = _build_sparse(xp, fmt, "matrix")
    graph, perm = _reference_graph(A)
    scores = np.random.default_rng(21).standard_normal((len(perm), 2))  # in A.data order
    out = poison(xp, scores.shape, np.float64)
    got = ca.edge_softmax(A, to_xp(xp, scores), out=out)
    assert got is out
    check_result(xp, out, _to_data_order(ref.edge_softmax(graph.indptr, scores[perm])[0], perm), np.float64)
    values = np.random.default_rng(22).standard_normal((A.shape[1], 2, 3))
    out = poison(xp, (A.shape[0], 2, 3), np.float64)
    assert ca.attention_aggregate(A, to_xp(xp, scores), to_xp(xp, values), out=out) is out
    expected = ref.attention_aggregate(graph.indptr, graph.indices, scores[perm], values)[0]
    check_result(xp, out, expected, np.float64)


def test_a_given_lse_is_the_one_used(xp):
    """attention_aggregate_backward recomputes the weights as exp(score - lse) from the lse it is
    given: one larger by 1 scales every weight, so grad_values, by exp(-1)."""
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(23)
    scores = rng.standard_normal((len(graph.indices), 2))
    values = rng.standard_normal((graph.num_src, 2, 3))
    grad_out = rng.standard_normal((len(graph.indptr) - 1, 2, 3))
    g = make_graph(xp, graph)
    _, lse = ca.attention_aggregate(g, to_xp(xp, scores), to_xp(xp, values), return_lse=True)
    args = (g, to_xp(xp, scores), to_xp(xp, values), to_xp(xp, grad_out))
    _, grad_values = ca.attention_aggregate_backward(*args, lse=lse)
    _, shifted = ca.attention_aggregate_backward(*args, lse=lse + 1)
    check_result(xp, shifted, to_np(grad_values) * np.exp(-1.0), np.float64)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_graph_edge_terms_follow_stored_order(xp, fmt):
    """edge_feat and edge_score in A.data order, and their gradients returned in that order."""
    A = _build_sparse(xp, fmt, "matrix")
    graph, perm = _reference_graph(A)
    rng = np.random.default_rng(18)
    E, n_dst, n_src = len(perm), A.shape[0], A.shape[1]
    q, k, v = rng.standard_normal((n_dst, 2, 3)), rng.standard_normal((n_src, 2, 3)), rng.standard_normal((n_src, 2, 3))
    edge_feat = rng.standard_normal((E, 2, 3))  # in A.data order
    grad_out = rng.standard_normal((n_dst, 2, 3))
    out, lse = ca.graph_attention(A, *to_xp(xp, (q, k, v)), edge_feat=to_xp(xp, edge_feat), return_lse=True)
    check_result(
        xp, out, ref.graph_attention(graph.indptr, graph.indices, q, k, v, edge_feat=edge_feat[perm])[0], np.float64
    )
    grads = ca.graph_attention_backward(
        A, *to_xp(xp, (q, k, v)), out, to_xp(xp, grad_out), lse, edge_feat=to_xp(xp, edge_feat)
    )
    expected = ref.graph_attention_backward(graph.indptr, graph.indices, q, k, v, grad_out, edge_feat=edge_feat[perm])
    for got, want in zip(grads[:3], expected[:3]):
        check_result(xp, got, want, np.float64)
    check_result(xp, grads[3], _to_data_order(expected[3], perm), np.float64)

    a_dst, a_src, edge_score = (
        rng.standard_normal((n_dst, 2)),
        rng.standard_normal((n_src, 2)),
        rng.standard_normal((E, 2)),
    )
    out, lse = ca.gat_attention(A, *to_xp(xp, (a_dst, a_src, v)), edge_score=to_xp(xp, edge_score), return_lse=True)
    check_result(
        xp,
        out,
        ref.gat_attention(graph.indptr, graph.indices, a_dst, a_src, v, edge_score=edge_score[perm])[0],
        np.float64,
    )
    grads = ca.gat_attention_backward(
        A, *to_xp(xp, (a_dst, a_src, v)), out, to_xp(xp, grad_out), lse, edge_score=to_xp(xp, edge_score)
    )
    expected = ref.gat_attention_backward(
        graph.indptr, graph.indices, a_dst, a_src, v, grad_out, edge_score=edge_score[perm]
    )
    for got, want in zip(grads[:3], expected[:3]):
        check_result(xp, got, want, np.float64)
    check_result(xp, grads[3], _to_data_order(expected[3], perm), np.float64)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_spmm_uses_data_when_weights_none(xp, fmt):
    """weights=None with a matrix as the graph means its data (spmm(A, None, X) == A @ X; issue 13)."""
    A = _build_sparse(xp, fmt, "matrix")
    graph, perm = _reference_graph(A)
    values = np.random.default_rng(17).standard_normal((A.shape[1], 3))
    out = ca.spmm(A, None, to_xp(xp, values))
    check_result(xp, out, ref.spmm(graph.indptr, graph.indices, to_np(A.data)[perm], values), np.float64)


@pytest.mark.parametrize("data_dtype", [np.bool_, np.int8, np.uint8, np.int64, np.uint64])
def test_sparse_spmm_of_an_integer_matrix(data_dtype):
    """An adjacency matrix of bool or (unsigned) integers weights like A @ X: its data take the
    dtype of the values (where A @ X would promote int64 data to float64)."""
    import scipy.sparse

    A = scipy.sparse.random_array((6, 5), density=0.5, format="csr", rng=18)
    A.data = np.arange(1, A.nnz + 1).astype(data_dtype)
    values = np.random.default_rng(18).standard_normal((5, 3)).astype(np.float32)
    out = ca.spmm(A, None, values)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, A.astype(np.float64) @ values, rtol=1e-6)


@pytest.mark.parametrize("data_dtype", [np.int32, np.int64, np.uint16, np.uint64])
@pytest.mark.parametrize("func", ["spmm", "spmm_backward"])
def test_sparse_spmm_of_integers_past_float16(data_dtype, func):
    """Integer data taken as float16 weights overflowed to inf (and warned); those past 65504
    are refused naming the data, those within it give A @ X."""
    import scipy.sparse

    values = np.ones((2, 2), np.float16)
    args = (values, values) if func == "spmm_backward" else (values,)
    for top in (65505, 100000) if data_dtype != np.uint16 else (65505, 65535):
        A = scipy.sparse.csr_array(
            (np.array([top, 3], data_dtype), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2)
        )
        with pytest.raises(ValueError, match=f"^graph.data holds {top}, beyond the range of float16"):
            getattr(ca, func)(A, None, *args)
    if np.iinfo(data_dtype).min < 0:
        A.data = np.array([-70000, 3], data_dtype)
        with pytest.raises(ValueError, match="^graph.data holds -70000"):
            ca.spmm(A, None, values)
    A.data = np.array([65504, 3], data_dtype)
    with np.errstate(all="raise"):
        out = ca.spmm(A, None, values)
    np.testing.assert_array_equal(out, np.array([[65504, 65504], [3, 3]], np.float16))


# ------------------------------------------------------------------ devices


def test_a_cupy_that_fails_to_import_leaves_the_cpu_backend(tmp_path):
    """An installed CuPy whose import raises something other than ImportError (a broken
    installation, a bad CUPY_CACHE_DIR) made ``import cupy_csrattn`` fail: the CPU backend
    serves, and gpu_status says what CuPy raised."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise RuntimeError('CUPY_CACHE_DIR is not a directory')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), root, os.environ.get("PYTHONPATH", "")]))
    code = (
        "import numpy as np, cupy_csrattn as ca; g = ca.CSRGraph([0, 2], [0, 1]);"
        "print(ca.edge_softmax(g, np.zeros(2)).tolist(), ca.backend.gpu_status())"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    reason = "importing CuPy raised RuntimeError: CUPY_CACHE_DIR is not a directory"
    assert result.stdout.strip() == f"[0.5, 0.5] (False, '{reason}')"


def test_gpu_graph_with_numpy_inputs_computes_on_gpu(xp):
    if is_numpy(xp):
        pytest.skip("GPU placement test; runs with the cupy backend")
    graph = named_graph("odd_sizes")
    g = make_graph(xp, graph)  # on the GPU
    scores = np.random.default_rng(18).standard_normal(len(graph.indices))
    probs = ca.edge_softmax(g, scores)
    assert array_module_of(probs) == "cupy"
    check_result(xp, probs, ref.edge_softmax(graph.indptr, scores)[0], np.float64)


def test_numpy_graph_with_cupy_inputs_computes_on_gpu(xp):
    if is_numpy(xp):
        pytest.skip("GPU placement test; runs with the cupy backend")
    cupy = require_cupy()
    graph = named_graph("odd_sizes")
    scores = np.random.default_rng(19).standard_normal(len(graph.indices))
    probs = ca.edge_softmax((graph.indptr, graph.indices, graph.num_src), cupy.asarray(scores))
    assert array_module_of(probs) == "cupy"
    check_result(xp, probs, ref.edge_softmax(graph.indptr, scores)[0], np.float64)


# ------------------------------------------------------------------ leaky_relu at 0


@pytest.mark.parametrize("slope", [0.2, 0.05])
def test_gat_leaky_relu_derivative_at_zero_uses_slope(xp, slope):
    """a_dst + a_src == 0 exactly on some edges: the derivative there is negative_slope."""
    graph = from_rows([[0, 1, 2], [2, 0], [1]], num_src=3)
    a_dst = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.0]])
    a_src = np.array([[-1.0, 0.5], [1.5, 0.0], [-0.25, 1.0]])  # several exact zeros
    z = a_dst[row_of_edges(graph.indptr)] + a_src[graph.indices]
    assert (z == 0).sum() >= 3
    rng = np.random.default_rng(20)
    values = rng.standard_normal((3, 2, 4))
    grad_out = rng.standard_normal((3, 2, 4))
    g = make_graph(xp, graph)
    out, lse = ca.gat_attention(
        g, to_xp(xp, a_dst), to_xp(xp, a_src), to_xp(xp, values), negative_slope=slope, return_lse=True
    )
    grads = ca.gat_attention_backward(
        g, to_xp(xp, a_dst), to_xp(xp, a_src), to_xp(xp, values), out, to_xp(xp, grad_out), lse, negative_slope=slope
    )
    expected = ref.gat_attention_backward(
        graph.indptr, graph.indices, a_dst, a_src, values, grad_out, negative_slope=slope
    )
    for got, want in zip(grads, expected):
        check_result(xp, got, want, np.float64)
