"""Row partitions of a graph, in NumPy: block bounds and each block's local graph.

A partition owns a contiguous block of destination rows (its edges with them) and a
contiguous block of source nodes: the same block for a square graph, a block of the
source-node bounds for a bipartite one. Its local graph numbers its source columns
``[its own sources | halo sources of owner 0 | of owner 1 | ...]``, each owner's halo in
increasing node order (blocks are contiguous, so one sort groups the halo by owner).
Nothing here knows about Dask: these functions run on the client and on the workers.
"""

import numpy as np


def split(cumulative, parts):
    """Bounds (parts + 1,) cutting ``len(cumulative) - 1`` items into ``parts`` contiguous blocks
    of about equal cost; ``cumulative[i]`` is the cost of items ``0:i`` (nondecreasing, from 0)."""
    cumulative = np.asarray(cumulative, dtype=np.int64)
    count = len(cumulative) - 1
    total = int(cumulative[-1])
    targets = (np.arange(1, parts, dtype=np.int64) * total + parts // 2) // parts
    inner = np.searchsorted(cumulative, targets, side="left")
    bounds = np.concatenate(([0], inner, [count])).astype(np.int64)
    return np.minimum(np.maximum.accumulate(bounds), count)


def row_bounds(indptr, parts):
    """Destination-row bounds balanced by edge count (a row counts as one edge more, so that rows
    without edges spread over the partitions too)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    return split(indptr + np.arange(len(indptr), dtype=np.int64), parts)


def source_bounds(indices, num_src, parts):
    """Source-node bounds of a bipartite graph, balanced alike by the edges reading each source."""
    reads = np.bincount(np.asarray(indices, dtype=np.int64), minlength=num_src) + 1
    return split(np.concatenate(([0], np.cumsum(reads))), parts)


def owners(bounds, nodes):
    """The partition owning each node (empty partitions own nothing)."""
    return np.searchsorted(bounds, nodes, side="right") - 1


def local_block(indptr_block, indices_block, src_bounds, part):
    """The local structure of partition ``part`` from its rows' slice of the global CSR arrays.

    Parameters
    ----------
    indptr_block : (rows + 1,) integer array, ``indptr[start:stop + 1]`` of the global graph
    indices_block : (edges,) integer array, the global source of each of these edges
    src_bounds : (P + 1,) int64 array, the source-node bounds of every partition
    part : int

    Returns
    -------
    indptr : (rows + 1,) array, starting at 0
    indices : (edges,) array of local source columns
    num_src : int, own sources plus halo sources
    needs : list of P int64 arrays, ``needs[p]`` the rows of owner p's block that this
        partition reads (indices into p's block, increasing); empty for ``part`` itself
    """
    indptr_block = np.asarray(indptr_block)
    indices_block = np.asarray(indices_block)
    start, stop = int(src_bounds[part]), int(src_bounds[part + 1])
    own = (indices_block >= start) & (indices_block < stop)
    halo = np.unique(indices_block[~own])
    local = np.empty_like(indices_block)
    local[own] = indices_block[own] - start
    local[~own] = (stop - start) + np.searchsorted(halo, indices_block[~own])
    halo_owner = owners(src_bounds, halo)
    needs = [halo[halo_owner == p] - src_bounds[p] for p in range(len(src_bounds) - 1)]
    indptr = indptr_block - indptr_block[0] if len(indptr_block) else indptr_block
    return indptr, local, (stop - start) + len(halo), needs
