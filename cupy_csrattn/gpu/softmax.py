"""Launchers of cuda/softmax.cu: edge_softmax, its backward, and row log-sum-exp."""
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu._launch import NULL, acc_dtype, i32, i64, launch, scratch, warp_grid


def run_rows(mode, graph, a, g=None, lse_in=None, out=None, lse_out=None):
    """Run softmax mode `mode` (forward, lse, grad_probs, grad_scores) over an (E, H) array `a`."""
    heads = a.shape[1]
    layout = plans.softmax_layout(graph, heads)
    plan = layout.plan
    dtype, index_dtype = a.dtype, graph.index_dtype
    state_dtype = acc_dtype(dtype)
    partial = scratch((plan.num_split_items, heads, 2), state_dtype) if plan.num_split_items else NULL
    pointers = (NULL if g is None else g, NULL if lse_in is None else lse_in, NULL if out is None else out)
    lse_out_ptr = NULL if lse_out is None else lse_out
    for size, rows in layout.groups:
        rows_per_warp = 32 // size
        launch("softmax", f"softmax_groups_{mode}", dtype, index_dtype,
               warp_grid((len(rows) + rows_per_warp - 1) // rows_per_warp),
               (rows, i64(len(rows)), i32(size), i32(heads), plan.indptr, a, *pointers, lse_out_ptr))
    launch("softmax", f"softmax_rows_{mode}", dtype, index_dtype, warp_grid(layout.num_items),
           (layout.items, i64(layout.num_items), i64(layout.num_whole), i32(heads), a, *pointers,
            lse_out_ptr, partial))
    if not plan.num_split:
        return
    row_states = scratch((plan.num_split, heads, 2), state_dtype)
    launch("softmax", f"softmax_merge_{mode}", dtype, index_dtype, warp_grid(plan.num_split),
           (plan.split_rows, i64(plan.num_split), i32(heads), partial, row_states,
            NULL if lse_out is None else lse_out))
    if mode != "lse":
        launch("softmax", f"softmax_write_{mode}", dtype, index_dtype, warp_grid(plan.num_split_items),
               (layout.items, i64(layout.num_items), i64(layout.num_whole), i32(heads), a, *pointers, row_states))


def edge_softmax(graph, scores, out):
    run_rows("forward", graph, scores, out=out)


def edge_softmax_backward(graph, probs, grad_probs, out):
    run_rows("grad_probs", graph, probs, g=grad_probs, out=out)
