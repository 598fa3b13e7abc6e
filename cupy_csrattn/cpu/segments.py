"""Per-row reductions and sparse products shared by the CPU ops.

Compute dtype. float32 and float16 inputs are computed in float32, float64 inputs in
float64 (``compute_dtype``). Elementwise work (exp, subtraction, division, products) is
accurate to a few ulp either way; what needs care is summing long rows, so every sum
over a row has an error bound independent of the row's length: rows are cut into chunks
of at most ``_CHUNK`` edges, a chunk is summed sequentially in the compute dtype (error at
most 31 units of roundoff of its sum of magnitudes, 1.8e-6 in float32; sums of many
near-equal terms do come close to that bound), and the chunks of a row are added in
float64. The one exception to the compute dtype is the gradient of a softmax,
p * (dp - sum_row p dp), computed in float64 (``softmax_grad`` and the attention
backward): the subtraction cancels, and float32 rounding of its terms would dominate.

Row sums are sparse products. Summing the rows of an (E, H) edge array is a product
with the (chunks x E) 0/1 matrix that picks each chunk's edges; scipy does it in one
sequential pass with no per-row call overhead. ``ufunc.reduceat`` along axis 0 instead
calls its inner loop once per edge (for H heads) or per row, which dominates on graphs
of short rows.

Row blocks. Row-wise work in edge order (softmax, its gradient, exp(s - lse)) runs over
blocks of whole consecutive rows of about ``_BLOCK_ELEMENTS`` elements: each step of a
block (exp, row sums, broadcasting per-row values with np.repeat, division) then finds
the block in cache, so the op reads its inputs and writes its output about once instead
of once per step. This matters most when other processes share the memory bandwidth.

Row bins (softmax with out-of-range scores only, see ``softmax``). A row maximum has no
sparse product; for it the edge array is gathered once into a padded buffer where rows of
similar length share a bin of shape (width, rows, H): slot j of every row of a bin is one
contiguous (rows, H) slab, so a row reduction is a reduction over axis 0 of the bin,
vectorized over all its rows and heads.

Nothing of size (E, F) or (E, H, F) is ever materialized: sparse products work on
(N, F) operands, and per-edge dot products gather features in bounded blocks.
"""
import numpy as np
import scipy.sparse

# Rows are summed in chunks of at most this many edges (see the module docstring).
# Smaller chunks cost more: at 16, spmm on a graph of average degree 10 takes twice as long.
_CHUNK = 32

# Feature axes (dot products) are summed by einsum in chunks of at most this many
# features: einsum keeps several SIMD partial sums, each of a few terms per chunk.
_FEATURE_CHUNK = 256

# Row blocks hold about this many elements (edges x heads): 1 MiB of float32, so that a
# block stays in a core's L2 cache between the steps that use it.
_BLOCK_ELEMENTS = 1 << 18
_MIN_BLOCK_EDGES = 1 << 12

# Row bins: widths (padded row lengths) are the degree itself up to _EXACT_WIDTHS, above
# that the degree rounded up to _WIDTH_BITS significant bits (at most 1/8 padding).
_EXACT_WIDTHS = 16
_WIDTH_BITS = 4

# Edges per block for per-edge dot products: bounds the gathered temporaries to
# about this many elements per operand (1 MiB of float32).
_DOT_BLOCK_ELEMENTS = 1 << 18


# -- dtypes and small helpers -----------------------------------------------------------

def compute_dtype(dtype):
    """float64 for float64 data, float32 for float32 and float16 (accumulated in float32)."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def as_compute(x):
    """x in its compute dtype (no copy when it already is)."""
    return np.asarray(x).astype(compute_dtype(x.dtype), copy=False)


def write(out, result):
    """out[...] = result (casting to out's dtype, e.g. float16) unless result is out."""
    if result is not out:
        out[...] = result


def _work_array(out, shape, dtype):
    """out itself when it can hold the compute dtype's result, else a new array."""
    if out is not None and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype=dtype)


def rows_of_edges(graph):
    return graph.row_of_edge()


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
        self.long_chunks = (np.repeat(first_chunk[:-1][self.long_rows] - long_indptr[:-1], long_counts)
                            + np.arange(num_long_chunks)).astype(np.intp)
        dtype = _scipy_index_dtype(num_long_chunks)
        self.long_sums = scipy.sparse.csr_array(
            (np.ones(num_long_chunks), np.arange(num_long_chunks, dtype=dtype), long_indptr.astype(dtype)),
            shape=(len(self.long_rows), num_long_chunks))

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
        dtype = _scipy_index_dtype(graph.num_edges, graph.num_dst, graph.num_src,
                                   graph.num_dst + graph.num_edges // _CHUNK + 1)
        self.chunks = _Chunks(graph.indptr, dtype)
        self.indices = graph.indices.astype(dtype, copy=False)
        self.num_cols = graph.num_src

    def __call__(self, data, dense, out):
        """data (E,) and dense (num_cols, K) share a compute dtype, which scipy keeps."""
        matrix = scipy.sparse.csr_array((data, self.indices, self.chunks.indptr),
                                        shape=(len(self.chunks.indptr) - 1, self.num_cols))
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
        self.chunks = _Chunks(indptr[row_start:row_stop + 1] - indptr[row_start], index_dtype)
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
                (ones[:size], positions[:size], self.chunks.indptr), shape=(self.num_chunks, size))
        sums = self.chunks.combine(matrix @ x)
        return sums.astype(x.dtype, copy=False)


class _RowBlocks:
    """The graph's rows in blocks of about ``block_edges`` edges (a row is never cut)."""

    def __init__(self, graph, block_edges):
        indptr = graph.indptr.astype(np.int64)
        degrees = _degrees(graph)
        num_rows, num_edges = graph.num_dst, graph.num_edges
        cuts = np.searchsorted(indptr, np.arange(block_edges, num_edges, block_edges), side="left")
        cuts = np.unique(np.concatenate([[0], cuts, [num_rows]]))
        largest = int(np.diff(indptr[cuts]).max(initial=0))
        index_dtype = _scipy_index_dtype(largest, largest // _CHUNK + num_rows + 1)
        self.blocks = [_Block(indptr, degrees, int(start), int(stop), index_dtype)
                       for start, stop in zip(cuts[:-1], cuts[1:])]
        self._positions = np.arange(largest, dtype=index_dtype)
        self._ones = {}

    def ones(self, dtype):
        if dtype not in self._ones:
            self._ones[dtype] = np.ones(len(self._positions), dtype=dtype)
        return self._ones[dtype]

    def __iter__(self):
        return iter(self.blocks)

    def row_sums(self, block, x):
        return block.row_sums(x, self.ones(x.dtype), self._positions)


def _row_blocks(graph, heads):
    """The row blocks for edge arrays of ``heads`` heads (cached per block size)."""
    block_edges = max(_MIN_BLOCK_EDGES, _BLOCK_ELEMENTS // max(1, heads))
    block_edges = 1 << (block_edges - 1).bit_length()  # few distinct sizes, few cached plans
    return graph.cached(("cpu_row_blocks", block_edges), lambda: _RowBlocks(graph, block_edges))


# -- row reductions -----------------------------------------------------------------------

def segment_sum(graph, x):
    """(N, H) row sums of an (E, H) array in its compute dtype; 0 for empty rows."""
    x = as_compute(x)
    blocks = _row_blocks(graph, x.shape[1])
    result = np.empty((graph.num_dst, x.shape[1]), dtype=x.dtype)
    for block in blocks:
        result[block.rows] = blocks.row_sums(block, x[block.edges])
    return result


def source_sum(graph, x):
    """(num_src, H) float64: for each source node, the sum of x over its outgoing edges.

    bincount accumulates in float64, sequentially per source: accurate for any length.
    """
    result = np.empty((graph.num_src, x.shape[1]))
    for head in range(x.shape[1]):
        result[:, head] = np.bincount(graph.indices, weights=x[:, head], minlength=graph.num_src)
    return result


# -- softmax ------------------------------------------------------------------------------

def softmax(graph, scores, out=None, lse=None):
    """Row softmax of (E, H) scores, computed in their compute dtype.

    Returns probs (E, H), written into ``out`` when given and of the compute dtype (else a
    new array), and writes the rows' log-sum-exp into ``lse`` (N, H) when given.

    An empty row or one whose scores are all -inf has zero weights and lse -inf; a NaN
    (or +inf) score makes its own row and head NaN.

    Subtracting the row maximum only keeps exp in range, and the maximum is the one row
    reduction that is not a sparse product (it needs the row bins). So the raw scores are
    tried first, and kept when every non-empty row's sum of exps is finite and large
    enough that its largest term is a normal number (sum >= tiny * 2**63 >= tiny *
    degree). The unshifted exps are then as accurate as shifted ones (more: score - max
    is not rounded), and terms that underflowed are below 2**-63 of their row's sum.
    Otherwise (scores out of range, rows of -inf, NaN) the softmax is computed again with
    the row maximum subtracted.
    """
    scores = as_compute(scores)
    probs = _work_array(out, scores.shape, scores.dtype)
    row_lse = None if lse is None else np.empty(lse.shape, dtype=scores.dtype)
    if not _softmax_rows(graph, scores, None, probs, row_lse):
        shift = segment_max(graph, scores)
        # Rows of only -inf (or no) scores: shift by 0, so that their exps are 0, not NaN.
        shift[np.isneginf(shift)] = 0
        _softmax_rows(graph, scores, shift, probs, row_lse)
    if lse is not None:
        write(lse, row_lse)
    return probs


def _softmax_rows(graph, scores, shift, probs, lse):
    """probs = exp(scores - shift[row]) / row sums, lse = log(row sums) + shift, by row blocks.

    shift=None means no shift; then returns False (probs and lse half written) as soon as
    a row's sum is out of the range where that is accurate (see ``softmax``).
    """
    if shift is None:
        info = np.finfo(scores.dtype)
        smallest_total, largest_total = info.tiny * 2.0 ** 63, info.max
    blocks = _row_blocks(graph, scores.shape[1])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for block in blocks:
            exps = probs[block.edges]
            if shift is None:
                np.exp(scores[block.edges], out=exps)
            else:
                np.subtract(scores[block.edges], np.repeat(shift[block.rows], block.degrees, axis=0), out=exps)
                np.exp(exps, out=exps)
            total = blocks.row_sums(block, exps)
            if shift is None:
                # NaN fails both comparisons.
                fine = (total >= smallest_total) & (total <= largest_total)
                if not fine.all():
                    fine[block.degrees == 0] = True  # empty rows: sum 0, nothing to divide
                    if not fine.all():
                        return False
            if lse is not None:
                row_lse = lse[block.rows]
                np.log(total, out=row_lse)  # log(0) = -inf for empty and all -inf rows
                if shift is not None:
                    row_lse += shift[block.rows]
            if shift is not None:
                # A shifted row's sum is >= 1 (its maximum gives exp(0)) unless all its
                # scores are -inf; then its exps are all 0, and dividing by 1 keeps them.
                total[total == 0] = 1
            np.divide(exps, np.repeat(total, block.degrees, axis=0), out=exps)
    return True


def probs_from_lse(graph, scores, lse):
    """exp(scores - lse[row]) in the compute dtype, rows of lse -inf at zero weight."""
    scores = as_compute(scores)
    lse = np.asarray(lse, dtype=scores.dtype)
    probs = np.empty_like(scores)
    with np.errstate(invalid="ignore", over="ignore"):
        for block in _row_blocks(graph, scores.shape[1]):
            block_probs = probs[block.edges]
            np.subtract(scores[block.edges], np.repeat(lse[block.rows], block.degrees, axis=0), out=block_probs)
            np.exp(block_probs, out=block_probs)
    dead = np.isneginf(lse)
    if dead.any():  # rows with no edges or all scores -inf: exp(s + inf) would be inf or NaN
        probs[expand_rows(graph, dead)] = 0
    return probs


def softmax_grad(graph, probs, grad_probs, out=None):
    """grad of the scores given the probabilities and the grad of the probabilities.

    probs * (grad_probs - sum_row probs * grad_probs), one row block at a time. Computed in
    float64 whatever the inputs: the subtraction cancels (to exactly 0 when a row's
    grad_probs are all equal), and float32 rounding of its terms would then dominate the
    small result. Returns the float64 result, or ``out`` written with it.
    """
    result = np.empty(np.shape(probs)) if out is None else out
    blocks = _row_blocks(graph, probs.shape[1])
    for block in blocks:
        p = probs[block.edges].astype(np.float64)
        g = grad_probs[block.edges].astype(np.float64)
        row_dot = blocks.row_sums(block, p * g)
        g -= np.repeat(row_dot, block.degrees, axis=0)
        g *= p
        result[block.edges] = g
    return result


# -- row bins (for the row maximum) -----------------------------------------------------------

class _RowBins:
    """The padded layout of a graph's rows (see the module docstring).

    Rows of similar length share a bin of shape (width, rows, H). Widths are the exact
    degree up to _EXACT_WIDTHS, above that the degree rounded up to _WIDTH_BITS
    significant bits (at most 1/8 padding).

    gather  (P,) intp: edge copied into each padded slot (padding slots: edge 0, overwritten).
    padding (number of padding slots,) intp.
    rows    (number of non-empty rows,) intp: the rows in bin order.
    bins    list of (first slot, width, first row in ``rows``, row count).
    """

    def __init__(self, indptr):
        indptr = indptr.astype(np.intp)
        degrees = np.diff(indptr)
        rows = np.flatnonzero(degrees)
        widths = _bin_width(degrees[rows])
        order = np.argsort(widths, kind="stable")
        self.rows, widths = rows[order], widths[order]
        unique_widths, first_row, counts = np.unique(widths, return_index=True, return_counts=True)
        bin_starts = np.zeros(len(unique_widths) + 1, dtype=np.intp)
        np.cumsum(unique_widths * counts, out=bin_starts[1:])
        self.bins = [(int(s), int(w), int(f), int(c))
                     for s, w, f, c in zip(bin_starts[:-1], unique_widths, first_row, counts)]
        num_slots = int(bin_starts[-1])

        # Row i of bin b (at position k = first_row[b] + i of self.rows) puts its edge j
        # at slot bin_start[b] + j * count[b] + i.
        bin_of_row = np.repeat(np.arange(len(counts), dtype=np.intp), counts)
        row_base = bin_starts[:-1][bin_of_row] + (np.arange(len(self.rows)) - first_row[bin_of_row])
        row_stride = counts[bin_of_row].astype(np.intp)
        row_degrees = degrees[self.rows]
        # Edges listed row by row in bin order: their row position k and slot j in the row.
        k = np.repeat(np.arange(len(self.rows), dtype=np.intp), row_degrees)
        j = np.arange(len(k), dtype=np.intp) - np.repeat(np.cumsum(row_degrees) - row_degrees, row_degrees)
        edges = indptr[self.rows][k] + j
        slots = row_base[k] + j * row_stride[k]
        self.num_rows = len(degrees)
        self.gather = np.zeros(num_slots, dtype=np.intp)
        self.gather[slots] = edges
        is_padding = np.ones(num_slots, dtype=bool)
        is_padding[slots] = False
        self.padding = np.flatnonzero(is_padding)

    def to_bins(self, x, fill):
        """(P, H) padded copy of the (E, H) array x, padding slots set to fill."""
        buffer = np.take(x, self.gather, axis=0, mode="clip")  # indices are in range
        buffer[self.padding] = fill
        return buffer

    def blocks(self, buffer):
        """(block (width, rows, H) view, slice of the bin's rows in ``rows`` order) per bin."""
        heads = buffer.shape[1]
        for start, width, first, count in self.bins:
            yield (buffer[start:start + width * count].reshape(width, count, heads),
                   slice(first, first + count))

    def per_row(self, stats, fill):
        """(N, H) array of per-row stats given in ``rows`` order, fill for empty rows."""
        result = np.full((self.num_rows, stats.shape[1]), fill, dtype=stats.dtype)
        result[self.rows] = stats
        return result


def _bin_width(degrees):
    """Bin width of rows of the given (positive) degrees."""
    degrees = degrees.astype(np.int64)
    bits = np.zeros_like(degrees)
    long = degrees > _EXACT_WIDTHS
    # bit_length(d - 1) of the long rows, exact for d < 2**53
    bits[long] = np.frexp((degrees[long] - 1).astype(np.float64))[1]
    shift = np.maximum(bits - _WIDTH_BITS, 0)
    return np.where(long, (((degrees - 1) >> shift) + 1) << shift, degrees).astype(np.intp)


def _row_bins(graph):
    return graph.cached("cpu_row_bins", lambda: _RowBins(graph.indptr))


def segment_max(graph, x):
    """(N, H) row maxima of an (E, H) array; -inf for empty rows; NaN propagates."""
    bins = _row_bins(graph)
    # -inf padding never wins a maximum.
    buffer = bins.to_bins(x, -np.inf)
    maxima = np.empty((len(bins.rows), x.shape[1]), dtype=x.dtype)
    for block, rows in bins.blocks(buffer):
        np.maximum.reduce(block, axis=0, out=maxima[rows])
    return bins.per_row(maxima, -np.inf)


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
    dtype = compute_dtype(values.dtype if weights is None else np.result_type(weights, values))
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
    for head in range(heads):
        product(np.ascontiguousarray(weights[:, head]), np.ascontiguousarray(values[:, head, :]), out[:, head, :])
    return out


def feature_dot(a, b, out=None):
    """(..., H): sum over the last axis of a * b, both of one compute dtype.

    einsum's sum of products has far less per-call overhead than a ufunc reduction over
    a short axis. Feature axes longer than _FEATURE_CHUNK are summed in chunks, added in
    float64.
    """
    features = a.shape[-1]
    if features <= _FEATURE_CHUNK:
        return np.einsum("...f,...f->...", a, b, out=out)
    total = np.zeros(a.shape[:-1])
    for start in range(0, features, _FEATURE_CHUNK):
        chunk = slice(start, start + _FEATURE_CHUNK)
        total += np.einsum("...f,...f->...", a[..., chunk], b[..., chunk])
    if out is None:
        return total.astype(a.dtype)
    out[...] = total
    return out


def edge_dot(graph, dst_feat, src_feat, dtype=None):
    """(E, H): <dst_feat[dst(e), h], src_feat[src(e), h]> over the last axis, in edge blocks.

    Computed in ``dtype``, by default the compute dtype (see ``feature_dot``); gathered
    blocks are converted to it, the node arrays are not. A block's destination features
    are copied row by row with np.repeat (edges are grouped by row), faster than a gather.
    """
    source_dtype = compute_dtype(np.result_type(dst_feat, src_feat))
    dtype = source_dtype if dtype is None else np.dtype(dtype)
    dst_feat, src_feat = np.asarray(dst_feat, dtype=source_dtype), np.asarray(src_feat, dtype=source_dtype)
    heads, features = dst_feat.shape[1], dst_feat.shape[2]
    result = np.empty((graph.num_edges, heads), dtype=dtype)
    rows, indptr = rows_of_edges(graph), graph.indptr
    block = max(1, _DOT_BLOCK_ELEMENTS // max(1, heads * features))
    for start in range(0, graph.num_edges, block):
        stop = min(start + block, graph.num_edges)
        first_row, last_row = int(rows[start]), int(rows[stop - 1]) + 1
        counts = np.diff(np.clip(indptr[first_row:last_row + 1], start, stop))
        dst = np.repeat(dst_feat[first_row:last_row], counts, axis=0).astype(dtype, copy=False)
        src = np.take(src_feat, graph.indices[start:stop], axis=0).astype(dtype, copy=False)
        feature_dot(dst, src, out=result[start:stop])
    return result
