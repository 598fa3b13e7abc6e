"""Launcher of the row kernels of cuda/aggregate.cuh: weighted neighbour sums, used by spmm,
sddmm, attention_aggregate (weights from per-edge arrays, aggregate.cu) and the fused
attention ops (weights computed from node arrays, attention.cu)."""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu._launch import NULL, acc_dtype, i32, i64, launch, scratch, vector_width, warp_grid


def run_rows(family, prefix, graph, values, out, weight_args, softmax=False, lse_out=None, fused=False):
    """out[row] = sum over the row's edges of w * values[col], w from the kernels `prefix`_*
    of `family` with trailing arguments weight_args; softmax: the weights are a softmax
    over the row (lse_out, if given, receives its log-sum-exp); fused: use the plan of the
    fused attention kernels.

    values and out are (N, H, F); lse_out (N, H).
    """
    plan = plans.plan_for(graph, fused)
    heads, features = values.shape[1], values.shape[2]
    dtype, index_dtype = values.dtype, graph.index_dtype
    state_dtype = acc_dtype(dtype)
    split_items = plan.num_split_items
    partial_acc = scratch((split_items, heads * features), state_dtype) if split_items else NULL
    partial_state = scratch((split_items, heads, 2), state_dtype) if split_items and softmax else NULL
    lse_out_ptr = NULL if lse_out is None else lse_out
    # The batched kernels, with the widest aligned vector loads, hold up to 32 heads.
    variant = f"v{vector_width(features, values)}" if heads <= 32 else "wide"
    launch(family, f"{prefix}_{variant}", dtype, index_dtype, warp_grid(plan.num_items),
           (plan.items, i64(plan.num_items), i64(plan.num_whole), i32(heads), i32(features), graph.indices,
            values, out, lse_out_ptr, partial_acc, partial_state, *weight_args))
    if plan.num_split:
        launch("aggregate", "aggregate_merge_softmax" if softmax else "aggregate_merge_sum", dtype, index_dtype,
               warp_grid(plan.num_split),
               (plan.split_rows, i64(plan.num_split), i32(heads), i32(features), partial_acc, partial_state,
                out, lse_out_ptr))


def aggregate(mode, graph, values, out, weights=None, perm=None, lse_in=None, lse_out=None):
    """out[row] = sum over the row's edges of w * values[col]; w chosen by `mode`
    (ones, weights, weights_perm, softmax, probs_perm; see aggregate.cu).

    values and out are (N, H, F); weights (E, H); perm (E,) int64; lse (N, H).
    """
    weight_args = {
        "ones": (i32(0),),
        "weights": (weights,),
        "weights_perm": (weights, perm),
        "softmax": (weights,),
        "probs_perm": (weights, perm, lse_in),
    }[mode]
    run_rows("aggregate", f"aggregate_{mode}", graph, values, out, weight_args, softmax=mode == "softmax",
             lse_out=lse_out)
