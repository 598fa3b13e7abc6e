"""The plans' choices that need no GPU: the softmax plan's rows per run (gpu/plan._run_rows,
the median degree given) and the order of the work plan's items (NumPy standing in for CuPy)."""

import numpy as np
import pytest

from cupy_csrattn import backend
from cupy_csrattn.gpu import plan
from cupy_csrattn.gpu.kernels import MAX_RUN_ROWS


@pytest.mark.parametrize(
    "median,heads,capacity,want",
    [
        (16, 8, 1024, 4),  # 4 rows of 16 edges x 8 heads: half of 1024; 32 (row, head) pairs
        (16, 1, 1024, 32),
        (16, 8, 2048, 8),
        (16, 8, 512, 2),  # 16 (row, head) pairs, two lanes each
        (16, 1, 512, 16),
        (500, 1, 1024, 1),  # one row per run, the whole warp on it
        (500, 1, 512, 0),  # a row alone fills more than half the stage
        (500, 8, 1024, 0),
        (2, 1, 1024, MAX_RUN_ROWS),
        (0, 4, 1024, 64),  # empty rows count as degree 1
        (5, 40, 1024, 2),
        (16, 0, 1024, 0),
    ],
)
def test_rows_per_run(monkeypatch, median, heads, capacity, want):
    monkeypatch.setattr(plan, "_median_degree", lambda graph: float(median))
    got = plan._run_rows(None, heads, capacity)
    assert got == want
    if got:
        assert got & (got - 1) == 0
        assert 2 * got * heads * max(1, median) <= capacity


def test_forced_rows_per_run(monkeypatch):
    monkeypatch.setattr(plan, "_median_degree", lambda graph: 16.0)
    monkeypatch.setattr(plan, "RUN_ROWS", 1)
    assert plan._run_rows(None, 1, 1024) == 1
    monkeypatch.setattr(plan, "RUN_ROWS", 0)
    assert plan._run_rows(None, 1, 1024) == 0


class _Graph:
    def __init__(self, degrees):
        self.indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)


@pytest.mark.parametrize(
    "degrees,whole_row_edges,chunk_edges",
    [
        ([3, 0, 7, 3, 1, 0, 7, 2], 8, 8),  # ties keep row order
        ([5, 40, 0, 9, 9, 17, 1, 64, 2], 8, 8),  # split rows: 40, 17, 64
        ([5, 40, 0, 9, 9, 17, 1, 64, 2], 8, 3),  # split in chunks shorter than a whole row
        ([4] * 6, 8, 8),  # equal degrees: the rows' own order
        ([0, 0, 0], 8, 8),
        ([5000, 2], 8, 3),  # past MAX_CHUNKS chunks of chunk_edges: longer chunks
    ],
)
@pytest.mark.parametrize("empty_last", [False, True], ids=["plain", "empty-last"])
def test_plan_items_longest_first(monkeypatch, degrees, whole_row_edges, chunk_edges, empty_last):
    """The plan (NumPy standing in for CuPy): whole rows once each, longest first with ties in
    row order, then each split row's items in order, covering its edges in chunks of
    chunk_edges (more where a row would take more than MAX_CHUNKS) but the last; with
    empty_last (the fused plan), the empty rows are not among the whole rows but after the
    split items, in row order."""
    monkeypatch.setattr(backend, "cupy", np)
    built = plan._build(_Graph(degrees), whole_row_edges, chunk_edges, empty_last=empty_last)
    degrees = np.asarray(degrees)
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    empty_rows = np.flatnonzero(degrees == 0).tolist() if empty_last else []
    assert built.num_empty == len(empty_rows)
    empty = built.items[built.num_items - built.num_empty :]
    assert empty[:, 0].tolist() == empty_rows
    assert (empty[:, 1] == indptr[empty_rows]).all() and (empty[:, 2] == empty[:, 1]).all()
    assert (empty[:, 3] == -1).all()
    whole_rows = [row for row in range(len(degrees)) if degrees[row] <= whole_row_edges and row not in empty_rows]
    want = sorted(whole_rows, key=lambda row: (-degrees[row], row))
    whole = built.items[: built.num_whole]
    assert whole[:, 0].tolist() == want
    assert whole[:, 1].tolist() == indptr[want].tolist()
    assert whole[:, 2].tolist() == indptr[np.asarray(want, dtype=int) + 1].tolist()
    assert (whole[:, 3] == -1).all()
    split = built.items[built.num_whole : built.num_items - built.num_empty]
    assert len(split) == built.num_split_items
    split_rows = [row for row in range(len(degrees)) if degrees[row] > whole_row_edges]
    assert built.split_rows[:, 0].tolist() == split_rows
    for index, (row, first, count) in enumerate(built.split_rows):
        items = split[first : first + count]
        assert (items[:, 0] == row).all() and (items[:, 3] == index).all()
        assert items[0, 1] == indptr[row] and items[-1, 2] == indptr[row + 1]
        assert (items[1:, 1] == items[:-1, 2]).all()
        chunk = max(chunk_edges, -(-degrees[row] // plan.MAX_CHUNKS))
        assert count == -(-degrees[row] // chunk) <= plan.MAX_CHUNKS
        assert (items[:-1, 2] - items[:-1, 1] == chunk).all() and items[-1, 2] > items[-1, 1]
    assert len(split) == built.split_rows[:, 2].sum()


class _LayoutGraph(_Graph):
    """A graph for the softmax layout: its indptr and a cache that builds on every use."""

    def __init__(self, degrees):
        super().__init__(degrees)
        self.num_edges = int(self.indptr[-1])

    def cached(self, key, build):
        return build()


@pytest.mark.parametrize(
    "single_floor,want_single",
    [(None, [2, 3]), (False, []), (0, [1, 2, 3, 5])],  # row 0 is empty: a lane group's
    ids=["default", "off", "floor-0"],
)
def test_softmax_layout_takes_each_row_once(monkeypatch, single_floor, want_single):
    """The softmax layout (NumPy standing in for CuPy), H = 8, a warp's stage of 1024 elements,
    runs of 4 rows: the one run that fits, the rows wider than the stage that fit a block's,
    the rows staged alone (wider than SINGLE_ROW_FLOOR, 256 elements by default, and fitting
    a warp's stage), the short rows in lane groups and the rest as items: each whole row once."""
    monkeypatch.setattr(backend, "cupy", np)
    monkeypatch.setattr(plan, "BLOCK_ROW_FLOOR", None)  # block rows: wider than a warp's stage
    if single_floor is not None:
        monkeypatch.setattr(plan, "SINGLE_ROW_FLOOR", single_floor)
    degrees = [0, 3, 40, 100, 129, 5, 600, 2000, 1, 64]
    layout = plan._build_softmax_layout(_LayoutGraph(degrees), 8, 1024, 4, 8)
    assert layout.runs.tolist() == [2]  # rows 8, 9: 65 edges x 8 heads <= 1024
    assert layout.block_rows.tolist() == [6, 4]  # 4800 and 1032 elements: a block each, widest first
    assert layout.block_packs.tolist() == [0, 1, 2] and layout.block_stage_offsets.tolist() == [0, 0]
    assert layout.single_rows.tolist() == want_single
    group_rows = [row for _, _, rows in layout.groups for row in rows.tolist()]
    item_rows = layout.items[: layout.num_whole, 0].tolist()
    taken = [8, 9] + layout.block_rows.tolist() + want_single + group_rows + item_rows
    assert sorted(taken) == [row for row, degree in enumerate(degrees) if degree <= plan.WHOLE_ROW_EDGES]
    monkeypatch.setattr(plan, "RUN_ROWS", 0)  # no runs: no rows staged alone either
    assert plan._build_softmax_layout(_LayoutGraph(degrees), 8, 1024, 0, 8).single_rows.tolist() == []


@pytest.mark.parametrize("lane_elements", [8, 1])
def test_softmax_lane_groups_take_rows_of_up_to_their_lanes_elements(monkeypatch, lane_elements):
    """Whole rows no staged kernel takes go to lane groups by width, S lanes of K elements
    each (H = 8: rows of 8, 16, 32, 64, 128 and 256 elements in groups of 8, 8, 8, 8, 16 and
    32 lanes), up to 32 * GROUP_LANE_ELEMENTS elements; wider ones to softmax_rows' items.
    One element per lane: the groups of rows of up to 32 elements, each a lane per element.
    By default a lane holds 32 bytes of the accumulation type: 8 elements of float16 and
    float32, 4 of float64."""
    monkeypatch.setattr(backend, "cupy", np)
    degrees = [0, 1, 2, 3, 4, 7, 8, 9, 16, 17, 32, 33, 100]
    layout = plan._build_softmax_layout(_LayoutGraph(degrees), 8, 1024, 0, lane_elements)  # no runs
    groups = {(lanes, per_lane): rows.tolist() for lanes, per_lane, rows in layout.groups}
    if lane_elements == 8:
        want = {(8, 1): [0, 1], (8, 2): [2], (8, 4): [3, 4], (8, 8): [5, 6], (16, 8): [7, 8], (32, 8): [9, 10]}
        want_items = []
    else:
        want = {(8, 1): [0, 1], (16, 1): [2], (32, 1): [3, 4]}
        want_items = [10, 9, 8, 7, 6, 5]  # longest first
    assert groups == want
    assert layout.single_rows.tolist() == [11, 12]  # 264 and 800 elements: wider than 256, within the stage
    assert layout.items[: layout.num_whole, 0].tolist() == want_items
    assert [plan.group_lane_elements(np.dtype(t)) for t in ("float16", "float32", "float64")] == [8, 8, 4]
    for size in (8, 16, 32, 64, 128, 256):
        if size <= 32 * lane_elements:
            lanes, per_lane = plan.softmax_group_shape(8, size, lane_elements)
            assert lanes * per_lane == size and per_lane <= lane_elements and 8 <= lanes <= 32


def test_block_rows_pack_into_blocks_where_they_fit(monkeypatch):
    """Rows of a block's stage (8 warps x 1024 elements here) share a block with others of
    their kind where k of them fit (k at most MAX_BLOCK_ROWS), each at the sum of the padded
    (even) widths before it, the packs of the widest rows first; every row once."""
    monkeypatch.setattr(backend, "cupy", np)
    monkeypatch.setattr(plan, "MAX_BLOCK_ROWS", 16)
    heads, capacity = 3, 1024
    block = plan.BLOCK_WARPS * capacity
    degrees = np.array([1500, 1000, 7, 1000, 1000, 5, 2000, 1, 1] + [3] * 20)
    rows = np.arange(len(degrees))
    got_rows, offsets, packs = plan._pack_block_rows(rows, degrees, heads, capacity)
    got_rows, offsets, packs = got_rows.tolist(), offsets.tolist(), packs.tolist()
    # 2000 x 3 = 6000 and 1500 x 3 = 4500: alone; 1000 x 3 = 3000: two to a block; 7 x 3 = 21
    # (22 padded), 5 x 3, 1 x 3 and 3 x 3 elements: MAX_BLOCK_ROWS to a block.
    assert got_rows[:2] == [0, 6] and packs[:3] == [0, 1, 2]
    assert got_rows[2:5] == [1, 3, 4] and packs[3] == 4 and offsets[2:5] == [0, 3000, 0]
    assert sorted(got_rows) == rows.tolist()
    # Packs: 6000, 4500, two of 3000, one of 3000, then the 24 short rows MAX_BLOCK_ROWS (16) at a time.
    assert packs == [0, 1, 2, 4, 5, 21, 29]
    for b in range(len(packs) - 1):
        members = range(packs[b], packs[b + 1])
        assert 1 <= len(members) <= plan.MAX_BLOCK_ROWS
        end = 0
        for j in members:
            assert offsets[j] % 2 == 0 and offsets[j] >= end
            end = offsets[j] + degrees[got_rows[j]] * heads
        assert end <= block
    small = got_rows[5:]
    assert offsets[5:8] == [0, 22, 38]  # rows 2 (21 elements), 5 (15), 7 (3): even offsets
    assert small[:3] == [2, 5, 7]


def test_sddmm_rows_beyond_int32_take_int64_kernels():
    """The sddmm kernels read each edge's row as the graph's index type: a graph of int32
    indices and more than 2**31 rows (most of them empty) wrapped its row numbers to negative
    ones. Its row numbers and indices go to the int64 kernels instead; other graphs keep theirs."""
    from types import SimpleNamespace

    from cupy_csrattn.gpu.derived import edge_ends

    def stand_in(num_dst, rows):
        cache = {}
        return SimpleNamespace(
            num_dst=num_dst,
            index_dtype=np.dtype(np.int32),
            indices=np.array([0, 1], np.int32),
            row_of_edge=lambda: np.array(rows, np.int64 if num_dst > 2**31 else np.int32),
            cached=lambda key, build: cache[key] if key in cache else cache.setdefault(key, build()),
        )

    dtype, rows, indices = edge_ends(stand_in(2**31 + 5, [3, 2**31 + 4]))
    assert dtype == np.int64 and rows.dtype == indices.dtype == np.int64
    assert rows.tolist() == [3, 2**31 + 4] and indices.tolist() == [0, 1]
    graph = stand_in(2**31, [0, 2**31 - 1])  # row 2**31 - 1 fits int32
    dtype, rows, indices = edge_ends(graph)
    assert dtype == np.int32 and rows.dtype == np.int32 and indices is graph.indices


def test_node_rows_of_2_30_elements_take_the_wide_row_kernels():
    """The batched row kernels index a node row's H * F features with 32-bit ints: rows of
    2**30 elements or more take the wide kernels (64-bit), as do more heads than lanes."""
    from types import SimpleNamespace

    from cupy_csrattn.gpu.aggregate import row_variant

    aligned = SimpleNamespace(data=SimpleNamespace(ptr=4096), dtype=np.dtype(np.float32))
    assert row_variant(8, 64, aligned) == "v4" and row_variant(1, 3, aligned) == "v1"
    assert row_variant(33, 4, aligned) == "wide"
    assert row_variant(1, 2**30, aligned) == "wide" and row_variant(32, 2**25, aligned) == "wide"
    assert row_variant(32, 2**25 - 4, aligned) == "v4"
