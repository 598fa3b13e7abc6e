"""Launcher of the row kernels of cuda/aggregate.cuh: weighted neighbour sums, used by spmm,
sddmm, attention_aggregate (weights from per-edge arrays, aggregate.cu) and the fused
attention ops (weights computed from node arrays, attention.cu)."""

from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu.kernels import MAX_BATCHED_HEADS, launch, scratch, vector_width, warp_grid


def run_row_kernels(prefix, graph, values, out, weight_args, softmax=False, lse_out=None, fused=False):
    """out[row] = sum over the row's edges of w * values[col], w from the row kernels
    ``prefix``_* (given their own arguments by name in weight_args); softmax: the weights are a
    softmax over the row (lse_out, if given, receives its log-sum-exp); fused: use the plan
    of the fused attention kernels.

    values and out are (N, H, F); lse_out (N, H).
    """
    heads, features = values.shape[1], values.shape[2]
    if heads == 0:  # nothing to write; the kernels' lanes per head (WARP / H) need a head
        return
    plan = plans.plan_for(graph, fused)
    dtype, index_dtype = values.dtype, graph.index_dtype
    state_dtype = accumulation_dtype(dtype)
    split_items = plan.num_split_items
    partial_acc = scratch((split_items, heads * features), state_dtype) if split_items else None
    partial_state = scratch((split_items, heads, 2), state_dtype) if split_items and softmax else None
    variant = row_variant(heads, features, values)
    launch(
        f"{prefix}_{variant}",
        dtype,
        index_dtype,
        warp_grid(plan.num_items),
        items=plan.items,
        num_items=plan.num_items,
        num_whole=plan.num_whole,
        H=heads,
        F=features,
        indices=graph.indices,
        X=values,
        out=out,
        lse_out=lse_out,
        partial_acc=partial_acc,
        partial_state=partial_state,
        **weight_args,
    )
    merge_split_rows(graph, plan, out, partial_acc, partial_state, lse_out, softmax)


# The batched row kernels index a node row's H * F features with 32-bit ints (their tiles
# run past the last feature by up to a tile): wider rows take the wide kernels' 64-bit ones.
BATCHED_ROW_ELEMENTS = 2**30


def row_variant(heads, features, values):
    """The row kernel variant of (N, heads, features) values: batched with vectors of
    1, 2 or 4 elements ("v1", "v2", "v4"), or "wide" (more heads than lanes, or rows of
    BATCHED_ROW_ELEMENTS elements or more)."""
    if heads > MAX_BATCHED_HEADS or heads * features >= BATCHED_ROW_ELEMENTS:
        return "wide"
    return f"v{vector_width(features, values)}"


def merge_split_rows(graph, plan, out, partial_acc, partial_state=None, lse_out=None, softmax=False):
    """Merge the partials of the plan's split rows into out (N, H, F) (and lse_out), in item
    order: plain sums, or softmax states (aggregate_merge_*). A row kernel wrote partial_acc
    (split items, H * F) and, for a softmax, partial_state (split items, H) for its items
    from num_whole on."""
    if not plan.num_split:
        return
    launch(
        "aggregate_merge_softmax" if softmax else "aggregate_merge_sum",
        out.dtype,
        graph.index_dtype,
        (plan.num_split,),  # a block per split row
        split_rows=plan.split_rows,
        num_split=plan.num_split,
        H=out.shape[1],
        F=out.shape[2],
        partial_acc=partial_acc,
        partial_state=partial_state,
        out=out,
        lse_out=lse_out,
    )


def aggregate(mode, graph, values, out, lse_out=None, **weight_args):
    """out[row] = sum over the row's edges of w * values[col]; w chosen by ``mode`` (ones,
    weights, weights_perm, softmax, probs_perm; see aggregate.cu), from weight_args (weights
    or scores (E, H), perm (E,) int64, lse (N, H)).

    values and out are (N, H, F).
    """
    run_row_kernels(f"aggregate_{mode}", graph, values, out, weight_args, softmax=mode == "softmax", lse_out=lse_out)
