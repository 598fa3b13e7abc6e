"""The single-device ops on a PartitionedGraph, for dask arrays chunked by its partition.

Each op takes the PartitionedGraph, the op's arrays as dask arrays (NumPy or CuPy chunks)
chunked along axis 0 by ``graph.row_chunks`` (destination-side node arrays),
``graph.src_chunks`` (source-side node arrays) or ``graph.edge_chunks`` (edge arrays), and
the op's own keyword arguments, and returns its results chunked alike. Each call runs the
single-device op once per partition on the partition's worker and waits for it: at most
``timeout`` seconds (None or math.inf: no limit), then TimeoutError naming the partitions still running.
The returned arrays are backed by results kept on the workers (futures), so feeding them to
the next op moves nothing through the client. ``out=`` is not taken (dask arrays are not
written in place); spmm's ``weights=None`` means all ones.

Forward results equal the single-device call on the whole graph exactly where the op's
per-row computation does not depend on other rows (every forward of the CPU backend);
source-side gradients sum the same terms in another order (within rounding).
"""

import cupy_csrattn  # noqa: F401  (importing the package registers every op in OPS)
from cupy_csrattn.distributed import exchange
from cupy_csrattn.distributed.graph import DEFAULT_TIMEOUT
from cupy_csrattn.ops.registry import OPS

# By op name: (name, side[, "keyword"]) of each array argument after the graph, in the op's
# order ("keyword": the op takes it by keyword), and the side of each result (the trailing
# ones only when the op returns them: an edge input's gradient only when it is given).
SIGNATURES = {
    "edge_softmax": ((("scores", "edge"),), ("edge",)),
    "edge_softmax_backward": ((("probs", "edge"), ("grad_probs", "edge")), ("edge",)),
    "spmm": ((("weights", "edge"), ("values", "src")), ("dst",)),
    "spmm_backward": ((("weights", "edge"), ("values", "src"), ("grad_out", "dst")), ("edge", "src")),
    "sddmm": ((("dst_feat", "dst"), ("src_feat", "src")), ("edge",)),
    "sddmm_backward": ((("dst_feat", "dst"), ("src_feat", "src"), ("grad_scores", "edge")), ("dst", "src")),
    "attention_aggregate": ((("scores", "edge"), ("values", "src")), ("dst", "dst")),
    "attention_aggregate_backward": (
        (("scores", "edge"), ("values", "src"), ("grad_out", "dst"), ("lse", "dst", "keyword")),
        ("edge", "src"),
    ),
    "graph_attention": (
        (("q", "dst"), ("k", "src"), ("v", "src"), ("edge_feat", "edge", "keyword")),
        ("dst", "dst"),
    ),
    "graph_attention_backward": (
        (
            ("q", "dst"),
            ("k", "src"),
            ("v", "src"),
            ("out", "dst"),
            ("grad_out", "dst"),
            ("lse", "dst"),
            ("edge_feat", "edge", "keyword"),
        ),
        ("dst", "src", "src", "edge"),
    ),
    "gat_attention": (
        (("a_dst", "dst"), ("a_src", "src"), ("values", "src"), ("edge_score", "edge", "keyword")),
        ("dst", "dst"),
    ),
    "gat_attention_backward": (
        (
            ("a_dst", "dst"),
            ("a_src", "src"),
            ("values", "src"),
            ("out", "dst"),
            ("grad_out", "dst"),
            ("lse", "dst"),
            ("edge_score", "edge", "keyword"),
        ),
        ("dst", "src", "src", "edge"),
    ),
    "gatv2_attention": ((("x_dst", "dst"), ("x_src", "src"), ("att", "param")), ("dst", "dst")),
    "gatv2_attention_backward": (
        (("x_dst", "dst"), ("x_src", "src"), ("att", "param"), ("out", "dst"), ("grad_out", "dst"), ("lse", "dst")),
        ("dst", "src", "sum"),
    ),
}


def _run(name, graph, arrays, kwargs, timeout):
    """Call the registered op ``name`` on every partition of graph."""
    parameters, sides = SIGNATURES[name]
    inputs = [(p[0], x, p[1], len(p) > 2) for p, x in zip(parameters, arrays)]
    return exchange.call(graph, OPS[name].function, inputs, kwargs, sides, timeout)


def edge_softmax(graph, scores, *, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.edge_softmax``: scores (E, [H]) -> probs (E, [H]); no exchange."""
    return _run("edge_softmax", graph, [scores], {}, timeout)


def edge_softmax_backward(graph, probs, grad_probs, *, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.edge_softmax_backward``: -> grad_scores (E, [H])."""
    return _run("edge_softmax_backward", graph, [probs, grad_probs], {}, timeout)


def spmm(graph, weights, values, *, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.spmm``: weights (E, [H]) or None (all ones), values
    (num_src, [H,] F) -> out (num_dst, [H,] F)."""
    return _run("spmm", graph, [weights, values], {}, timeout)


def spmm_backward(graph, weights, values, grad_out, *, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.spmm_backward``: -> (grad_weights or None, grad_values)."""
    return _run("spmm_backward", graph, [weights, values, grad_out], {}, timeout)


def sddmm(graph, dst_feat, src_feat, *, op="dot", scale=1.0, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.sddmm``: -> scores (E, [H])."""
    return _run("sddmm", graph, [dst_feat, src_feat], {"op": op, "scale": scale}, timeout)


def sddmm_backward(graph, dst_feat, src_feat, grad_scores, *, op="dot", scale=1.0, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.sddmm_backward``: -> (grad_dst_feat, grad_src_feat)."""
    return _run("sddmm_backward", graph, [dst_feat, src_feat, grad_scores], {"op": op, "scale": scale}, timeout)


def attention_aggregate(graph, scores, values, *, return_lse=False, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.attention_aggregate``: -> out (num_dst, [H,] F) [, lse]."""
    return _run("attention_aggregate", graph, [scores, values], {"return_lse": return_lse}, timeout)


def attention_aggregate_backward(graph, scores, values, grad_out, *, lse=None, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.attention_aggregate_backward``: -> (grad_scores, grad_values)."""
    return _run("attention_aggregate_backward", graph, [scores, values, grad_out, lse], {}, timeout)


def graph_attention(graph, q, k, v, *, scale=None, edge_feat=None, return_lse=False, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.graph_attention``: q (num_dst, [H,] D), k (num_src, [H,] D),
    v (num_src, [H,] F), edge_feat (E, [H,] D) or None -> out (num_dst, [H,] F) [, lse]."""
    kwargs = {"scale": scale, "return_lse": return_lse}
    return _run("graph_attention", graph, [q, k, v, edge_feat], kwargs, timeout)


def graph_attention_backward(
    graph, q, k, v, out, grad_out, lse, *, scale=None, edge_feat=None, timeout=DEFAULT_TIMEOUT
):
    """Distributed ``cupy_csrattn.graph_attention_backward``: -> (grad_q, grad_k, grad_v[, grad_edge_feat])."""
    arrays = [q, k, v, out, grad_out, lse, edge_feat]
    return _run("graph_attention_backward", graph, arrays, {"scale": scale}, timeout)


def gat_attention(
    graph, a_dst, a_src, values, *, negative_slope=0.2, edge_score=None, return_lse=False, timeout=DEFAULT_TIMEOUT
):
    """Distributed ``cupy_csrattn.gat_attention``: a_dst (num_dst, [H]), a_src (num_src, [H]),
    values (num_src, [H,] F), edge_score (E, [H]) or None -> out (num_dst, [H,] F) [, lse]."""
    kwargs = {"negative_slope": negative_slope, "return_lse": return_lse}
    return _run("gat_attention", graph, [a_dst, a_src, values, edge_score], kwargs, timeout)


def gat_attention_backward(
    graph, a_dst, a_src, values, out, grad_out, lse, *, negative_slope=0.2, edge_score=None, timeout=DEFAULT_TIMEOUT
):
    """Distributed ``cupy_csrattn.gat_attention_backward``: -> (grad_a_dst, grad_a_src, grad_values[,
    grad_edge_score])."""
    kwargs = {"negative_slope": negative_slope}
    arrays = [a_dst, a_src, values, out, grad_out, lse, edge_score]
    return _run("gat_attention_backward", graph, arrays, kwargs, timeout)


def gatv2_attention(graph, x_dst, x_src, att, *, negative_slope=0.2, return_lse=False, timeout=DEFAULT_TIMEOUT):
    """Distributed ``cupy_csrattn.gatv2_attention``: x_dst (num_dst, [H,] D), x_src (num_src, [H,] D),
    att ([H,] D) a NumPy or CuPy array every partition reads whole -> out (num_dst, [H,] D) [, lse]."""
    kwargs = {"negative_slope": negative_slope, "return_lse": return_lse}
    return _run("gatv2_attention", graph, [x_dst, x_src, att], kwargs, timeout)


def gatv2_attention_backward(
    graph, x_dst, x_src, att, out, grad_out, lse, *, negative_slope=0.2, timeout=DEFAULT_TIMEOUT
):
    """Distributed ``cupy_csrattn.gatv2_attention_backward``: -> (grad_x_dst, grad_x_src, grad_att),
    grad_att ([H,] D) the partitions' sums added in partition order."""
    kwargs = {"negative_slope": negative_slope}
    return _run("gatv2_attention_backward", graph, [x_dst, x_src, att, out, grad_out, lse], kwargs, timeout)
