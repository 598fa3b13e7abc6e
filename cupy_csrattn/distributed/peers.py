"""The halo exchange through NCCL, worker side: one rank per worker, point-to-point sends.

Set-up makes one communicator per worker, all ranks at once (``connect``, one task per
worker running side by side), kept in the worker's process (``LINKS``) under the graph's
token and the rank. A call's exchange is one task per worker (``exchange_halo``,
``exchange_gradients``) that issues every send and receive of its rank in one NCCL group
and waits for it. NCCL pairs a rank's sends to a
peer with that peer's receives in the order they are issued, so both sides list their
transfers in one order: by (reader partition, owner partition). Transfers between two
partitions of one worker are plain copies. Arrays travel as bytes (any dtype), on the
current stream, so that the kernels queued after them on the stream see them arrive.

Nothing here imports Dask; ``NEW_LINK`` (NcclLink) is what ``connect`` builds, one call a
rank. ``Peers`` is the client's side: the ranks and each rank's transfers, in that one order.
"""

import contextlib
import functools
import threading
import uuid
import warnings

from cupy_csrattn import backend
from cupy_csrattn.distributed import tasks

# (token, rank) -> a worker's link to its peers (keyed by rank too: workers may share a process)
LINKS = {}


class NcclLink:
    """This worker's rank in an NCCL communicator: ``group()``, ``send`` and ``recv`` of CuPy arrays."""

    def __init__(self, nranks, unique_id, rank):
        nccl = _nccl()
        self._nccl = nccl
        self.rank = rank
        self._communicator = nccl.NcclCommunicator(nranks, unique_id, rank)

    @staticmethod
    def unique_id():
        return _nccl().get_unique_id()

    @contextlib.contextmanager
    def group(self):
        """One NCCL group of sends and receives, waited for: the task that exchanges ends when
        its rows have arrived, so the next task may read them on any stream."""
        self._nccl.groupStart()
        try:
            yield
        finally:
            self._nccl.groupEnd()
        backend.cupy.cuda.get_current_stream().synchronize()

    def send(self, array, peer):
        """Send ``array``'s bytes (a contiguous copy where it is a strided view: NCCL reads one
        run of memory; the copy is freed on this stream, after the send in stream order)."""
        array = backend.cupy.ascontiguousarray(array)
        stream = backend.cupy.cuda.get_current_stream().ptr
        self._communicator.send(array.data.ptr, array.nbytes, self._nccl.NCCL_UINT8, peer, stream)

    def recv(self, array, peer):
        stream = backend.cupy.cuda.get_current_stream().ptr
        self._communicator.recv(array.data.ptr, array.nbytes, self._nccl.NCCL_UINT8, peer, stream)

    def close(self):
        self._communicator.destroy()

    @staticmethod
    def carries(meta):
        """Whether chunks like ``meta`` travel through NCCL: CuPy arrays (device memory)."""
        return backend.is_cupy_array(meta)


def _nccl():
    """CuPy's NCCL binding; RuntimeError where this worker has no CuPy or CuPy no NCCL (with
    CuPy's reason, which it would otherwise give as a warning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from cupy.cuda import nccl  # here, not at the top: only the NCCL exchange needs it
        except ImportError:
            raise RuntimeError("the NCCL exchange needs CuPy on every worker; it is not installed here") from None
    if not nccl.available:
        reasons = " ".join(" ".join(str(w.message).split()) for w in caught)  # on the first import only
        raise RuntimeError(
            "the NCCL exchange needs NCCL, which CuPy cannot load on this worker" + (f": {reasons}" if reasons else "")
        )
    return nccl


NEW_LINK = NcclLink  # what connect builds (tests put an in-process stand-in here)


def unique_id():
    """A new communicator id, made on the first rank's worker."""
    return NEW_LINK.unique_id()


def connect(token, nranks, unique_id, rank):
    """Join the communicator ``token`` as ``rank`` (blocks until every rank has joined)."""
    LINKS[token, rank] = NEW_LINK(nranks, unique_id, rank)
    return rank


def disconnect(token, rank):
    link = LINKS.pop((token, rank), None)
    if link is not None:
        link.close()


def _empty_like_rows(like, rows):
    xp = backend.array_module(backend.is_cupy_array(like))
    return xp.empty((rows, *like.shape[1:]), like.dtype)


def _swap(link, transfers, outgoing, like):
    """Issue one array's transfers, in their order: send or copy ``outgoing(reader, owner)``,
    receive into new rows shaped like ``like``'s. Returns ({(reader, owner): what arrived or
    was copied}, the arrays sent: to be held until the group is issued)."""
    arrived, sent = {}, []
    for kind, peer, reader, owner, rows in transfers:
        if kind == "recv":
            arrived[reader, owner] = _empty_like_rows(like, rows)
            link.recv(arrived[reader, owner], peer)
            continue
        payload = outgoing(reader, owner)
        if kind == "send":
            sent.append(payload)
            link.send(payload, peer)
        else:
            arrived[reader, owner] = payload
    return arrived, sent


def _halo_rows(blocks, lists, reader, owner):
    return tasks.take_rows(blocks[owner], lists[reader, owner])


def _piece(pieces, reader, owner):
    return pieces[reader, owner]


def exchange_halo(token, rank, transfers, blocks, lists):
    """This rank's part of a forward halo exchange, for each source-side array of a call.

    transfers: ``(kind, peer, reader, owner, rows)`` in (reader, owner) order, kind "send"
    (this rank owns the rows), "recv" (this rank reads them) or "copy" (both partitions
    here). blocks: per array, {owner partition: its block} of the partitions on this worker;
    lists: {(reader, owner): the owner's rows that the reader reads} for the owners here. The
    arrays go one after the other. Returns {(array, reader, owner): halo rows} for the readers here.
    """
    link, received, sent = LINKS[token, rank], {}, []
    with link.group():
        for index, array_blocks in enumerate(blocks):
            like = next(iter(array_blocks.values()))
            arrived, outgoing = _swap(link, transfers, functools.partial(_halo_rows, array_blocks, lists), like)
            received.update(((index, *pair), rows) for pair, rows in arrived.items())
            sent += outgoing
    return received


def exchange_gradients(token, rank, transfers, pieces, owns, lists):
    """This rank's part of a backward exchange, for each source-side gradient of a call: each
    reader's halo gradient to its owner, and each owner's gradient summed with the pieces of
    readers 0, 1, ... in that order.

    transfers: as in exchange_halo, from reader to owner. Per gradient, pieces: {(reader,
    owner): the reader's gradient of the owner's halo rows} for the readers here; owns:
    {owner: its own partition's gradient} for the owners here; lists as in exchange_halo.
    Returns {(gradient, owner): its sum}.
    """
    link, arrivals = LINKS[token, rank], []
    with link.group():
        for gradient_pieces, gradient_owns in zip(pieces, owns):
            like = next(iter(gradient_owns.values()))
            arrivals.append(_swap(link, transfers, functools.partial(_piece, gradient_pieces), like)[0])
    totals = {}
    for index, (arrived, gradient_owns) in enumerate(zip(arrivals, owns)):
        for owner, own in gradient_owns.items():
            readers = sorted(reader for reader, o in arrived if o == owner)
            needs = [lists[reader, owner] for reader in readers]
            totals[index, owner] = tasks.add_halo_gradients(own, needs, [arrived[r, owner] for r in readers])
    return totals


class Peers:
    """The client's view of a graph's NCCL exchange: a token naming the communicator, a rank
    per worker holding partitions (in partition order), and each rank's transfers for the
    forward (owner to reader) and the backward (reader to owner), ordered by (reader, owner)."""

    def __init__(self, workers, halo_rows):
        self.token = uuid.uuid4().hex
        self.lock = threading.Lock()  # one exchange at a time: the ranks pair messages in issue order
        self.ranks = {worker: rank for rank, worker in enumerate(dict.fromkeys(workers))}
        self.carries = NEW_LINK.carries
        self._workers = list(workers)
        pairs = [(int(q), int(p)) for q, p in zip(*halo_rows.nonzero())]  # row-major: (reader, owner) order
        self._transfers = {
            backward: {w: self._of(w, pairs, halo_rows, backward) for w in self.ranks} for backward in (False, True)
        }

    def _of(self, worker, pairs, halo_rows, backward):
        transfers = []
        for q, p in pairs:
            reader, owner = self._workers[q], self._workers[p]
            source, target = (reader, owner) if backward else (owner, reader)
            rows = int(halo_rows[q, p])
            if reader == owner == worker:
                transfers.append(("copy", self.ranks[worker], q, p, rows))
            elif source == worker:
                transfers.append(("send", self.ranks[target], q, p, rows))
            elif target == worker:
                transfers.append(("recv", self.ranks[source], q, p, rows))
        return transfers

    def transfers(self, backward=False):
        """{worker: its transfers} (see exchange_halo and exchange_gradients)."""
        return self._transfers[backward]

    def halos(self, graph, arrays):
        """(per source-side array (its chunks' futures by partition), {reader q: futures of the
        halo rows q reads from each owner, in owner order}; the exchange task of each worker).
        The caller waits for the exchange tasks: a rank whose readers read nothing still sends."""
        client, parts = graph.client, range(graph.npartitions)
        exchanged = {}
        for worker, transfers in self.transfers().items():
            here = [p for p in parts if graph.workers[p] == worker]
            lists = {(q, p): f for (q, p), f in graph.halo_lists.items() if graph.workers[p] == worker}
            blocks = [{p: chunks[p] for p in here} for chunks in arrays]
            exchanged[worker] = client.submit(
                exchange_halo, self.token, self.ranks[worker], transfers, blocks, lists, workers=[worker], pure=False
            )
        halos = [
            {
                q: [
                    client.submit(
                        tasks.item, exchanged[graph.workers[q]], (i, q, p), workers=[graph.workers[q]], pure=False
                    )
                    for p in parts
                    if graph.halo_rows[q, p]
                ]
                for q in parts
            }
            for i in range(len(arrays))
        ]
        return halos, exchanged

    def reduced(self, graph, results, gradients):
        """(per source-side gradient ((own part's futures by partition, its position in each
        partition's results ``results``)), the futures of each owner's summed gradient; the
        exchange task of each worker, for the caller to wait for)."""
        client, parts = graph.client, range(graph.npartitions)
        summed = {}
        for worker, transfers in self.transfers(backward=True).items():
            pieces = [
                {
                    (q, p): client.submit(tasks.item, results[q], position + 1 + p, workers=[worker], pure=False)
                    for q, p in graph.halo_lists
                    if graph.workers[q] == worker
                }
                for _, position in gradients
            ]
            owns = [{p: own[p] for p in parts if graph.workers[p] == worker} for own, _ in gradients]
            lists = {(q, p): f for (q, p), f in graph.halo_lists.items() if graph.workers[p] == worker}
            summed[worker] = client.submit(
                exchange_gradients,
                self.token,
                self.ranks[worker],
                transfers,
                pieces,
                owns,
                lists,
                workers=[worker],
                pure=False,
            )
        return [
            [
                client.submit(tasks.item, summed[graph.workers[p]], (k, p), workers=[graph.workers[p]], pure=False)
                for p in parts
            ]
            for k in range(len(gradients))
        ], summed

    def connect(self, client, timeout, graph, wait_for):
        """Make the communicator: an id on the first rank's worker, then every rank joins at once."""
        first = next(iter(self.ranks))
        unique = client.submit(unique_id, workers=[first], pure=False)
        wait_for(client, {self._workers.index(first): [unique]}, timeout, graph, "NCCL set-up")
        joined = {
            self._workers.index(worker): [
                client.submit(connect, self.token, len(self.ranks), unique, rank, workers=[worker], pure=False)
            ]
            for worker, rank in self.ranks.items()
        }
        wait_for(client, joined, timeout, graph, "NCCL set-up")

    def close(self, client):
        """Destroy every rank's communicator."""
        done = [client.submit(disconnect, self.token, r, workers=[w], pure=False) for w, r in self.ranks.items()]
        client.gather(done)
