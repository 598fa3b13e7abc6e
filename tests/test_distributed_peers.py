"""The NCCL exchange (``exchange="nccl"``) without GPUs: worker threads of one process, with a
stand-in link whose sends and receives pair up as NCCL's do (per pair of ranks, in the order
they are issued; a receive waits for its send) and that refuses a message of another size
than the receive expects. Every op on 1, 2 and 3 partitions equals the single-process call,
as with the tasks exchange (test_distributed.py); the transfers themselves are checked too.
The GPU suite runs the same with NCCL on two GPUs."""

import collections
import contextlib
import os
import queue
import threading
import uuid

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from test_distributed import DISTRIBUTED_CASES, GRAPHS, _check_case, partition_cache  # noqa: E402

import cupy_csrattn as ca  # noqa: E402
import cupy_csrattn.distributed as cad  # noqa: E402
from cupy_csrattn.distributed import peers  # noqa: E402


class QueueLink:
    """A rank whose messages go through in-process queues, one per (communicator, sender,
    receiver): a send puts a copy, a receive takes the next message when its group ends."""

    _queues = collections.defaultdict(queue.Queue)
    _lock = threading.Lock()
    sent = collections.Counter()  # communicator id -> messages sent

    def __init__(self, nranks, unique_id, rank):
        assert 0 <= rank < nranks
        self.id, self.rank, self._receives = unique_id, rank, None

    @staticmethod
    def unique_id():
        return uuid.uuid4().hex

    @staticmethod
    def carries(meta):
        return True

    def _queue(self, sender, receiver):
        with QueueLink._lock:
            return QueueLink._queues[self.id, sender, receiver]

    @contextlib.contextmanager
    def group(self):
        self._receives = []
        yield
        receives, self._receives = self._receives, None
        for array, peer in receives:
            message = self._queue(peer, self.rank).get(timeout=60)
            if message.nbytes != array.nbytes:
                raise RuntimeError(f"rank {self.rank}: {message.nbytes} bytes from {peer}, expected {array.nbytes}")
            array.reshape(-1).view(np.uint8)[:] = message.reshape(-1).view(np.uint8)

    def send(self, array, peer):
        assert self._receives is not None, "a send outside a group"
        self._queue(self.rank, peer).put(np.ascontiguousarray(array).copy())
        with QueueLink._lock:
            QueueLink.sent[self.id] += 1

    def recv(self, array, peer):
        assert self._receives is not None, "a receive outside a group"
        self._receives.append((array, peer))

    def close(self):
        pass


@pytest.fixture(scope="module")
def client():
    with (
        pytest.MonkeyPatch.context() as patch,
        distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=2, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        patch.setattr(peers, "NEW_LINK", QueueLink)
        yield client


@pytest.fixture(scope="module")
def partitioned(client):
    return partition_cache(client, exchange="nccl")


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("graph_name", ["square", "no_halo", "hub_first", "wide", "tall", "zero_degree_rows"])
def test_every_op_through_the_link_equals_the_single_process_call(partitioned, graph_name, parts):
    pg = partitioned(graph_name, parts)
    before = QueueLink.sent[_link_id(pg)]
    for case in DISTRIBUTED_CASES:
        _check_case(pg, GRAPHS[graph_name](), case, H=2)
    crossing = sum(pg.halo_rows[q, p] > 0 and pg.workers[q] != pg.workers[p] for q, p in pg.halo_lists)
    sent = QueueLink.sent[_link_id(pg)] - before
    assert (sent > 0) == bool(crossing), (sent, crossing)


def _link_id(pg):
    """The stand-in communicator's id of a graph (the one its workers joined)."""
    return next(link.id for (token, _), link in peers.LINKS.items() if token == pg.peers.token)


def test_transfers_pair_up_in_one_order():
    """Three partitions on two workers: each rank's sends to a peer and the peer's receives
    from it list the same (reader, owner) pairs in the same order; same-worker pairs copy."""
    halo_rows = np.array([[0, 2, 1], [3, 0, 4], [5, 6, 0]])
    table = peers.Peers(["a", "b", "a"], halo_rows)
    assert table.ranks == {"a": 0, "b": 1}
    for backward in (False, True):
        transfers = table.transfers(backward)
        for worker, rank in table.ranks.items():
            for other, peer in table.ranks.items():
                if other == worker:
                    continue
                sends = [t[2:] for t in transfers[worker] if t[0] == "send" and t[1] == peer]
                receives = [t[2:] for t in transfers[other] if t[0] == "recv" and t[1] == rank]
                assert sends == receives and sends, (backward, worker)
        copies = [t for t in transfers["a"] if t[0] == "copy"]
        assert len(copies) == 2  # (reader 0, owner 2) and (reader 2, owner 0), both on worker a
        counts = [t[4] for t in transfers["b"] if t[0] == "recv"]
        # forward: b reads 3 rows of 0 and 4 of 2; backward: its rows that 0 (2) and 2 (6) read come back
        expected = [2, 6] if backward else [3, 4]
        assert sorted(counts) == sorted(expected), (backward, counts)


def test_exchange_must_be_named(client):
    graph = ca.CSRGraph(*GRAPHS["square"]())
    with pytest.raises(ValueError, match="exchange must be one of"):
        cad.PartitionedGraph.from_graph(graph, client, 2, exchange="mpi")
    with pytest.raises(TypeError, match="exchange must be one of .*, got list"):
        cad.PartitionedGraph.from_graph(graph, client, 2, exchange=["nccl"])


def test_close_returns_to_the_tasks_exchange(client):
    graph = ca.CSRGraph(*GRAPHS["square"]())
    pg = cad.PartitionedGraph.from_graph(graph, client, 2, exchange="nccl")
    token = pg.peers.token
    assert {(token, 0), (token, 1)} <= set(peers.LINKS)
    pg.close()
    assert pg.peers is None and not [key for key in peers.LINKS if key[0] == token]
    _check_case(pg, GRAPHS["square"](), DISTRIBUTED_CASES[0], H=2)


def test_gpu_cluster_gives_each_worker_its_own_device(monkeypatch):
    """Without dask_cuda, each worker process starts with CUDA_VISIBLE_DEVICES naming its GPU
    (checked here without GPUs: the count is a stand-in, the variables are real)."""
    from cupy_csrattn.distributed import cluster

    monkeypatch.setattr(cluster, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    with cluster.gpu_cluster(2, use_dask_cuda=False) as spec, distributed.Client(spec) as client:
        seen = client.run(lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("NCCL_NVLS_ENABLE")))
    assert sorted(seen.values()) == [("3", "0"), ("5", "0")]
    with pytest.raises(ValueError, match="needs that many GPUs; 2 are visible"):
        cluster.gpu_cluster(3)
    with pytest.raises(ValueError, match="n_gpus must be a positive integer"):
        cluster.gpu_cluster(0)
