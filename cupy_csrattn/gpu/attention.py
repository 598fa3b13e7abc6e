"""Launchers of attention_aggregate (aggregate.cu, softmax.cu, sddmm.cu) and of the fused
graph_attention and gat_attention (attention.cu), forward and backward.

The fused ops allocate nothing per edge: besides their outputs, the backward holds one
(N, H) array (row_dot) and uses the graph's cached plan and transpose (and, where its passes
run over column blocks, the graph's cached blocks and indices sorted within rows).
"""

import math
from functools import partial

from cupy_csrattn import backend
from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu import recording
from cupy_csrattn.gpu.aggregate import aggregate, merge_split_rows, run_row_kernels
from cupy_csrattn.gpu.column_blocks import run_blocked
from cupy_csrattn.gpu.derived import unit_values
from cupy_csrattn.gpu.kernels import MAX_BATCHED_HEADS, WARP, launch, scratch, thread_grid, vector_width, warp_grid
from cupy_csrattn.gpu.sddmm import edge_dot
from cupy_csrattn.gpu.softmax import run_softmax


def _row_lse(graph, scores):
    lse = scratch((graph.num_dst, scores.shape[1]), accumulation_dtype(scores.dtype))
    run_softmax("lse", graph, scores, lse_out=lse)
    return lse


def attention_aggregate(graph, scores, values, out, lse):
    """On the head-span kernels (score kind "given": each edge's score read in edge order)
    where the shape fits them, else on the row kernels of aggregate.cu."""
    if values.shape[2] == 0 and lse is None:  # nothing to write
        return
    shape = span_for("forward", scores, scores, values, out) if values.shape[2] else None
    if shape is not None:
        run_span("forward", shape, "given", graph, scores, scores, 0.0, values, out, lse_out=lse)
        return
    aggregate("softmax", graph, values, out, lse_out=lse, scores=scores)


def attention_aggregate_backward(graph, scores, values, grad_out, lse, grad_scores, grad_values):
    if lse is None:
        lse = _row_lse(graph, scores)
    # dp = <grad_out[row], values[col]> in the accumulation dtype (float16's in float32: neither
    # overflowing nor rounded before the row's sum), then grad_scores = p * (dp - sum_row p * dp).
    acc = accumulation_dtype(scores.dtype)
    dp = grad_scores if grad_scores.dtype == acc else scratch(grad_scores.shape, acc)
    edge_dot(graph, grad_out, values, 1.0, dp)
    run_softmax("grad_scores", graph, scores, g=dp, lse_in=lse, out=grad_scores)
    graph_t, perm = graph.transpose()
    aggregate("probs_perm", graph_t, grad_out, grad_values, scores=scores, perm=perm, lse=lse)


# -- fused ops: score "dot" (a, b = q, k; c = scale) or "gat" (a, b = a_dst, a_src; c = slope)


def _score_args(a, b, c, lse=None, grad_out=None, v=None, row_dot=None):
    """The trailing arguments of every attention.cu row kernel, by name."""
    return dict(
        a=a,
        b=b,
        D=a.shape[2] if a.ndim == 3 else 0,
        c=c,
        lse=lse,
        grad_out=grad_out,
        v=v,
        Fv=0 if v is None else v.shape[2],
        row_dot=row_dot,
    )


# The stages that run on the head-span kernels where their shape allows, and those of them
# whose kernels may split the warp into edge groups (without: a head takes its whole share of
# the warp, loads of at most 4 elements). Benchmarks switch both.
SPAN_STAGES = {"forward", "grad", "sources"}
SPAN_GROUP_STAGES = {"forward", "grad", "sources"}

# NV (vectors per lane) of the head-span kernels for each VEC (elements per load).
SPAN_VECTORS = {1: (1, 2, 4), 4: (1, 2, 4), 8: (1, 2)}


def _span_vector(width_gcd, arrays):
    """VEC of the head-span loads: 16 bytes of float16 (8) where the widths and the arrays
    allow, else 4 elements (the widest of vector_width), else 1."""
    if all(a.dtype.itemsize == 2 and a.data.ptr % 16 == 0 for a in arrays) and width_gcd % 8 == 0:
        return 8
    return 4 if vector_width(width_gcd, *arrays) == 4 else 1


def _span_layout(heads, width, vec, groups=True):
    """(S, VEC, NV) of the head-span kernels (attention.cu) for ``heads`` heads of node rows of
    at most ``width`` elements, loaded ``vec`` elements at a time, or None where they do not
    apply: more heads than lanes, or rows wider than S * VEC * NV with NV at most 4 (2 for
    VEC = 8). With ``groups``, S, the lanes per head, is the fewest whose loads cover a head's
    row, so that the rest of the warp takes other edges at once (edge groups); without, S is
    the head's whole share of the warp and VEC at most 4."""
    if heads > MAX_BATCHED_HEADS:
        return None
    max_lanes = WARP // (1 << (heads - 1).bit_length())
    if not groups:
        vec = min(vec, 4)
    lanes = min(max_lanes, 1 << max(-(-width // vec) - 1, 0).bit_length()) if groups else max_lanes
    for nv in SPAN_VECTORS[vec]:
        if lanes * vec * nv >= width:
            return lanes, vec, nv
    return None


def _span_shape(heads, depth, features, arrays, groups=True):
    """(S, VEC, NV) of the head-span kernels for node rows of ``depth`` (q, k; 0 for "gat") and
    ``features`` (v, grad_out) elements per head in ``arrays``, or None (see _span_layout)."""
    return _span_layout(heads, max(depth, features), _span_vector(math.gcd(depth, features), arrays), groups)


def _head_chunk(heads, depth, features, itemsize):
    """Heads per launch where edge data comes with more heads, or wider heads, than the
    head-span kernels take at once (heads are independent): the most, a power of two, for
    which they apply to contiguous (aligned) copies of the heads; None where one head is too
    wide. Returns (chunk, the widest head the kernels take)."""
    width_gcd = math.gcd(depth, features)
    vec = 8 if itemsize == 2 and width_gcd % 8 == 0 else 4 if width_gcd % 4 == 0 else 1
    chunk = 1 << (min(heads, MAX_BATCHED_HEADS).bit_length() - 1)
    while chunk >= 1 and _span_layout(chunk, max(depth, features), vec) is None:
        chunk //= 2
    return chunk or None, WARP * vec * max(SPAN_VECTORS[vec])


def _heads(x, heads_of, copy):
    """copy(x[:, heads_of]), or None for None."""
    return None if x is None else copy(x[:, heads_of])


def _over_head_chunks(run, chunk, inputs, outputs):
    """run(**inputs, **outputs) on new contiguous copies of ``chunk`` heads at a time (axis 1
    of every array), each chunk's outputs copied into its heads of ``outputs`` (None entries
    stay None). Always new: a chunk of every head is the array itself, whose address may be
    what kept it off the head-span kernels (_head_chunk counts on aligned copies)."""
    recording.other_work("heads are run in chunks")
    heads = next(x for x in outputs.values() if x is not None).shape[1]
    for start in range(0, heads, chunk):
        heads_of = slice(start, min(start + chunk, heads))
        part_in = {name: _heads(x, heads_of, partial(backend.cupy.array, order="C")) for name, x in inputs.items()}
        part_out = {
            name: _heads(x, heads_of, partial(backend.cupy.empty_like, order="C")) for name, x in outputs.items()
        }
        run(**part_in, **part_out)
        for name, x in outputs.items():
            if x is not None:
                x[:, heads_of] = part_out[name]


def span_for(stage, a, b, v, *others, edge=None):
    """(S, VEC, NV) of the head-span kernel of ``stage`` for these arrays, or None where it
    does not run (see _span_shape; a stage left out of SPAN_STAGES). Edge data runs only
    there: the callers split the heads first where the whole shape does not fit (_head_chunks)."""
    if stage not in SPAN_STAGES and edge is None:
        return None
    depth = a.shape[2] if a.ndim == 3 else 0
    arrays = [x for x in (a, b, v, *others, edge) if x is not None and x.ndim == 3]
    return _span_shape(v.shape[1], depth, v.shape[2], arrays, stage in SPAN_GROUP_STAGES)


def _head_chunks(a, b, v, *others, edge, edge_name):
    """Heads per launch for edge data (see _head_chunk), or None where the whole op fits the
    head-span kernels or has no edge data; a ValueError naming ``edge_name`` where one head
    is too wide for them."""
    if edge is None or v.shape[1] == 0 or span_for("forward", a, b, v, *others, edge=edge) is not None:
        return None
    depth, features = a.shape[2] if a.ndim == 3 else 0, v.shape[2]
    chunk, widest = _head_chunk(v.shape[1], depth, features, v.dtype.itemsize)
    if chunk is None:
        raise ValueError(f"{edge_name} on the GPU needs heads of at most {widest} elements; got {max(depth, features)}")
    return chunk


def run_span(stage, shape, score, graph, a, b, c, v, out1, lse_out=None, out2=None, edge=None, warps=None, **backward):
    """One head-span kernel of ``shape`` (from span_for) over the graph's fused plan (the
    backward passes but its empty rows, zeroed by zero_empty_rows), split rows merged after,
    or a backward pass of "dot" or "gat" in float32 or float64 over column blocks where they
    apply (gpu/column_blocks.py); ``edge``: the edge data, if any (edge_feat or edge_score, in
    the caller's edge order); ``warps``: the warps to start (default one per item; gatv2's row
    pass takes fewer, each summing a strided set of items); ``backward``: grad_out, lse,
    fwd_out, row_dot, edge_perm (over the transpose), grad_edge, att and att_partial as the
    stage takes them."""
    lanes, vec, nv = shape
    heads, features = v.shape[1], v.shape[2]
    name = f"attention_{score}_{stage}_span{vec}x{nv}" + ("" if edge is None else "_edges")
    depth = a.shape[2] if a.ndim == 3 else 0
    args = dict(H=heads, S=lanes, D=depth, F=features, a=a, b=b, c=c, v=v, out1=out1, lse_out=lse_out, out2=out2)
    args.update(edge=edge, **backward)
    if stage != "forward" and score in ("dot", "gat") and v.itemsize >= 4 and warps is None:
        row_bytes = v.itemsize * heads * (features + (depth if score == "dot" else 1))
        if run_blocked(name, graph, row_bytes, edge is not None, **args):
            return
    plan = plans.plan_for(graph, fused=True)
    state_dtype = accumulation_dtype(v.dtype)
    split_items = plan.num_split_items
    width1 = out1.shape[2] if out1.ndim == 3 else 1
    partial1 = scratch((split_items, heads * width1), state_dtype) if split_items else None
    softmax = stage == "forward" and score != "weights"  # the forward's partials carry softmax states
    partial_state = scratch((split_items, heads, 2), state_dtype) if split_items and softmax else None
    partial2 = scratch((split_items, heads * features), state_dtype) if split_items and out2 is not None else None
    # The backward passes skip the empty rows, whose own node rows (two or three) they would
    # load; the forward loads at most one and writes the row's lse too: measured on an H200
    # (R-MAT, half its rows empty), its empty rows filled apart made it 1.01-1.16x slower.
    skip_empty = stage != "forward"
    num_items = plan.num_items - (plan.num_empty if skip_empty else 0)
    launch(
        name,
        v.dtype,
        graph.index_dtype,
        warp_grid(num_items if warps is None else warps),
        items=plan.items,
        num_items=num_items,
        num_whole=plan.num_whole,
        indices=graph.indices,
        partial1=partial1,
        partial_state=partial_state,
        partial2=partial2,
        accumulate=0,
        **args,
    )
    if skip_empty:
        zero_empty_rows(graph, plan, out1, out2)
    out1_rows = out1 if out1.ndim == 3 else out1.reshape(out1.shape[0], heads, 1)
    merge_split_rows(graph, plan, out1_rows, partial1, partial_state, lse_out, softmax=softmax)
    if out2 is not None:
        merge_split_rows(graph, plan, out2, partial2)


def zero_empty_rows(graph, plan, out1, out2=None):
    """Zeros in the rows of out1 and out2 (each (N, ...), C-contiguous) that the plan's empty
    rows name."""
    arrays = [x for x in (out1, out2) if x is not None]
    widths = [x.size // max(x.shape[0], 1) for x in arrays] + [0] * (2 - len(arrays))
    chunk = 16 // out1.itemsize  # elements per 16-byte store
    chunks = -(-max(widths) // chunk)
    if not plan.num_empty or not chunks:
        return
    aligned = sum(1 << i for i, x in enumerate(arrays) if x.data.ptr % 16 == 0 and widths[i] % chunk == 0)
    launch(
        "attention_zero_empty",
        out1.dtype,
        graph.index_dtype,
        thread_grid(plan.num_empty * chunks),
        items=plan.items,
        first=plan.num_items - plan.num_empty,
        num_rows=plan.num_empty,
        chunks=chunks,
        aligned=aligned,
        W1=widths[0],
        out1=out1,
        W2=widths[1],
        out2=out2,
    )


def _fused_forward(score, graph, a, b, c, values, out, lse, edge=None, edge_name=None):
    chunk = _head_chunks(a, b, values, out, edge=edge, edge_name=edge_name)
    if chunk is not None:
        run = partial(_fused_forward, score, graph, c=c, edge_name=edge_name)
        _over_head_chunks(run, chunk, dict(a=a, b=b, values=values, edge=edge), dict(out=out, lse=lse))
        return
    shape = span_for("forward", a, b, values, out, edge=edge)
    if shape is not None:
        run_span("forward", shape, score, graph, a, b, c, values, out, lse_out=lse, edge=edge)
        return
    run_row_kernels(
        f"attention_{score}_forward", graph, values, out, _score_args(a, b, c), softmax=True, lse_out=lse, fused=True
    )


def row_dots(graph, grad_out, out):
    """(N, H) <grad_out[n, h], out[n, h]> in the accumulation dtype."""
    row_dot = scratch(out.shape[:2], accumulation_dtype(out.dtype))
    launch(
        "attention_row_dot",
        out.dtype,
        graph.index_dtype,
        thread_grid(row_dot.size),
        num_pairs=row_dot.size,
        F=out.shape[2],
        grad_out=grad_out,
        out=out,
        row_dot=row_dot,
    )
    return row_dot


def graph_attention(graph, q, k, v, scale, out, lse, edge_feat=None):
    _fused_forward("dot", graph, q, k, scale, v, out, lse, edge_feat, "edge_feat")


def gat_attention(graph, a_dst, a_src, values, negative_slope, out, lse, edge_score=None):
    _fused_forward("gat", graph, a_dst, a_src, negative_slope, values, out, lse, edge_score, "edge_score")


def _fused_backward(
    score, graph, a, b, c, v, out, grad_out, lse, grad_a, grad_b, grad_v, edge=None, grad_edge=None, edge_name=None
):
    """grad_a (sums over the rows), grad_b and grad_v (sums over the sources): on the
    head-span kernels where they apply (the row pass also computes row_dot, and grad_edge
    with edge data), else on the row kernels, whose sums of ds * dscore gather b (k) over the
    rows and a (q) over the sources for "dot", and ones for "gat"."""
    chunk = _head_chunks(a, b, v, out, grad_out, edge=edge, edge_name=edge_name)
    if chunk is not None:
        run = partial(_fused_backward, score, graph, c=c, edge_name=edge_name)
        inputs = dict(a=a, b=b, v=v, out=out, grad_out=grad_out, lse=lse, edge=edge)
        _over_head_chunks(run, chunk, inputs, dict(grad_a=grad_a, grad_b=grad_b, grad_v=grad_v, grad_edge=grad_edge))
        return
    heads = grad_v.shape[1]
    grad_shape = span_for("grad", a, b, v, out, grad_out, edge=edge)
    if grad_shape is not None:
        row_dot = scratch(out.shape[:2], accumulation_dtype(out.dtype))
        run_span(
            "grad",
            grad_shape,
            score,
            graph,
            a,
            b,
            c,
            v,
            grad_a,
            grad_out=grad_out,
            lse=lse,
            fwd_out=out,
            row_dot=row_dot,
            edge=edge,
            grad_edge=grad_edge,
        )
    else:
        row_dot = row_dots(graph, grad_out, out)
        b_values = b if score == "dot" else unit_values(graph, heads, v.dtype)[: graph.num_src]
        grad_args = _score_args(a, b, c, lse=lse, grad_out=grad_out, v=v, row_dot=row_dot)
        run_row_kernels(f"attention_{score}_grad", graph, b_values, grad_a, grad_args, fused=True)
    graph_t, perm = graph.transpose()
    sources_shape = span_for("sources", a, b, v, out, grad_out, edge=edge)
    if sources_shape is not None:
        backward = dict(grad_out=grad_out, lse=lse, row_dot=row_dot)
        if edge is not None:
            backward.update(edge=edge, edge_perm=perm)
        run_span("sources", sources_shape, score, graph_t, a, b, c, v, grad_b, out2=grad_v, **backward)
    else:
        a_values = a if score == "dot" else unit_values(graph, heads, v.dtype)[: graph.num_dst]
        grad_args = _score_args(a, b, c, lse=lse, grad_out=grad_out, v=v, row_dot=row_dot)
        run_row_kernels(f"attention_{score}_grad_t", graph_t, a_values, grad_b, grad_args, fused=True)
        probs_args = _score_args(a, b, c, lse=lse)
        run_row_kernels(f"attention_{score}_probs_t", graph_t, grad_out, grad_v, probs_args, fused=True)


def graph_attention_backward(
    graph, q, k, v, out, grad_out, lse, scale, grad_q, grad_k, grad_v, edge_feat=None, grad_edge_feat=None
):
    _fused_backward(
        "dot", graph, q, k, scale, v, out, grad_out, lse, grad_q, grad_k, grad_v, edge_feat, grad_edge_feat, "edge_feat"
    )


def gat_attention_backward(
    graph,
    a_dst,
    a_src,
    values,
    out,
    grad_out,
    lse,
    negative_slope,
    grad_a_dst,
    grad_a_src,
    grad_values,
    edge_score=None,
    grad_edge_score=None,
):
    heads = a_dst.shape[1]
    _fused_backward(
        "gat",
        graph,
        a_dst,
        a_src,
        negative_slope,
        values,
        out,
        grad_out,
        lse,
        grad_a_dst.reshape(graph.num_dst, heads, 1),
        grad_a_src.reshape(graph.num_src, heads, 1),
        grad_values,
        edge_score,
        grad_edge_score,
        "edge_score",
    )
