"""Timers of the primitive ops: edge_softmax, spmm, attention_aggregate and sddmm, each with
its backward.

A timer ``timer(bench, case, nbytes)`` makes the inputs of ``case`` on ``bench`` (a
:class:`cupy_csrattn.bench.runner.GraphBench`), times the library's op, then, when
``case.baselines``, each baseline that applies on the bench's device.
"""

import math

import numpy as np

import cupy_csrattn as ca
from cupy_csrattn.bench import baselines


def _shape(case):
    return np.dtype(case.dtype), case.H, case.F


def _score_value_sets(bench, dtype, H, F):
    E, num_src = bench.graph.num_edges, bench.graph.num_src
    return [(bench.rand((E, H), dtype), bench.rand((num_src, H, F), dtype)) for _ in range(bench.sets)]


def edge_softmax(bench, case, nbytes):
    dtype, H, _ = _shape(case)
    graph, rows, E, N = bench.graph, bench.rows, bench.graph.num_edges, bench.graph.num_dst
    data = [bench.rand((E, H), dtype) for _ in range(bench.sets)]
    out = bench.xp.empty((E, H), dtype)
    bench.library(case, lambda s: ca.edge_softmax(graph, s, out=out), data, nbytes, host_call=True)
    if not case.baselines:
        return
    bench.simple_baseline(case, lambda kernels, s: kernels.softmax(s), data, nbytes)
    if bench.device.kind == "gpu":
        bench.baseline(case, "cupy", lambda s: baselines.cupy_softmax(rows, N, s), data, nbytes)
        if bench.torch is not None:
            torch, pyg_utils = bench.pyg
            ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
            tdata = [torch.as_tensor(s, device="cuda") for s in data]
            bench.baseline(case, "pyg", lambda s: pyg_utils.softmax(s, ptr=ptr, dim=0), tdata, nbytes)
    else:
        bench.baseline(case, "numpy", lambda s: baselines.numpy_softmax(graph, rows, s), data, nbytes)


def edge_softmax_backward(bench, case, nbytes):
    dtype, H, _ = _shape(case)
    graph, rows, E, N = bench.graph, bench.rows, bench.graph.num_edges, bench.graph.num_dst
    data = [bench.rand((E, H), dtype) for _ in range(bench.sets)]
    grads = [bench.rand((E, H), dtype) for _ in range(bench.sets)]
    pairs = list(zip(data, grads, strict=True))
    out = bench.xp.empty((E, H), dtype)
    bench.library(case, lambda pg: ca.edge_softmax_backward(graph, pg[0], pg[1], out=out), pairs, nbytes)
    if not case.baselines:
        return
    if bench.device.kind == "gpu":
        bench.baseline(case, "cupy", lambda pg: baselines.cupy_softmax_backward(rows, N, pg[0], pg[1]), pairs, nbytes)
    else:
        bench.baseline(
            case, "numpy", lambda pg: baselines.numpy_softmax_backward(graph, rows, pg[0], pg[1]), pairs, nbytes
        )


def attention_aggregate(bench, case, nbytes):
    dtype, H, F = _shape(case)
    graph, rows, N = bench.graph, bench.rows, bench.graph.num_dst
    data = _score_value_sets(bench, dtype, H, F)
    out = bench.xp.empty((N, H, F), dtype)
    bench.library(case, lambda sv: ca.attention_aggregate(graph, sv[0], sv[1], out=out), data, nbytes, host_call=True)
    if not case.baselines:
        return
    bench.simple_baseline(case, lambda kernels, sv: kernels.aggregate(*sv), data, nbytes)
    if bench.device.kind == "gpu":
        bench.baseline(
            case, "cupy+cusparse", lambda sv: baselines.cupy_aggregate(graph, rows, sv[0], sv[1]), data, nbytes
        )
        if bench.torch is not None:
            torch = bench.torch
            tdata = [(torch.as_tensor(s, device="cuda"), torch.as_tensor(v, device="cuda")) for s, v in data]
            bench.baseline(case, "pyg", baselines.pyg_aggregate(bench.pyg, graph, rows, H, F), tdata, nbytes)
    else:
        bench.baseline(
            case, "numpy+scipy", lambda sv: baselines.numpy_scipy_aggregate(graph, rows, sv[0], sv[1]), data, nbytes
        )


def attention_aggregate_backward(bench, case, nbytes):
    """The library's op only (no baseline composes this backward)."""
    dtype, H, F = _shape(case)
    graph, N = bench.graph, bench.graph.num_dst
    data = _score_value_sets(bench, dtype, H, F)
    lse = ca.attention_aggregate(graph, data[0][0], data[0][1], return_lse=True)[1]
    grad_out = bench.rand((N, H, F), dtype)
    bench.library(
        case, lambda sv: ca.attention_aggregate_backward(graph, sv[0], sv[1], grad_out, lse=lse), data, nbytes
    )


def spmm(bench, case, nbytes):
    dtype, H, F = _shape(case)
    graph, xp, N = bench.graph, bench.xp, bench.graph.num_dst
    data = _score_value_sets(bench, dtype, H, F)
    out = xp.empty((N, H, F), dtype)
    bench.library(case, lambda sv: ca.spmm(graph, sv[0], sv[1], out=out), data, nbytes)
    if not case.baselines:
        return
    bench.simple_baseline(case, lambda kernels, sv: kernels.spmm(*sv), data, nbytes)
    if bench.device.kind == "gpu":
        if H == 1:  # cuSPARSE takes one head
            flat = [(xp.ascontiguousarray(s[:, 0]), xp.ascontiguousarray(v[:, 0])) for s, v in data]
            bench.baseline(case, "cusparse", lambda sv: baselines.cusparse_spmm(graph, *sv), flat, nbytes)
    else:
        bench.baseline(case, "scipy", lambda sv: baselines.scipy_spmm(graph, sv[0], sv[1]), data, nbytes)


def spmm_backward(bench, case, nbytes):
    """The library's op only."""
    dtype, H, F = _shape(case)
    graph, N = bench.graph, bench.graph.num_dst
    data = _score_value_sets(bench, dtype, H, F)
    grad_out = bench.rand((N, H, F), dtype)
    bench.library(case, lambda sv: ca.spmm_backward(graph, sv[0], sv[1], grad_out), data, nbytes)


def sddmm(bench, case, nbytes):
    """op="dot", against gathering both ends and reducing."""
    dtype, H, F = _shape(case)
    graph, rows = bench.graph, bench.rows
    E, N, num_src = graph.num_edges, graph.num_dst, graph.num_src
    data = [(bench.rand((N, H, F), dtype), bench.rand((num_src, H, F), dtype)) for _ in range(bench.sets)]
    out = bench.xp.empty((E, H), dtype)
    bench.library(case, lambda qk: ca.sddmm(graph, qk[0], qk[1], op="dot", out=out), data, nbytes)
    if not case.baselines:
        return
    bench.baseline(
        case, bench.composed_name(), lambda qk: baselines.composed_edge_dot(graph, rows, qk[0], qk[1]), data, nbytes
    )


def sddmm_backward(bench, case, nbytes):
    """op="dot" with scale 1/sqrt(F), against scipy products on the CPU (the graph's matrix and
    its transpose, one per head) and a plain CuPy gather, multiply and scatter-add on the GPU."""
    dtype, H, F = _shape(case)
    graph, rows, scale = bench.graph, bench.rows, 1.0 / math.sqrt(F)
    E, N, num_src = graph.num_edges, graph.num_dst, graph.num_src
    data = [
        (bench.rand((N, H, F), dtype), bench.rand((num_src, H, F), dtype), bench.rand((E, H), dtype))
        for _ in range(bench.sets)
    ]
    bench.library(case, lambda x: ca.sddmm_backward(graph, *x, op="dot", scale=scale), data, nbytes)
    if not case.baselines:
        return
    if bench.device.kind == "gpu":
        bench.baseline(case, "cupy", lambda x: baselines.cupy_edge_dot_backward(graph, rows, *x, scale), data, nbytes)
    else:
        bench.baseline(case, "scipy", lambda x: baselines.scipy_edge_dot_backward(graph, *x, scale), data, nbytes)
