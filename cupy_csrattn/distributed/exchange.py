"""One distributed op call: check the arrays, gather halos, run per partition, return halo gradients.

Every move goes through Dask's own task graph (``client.submit`` pinned to workers), so the
same code runs with NumPy chunks on a CPU cluster and with CuPy chunks on GPU workers.

Forward: for each source-side argument, owner p slices the rows partition q reads
(``take_rows`` on p's worker, with the halo list kept there) and q concatenates
``[own | halo by owner]`` and calls the single-device op on its local graph. Backward: a
source-side gradient comes out of q's call for ``[own | halo by owner]``; each halo piece
goes to its owner, which adds the pieces of partitions 0, 1, ... in that order.
"""

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from cupy_csrattn.distributed import tasks
from cupy_csrattn.distributed.graph import PartitionedGraph, check_timeout, wait_for
from cupy_csrattn.graph import CSRGraph

# Sides of an array argument: node rows of either side or edges (dask arrays chunked by the
# partition), or "param": a parameter every partition reads whole (a NumPy or CuPy array).
# A result's side may also be "sum": each partition's value, summed over partitions.
SIDES = ("dst", "src", "edge")
_SIDE_WORDS = {"dst": "row_chunks", "src": "src_chunks", "edge": "edge_chunks"}


def _probe_graph():
    return CSRGraph(np.zeros(1, np.int32), np.zeros(0, np.int32), 0)


def check_array(pg, name, x, side):
    """A dask array chunked for ``side`` (for "param": a whole NumPy or CuPy array);
    TypeError/ValueError naming ``name`` otherwise."""
    if side == "param":
        if isinstance(x, da.Array):
            raise TypeError(f"{name} is a parameter every partition reads whole: pass a NumPy or CuPy array")
        return x
    if not isinstance(x, da.Array):
        raise TypeError(
            f"{name} must be a dask array chunked by the partition (graph.as_node_array or "
            f"graph.as_edge_array make one), got {type(x).__name__}"
        )
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one axis, got a 0-d array")
    rows = {"dst": pg.num_dst, "src": pg.num_src, "edge": pg.num_edges}[side]
    words = {"dst": "destination nodes", "src": "source nodes", "edge": "edges"}[side]
    if any(np.isnan(n) for n in x.shape):
        raise ValueError(f"{name} has unknown chunk sizes; call compute_chunk_sizes() on it first")
    if x.shape[0] != rows:
        raise ValueError(f"{name} has {x.shape[0]} rows, but the graph has {rows} {words}")
    expected = pg.chunks_of(side)
    if tuple(x.chunks[0]) != expected:
        raise ValueError(
            f"{name} is chunked {tuple(x.chunks[0])} along axis 0, but the partition's {_SIDE_WORDS[side]} "
            f"are {expected}: rechunk it with {name}.rechunk({{0: graph.{_SIDE_WORDS[side]}}})"
        )
    split_axes = [axis for axis in range(1, x.ndim) if len(x.chunks[axis]) != 1]
    if split_axes:
        raise ValueError(f"{name} must be one chunk along every axis but the first; axes {split_axes} are split")
    return x


def _probe(function, inputs, kwargs):
    """Run the single-device op on an empty graph with empty arrays of the inputs' dtypes and
    trailing shapes: it checks them (errors naming the argument) and gives each result's dtype
    and trailing shape (None for a result the op does not return)."""
    empty = [
        None if x is None else np.asarray(x) if side == "param" else np.empty((0,) + tuple(x.shape[1:]), x.dtype)
        for _, x, side, _ in inputs
    ]
    positional = [a for a, (_, _, _, keyword) in zip(empty, inputs) if not keyword]
    kwargs = dict(kwargs, **{name: a for a, (name, _, _, keyword) in zip(empty, inputs) if keyword})
    results = function(_probe_graph(), *positional, **kwargs)
    results = results if isinstance(results, tuple) else (results,)
    return [None if r is None else (r.dtype, r.shape) for r in results]


def _blocks(pg, inputs):
    """Futures of each input's chunks, by partition (None for absent inputs)."""
    chunked = [x is not None and side != "param" for _, x, side, _ in inputs]
    given = [x for (_, x, _, _), is_chunked in zip(inputs, chunked) if is_chunked]
    futures = pg.client.compute([block for x in given for block in x.to_delayed().ravel()])
    futures = iter(futures)
    return [
        [next(futures) for _ in range(pg.npartitions)] if is_chunked else None
        for (_, x, _, _), is_chunked in zip(inputs, chunked)
    ]


def call(pg, function, inputs, kwargs, sides, timeout):
    """Run ``function`` (a single-device op) on every partition.

    inputs: [(name, dask array or None, side, keyword)] in the op's order after the graph,
    keyword True for an array the op takes by keyword; kwargs: its other keyword arguments;
    sides: the side of each of its results. Returns its results as dask arrays chunked by
    the partition (None where it returns None), a tuple when the op returns a tuple.
    """
    if not isinstance(pg, PartitionedGraph):
        raise TypeError(f"graph must be a PartitionedGraph, got {type(pg).__name__}")
    timeout = check_timeout(timeout)
    inputs = [(name, None if x is None else check_array(pg, name, x, side), side, kw) for name, x, side, kw in inputs]
    keywords = [name if keyword else None for name, _, _, keyword in inputs]
    shapes = _probe(function, inputs, kwargs)
    client, workers, parts = pg.client, pg.workers, range(pg.npartitions)
    blocks = _blocks(pg, inputs)
    locals_ = []
    for q in parts:
        arguments = []
        for (_, x, side, _), chunks in zip(inputs, blocks):
            if x is None or side == "param":
                arguments.append(x)
                continue
            if side != "src":
                arguments.append(chunks[q])
                continue
            halo = [
                client.submit(tasks.take_rows, chunks[p], pg.halo_lists[q, p], workers=[workers[p]], pure=False)
                for p in parts
                if pg.halo_rows[q, p]
            ]
            arguments.append([chunks[q]] + halo)
        cut = [[int(n) for n in pg.halo_rows[q]] if side == "src" else None for side in sides]
        locals_.append(
            client.submit(
                tasks.run_partition,
                function,
                pg.local_graphs[q],
                arguments,
                keywords,
                kwargs,
                cut,
                workers=[workers[q]],
                pure=False,
            )
        )
    outputs, waiting = [], {q: [] for q in parts}
    position = 0
    for side, shape in zip(sides, shapes):
        if shape is None:
            outputs.append(None)
            position += 1
            continue
        pieces = [client.submit(tasks.item, locals_[q], position, workers=[workers[q]], pure=False) for q in parts]
        if side == "src":
            pieces = [_reduce(pg, locals_, own, position, p) for p, own in zip(parts, pieces)]
            position += 1 + pg.npartitions
        else:
            position += 1
        for q in parts:
            waiting[q].append(pieces[q])
        if side == "sum":  # on the first worker, partitions added in order: the same sum every run
            pieces = client.submit(tasks.add_in_order, pieces, workers=[workers[0]], pure=False)
            waiting[0].append(pieces)
        outputs.append((side, shape, pieces))
    wait_for(client, waiting, timeout, pg, f"{function.__name__} on {pg!r}")
    like = next(x for _, x, side, _ in inputs if x is not None and side != "param")
    arrays = tuple(None if o is None else _assemble(pg, like, *o) for o in outputs)
    return arrays if len(arrays) > 1 else arrays[0]


def _reduce(pg, locals_, own, position, p):
    """Owner p's source-side gradient: its own part plus the halo pieces of readers q = 0, 1, ..."""
    readers = [q for q in range(pg.npartitions) if pg.halo_rows[q, p]]
    if not readers:
        return own
    client, worker = pg.client, pg.workers[p]
    pieces = [
        client.submit(tasks.item, locals_[q], position + 1 + p, workers=[pg.workers[q]], pure=False) for q in readers
    ]
    needs = [pg.halo_lists[q, p] for q in readers]
    return client.submit(tasks.add_halo_gradients, own, needs, pieces, workers=[worker], pure=False)


def _assemble(pg, like, side, shape, futures):
    dtype, shape = shape
    meta = meta_from_array(like, ndim=len(shape), dtype=dtype)
    if side == "sum":
        return da.from_delayed(futures, shape=shape, dtype=dtype, meta=meta)
    trailing = shape[1:]
    chunks = pg.chunks_of(side)
    parts = [
        da.from_delayed(future, shape=(rows,) + tuple(trailing), dtype=dtype, meta=meta)
        for future, rows in zip(futures, chunks)
    ]
    whole = parts[0] if len(parts) == 1 else da.concatenate(parts, axis=0)
    # concatenate drops empty chunks; an empty partition keeps its (empty) chunk
    return whole if whole.chunks[0] == chunks else whole.rechunk({0: chunks})
