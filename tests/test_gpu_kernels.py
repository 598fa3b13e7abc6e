"""GPU kernels against the CPU backend, with every kernel path forced on small graphs.

The plan splits rows longer than plan.WHOLE_ROW_EDGES (the fused attention kernels' plan:
plan.FUSED_WHOLE_ROW_EDGES, on small graphs) into items; here those thresholds are
lowered so that split rows, their merges and the split write kernels run on graphs small
enough to check against the CPU backend (itself checked against the loop reference).
"""

import numpy as np
import pytest
from helpers import poison, require_cupy

import cupy_csrattn as ca
from cupy_csrattn.gpu import column_blocks, plan
from cupy_csrattn.testing.arrays import trailing_shape
from cupy_csrattn.testing.compare import assert_close, to_np


@pytest.fixture
def cupy():
    return require_cupy()


# (WHOLE_ROW_EDGES, MAX_CHUNKS, resident warps or None for the device's, column blocks). With
# 50 resident warps a warp's fair share of the test graph's edges is 64: the fused plan keeps
# rows of up to 64 edges whole and splits longer ones into chunks of 16, shorter than a whole
# row. With one, the fused plan splits no row, and the fused backward passes run over three
# column blocks (gpu/column_blocks.py: in float32 and float64; the rows pass with edge data
# only where rows are sorted, which the test graph's are not).
@pytest.fixture(
    params=[(1024, 1024, None, 0), (4, 3, None, 0), (1, 2, None, 0), (8, 1024, 50, 0), (1024, 1024, 1, 3)],
    ids=["default-plan", "split-4x3", "split-1x2", "fused-short-chunks", "column-blocks"],
)
def plan_limits(request, monkeypatch):
    whole, chunks, resident_warps, blocks = request.param
    monkeypatch.setattr(plan, "WHOLE_ROW_EDGES", whole)
    monkeypatch.setattr(plan, "FUSED_WHOLE_ROW_EDGES", min(whole, plan.FUSED_WHOLE_ROW_EDGES))
    monkeypatch.setattr(plan, "MAX_CHUNKS", chunks)
    monkeypatch.setattr(column_blocks, "COLUMN_BLOCKS", blocks)
    if resident_warps is not None:
        monkeypatch.setattr(plan, "_resident_warps", lambda device_id: resident_warps)
    return request.param


def _graph(rng, index_dtype, num_dst=40, num_src=33, hub=3000):
    degrees = rng.integers(0, 12, num_dst)
    degrees[::7] = 0
    degrees[5] = hub  # a hub row, split under every plan
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(index_dtype)
    indices = rng.integers(0, num_src, indptr[-1]).astype(index_dtype)
    return ca.CSRGraph(indptr, indices, num_src)


def _close(got, want, dtype):
    """got (NumPy or CuPy) ~ want at the shared tolerance of dtype (testing.compare.RTOL),
    judged on the scale of want but never below 1."""
    got = to_np(got)
    assert not np.isnan(got).any(), "unwritten (NaN-poisoned) or NaN output"
    assert_close(got, want, dtype, scale=1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "heads,features",
    [(None, 5), (1, 64), (3, 7), (8, 16), (40, 1), (2, 70), (3, 100), ((2, 1), 5), ((3, 4, 2), 3)],
    ids=str,
)
def test_ops_match_cpu(cupy, plan_limits, dtype, index_dtype, heads, features):
    rng = np.random.default_rng(7)
    g = _graph(rng, index_dtype)
    gg = g.to_gpu()
    E = g.num_edges
    edge_shape = (E, *trailing_shape(heads))
    node = lambda n: (n, *trailing_shape(heads), features)
    scores = (rng.standard_normal(edge_shape) * 3).astype(dtype)
    grad_edges = rng.standard_normal(edge_shape).astype(dtype)
    values = rng.standard_normal(node(g.num_src)).astype(dtype)
    grad_out = rng.standard_normal(node(g.num_dst)).astype(dtype)
    d = cupy.asarray

    probs = ca.edge_softmax(g, scores)
    out = poison(cupy, edge_shape, dtype)
    ca.edge_softmax(gg, d(scores), out=out)
    _close(out, probs, dtype)
    _close(ca.edge_softmax_backward(gg, d(probs), d(grad_edges)), ca.edge_softmax_backward(g, probs, grad_edges), dtype)

    for weights in (None, scores):
        want = ca.spmm(g, weights, values)
        out = poison(cupy, want.shape, dtype)
        ca.spmm(gg, None if weights is None else d(weights), d(values), out=out)
        _close(out, want, dtype)
        want_w, want_v = ca.spmm_backward(g, weights, values, grad_out)
        got_w, got_v = ca.spmm_backward(gg, None if weights is None else d(weights), d(values), d(grad_out))
        _close(got_v, want_v, dtype)
        if weights is None:
            assert got_w is None
        else:
            _close(got_w, want_w, dtype)

    scalar = lambda n: (n, *trailing_shape(heads))
    for op, dst_shape, src_shape, scale in (
        ("dot", node(g.num_dst), node(g.num_src), 0.5),
        ("add", scalar(g.num_dst), scalar(g.num_src), 1.0),
    ):
        dst = rng.standard_normal(dst_shape).astype(dtype)
        src = rng.standard_normal(src_shape).astype(dtype)
        want = ca.sddmm(g, dst, src, op=op, scale=scale)
        out = poison(cupy, edge_shape, dtype)
        ca.sddmm(gg, d(dst), d(src), op=op, scale=scale, out=out)
        _close(out, want, dtype)
        for got, want in zip(
            ca.sddmm_backward(gg, d(dst), d(src), d(grad_edges), op=op, scale=scale),
            ca.sddmm_backward(g, dst, src, grad_edges, op=op, scale=scale),
        ):
            _close(got, want, dtype)

    want_out, want_lse = ca.attention_aggregate(g, scores, values, return_lse=True)
    out = poison(cupy, want_out.shape, dtype)
    got_out, got_lse = ca.attention_aggregate(gg, d(scores), d(values), out=out, return_lse=True)
    assert got_out is out
    _close(got_out, want_out, dtype)
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isfinite(cupy.asnumpy(got_lse)), finite)
    _close(cupy.asnumpy(got_lse)[finite], want_lse[finite], dtype)
    for lse in (None, want_lse):
        want_s, want_v = ca.attention_aggregate_backward(g, scores, values, grad_out, lse=lse)
        got_s, got_v = ca.attention_aggregate_backward(
            gg, d(scores), d(values), d(grad_out), lse=None if lse is None else d(lse)
        )
        _close(got_s, want_s, dtype)
        _close(got_v, want_v, dtype)


def _fused_inputs(rng, g, heads, head_dim, features, dtype):
    """Inputs of graph_attention, gat_attention and gatv2_attention on graph g (keyword names
    of the ops); gatv2's head width is head_dim."""

    def node(n, last):
        return rng.standard_normal((n, *trailing_shape(heads), last)).astype(dtype)

    def scalar(n):
        return rng.standard_normal((n, *trailing_shape(heads))).astype(dtype)

    return {
        "graph_attention": dict(q=node(g.num_dst, head_dim), k=node(g.num_src, head_dim), v=node(g.num_src, features)),
        "gat_attention": dict(
            a_dst=scalar(g.num_dst) * 2, a_src=scalar(g.num_src) * 2, values=node(g.num_src, features)
        ),
        "gatv2_attention": dict(
            x_dst=node(g.num_dst, head_dim),
            x_src=node(g.num_src, head_dim),
            att=rng.standard_normal((*trailing_shape(heads), head_dim)).astype(dtype),
        ),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "heads,head_dim,features",
    [
        (None, 5, 3),
        (1, 64, 64),
        (3, 7, 5),
        (8, 16, 16),
        (4, 64, 64),
        (40, 2, 1),
        (2, 1, 70),
        (2, 0, 3),
        (2, 4, 0),
        (1, 150, 2),
        (2, 3, 150),
        ((2, 1), 16, 16),
        ((3, 1, 2), 5, 3),
    ],
    ids=str,
)
def test_fused_ops_match_cpu(cupy, plan_limits, dtype, index_dtype, heads, head_dim, features):
    """graph_attention, gat_attention and gatv2_attention, forward and backward, against the
    CPU backend (gatv2: x_dst, x_src of head width head_dim; 150 takes two feature tiles)."""
    rng = np.random.default_rng(5)
    g = _graph(rng, index_dtype)
    gg = g.to_gpu()
    for op, inputs in _fused_inputs(rng, g, heads, head_dim, features, dtype).items():
        forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
        gpu_inputs = {name: cupy.asarray(x) for name, x in inputs.items()}
        want_out, want_lse = forward(g, **inputs, return_lse=True)
        grad_out = rng.standard_normal(want_out.shape).astype(dtype)
        out = poison(cupy, want_out.shape, dtype)
        got_out, got_lse = forward(gg, **gpu_inputs, out=out, return_lse=True)
        assert got_out is out
        _close(got_out, want_out, dtype)
        finite = np.isfinite(want_lse)
        assert finite.any() and np.array_equal(np.isfinite(cupy.asnumpy(got_lse)), finite)
        _close(cupy.asnumpy(got_lse)[finite], want_lse[finite], dtype)
        # The GPU backward from the CPU's saved forward, against the CPU backward in float64 on
        # the same values: two float16 approximations would each bring their own rounding.
        wide = [x.astype(np.float64) for x in (*inputs.values(), want_out, grad_out, want_lse)]
        wants = backward(g, *wide)
        gots = backward(
            gg, *gpu_inputs.values(), cupy.asarray(want_out), cupy.asarray(grad_out), cupy.asarray(want_lse)
        )
        for name, got, want in zip(inputs, gots, wants):
            assert got.shape == want.shape, name
            _close(got, want, dtype)


def _fused_ops_match_cpu(cupy, rng, g, heads, head_dim, dtype):
    """The three fused ops, forward and backward (the GPU backward from the CPU's saved forward,
    against the CPU backward in float64), and the forwards of attention_aggregate and spmm
    (given weights) on the GPU copy of g, against the CPU backend on g; lse -inf exactly
    where the CPU's is."""
    gg = g.to_gpu()
    for op, inputs in _fused_inputs(rng, g, heads, head_dim, head_dim, dtype).items():
        forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
        want_out, want_lse = forward(g, **inputs, return_lse=True)
        got_out, got_lse = forward(gg, **{name: cupy.asarray(x) for name, x in inputs.items()}, return_lse=True)
        _close(got_out, want_out, dtype)
        got_lse = cupy.asnumpy(got_lse)
        assert np.array_equal(np.isneginf(got_lse), np.isneginf(want_lse)), op
        finite = np.isfinite(want_lse)
        _close(got_lse[finite], want_lse[finite], dtype)
        grad_out = rng.standard_normal(want_out.shape).astype(dtype)
        saved = [*inputs.values(), want_out, grad_out, want_lse]
        wants = backward(g, *[x.astype(np.float64) for x in saved])
        gots = backward(gg, *[cupy.asarray(x) for x in saved])
        assert len(gots) == len(wants) == len(inputs)
        for name, got, want in zip(inputs, gots, wants):
            assert got.shape == want.shape, (op, name)
            _close(got, want, dtype)
    scores = (rng.standard_normal((g.num_edges, heads)) * 2).astype(dtype)
    values = rng.standard_normal((g.num_src, heads, head_dim)).astype(dtype)
    want_out, want_lse = ca.attention_aggregate(g, scores, values, return_lse=True)
    got_out, got_lse = ca.attention_aggregate(gg, cupy.asarray(scores), cupy.asarray(values), return_lse=True)
    _close(got_out, want_out, dtype)
    got_lse = cupy.asnumpy(got_lse)
    assert np.array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    _close(got_lse[finite], want_lse[finite], dtype)
    weights = rng.standard_normal((g.num_edges, heads)).astype(dtype)
    _close(ca.spmm(gg, cupy.asarray(weights), cupy.asarray(values)), ca.spmm(g, weights, values), dtype)


# (SPAN_STAGES, SPAN_GROUP_STAGES) of gpu/attention.py: the same shapes on each kernel set.
KERNEL_SETS = {
    "row": (set(), {"forward", "grad", "sources"}),
    "span": ({"forward", "grad", "sources"}, {"forward", "grad", "sources"}),
    "span-no-groups": ({"forward", "grad", "sources"}, set()),
}


@pytest.mark.parametrize("kernel_set", list(KERNEL_SETS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads,head_dim", [(8, 16), (1, 64), (4, 64), (3, 5)], ids=str)
def test_fused_kernel_sets_match_cpu(cupy, plan_limits, monkeypatch, kernel_set, dtype, heads, head_dim):
    """The three fused ops, forward and backward, and the forwards of attention_aggregate and
    spmm (given weights), on the row kernels, the head-span kernels and the head-span kernels
    without edge groups, against the CPU backend."""
    from cupy_csrattn.gpu import attention, replay

    stages, group_stages = KERNEL_SETS[kernel_set]
    monkeypatch.setattr(attention, "SPAN_STAGES", stages)
    monkeypatch.setattr(attention, "SPAN_GROUP_STAGES", group_stages)
    monkeypatch.setattr(replay, "ENABLED", False)
    rng = np.random.default_rng(9)
    _fused_ops_match_cpu(cupy, rng, _graph(rng, np.int32), heads, head_dim, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads,head_dim", [(8, 16), (4, 64)], ids=str)
def test_fused_forwards_into_misaligned_out(cupy, plan_limits, dtype, heads, head_dim):
    """The fused forwards, attention_aggregate and spmm into an ``out`` that starts one element
    into its buffer (C-contiguous, rows not aligned for the vector stores that aligned rows
    take), against the CPU backend: every element written, none outside."""
    rng = np.random.default_rng(11)
    g = _graph(rng, np.int32)
    gg = g.to_gpu()
    scores = (rng.standard_normal((g.num_edges, heads)) * 2).astype(dtype)
    values = rng.standard_normal((g.num_src, heads, head_dim)).astype(dtype)
    calls = {
        op: (getattr(ca, op), inputs) for op, inputs in _fused_inputs(rng, g, heads, head_dim, head_dim, dtype).items()
    }
    calls["attention_aggregate"] = (ca.attention_aggregate, dict(scores=scores, values=values))
    calls["spmm"] = (ca.spmm, dict(weights=scores, values=values))
    for op, (forward, inputs) in calls.items():
        want = forward(g, **inputs)
        buffer = poison(cupy, (want.size + 2,), dtype)
        out = buffer[1:-1].reshape(want.shape)
        got = forward(gg, **{name: cupy.asarray(x) for name, x in inputs.items()}, out=out)
        assert got is out, op
        _close(got, want, dtype)
        assert cupy.isnan(buffer[[0, -1]]).all(), f"{op} wrote outside out"


def test_fused_special_rows_on_gpu(cupy, plan_limits):
    """gat: a row whose scores are all -inf gets zero output and lse -inf; graph_attention and
    gatv2: a NaN in q (x_dst) poisons its own row and head only, the hub row included."""
    rng = np.random.default_rng(4)
    g = _graph(rng, np.int64)
    H, D, F = 2, 3, 4
    inputs = _fused_inputs(rng, g, H, D, F, np.float64)
    inputs["gat_attention"]["a_dst"][1] = -np.inf
    inputs["graph_attention"]["q"][5, 1, 0] = np.nan
    inputs["gatv2_attention"]["x_dst"][5, 1, 0] = np.nan
    for op, op_inputs in inputs.items():
        want_out, want_lse = getattr(ca, op)(g, **op_inputs, return_lse=True)
        got_out, got_lse = getattr(ca, op)(
            g.to_gpu(), **{n: cupy.asarray(x) for n, x in op_inputs.items()}, return_lse=True
        )
        got_out, got_lse = cupy.asnumpy(got_out), cupy.asnumpy(got_lse)
        assert np.array_equal(np.isnan(got_out), np.isnan(want_out))
        assert np.array_equal(np.isneginf(got_lse), np.isneginf(want_lse))
        ok = ~np.isnan(want_out)
        np.testing.assert_allclose(got_out[ok], want_out[ok], rtol=1e-12, atol=1e-12)
        if op == "gat_attention":
            assert (got_out[1] == 0).all() and np.isneginf(got_lse[1]).all()
        else:
            assert np.isnan(got_out[5, 1]).all() and not np.isnan(got_out[5, 0]).any()


def test_special_rows_on_gpu(cupy, plan_limits):
    """All -inf rows give zero weights and lse -inf; a NaN stays in its own row and head."""
    rng = np.random.default_rng(3)
    g = _graph(rng, np.int32)
    H, F = 2, 3
    scores = rng.standard_normal((g.num_edges, H))
    ip = g.indptr
    scores[ip[1] : ip[2], :] = -np.inf  # row 1: all -inf, both heads
    scores[ip[5] + 17, 1] = np.nan  # hub row 5, head 1 only
    values = rng.standard_normal((g.num_src, H, F))
    want_out, want_lse = ca.attention_aggregate(g, scores, values, return_lse=True)
    got_out, got_lse = ca.attention_aggregate(g.to_gpu(), cupy.asarray(scores), cupy.asarray(values), return_lse=True)
    got_out, got_lse = cupy.asnumpy(got_out), cupy.asnumpy(got_lse)
    assert np.array_equal(np.isnan(got_out), np.isnan(want_out))
    assert np.isnan(got_out[5, 1]).all() and not np.isnan(got_out[5, 0]).any()
    assert (got_out[1] == 0).all() and np.isneginf(got_lse[1]).all()
    ok = ~np.isnan(want_out)
    np.testing.assert_allclose(got_out[ok], want_out[ok], rtol=1e-12, atol=1e-12)
    probs = cupy.asnumpy(ca.edge_softmax(g.to_gpu(), cupy.asarray(scores)))
    assert (probs[ip[1] : ip[2]] == 0).all()
    assert np.isnan(probs[ip[5] : ip[6], 1]).all() and not np.isnan(probs[ip[5] : ip[6], 0]).any()


# Rows without weight (all their scores -inf) in _graph's graph, as (rows, heads) index arrays:
# row 1 in every head, and the hub row 5 (split under the lowered plans) in head 1.
WEIGHTLESS = (np.array([1, 1, 1, 5]), np.array([0, 1, 2, 1]))


def _backwards_with_weightless_rows(rng, g, dtype):
    """{label: (backward op, positional arrays, keyword arrays)} of every backward on graph g
    (H = 3, D = F = 5, arrays of dtype) with the rows and heads of WEIGHTLESS without weight and
    inf in their grad_out (edge_softmax_backward: in the grad_probs of its zero probabilities).
    The fused ops' scores are -inf there through one element of a_dst, q or x_dst, -inf against
    a positive element of k (and of k + edge_feat) or att; out and lse are the CPU forward's."""
    ip, H, D = g.indptr, 3, 5
    scores = rng.standard_normal((g.num_edges, H)) * 2
    for row, head in zip(*WEIGHTLESS):
        scores[ip[row] : ip[row + 1], head] = -np.inf
    scores = scores.astype(dtype)
    probs = ca.edge_softmax(g, scores)
    grad_probs = rng.standard_normal(scores.shape).astype(dtype)
    grad_probs[probs == 0] = np.inf
    values = rng.standard_normal((g.num_src, H, D)).astype(dtype)
    grad_out = rng.standard_normal((g.num_dst, H, D)).astype(dtype)
    grad_out[WEIGHTLESS] = np.inf
    lse = ca.attention_aggregate(g, scores, values, return_lse=True)[1]
    calls = {
        "edge_softmax": ("edge_softmax_backward", (probs, grad_probs), {}),
        "attention_aggregate": ("attention_aggregate_backward", (scores, values, grad_out), {}),
        "attention_aggregate lse": ("attention_aggregate_backward", (scores, values, grad_out), {"lse": lse}),
    }
    fused = _fused_inputs(rng, g, H, D, D, dtype)
    fused["gat_attention"]["a_dst"][WEIGHTLESS] = -np.inf
    k = fused["graph_attention"]["k"]
    k[..., 0] = 1 + np.abs(k[..., 0])
    fused["graph_attention"]["q"][(*WEIGHTLESS, 0)] = -np.inf
    att = fused["gatv2_attention"]["att"]
    att[:, 0] = 0.5 + np.abs(att[:, 0])
    fused["gatv2_attention"]["x_dst"][(*WEIGHTLESS, 0)] = -np.inf
    edge_data = {
        "graph_attention": {"edge_feat": np.abs(rng.standard_normal((g.num_edges, H, D))).astype(dtype)},
        "gat_attention": {"edge_score": rng.standard_normal((g.num_edges, H)).astype(dtype)},
        "gatv2_attention": None,
    }
    for op, inputs in fused.items():
        for kwargs in ({}, edge_data[op]):
            if kwargs is None:
                continue
            out, lse = getattr(ca, op)(g, **inputs, **kwargs, return_lse=True)
            assert np.isneginf(lse[WEIGHTLESS]).all() and np.isfinite(lse[[2, 3, 6]]).all(), op
            grad_out = rng.standard_normal(out.shape).astype(dtype)
            grad_out[WEIGHTLESS] = np.inf
            calls[" ".join([op, *kwargs])] = (f"{op}_backward", (*inputs.values(), out, grad_out, lse), kwargs)
    return calls


@pytest.mark.parametrize("kernel_set", list(KERNEL_SETS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_weightless_rows_add_nothing_to_the_backwards(cupy, plan_limits, monkeypatch, kernel_set, dtype):
    """A row without weight (all its scores -inf) adds nothing to any backward, on every kernel
    set and plan, its split hub row included: with inf in its grad_out, and -inf in the a_dst,
    q or x_dst that made its scores, every gradient matches the CPU backend's, finite (its zero
    weights times those gave NaN)."""
    from cupy_csrattn.gpu import attention, replay

    stages, group_stages = KERNEL_SETS[kernel_set]
    monkeypatch.setattr(attention, "SPAN_STAGES", stages)
    monkeypatch.setattr(attention, "SPAN_GROUP_STAGES", group_stages)
    monkeypatch.setattr(replay, "ENABLED", False)
    rng = np.random.default_rng(12)
    g = _graph(rng, np.int32)
    gg = g.to_gpu()
    for label, (op, args, kwargs) in _backwards_with_weightless_rows(rng, g, dtype).items():
        wide = {name: x.astype(np.float64) for name, x in kwargs.items()}
        wants = getattr(ca, op)(g, *[x.astype(np.float64) for x in args], **wide)
        gots = getattr(ca, op)(gg, *[cupy.asarray(x) for x in args], **{n: cupy.asarray(x) for n, x in kwargs.items()})
        wants, gots = (wants, gots) if isinstance(wants, tuple) else ((wants,), (gots,))
        assert len(gots) == len(wants), label
        for got, want in zip(gots, wants):
            assert np.isfinite(want).all(), label
            _close(got, want, dtype)


@pytest.mark.parametrize(
    "run_rows,block_floor,single_floor,groups",
    [
        (0, False, None, None),
        (0, False, None, (1, 8)),
        (0, False, None, (2, 32)),
        (0, 0, None, None),
        (1, None, None, None),
        (4, None, None, None),
        (64, 0, None, None),
        (64, False, 0, None),
    ],
    ids=[
        "unstaged",
        "unstaged-groups-1",
        "unstaged-groups-2-32",
        "block-rows",
        "runs-1",
        "runs-4",
        "runs-64-block-rows",
        "runs-64-single-rows",
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("heads", [None, 1, 2, 3, 8, 16, 40], ids=str)
def test_softmax_strategies_match_cpu(
    cupy, plan_limits, monkeypatch, run_rows, block_floor, single_floor, groups, dtype, heads
):
    """The row-wise softmax kernels with runs of consecutive rows off (0) and forced to 1, 4
    and 64 rows per run, with one block per row for every whole row that fits a block's stage
    (block floor 0) or none (False), with every other whole row that fits a warp's stage
    staged alone (single-row floor 0), and the unstaged rows' lane groups of up to 8 elements
    per lane (the default; H = 16 gives groups of 32 lanes), 1 (rows of up to 32 elements)
    and 2 with 32 lanes each; H = 2 stages float16 as one pair of heads a row (one item per
    row); each mode (edge_softmax and its backward; the row lse and the
    in-place grad_scores of attention_aggregate_backward), on rows that are empty, all -inf,
    hold a NaN or a +inf, beside ordinary rows and a hub row. The all -inf row's grad_probs
    and grad_out are inf: it adds nothing to the backwards (its zero weights gave NaN)."""
    from cupy_csrattn.gpu import replay

    monkeypatch.setattr(plan, "RUN_ROWS", run_rows)
    monkeypatch.setattr(plan, "BLOCK_ROW_FLOOR", block_floor)
    if single_floor is not None:
        monkeypatch.setattr(plan, "SINGLE_ROW_FLOOR", single_floor)
    if groups is not None:
        monkeypatch.setattr(plan, "GROUP_LANE_ELEMENTS", groups[0])
        monkeypatch.setattr(plan, "GROUP_MIN_LANES", groups[1])
    monkeypatch.setattr(replay, "ENABLED", False)
    rng = np.random.default_rng(13)
    g = _graph(rng, np.int32, num_dst=150, hub=700)
    gg = g.to_gpu()
    ip = g.indptr
    edge_shape = (g.num_edges, *trailing_shape(heads))
    scores = (rng.standard_normal(edge_shape) * 3).astype(dtype)
    special = [r for r in range(150) if ip[r + 1] - ip[r] >= 2 and r != 5][:3]
    scores[ip[special[0]] : ip[special[0] + 1]] = -np.inf  # all -inf: zero weights, lse -inf
    scores[ip[special[1]] + 1] = np.nan  # NaN: its row is NaN
    scores[ip[special[2]]] = np.inf  # +inf: its row is NaN
    d = cupy.asarray
    want = ca.edge_softmax(g, scores)
    out = poison(cupy, edge_shape, dtype)
    ca.edge_softmax(gg, d(scores), out=out)
    got = cupy.asnumpy(out)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert (got[ip[special[0]] : ip[special[0] + 1]] == 0).all()
    ok = ~np.isnan(want)
    _close(got[ok], want[ok], dtype)

    # Arrays that start one and three edges into their buffers: runs whose 16-byte chunks
    # begin at other offsets, for the input and the output apart.
    scores_view = cupy.empty((g.num_edges + 1, *edge_shape[1:]), dtype)[1:]
    scores_view[...] = d(scores)
    out_view = poison(cupy, (g.num_edges + 3, *edge_shape[1:]), dtype)[3:]
    ca.edge_softmax(gg, scores_view, out=out_view)
    assert cupy.asnumpy(out_view).tobytes() == got.tobytes()
    # And one element into their buffers: 16-byte chunks whose 32-bit words do not line up
    # with the stage's (float16 with an even H stages these element by element).
    size = int(np.prod(edge_shape))
    scores_view = cupy.empty(size + 1, dtype)[1:].reshape(edge_shape)
    scores_view[...] = d(scores)
    out_view = poison(cupy, (size + 1,), dtype)[1:].reshape(edge_shape)
    ca.edge_softmax(gg, scores_view, out=out_view)
    assert cupy.asnumpy(out_view).tobytes() == got.tobytes()

    probs = np.nan_to_num(want).astype(dtype)
    grad_probs = rng.standard_normal(edge_shape).astype(dtype)
    grad_probs[ip[special[0]] : ip[special[0] + 1]] = np.inf  # on zero weights: adds nothing
    got = ca.edge_softmax_backward(gg, d(probs), d(grad_probs))
    _close(got, ca.edge_softmax_backward(g, probs, grad_probs), dtype)
    # The backward's two inputs and its output one element into their buffers.
    views = [cupy.empty(size + 1, dtype)[1:].reshape(edge_shape) for _ in range(3)]
    views[0][...], views[1][...] = d(probs), d(grad_probs)
    ca.edge_softmax_backward(gg, views[0], views[1], out=views[2])
    assert cupy.asnumpy(views[2]).tobytes() == cupy.asnumpy(got).tobytes()

    finite = np.nan_to_num(scores, nan=0.0, posinf=0.0, neginf=-np.inf).astype(dtype)
    values = rng.standard_normal((g.num_src, *trailing_shape(heads), 4)).astype(dtype)
    grad_out = rng.standard_normal((g.num_dst, *trailing_shape(heads), 4)).astype(dtype)
    grad_out[special[0]] = np.inf  # the all -inf row's: reaches no gradient
    wants = ca.attention_aggregate_backward(g, finite, values, grad_out)  # lse from the scores
    gots = ca.attention_aggregate_backward(gg, d(finite), d(values), d(grad_out))
    for got, want in zip(gots, wants):
        _close(got, want, dtype)


@pytest.fixture
def poisoned_allocations(cupy):
    """Every device allocation filled with 0xFF bytes (NaN in each float type) before use: an
    output element or scratch value that an op forgets to write reads as NaN."""
    pool = cupy.cuda.MemoryPool()

    def malloc(size):
        memory = pool.malloc(size)
        cupy.cuda.runtime.memsetAsync(memory.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return memory

    cupy.cuda.set_allocator(malloc)
    yield
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    pool.free_all_blocks()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_empty_rows_written_on_span_kernels(cupy, plan_limits, poisoned_allocations, dtype):
    """The head-span backward passes skip the fused plan's empty rows (destinations without
    edges; over the transpose, sources without edges), whose gradients attention_zero_empty
    writes: with every allocation NaN-poisoned, the fused ops forward and backward,
    attention_aggregate and spmm match the CPU backend."""
    rng = np.random.default_rng(13)
    base = _graph(rng, np.int32)
    g = ca.CSRGraph(base.indptr, base.indices % 28, base.num_src)  # sources 28.. have no edges
    assert (np.diff(g.indptr) == 0).any()
    _fused_ops_match_cpu(cupy, rng, g, 4, 16, dtype)


def test_bitwise_reproducible(cupy, plan_limits):
    rng = np.random.default_rng(11)
    g = _graph(rng, np.int32, hub=20000).to_gpu()
    H, F = 4, 16
    scores = cupy.asarray(rng.standard_normal((g.num_edges, H)).astype(np.float32))
    values = cupy.asarray(rng.standard_normal((g.num_src, H, F)).astype(np.float32))
    grad_out = cupy.asarray(rng.standard_normal((g.num_dst, H, F)).astype(np.float32))

    fused = {
        op: {name: cupy.asarray(x) for name, x in inputs.items()}
        for op, inputs in _fused_inputs(rng, g, H, F, F, np.float32).items()
    }

    def run():
        out, lse = ca.attention_aggregate(g, scores, values, return_lse=True)
        results = [
            out,
            lse,
            *ca.attention_aggregate_backward(g, scores, values, grad_out, lse=lse),
            ca.edge_softmax(g, scores),
        ]
        for op, inputs in fused.items():
            out, lse = getattr(ca, op)(g, **inputs, return_lse=True)
            results += [out, lse, *getattr(ca, op + "_backward")(g, *inputs.values(), out, grad_out, lse)]
        return [cupy.asnumpy(a) for a in results]

    first, second = run(), run()
    for a, b in zip(first, second):
        assert a.tobytes() == b.tobytes()


def test_no_launch_on_empty_graph(cupy):
    g = ca.CSRGraph(cupy.zeros(1, dtype=np.int32), cupy.zeros(0, dtype=np.int32), 0)
    out, lse = ca.attention_aggregate(g, cupy.zeros((0, 2)), cupy.zeros((0, 2, 3)), return_lse=True)
    assert out.shape == (0, 2, 3) and lse.shape == (0, 2)
    x, att = cupy.zeros((0, 2, 3)), cupy.ones((2, 3))
    out, lse = ca.gatv2_attention(g, x, x, att, return_lse=True)
    assert out.shape == (0, 2, 3) and lse.shape == (0, 2)
    grads = ca.gatv2_attention_backward(g, x, x, att, out, out, lse)
    assert [a.shape for a in grads] == [(0, 2, 3), (0, 2, 3), (2, 3)]
    assert (cupy.asnumpy(grads[2]) == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("heads", [None, 1, 3, 40, (2, 1, 3)], ids=str)
def test_softmax_by_source_matches_cpu(cupy, plan_limits, dtype, index_dtype, heads):
    """norm_by="src": the sources' rows of the transpose (about 100 edges each, split under the
    lowered plans), forward and backward, with special values in one source."""
    rng = np.random.default_rng(9)
    g = _graph(rng, index_dtype)
    gg = g.to_gpu()
    edge_shape = (g.num_edges, *trailing_shape(heads))
    scores = (rng.standard_normal(edge_shape) * 3).astype(dtype)
    source_edges = np.flatnonzero(g.indices == 2)
    scores[source_edges] = -np.inf  # source 2: every score -inf, zero weights
    scores[np.flatnonzero(g.indices == 4)[3]] = np.nan  # source 4: NaN
    grad_probs = rng.standard_normal(edge_shape).astype(dtype)
    want = ca.edge_softmax(g, scores, norm_by="src")
    out = poison(cupy, edge_shape, dtype)
    assert ca.edge_softmax(gg, cupy.asarray(scores), out=out, norm_by="src") is out
    got = cupy.asnumpy(out)
    assert (got[source_edges] == 0).all()
    nan = g.indices == 4
    assert np.isnan(got[nan]).all() and not np.isnan(got[~nan]).any()
    _close(got[~nan], want[~nan], dtype)
    probs = np.nan_to_num(want).astype(dtype)
    got = ca.edge_softmax_backward(gg, cupy.asarray(probs), cupy.asarray(grad_probs), norm_by="src")
    _close(got, ca.edge_softmax_backward(g, probs, grad_probs, norm_by="src"), dtype)


def test_edge_data_wider_than_the_head_span_kernels_is_refused(cupy):
    """Edge data runs on the head-span kernels only: a head of 600 elements (wider than they
    take) with edge_feat or edge_score is a ValueError naming the argument, before any launch."""
    rng = np.random.default_rng(8)
    g = _graph(rng, np.int32, hub=20).to_gpu()
    H, D = 2, 600
    q = cupy.asarray(rng.standard_normal((g.num_dst, H, D)).astype(np.float32))
    k = cupy.asarray(rng.standard_normal((g.num_src, H, D)).astype(np.float32))
    edge_feat = cupy.asarray(rng.standard_normal((g.num_edges, H, D)).astype(np.float32))
    with pytest.raises(ValueError, match="edge_feat"):
        ca.graph_attention(g, q, k, k, edge_feat=edge_feat)
    a = cupy.asarray(rng.standard_normal((g.num_dst, H)).astype(np.float32))
    edge_score = cupy.asarray(rng.standard_normal((g.num_edges, H)).astype(np.float32))
    with pytest.raises(ValueError, match="edge_score"):
        ca.gat_attention(g, a, a[: g.num_src], k, edge_score=edge_score)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
# (40, 4), (3, 8)-by-5 and (4, 300): heads the head-span kernels take in chunks, not at once.
@pytest.mark.parametrize(
    "heads,features",
    [(None, 3), (1, 64), (3, 5), (8, 16), (4, 64), ((2, 1), 16), (40, 4), ((3, 8), 5), (4, 300)],
    ids=str,
)
def test_fused_edge_data_match_cpu(cupy, plan_limits, dtype, index_dtype, heads, features):
    """graph_attention with edge_feat and gat_attention with edge_score, forward and backward
    (the edge gradients included), against the CPU backend, under every plan."""
    rng = np.random.default_rng(6)
    g = _graph(rng, index_dtype)
    gg = g.to_gpu()
    inputs = _fused_inputs(rng, g, heads, features, features, dtype)
    edge_data = {
        "graph_attention": ("edge_feat", rng.standard_normal((g.num_edges, *trailing_shape(heads), features))),
        "gat_attention": ("edge_score", rng.standard_normal((g.num_edges, *trailing_shape(heads))) * 2),
    }
    for op, (name, edge) in edge_data.items():
        forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
        arrays = {**inputs[op], name: edge.astype(dtype)}
        gpu_arrays = {key: cupy.asarray(x) for key, x in arrays.items()}
        want_out, want_lse = forward(g, **arrays, return_lse=True)
        got_out, got_lse = forward(gg, **gpu_arrays, return_lse=True)
        _close(got_out, want_out, dtype)
        finite = np.isfinite(want_lse)
        assert np.array_equal(np.isfinite(cupy.asnumpy(got_lse)), finite)
        _close(cupy.asnumpy(got_lse)[finite], want_lse[finite], dtype)
        grad_out = rng.standard_normal(want_out.shape).astype(dtype)
        positional = list(inputs[op])
        wide = {key: x.astype(np.float64) for key, x in arrays.items()}
        wants = backward(
            g,
            *[wide[k] for k in positional],
            want_out.astype(np.float64),
            grad_out.astype(np.float64),
            want_lse.astype(np.float64),
            **{name: wide[name]},
        )
        gots = backward(
            gg,
            *[gpu_arrays[k] for k in positional],
            cupy.asarray(want_out),
            cupy.asarray(grad_out),
            cupy.asarray(want_lse),
            **{name: gpu_arrays[name]},
        )
        assert len(gots) == len(wants) == 4
        for got, want in zip(gots, wants):
            assert got.shape == want.shape
            _close(got, want, dtype)
