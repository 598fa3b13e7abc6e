"""Column blocks: the fused backward passes over a graph whose gathered node rows outgrow L2.

Each pass of the fused backward gathers two node rows per edge (over the rows: k and v, or
gat's a_src term and v; over the transpose: q and grad_out). Where those arrays are several
times the device's L2 and rows are long (every row reaching a large share of the sources),
the warps running at once gather from all of them at random and most gathers miss L2. Split
at the boundaries of B equal blocks of source ids (each row's sources sorted), a pass runs as
B launches, launch b taking every row's edges into block b: the warps running at once then
gather from a B-th of the arrays. Launch 0 writes each row's sums (every row, those with no
edge in block 0 too), later launches add theirs to what the row holds (the span kernels'
``accumulate``), in block order: deterministic, no atomics, no partials, nothing per edge in
a call (a graph whose rows are not sorted caches a sorted copy of its indices).

Where the device's memory outpaces its multiprocessors, the unblocked passes gain less from
the blocks than the extra launches and own-row loads cost. Measured (benchmarks/results/
column_blocks_*), dense graph of 100k rows of 400-600 edges, float32: on an H100 (3.35 TB/s,
12.8 bytes per multiprocessor per clock) graph_attention's backward at H=4, D=F=64 in 8
blocks took 34.4 ms against 56.4 unblocked (the unfused chain's backward: 46.0), at H=8,
D=F=16 in 4 blocks 17.7 against 25.3; gat_attention's 18.4 against 22.8 and 11.4 against
12.0. On an H200 (4.8 TB/s by its datasheet: about 18.4 bytes per multiprocessor per clock)
the same blocks, each row's pieces written as split items and merged after, made
graph_attention's backward 1.17x slower at H=4, D=F=64 (29.4 ms unblocked) and 1.01-1.05x at
H=8, D=F=16: devices above MAX_DRAM_BYTES_PER_SM_CLOCK, between the two, do not block.
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
#: Bytes per edge that building a graph's blocks (and its indices sorted within rows) may hold
#: at once, in int64 temporaries; graphs whose build would take over half the device's memory
#: run unblocked.
BUILD_BYTES_PER_EDGE = 48
#: Blocks only on devices whose peak memory bandwidth, in bytes per multiprocessor per clock,
#: is at most this (the H100 measured above: 12.8 from its properties; the H200: about 18.4).
MAX_DRAM_BYTES_PER_SM_CLOCK = 15.0


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
    or ``edge_order_matters`` (edge data read by edge position) and the rows are not sorted, or
    building the blocks would take over half the device's memory."""
    blocks = COLUMN_BLOCKS
    if blocks is None:
        memory = device_memory(backend.cupy.cuda.runtime.getDevice())
        blocks = choose_blocks(graph.num_dst, graph.num_src, graph.num_edges, row_bytes, *memory)
    if blocks < 2 or not graph.num_edges:
        return None
    if plans.plan_for(graph, fused=True).num_split:
        return None
    device_bytes = backend._gpu_memory_bytes(backend.cupy.cuda.runtime.getDevice())
    if BUILD_BYTES_PER_EDGE * graph.num_edges > device_bytes // 2:  # the build's temporaries
        return None
    indices, already_sorted = graph.cached("indices sorted within rows", lambda: _sorted_within_rows(graph))
    if edge_order_matters and not already_sorted:
        return None
    return graph.cached(("column blocks", blocks), lambda: ColumnBlocks(_block_items(graph, indices, blocks), indices))


def choose_blocks(num_dst, num_src, num_edges, row_bytes, l2_bytes, dram_bytes_per_sm_clock):
    """Column blocks for a pass gathering ``row_bytes`` from each of ``num_src`` nodes: the
    gathered bytes over half the L2, rounded (a block's rows then about fill half of it), where
    that is 2 or more, rows' pieces average MIN_PIECE_EDGES edges or more and the device's
    memory is no faster than MAX_DRAM_BYTES_PER_SM_CLOCK; else 0."""
    if dram_bytes_per_sm_clock > MAX_DRAM_BYTES_PER_SM_CLOCK:
        return 0
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
def device_memory(device_id):
    """(L2 bytes, peak memory bandwidth in bytes per multiprocessor per clock) of a device, from
    its properties (two transfers per memory clock over the bus)."""
    properties = backend.cupy.cuda.runtime.getDeviceProperties(device_id)
    bandwidth = 2 * properties["memoryClockRate"] * properties["memoryBusWidth"] / 8  # bytes per ms (kHz clocks)
    sm_clocks = properties["multiProcessorCount"] * properties["clockRate"]  # per ms
    return properties["l2CacheSize"], bandwidth / max(sm_clocks, 1)


def _sorted_within_rows(graph):
    """(indices sorted within each row, whether the graph's already were: then its own)."""
    cupy = backend.cupy
    rows, indices = graph.row_of_edge().astype(np.int64), graph.indices
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
    keys = graph.row_of_edge().astype(np.int64) * blocks + indices.astype(np.int64) // width
    counts = cupy.bincount(keys, minlength=n * blocks).reshape(n, blocks)
    ends = graph.indptr.astype(np.int64)[:-1, None] + cupy.cumsum(counts, axis=1)
    begins = ends - counts
    items = []
    for block in range(blocks):
        rows = cupy.arange(n, dtype=np.int64) if block == 0 else cupy.flatnonzero(counts[:, block])  # host sync
        pieces = [rows, begins[rows, block], ends[rows, block], cupy.full_like(rows, -1)]
        items.append(cupy.ascontiguousarray(cupy.stack(pieces, axis=1)))
    return items
