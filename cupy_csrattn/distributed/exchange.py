"""One distributed op call: check the arrays, gather halos, run per partition, return halo gradients.

Every move goes through Dask's own task graph (``client.submit`` pinned to workers), so the
same code runs with NumPy chunks on a CPU cluster and with CuPy chunks on GPU workers; a graph
made with ``exchange="nccl"`` moves the halos of CuPy chunks through NCCL instead (peers.py),
the rest of a call unchanged.

Forward: for each source-side argument, owner p slices the rows partition q reads
(``take_rows`` on p's worker, with the halo list kept there) and q concatenates
``[own | halo by owner]`` and calls the single-device op on its local graph. Backward: a
source-side gradient comes out of q's call for ``[own | halo by owner]``; each halo piece
goes to its owner, which adds the pieces of partitions 0, 1, ... in that order.
"""

import contextlib

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from cupy_csrattn import backend
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
        # An array from here on: a task takes a list argument for a source-side array's pieces.
        return backend.as_array(name, x)
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
    trailing shapes (a parameter's whole shape: no edge reads its values; a NumPy one whatever
    its device, CuPy's do not convert implicitly): it checks them (errors naming the argument)
    and gives each result's dtype and trailing shape (None for a result the op does not return)."""
    empty = [
        None if x is None else np.empty(x.shape if side == "param" else (0,) + tuple(x.shape[1:]), x.dtype)
        for _, x, side, _ in inputs
    ]
    positional = [a for a, (_, _, _, keyword) in zip(empty, inputs) if not keyword]
    kwargs = dict(kwargs, **{name: a for a, (name, _, _, keyword) in zip(empty, inputs) if keyword})
    try:
        results = function(_probe_graph(), *positional, **kwargs)
    except (TypeError, ValueError) as error:  # its shapes are the empty arrays': say so
        error.args = (f"{error} (checked on an empty block of each array: a shape's leading 0 stands for its rows)",)
        raise
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
    shapes = _probe(function, inputs, kwargs)
    like = next(x for _, x, side, _ in inputs if x is not None and side != "param")
    through_peers = pg.peers is not None and pg.peers.carries(like._meta)
    with pg.peers.lock if through_peers else contextlib.nullcontext():
        results = _run(pg, function, inputs, kwargs, sides, shapes, through_peers, timeout)
    arrays = tuple(None if r is None else _assemble(pg, like, *r) for r in results)
    return arrays if len(arrays) > 1 else arrays[0]


def _run(pg, function, inputs, kwargs, sides, shapes, through_peers, timeout):
    """(side, (dtype, shape), futures by partition) of each result (None where there is none),
    once every partition's work is done. One exchange through NCCL at a time per graph: its
    ranks pair sends and receives in the order they are issued."""
    client, workers, parts = pg.client, pg.workers, range(pg.npartitions)
    keywords = [name if keyword else None for name, _, _, keyword in inputs]
    blocks = _blocks(pg, inputs)
    sources = [i for i, (_, x, side, _) in enumerate(inputs) if x is not None and side == "src"]
    exchanges = []  # the NCCL exchange tasks, waited for with the results
    if through_peers and sources:
        exchanged, by_worker = pg.peers.halos(pg, [blocks[i] for i in sources])
        halos = dict(zip(sources, exchanged))
        exchanges += by_worker.items()
    else:
        halos = {i: _halos(pg, blocks[i]) for i in sources}
    locals_ = []
    for q in parts:
        arguments = []
        for i, ((_, x, side, _), chunks) in enumerate(zip(inputs, blocks)):
            if x is None or side == "param":
                arguments.append(x)
            else:
                arguments.append([chunks[q]] + halos[i][q] if side == "src" else chunks[q])
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
    positions, position = [], 0  # where each result starts in a partition's flat results
    for side, shape in zip(sides, shapes):
        positions.append(position)
        position += 1 + pg.npartitions if shape is not None and side == "src" else 1
    pieces = {
        k: [client.submit(tasks.item, locals_[q], positions[k], workers=[workers[q]], pure=False) for q in parts]
        for k, shape in enumerate(shapes)
        if shape is not None
    }
    gradients = [k for k in pieces if sides[k] == "src"]
    if through_peers and gradients:
        summed, by_worker = pg.peers.reduced(pg, locals_, [(pieces[k], positions[k]) for k in gradients])
        pieces.update(zip(gradients, summed))
        exchanges += by_worker.items()
    else:
        for k in gradients:
            pieces[k] = [_reduce(pg, locals_, pieces[k][p], positions[k], p) for p in parts]
    waiting = {q: [pieces[k][q] for k in pieces] for q in parts}
    for worker, future in exchanges:
        waiting[workers.index(worker)].append(future)
    for k in pieces:
        if sides[k] == "sum":  # on the first worker, partitions added in order: the same sum every run
            pieces[k] = client.submit(tasks.add_in_order, pieces[k], workers=[workers[0]], pure=False)
            waiting[0].append(pieces[k])
    wait_for(client, waiting, timeout, pg, f"{function.__name__} on {pg!r}")
    return [(sides[k], shapes[k], pieces[k]) if k in pieces else None for k in range(len(shapes))]


def _halos(pg, chunks):
    """{reader q: futures of the halo rows it reads from each owner, in owner order} of one
    source-side array, each owner slicing them (Dask moves them to the reader)."""
    client, parts = pg.client, range(pg.npartitions)
    return {
        q: [
            client.submit(tasks.take_rows, chunks[p], pg.halo_lists[q, p], workers=[pg.workers[p]], pure=False)
            for p in parts
            if pg.halo_rows[q, p]
        ]
        for q in parts
    }


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
