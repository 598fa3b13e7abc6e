"""Launcher of cuda/aggregate.cu: weighted neighbour sums, used by spmm, sddmm and attention."""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu._launch import NULL, acc_dtype, i32, i64, launch, scratch, vector_width, warp_grid


def aggregate(mode, graph, values, out, weights=None, perm=None, lse_in=None, lse_out=None):
    """out[row] = sum over the row's edges of w * values[col]; w chosen by `mode`
    (ones, weights, weights_perm, softmax, probs_perm; see aggregate.cu).

    values and out are (N, H, F); weights (E, H); perm (E,) int64; lse (N, H).
    """
    plan = plans.plan_for(graph)
    heads, features = values.shape[1], values.shape[2]
    dtype, index_dtype = values.dtype, graph.index_dtype
    state_dtype = acc_dtype(dtype)
    split_items = plan.num_split_items
    partial_acc = scratch((split_items, heads * features), state_dtype) if split_items else NULL
    partial_state = scratch((split_items, heads, 2), state_dtype) if split_items and mode == "softmax" else NULL
    lse_out_ptr = NULL if lse_out is None else lse_out
    launch("aggregate", _rows_kernel(mode, values, heads, features), dtype, index_dtype, warp_grid(plan.num_items),
           (plan.items, i64(plan.num_items), i64(plan.num_whole), i32(heads), i32(features), graph.indices,
            NULL if weights is None else weights, NULL if perm is None else perm,
            NULL if lse_in is None else lse_in, values, out, lse_out_ptr, partial_acc, partial_state))
    if plan.num_split:
        launch("aggregate", f"aggregate_merge_{mode}", dtype, index_dtype, warp_grid(plan.num_split),
               (plan.split_rows, i64(plan.num_split), i32(heads), i32(features), partial_acc, partial_state,
                out, lse_out_ptr))


def _rows_kernel(mode, values, heads, features):
    """The batched kernel with the widest aligned vector loads for up to 32 heads, else the wide one."""
    if heads > 32:
        return f"aggregate_rows_{mode}"
    return f"aggregate_batched_v{vector_width(features, values)}_{mode}"
