"""Launchers of cuda/softmax.cu: edge_softmax, its backward, and row log-sum-exp."""

from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu import recording
from cupy_csrattn.gpu.derived import transpose_edge_orders
from cupy_csrattn.gpu.kernels import WARP, launch, scratch, warp_grid
from cupy_csrattn.gpu.sddmm import gather_edges


def run_softmax(mode, graph, a, g=None, lse_in=None, out=None, lse_out=None):
    """Softmax mode ``mode`` (forward, lse, grad_probs, grad_scores; see softmax.cu) over the
    rows of an (E, H) array ``a``: runs of short rows staged in a warp's shared memory, wider
    rows in a block's, rows that fit a warp's stage but no run staged alone, other short rows
    in lane groups, the others one warp per plan item, split rows merged and then written."""
    heads = a.shape[1]
    dtype, index_dtype = a.dtype, graph.index_dtype
    # The staged kernels stage g as the data type: a g in another (grad_scores's float32 dot
    # products of float16 data) takes the others alone, the layout of a stage of no elements.
    staged = g is None or g.dtype == dtype
    capacity = plans.run_capacity(dtype, 1 if g is None else 2) if staged else 0
    layout = plans.softmax_layout(graph, heads, capacity, plans.group_lane_elements(dtype))
    plan = layout.plan
    state_dtype = accumulation_dtype(dtype)
    partial = scratch((plan.num_split_items, heads, 2), state_dtype) if plan.num_split_items else None
    arrays = dict(a=a, g=g, lse_in=lse_in, out=out)
    # The arguments the kernels of whole rows (block rows, runs, lane groups) share, and those
    # of the kernels over the layout's items (the first pass and the split items' write).
    whole_rows = dict(H=heads, indptr=plan.indptr, lse_out=lse_out, **arrays)
    item_list = dict(items=layout.items, num_items=layout.num_items, num_whole=layout.num_whole, H=heads)
    # The whole-row kernels and the first pass of the others take disjoint rows (and write
    # disjoint parts of out and lse_out, the partial states of split rows apart): a replayed
    # call runs them side by side, so that none waits for another's tail.
    with recording.independent():
        launch(
            f"softmax_block_rows_{mode}",
            dtype,
            index_dtype,
            (layout.num_block_packs,),
            rows=layout.block_rows,
            stage_offsets=layout.block_stage_offsets,
            packs=layout.block_packs,
            num_packs=layout.num_block_packs,
            **whole_rows,
        )
        # The runs, then the rows staged alone (runs of one row).
        for runs, num_runs, R in (
            (layout.runs, layout.num_runs, layout.run_rows),
            (layout.single_rows, len(layout.single_rows), 1),
        ):
            launch(
                f"softmax_runs_{mode}",
                dtype,
                index_dtype,
                warp_grid(num_runs),
                runs=runs,
                num_runs=num_runs,
                R=R,
                num_rows=graph.num_dst,
                **whole_rows,
            )
        for lanes, per_lane, rows in layout.groups:
            rows_per_warp = WARP // lanes
            launch(
                f"softmax_groups_{mode}",
                dtype,
                index_dtype,
                warp_grid((len(rows) + rows_per_warp - 1) // rows_per_warp),
                rows=rows,
                num_rows=len(rows),
                S=lanes,
                K=per_lane,
                **whole_rows,
            )
        launch(
            f"softmax_rows_{mode}",
            dtype,
            index_dtype,
            warp_grid(layout.num_items),
            lse_out=lse_out,
            partial=partial,
            **item_list,
            **arrays,
        )
    if not plan.num_split:
        return
    row_states = scratch((plan.num_split, heads, 2), state_dtype)
    launch(
        f"softmax_merge_{mode}",
        dtype,
        index_dtype,
        warp_grid(plan.num_split),
        split_rows=plan.split_rows,
        num_split=plan.num_split,
        H=heads,
        partial=partial,
        row_states=row_states,
        lse_out=lse_out,
    )
    if mode != "lse":
        launch(
            f"softmax_write_{mode}",
            dtype,
            index_dtype,
            warp_grid(plan.num_split_items),
            row_states=row_states,
            **item_list,
            **arrays,
        )


def _by_source(mode, graph, a, g, out):
    """Softmax mode ``mode`` over each source's edges: the edge arrays are gathered into the
    order of the cached transpose (whose rows are the sources), the rows of the transpose are
    normalized there, and the result is gathered back, all by kernel launches (so such a
    call replays; see gpu/replay.py)."""
    graph_t, _ = graph.transpose()
    perm, inverse = transpose_edge_orders(graph)
    a_t = scratch(a.shape, a.dtype)
    gather_edges(graph, a, perm, a_t)
    g_t = None
    if g is not None:
        g_t = scratch(g.shape, g.dtype)
        gather_edges(graph, g, perm, g_t)
    out_t = scratch(out.shape, out.dtype)
    run_softmax(mode, graph_t, a_t, g=g_t, out=out_t)
    gather_edges(graph, out_t, inverse, out)


def edge_softmax(graph, scores, norm_by, out):
    if norm_by == "src":
        _by_source("forward", graph, scores, None, out)
    else:
        run_softmax("forward", graph, scores, out=out)


def edge_softmax_backward(graph, probs, grad_probs, norm_by, out):
    if norm_by == "src":
        _by_source("grad_probs", graph, probs, grad_probs, out)
    else:
        run_softmax("grad_probs", graph, probs, g=grad_probs, out=out)
