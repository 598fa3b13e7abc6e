"""The per-graph work plan: which warp handles which edges of which row.

Rows of up to WHOLE_ROW_EDGES edges are one work item each (empty rows too: their outputs
must be written). Longer rows are split into at most MAX_CHUNKS items of WHOLE_ROW_EDGES
edges or more (a row's last item may be shorter); their partial states are merged per row in
item order, so results do not depend on scheduling.

Whole-row items come first, longest first (ties in row order), then the split items. A
block's warps take consecutive items and the block holds its place on the multiprocessor
until its longest item ends: in row order a skewed graph puts a long row beside short and
empty ones in most blocks, whose warps then sit idle; sorted, a block's items are about
equally long, and the longest start first. On a graph of equal degrees the order is the
rows' own.

The fused attention kernels, whose every edge is a chain of dependent loads (index, then
the score's node rows, then the values), split rows sooner: past E / (warps the device
holds at once), but at least FUSED_WHOLE_ROW_EDGES, so that a hub row is spread over many
warps while rows no longer than one warp's fair share stay whole. The rows they split go
in chunks of a FUSED_CHUNKS_PER_SHARE-th of that share: the split items run last, so their
length is the launch's tail. Their partial states number at most about
FUSED_CHUNKS_PER_SHARE + 1 times the resident warps, whatever the graph's size. The fused
plan puts its empty rows last, after the split items (num_empty of them, in row order): the
head-span backward passes are launched over the items before them, and their gradients are
zeroed apart (attention_zero_empty); every other kernel takes them as whole rows.

Each plan is built once per graph (host syncs to size it) and cached on the graph.
"""

import functools

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.backend import accumulation_dtype
from cupy_csrattn.gpu.kernels import (
    BLOCK_WARPS,
    CACHED,
    MAX_BATCHED_HEADS,
    MAX_BLOCK_ROWS,
    MAX_RUN_ROWS,
    RUN_STAGE_BYTES,
    WARP,
)

WHOLE_ROW_EDGES = 1024
FUSED_WHOLE_ROW_EDGES = 128
FUSED_CHUNKS_PER_SHARE = 4
MAX_CHUNKS = 1024


class Plan:
    """items: (num_items, 4) int64 rows (row, begin, end, split row or -1): num_whole whole-row
    items (longest first), the split items, then num_empty empty rows (whole-row items, in row
    order; only where the plan was built with empty_last, else they end the whole-row items);
    split_rows: (num_split, 3) int64 rows (row, first split item, item count)."""

    def __init__(self, items, num_whole, split_rows, indptr, num_empty=0):
        self.indptr = indptr  # int64
        self.items = items
        self.num_items = len(items)
        self.num_whole = num_whole
        self.num_empty = num_empty
        self.num_split_items = self.num_items - num_whole - num_empty
        self.split_rows = split_rows
        self.num_split = len(split_rows)


def _build(graph, whole_row_edges, chunk_edges, empty_last=False):
    """The plan splitting rows longer than whole_row_edges into items of chunk_edges (or more,
    to keep to MAX_CHUNKS items per row); empty_last: empty rows after the split items."""
    cupy = backend.cupy
    indptr = graph.indptr.astype(np.int64, copy=False)
    degrees = cupy.diff(indptr)
    is_split = degrees > whole_row_edges
    whole = cupy.flatnonzero(~is_split & (degrees > 0) if empty_last else ~is_split)  # host sync (its size)
    whole = whole[cupy.argsort(-degrees[whole], kind="stable")]  # longest first, ties in row order
    whole_items = cupy.stack([whole, indptr[whole], indptr[whole + 1], cupy.full_like(whole, -1)], axis=1)

    split = cupy.flatnonzero(is_split)  # host sync
    split_degrees = degrees[split]
    chunk = cupy.maximum(chunk_edges, -(-split_degrees // MAX_CHUNKS))
    counts = -(-split_degrees // chunk)
    first = cupy.cumsum(counts) - counts
    num_split_items = int(counts.sum()) if len(split) else 0  # host sync (once per graph)
    item = cupy.arange(num_split_items, dtype=np.int64)
    owner = cupy.searchsorted(first, item, side="right") - 1  # split-row index of each item
    begin = indptr[split][owner] + (item - first[owner]) * chunk[owner]
    end = cupy.minimum(begin + chunk[owner], indptr[split + 1][owner])
    split_items = cupy.stack([split[owner], begin, end, owner], axis=1)

    empty = cupy.flatnonzero(degrees == 0) if empty_last else whole[:0]  # host sync
    empty_items = cupy.stack([empty, indptr[empty], indptr[empty], cupy.full_like(empty, -1)], axis=1)

    items = cupy.concatenate([whole_items, split_items, empty_items])
    items = cupy.ascontiguousarray(items.astype(np.int64))
    split_rows = cupy.ascontiguousarray(cupy.stack([split, first, counts], axis=1).astype(np.int64))
    return Plan(items, len(whole), split_rows, indptr, len(empty))


def plan_for(graph, fused=False):
    """The cached plan of a GPU graph (built on first use); fused: the fused attention kernels' plan."""
    whole_row_edges = chunk_edges = WHOLE_ROW_EDGES
    if fused:
        fair_share = -(-graph.num_edges // _resident_warps(backend.cupy.cuda.runtime.getDevice()))
        whole_row_edges = max(FUSED_WHOLE_ROW_EDGES, fair_share)
        chunk_edges = max(FUSED_WHOLE_ROW_EDGES, fair_share // FUSED_CHUNKS_PER_SHARE)
    key = ("gpu_plan", whole_row_edges, chunk_edges, fused)
    return graph.cached(key, lambda: _build(graph, whole_row_edges, chunk_edges, empty_last=fused))


@functools.lru_cache(maxsize=None)
def _resident_warps(device_id):
    """Warps the device runs at once: multiprocessors times warps per multiprocessor."""
    properties = backend.cupy.cuda.runtime.getDeviceProperties(device_id)
    return properties["multiProcessorCount"] * (properties["maxThreadsPerMultiProcessor"] // WARP)


#: Rows per run of the softmax_runs kernels: None lets softmax_layout choose from the median
#: degree; 0 turns runs off; a power of two up to MAX_RUN_ROWS forces it (tests force each).
RUN_ROWS = None
#: Whole rows wider than this many elements (None: a warp's stage) whose edges fit a block's
#: stage are staged in a block's (softmax_block_rows, several to a block where they fit);
#: tests lower it, False turns it off.
BLOCK_ROW_FLOOR = None
#: Whole rows wider than this many elements that fit a warp's stage and that no run or block
#: takes are staged alone, as runs of one row (softmax_runs with R = 1), instead of being
#: read twice by softmax_rows, which keeps only rows of up to 8 elements per lane
#: (kernels.CACHED) in registers. False turns this off; so does RUN_ROWS = 0 (no runs at all).
SINGLE_ROW_FLOOR = CACHED * WARP
#: Lane groups (softmax_groups) for the whole rows no staged kernel takes, H a power of two:
#: rows of up to WARP * K elements (K: group_lane_elements), a group of S lanes per row
#: (32 / S rows per warp) holding up to K elements each, S the larger of H, GROUP_MIN_LANES
#: (or the row's width, if narrower) and the width over K (softmax_group_shape). The rest go
#: one warp per row to softmax_rows. A lane holds its elements in registers, up to
#: GROUP_LANE_BYTES of the accumulation type (8 float32 values, 4 float64: more registers
#: cost occupancy; at most kernels.CACHED). Tests force GROUP_LANE_ELEMENTS (1: groups
#: only of rows of up to 32 elements, one per lane).
GROUP_LANE_BYTES = 32
GROUP_LANE_ELEMENTS = None
GROUP_MIN_LANES = 8


class SoftmaxLayout:
    """The plan of the row-wise softmax kernels for H heads: runs of consecutive short rows,
    wider rows one block each, short rows in lane groups, the rest one warp per plan item.

    run_rows, runs, num_runs: runs of run_rows consecutive rows whose edges fit a warp's
    stage; runs lists the runs taken, or is None when that is every run.
    block_rows, block_stage_offsets, block_packs, num_block_packs: the rows staged in a
    block's shared memory (softmax_block_rows), in packs of up to MAX_BLOCK_ROWS that share
    a block: pack b is block_rows[block_packs[b] .. block_packs[b + 1]], row j's edges at
    stage element block_stage_offsets[j] (int32).
    single_rows: the rows staged alone, each a run of one row (softmax_runs with R = 1).
    groups: (S, K, rows); each row of `rows` gets S lanes of K elements (degree * H <= K * S).
    items, num_whole: the plan's items without the rows that went to runs, blocks or groups.
    """

    def __init__(self, plan, run_rows, runs, num_runs, block_packs, single_rows, groups, items, num_whole):
        self.plan = plan
        self.run_rows = run_rows
        self.runs = runs
        self.num_runs = num_runs
        self.block_rows, self.block_stage_offsets, self.block_packs = block_packs
        self.num_block_packs = len(self.block_packs) - 1
        self.single_rows = single_rows
        self.groups = groups
        self.items = items
        self.num_items = len(items)
        self.num_whole = num_whole


def run_capacity(dtype, arrays):
    """Elements of each of ``arrays`` staged arrays that a warp's stage of softmax_runs holds."""
    return RUN_STAGE_BYTES // (arrays * np.dtype(dtype).itemsize)


def _median_degree(graph):
    """The median row degree (0 for a graph of no rows), cached on the graph."""

    def build():
        return float(backend.cupy.median(graph.degrees())) if graph.num_dst else 0.0  # host sync

    return graph.cached(("gpu_median_degree",), build)


def _run_rows(graph, heads, capacity):
    """Rows per run: the most (a power of two, at most MAX_RUN_ROWS) whose edges at the median
    degree fill at most half the stage, so that most runs fit it; 0 (no runs) where a row
    of median degree alone would fill more than half; 0 without a stage (capacity 0), forced
    or not: its runs would be of empty rows, on kernels that stage what they are not given."""
    if capacity == 0:
        return 0
    if RUN_ROWS is not None:
        return RUN_ROWS
    if heads == 0:
        return 0
    fill = int(capacity // (2 * heads * max(1.0, _median_degree(graph))))
    return min(MAX_RUN_ROWS, 1 << (fill.bit_length() - 1)) if fill else 0


def _runs(plan, degrees, heads, capacity, run_rows):
    """(runs or None, number of runs, whether each row is in a run taken): the runs whose
    edges fit the stage and whose rows the plan keeps whole."""
    cupy = backend.cupy
    num_rows = len(degrees)
    num_all = -(-num_rows // run_rows)
    padded = cupy.zeros(num_all * run_rows, dtype=np.int64)
    padded[:num_rows] = degrees
    padded = padded.reshape(num_all, run_rows)
    fits = (padded.sum(axis=1) * heads <= capacity) & (padded.max(axis=1) <= WHOLE_ROW_EDGES)
    runs = cupy.flatnonzero(fits)  # host sync (once per graph, H and stage size)
    in_run = cupy.repeat(fits, run_rows)[:num_rows]
    if len(runs) == num_all:
        return None, num_all, in_run
    return runs.astype(np.int64), len(runs), in_run


def _whole_rows_of_width(degrees, heads, floor, limit, free):
    """The whole rows, of those `free`, of more than `floor` and at most `limit` elements."""
    width = degrees * heads
    fits = (width > floor) & (width <= limit) & (degrees <= WHOLE_ROW_EDGES)
    return backend.cupy.flatnonzero(fits & free).astype(np.int64)  # host sync


def _block_rows(degrees, heads, capacity, free):
    """The whole rows, of those `free`, staged in a block's stage: wider than BLOCK_ROW_FLOOR
    elements (a warp's stage by default) and fitting a block's stage."""
    if BLOCK_ROW_FLOOR is False or heads == 0:
        return backend.cupy.zeros(0, dtype=np.int64)
    floor = capacity if BLOCK_ROW_FLOOR is None else BLOCK_ROW_FLOOR
    return _whole_rows_of_width(degrees, heads, floor, BLOCK_WARPS * capacity, free)


def _on_host(x):
    """A NumPy copy of x (a CuPy array; NumPy in the layout tests)."""
    return x.get() if hasattr(x, "get") else np.array(x)


def _pack_block_rows(block_rows, degrees, heads, capacity):
    """(rows, stage offsets, pack starts) of the block rows packed into blocks: a row whose
    slice (padded to an even count of elements, so that a float16 word never straddles two
    rows) takes at most 1/k of a block's stage shares a block with k - 1 others of its kind
    (k at most MAX_BLOCK_ROWS), each at the sum of those before it; the packs of the widest
    rows first. One block per narrow row would leave most of its stage idle, and so most of
    the bytes an SM can have in flight."""
    cupy = backend.cupy
    rows = _on_host(block_rows)  # host sync (once per graph, H and stage size)
    padded = _on_host(degrees[block_rows]) * heads
    padded += padded & 1
    per_pack = np.minimum(MAX_BLOCK_ROWS, (BLOCK_WARPS * capacity) // np.maximum(padded, 2))
    order = np.argsort(per_pack, kind="stable")
    rows, padded, per_pack = rows[order], padded[order], per_pack[order]
    # Rank of each row among those of its k, every k-th the first of a pack.
    first_of_kind = np.flatnonzero(np.r_[True, per_pack[1:] != per_pack[:-1]])
    rank = np.arange(len(rows)) - np.repeat(first_of_kind, np.diff(np.r_[first_of_kind, len(rows)]))
    starts = np.flatnonzero(rank % per_pack == 0)
    before = np.cumsum(padded) - padded  # elements of all rows before each
    offsets = before - np.repeat(before[starts], np.diff(np.r_[starts, len(rows)]))
    packs = np.r_[starts, len(rows)].astype(np.int64)
    return cupy.asarray(rows, dtype=np.int64), cupy.asarray(offsets, dtype=np.int32), cupy.asarray(packs)


def _single_rows(degrees, heads, capacity, free):
    """The whole rows, of those `free`, staged alone: wider than SINGLE_ROW_FLOOR elements and
    fitting a warp's stage (see SINGLE_ROW_FLOOR)."""
    if SINGLE_ROW_FLOOR is False or RUN_ROWS == 0 or heads == 0:
        return backend.cupy.zeros(0, dtype=np.int64)
    return _whole_rows_of_width(degrees, heads, SINGLE_ROW_FLOOR, capacity, free)


def group_lane_elements(dtype):
    """Elements per lane of the lane groups for data of ``dtype`` (see GROUP_LANE_BYTES)."""
    if GROUP_LANE_ELEMENTS is not None:
        return GROUP_LANE_ELEMENTS
    return min(CACHED, GROUP_LANE_BYTES // accumulation_dtype(dtype).itemsize)


def softmax_group_shape(heads, size, lane_elements):
    """(S, K) of the lane groups of rows of at most ``size`` elements (a power of two, at least
    ``heads``, at most WARP * lane_elements): S lanes per row, K elements per lane."""
    lanes = min(WARP, max(heads, min(GROUP_MIN_LANES, size), size // lane_elements))
    return lanes, max(1, size // lanes)


def _build_softmax_layout(graph, heads, capacity, run_rows, lane_elements):
    cupy = backend.cupy
    plan = plan_for(graph)
    degrees = cupy.diff(plan.indptr)
    runs, num_runs = None, 0
    free = cupy.ones(len(degrees), dtype=bool)  # rows no staged kernel takes
    if run_rows and len(degrees):
        runs, num_runs, in_run = _runs(plan, degrees, heads, capacity, run_rows)
        free = ~in_run
    block_rows = _block_rows(degrees, heads, capacity, free)
    free[block_rows] = False
    single_rows = _single_rows(degrees, heads, capacity, free)
    free[single_rows] = False
    staged = (run_rows, runs, num_runs, _pack_block_rows(block_rows, degrees, heads, capacity), single_rows)
    if heads == 0 or heads > MAX_BATCHED_HEADS or heads & (heads - 1):
        whole = plan.items[: plan.num_whole]
        left = whole[free[whole[:, 0]]]  # host sync
        items = cupy.ascontiguousarray(cupy.concatenate([left, plan.items[plan.num_whole :]]))
        return SoftmaxLayout(plan, *staged, [], items, len(left))
    widest = WARP * lane_elements  # the widest row a lane group takes
    width = cupy.maximum(degrees, 1) * heads  # elements of each row
    # Only rows the plan keeps whole and no staged kernel took: a split row's items are all
    # handled by the item kernels.
    width[(degrees > WHOLE_ROW_EDGES) | ~free] = widest + 1  # wider than any group
    groups = []
    size = heads
    while size <= widest:
        in_bin = (width <= size) & (width > size // 2) if size > heads else width <= size
        rows = cupy.flatnonzero(in_bin)  # host sync (once per graph and H)
        if len(rows):
            groups.append((*softmax_group_shape(heads, size, lane_elements), rows.astype(np.int64)))
        size *= 2
    whole = plan.items[: plan.num_whole]
    whole_rows = whole[:, 0]
    long_whole = whole[(width[whole_rows] > widest) & free[whole_rows]]  # host sync
    items = cupy.ascontiguousarray(cupy.concatenate([long_whole, plan.items[plan.num_whole :]]))
    return SoftmaxLayout(plan, *staged, groups, items, len(long_whole))


def softmax_layout(graph, heads, capacity, lane_elements):
    """The cached softmax layout of a GPU graph for `heads` heads, a stage of `capacity`
    elements per staged array (run_capacity) and lane groups of up to `lane_elements`
    elements per lane (group_lane_elements)."""
    run_rows = _run_rows(graph, heads, capacity)
    # RUN_ROWS too: forced to 0 it also stops single rows, where a run_rows of 0 does not.
    key = (
        "gpu_softmax_layout",
        heads,
        capacity,
        lane_elements,
        run_rows,
        RUN_ROWS,
        BLOCK_ROW_FLOOR,
        SINGLE_ROW_FLOOR,
        WHOLE_ROW_EDGES,
        GROUP_MIN_LANES,
    )
    return graph.cached(key, lambda: _build_softmax_layout(graph, heads, capacity, run_rows, lane_elements))
