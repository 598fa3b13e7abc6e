"""edge_softmax against the per-row loop reference."""

import numpy as np
import pytest
from helpers import poison, require_cupy

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import check_result, to_np
from cupy_csrattn.testing.graphs import from_rows, hub, named_graph


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_out_of_range_scores_on_long_rows(xp, dtype):
    """Scores whose unshifted exps overflow or vanish, on rows longer than the exactly sized
    row bins of the CPU's row maximum (16 edges) and a hub row: a row with one huge score,
    one holding -inf, one all -inf, one of only far-negative scores, against the reference.
    The row bins' padding slots (rows of 23 and 600 edges) must not count in a row's maximum."""
    rows = [[0] * 17, [1] * 40, [2] * 23, [0, 1] * 9, [], [3] * 600, [1] * 5]
    graph = from_rows(rows, 4)
    rng = np.random.default_rng(7)
    scores = rng.standard_normal((len(graph.indices), 2))
    starts = graph.indptr
    scores[0, 0] = 1000.0  # exp overflows: its row is one-hot in head 0 (edge 0: see the row bins' padding)
    scores[starts[1] : starts[1] + 25, 1] = -np.inf
    scores[starts[2] : starts[3], :] = -np.inf  # zero weights, lse -inf
    scores[starts[3] : starts[4], :] -= 800.0  # every exp underflows
    scores = scores.astype(dtype)
    g = make_graph(xp, graph)
    expected, expected_lse = ref.edge_softmax(graph.indptr, scores)
    check_result(xp, ca.edge_softmax(g, to_xp(xp, scores)), expected, dtype, equal_nan=True)
    values = rng.standard_normal((4, 2, 3)).astype(dtype)
    out, lse = ca.attention_aggregate(g, to_xp(xp, scores), to_xp(xp, values), return_lse=True)
    check_result(xp, lse, expected_lse, dtype)
    check_result(xp, out, ref.attention_aggregate(graph.indptr, graph.indices, scores, values)[0], dtype)


@pytest.mark.parametrize("other", [-np.inf, 1e4, np.nan])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_cpu_row_does_not_depend_on_the_other_rows(dtype, other):
    """A row's weights and lse on the CPU are the same beside a row of all -inf, an overflowing
    or a NaN score as alone: every row of a graph was shifted by its maximum as soon as one
    row needed it, so that a row's rounding depended on the others' scores (and a
    partitioned graph's rows differed from the whole graph's)."""
    row = np.random.default_rng(8).standard_normal((40, 2)).astype(dtype)
    scores = np.concatenate([np.full((5, 2), other, dtype), row])
    values = np.ones((2, 2, 1), dtype)
    _, lse = ca.attention_aggregate(from_rows([[0] * 5, [1] * 40], 2), scores, values, return_lse=True)
    _, alone = ca.attention_aggregate(from_rows([[1] * 40], 2), row, values, return_lse=True)
    assert np.array_equal(lse[1], alone[0])
    probs = ca.edge_softmax(from_rows([[0] * 5, [1] * 40], 2), scores)
    assert np.array_equal(probs[5:], ca.edge_softmax(from_rows([[1] * 40], 2), row))


@pytest.mark.parametrize("dtype, low", [(np.float32, -87.0), (np.float64, -708.0)])
def test_small_probabilities_are_accurate_to_their_own_size(xp, dtype, low):
    """Scores near the bottom of exp's range: the smallest weights' exps are subnormal
    unshifted, so each weight must still be right relative to itself, not only to the row's
    largest (which the usual tolerance scales by)."""
    graph = from_rows([[0, 1, 2, 3], [1] * 20], 4)
    offsets = np.array([0.0, -8.0, -13.0, -16.0] + [-0.75 * j for j in range(20)])
    scores = np.stack([low + offsets, low + offsets + 0.5], axis=1).astype(dtype)
    got = to_np(ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores)))
    expected = ref.edge_softmax(graph.indptr, scores)[0]
    assert (expected > 0).all()
    np.testing.assert_allclose(got, expected, rtol=8 * np.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize(
    "dtype, top, gaps", [(np.float32, -43.0, (45, 57, 67, 80)), (np.float64, -350.0, (400, 500, 700))]
)
def test_weights_whose_unshifted_exps_underflow(dtype, top, gaps):
    """A row whose maximum is well below 0 (its unshifted sum of exps still far above the
    smallest normal number) and whose other scores lie below exp's normal range: the weights
    exp(s - max) / sum are normal numbers, so they must be right relative to themselves. The
    CPU backend tries the scores unshifted first (the GPU kernels always subtract the row
    maximum): their exps were subnormal or 0, and a weight of 8e-30 came out as 0 in float32."""
    xp = np
    graph = from_rows([[0] * (1 + len(gaps)), [1, 2]], 3)
    row = np.array([top] + [top - gap for gap in gaps])
    scores = np.stack([row, row + 1.0], axis=1)
    scores = np.concatenate([scores, np.zeros((2, 2))]).astype(dtype)
    expected = ref.edge_softmax(graph.indptr, scores)[0]
    assert (expected >= np.finfo(dtype).tiny).all()  # each weight is a normal number
    got = to_np(ca.edge_softmax(make_graph(xp, graph), to_xp(xp, scores)))
    np.testing.assert_allclose(got, expected, rtol=8 * np.finfo(dtype).eps, atol=0)


def test_cpu_plans_for_several_head_counts_share_their_unit_arrays():
    """The CPU's row-block plans (one per block size, so per range of head counts) take views
    of one graph-wide 0, 1, 2, ... and ones: on a row of 2**19 edges, seven plans held seven
    copies of each (36 MB retained against 9 MB after the first; now under twice that)."""
    import tracemalloc

    E = 1 << 19
    g = ca.CSRGraph(np.array([0, E]), np.zeros(E, np.int32), 1)
    tracemalloc.start()
    try:
        ca.edge_softmax(g, np.full((E, 1), 1e3, np.float32))  # out of range: the shifted path's row blocks
        first = tracemalloc.get_traced_memory()[0]
        for heads in (2, 4, 8, 16, 32, 64):
            ca.edge_softmax(g, np.full((E, heads), 1e3, np.float32))
        retained = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert retained < 2 * first, (first, retained)


def test_rows_of_hundreds_of_millions_of_heads():
    """A row of 8 edges and 3 * 2**27 heads in float16 (3.2e9 elements): the positions k * H
    of the softmax's edges held in registers pass 2**31 from its fourth edge, so rows whose
    edges lie that far apart take its 64-bit loop. GPU only; needs 13 GB of free GPU memory."""
    cupy = require_cupy()
    heads = 3 * 2**27
    if cupy.cuda.runtime.memGetInfo()[0] < 2 * 8 * heads * 2 + 2**30:
        pytest.skip("needs 13 GB of free GPU memory")
    graph = ca.CSRGraph(cupy.array([0, 8]), cupy.arange(8, dtype=cupy.int32), num_src=8)
    scores = cupy.zeros((8, heads), cupy.float16)
    out = poison(cupy, scores.shape, cupy.float16)
    ca.edge_softmax(graph, scores, out=out)
    assert float(out.min()) == float(out.max()) == 0.125  # NaN (a position not written) fails both
