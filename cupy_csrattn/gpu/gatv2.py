"""Launchers of the fused GATv2 attention, forward and backward: on the head-span kernels of
attention.cu where the shape fits them (gpu/attention.span_for), else on the row kernels
of gatv2.cu.

Nothing per edge is allocated. Besides the outputs, the forward holds the split rows'
partial states; the backward one (N, H) array (row_dot), the split rows' partials of the
two gradient passes and att_partial, (at most ATT_GRAD_WARPS, H, D), the per-warp terms of
grad_att that gatv2_reduce_att adds up in a fixed order.
"""

from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu.aggregate import merge_split_rows
from cupy_csrattn.gpu.attention import row_dots, run_span, span_for
from cupy_csrattn.gpu.kernels import BLOCK_WARPS, WARP, launch, scratch, warp_grid

# Warps of gatv2_grad_dst, each summing the grad_att terms of a strided set of plan items
# into its own slot (fewer when the plan has fewer items). A constant, not the device's
# resident warps, so that the fixed summation order is the same on every device.
ATT_GRAD_WARPS = 4096


def heads_per_warp(H, D):
    """G, the heads one warp serves side by side (a power of two, at most WARP): the most that
    leave each head WARP / G >= D lanes, and no more than H needs."""
    G = 1
    while G < WARP and G < H and WARP // (2 * G) >= D:
        G *= 2
    return G


def _row_args(graph, plan, x_dst, x_src, att, negative_slope):
    heads, head_dim = x_dst.shape[1], x_dst.shape[2]
    return dict(
        items=plan.items,
        num_items=plan.num_items,
        num_whole=plan.num_whole,
        H=heads,
        D=head_dim,
        G=heads_per_warp(heads, head_dim),
        indices=graph.indices,
        x_dst=x_dst,
        x_src=x_src,
        att=att,
        slope=negative_slope,
    )


def _partial_acc(plan, heads, head_dim, dtype):
    if not plan.num_split_items:
        return None
    return scratch((plan.num_split_items, heads * head_dim), accumulation_dtype(dtype))


def gatv2_attention(graph, x_dst, x_src, att, negative_slope, out, lse):
    """x_dst (num_dst, H, D), x_src (num_src, H, D), att (H, D); out (num_dst, H, D), lse (num_dst, H) or None."""
    heads, head_dim = x_dst.shape[1], x_dst.shape[2]
    if heads == 0 or (head_dim == 0 and lse is None):  # nothing to write
        return
    shape = _span_shape("forward", x_dst, x_src, att, out)  # out: its rows are stored a vector at a time
    if shape is not None:
        run_span("forward", shape, "gatv2", graph, x_dst, x_src, negative_slope, x_src, out, lse_out=lse, att=att)
        return
    plan = plans.plan_for(graph, fused=True)
    dtype = x_dst.dtype
    partial_acc = _partial_acc(plan, heads, head_dim, dtype)
    partial_state = (
        scratch((plan.num_split_items, heads, 2), accumulation_dtype(dtype)) if plan.num_split_items else None
    )
    launch(
        "gatv2_forward",
        dtype,
        graph.index_dtype,
        warp_grid(plan.num_items),
        **_row_args(graph, plan, x_dst, x_src, att, negative_slope),
        out=out,
        lse_out=lse,
        partial_acc=partial_acc,
        partial_state=partial_state,
    )
    merge_split_rows(graph, plan, out, partial_acc, partial_state, lse, softmax=True)


def gatv2_attention_backward(
    graph, x_dst, x_src, att, out, grad_out, lse, negative_slope, grad_x_dst, grad_x_src, grad_att
):
    """grad_x_dst, grad_x_src shaped like x_dst, x_src; grad_att (H, D)."""
    heads, head_dim = x_dst.shape[1], x_dst.shape[2]
    if heads * head_dim == 0:  # every gradient is empty
        return
    dtype = x_dst.dtype
    shapes = [_span_shape(stage, x_dst, x_src, att, out, grad_out) for stage in ("grad", "sources")]
    if None not in shapes:
        grads = grad_x_dst, grad_x_src, grad_att
        _span_backward(shapes, graph, x_dst, x_src, att, out, grad_out, lse, negative_slope, *grads)
        return
    row_dot = row_dots(graph, grad_out, out)
    grad_args = dict(grad_out=grad_out, lse=lse, row_dot=row_dot)

    plan = plans.plan_for(graph, fused=True)
    if plan.num_items == 0:  # no destination rows: no edges, nothing to sum
        grad_att[...] = 0
    else:
        grid = warp_grid(min(plan.num_items, ATT_GRAD_WARPS))
        num_slots = grid[0] * BLOCK_WARPS  # every warp of the grid writes its slot
        att_partial = scratch((num_slots, heads * head_dim), accumulation_dtype(dtype))
        partial_acc = _partial_acc(plan, heads, head_dim, dtype)
        launch(
            "gatv2_grad_dst",
            dtype,
            graph.index_dtype,
            grid,
            **_row_args(graph, plan, x_dst, x_src, att, negative_slope),
            **grad_args,
            grad=grad_x_dst,
            partial_acc=partial_acc,
            att_partial=att_partial,
        )
        merge_split_rows(graph, plan, grad_x_dst, partial_acc)
        _reduce_att(graph, att_partial, grad_att)

    graph_t, _ = graph.transpose()
    plan_t = plans.plan_for(graph_t, fused=True)
    partial_acc = _partial_acc(plan_t, heads, head_dim, dtype)
    launch(
        "gatv2_grad_src",
        dtype,
        graph_t.index_dtype,
        warp_grid(plan_t.num_items),
        **_row_args(graph_t, plan_t, x_dst, x_src, att, negative_slope),
        **grad_args,
        grad=grad_x_src,
        partial_acc=partial_acc,
    )
    merge_split_rows(graph_t, plan_t, grad_x_src, partial_acc)


def _span_shape(stage, x_dst, x_src, att, *others):
    """(S, VEC, NV) of the head-span kernel of ``stage`` for these arrays (att loaded like a
    node row), or None: they do not apply, or the heads have no features (the row kernels
    handle D = 0)."""
    if x_dst.shape[2] == 0:
        return None
    return span_for(stage, x_dst, x_src, x_src, att.reshape(1, *att.shape), *others)


def _reduce_att(graph, att_partial, grad_att):
    """grad_att (H, D) = the sum of att_partial's (num_slots, H * D) rows in a fixed order."""
    launch(
        "gatv2_reduce_att",
        grad_att.dtype,
        graph.index_dtype,
        warp_grid(grad_att.size),
        num_slots=att_partial.shape[0],
        HD=grad_att.size,
        att_partial=att_partial,
        grad_att=grad_att,
    )


def _span_backward(shapes, graph, x_dst, x_src, att, out, grad_out, lse, slope, grad_x_dst, grad_x_src, grad_att):
    """The backward on the head-span kernels: the row pass (grad_x_dst, row_dot, and the
    per-warp terms of grad_att over a fixed number of warps), then the pass over the
    transpose (grad_x_src: the score's part and the message's together)."""
    plan = plans.plan_for(graph, fused=True)
    if plan.num_items == 0:  # no destination rows: no edges, nothing to sum
        grad_x_src[...] = 0
        grad_att[...] = 0
        return
    heads, head_dim = x_dst.shape[1], x_dst.shape[2]
    row_dot = scratch((graph.num_dst, heads), accumulation_dtype(out.dtype))
    warps = min(plan.num_items, ATT_GRAD_WARPS)
    # Every warp of the grid writes its slot, those past the plan's items zeros.
    att_partial = scratch((warp_grid(warps)[0] * BLOCK_WARPS, heads * head_dim), accumulation_dtype(out.dtype))
    span = dict(score="gatv2", a=x_dst, b=x_src, c=slope, v=x_src, grad_out=grad_out, lse=lse, att=att)
    run_span(
        "grad",
        shapes[0],
        graph=graph,
        out1=grad_x_dst,
        fwd_out=out,
        row_dot=row_dot,
        att_partial=att_partial,
        warps=warps,
        **span,
    )
    _reduce_att(graph, att_partial, grad_att)
    graph_t, _ = graph.transpose()
    run_span("sources", shapes[1], graph=graph_t, out1=grad_x_src, row_dot=row_dot, **span)
