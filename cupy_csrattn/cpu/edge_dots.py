"""Dot products over the feature axis, by default in the compute dtype (see segment_sums):
per edge (``edge_dot``: sddmm, graph attention's scores, the gradients of edge weights and
scores, each optionally with an edge feature added to the source side) and per node
(``feature_dot``).

Nothing of size (E, F) or (E, H, F) is ever materialized: per-edge dot products gather
features in blocks of edges bounded by ``_DOT_BLOCK_ELEMENTS``. Feature axes are summed
by einsum, in chunks of at most ``_FEATURE_CHUNK`` features added in float64.
"""

import numpy as np

from cupy_csrattn.backend import accumulation_dtype

# Feature axes (dot products) are summed by einsum in chunks of at most this many
# features: einsum keeps several SIMD partial sums, each of a few terms per chunk.
_FEATURE_CHUNK = 256

# Edges per block for per-edge dot products: bounds the gathered temporaries to
# about this many elements per operand (1 MiB of float32).
_DOT_BLOCK_ELEMENTS = 1 << 18


def rows_of_edges(graph):
    return graph.row_of_edge()


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


def edge_dot(graph, dst_feat, src_feat, dtype=None, edge_feat=None):
    """(E, H): <dst_feat[dst(e), h], src_feat[src(e), h]> over the last axis, in edge blocks;
    with edge_feat (E, H, F), <dst_feat[dst(e), h], src_feat[src(e), h] + edge_feat[e, h]>.

    Computed in ``dtype``, by default the compute dtype (see ``feature_dot``); gathered
    blocks are converted to it, the node arrays are not. A block's destination features
    are copied row by row with np.repeat (edges are grouped by row), faster than a gather.
    """
    optional = () if edge_feat is None else (edge_feat,)
    source_dtype = accumulation_dtype(np.result_type(dst_feat, src_feat, *optional))
    dtype = source_dtype if dtype is None else np.dtype(dtype)
    dst_feat, src_feat = np.asarray(dst_feat, dtype=source_dtype), np.asarray(src_feat, dtype=source_dtype)
    heads, features = dst_feat.shape[1], dst_feat.shape[2]
    result = np.empty((graph.num_edges, heads), dtype=dtype)
    for edges, dst_rows in edge_blocks(graph, dst_feat, heads * features):
        dst = dst_rows.astype(dtype, copy=False)
        src = np.take(src_feat, graph.indices[edges], axis=0)  # a new array: added to in place
        if edge_feat is not None:
            src += edge_feat[edges]
        feature_dot(dst, src.astype(dtype, copy=False), out=result[edges])
    return result


def edge_blocks(graph, dst_feat, width):
    """(edges, dst_rows) per block of consecutive edges, about _DOT_BLOCK_ELEMENTS / width of
    them: the block's slice of edges and dst_feat's rows repeated for them (a new array: a
    block's destination rows copied row by row with np.repeat, faster than a gather)."""
    rows, indptr = rows_of_edges(graph), graph.indptr
    block = max(1, _DOT_BLOCK_ELEMENTS // max(1, width))
    for start in range(0, graph.num_edges, block):
        stop = min(start + block, graph.num_edges)
        first_row, last_row = int(rows[start]), int(rows[stop - 1]) + 1
        counts = np.diff(np.clip(indptr[first_row : last_row + 1], start, stop))
        yield slice(start, stop), np.repeat(dst_feat[first_row:last_row], counts, axis=0)
