"""sddmm ("dot" and "add") against the per-row loop reference."""

import numpy as np
import pytest
from helpers import poison

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASE_BY_NAME, check_case
from cupy_csrattn.testing.compare import check_result
from cupy_csrattn.testing.graphs import hub, named_graph


@pytest.mark.parametrize("D", [1, 3, 32, 64, 67])
def test_dot_widths(xp, D):
    check_case(xp, CASE_BY_NAME["sddmm_dot"], named_graph("warp_boundaries"), 2, D, np.float32, seed=D)


@pytest.mark.parametrize("scale", [1.0, -2.5, 0.0, 1e-3])
def test_dot_scale(xp, scale):
    graph = named_graph("odd_sizes")
    rng = np.random.default_rng(3)
    dst = rng.standard_normal((len(graph.indptr) - 1, 6))
    src = rng.standard_normal((graph.num_src, 6))
    got = ca.sddmm(make_graph(xp, graph), to_xp(xp, dst), to_xp(xp, src), op="dot", scale=scale)
    check_result(xp, got, ref.sddmm(graph.indptr, graph.indices, dst, src, "dot", scale), np.float64)


@pytest.mark.parametrize("case", [CASE_BY_NAME["sddmm_dot"], CASE_BY_NAME["sddmm_add"]], ids=str)
def test_hub_row(xp, case):
    check_case(xp, case, hub(), None, 4, np.float32, seed=2)


@pytest.mark.parametrize("op", ["dot", "add"])
@pytest.mark.parametrize("H", [None, 3])
def test_out_poisoned(xp, op, H):
    graph = named_graph("duplicates")
    rng = np.random.default_rng(4)
    head = () if H is None else (H,)
    feat = (5,) if op == "dot" else ()
    dst = rng.standard_normal((len(graph.indptr) - 1,) + head + feat).astype(np.float32)
    src = rng.standard_normal((graph.num_src,) + head + feat).astype(np.float32)
    out = poison(xp, (len(graph.indices),) + head, np.float32)
    got = ca.sddmm(make_graph(xp, graph), to_xp(xp, dst), to_xp(xp, src), op=op, out=out)
    assert got is out
    check_result(xp, out, ref.sddmm(graph.indptr, graph.indices, dst, src, op), np.float32)


def test_dot_backward_float16_scaled_within_the_sum(xp):
    """float16 sums above its largest value (65504) whose scaled result fits: the scale applies
    before the result is rounded to float16, so the gradients are finite and the reference's."""
    graph = hub()
    rng = np.random.default_rng(6)
    N, E = len(graph.indptr) - 1, len(graph.indices)
    dst = rng.uniform(200, 250, (N, 2, 4)).astype(np.float16)
    src = rng.uniform(200, 250, (graph.num_src, 2, 4)).astype(np.float16)
    grad_scores = rng.uniform(200, 250, (E, 2)).astype(np.float16)
    scale = 2.0**-20
    got = ca.sddmm_backward(
        make_graph(xp, graph), to_xp(xp, dst), to_xp(xp, src), to_xp(xp, grad_scores), op="dot", scale=scale
    )
    expected = ref.sddmm_backward(graph.indptr, graph.indices, dst, src, grad_scores, "dot", scale)
    for result, want in zip(got, expected):
        assert np.abs(want).max() / scale > 65504 and np.abs(want).max() < 65504
        check_result(xp, result, want, np.float16)
