"""Column blocks: the fused backward passes over a graph whose gathered node rows outgrow L2.

Each pass of the fused backward gathers two node rows per edge (over the rows: k and v, or
gat's a_src term and v; over the transpose: q and grad_out). Where those arrays are several
times the device's L2 and rows are long (every row reaching a large share of the sources),
the warps running at once gather from all of them at random and most gathers miss L2. Split
at the boundaries of B equal blocks of source ids (each row's sources sorted), a pass runs as
B launches, launch b taking every row's edges into block b: the warps running at once then
gather from a B-th of the arrays. Launch 0 writes each row's sums (every row, those with no
edge in block 0 too), later launches add theirs to what the row holds (the span kernels'
``accumulate``), in block order: deterministic, no atomics, no partials, nothing per edge.

Measured on an H100 (dense graph of 100k rows of 400-600 edges, graph_attention float32,
rows' pieces as split items merged after, B = 8): forward 0.69x, backward 0.67x the time of
the unblocked passes; on an H200 the backward ran 1.17x slower that way
(benchmarks/results/column_blocks_*).
"""

import functools

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.gpu import plan as plans
from cupy_csrattn.gpu.kernels import launch, warp_grid

#: None: column_blocks_for chooses; 0: never; k >= 2: k blocks wherever they apply (tests).
COLUMN_BLOCKS = None
#: Blocks only where a row's piece averages at least this many edges (each launch loads every
#: row's own rows again).
MIN_PIECE_EDGES = 32


class ColumnBlocks:
    """items: per block, (n_b, 4) int64 items (row, begin, end, -1) into ``indices``; block 0
    names every row. indices: the graph's, sorted within each row (the graph's own array
    where they already are)."""

    def __init__(self, items, indices):
        self.items = items
        self.indices = indices


def column_blocks_for(graph, row_bytes, edge_order_matters):
    """The ColumnBlocks of a backward pass over ``graph`` gathering ``row_bytes`` per source
    node, or None where the pass runs unblocked: the gathered rows fit twice the L2, or rows
    are short, or the fused plan splits rows (its hub rows: the plan's split items serve them),
    or ``edge_order_matters`` (edge data read by edge position) and the rows are not sorted."""
    blocks = COLUMN_BLOCKS
    if blocks is None:
        l2_bytes = _l2_bytes(backend.cupy.cuda.runtime.getDevice())
        blocks = choose_blocks(graph.num_dst, graph.num_src, graph.num_edges, row_bytes, l2_bytes)
    if blocks < 2 or not graph.num_edges:
        return None
    if plans.plan_for(graph, fused=True).num_split:
        return None
    indices, already_sorted = graph.cached("indices sorted within rows", lambda: _sorted_within_rows(graph))
    if edge_order_matters and not already_sorted:
        return None
    return graph.cached(("column blocks", blocks), lambda: ColumnBlocks(_block_items(graph, indices, blocks), indices))


def choose_blocks(num_dst, num_src, num_edges, row_bytes, l2_bytes):
    """Column blocks for a pass gathering ``row_bytes`` from each of ``num_src`` nodes: the
    gathered bytes over half the L2, rounded (a block's rows then about fill half of it), where
    that is 2 or more and rows' pieces average MIN_PIECE_EDGES edges or more; else 0."""
    blocks = round(2 * num_src * row_bytes / max(l2_bytes, 1))
    if blocks < 2 or num_edges < MIN_PIECE_EDGES * blocks * num_dst:
        return 0
    return blocks


def run_blocked(name, graph, row_bytes, edge_order_matters, **args):
    """Launch head-span kernel ``name`` (a backward pass; ``args`` its arguments but the
    plan's) over the column blocks of ``graph`` where they apply (column_blocks_for); False,
    with nothing launched, where they do not."""
    blocks = column_blocks_for(graph, row_bytes, edge_order_matters)
    if blocks is None:
        return False
    for block, items in enumerate(blocks.items):
        launch(
            name,
            args["v"].dtype,
            graph.index_dtype,
            warp_grid(len(items)),
            items=items,
            num_items=len(items),
            num_whole=len(items),
            indices=blocks.indices,
            accumulate=int(block > 0),
            **args,
        )
    return True


@functools.lru_cache(maxsize=None)
def _l2_bytes(device_id):
    return backend.cupy.cuda.runtime.getDeviceProperties(device_id)["l2CacheSize"]


def _edge_rows(graph):
    cupy = backend.cupy
    indptr = graph.indptr.astype(np.int64, copy=False)
    return cupy.searchsorted(indptr[1:], cupy.arange(graph.num_edges, dtype=np.int64), side="right")


def _sorted_within_rows(graph):
    """(indices sorted within each row, whether the graph's already were: then its own)."""
    cupy = backend.cupy
    rows, indices = _edge_rows(graph), graph.indices
    unsorted = (indices[1:] < indices[:-1]) & (rows[1:] == rows[:-1])
    if not bool(unsorted.any()):  # host sync, once per graph
        return indices, True
    order = cupy.argsort(rows * max(graph.num_src, 1) + indices.astype(np.int64))
    return cupy.ascontiguousarray(indices[order]), False


def _block_items(graph, indices, blocks):
    """Per block, its items: (row, begin, end, -1), every row in block 0, else the rows with
    edges in the block."""
    cupy = backend.cupy
    n = graph.num_dst
    width = -(-graph.num_src // blocks)
    keys = _edge_rows(graph) * blocks + indices.astype(np.int64) // width
    counts = cupy.bincount(keys, minlength=n * blocks).reshape(n, blocks)
    ends = graph.indptr.astype(np.int64)[:-1, None] + cupy.cumsum(counts, axis=1)
    begins = ends - counts
    items = []
    for block in range(blocks):
        rows = cupy.arange(n, dtype=np.int64) if block == 0 else cupy.flatnonzero(counts[:, block])  # host sync
        pieces = [rows, begins[rows, block], ends[rows, block], cupy.full_like(rows, -1)]
        items.append(cupy.ascontiguousarray(cupy.stack(pieces, axis=1)))
    return items
