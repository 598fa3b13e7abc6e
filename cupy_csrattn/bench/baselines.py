"""Baselines: what a user would write without the library, and this library's unfused chain.

GPU: plain CuPy compositions (scatter reductions), cuSPARSE through cupyx, and PyG-style
message passing (gather, softmax, scatter-add) when torch_geometric is importable. CPU:
NumPy compositions (``ufunc.reduceat``) and scipy.sparse. Importable without CuPy, PyTorch
or PyG: those are imported only when a GPU baseline is used.
"""

import math

import numpy as np
import scipy.sparse

import cupy_csrattn as ca
from cupy_csrattn import backend

#: PyG-style baselines hold several (E, H, F) tensors at once (GATv2's forward + backward
#: peaks at about six); they are skipped where that many would not fit in the device's memory,
#: and one that still runs out of memory is recorded as skipped with the error.
PYG_MESSAGE_COPIES = 6
#: The negative slope of the GAT compositions (the library's default).
GAT_SLOPE = 0.2


def load_pyg():
    """(torch, torch_geometric.utils), or (None, None) when PyG is not importable."""
    try:
        import torch
        import torch_geometric.utils

        return torch, torch_geometric.utils
    except Exception:
        return None, None


def attention_scale(q):
    """graph_attention's default scale: 1 / sqrt(feature width)."""
    return 1.0 / math.sqrt(max(q.shape[-1], 1))


def leaky_relu(z):
    xp = backend.array_module(backend.is_cupy_array(z))
    return xp.where(z > 0, z, z * z.dtype.type(GAT_SLOPE))


# -- GPU: CuPy and cuSPARSE ----------------------------------------------------------------


def cupy_softmax(rows, num_dst, scores):
    """Plain CuPy composition: scatter max, exp, scatter add, divide."""
    import cupyx

    cupy = backend.cupy
    heads = scores.shape[1]
    row_max = cupy.full((num_dst, heads), -np.inf, dtype=scores.dtype)
    cupyx.scatter_max(row_max, rows, scores)
    exp = cupy.exp(scores - row_max[rows])
    total = cupy.zeros((num_dst, heads), dtype=scores.dtype)
    cupyx.scatter_add(total, rows, exp)
    return exp / total[rows]


def cupy_softmax_backward(rows, num_dst, probs, grad_probs):
    """Plain CuPy composition: p * (g - scatter_add(p * g)[row])."""
    import cupyx

    weighted = probs * grad_probs
    total = backend.cupy.zeros((num_dst, probs.shape[1]), dtype=probs.dtype)
    cupyx.scatter_add(total, rows, weighted)
    return weighted - probs * total[rows]


def cusparse_spmm(graph, weights_1d, values_2d):
    """One head through cuSPARSE (cupyx.scipy.sparse CSR matrix times dense)."""
    import cupyx.scipy.sparse

    matrix = cupyx.scipy.sparse.csr_matrix((weights_1d, graph.indices, graph.indptr), shape=graph.shape)
    return matrix @ values_2d


def cupy_aggregate(graph, rows, scores, values):
    """CuPy softmax, then one cuSPARSE spmm per head."""
    cupy = backend.cupy
    probs = cupy_softmax(rows, graph.num_dst, scores)
    return cupy.stack(
        [
            cusparse_spmm(graph, cupy.ascontiguousarray(probs[:, h]), cupy.ascontiguousarray(values[:, h]))
            for h in range(scores.shape[1])
        ],
        axis=1,
    )


# -- CPU: NumPy and SciPy ------------------------------------------------------------------


def segment_reduce(ufunc, graph, x, empty_value):
    """Per-row reduction of edge array x (E, ...) with ``ufunc.reduceat``; empty rows get empty_value."""
    degrees = np.diff(graph.indptr)
    nonempty = degrees > 0
    out = np.full((graph.num_dst,) + x.shape[1:], empty_value, dtype=x.dtype)
    if graph.num_edges:
        out[nonempty] = ufunc.reduceat(x, graph.indptr[:-1][nonempty], axis=0)
    return out


def numpy_softmax(graph, rows, scores):
    """NumPy composition: maximum.reduceat, exp, add.reduceat, divide."""
    row_max = segment_reduce(np.maximum, graph, scores, -np.inf)
    exp = np.exp(scores - row_max[rows])
    return exp / segment_reduce(np.add, graph, exp, 0)[rows]


def numpy_softmax_backward(graph, rows, probs, grad_probs):
    """NumPy composition: p * (g - add.reduceat(p * g)[row])."""
    weighted = probs * grad_probs
    return weighted - probs * segment_reduce(np.add, graph, weighted, 0)[rows]


def scipy_spmm(graph, weights, values):
    """One scipy.sparse CSR matrix times dense per head: weights (E, H), values (N, H, F)."""
    out = np.empty((graph.num_dst,) + values.shape[1:], dtype=np.result_type(weights, values))
    for h in range(values.shape[1]):
        matrix = scipy.sparse.csr_matrix((weights[:, h], graph.indices, graph.indptr), shape=graph.shape)
        out[:, h] = matrix @ values[:, h]
    return out


def numpy_scipy_aggregate(graph, rows, scores, values):
    """NumPy softmax, then one scipy spmm per head."""
    return scipy_spmm(graph, numpy_softmax(graph, rows, scores), values)


def scipy_edge_dot_backward(graph, dst_feat, src_feat, grad_scores, scale=1.0):
    """sddmm_backward (op="dot") as two scipy.sparse products per head: the graph's matrix
    holding scale * grad_scores times src_feat, and its transpose times dst_feat."""
    weights = grad_scores * grad_scores.dtype.type(scale)
    grad_dst, grad_src = np.empty_like(dst_feat), np.empty_like(src_feat)
    for h in range(weights.shape[1]):
        matrix = scipy.sparse.csr_matrix((weights[:, h], graph.indices, graph.indptr), shape=graph.shape)
        grad_dst[:, h] = matrix @ src_feat[:, h]
        grad_src[:, h] = matrix.T @ dst_feat[:, h]
    return grad_dst, grad_src


# -- either device -------------------------------------------------------------------------


def composed_edge_dot(graph, rows, dst_feat, src_feat, scale=1.0):
    """Gather both ends and reduce: (dst[row] * src[col]).sum(-1); features (N, H, D)."""
    return (dst_feat[rows] * src_feat[graph.indices]).sum(-1) * scale


def cupy_edge_dot_backward(graph, rows, dst_feat, src_feat, grad_scores, scale=1.0):
    """sddmm_backward (op="dot") as plain CuPy: gather the other end's features, multiply by
    scale * grad_scores, scatter-add into both ends (materializes two (E, H, D) arrays)."""
    import cupyx

    cupy = backend.cupy
    weights = (grad_scores * grad_scores.dtype.type(scale))[:, :, None]
    grad_dst, grad_src = cupy.zeros_like(dst_feat), cupy.zeros_like(src_feat)
    cupyx.scatter_add(grad_dst, rows, weights * src_feat[graph.indices])
    cupyx.scatter_add(grad_src, graph.indices, weights * dst_feat[rows])
    return grad_dst, grad_src


def composed_aggregate(graph, rows, scores, values):
    """The plain composition of softmax then aggregation on the graph's device."""
    if backend.is_cupy_array(scores):
        return cupy_aggregate(graph, rows, scores, values)
    return numpy_scipy_aggregate(graph, rows, scores, values)


def composed_scores(graph, rows, op, x):
    """Scores of a fused op's inputs ``x`` by plain array ops (gather both ends), as a user would
    write them: graph_attention's scaled dot products, or gat_attention's leaky ReLU'd sums."""
    if op == "graph_attention":
        return composed_edge_dot(graph, rows, x[0], x[1], attention_scale(x[0]))
    return leaky_relu(x[0][rows] + x[1][graph.indices])


def unfused_scores(graph, op, x):
    """(E, H) scores through this library's unfused primitives; for gat also the logits."""
    if op == "graph_attention":
        return ca.sddmm(graph, x[0], x[1], op="dot", scale=attention_scale(x[0])), None
    z = ca.sddmm(graph, x[0], x[1], op="add")
    return leaky_relu(z), z


def unfused_forward(graph, op, x, out=None):
    """A fused op's forward as this library's chain: sddmm -> edge_softmax -> spmm."""
    return ca.spmm(graph, ca.edge_softmax(graph, unfused_scores(graph, op, x)[0]), x[2], out=out)


def unfused_forward_backward(graph, op, x, grad_out):
    """A fused op's forward and backward as this library's chain and the chain's backward."""
    scores, logits = unfused_scores(graph, op, x)
    probs = ca.edge_softmax(graph, scores)
    out = ca.spmm(graph, probs, x[2])
    grad_probs, grad_values = ca.spmm_backward(graph, probs, x[2], grad_out)
    grad_scores = ca.edge_softmax_backward(graph, probs, grad_probs)
    if op == "graph_attention":
        grads = ca.sddmm_backward(graph, x[0], x[1], grad_scores, op="dot", scale=attention_scale(x[0]))
    else:
        xp = backend.array_module(backend.is_cupy_array(logits))
        grad_scores *= xp.where(logits > 0, 1, GAT_SLOPE).astype(grad_scores.dtype)
        grads = ca.sddmm_backward(graph, x[0], x[1], grad_scores, op="add")
    return out, grads, grad_values


# -- GPU: PyG-style message passing --------------------------------------------------------


def pyg_message_bytes(graph, H, F, dtype):
    """Bytes of the (E, H, F) message tensor PyG-style aggregation materializes."""
    return graph.num_edges * H * F * np.dtype(dtype).itemsize


def pyg_aggregate(pyg, graph, rows, H, F):
    """attention_aggregate as PyG writes it: softmax(ptr=...), gather, scale, index_add_.

    Returns a function of a (scores, values) pair of torch tensors.
    """
    torch, pyg_utils = pyg
    N = graph.num_dst
    ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
    t_rows = torch.as_tensor(rows.astype(np.int64), device="cuda")
    t_cols = torch.as_tensor(graph.indices.astype(np.int64), device="cuda")

    def aggregate(sv):
        alpha = pyg_utils.softmax(sv[0], ptr=ptr, dim=0)
        messages = sv[1][t_cols] * alpha.unsqueeze(-1)
        return torch.zeros((N, H, F), device="cuda", dtype=messages.dtype).index_add_(0, t_rows, messages)

    return aggregate


def pyg_attention(pyg, graph, rows, op):
    """graph_attention as TransformerConv's message passing, gat_attention as GATConv's,
    gatv2_attention as GATv2Conv's (share_weights=False: x_dst and x_src given, the message
    x_src).

    Returns a function of a tuple of three torch tensors (q, k, v or a_dst, a_src, values or
    x_dst, x_src, att).
    """
    torch, pyg_utils = pyg
    N = graph.num_dst
    t_rows = torch.as_tensor(rows.astype(np.int64), device="cuda")
    t_cols = torch.as_tensor(graph.indices.astype(np.int64), device="cuda")

    def forward(x):
        values = x[2]
        if op == "graph_attention":
            alpha = (x[0][t_rows] * x[1][t_cols]).sum(-1) / math.sqrt(max(x[0].shape[-1], 1))
        elif op == "gat_attention":
            alpha = torch.nn.functional.leaky_relu(x[0][t_rows] + x[1][t_cols], GAT_SLOPE)
        else:
            alpha = (torch.nn.functional.leaky_relu(x[0][t_rows] + x[1][t_cols], GAT_SLOPE) * x[2]).sum(-1)
            values = x[1]
        alpha = pyg_utils.softmax(alpha, t_rows, num_nodes=N, dim=0)
        messages = values[t_cols] * alpha.unsqueeze(-1)
        return torch.zeros((N, *messages.shape[1:]), device="cuda", dtype=messages.dtype).index_add_(
            0, t_rows, messages
        )

    return forward


def pyg_gatv2_layer(pyg, graph, rows, H, F, dtype, device="cuda"):
    """PyG's GATv2Conv layer as a user builds it (share_weights=False, no self loops, no bias,
    heads concatenated), on H * F input features per node: returns (layer, forward), forward
    a function of a tuple (x_src, x_dst) of torch tensors. Its time includes the layer's two
    projections, which gatv2_attention leaves to the caller."""
    torch, _ = pyg
    from torch_geometric.nn import GATv2Conv

    width = H * F
    layer = GATv2Conv(
        (width, width), F, heads=H, negative_slope=GAT_SLOPE, add_self_loops=False, share_weights=False, bias=False
    ).to(device=device, dtype=getattr(torch, np.dtype(dtype).name))
    # PyG's edge_index: row 0 the sources (graph columns), row 1 the destinations (graph rows).
    edge_index = torch.stack(
        [torch.as_tensor(graph.indices.astype(np.int64)), torch.as_tensor(rows.astype(np.int64))]
    ).to(device)

    def forward(x):
        return layer((x[0], x[1]), edge_index)

    return layer, forward
