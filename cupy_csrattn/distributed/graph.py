"""PartitionedGraph: a graph cut into contiguous row blocks, one per Dask worker.

Set-up sends each partition its rows' slice of the CSR arrays; the partition's worker builds
its local CSRGraph (columns renumbered ``[own sources | halo by owner]``) and the lists of
rows it reads from each owner, and each list goes to its owner, once. Between calls the
local graph (with the plan and transpose the ops cache on it) stays on its worker and each
halo list on its owner's worker, as Dask futures pinned there.
"""

import math
import numbers
import sys

import dask.array as da
import distributed
import numpy as np
import scipy.sparse

from cupy_csrattn import backend
from cupy_csrattn.distributed import partition, peers, tasks
from cupy_csrattn.graph import CSRGraph

DEFAULT_TIMEOUT = 300.0  # seconds a call (or the set-up) waits for its partitions
# The set-up gathers a table of npartitions**2 halo counts and runs a few tasks per partition:
# 4096 partitions take 134 MB of counts; a count meant for rows or edges would take terabytes.
MAX_PARTITIONS = 4096
# How halo rows and their gradients move between workers: Dask's tasks (any chunks, any
# cluster), or NCCL sends between the workers' GPUs for CuPy chunks (one rank per worker).
EXCHANGES = ("tasks", "nccl")


def workers_of(client):
    """The addresses of the client's workers, sorted; ValueError when there are none.

    Asked of the scheduler itself: Client.scheduler_info returns the client's cached identity,
    which its periodic refresh may replace, between the fetch and the return, with one that
    lists no worker (the refresh asks for totals only)."""
    if not isinstance(client, distributed.Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    workers = sorted(client.sync(client.scheduler.identity)["workers"])
    if not workers:
        raise ValueError("client has no workers: start the cluster's workers (or wait for them) first")
    return workers


def check_timeout(timeout):
    """Seconds to wait as a float, or None (no limit) for None and +inf."""
    if timeout is None:
        return None
    # numbers.Real: NumPy's integers and floats are numbers of seconds too (np.float64 alone
    # subclasses float); bool is an Integral, and no count of seconds.
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    if isinstance(timeout, numbers.Integral) and timeout > sys.float_info.max:  # 10**400: no float holds it
        return None
    return None if math.isinf(timeout) else float(timeout)


def _chunks(bounds):
    return tuple(int(n) for n in np.diff(bounds))


class PartitionedGraph:
    """A graph cut into contiguous blocks of destination rows, each living on a Dask worker.

    Build one with ``from_scipy`` or ``from_graph``. Node arrays given to the ops in
    ``cupy_csrattn.distributed`` are dask arrays chunked along axis 0 by ``row_chunks``
    (destination side) or ``src_chunks`` (source side; the same as ``row_chunks`` for a
    square graph), edge arrays by ``edge_chunks`` (the graph's CSR edge order); other axes
    are one chunk. ``as_node_array`` and ``as_edge_array`` chunk an array so.

    ``exchange="tasks"`` (the default) moves halo rows and halo gradients through Dask's own
    tasks: any chunks, any cluster. ``exchange="nccl"`` makes one NCCL communicator over the
    workers at set-up (each worker a rank on its own GPU, as dask_cuda's LocalCUDACluster
    gives) and moves them for CuPy chunks with NCCL sends, one task per worker and call
    (NumPy chunks still take the tasks); ``close()`` destroys the communicators. A rank that
    fails leaves its peers waiting in NCCL: the call's timeout names the partitions.

    Attributes
    ----------
    client : distributed.Client
    npartitions : int
    workers : list of str, the worker address of each partition (round robin over the
        client's workers, sorted by address)
    bounds, src_bounds : (npartitions + 1,) int64 arrays of destination-row and source-node bounds
    edge_bounds : (npartitions + 1,) int64 array, ``indptr[bounds]``
    halo_rows : (npartitions, npartitions) int64 array, ``halo_rows[q, p]`` the source rows
        partition q reads from owner p
    local_graphs : list of Futures of each partition's local CSRGraph, on its worker
    halo_lists : dict {(q, p): Future}, the rows of p's block that q reads, on p's worker
    peers : peers.Peers or None, the NCCL ranks and transfers of ``exchange="nccl"``
    """

    def __init__(self, graph, client, npartitions=None, *, exchange="tasks", timeout=DEFAULT_TIMEOUT):
        if not isinstance(graph, CSRGraph):
            raise TypeError(f"graph must be a CSRGraph, got {type(graph).__name__}")
        if not isinstance(exchange, str):
            raise TypeError(f"exchange must be one of {EXCHANGES}, got {type(exchange).__name__}")
        if exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
        workers = workers_of(client)
        if npartitions is None:
            npartitions = len(workers)
        if isinstance(npartitions, bool) or not isinstance(npartitions, (int, np.integer)) or npartitions < 1:
            raise ValueError(f"npartitions must be an integer >= 1, got {npartitions!r}")
        if npartitions > MAX_PARTITIONS:
            raise ValueError(
                f"npartitions must be at most {MAX_PARTITIONS} (partitions are blocks of rows for the "
                f"workers, {len(workers)} here, not rows), got {npartitions}"
            )
        timeout = check_timeout(timeout)
        graph = graph.to_cpu()
        npartitions = int(npartitions)
        self.client = client
        self.npartitions = npartitions
        self.workers = [workers[q % len(workers)] for q in range(npartitions)]
        self.num_dst, self.num_src, self.num_edges = graph.num_dst, graph.num_src, graph.num_edges
        self.bounds = partition.row_bounds(graph.indptr, npartitions)
        self.bipartite = graph.num_src != graph.num_dst
        if self.bipartite:
            self.src_bounds = partition.source_bounds(graph.indices, graph.num_src, npartitions)
        else:
            self.src_bounds = self.bounds
        self.edge_bounds = np.asarray(graph.indptr, dtype=np.int64)[self.bounds]
        self.peers = None
        self._set_up(graph, timeout)
        if exchange == "nccl":
            self.peers = peers.Peers(self.workers, self.halo_rows)
            self.peers.connect(client, timeout, self, wait_for)

    def close(self):
        """Destroy the NCCL communicators of an ``exchange="nccl"`` graph (nothing otherwise);
        the graph then exchanges halos through Dask's tasks."""
        if self.peers is not None:
            self.peers.close(self.client)
            self.peers = None

    def _set_up(self, graph, timeout):
        client, built = self.client, []
        for q in range(self.npartitions):
            rows = slice(int(self.bounds[q]), int(self.bounds[q + 1]) + 1)
            edges = slice(int(self.edge_bounds[q]), int(self.edge_bounds[q + 1]))
            block = client.scatter([graph.indptr[rows], graph.indices[edges]], workers=[self.workers[q]], hash=False)
            built.append(
                client.submit(tasks.build_partition, *block, self.src_bounds, q, workers=[self.workers[q]], pure=False)
            )
        counts = [client.submit(tasks.item, b, 2, workers=[w], pure=False) for b, w in zip(built, self.workers)]
        self.local_graphs = [
            client.submit(tasks.item, b, 0, workers=[w], pure=False) for b, w in zip(built, self.workers)
        ]
        wait_for(
            client, {q: [counts[q], self.local_graphs[q]] for q in range(self.npartitions)}, timeout, self, "set-up"
        )
        self.halo_rows = np.array(client.gather(counts), dtype=np.int64).reshape(self.npartitions, self.npartitions)
        self.halo_lists = {}
        for q, p in zip(*np.nonzero(self.halo_rows)):
            needs = client.submit(tasks.item, built[q], 1, workers=[self.workers[q]], pure=False)
            self.halo_lists[int(q), int(p)] = client.submit(
                tasks.item, needs, int(p), workers=[self.workers[p]], pure=False
            )
        wait_for(
            client,
            {p: [f for (_, o), f in self.halo_lists.items() if o == p] for p in range(self.npartitions)},
            timeout,
            self,
            "set-up",
        )

    @classmethod
    def from_graph(cls, graph, client, npartitions=None, *, exchange="tasks", timeout=DEFAULT_TIMEOUT):
        """Partition a CSRGraph (a GPU graph is partitioned from its host copy) over the client's
        workers: ``npartitions`` blocks (default: one per worker; at most MAX_PARTITIONS),
        assigned round robin. ``exchange``: "tasks" or "nccl" (see the class)."""
        return cls(graph, client, npartitions, exchange=exchange, timeout=timeout)

    @classmethod
    def from_scipy(cls, matrix, client, npartitions=None, *, exchange="tasks", timeout=DEFAULT_TIMEOUT):
        """Partition a scipy.sparse (or cupyx) matrix of shape (num_dst, num_src), as
        ``CSRGraph.from_scipy``: edge arrays then follow a CSR matrix's stored order (for CSC
        and COO, the graph's CSR order, see CSRGraph.from_scipy)."""
        return cls(CSRGraph.from_scipy(matrix), client, npartitions, exchange=exchange, timeout=timeout)

    # -- chunking ------------------------------------------------------------------------
    @property
    def shape(self):
        return (self.num_dst, self.num_src)

    @property
    def row_chunks(self):
        """Rows of each partition: the axis-0 chunks of destination-side node arrays."""
        return _chunks(self.bounds)

    @property
    def src_chunks(self):
        """Source nodes of each partition: the axis-0 chunks of source-side node arrays."""
        return _chunks(self.src_bounds)

    @property
    def edge_chunks(self):
        """Edges of each partition: the axis-0 chunks of edge arrays."""
        return _chunks(self.edge_bounds)

    def chunks_of(self, side):
        """Axis-0 chunks for ``side``: "dst", "src" or "edge"."""
        table = {"dst": self.row_chunks, "src": self.src_chunks, "edge": self.edge_chunks}
        if not isinstance(side, str) or side not in table:
            raise ValueError(f"side must be one of {tuple(table)}, got {side!r}")
        return table[side]

    def _as_dask(self, x, side):
        if scipy.sparse.issparse(x) or backend.is_cupyx_sparse(x):  # its blocks would be sparse matrices
            raise TypeError(f"x must be a dense array, got the sparse {type(x).__name__}; pass x.toarray()")
        if not hasattr(x, "shape") or not hasattr(x, "dtype") or not len(x.shape):
            raise TypeError(f"x must be a NumPy, CuPy or dask array of one or more axes, got {type(x).__name__}")
        expected = sum(self.chunks_of(side))
        if x.shape[0] != expected:
            what = {"dst": "destination rows", "src": "source nodes", "edge": "edges"}[side]
            raise ValueError(f"x has {x.shape[0]} rows along axis 0, but the graph has {expected} {what}")
        chunks = (self.chunks_of(side),) + tuple((n,) for n in x.shape[1:])
        if isinstance(x, da.Array):
            return x.rechunk(chunks)
        return da.from_array(x, chunks=chunks, asarray=False)

    def as_node_array(self, x, side="dst"):
        """x (NumPy, CuPy or dask array) as a dask array chunked for ``side`` ("dst" or "src")."""
        if side not in ("dst", "src"):
            raise ValueError(f"side must be 'dst' or 'src', got {side!r}")
        return self._as_dask(x, side)

    def as_edge_array(self, x):
        """x (NumPy, CuPy or dask array) as a dask array chunked by ``edge_chunks``."""
        return self._as_dask(x, "edge")

    def describe(self, q):
        """One partition in words, for messages."""
        return (
            f"partition {q} of {self.npartitions} (worker {self.workers[q]}, rows "
            f"{self.bounds[q]}:{self.bounds[q + 1]}, edges {self.edge_bounds[q]}:{self.edge_bounds[q + 1]})"
        )

    def __repr__(self):
        return (
            f"PartitionedGraph(num_dst={self.num_dst}, num_src={self.num_src}, num_edges={self.num_edges}, "
            f"npartitions={self.npartitions}, halo_rows={int(self.halo_rows.sum())})"
        )


def wait_for(client, futures_by_partition, timeout, graph, what):
    """Wait for every partition's futures; TimeoutError naming the partitions still running
    (their futures are cancelled), or the first error a partition raised."""
    everything = [f for futures in futures_by_partition.values() for f in futures]
    try:
        distributed.wait(everything, timeout=timeout)
    except (TimeoutError, distributed.TimeoutError):
        late = [q for q, futures in futures_by_partition.items() if any(not f.done() for f in futures)]
        client.cancel(everything)
        names = "; ".join(graph.describe(q) for q in late)
        raise TimeoutError(f"{what} did not finish within {timeout} s: {names} (a worker lost, busy or hung)") from None
    except distributed.CancelledError:
        # A worker left the cluster: the data it held (its partitions' local graphs and halo
        # lists among them) are gone, and the tasks that needed them are cancelled.
        lost = [q for q, futures in futures_by_partition.items() if any(f.cancelled() for f in futures)]
        client.cancel(everything)
        names = "; ".join(graph.describe(q) for q in lost) or "a partition"
        raise RuntimeError(
            f"{what} failed: {names} lost its data (its worker left the cluster); build the PartitionedGraph again"
        ) from None
    for q, futures in futures_by_partition.items():
        for future in futures:
            if future.status == "error":
                future.result()  # raises the partition's own error
            elif future.status != "finished":
                raise RuntimeError(f"{what} failed on {graph.describe(q)}: its task was {future.status}")
