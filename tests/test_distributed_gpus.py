"""cupy_csrattn.distributed on two GPUs (a machine with at least two; skipped elsewhere): one
worker per GPU (distributed.cluster.gpu_cluster), CuPy chunks, both exchanges (Dask's tasks
and NCCL). Every op on 2 and 3 partitions equals the call on one GPU: destination-side and
edge results exactly, source-side gradients (summed over partitions in another order) at the
project's tolerance."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from helpers import require_cupy  # noqa: E402
from test_distributed import DISTRIBUTED_CASES, GRAPHS, F, _dask_args, partition_cache  # noqa: E402

import cupy_csrattn as ca  # noqa: E402
import cupy_csrattn.distributed as cad  # noqa: E402
from cupy_csrattn.distributed import cluster, peers  # noqa: E402
from cupy_csrattn.testing.arrays import to_xp  # noqa: E402
from cupy_csrattn.testing.compare import assert_close, magnitude  # noqa: E402


@pytest.fixture(scope="module")
def client():
    require_cupy()
    if cluster.gpu_count() < 2:
        pytest.skip(f"needs two GPUs, {cluster.gpu_count()} visible")
    with cluster.gpu_cluster(2) as gpus, distributed.Client(gpus) as client:
        yield client


@pytest.fixture(scope="module")
def partitioned(client):
    """(graph name, npartitions, exchange) -> PartitionedGraph, each built once."""
    by_exchange = {exchange: partition_cache(client, exchange=exchange) for exchange in cad.EXCHANGES}
    return lambda name, parts, exchange: by_exchange[exchange](name, parts)


def test_workers_see_different_gpus(client):
    def bus_id():
        import cupy

        return cupy.cuda.Device(0).pci_bus_id

    seen = client.run(bus_id)
    assert len(set(seen.values())) == 2, seen


def test_the_nccl_exchange_has_a_rank_per_worker(client, partitioned):
    pg = partitioned("square", 2, "nccl")
    import cupy

    assert pg.peers is not None and pg.peers.carries(cupy.empty(0))

    def links(token):
        return sorted((rank, type(link).__name__) for (t, rank), link in peers.LINKS.items() if t == token)

    seen = client.run(links, pg.peers.token)
    assert sorted(entry for entries in seen.values() for entry in entries) == [(0, "NcclLink"), (1, "NcclLink")]


def _check_gpu_case(pg, graph, case, cupy, seed=0):
    rng = np.random.default_rng(seed)
    args, kwargs = case.make(rng, graph, 2, F, np.float32)
    xargs, xkwargs = to_xp(cupy, args), to_xp(cupy, kwargs)
    expected = case.run(ca.CSRGraph(*graph).to_gpu(), xargs, xkwargs)
    positional, keywords = _dask_args(pg, case.op, xargs, xkwargs)
    got = getattr(cad, case.op)(pg, *positional, **keywords)
    got = got if isinstance(got, tuple) else (got,)
    _, sides = cad.SIGNATURES[case.op]
    assert len(got) == len(expected)
    scale = magnitude(*[None if e is None else cupy.asnumpy(e) for e in expected])
    for i, (result, want, side) in enumerate(zip(got, expected, sides)):
        message = f"{case}, output {i} ({side}), {pg!r}"
        if want is None:
            assert result is None, message
            continue
        value = result.compute()
        assert isinstance(value, cupy.ndarray) and value.dtype == want.dtype and value.shape == want.shape, message
        if side in ("src", "sum"):
            assert_close(cupy.asnumpy(value), cupy.asnumpy(want), value.dtype, scale=scale, err_msg=message)
        else:
            assert bool(cupy.array_equal(value, want, equal_nan=True)), message


@pytest.mark.parametrize("exchange", ["tasks", "nccl"])
@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("graph_name", ["square", "no_halo", "hub_first", "wide", "zero_degree_rows"])
def test_every_op_on_two_gpus_equals_one_gpu(partitioned, graph_name, parts, exchange):
    cupy = require_cupy()
    pg = partitioned(graph_name, parts, exchange)
    for case in DISTRIBUTED_CASES:
        _check_gpu_case(pg, GRAPHS[graph_name](), case, cupy)
