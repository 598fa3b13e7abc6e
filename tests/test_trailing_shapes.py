"""Edge arrays (E, *S) and node arrays (N, *S, F): each element of the trailing shape S is an
independent head, results are shaped like the inputs, contiguous inputs are not copied, and
a mismatch between the arguments' trailing shapes is a ValueError naming both."""

import numpy as np
import pytest
from helpers import case_params, poison

import cupy_csrattn as ca
from cupy_csrattn.graph import CSRGraph
from cupy_csrattn.ops.placement import Placement
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.compare import check_result, magnitude, to_np
from cupy_csrattn.testing.graphs import named_graph, num_dst_of

S = (2, 3)


# Arguments (and results) of shape (*S, D): parameters every row reads (GATv2's att and its gradient).
PARAMETERS = {"gatv2_attention": 2, "gatv2_attention_backward": 2}


def _head_slice(x, index, parameter=False):
    """Head ``index`` of S from an array (rows, *S, ...), or (*S, ...) for a parameter; other
    arguments as they are."""
    if not isinstance(x, np.ndarray):
        return x
    return x[index] if parameter else x[(slice(None), *index)]


@pytest.mark.parametrize("case", case_params())
def test_each_trailing_element_is_an_independent_head(xp, case):
    """The op on (rows, 2, 3, ...) arrays equals, at [:, i, j], the op on the arrays' [:, i, j]
    slices (single-head calls): independent of how the package flattens S."""
    graph = named_graph("duplicates")
    rng = np.random.default_rng(40)
    args, kwargs = case.make(rng, graph, S, 4, np.float64)
    g = make_graph(xp, graph)
    full = case.run(g, to_xp(xp, args), to_xp(xp, kwargs))
    parameter = PARAMETERS.get(case.op)
    for index in np.ndindex(*S):
        sliced_args = tuple(_head_slice(a, index, i == parameter) for i, a in enumerate(args))
        sliced_kwargs = {k: _head_slice(v, index) for k, v in kwargs.items()}
        single = case.run(g, to_xp(xp, sliced_args), to_xp(xp, sliced_kwargs))
        # The outputs of one call share a scale (as in check_outputs): a gradient that cancels
        # to rounding noise is judged on the others' scale, since the kernels' summation order
        # may depend on the number of heads.
        scale = magnitude(*[to_np(part) for part in single if part is not None])
        for i, (whole, part) in enumerate(zip(full, single)):
            if whole is None:
                assert part is None
                continue
            is_parameter = case.op.endswith("_backward") and i == parameter
            assert (whole.shape[:2] if is_parameter else whole.shape[1:3]) == S, (case.name, i, whole.shape)
            head = whole[index] if is_parameter else whole[(slice(None), *index)]
            check_result(xp, head, to_np(part), part.dtype, equal_nan=True, err_msg=case.name, scale=scale)


@pytest.mark.parametrize("trailing", [(), (1,), (1, 3), (3, 4, 2)], ids=str)
def test_results_are_shaped_like_the_inputs(xp, trailing):
    graph = named_graph("odd_sizes")
    g = make_graph(xp, graph)
    rng = np.random.default_rng(41)
    E, N_dst, N_src, F = len(graph.indices), num_dst_of(graph), graph.num_src, 5

    def r(*shape):
        return to_xp(xp, rng.standard_normal(shape))

    scores, values = r(E, *trailing), r(N_src, *trailing, F)
    assert ca.edge_softmax(g, scores).shape == (E, *trailing)
    assert ca.edge_softmax(g, scores, norm_by="src").shape == (E, *trailing)
    assert ca.spmm(g, scores, values).shape == (N_dst, *trailing, F)
    assert ca.sddmm(g, r(N_dst, *trailing, F), values).shape == (E, *trailing)
    assert ca.sddmm(g, r(N_dst, *trailing), r(N_src, *trailing), op="add").shape == (E, *trailing)
    out, lse = ca.attention_aggregate(g, scores, values, return_lse=True)
    assert out.shape == (N_dst, *trailing, F) and lse.shape == (N_dst, *trailing)
    out, lse = ca.graph_attention(g, r(N_dst, *trailing, 2), r(N_src, *trailing, 2), values, return_lse=True)
    assert out.shape == (N_dst, *trailing, F) and lse.shape == (N_dst, *trailing)
    grads = ca.gat_attention_backward(
        g, r(N_dst, *trailing), r(N_src, *trailing), values, out, r(N_dst, *trailing, F), lse
    )
    assert [x.shape for x in grads] == [(N_dst, *trailing), (N_src, *trailing), (N_src, *trailing, F)]


def test_pyg_logits_layout(xp):
    """(E, H, 1) attention logits (DGL's and PyG's layout) with (N, H, 1, F) values: the same
    numbers as (E, H) with (N, H, F), in the inputs' shapes."""
    graph = named_graph("unsorted_columns")
    g = make_graph(xp, graph)
    rng = np.random.default_rng(42)
    H, F = 4, 3
    logits = rng.standard_normal((len(graph.indices), H, 1))
    values = rng.standard_normal((graph.num_src, H, F))
    probs = ca.edge_softmax(g, to_xp(xp, logits))
    assert probs.shape == logits.shape
    check_result(xp, probs, to_np(ca.edge_softmax(g, to_xp(xp, logits[..., 0])))[..., None], np.float64)
    out = ca.attention_aggregate(g, to_xp(xp, logits), to_xp(xp, values[:, :, None, :]))
    assert out.shape == (num_dst_of(graph), H, 1, F)
    want = to_np(ca.attention_aggregate(g, to_xp(xp, logits[..., 0]), to_xp(xp, values)))
    check_result(xp, out, want[:, :, None, :], np.float64)


@pytest.mark.parametrize("op", ["edge_softmax", "spmm", "attention_aggregate"])
def test_out_with_a_trailing_shape(xp, op):
    graph = named_graph("zero_degree_rows")
    g = make_graph(xp, graph)
    rng = np.random.default_rng(43)
    scores = to_xp(xp, rng.standard_normal((len(graph.indices), 1, 3)).astype(np.float32))
    values = to_xp(xp, rng.standard_normal((graph.num_src, 1, 3, 2)).astype(np.float32))
    args = (scores,) if op == "edge_softmax" else (scores, values)
    want = getattr(ca, op)(g, *args)
    out = poison(xp, want.shape, np.float32)
    assert getattr(ca, op)(g, *args, out=out) is out
    check_result(xp, out, to_np(want), np.float32)
    with pytest.raises(ValueError, match="out"):
        getattr(ca, op)(g, *args, out=poison(xp, (want.shape[0], 3, *want.shape[3:]), np.float32))


def test_contiguous_inputs_are_reshaped_not_copied():
    graph = named_graph("odd_sizes")
    g = CSRGraph(graph.indptr, graph.indices, graph.num_src)
    rng = np.random.default_rng(44)
    scores = rng.standard_normal((len(graph.indices), 3, 4, 2))
    values = rng.standard_normal((graph.num_src, 3, 4, 2, 5))
    a_src = rng.standard_normal((graph.num_src, 3, 4, 2))
    place = Placement(g, None, {"scores": scores, "values": values, "a_src": a_src})
    for placed, original, shape in (
        (place.edge_input(scores, np.float64), scores, (len(graph.indices), 24)),
        (place.node_input(values, np.float64), values, (graph.num_src, 24, 5)),
        (place.node_input(a_src, np.float64, per_node_scalar=True), a_src, (graph.num_src, 24)),
    ):
        assert placed.shape == shape and np.shares_memory(placed, original)
    strided = values[:, :, ::2]  # not contiguous: copied into the canonical layout
    placed = place.node_input(strided, np.float64)
    assert placed.shape == (graph.num_src, 12, 5) and not np.shares_memory(placed, values)
    np.testing.assert_array_equal(placed, strided.reshape(graph.num_src, 12, 5))


# ------------------------------------------------------------------ mismatches


GRAPH = named_graph("odd_sizes")
E, N_DST, N_SRC = len(GRAPH.indices), num_dst_of(GRAPH), GRAPH.num_src
RNG = np.random.default_rng(45)


def _r(*shape):
    return RNG.standard_normal(shape)


MISMATCHES = [
    ("edge_softmax_backward", (_r(E, 2, 3), _r(E, 3, 2)), {}, "grad_probs", "probs"),
    ("spmm", (_r(E, 2, 3), _r(N_SRC, 6, 4)), {}, "values", "weights"),
    ("spmm", (_r(E, 2, 3), _r(N_SRC, 2, 3)), {}, "values", "weights"),  # no feature axis
    ("spmm_backward", (_r(E, 1, 3), _r(N_SRC, 1, 3, 4), _r(N_DST, 3, 4)), {}, "grad_out", "weights"),
    ("sddmm", (_r(N_DST, 2, 3, 4), _r(N_SRC, 2, 4)), {}, "src_feat", "dst_feat"),
    ("sddmm_backward", (_r(N_DST, 2, 3, 4), _r(N_SRC, 2, 3, 4), _r(E, 2)), {}, "grad_scores", "dst_feat"),
    ("attention_aggregate", (_r(E, 3, 4, 2), _r(N_SRC, 3, 4, 5)), {}, "values", "scores"),
    (
        "attention_aggregate_backward",
        (_r(E, 2, 1), _r(N_SRC, 2, 1, 3), _r(N_DST, 2, 1, 3)),
        {"lse": _r(N_DST, 2)},
        "lse",
        "scores",
    ),
    ("graph_attention", (_r(N_DST, 2, 3, 4), _r(N_SRC, 2, 3, 4), _r(N_SRC, 3, 2, 4)), {}, r"\bv\b", r"\bq\b"),
    ("gat_attention", (_r(N_DST, 2, 3), _r(N_SRC, 2, 3), _r(N_SRC, 2, 5)), {}, "values", "a_dst"),
    (
        "gat_attention_backward",
        (_r(N_DST, 1, 3), _r(N_SRC, 1, 3), _r(N_SRC, 1, 3, 2), _r(N_DST, 1, 3, 2), _r(N_DST, 1, 3, 2), _r(N_DST, 3, 1)),
        {},
        "lse",
        "a_dst",
    ),
]


@pytest.mark.parametrize("op,args,kwargs,name,other", MISMATCHES, ids=[m[0] + "-" + m[3] for m in MISMATCHES])
def test_trailing_shape_mismatch_names_both_arguments(xp, op, args, kwargs, name, other):
    with pytest.raises(ValueError, match=f"{name}.*trailing shape.*{other}") as error:
        getattr(ca, op)(make_graph(xp, GRAPH), *to_xp(xp, args), **to_xp(xp, kwargs))
    assert "must be (" in str(error.value)
