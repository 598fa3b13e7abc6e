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
