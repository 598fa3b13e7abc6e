"""The per-graph work plan: which warp handles which edges of which row.

Rows of up to WHOLE_ROW_EDGES edges are one work item each (empty rows too: their outputs
must be written). Longer rows are split into at most MAX_CHUNKS items of at least
WHOLE_ROW_EDGES edges; their partial states are merged per row in item order, so results
do not depend on scheduling.

The fused attention kernels, whose every edge is a chain of dependent loads (index, then
the score's node rows, then the values), split rows sooner: past E / (warps the device
holds at once), but at least FUSED_WHOLE_ROW_EDGES, so that a hub row is spread over many
warps while rows no longer than one warp's fair share stay whole. That also bounds their
partial states by about twice the resident warps, whatever the graph's size.

Each plan is built once per graph (one host sync to size it) and cached on the graph.
"""

import functools

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.gpu.kernels import MAX_BATCHED_HEADS, WARP

WHOLE_ROW_EDGES = 1024
FUSED_WHOLE_ROW_EDGES = 128
MAX_CHUNKS = 1024


class Plan:
    """items: (num_items, 4) int64 rows (row, begin, end, split row or -1), whole-row items first;
    split_rows: (num_split, 3) int64 rows (row, first split item, item count)."""

    def __init__(self, items, num_whole, split_rows, indptr):
        self.indptr = indptr  # int64
        self.items = items
        self.num_items = len(items)
        self.num_whole = num_whole
        self.num_split_items = self.num_items - num_whole
        self.split_rows = split_rows
        self.num_split = len(split_rows)


def _build(graph, whole_row_edges):
    cupy = backend.cupy
    indptr = graph.indptr.astype(np.int64, copy=False)
    degrees = cupy.diff(indptr)
    is_split = degrees > whole_row_edges
    whole = cupy.flatnonzero(~is_split)
    whole_items = cupy.stack([whole, indptr[whole], indptr[whole + 1], cupy.full_like(whole, -1)], axis=1)

    split = cupy.flatnonzero(is_split)
    split_degrees = degrees[split]
    chunk = cupy.maximum(whole_row_edges, -(-split_degrees // MAX_CHUNKS))
    counts = -(-split_degrees // chunk)
    first = cupy.cumsum(counts) - counts
    num_split_items = int(counts.sum()) if len(split) else 0  # host sync (once per graph)
    item = cupy.arange(num_split_items, dtype=np.int64)
    owner = cupy.searchsorted(first, item, side="right") - 1  # split-row index of each item
    begin = indptr[split][owner] + (item - first[owner]) * chunk[owner]
    end = cupy.minimum(begin + chunk[owner], indptr[split + 1][owner])
    split_items = cupy.stack([split[owner], begin, end, owner], axis=1)

    items = cupy.ascontiguousarray(cupy.concatenate([whole_items, split_items]).astype(np.int64))
    split_rows = cupy.ascontiguousarray(cupy.stack([split, first, counts], axis=1).astype(np.int64))
    return Plan(items, len(whole), split_rows, indptr)


def plan_for(graph, fused=False):
    """The cached plan of a GPU graph (built on first use); fused: the fused attention kernels' plan."""
    whole_row_edges = WHOLE_ROW_EDGES
    if fused:
        fair_share = -(-graph.num_edges // _resident_warps(backend.cupy.cuda.runtime.getDevice()))
        whole_row_edges = max(FUSED_WHOLE_ROW_EDGES, fair_share)
    return graph.cached(("gpu_plan", whole_row_edges), lambda: _build(graph, whole_row_edges))


@functools.lru_cache(maxsize=None)
def _resident_warps(device_id):
    """Warps the device runs at once: multiprocessors times warps per multiprocessor."""
    properties = backend.cupy.cuda.runtime.getDeviceProperties(device_id)
    return properties["multiProcessorCount"] * (properties["maxThreadsPerMultiProcessor"] // WARP)


class SoftmaxLayout:
    """The plan of the row-wise softmax kernels for H heads: short rows in lane groups.

    groups: (S, rows) pairs; each row of `rows` gets S lanes (degree * H <= S <= WARP).
    items, num_whole: the plan's items without the rows that went to groups.
    """

    def __init__(self, plan, groups, items, num_whole):
        self.plan = plan
        self.groups = groups
        self.items = items
        self.num_items = len(items)
        self.num_whole = num_whole


def _build_softmax_layout(graph, heads):
    cupy = backend.cupy
    plan = plan_for(graph)
    if heads == 0 or heads > MAX_BATCHED_HEADS or heads & (heads - 1):
        return SoftmaxLayout(plan, [], plan.items, plan.num_whole)
    degrees = cupy.diff(plan.indptr)
    width = cupy.maximum(degrees, 1) * heads  # elements of each row
    # Only rows the plan keeps whole: a split row's items are all handled by the item kernels.
    width[degrees > WHOLE_ROW_EDGES] = WARP + 1  # wider than any group
    groups = []
    size = heads
    while size <= WARP:
        in_bin = (width <= size) & (width > size // 2) if size > heads else width <= size
        rows = cupy.flatnonzero(in_bin)  # host sync (once per graph and H)
        if len(rows):
            groups.append((size, rows.astype(np.int64)))
        size *= 2
    whole = plan.items[: plan.num_whole]
    long_whole = whole[width[whole[:, 0]] > WARP]  # host sync
    items = cupy.ascontiguousarray(cupy.concatenate([long_whole, plan.items[plan.num_whole :]]))
    return SoftmaxLayout(plan, groups, items, len(long_whole))


def softmax_layout(graph, heads):
    """The cached softmax layout of a GPU graph for `heads` heads."""
    return graph.cached(("gpu_softmax_layout", heads), lambda: _build_softmax_layout(graph, heads))
