"""The CPU gather-sums' two forms: a sparse product per head, and heads summed together on
graphs with few edges per head. Both sum each row in the same chunks and order, so they
must agree bit for bit (the distributed ops, whose partitions may take the other form than
the whole graph, rely on that)."""

import numpy as np
import pytest

import cupy_csrattn as ca
from cupy_csrattn.cpu import segment_sums
from cupy_csrattn.testing.graphs import from_degrees, named_graph


def _gather_sums(monkeypatch, graph, weights, values, transpose, batched):
    monkeypatch.setattr(segment_sums, "_HEAD_BATCH_ELEMENTS", 2**40 if batched else -1)
    g = ca.CSRGraph(graph.indptr, graph.indices, graph.num_src)  # fresh: no cached row blocks
    rows = g.num_src if transpose else g.num_dst
    out = np.full((rows, *values.shape[1:]), np.nan, values.dtype)
    return segment_sums.gather_sum(g, weights, values, out, transpose=transpose)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "graph",
    [
        named_graph("zero_degree_rows"),
        named_graph("warp_boundaries"),  # rows of 33 to 127 edges: several chunks, added in float64
        from_degrees([0, 300, 1, 0, 70, 2], 9, seed=1),
    ],
    ids=["zero_degree_rows", "warp_boundaries", "long_rows"],
)
@pytest.mark.parametrize("heads, features", [(2, 5), (7, 1), (3, 0), (40, 3)])
def test_heads_together_equal_heads_apart(monkeypatch, graph, heads, features, dtype, transpose):
    rng = np.random.default_rng(heads * 10 + features)
    num_edges = len(graph.indices)
    weights = rng.standard_normal((num_edges, heads)).astype(dtype)
    rows = len(graph.indptr) - 1 if transpose else graph.num_src
    values = (rng.standard_normal((rows, heads, features)) * 10.0 ** rng.integers(-3, 4, features)).astype(dtype)
    apart = _gather_sums(monkeypatch, graph, weights, values, transpose, batched=False)
    # Small blocks: several blocks of heads and of rows.
    monkeypatch.setattr(segment_sums, "_BLOCK_ELEMENTS", 64)
    monkeypatch.setattr(segment_sums, "_MIN_BLOCK_EDGES", 16)
    together = _gather_sums(monkeypatch, graph, weights, values, transpose, batched=True)
    assert not np.isnan(apart).any()
    np.testing.assert_array_equal(together, apart)


def test_heads_together_on_a_graph_of_one_edge_and_many_heads():
    """One edge, 5000 heads: once a product per head (about 15 us each), now one block."""
    g = ca.CSRGraph(np.array([0, 1]), np.array([0]), 1)
    rng = np.random.default_rng(0)
    weights, values = rng.standard_normal((1, 5000)), rng.standard_normal((1, 5000, 4))
    np.testing.assert_array_equal(ca.spmm(g, weights, values), weights[:, :, None] * values)


@pytest.mark.parametrize("num_edges, heads", [(3, 5), (40, 41), (40, 39)])
def test_source_sums_add_each_source_in_edge_order(num_edges, heads):
    """With fewer edges than heads, one bincount over (source, head) bins; it must give a
    bincount per head, bit for bit."""
    graph = from_degrees([num_edges - num_edges // 2, 0, num_edges // 2], 4, seed=num_edges)
    g = ca.CSRGraph(graph.indptr, graph.indices, graph.num_src)
    x = np.random.default_rng(heads).standard_normal((num_edges, heads)) * 1e4
    expected = np.stack([np.bincount(graph.indices, weights=x[:, h], minlength=4) for h in range(heads)], axis=1)
    np.testing.assert_array_equal(segment_sums.source_sum(g, x), expected)
