"""Timers of the fused attention ops: graph_attention, gat_attention, gatv2_attention and
their backward.

Each times the library's op, this library's unfused chain (sddmm -> edge_softmax -> spmm),
on the forward a plain composition, and PyG-style message passing (gather, softmax,
scatter-add; autograd for the backward) where PyG is importable: each record with the peak
device memory the call allocates beyond its inputs (and beyond ``out`` where it is passed
in). A backward case times forward + backward together (the backward needs the forward's
``out`` and ``lse``). Timers as in :mod:`cupy_csrattn.bench.primitives`. gatv2_attention is
timed without baselines so far (none of them composes its scores yet): its cases record
that as a skip.
"""

import numpy as np

from cupy_csrattn.bench import baselines
from cupy_csrattn.ops.registry import OPS


def _input_sets(bench, op, dtype, H, F):
    N, num_src = bench.graph.num_dst, bench.graph.num_src
    if op == "graph_attention":  # q, k, v with D = F
        shapes = ((N, H, F), (num_src, H, F), (num_src, H, F))
    elif op == "gatv2_attention":  # x_dst, x_src, att with D = F
        shapes = ((N, H, F), (num_src, H, F), (H, F))
    else:  # a_dst, a_src, values
        shapes = ((N, H), (num_src, H), (num_src, H, F))
    return [tuple(bench.rand(shape, dtype) for shape in shapes) for _ in range(bench.sets)]


def _pyg(bench, case, op, data, grad_out=None):
    """The PyG-style forward (grad_out None) or forward + autograd backward, as a baseline
    function of a set of torch tensors, with those sets; (None, None) and a skip entry when
    its message tensor would not fit."""
    message_bytes = baselines.pyg_message_bytes(bench.graph, case.H, case.F, case.dtype)
    if message_bytes > baselines.PYG_MESSAGE_LIMIT:
        bench.skip(case, "pyg", f"its (E, H, F) message tensor would take {message_bytes / 2**30:.0f} GiB")
        return None, None
    torch = bench.torch
    forward = baselines.pyg_attention(bench.pyg, bench.graph, bench.rows, op)
    if grad_out is None:
        return forward, [tuple(torch.as_tensor(a, device="cuda") for a in inputs) for inputs in data]
    t_grad = torch.as_tensor(grad_out, device="cuda")

    def forward_backward(x):
        return torch.autograd.grad(forward(x), x, t_grad)

    tdata = [tuple(torch.as_tensor(a, device="cuda").clone().requires_grad_() for a in inputs) for inputs in data]
    return forward_backward, tdata


def _composes(bench, case, op):
    """True when this library's unfused chain and a plain composition can compute the op;
    for gatv2 (whose scores need the (E, H, D) leaky_relu(x_dst + x_src)) a skip is recorded."""
    if op != "gatv2_attention":
        return True
    bench.skip(case, "csrattn-unfused", "no composition of this library's ops computes GATv2's scores")
    return False


def forward(bench, case, nbytes):
    """graph_attention, gat_attention or gatv2_attention (``case.op``)."""
    op, dtype, H, F = case.op, np.dtype(case.dtype), case.H, case.F
    graph, rows = bench.graph, bench.rows
    data = _input_sets(bench, op, dtype, H, F)
    out = bench.xp.empty((graph.num_dst, H, F), dtype)
    fused = OPS[op].function
    bench.library(case, lambda x: fused(graph, *x, out=out), data, nbytes, host_call=True, memory=True)
    if not case.baselines:
        return
    if _composes(bench, case, op):
        bench.baseline(
            case,
            "csrattn-unfused",
            lambda x: baselines.unfused_forward(graph, op, x, out=out),
            data,
            nbytes,
            memory=True,
        )
        bench.baseline(
            case,
            "cupy+cusparse" if bench.device.kind == "gpu" else "numpy+scipy",
            lambda x: baselines.composed_aggregate(graph, rows, baselines.composed_scores(graph, rows, op, x), x[2]),
            data,
            nbytes,
            memory=True,
        )
    if bench.torch is not None:
        fn, tdata = _pyg(bench, case, op, data)
        if fn is not None:
            bench.baseline(case, "pyg", fn, tdata, nbytes, memory=True)


def forward_backward(bench, case, nbytes):
    """The backward of a fused op (``case.op``), after its forward."""
    forward_op, dtype, H, F = OPS[case.op].forward, np.dtype(case.dtype), case.H, case.F
    graph = bench.graph
    data = _input_sets(bench, forward_op, dtype, H, F)
    grad_out = bench.rand((graph.num_dst, H, F), dtype)
    forward_fn, backward_fn = OPS[forward_op].function, OPS[case.op].function

    def fused(x):
        out, lse = forward_fn(graph, *x, return_lse=True)
        return backward_fn(graph, *x, out, grad_out, lse)

    bench.library(case, fused, data, nbytes, memory=True)
    if not case.baselines:
        return
    if _composes(bench, case, forward_op):
        bench.baseline(
            case,
            "csrattn-unfused",
            lambda x: baselines.unfused_forward_backward(graph, forward_op, x, grad_out),
            data,
            nbytes,
            memory=True,
        )
    if bench.torch is not None:
        fn, tdata = _pyg(bench, case, forward_op, data, grad_out)
        if fn is not None:
            bench.baseline(case, "pyg", fn, tdata, nbytes, memory=True)
