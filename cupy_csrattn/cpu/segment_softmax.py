"""Row softmax, its gradient and the row maximum on the CPU.

The softmax, its gradient and exp(s - lse) run over the row blocks of segment_sums, so
their row sums are chunked sparse products, accurate for rows of any length, and a block
stays in cache across its steps (see segment_sums). They compute in the compute dtype of
segment_sums, with one exception: the gradient of a softmax, p * (dp - sum_row p dp), is
computed in float64 (``softmax_grad`` and the attention backward): the subtraction
cancels, and float32 rounding of its terms would dominate.

Row bins (softmax with out-of-range scores only, see ``softmax``). A row maximum has no
sparse product; for it the edge array is gathered once into a padded buffer where rows of
similar length share a bin of shape (width, rows, H): slot j of every row of a bin is one
contiguous (rows, H) slab, so a row reduction is a reduction over axis 0 of the bin,
vectorized over all its rows and heads.
"""

import numpy as np

from cupy_csrattn.cpu.segment_sums import as_compute, expand_rows, row_blocks, write

# Row bins: widths (padded row lengths) are the degree itself up to _EXACT_WIDTHS, above
# that the degree rounded up to _WIDTH_BITS significant bits (at most 1/8 padding).
_EXACT_WIDTHS = 16
_WIDTH_BITS = 4


def _work_array(out, shape, dtype):
    """out itself when it can hold the compute dtype's result, else a new array."""
    if out is not None and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype=dtype)


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
    degree), and, where that sum is below 1, none of its exps underflowed (is below
    tiny). The unshifted exps are then as accurate as shifted ones (more: score - max is
    not rounded): a subnormal or vanished exp, off by up to half a subnormal spacing, is
    divided by a sum of at least 1, which leaves its weight that accurate, as the shifted
    weight is; divided by a smaller sum, that error grows (a weight of 8e-30 came out 0 in
    float32 for scores -43 and -110). Otherwise (scores out of range, rows of -inf, NaN) the
    rows and heads whose sums are not so are computed again with their row maximum
    subtracted; the others keep the raw scores, so that a row's result never depends on
    another row's scores (the distributed ops, on a block of rows, give the whole graph's
    results).
    """
    return softmax_weights(graph, scores, out, lse)[0]


def softmax_weights(graph, scores, out=None, lse=None):
    """softmax's probs and the (N, H) bool mask of the rows and heads without weight (their
    scores all -inf, or no edges), or None where the rows were not shifted (every non-empty
    row then has weight). An aggregation's output is zero there, whatever the values (the
    zero weights times an infinite value would give NaN)."""
    scores = as_compute(scores)
    probs = _work_array(out, scores.shape, scores.dtype)
    row_lse = None if lse is None else np.empty(lse.shape, dtype=scores.dtype)
    weightless = None
    in_range = _softmax_rows(graph, scores, None, probs, row_lse)
    if in_range is not None:
        shift = segment_max(graph, scores)
        # Rows of only -inf (or no) scores: shift by 0, so that their exps are 0, not NaN.
        weightless = np.isneginf(shift)
        # Rows and heads in range keep their unshifted results (a shift of 0 gives the same).
        shift[weightless | in_range] = 0
        _softmax_rows(graph, scores, shift, probs, row_lse, done=in_range)
    if lse is not None:
        write(lse, row_lse)
    return probs, weightless


def zero_weightless(out, weightless):
    """out (N, H, F) zero on the rows and heads of the mask of ``softmax_weights``."""
    if weightless is not None and weightless.any():
        out[weightless] = 0


def _softmax_rows(graph, scores, shift, probs, lse, done=None):
    """probs = exp(scores - shift[row]) / row sums, lse = log(row sums) + shift, by row blocks.

    shift=None means no shift; then returns None when every row's sum is in the range where
    that is accurate (see ``softmax``), else the (N, H) bool mask of the rows and heads whose
    sums are (empty rows count as in range; the others' probs and lse are then wrong).
    done: an (N, H) mask of rows and heads already computed; blocks of only those are skipped.
    """
    in_range = None
    if shift is None:
        info = np.finfo(scores.dtype)
        smallest_total, largest_total = info.tiny * 2.0**63, info.max
    blocks = row_blocks(graph, scores.shape[1])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for block in blocks:
            if done is not None and done[block.rows].all():
                continue
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
                # A sum below 1 magnifies the error of an exp that underflowed (see softmax).
                small_sum = fine & (total < 1)
                # (fmin skips NaN: a NaN row is not fine already.)
                if small_sum.any() and np.fmin.reduce(exps, axis=None) < info.tiny:
                    underflowed = (exps < info.tiny).astype(exps.dtype)
                    fine &= ~(small_sum & (blocks.row_sums(block, underflowed) > 0))
                if not fine.all():
                    fine[block.degrees == 0] = True  # empty rows: sum 0, nothing to divide
                    if not fine.all():
                        if in_range is None:
                            in_range = np.ones((graph.num_dst, scores.shape[1]), dtype=bool)
                        in_range[block.rows] = fine
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
    return in_range


def probs_from_lse(graph, scores, lse):
    """exp(scores - lse[row]) in the compute dtype, rows of lse -inf at zero weight."""
    scores = as_compute(scores)
    lse = np.asarray(lse, dtype=scores.dtype)
    probs = np.empty_like(scores)
    with np.errstate(invalid="ignore", over="ignore"):
        for block in row_blocks(graph, scores.shape[1]):
            block_probs = probs[block.edges]
            np.subtract(scores[block.edges], np.repeat(lse[block.rows], block.degrees, axis=0), out=block_probs)
            np.exp(block_probs, out=block_probs)
    dead = np.isneginf(lse)
    if dead.any():  # rows with no edges or all scores -inf: exp(s + inf) would be inf or NaN
        probs[expand_rows(graph, dead)] = 0
    return probs


def softmax_grad(graph, probs, grad_probs, out=None, row_dot=None, zero_weights_add_nothing=False):
    """grad of the scores given the probabilities and the grad of the probabilities.

    probs * (grad_probs - D), one row block at a time, with D the row sums of
    probs * grad_probs, or ``row_dot`` ((N, H) float64) when given: the fused attentions
    take D = <grad_out[d], out[d]>, as their GPU kernels do. Computed in float64 whatever the
    inputs: the subtraction cancels (to exactly 0 when a row's grad_probs are all equal), and
    float32 rounding of its terms would then dominate the small result. With
    ``zero_weights_add_nothing`` (edge_softmax_backward), a probability of exactly 0 adds nothing:
    its gradient is 0 and its grad_probs enters no sum, whatever it holds (0 * inf would be
    NaN), so a row of zero weights has zero gradient. Returns the float64 result, or ``out``
    written with it.
    """
    result = np.empty(np.shape(probs)) if out is None else out
    blocks = row_blocks(graph, probs.shape[1])
    for block in blocks:
        p = probs[block.edges].astype(np.float64)
        g = grad_probs[block.edges].astype(np.float64)
        zero = (p == 0) if zero_weights_add_nothing else None
        if zero is not None:
            g[zero] = 0
        block_dot = blocks.row_sums(block, p * g) if row_dot is None else row_dot[block.rows]
        g -= np.repeat(block_dot, block.degrees, axis=0)
        g *= p
        if zero is not None:
            g[zero] = 0  # also where D is NaN or inf
        result[block.edges] = g
    return result


def without_weight(graph, weightless):
    """(rows, edges): the (N, H) bool mask ``weightless`` of rows and heads without weight
    (their scores all -inf, lse -inf; None for none) and the (E, H) mask of their edges, or
    (None, None) where those rows hold no edge.

    Such a row adds nothing to any gradient, as a row without edges: its weights are 0, but
    its values and grad_out, and the inputs whose -inf made its scores, may be infinite, and
    0 * inf would be NaN.
    """
    if weightless is None or not weightless.any():
        return None, None
    edges = expand_rows(graph, weightless)
    return (weightless, edges) if edges.any() else (None, None)


def without_rows(x, rows):
    """x (N, H, ...) with the rows and heads of the (N, H) mask ``rows`` zero: a copy, or x
    itself where ``rows`` is None."""
    if rows is None:
        return x
    x = np.array(x)
    x[rows] = 0
    return x


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
        self.bins = [
            (int(s), int(w), int(f), int(c)) for s, w, f, c in zip(bin_starts[:-1], unique_widths, first_row, counts)
        ]
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
            yield (buffer[start : start + width * count].reshape(width, count, heads), slice(first, first + count))

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
