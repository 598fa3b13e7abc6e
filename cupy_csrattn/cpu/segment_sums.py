"""Row sums as sparse products, and the gather-sums built on them (shared by the CPU ops).

Compute dtype. float32 and float16 inputs are computed in float32, float64 inputs in
float64 (``backend.accumulation_dtype``, ``as_compute``). Elementwise work (exp,
subtraction, division, products) is accurate to a few ulp either way; what needs care is
summing long rows, so every sum over a row has an error bound independent of the row's
length: rows are cut into chunks of at most ``_CHUNK`` edges, a chunk is summed
sequentially in the compute dtype (error at most 31 units of roundoff of its sum of
magnitudes, 1.8e-6 in float32; sums of many near-equal terms do come close to that
bound), and the chunks of a row are added in float64.

Row sums are sparse products. Summing the rows of an (E, H) edge array is a product
with the (chunks x E) 0/1 matrix that picks each chunk's edges; scipy does it in one
sequential pass with no per-row call overhead. ``ufunc.reduceat`` along axis 0 instead
calls its inner loop once per edge (for H heads) or per row, which dominates on graphs
of short rows. Gather-sums (``gather_sum``: spmm and the aggregations) are products too:
of the graph's matrix, its rows chunked the same way and holding the edge weights, with
(N, F) node features.

Row blocks. Row-wise work in edge order (``segment_sum`` here; the softmax, its gradient
and exp(s - lse) in segment_softmax) runs over blocks of whole consecutive rows of about
``_BLOCK_ELEMENTS`` elements (``row_blocks``): each step of a block (exp, row sums,
broadcasting per-row values with np.repeat, division) then finds the block in cache, so
the op reads its inputs and writes its output about once instead of once per step. This
matters most when other processes share the memory bandwidth.

Nothing of size (E, F) or (E, H, F) is ever materialized: sparse products work on
(N, F) operands, a head at a time (and the per-edge dot products of edge_dots gather
features in bounded blocks). Graphs with few edges per head are the exception: there a
sparse product per head costs more in calls than in work, so their gather-sums form the
products of a block of heads (at most ``_BLOCK_ELEMENTS`` of them) and sum them with the
row-block matrices, each row in the same chunks and order as the per-head product (the
results are bitwise the same).
"""

import math

import numpy as np
import scipy.sparse

from cupy_csrattn.backend import accumulation_dtype

# Rows are summed in chunks of at most this many edges (see the module docstring).
# Smaller chunks cost more: at 16, spmm on a graph of average degree 10 takes twice as long.
_CHUNK = 32

# Row blocks hold about this many elements (edges x heads): 1 MiB of float32, so that a
# block stays in a core's L2 cache between the steps that use it.
_BLOCK_ELEMENTS = 1 << 18
_MIN_BLOCK_EDGES = 1 << 12

# Gather-sums with several heads and at most this many edges x features sum the heads
# together (see the module docstring). A per-head product costs about 15 us in calls; above
# this size the batched products cost more than those calls save (measured on 8 heads of 16
# features: 2.8x faster at 512 edges, 1.1x at 2048, 0.3x at 4096).
_HEAD_BATCH_ELEMENTS = 1 << 14


# -- dtypes and small helpers -----------------------------------------------------------


def as_compute(x):
    """x in its compute dtype (no copy when it already is)."""
    return np.asarray(x).astype(accumulation_dtype(x.dtype), copy=False)


def write(out, result):
    """out[...] = result (casting to out's dtype, e.g. float16) unless result is out."""
    if result is not out:
        out[...] = result


def _degrees(graph):
    return graph.cached("cpu_degrees", lambda: np.diff(graph.indptr).astype(np.intp))


def expand_rows(graph, per_row):
    """(E, ...) array holding per_row[row of e] for every edge e.

    np.repeat copies each row's entries in one pass; gathering with row_of_edge is
    several times slower for (N, H) arrays.
    """
    return np.repeat(per_row, _degrees(graph), axis=0)


def _scipy_index_dtype(*sizes):
    """The index dtype scipy picks for these sizes, so building a matrix copies nothing."""
    return np.int32 if max(sizes, default=0) < np.iinfo(np.int32).max else np.int64


# -- rows cut into chunks, for sparse products ---------------------------------------------


class _Chunks:
    """Rows (given by a row pointer array starting at 0) cut into chunks of <= _CHUNK entries.

    ``indptr`` is the row pointer array of the chunks (the same entries, in order); a
    product of the chunked matrix gives one partial result per chunk, which ``combine``
    turns into one result per row. Every row has at least one (maybe empty) chunk.
    """

    def __init__(self, indptr, index_dtype):
        indptr = indptr.astype(np.int64)
        chunks = np.maximum(1, -(-np.diff(indptr) // _CHUNK))
        self.split = bool((chunks > 1).any())
        if not self.split:
            self.indptr = indptr.astype(index_dtype)
            return
        first_chunk = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum(chunks, out=first_chunk[1:])
        num_chunks = int(first_chunk[-1])
        # Chunk c of row d starts at indptr[d] + c * _CHUNK.
        row = np.repeat(np.arange(len(chunks)), chunks)
        chunk_indptr = np.empty(num_chunks + 1, dtype=np.int64)
        chunk_indptr[:-1] = indptr[:-1][row] + (np.arange(num_chunks) - first_chunk[:-1][row]) * _CHUNK
        chunk_indptr[-1] = indptr[-1]
        self.indptr = chunk_indptr.astype(index_dtype)
        self.first_chunk = first_chunk[:-1].astype(np.intp)
        # The rows of several chunks, their chunks listed row after row, and the float64
        # 0/1 matrix that adds up each such row's chunks (a product: ufunc.reduceat along
        # axis 0 is far slower).
        self.long_rows = np.flatnonzero(chunks > 1)
        long_counts = chunks[self.long_rows]
        long_indptr = np.zeros(len(long_counts) + 1, dtype=np.int64)
        np.cumsum(long_counts, out=long_indptr[1:])
        num_long_chunks = int(long_indptr[-1])
        self.long_chunks = (
            np.repeat(first_chunk[:-1][self.long_rows] - long_indptr[:-1], long_counts) + np.arange(num_long_chunks)
        ).astype(np.intp)
        dtype = _scipy_index_dtype(num_long_chunks)
        self.long_sums = scipy.sparse.csr_array(
            (np.ones(num_long_chunks), np.arange(num_long_chunks, dtype=dtype), long_indptr.astype(dtype)),
            shape=(len(self.long_rows), num_long_chunks),
        )

    def combine(self, partial, out=None):
        """Per-row results from the per-chunk ``partial`` (into ``out`` when given)."""
        if not self.split:
            if out is None:
                return partial
            write(out, partial)
            return out
        long_sums = self.long_sums @ partial[self.long_chunks].astype(np.float64)
        if out is None:
            out = np.take(partial, self.first_chunk, axis=0)
        elif out.dtype == partial.dtype and out.flags.c_contiguous:
            np.take(partial, self.first_chunk, axis=0, out=out, mode="clip")  # indices are in range
        else:
            write(out, np.take(partial, self.first_chunk, axis=0))
        out[self.long_rows] = long_sums
        return out


class _Product:
    """The graph as a chunked scipy CSR matrix: out[d] = sum_e data[e] * dense[indices[e]]."""

    def __init__(self, graph):
        dtype = _scipy_index_dtype(
            graph.num_edges, graph.num_dst, graph.num_src, graph.num_dst + graph.num_edges // _CHUNK + 1
        )
        self.chunks = _Chunks(graph.indptr, dtype)
        self.indices = graph.indices.astype(dtype, copy=False)
        self.num_cols = graph.num_src

    def __call__(self, data, dense, out):
        """data (E,) and dense (num_cols, K) share a compute dtype, which scipy keeps."""
        matrix = scipy.sparse.csr_array(
            (data, self.indices, self.chunks.indptr), shape=(len(self.chunks.indptr) - 1, self.num_cols)
        )
        self.chunks.combine(matrix @ dense, out)


def _product(graph):
    return graph.cached("cpu_product", lambda: _Product(graph))


# -- row blocks ---------------------------------------------------------------------------


class _Block:
    """Rows [rows.start, rows.stop) of a graph, owning edges [edges.start, edges.stop)."""

    def __init__(self, indptr, degrees, row_start, row_stop, index_dtype):
        self.rows = slice(row_start, row_stop)
        self.edges = slice(int(indptr[row_start]), int(indptr[row_stop]))
        self.degrees = degrees[self.rows]
        self.chunks = _Chunks(indptr[row_start : row_stop + 1] - indptr[row_start], index_dtype)
        self.num_chunks = len(self.chunks.indptr) - 1
        self._matrices = {}

    def row_sums(self, x, ones, positions):
        """(rows, H) sums of the block's (edges, H) slice x over each row, in x's dtype.

        ``ones`` and ``positions`` are (at least) block-long arrays of ones of x's dtype and
        of 0, 1, 2, ...: the entries of the 0/1 matrix that picks each chunk's edges.
        """
        matrix = self._matrices.get(x.dtype)
        if matrix is None:
            size = self.edges.stop - self.edges.start
            matrix = self._matrices[x.dtype] = scipy.sparse.csr_array(
                (ones[:size], positions[:size], self.chunks.indptr), shape=(self.num_chunks, size)
            )
        sums = self.chunks.combine(matrix @ x)
        return sums.astype(x.dtype, copy=False)


class _UnitArrays:
    """0, 1, 2, ... and arrays of ones, as long as any row block of the graph (at most
    _BLOCK_ELEMENTS edges plus a row), shared by its row-block plans (one per block size):
    with a row of millions of edges, each plan's own would hold that many again."""

    def __init__(self, graph):
        length = min(graph.num_edges, _BLOCK_ELEMENTS + int(_degrees(graph).max(initial=0)))
        self.index_dtype = _scipy_index_dtype(length, length // _CHUNK + graph.num_dst + 1)
        self.positions = np.arange(length, dtype=self.index_dtype)
        self._ones = {}

    def ones(self, dtype):
        if dtype not in self._ones:
            self._ones[dtype] = np.ones(len(self.positions), dtype=dtype)
        return self._ones[dtype]


class _RowBlocks:
    """The graph's rows in blocks of about ``block_edges`` edges (a row is never cut)."""

    def __init__(self, graph, block_edges):
        indptr = graph.indptr.astype(np.int64)
        degrees = _degrees(graph)
        num_rows, num_edges = graph.num_dst, graph.num_edges
        cuts = np.searchsorted(indptr, np.arange(block_edges, num_edges, block_edges), side="left")
        cuts = np.unique(np.concatenate([[0], cuts, [num_rows]]))
        self._units = graph.cached("cpu_unit_arrays", lambda: _UnitArrays(graph))
        index_dtype = self._units.index_dtype
        self.blocks = [
            _Block(indptr, degrees, int(start), int(stop), index_dtype) for start, stop in zip(cuts[:-1], cuts[1:])
        ]

    def __iter__(self):
        return iter(self.blocks)

    def row_sums(self, block, x):
        return block.row_sums(x, self._units.ones(x.dtype), self._units.positions)


def row_blocks(graph, heads):
    """The row blocks for edge arrays of ``heads`` heads (cached per block size)."""
    block_edges = max(_MIN_BLOCK_EDGES, _BLOCK_ELEMENTS // max(1, heads))
    block_edges = 1 << (block_edges - 1).bit_length()  # few distinct sizes, few cached plans
    return graph.cached(("cpu_row_blocks", block_edges), lambda: _RowBlocks(graph, block_edges))


# -- row reductions -----------------------------------------------------------------------


def segment_sum(graph, x, weights=None):
    """(N, H) row sums of an (E, H) array in its compute dtype; 0 for empty rows.

    With weights (E, H) and x (E, H, F): the (N, H, F) row sums of weights[e, h] * x[e, h, :],
    the products formed a row block at a time.
    """
    dtype = accumulation_dtype(x.dtype if weights is None else np.result_type(x, weights))
    width = math.prod(x.shape[1:])
    blocks = row_blocks(graph, width)
    result = np.empty((graph.num_dst, *x.shape[1:]), dtype=dtype)
    for block in blocks:
        terms = np.asarray(x[block.edges], dtype=dtype)
        if weights is not None:
            terms = terms * weights[block.edges, :, None]
        sums = blocks.row_sums(block, terms.reshape(len(terms), width))
        result[block.rows] = sums.reshape(len(block.degrees), *x.shape[1:])
    return result


def source_sum(graph, x):
    """(num_src, H) float64: for each source node, the sum of x over its outgoing edges.

    bincount accumulates in float64, sequentially per source: accurate for any length.
    """
    if not graph.num_edges:  # every sum is empty: no bincount per head
        return np.zeros((graph.num_src, x.shape[1]))
    heads = x.shape[1]
    if graph.num_edges < heads:  # a bincount per head would cost more in calls than in work
        # One bincount over (source, head) bins: each bin still adds its edges in edge order.
        bins = (graph.indices.astype(np.int64)[:, None] * heads + np.arange(heads)).ravel()
        flat = np.bincount(bins, weights=np.ravel(x), minlength=graph.num_src * heads)
        return flat.reshape(graph.num_src, heads)
    result = np.empty((graph.num_src, heads))
    for head in range(heads):
        result[:, head] = np.bincount(graph.indices, weights=x[:, head], minlength=graph.num_src)
    return result


# -- products with node features ----------------------------------------------------------------


def _ones(graph, dtype):
    return graph.cached(("cpu_ones", np.dtype(dtype)), lambda: np.ones(graph.num_edges, dtype=dtype))


def gather_sum(graph, weights, values, out, transpose=False):
    """out (rows, H, F) = per head, sum over edges of weights[e, h] * values[other end of e, h].

    Without transpose: out[d] sums over the edges of row d, gathering values[src].
    With transpose: out[s] sums over the edges leaving s, gathering values[dst] (a product
    with the cached transposed graph: CSR products are faster than scipy's CSC scatter,
    and the chunking of long rows then applies to the sources' rows too).
    weights=None means 1. Computed in the compute dtype of weights and values.
    """
    if not graph.num_edges:  # every sum is empty: no product per head (2**20 heads took 20 s)
        out[...] = 0
        return out
    dtype = accumulation_dtype(values.dtype if weights is None else np.result_type(weights, values))
    values = np.asarray(values, dtype=dtype)
    if transpose:
        graph, perm = graph.transpose()
        if weights is not None:
            weights = np.take(weights, perm, axis=0)
    product = _product(graph)
    num_rows, heads, features = out.shape
    if weights is None:
        # One product for all heads: the (N, H * F) values share the all-ones matrix.
        flat_values = values.reshape(len(values), heads * features)
        if out.flags.c_contiguous:
            product(_ones(graph, dtype), flat_values, out.reshape(num_rows, heads * features))
        else:
            result = np.empty((num_rows, heads * features), dtype=dtype)
            product(_ones(graph, dtype), flat_values, result)
            write(out, result.reshape(out.shape))
        return out
    weights = np.asarray(weights, dtype=dtype)
    if heads > 1 and out.dtype == dtype and graph.num_edges * features <= _HEAD_BATCH_ELEMENTS:
        return _gather_sum_head_blocks(graph, weights, values, out)
    for head in range(heads):
        product(np.ascontiguousarray(weights[:, head]), np.ascontiguousarray(values[:, head, :]), out[:, head, :])
    return out


def _gather_sum_head_blocks(graph, weights, values, out):
    """gather_sum (no transpose) of several heads at a time: the (edges, heads, F) products
    of a block of heads and rows, summed over each row with the row blocks' matrices (the
    same chunks and order as the per-head product). ``out`` has the compute dtype: the
    per-head product casts a long row's float64 sum straight to out's dtype, this would
    cast it to the compute dtype first."""
    num_rows, heads, features = out.shape
    group = max(1, _BLOCK_ELEMENTS // max(1, graph.num_edges * features))
    for first in range(0, heads, group):
        block_heads = slice(first, min(first + group, heads))
        num_heads = block_heads.stop - first
        width = num_heads * features
        blocks = row_blocks(graph, width)
        for block in blocks:
            terms = np.take(values[:, block_heads], graph.indices[block.edges], axis=0)
            terms *= weights[block.edges, block_heads, None]
            sums = blocks.row_sums(block, terms.reshape(len(terms), width))
            out[block.rows, block_heads] = sums.reshape(len(block.degrees), num_heads, features)
    return out
