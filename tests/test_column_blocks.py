"""Column blocks of the fused backward passes (gpu/column_blocks.py): the pieces (checked on
the CPU, NumPy standing in for CuPy), the choice, and the blocked passes on the GPU against
the CPU backend, on graphs whose rows are sorted and not, with and without edge data."""

from types import SimpleNamespace

import numpy as np
import pytest
from helpers import require_cupy

import cupy_csrattn as ca
from cupy_csrattn import backend
from cupy_csrattn.gpu import column_blocks
from cupy_csrattn.testing.compare import assert_close


def _graph(rng, num_dst=30, num_src=41, sort=False):
    degrees = rng.integers(0, 40, num_dst)
    degrees[::6] = 0
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int32)
    indices = rng.integers(0, num_src, indptr[-1]).astype(np.int32)
    if sort:
        for row in range(num_dst):
            indices[indptr[row] : indptr[row + 1]].sort()
    return ca.CSRGraph(indptr, indices, num_src)


@pytest.mark.parametrize("blocks", [2, 3, 7, 41, 60])
@pytest.mark.parametrize("sort", [False, True])
def test_pieces_cover_each_row_in_block_order(monkeypatch, blocks, sort):
    """Block b's piece of a row holds the row's sources in block b, the pieces of a row follow
    one another in block order and cover its edges once; block 0 names every row, the later
    blocks the rows with edges in them; the sorted indices are the row's own."""
    monkeypatch.setattr(backend, "cupy", np)
    g = _graph(np.random.default_rng(blocks), sort=sort)
    indices, already_sorted = column_blocks._sorted_within_rows(g)
    assert already_sorted == sort and (indices is g.indices) == sort
    width = -(-g.num_src // blocks)
    items = column_blocks._block_items(g, indices, blocks)
    assert len(items) == blocks and items[0][:, 0].tolist() == list(range(g.num_dst))
    covered = {row: g.indptr[row] for row in range(g.num_dst)}
    for block, block_items in enumerate(items):
        assert block_items.dtype == np.int64 and block_items.flags.c_contiguous
        assert (block_items[:, 3] == -1).all()
        for row, begin, end, _ in block_items.tolist():
            assert begin == covered[row] and begin <= end
            assert (indices[begin:end] // width == block).all()
            assert block == 0 or end > begin
            covered[row] = end
    for row in range(g.num_dst):
        begin, end = g.indptr[row], g.indptr[row + 1]
        assert covered[row] == end
        assert np.array_equal(indices[begin:end], np.sort(g.indices[begin:end]))


H100, H200 = 12.8, 18.4  # peak memory bandwidth, bytes per multiprocessor per clock


@pytest.mark.parametrize(
    "num_dst,num_src,num_edges,row_bytes,l2_bytes,memory,want",
    [
        (100_000, 100_000, 50_000_000, 2048, 50 << 20, H100, 8),  # dense, H=4 D=F=64 float32: 205 MB gathered
        (100_000, 100_000, 50_000_000, 1024, 50 << 20, H100, 4),  # H=8 D=F=16
        (100_000, 100_000, 50_000_000, 2048, 50 << 20, H200, 0),  # memory fast beside the multiprocessors
        (100_000, 100_000, 50_000_000, 256, 50 << 20, H100, 0),  # fits the L2
        (1_000_000, 1_000_000, 16_000_000, 2048, 50 << 20, H100, 0),  # rows of 16 edges
        (100_000, 100_000, 50_000_000, 2048, 0, H100, 0),  # no L2 reported: its pieces would be too short
    ],
)
def test_blocks_where_gathered_rows_outgrow_the_l2_and_rows_are_long(
    num_dst, num_src, num_edges, row_bytes, l2_bytes, memory, want
):
    assert column_blocks.choose_blocks(num_dst, num_src, num_edges, row_bytes, l2_bytes, memory) == want


def test_device_memory_from_the_properties(monkeypatch):
    """An H100's properties (CuPy's names, kHz clocks): 50 MiB of L2, 12.8 bytes per
    multiprocessor per clock (3.35 TB/s over 132 multiprocessors at 1.98 GHz)."""
    properties = dict(
        l2CacheSize=52428800, memoryClockRate=2619000, memoryBusWidth=5120, multiProcessorCount=132, clockRate=1980000
    )
    runtime = SimpleNamespace(getDeviceProperties=lambda device_id: properties)
    monkeypatch.setattr(backend, "cupy", SimpleNamespace(cuda=SimpleNamespace(runtime=runtime)))
    column_blocks.device_memory.cache_clear()
    try:
        l2_bytes, rate = column_blocks.device_memory(0)
    finally:
        column_blocks.device_memory.cache_clear()
    assert l2_bytes == 52428800 and rate == pytest.approx(12.83, abs=0.01)


def _attention_inputs(rng, g, heads, features, dtype):
    node = lambda n, width: rng.standard_normal((n, heads, width)).astype(dtype)
    return {
        "graph_attention": dict(q=node(g.num_dst, features), k=node(g.num_src, features), v=node(g.num_src, features)),
        "gat_attention": dict(
            a_dst=rng.standard_normal((g.num_dst, heads)).astype(dtype),
            a_src=rng.standard_normal((g.num_src, heads)).astype(dtype),
            values=node(g.num_src, features),
        ),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("sort", [False, True])
@pytest.mark.parametrize("edge_data", [False, True])
@pytest.mark.parametrize("blocks", [2, 5])
def test_blocked_backward_matches_cpu(monkeypatch, dtype, sort, edge_data, blocks):
    """The fused backwards with the column blocks forced, against the CPU backend; each pass
    runs blocked exactly where it applies: float32 and float64, the rows pass with edge data
    only on sorted rows, the pass over the transpose (sorted rows) always."""
    cupy = require_cupy()
    from cupy_csrattn.gpu import plan

    monkeypatch.setattr(column_blocks, "COLUMN_BLOCKS", blocks)
    monkeypatch.setattr(plan, "_resident_warps", lambda device_id: 1)  # the fused plan splits no row
    rng = np.random.default_rng(blocks)
    g = _graph(rng, sort=sort)
    heads, features = 4, 8
    edge_names = {"graph_attention": "edge_feat", "gat_attention": "edge_score"}
    for op, inputs in _attention_inputs(rng, g, heads, features, dtype).items():
        gg = g.to_gpu()
        if edge_data:
            edge_shape = (g.num_edges, heads, features) if op == "graph_attention" else (g.num_edges, heads)
            inputs[edge_names[op]] = rng.standard_normal(edge_shape).astype(dtype)
        forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
        out, lse = forward(g, **inputs, return_lse=True)
        grad_out = rng.standard_normal(out.shape).astype(dtype)
        wide = {name: x.astype(np.float64) for name, x in inputs.items()}
        positional = [name for name in inputs if name not in edge_names.values()]
        extra = {name: wide[name] for name in inputs if name in edge_names.values()}
        saved = [out, grad_out, lse]
        wants = backward(g, *[wide[name] for name in positional], *[x.astype(np.float64) for x in saved], **extra)
        gots = backward(
            gg,
            *[cupy.asarray(inputs[name]) for name in positional],
            *[cupy.asarray(x) for x in saved],
            **{name: cupy.asarray(inputs[name]) for name in extra},
        )
        assert len(gots) == len(wants)
        for got, want in zip(gots, wants):
            got = cupy.asnumpy(got)
            assert got.shape == want.shape and not np.isnan(got).any()
            assert_close(got, want, dtype, scale=1.0)
        key = ("column blocks", blocks)
        blocked = dtype != np.float16
        assert (key in gg._cache) == (blocked and (sort or not edge_data)), op
        assert (key in gg.transpose()[0]._cache) == blocked, op


def test_blocked_backward_is_reproducible(monkeypatch):
    """Two blocked backwards give the same bits (the blocks add up in a fixed order)."""
    cupy = require_cupy()
    from cupy_csrattn.gpu import plan

    monkeypatch.setattr(column_blocks, "COLUMN_BLOCKS", 3)
    monkeypatch.setattr(plan, "_resident_warps", lambda device_id: 1)
    rng = np.random.default_rng(1)
    gg = _graph(rng).to_gpu()
    inputs = {
        name: cupy.asarray(x) for name, x in _attention_inputs(rng, gg, 2, 16, np.float32)["graph_attention"].items()
    }
    out, lse = ca.graph_attention(gg, **inputs, return_lse=True)
    grad_out = cupy.asarray(rng.standard_normal(out.shape).astype(np.float32))
    first = ca.graph_attention_backward(gg, *inputs.values(), out, grad_out, lse)
    for _ in range(3):
        again = ca.graph_attention_backward(gg, *inputs.values(), out, grad_out, lse)
        assert all(bool((x == y).all()) for x, y in zip(first, again))
