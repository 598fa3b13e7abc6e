"""Timers of the fused attention ops: graph_attention, gat_attention, gatv2_attention and
their backward.

Each times the library's op, this library's unfused chain (sddmm -> edge_softmax -> spmm),
on the forward a plain composition, and PyG-style message passing (gather, softmax,
scatter-add; autograd for the backward) where PyG is importable: each record with the peak
device memory the call allocates beyond its inputs (and beyond ``out`` where it is passed
in). A backward case times forward + backward together (the backward needs the forward's
``out`` and ``lse``). Timers as in :mod:`cupy_csrattn.bench.primitives`. gatv2_attention has
no unfused chain or plain composition (none composes its scores): its cases record that as a
skip; beside PyG's core it is timed against PyG's GATv2Conv layer.

Besides the registry's byte model (the roofline), each record of these ops carries its
fraction of the gather floor (:func:`gather_floor_bytes`), and each backward record its
backward-only time estimate (:func:`backward_estimate`).
"""

import math

import numpy as np

from cupy_csrattn import _validate
from cupy_csrattn.bench import baselines
from cupy_csrattn.ops.registry import OPS

#: The ops whose records carry the gather floor: the fused ops and their backward (forward +
#: backward) cases.
FLOOR_OPS = tuple(
    name for op in ("graph_attention", "gat_attention", "gatv2_attention") for name in (op, op + "_backward")
)


def _node_elements(op, H, F):
    """(dst_in, src_in, param, out) of :func:`gather_floor_bytes`: the elements of a fused op's
    destination-side inputs per destination node, of its source-side inputs per source node, of
    its parameters, and of out per destination node; D = F, as in the bench's inputs."""
    D = F
    if op == "graph_attention":  # q; k and v
        return H * D, H * D + H * F, 0, H * F
    if op == "gat_attention":  # a_dst; a_src and values
        return H, H + H * F, 0, H * F
    if op == "gatv2_attention":  # x_dst; x_src (score input and message); att; out of width D
        return H * D, H * D, H * D, H * D
    raise ValueError(f"{op!r} has no gather floor; choose from {', '.join(FLOOR_OPS)}")


def gather_floor_bytes(graph, op, dtype, H, F, lse=False):
    """The bytes one call of a fused op (or a ``_backward`` case: forward + backward) must move
    when nothing gathered is reused: the no-reuse gather floor.

    With E edges, num_dst and num_src nodes, ``idx`` the index itemsize, ``isz`` the dtype's,
    ``lsz`` the lse dtype's (float32 for float16), and per op the elements of its arrays per
    node (D = F):

    ===============  =========================  ============================  ========  =====
    op               dst_in (per dst node)      src_in (per src node)         param     out
    ===============  =========================  ============================  ========  =====
    graph_attention  q: H*D                     k, v: H*D + H*F               0         H*F
    gat_attention    a_dst: H                   a_src, values: H + H*F        0         H*F
    gatv2_attention  x_dst: H*D                 x_src: H*D (score and value)  att: H*D  H*D
    ===============  =========================  ============================  ========  =====

    forward  = E * (idx + src_in * isz)                    each edge: its index, its source's rows
             + num_dst * (dst_in + out) * isz              destination inputs read, out written once
             + param * isz
             (+ num_dst * H * lsz                          lse written, when ``lse``)
    backward = E * (2 * idx + (src_in + dst_in + out) * isz)
                  a pass over rows gathers the source's rows (k and v; a_src and values; x_src),
                  one over the transpose the destination's (q and grad_out; a_dst and grad_out;
                  x_dst and grad_out), each pass reading the edge's index
             + num_dst * (2 * dst_in + 2 * out) * isz + num_dst * H * lsz
                  destination inputs, out, grad_out and lse read once, their gradient written once
             + num_src * 2 * src_in * isz                  source inputs read once, gradients written once
             + 2 * param * isz                             att read, grad_att written

    A ``_backward`` case (forward + backward, the forward writing lse) is
    ``forward(lse=True) + backward``. The transposed pass's per-edge reads of lse[dst] and
    row_dot[dst] (H each) are left out, as are indptr, the plan and the transpose's permutation.
    On a square graph the forward (without lse) is the registry's byte model
    (:mod:`cupy_csrattn.ops.traffic`); the backward is less than that model, which counts a
    gather per edge for each of the kernels' passes.

    Parameters
    ----------
    graph : CSRGraph
    op : str
        One of :data:`FLOOR_OPS`.
    dtype : numpy dtype
    H, F : int
        Heads and features (D = F).
    lse : bool
        A forward op only: count the lse written (the bench's forward cases do not ask for it).

    Returns
    -------
    int
    """
    backward = op.endswith("_backward")
    dst_in, src_in, param, out = _node_elements(op.removesuffix("_backward"), H, F)
    E, num_dst, num_src = graph.num_edges, graph.num_dst, graph.num_src
    idx, isz = graph.indices.itemsize, np.dtype(dtype).itemsize
    lse_bytes = num_dst * H * _validate.result_dtypes(np.empty(0, dtype))[1].itemsize
    forward = E * (idx + src_in * isz) + num_dst * (dst_in + out) * isz + param * isz
    if not backward:
        return forward + (lse_bytes if lse else 0)
    gathers = E * (2 * idx + (src_in + dst_in + out) * isz)
    nodes = num_dst * (2 * dst_in + 2 * out) * isz + lse_bytes + num_src * 2 * src_in * isz + 2 * param * isz
    return forward + lse_bytes + gathers + nodes


def backward_estimate(entry, records):
    """For a ``_backward`` record (forward + backward timed together), the backward alone:
    {"forward_ms", "backward_ms", "backward_over_forward"}, its time less that of the forward
    record of the same graph, op, dtype, H, F and method among ``records`` (the same run); {}
    where there is none. An estimate: the forward case passes ``out=`` and asks for no lse."""
    forward_op = OPS[entry["op"]].forward
    if forward_op is None:
        return {}
    same = ("graph", "dtype", "H", "F", "method")
    for record in records:
        if record["op"] == forward_op and all(record[key] == entry[key] for key in same):
            backward_ms = entry["ms"] - record["ms"]
            ratio = backward_ms / record["ms"] if record["ms"] > 0 else math.inf
            return dict(forward_ms=record["ms"], backward_ms=backward_ms, backward_over_forward=ratio)
    return {}


def _input_sets(bench, op, dtype, H, F):
    N, num_src = bench.graph.num_dst, bench.graph.num_src
    if op == "graph_attention":  # q, k, v with D = F
        shapes = ((N, H, F), (num_src, H, F), (num_src, H, F))
    elif op == "gatv2_attention":  # x_dst, x_src, att with D = F
        shapes = ((N, H, F), (num_src, H, F), (H, F))
    else:  # a_dst, a_src, values
        shapes = ((N, H), (num_src, H), (num_src, H, F))
    return [tuple(bench.rand(shape, dtype) for shape in shapes) for _ in range(bench.sets)]


def _pyg_fits(bench, case, method):
    """Whether PyG's (E, H, F) tensors may fit in the device's memory; where they cannot, a
    skip entry for ``method``."""
    device_bytes = bench.device.memory_bytes()
    message_bytes = baselines.pyg_message_bytes(bench.graph, case.H, case.F, case.dtype)
    if baselines.PYG_MESSAGE_COPIES * message_bytes <= device_bytes:
        return True
    bench.skip(
        case,
        method,
        f"{baselines.PYG_MESSAGE_COPIES} of its (E, H, F) tensors ({message_bytes / 2**30:.0f} GiB each) "
        f"would not fit in {device_bytes / 2**30:.0f} GiB",
    )
    return False


def _pyg(bench, case, op, data, grad_out=None):
    """The PyG-style forward (grad_out None) or forward + autograd backward, as a baseline
    function of a set of torch tensors, with those sets; (None, None) and a skip entry when
    its message tensor would not fit."""
    if not _pyg_fits(bench, case, "pyg"):
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


def _pyg_gatv2_layer(bench, case, data, grad_out=None):
    """PyG's GATv2Conv layer (forward, or forward + autograd backward to its input and
    weights) on input sets of H * F features per node; (None, None) where its (E, H, F)
    tensors would not fit, as for the core."""
    if not _pyg_fits(bench, case, "pyg-gatv2conv"):
        return None, None
    torch, H, F = bench.torch, case.H, case.F
    layer, forward = baselines.pyg_gatv2_layer(bench.pyg, bench.graph, bench.rows, H, F, case.dtype)
    sizes = bench.graph.num_src, bench.graph.num_dst
    tdata = [
        tuple(
            torch.as_tensor(bench.rand((n, H * F), case.dtype), device="cuda").requires_grad_(grad_out is not None)
            for n in sizes
        )
        for _ in data
    ]
    if grad_out is None:
        return forward, tdata
    t_grad = torch.as_tensor(grad_out, device="cuda").reshape(bench.graph.num_dst, H * F)
    weights = list(layer.parameters())

    def forward_backward(x):
        return torch.autograd.grad(forward(x), [*x, *weights], t_grad)

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
        if op == "gatv2_attention":
            fn, tdata = _pyg_gatv2_layer(bench, case, data)
            if fn is not None:
                bench.baseline(case, "pyg-gatv2conv", fn, tdata, nbytes, memory=True)


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
        if forward_op == "gatv2_attention":
            fn, tdata = _pyg_gatv2_layer(bench, case, data, grad_out)
            if fn is not None:
                bench.baseline(case, "pyg-gatv2conv", fn, tdata, nbytes, memory=True)
