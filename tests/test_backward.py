"""Every backward op: against the loop reference, and against central finite differences
of the package's own forward in float64 (random directions on random graphs, and every
coordinate on a tiny graph)."""

from dataclasses import dataclass

import numpy as np
import pytest
from helpers import HYP_FEW
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_graphs, heads, seeds

import cupy_csrattn as ca
from cupy_csrattn.ops.registry import OPS
from cupy_csrattn.testing import reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp, trailing_shape
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import array_module_of, check_result, to_np
from cupy_csrattn.testing.graphs import GraphData, from_degrees, hub, named_graph, num_dst_of

# backward op -> its forward op, from the registry
BACKWARD = {name: op.forward for name, op in OPS.items() if op.forward is not None}


# ------------------------------------------------------------------ against the loop reference


def test_float16_aggregate_backward_dot_products_past_float16(xp):
    """float16 attention_aggregate_backward whose <grad_out[dst], values[src]> reach 6.4e5 (past
    65504) while every gradient stays within float16: the GPU kept those dot products in the
    float16 grad_scores between its two kernels (inf, then NaN). Short rows (lane groups), a
    row of 40 edges and one of 3000 (split in items, merged, then written)."""
    graph = from_degrees([2, 3000, 0, 3, 1, 40], num_src=700, seed=3)
    rng = np.random.default_rng(8)
    N, E, H, F = num_dst_of(graph), len(graph.indices), 2, 16
    scores = rng.standard_normal((E, H)).astype(np.float16)
    values = (200 + rng.standard_normal((graph.num_src, H, F))).astype(np.float16)
    grad_out = np.full((N, H, F), 200, np.float16)
    got = ca.attention_aggregate_backward(make_graph(xp, graph), *to_xp(xp, (scores, values, grad_out)))
    expected = ref.attention_aggregate_backward(graph.indptr, graph.indices, scores, values, grad_out)
    assert np.abs(expected[0]).max() < 65504 < 200 * 200 * F
    for g, e in zip(got, expected):
        check_result(xp, g, e, np.float16)


@pytest.mark.parametrize("slope", [-3.0, 1.5, 1e16])
@pytest.mark.parametrize("func", ["gat_attention", "gatv2_attention"])
def test_slopes_beyond_one(xp, func, slope):
    """leaky_relu's derivative is 1 for z > 0 whatever the slope ((z > 0) * (1 - s) + s is
    not: 0 from |s| = 2**53). Logits of both signs for the moderate slopes; for 1e16, positive
    ones (negative ones would give scores near -1e16, and an lse whose rounding is O(1))."""
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(5)
    N, Ns, H, F = num_dst_of(graph), graph.num_src, 2, 3
    low = -2.0 if abs(slope) < 10 else -0.4
    if func == "gat_attention":
        inputs = (rng.uniform(0.5, 1.5, (N, H)), rng.uniform(low, 0.4, (Ns, H)), rng.standard_normal((Ns, H, F)))
    else:
        inputs = (rng.uniform(0.5, 1.5, (N, H, F)), rng.uniform(low, 0.4, (Ns, H, F)), rng.standard_normal((H, F)))
    grad_out = rng.standard_normal((N, H, inputs[2].shape[-1]) if func == "gat_attention" else (N, H, F))
    g, x = make_graph(xp, graph), to_xp(xp, inputs)
    out, lse = getattr(ca, func)(g, *x, negative_slope=slope, return_lse=True)
    grads = getattr(ca, f"{func}_backward")(g, *x, out, to_xp(xp, grad_out), lse, negative_slope=slope)
    reference = getattr(ref, f"{func}_backward")
    expected = reference(graph.indptr, graph.indices, *inputs, grad_out, negative_slope=slope)
    scale = max(np.abs(e).max() for e in expected)
    for name, got, want in zip(("first", "second", "third"), grads, expected):
        check_result(xp, got, want, np.float64, err_msg=f"{func} slope {slope}: {name} gradient", scale=scale)


@pytest.mark.parametrize(
    "case",
    [
        "edge_softmax_backward",
        "spmm_backward",
        "attention_aggregate_backward",
        "gat_attention_backward",
        "gat_attention_backward_edge_score",
        "graph_attention_backward_edge_feat",
        "gatv2_attention_backward",
    ],
)
def test_hub_row(xp, case):
    check_case(xp, CASE_BY_NAME[case], hub(), None, 2, np.float64, seed=2)


# ------------------------------------------------------------------ finite differences


@dataclass(frozen=True)
class FDCase:
    """forward(g, x) -> output; backward(g, x, grad_out) -> {input name: gradient}; op: the
    forward op whose backward op is checked."""

    name: str
    op: str
    make: object  # (rng, graph, H, F) -> {input name: float64 array}
    forward: object
    backward: object

    def __str__(self):
        return self.name


def _n(graph):
    return num_dst_of(graph)


def _shape(n, H, *rest):
    return (n, *trailing_shape(H), *rest)


def _make_scores_values(rng, graph, H, F):
    return {
        "scores": rng.standard_normal(_shape(len(graph.indices), H)) * 1.5,
        "values": rng.standard_normal(_shape(graph.num_src, H, F)),
    }


def _aggregate_backward_with_lse(g, x, go):
    _, lse = ca.attention_aggregate(g, x["scores"], x["values"], return_lse=True)
    gs, gv = ca.attention_aggregate_backward(g, x["scores"], x["values"], go, lse=lse)
    return {"scores": gs, "values": gv}


def _graph_attention_fd(scale, edge_feat=False):
    kw = {} if scale is None else {"scale": scale}
    names = ["q", "k", "v", "edge_feat"] if edge_feat else ["q", "k", "v"]

    def make(rng, graph, H, F):
        # with edge_feat, added to the key and the value, q and k have v's width
        D = F if edge_feat else F + 1
        x = {
            "q": rng.standard_normal(_shape(_n(graph), H, D)),
            "k": rng.standard_normal(_shape(graph.num_src, H, D)),
            "v": rng.standard_normal(_shape(graph.num_src, H, F)),
        }
        if edge_feat:
            x["edge_feat"] = rng.standard_normal(_shape(len(graph.indices), H, F))
        return x

    def given(x):
        return dict(kw, edge_feat=x["edge_feat"]) if edge_feat else kw

    def forward(g, x):
        return ca.graph_attention(g, x["q"], x["k"], x["v"], **given(x))

    def backward(g, x, go):
        out, lse = ca.graph_attention(g, x["q"], x["k"], x["v"], return_lse=True, **given(x))
        return dict(zip(names, ca.graph_attention_backward(g, x["q"], x["k"], x["v"], out, go, lse, **given(x))))

    name = f"graph_attention_scale={scale}" + ("_edge_feat" if edge_feat else "")
    return FDCase(name, "graph_attention", make, forward, backward)


def _gat_fd(slope, edge_score=False):
    kw = {} if slope is None else {"negative_slope": slope}
    names = ["a_dst", "a_src", "values", "edge_score"] if edge_score else ["a_dst", "a_src", "values"]

    def make(rng, graph, H, F):
        # a_dst + a_src (+ edge_score) = integer + 0.7 + small noise: both signs, never within
        # a step of leaky_relu's kink at 0, where a central difference would straddle it
        def near_lattice(shape, offset):
            return rng.integers(-2, 3, shape) + offset + 0.05 * rng.standard_normal(shape)

        x = {
            "a_dst": near_lattice(_shape(_n(graph), H), 0.3),
            "a_src": near_lattice(_shape(graph.num_src, H), 0.4),
            "values": rng.standard_normal(_shape(graph.num_src, H, F)),
        }
        if edge_score:
            x["edge_score"] = near_lattice(_shape(len(graph.indices), H), 0.0)
        return x

    def given(x):
        return dict(kw, edge_score=x["edge_score"]) if edge_score else kw

    def forward(g, x):
        return ca.gat_attention(g, x["a_dst"], x["a_src"], x["values"], **given(x))

    def backward(g, x, go):
        out, lse = ca.gat_attention(g, x["a_dst"], x["a_src"], x["values"], return_lse=True, **given(x))
        grads = ca.gat_attention_backward(g, x["a_dst"], x["a_src"], x["values"], out, go, lse, **given(x))
        return dict(zip(names, grads))

    return FDCase(
        f"gat_attention_slope={slope}" + ("_edge_score" if edge_score else ""), "gat_attention", make, forward, backward
    )


def _gatv2_fd(slope):
    kw = {} if slope is None else {"negative_slope": slope}

    def make(rng, graph, H, F):
        # every x_dst + x_src = integer + 0.7 + small noise, as for gat: both signs, never
        # within a step of leaky_relu's kink at 0
        def near_lattice(shape, offset):
            return rng.integers(-2, 3, shape) + offset + 0.05 * rng.standard_normal(shape)

        return {
            "x_dst": near_lattice(_shape(_n(graph), H, F), 0.3),
            "x_src": near_lattice(_shape(graph.num_src, H, F), 0.4),
            "att": rng.standard_normal((*trailing_shape(H), F)),
        }

    def forward(g, x):
        return ca.gatv2_attention(g, x["x_dst"], x["x_src"], x["att"], **kw)

    def backward(g, x, go):
        out, lse = ca.gatv2_attention(g, x["x_dst"], x["x_src"], x["att"], return_lse=True, **kw)
        gd, gs, ga = ca.gatv2_attention_backward(g, x["x_dst"], x["x_src"], x["att"], out, go, lse, **kw)
        return {"x_dst": gd, "x_src": gs, "att": ga}

    return FDCase(f"gatv2_attention_slope={slope}", "gatv2_attention", make, forward, backward)


def _spmm_unweighted_backward(g, x, go):
    grad_weights, grad_values = ca.spmm_backward(g, None, x["values"], go)
    assert grad_weights is None
    return {"values": grad_values}


def _sddmm_fd(op, scale):
    kw = {"op": op} if scale is None else {"op": op, "scale": scale}

    def make(rng, graph, H, F):
        tail = (F,) if op == "dot" else ()
        return {
            "dst_feat": rng.standard_normal(_shape(_n(graph), H, *tail)),
            "src_feat": rng.standard_normal(_shape(graph.num_src, H, *tail)),
        }

    def forward(g, x):
        return ca.sddmm(g, x["dst_feat"], x["src_feat"], **kw)

    def backward(g, x, go):
        gd, gs = ca.sddmm_backward(g, x["dst_feat"], x["src_feat"], go, **kw)
        return {"dst_feat": gd, "src_feat": gs}

    return FDCase(f"sddmm_{op}_scale={scale}", "sddmm", make, forward, backward)


FD_CASES = [
    FDCase(
        "edge_softmax",
        "edge_softmax",
        lambda rng, graph, H, F: {"scores": rng.standard_normal(_shape(len(graph.indices), H))},
        lambda g, x: ca.edge_softmax(g, x["scores"]),
        lambda g, x, go: {"scores": ca.edge_softmax_backward(g, ca.edge_softmax(g, x["scores"]), go)},
    ),
    FDCase(
        "edge_softmax_by_src",
        "edge_softmax",
        lambda rng, graph, H, F: {"scores": rng.standard_normal(_shape(len(graph.indices), H))},
        lambda g, x: ca.edge_softmax(g, x["scores"], norm_by="src"),
        lambda g, x, go: {
            "scores": ca.edge_softmax_backward(g, ca.edge_softmax(g, x["scores"], norm_by="src"), go, norm_by="src")
        },
    ),
    FDCase(
        "spmm",
        "spmm",
        lambda rng, graph, H, F: {
            "weights": rng.standard_normal(_shape(len(graph.indices), H)),
            "values": rng.standard_normal(_shape(graph.num_src, H, F)),
        },
        lambda g, x: ca.spmm(g, x["weights"], x["values"]),
        lambda g, x, go: dict(zip(["weights", "values"], ca.spmm_backward(g, x["weights"], x["values"], go))),
    ),
    FDCase(
        "spmm_unweighted",
        "spmm",
        lambda rng, graph, H, F: {"values": rng.standard_normal(_shape(graph.num_src, H, F))},
        lambda g, x: ca.spmm(g, None, x["values"]),
        _spmm_unweighted_backward,
    ),
    _sddmm_fd("dot", None),
    _sddmm_fd("dot", 0.7),
    _sddmm_fd("add", None),
    FDCase(
        "attention_aggregate_lse=None",
        "attention_aggregate",
        _make_scores_values,
        lambda g, x: ca.attention_aggregate(g, x["scores"], x["values"]),
        lambda g, x, go: dict(
            zip(["scores", "values"], ca.attention_aggregate_backward(g, x["scores"], x["values"], go))
        ),
    ),
    FDCase(
        "attention_aggregate_lse=given",
        "attention_aggregate",
        _make_scores_values,
        lambda g, x: ca.attention_aggregate(g, x["scores"], x["values"]),
        _aggregate_backward_with_lse,
    ),
    _graph_attention_fd(None),
    _graph_attention_fd(0.3),
    _graph_attention_fd(None, edge_feat=True),
    _graph_attention_fd(0.3, edge_feat=True),
    _gat_fd(None),
    _gat_fd(0.05),
    _gat_fd(None, edge_score=True),
    _gat_fd(0.05, edge_score=True),
    _gatv2_fd(None),
    _gatv2_fd(0.05),
]
FD_PARAMS = [pytest.param(c, id=c.name) for c in FD_CASES]


def test_every_backward_op_has_finite_difference_cases():
    assert BACKWARD, "the registry has no backward op"
    assert {case.op for case in FD_CASES} == set(BACKWARD.values())


STEP = 1e-6


def _setup(xp, case, graph, H, F, seed):
    rng = np.random.default_rng(seed)
    x = case.make(rng, graph, H, F)
    g = make_graph(xp, graph)
    out = to_np(case.forward(g, to_xp(xp, x)))
    grad_out = rng.standard_normal(out.shape)
    grads = case.backward(g, to_xp(xp, x), to_xp(xp, grad_out))
    assert sorted(grads) == sorted(x)
    for name, grad in grads.items():
        assert array_module_of(grad) == xp.__name__, name
        assert grad.dtype == np.float64 and grad.shape == x[name].shape, name
    grads = {name: to_np(grad) for name, grad in grads.items()}

    def loss(inputs):
        return float(np.sum(to_np(case.forward(g, to_xp(xp, inputs))) * grad_out))

    loss_scale = float(np.sum(np.abs(out * grad_out))) + 1.0
    return rng, x, grads, loss, loss_scale


@pytest.mark.parametrize("case", FD_PARAMS)
@given(graph=csr_graphs(hub_degrees=(100, 300)), H=heads, F=st.sampled_from([1, 2, 3]), seed=seeds)
@HYP_FEW
def test_directional_derivatives(xp, case, graph, H, F, seed):
    """<grad, u> equals the central difference of sum(forward * grad_out) along u."""
    rng, x, grads, loss, loss_scale = _setup(xp, case, graph, H, F, seed)
    for name in x:
        for _ in range(2):
            u = rng.standard_normal(x[name].shape)
            plus, minus = dict(x), dict(x)
            plus[name] = x[name] + STEP * u
            minus[name] = x[name] - STEP * u
            numeric = (loss(plus) - loss(minus)) / (2 * STEP)
            analytic = float(np.sum(grads[name] * u))
            tol = 1e-6 * float(np.sum(np.abs(grads[name] * u))) + 1e-9 * loss_scale
            assert abs(numeric - analytic) <= tol, (name, numeric, analytic)


# rows: 0 -> [1, 0], 1 -> [], 2 -> [2, 2, 0] (a duplicate), 3 -> [1]; 3 sources
TINY = GraphData(np.array([0, 2, 2, 5, 6], np.int32), np.array([1, 0, 2, 2, 0, 1], np.int32), 3)


@pytest.mark.parametrize("H", [None, 2, (1, 3), (2, 1, 2)], ids=str)
@pytest.mark.parametrize("case", FD_PARAMS)
def test_every_coordinate_on_tiny_graph(xp, case, H):
    _, x, grads, loss, loss_scale = _setup(xp, case, TINY, H, 3, seed=7)
    for name in x:
        numeric = np.zeros_like(x[name])
        for i in range(x[name].size):
            step = np.zeros_like(x[name])
            step.flat[i] = STEP
            plus, minus = dict(x), dict(x)
            plus[name] = x[name] + step
            minus[name] = x[name] - step
            numeric.flat[i] = (loss(plus) - loss(minus)) / (2 * STEP)
        np.testing.assert_allclose(
            grads[name], numeric, rtol=1e-6, atol=1e-8 * loss_scale, equal_nan=False, err_msg=name
        )
    # sources 0..2 are all used and row 1 is empty: gradients of unused nodes are exactly 0
    for name in ("a_dst", "q", "dst_feat", "x_dst"):
        if name in grads:
            assert (grads[name][1] == 0).all(), name
