"""cupy_csrattn with PyTorch and JAX: zero-copy tensors in and out, an autograd.Function,
and CUDA streams.

cupy_csrattn works on NumPy and CuPy arrays. Tensors of other libraries cross over
without a copy:

- CPU: ``tensor.numpy()`` / ``torch.from_numpy(array)`` (PyTorch), ``np.from_dlpack(x)`` /
  ``jnp.from_dlpack(array)`` (JAX) share the memory;
- GPU: ``cupy.from_dlpack(x)`` (DLPack) or ``cupy.asarray(x)`` (through
  ``__cuda_array_interface__``) and back with ``torch.from_dlpack(array)`` /
  ``jnp.from_dlpack(array)``.

Sections, each skipped with the reason when what it needs is missing:

1. PyTorch CPU tensors through the CPU backend, zero-copy both ways.          needs torch
2. ``AttentionAggregate``, a torch.autograd.Function around attention_aggregate (the
   forward saves the log-sum-exp, the backward calls attention_aggregate_backward),
   checked with torch.autograd.gradcheck in float64, on the CPU and on the GPU. needs torch
3. JAX arrays in and out through DLPack (CPU, and GPU when JAX sees one).     needs jax
4. PyTorch CUDA tensors through the GPU kernels: DLPack and __cuda_array_interface__,
   ops on a non-default CuPy stream and on PyTorch's stream.       needs cupy + a GPU + torch
5. PyG's GATv2Conv layer (share_weights=False, no self loops, no bias) computed with
   gatv2_attention from its own weights: outputs and the gradients of the layer's input and
   attention vector, in float64, on the CPU backend.             needs torch + torch_geometric
6. PyG's TransformerConv with edge features (edge_dim; no root weight) computed with
   graph_attention(edge_feat=...), and 7. its GATConv with edge features (edge_dim; no self
   loops, no bias) with gat_attention(edge_score=...), from the layers' own weights, the graph
   a scipy COO matrix that keeps PyG's edge order: outputs and the gradients of the node
   features and of edge_attr, in float64, on the CPU backend.    needs torch + torch_geometric

    python3 examples/interop.py

Exits 0 when every section that ran passed (skipped sections do not fail), 1 otherwise.
"""

import contextlib
import sys

import numpy as np
import scipy.sparse

import cupy_csrattn as ca
from cupy_csrattn.backend import cupy, gpu_available  # cupy: None without CuPy

try:
    import torch
except ImportError:
    torch = None

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    jax = jnp = None

try:
    from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv
except ImportError:  # also without torch
    GATConv = GATv2Conv = TransformerConv = None

HAVE_GPU = gpu_available()  # CuPy and a usable CUDA device (the library's one GPU probe)


FAILURES = []


def check(condition, what):
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILURES.append(what)


def skip(reason):
    print(f"  skipped: {reason}")


def small_graph():
    """6 destination rows over 7 sources; row 2 has no edges, row 4 repeats a source."""
    indptr = np.array([0, 2, 5, 5, 6, 9, 10])
    indices = np.array([0, 3, 1, 2, 6, 4, 5, 5, 0, 2])
    return ca.CSRGraph(indptr, indices, num_src=7)


# ---------------------------------------------------------------------------------------
# Converting between torch tensors and the arrays cupy_csrattn takes


def to_array(tensor):
    """A NumPy (CPU tensor) or CuPy (CUDA tensor) view of a torch tensor, without a copy."""
    tensor = tensor.detach()
    if tensor.is_cuda:
        return cupy.from_dlpack(tensor)
    return tensor.numpy()


def to_tensor(array):
    """A torch tensor viewing a NumPy or CuPy array, without a copy."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    return torch.from_dlpack(array)


def torch_stream():
    """CuPy's view of PyTorch's current CUDA stream, so that the library's kernels are
    ordered after PyTorch's work on the inputs and before its work on the outputs."""
    stream = torch.cuda.current_stream()
    if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy >= 14: the CUDA stream protocol
        return cupy.cuda.Stream.from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream)


# ---------------------------------------------------------------------------------------
# 1. PyTorch CPU tensors


def torch_cpu():
    graph = small_graph()
    torch.manual_seed(0)
    scores = torch.randn(graph.num_edges, 2)  # (E, H)
    values = torch.randn(graph.num_src, 2, 4)  # (num_src, H, F)

    scores_np, values_np = to_array(scores), to_array(values)
    check(
        np.shares_memory(scores_np, scores.numpy()) and scores_np.ctypes.data == scores.data_ptr(),
        "tensor.numpy() is a view of the tensor's memory",
    )
    out_np, lse_np = ca.attention_aggregate(graph, scores_np, values_np, return_lse=True)
    out = to_tensor(out_np)
    check(out.data_ptr() == out_np.ctypes.data, "torch.from_numpy(out) is a view of the result")

    # The same computed with torch alone.
    rows = torch.repeat_interleave(torch.arange(graph.num_dst), torch.from_numpy(np.diff(graph.indptr)))
    src = torch.from_numpy(graph.indices.astype(np.int64))
    weights = torch.exp(scores - torch.from_numpy(lse_np)[rows])
    expected = torch.zeros(graph.num_dst, 2, 4).index_add_(0, rows, weights[:, :, None] * values[src])
    check(torch.allclose(out, expected, atol=1e-5), "attention_aggregate matches a torch computation")


# ---------------------------------------------------------------------------------------
# 2. torch.autograd.Function

if torch is not None:

    class AttentionAggregate(torch.autograd.Function):
        """out = attention_aggregate(graph, scores, values) as a differentiable torch op.

        Works for CPU tensors (the CPU backend, through NumPy views) and CUDA tensors (the
        GPU kernels, through DLPack, on PyTorch's current stream). The forward keeps only
        the per-row log-sum-exp, not the per-edge softmax weights.
        """

        @staticmethod
        def forward(ctx, scores, values, graph):
            ctx.graph = graph.to_gpu() if scores.is_cuda else graph
            with torch_stream() if scores.is_cuda else contextlib.nullcontext():
                out, lse = ca.attention_aggregate(ctx.graph, to_array(scores), to_array(values), return_lse=True)
            ctx.save_for_backward(scores, values, to_tensor(lse))  # lse: (num_dst, H), not (E, H)
            return to_tensor(out)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad_out):
            scores, values, lse = ctx.saved_tensors
            with torch_stream() if scores.is_cuda else contextlib.nullcontext():
                grad_scores, grad_values = ca.attention_aggregate_backward(
                    ctx.graph, to_array(scores), to_array(values), to_array(grad_out), lse=to_array(lse)
                )
            return to_tensor(grad_scores), to_tensor(grad_values), None


def attention_aggregate_torch(scores, values, graph):
    """The differentiable op: ``AttentionAggregate.apply`` takes no keywords."""
    return AttentionAggregate.apply(scores, values, graph)


def torch_autograd(device):
    graph = small_graph()
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(graph.num_edges, 2, dtype=torch.float64, generator=generator).to(device)
    values = torch.randn(graph.num_src, 2, 3, dtype=torch.float64, generator=generator).to(device)
    scores.requires_grad_(True)
    values.requires_grad_(True)
    ok = torch.autograd.gradcheck(
        lambda s, v: attention_aggregate_torch(s, v, graph),
        (scores, values),
        eps=1e-6,
        atol=1e-7,
        rtol=1e-5,
        raise_exception=False,
    )
    check(ok, f"torch.autograd.gradcheck of AttentionAggregate, float64, {device}")

    # Used like any torch op: a loss, .backward(), gradients on the leaves.
    out = attention_aggregate_torch(scores, values, graph)
    (out**2).sum().backward()
    check(
        scores.grad.shape == scores.shape
        and values.grad.shape == values.shape
        and bool(torch.isfinite(scores.grad).all()),
        f"loss.backward() fills .grad ({device})",
    )


# ---------------------------------------------------------------------------------------
# 3. JAX


def aligned_empty(shape, dtype, alignment=64):
    """An uninitialized C-contiguous NumPy array whose data start on an ``alignment`` boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def jax_interop():
    graph = small_graph()
    key_scores, key_values = jax.random.split(jax.random.PRNGKey(0))
    scores = jax.random.normal(key_scores, (graph.num_edges, 2), dtype=jnp.float32)
    values = jax.random.normal(key_values, (graph.num_src, 2, 4), dtype=jnp.float32)
    devices = {d.platform for d in scores.devices()}

    if devices == {"cpu"}:
        scores_np, values_np = np.from_dlpack(scores), np.from_dlpack(values)
        check(scores_np.ctypes.data == scores.unsafe_buffer_pointer(), "np.from_dlpack(jax array) is a view")
        # JAX on the CPU shares only 64-byte aligned host buffers (it copies others), so
        # the result goes into an aligned buffer of our own, through out=.
        out_np = aligned_empty((graph.num_dst, 2, 4), np.float32)
        ca.attention_aggregate(graph, scores_np, values_np, out=out_np)
        out = jnp.from_dlpack(out_np)
        check(
            out.unsafe_buffer_pointer() == out_np.ctypes.data,
            "jnp.from_dlpack(result) is a view (CPU, 64-byte aligned out=)",
        )
    elif HAVE_GPU:
        scores.block_until_ready()  # CuPy does not see JAX's stream
        values.block_until_ready()
        scores_cp, values_cp = cupy.from_dlpack(scores), cupy.from_dlpack(values)
        check(scores_cp.data.ptr == scores.unsafe_buffer_pointer(), "cupy.from_dlpack(jax array) is a view")
        out_cp = ca.attention_aggregate(graph.to_gpu(), scores_cp, values_cp)
        cupy.cuda.get_current_stream().synchronize()  # JAX does not see CuPy's stream
        out = jnp.from_dlpack(out_cp)
        check(out.unsafe_buffer_pointer() == out_cp.data.ptr, "jnp.from_dlpack(result) is a view (GPU)")
    else:
        skip(f"JAX arrays live on {devices} and CuPy has no GPU")
        return

    # Compare with the same thing in JAX.
    rows = np.repeat(np.arange(graph.num_dst), np.diff(graph.indptr))
    logits = scores - jax.ops.segment_max(scores, rows, num_segments=graph.num_dst)[rows]
    weights = jnp.exp(logits)
    weights = weights / jax.ops.segment_sum(weights, rows, num_segments=graph.num_dst)[rows]
    expected = jax.ops.segment_sum(weights[:, :, None] * values[graph.indices], rows, num_segments=graph.num_dst)
    check(bool(jnp.allclose(out, expected, atol=1e-5)), "attention_aggregate matches a JAX computation")


# ---------------------------------------------------------------------------------------
# 4. PyTorch CUDA tensors, CUDA streams


def torch_gpu():
    graph = small_graph().to_gpu()
    scores = torch.randn(graph.num_edges, 2, device="cuda")
    values = torch.randn(graph.num_src, 2, 4, device="cuda")

    # Inputs: DLPack, or __cuda_array_interface__ (cupy.asarray), both zero-copy.
    scores_cp = cupy.from_dlpack(scores)
    values_cp = cupy.asarray(values)
    check(
        scores_cp.data.ptr == scores.data_ptr() and values_cp.data.ptr == values.data_ptr(),
        "cupy.from_dlpack / cupy.asarray(__cuda_array_interface__) view the torch tensors",
    )

    # Run on PyTorch's stream: ordered after the randn above without a host sync.
    with torch_stream():
        out_cp, lse_cp = ca.attention_aggregate(graph, scores_cp, values_cp, return_lse=True)
    out = torch.from_dlpack(out_cp)
    check(out.data_ptr() == out_cp.data.ptr, "torch.from_dlpack(result) views the CuPy array")

    # The same on a non-default CuPy stream: ops run on CuPy's current stream.
    torch.cuda.current_stream().synchronize()  # the inputs are ready for any stream
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out_side = ca.attention_aggregate(graph, scores_cp, values_cp)
        grads_side = ca.attention_aggregate_backward(graph, scores_cp, values_cp, cupy.ones_like(out_side), lse=lse_cp)
    stream.synchronize()  # before reading on another stream
    check(bool(cupy.allclose(out_side, out_cp)), "the same result on a non-default CuPy stream")
    check(all(bool(cupy.isfinite(g).all()) for g in grads_side), "backward on a non-default CuPy stream")


# ---------------------------------------------------------------------------------------
# 5. PyG's GATv2Conv


def gatv2_conv():
    """GATv2Conv's x_l = lin_l(x) (the source side, also the message) and x_r = lin_r(x) (the
    destination side) are gatv2_attention's x_src and x_dst, its att (1, H, C) the op's att;
    the input's gradient goes back through both linear maps."""
    torch.manual_seed(0)
    num_nodes, in_channels, heads, channels = 9, 5, 3, 4
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1, 3, 5], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 4, 4, 4]])
    conv = GATv2Conv(
        in_channels, channels, heads=heads, share_weights=False, add_self_loops=False, bias=False, negative_slope=0.2
    ).double()
    x = torch.randn(num_nodes, in_channels, dtype=torch.float64, requires_grad=True)
    out = conv(x, edge_index)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)

    graph, _ = ca.CSRGraph.from_edge_index(edge_index[0].numpy(), edge_index[1].numpy(), num_nodes, num_nodes)
    w_src, w_dst = conv.lin_l.weight.detach().numpy(), conv.lin_r.weight.detach().numpy()
    x_np = x.detach().numpy()
    x_src = (x_np @ w_src.T).reshape(num_nodes, heads, channels)
    x_dst = (x_np @ w_dst.T).reshape(num_nodes, heads, channels)
    att = conv.att.detach().numpy().reshape(heads, channels)
    ours, lse = ca.gatv2_attention(graph, x_dst, x_src, att, negative_slope=0.2, return_lse=True)
    check(np.allclose(ours.reshape(num_nodes, -1), out.detach().numpy(), rtol=1e-12, atol=1e-12), "outputs")
    g = grad_out.numpy().reshape(num_nodes, heads, channels)
    grad_dst, grad_src, grad_att = ca.gatv2_attention_backward(graph, x_dst, x_src, att, ours, g, lse)
    grad_x = grad_dst.reshape(num_nodes, -1) @ w_dst + grad_src.reshape(num_nodes, -1) @ w_src
    check(np.allclose(grad_x, x.grad.numpy(), rtol=1e-10, atol=1e-12), "the gradient of the layer's input")
    check(
        np.allclose(grad_att, conv.att.grad.numpy().reshape(heads, channels), rtol=1e-10, atol=1e-12),
        "the gradient of the attention vector",
    )


# ---------------------------------------------------------------------------------------
# 6. and 7. PyG's TransformerConv and GATConv with edge features


class WithEdgeAttr:
    """A PyG layer with edge_dim run forward and backward in float64 on 10 nodes (node 9 only
    sends; a repeated edge 1 -> 0; edges in no particular order), for comparison.

    ``graph`` is a scipy COO matrix (destination, source) whose stored order is edge_index's, so
    edge arrays go in and come out in PyG's order; ``x``, ``edge_attr`` (NumPy) the inputs,
    ``out`` (NumPy) the layer's output, ``grad_out`` the gradient fed back, as (N, H, C).
    """

    num_nodes, in_channels, edge_dim = 10, 5, 3

    def __init__(self, conv, heads, channels):
        edge_index = torch.tensor(
            [[0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1, 3, 5, 9, 1], [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 4, 4, 4, 2, 0]]
        )
        src, dst = edge_index.numpy()
        self.graph = scipy.sparse.coo_array((np.ones(len(src)), (dst, src)), shape=(self.num_nodes, self.num_nodes))
        x = torch.randn(self.num_nodes, self.in_channels, dtype=torch.float64, requires_grad=True)
        edge_attr = torch.randn(len(src), self.edge_dim, dtype=torch.float64, requires_grad=True)
        out = conv.double()(x, edge_index, edge_attr)
        grad_out = torch.randn_like(out)
        out.backward(grad_out)
        self.x, self.edge_attr = x.detach().numpy(), edge_attr.detach().numpy()
        self.out, self.grad_out = out.detach().numpy(), grad_out.numpy().reshape(self.num_nodes, heads, channels)
        self._grads = x.grad.numpy(), edge_attr.grad.numpy()

    def check(self, ours, grad_x, grad_edge_attr):
        """Our output (N, H, C) and gradients of x and edge_attr against the layer's."""
        check(np.allclose(ours.reshape(self.num_nodes, -1), self.out, rtol=1e-12, atol=1e-12), "outputs")
        check(np.allclose(grad_x, self._grads[0], rtol=1e-10, atol=1e-12), "the gradient of the node features")
        check(np.allclose(grad_edge_attr, self._grads[1], rtol=1e-10, atol=1e-12), "the gradient of edge_attr")


def transformer_conv():
    """TransformerConv's query, key and value (lin_query, lin_key, lin_value of x) are
    graph_attention's q, k, v, and its projected edge features lin_edge(edge_attr), added to each
    edge's key and value, are edge_feat; the inputs' gradients go back through the linear maps."""
    torch.manual_seed(1)
    heads, channels = 2, 4
    conv = TransformerConv(
        WithEdgeAttr.in_channels,
        channels,
        heads=heads,
        concat=True,
        beta=False,
        edge_dim=WithEdgeAttr.edge_dim,
        root_weight=False,
    )
    layer = WithEdgeAttr(conv, heads, channels)

    def linear(torch_linear, inputs):
        """(inputs @ W.T + b as (rows, H, C), W) of a torch Linear layer, in NumPy."""
        weight = torch_linear.weight.detach().numpy()
        result = inputs @ weight.T
        if torch_linear.bias is not None:
            result = result + torch_linear.bias.detach().numpy()
        return result.reshape(len(inputs), heads, channels), weight

    (q, w_q), (k, w_k), (v, w_v) = (linear(lin, layer.x) for lin in (conv.lin_query, conv.lin_key, conv.lin_value))
    edge_feat, w_edge = linear(conv.lin_edge, layer.edge_attr)
    graph = layer.graph
    ours, lse = ca.graph_attention(graph, q, k, v, edge_feat=edge_feat, return_lse=True)  # scale 1/sqrt(C)
    grad_q, grad_k, grad_v, grad_edge_feat = ca.graph_attention_backward(
        graph, q, k, v, ours, layer.grad_out, lse, edge_feat=edge_feat
    )
    grad_x = sum(grad.reshape(len(grad), -1) @ w for grad, w in ((grad_q, w_q), (grad_k, w_k), (grad_v, w_v)))
    layer.check(ours, grad_x, grad_edge_feat.reshape(len(grad_edge_feat), -1) @ w_edge)


def gat_conv():
    """GATConv's x_h = lin(x) (the message, shared by both sides) gives gat_attention's
    a_src = <att_src, x_h[s]> and a_dst = <att_dst, x_h[d]>; its edge term
    <att_edge, lin_edge(edge_attr)> per head is edge_score."""
    torch.manual_seed(2)
    heads, channels = 3, 4
    conv = GATConv(
        WithEdgeAttr.in_channels,
        channels,
        heads=heads,
        edge_dim=WithEdgeAttr.edge_dim,
        add_self_loops=False,
        bias=False,
        negative_slope=0.2,
    )
    layer = WithEdgeAttr(conv, heads, channels)
    w, w_edge = conv.lin.weight.detach().numpy(), conv.lin_edge.weight.detach().numpy()
    att_src, att_dst, att_edge = (
        a.detach().numpy().reshape(heads, channels) for a in (conv.att_src, conv.att_dst, conv.att_edge)
    )
    x_h = (layer.x @ w.T).reshape(-1, heads, channels)
    edge_h = (layer.edge_attr @ w_edge.T).reshape(-1, heads, channels)
    a_src, a_dst, edge_score = (x_h * att_src).sum(-1), (x_h * att_dst).sum(-1), (edge_h * att_edge).sum(-1)
    graph = layer.graph
    ours, lse = ca.gat_attention(graph, a_dst, a_src, x_h, negative_slope=0.2, edge_score=edge_score, return_lse=True)
    grad_a_dst, grad_a_src, grad_values, grad_edge_score = ca.gat_attention_backward(
        graph, a_dst, a_src, x_h, ours, layer.grad_out, lse, negative_slope=0.2, edge_score=edge_score
    )
    grad_x_h = grad_values + grad_a_src[:, :, None] * att_src + grad_a_dst[:, :, None] * att_dst
    grad_edge_h = grad_edge_score[:, :, None] * att_edge
    layer.check(ours, grad_x_h.reshape(len(x_h), -1) @ w, grad_edge_h.reshape(len(edge_h), -1) @ w_edge)


# ---------------------------------------------------------------------------------------


def main():
    print(
        f"cupy_csrattn {ca.__version__}; torch: {torch.__version__ if torch else 'not installed'}; "
        f"jax: {jax.__version__ if jax else 'not installed'}; "
        f"cupy: {cupy.__version__ if cupy else 'not installed'}; GPU: {'yes' if HAVE_GPU else 'no'}"
    )
    no_torch = "needs PyTorch (pip install torch)"
    no_pyg = no_torch if torch is None else None if GATv2Conv else "needs torch_geometric (pip install torch_geometric)"
    sections = [
        ("1. PyTorch CPU tensors, zero-copy", torch_cpu, None if torch else no_torch),
        ("2a. autograd.Function + gradcheck (CPU)", lambda: torch_autograd("cpu"), None if torch else no_torch),
        (
            "2b. autograd.Function + gradcheck (GPU)",
            lambda: torch_autograd("cuda"),
            no_torch
            if torch is None
            else None
            if HAVE_GPU and torch.cuda.is_available()
            else "needs CuPy, a GPU and a CUDA build of PyTorch",
        ),
        ("3. JAX arrays through DLPack", jax_interop, None if jax else "needs JAX (pip install jax)"),
        (
            "4. PyTorch CUDA tensors and CUDA streams",
            torch_gpu,
            no_torch
            if torch is None
            else None
            if HAVE_GPU and torch.cuda.is_available()
            else "needs CuPy, a GPU and a CUDA build of PyTorch",
        ),
        ("5. PyG's GATv2Conv", gatv2_conv, no_pyg),
        ("6. PyG's TransformerConv with edge features", transformer_conv, no_pyg),
        ("7. PyG's GATConv with edge features", gat_conv, no_pyg),
    ]
    for title, run, missing in sections:
        print(title)
        if missing:
            skip(missing)
            continue
        run()
    print("FAILED: " + "; ".join(FAILURES) if FAILURES else "all sections that ran passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
