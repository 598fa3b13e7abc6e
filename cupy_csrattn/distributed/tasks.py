"""The functions the workers run: build a partition, take halo rows, run an op, add halo gradients.

Each is submitted by the client pinned to one worker; none imports Dask.
"""

from cupy_csrattn import backend
from cupy_csrattn.distributed import partition
from cupy_csrattn.graph import CSRGraph


def build_partition(indptr_block, indices_block, src_bounds, part):
    """(local CSRGraph, needs by owner, halo row count by owner) of one partition."""
    indptr, indices, num_src, needs = partition.local_block(indptr_block, indices_block, src_bounds, part)
    graph = CSRGraph(indptr, indices, num_src, check="fast", copy=False)
    return graph, needs, [len(need) for need in needs]


def item(sequence, position):
    return sequence[position]


def take_rows(block, rows):
    """The rows of an owner's block that one partition reads (its halo from this owner)."""
    if backend.is_cupy_array(block):
        rows = backend.to_device(rows, True)
    return block[rows]


def _concatenate(parts):
    xp = backend.array_module(backend.is_cupy_array(parts[0]))
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=0)


def run_partition(function, graph, arguments, keywords, kwargs, splits):
    """Call a single-device op on a partition's local graph.

    arguments: one entry per array argument: None, an array (destination-side or edge array),
    or a list ``[own rows, halo from one owner, ...]`` (source-side array, concatenated in the
    local graph's column order); keywords: for each, None (passed by position) or the keyword
    it is passed by; kwargs: the op's other keyword arguments. splits: one entry per result: None to
    keep it whole, or the list of halo row counts by owner that cut a source-side result
    into its own rows and the piece for each owner. Returns the results, flattened: a cut
    result gives its own rows then its pieces, in owner order.
    """
    arrays = [_concatenate(a) if isinstance(a, list) else a for a in arguments]
    positional = [a for a, keyword in zip(arrays, keywords) if keyword is None]
    kwargs = dict(kwargs, **{keyword: a for a, keyword in zip(arrays, keywords) if keyword is not None})
    results = function(graph, *positional, **kwargs)
    results = results if isinstance(results, tuple) else (results,)
    flat = []
    for result, counts in zip(results, splits):
        if counts is None or result is None:
            flat.append(result)
            continue
        start = graph.num_src - sum(counts)
        flat.append(result[:start])
        for count in counts:
            flat.append(result[start : start + count])
            start += count
    return flat


def add_halo_gradients(own, needs, pieces):
    """An owner's gradient: its own partition's, plus each reader's halo piece at the rows it
    read, added in the order given (a fixed order: the same sums every run)."""
    total = own.copy()
    for rows, piece in zip(needs, pieces):
        if backend.is_cupy_array(piece):
            rows = backend.to_device(rows, True)
        total[rows] += piece
    return total


def add_in_order(parts):
    """The sum of the partitions' values, added in partition order."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total
