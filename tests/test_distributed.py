"""cupy_csrattn.distributed on a LocalCluster of 2 worker processes: every op and backward on
1, 2 and 3 partitions against the single-process call on the whole graph (forward results
and destination-side or edge results exactly; source-side gradients, summed across
partitions, at the project's tolerance against the float64 reference), and the errors."""

import contextlib
import math
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import dask.array as da  # noqa: E402
import scipy.sparse  # noqa: E402
from helpers import require_cupy  # noqa: E402

import cupy_csrattn as ca  # noqa: E402
import cupy_csrattn.distributed as cad  # noqa: E402
from cupy_csrattn.distributed import partition, tasks  # noqa: E402
from cupy_csrattn.ops.registry import OPS  # noqa: E402
from cupy_csrattn.testing import graphs as named  # noqa: E402
from cupy_csrattn.testing.cases import CASE_BY_NAME, CASES  # noqa: E402
from cupy_csrattn.testing.compare import assert_close, magnitude  # noqa: E402

F = 3


def _square():
    """Square (sources = destinations): empty rows, and duplicates (12 sources for 26 edges)."""
    return named.from_degrees([3, 0, 5, 2, 0, 4, 1, 6, 0, 2, 3, 0], num_src=12, seed=5)


def _no_halo():
    """Two blocks that read only their own sources: with 2 partitions, no halo at all."""
    rows = [[0, 2, 2], [1], [0, 1, 2, 3], [], [4, 5, 1], [3, 3]]
    return named.from_rows(rows + [[s + 6 for s in row] for row in rows], num_src=12)


def _hub_first():
    """A first row with every edge, then empty rows: with 3 partitions, the middle one is empty."""
    return named.from_rows([[2, 0, 1, 2, 3, 3, 1, 0, 2, 1, 3, 0, 0, 2, 1, 3, 2, 0, 1, 3], [], [], []], num_src=4)


GRAPHS = {
    "square": _square,
    "no_halo": _no_halo,
    "hub_first": _hub_first,
    "duplicates": named.duplicates,  # bipartite: 5 rows, 4 sources
    "zero_degree_rows": named.zero_degree_rows,  # bipartite: 11 rows, 8 sources
    "wide": named.wide,  # bipartite: 5 rows, 41 sources
    "tall": named.tall,  # bipartite: 16 rows, 3 sources
    "all_rows_empty": named.all_rows_empty,
    "empty": named.empty,
}


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def partition_cache(client, **options):
    """(graph name, npartitions) -> PartitionedGraph with ``options``, each built once."""
    built = {}

    def get(name, parts):
        if (name, parts) not in built:
            g = GRAPHS[name]()
            built[name, parts] = cad.PartitionedGraph.from_graph(ca.CSRGraph(*g), client, parts, **options)
        return built[name, parts]

    return get


@pytest.fixture(scope="module")
def partitioned(client):
    return partition_cache(client)


def _dask_args(pg, op, args, kwargs):
    """The case's NumPy arguments as dask arrays chunked for their sides."""
    parameters, _ = cad.SIGNATURES[op]
    side_of = {p[0]: p[1] for p in parameters}

    def convert(x, side):
        if x is None or side == "param":
            return x
        return pg.as_edge_array(x) if side == "edge" else pg.as_node_array(x, side)

    positional = [convert(x, side) for x, (_, side, *_) in zip(args, parameters)]
    keywords = {k: convert(v, side_of[k]) if k in side_of else v for k, v in kwargs.items()}
    return positional, keywords


def _check_case(pg, graph, case, H, seed=0):
    rng = np.random.default_rng(seed)
    args, kwargs = case.make(rng, graph, H, F, np.float32)
    expected = case.run(ca.CSRGraph(*graph), args, kwargs)
    reference = case.reference(graph, args, kwargs)
    bounds = case.magnitudes(graph, args, kwargs)
    positional, keywords = _dask_args(pg, case.op, args, kwargs)
    got = getattr(cad, case.op)(pg, *positional, **keywords)
    got = got if isinstance(got, tuple) else (got,)
    _, sides = cad.SIGNATURES[case.op]
    assert len(got) == len(expected)
    computed = []
    for i, (result, want, side) in enumerate(zip(got, expected, sides)):
        message = f"{case}, output {i} ({side}), {pg!r}"
        if want is None:
            assert result is None, message
            computed.append(None)
            continue
        assert isinstance(result, da.Array), message
        assert side == "sum" or result.chunks[0] == pg.chunks_of(side), message
        value = result.compute()
        assert isinstance(value, np.ndarray) and value.dtype == want.dtype and value.shape == want.shape, message
        if side in ("src", "sum"):  # summed over partitions in another order than on one device
            bound = None if bounds is None else bounds[i]
            assert_close(value, reference[i], value.dtype, scale=magnitude(*reference), bound=bound, err_msg=message)
            assert not np.isnan(value).any(), message
        else:
            assert np.array_equal(value, want), message
        computed.append(value)
    return got, computed


# Normalizing by source (edge_softmax's norm_by="src") reduces over edges that every
# partition holds some of: the distributed ops normalize by destination only.
DISTRIBUTED_CASES = [case for case in CASES if not case.name.endswith("_by_src")]


def test_normalizing_by_source_is_not_distributed(partitioned):
    pg = partitioned("square", 2)
    scores = pg.as_edge_array(np.zeros(pg.num_edges, np.float32))
    with pytest.raises(TypeError, match="norm_by"):
        cad.edge_softmax(pg, scores, norm_by="src")


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
def test_every_op_equals_the_single_process_call(partitioned, graph_name, parts):
    pg = partitioned(graph_name, parts)
    graph = GRAPHS[graph_name]()
    for case in DISTRIBUTED_CASES:
        _check_case(pg, graph, case, H=2)


@pytest.mark.parametrize("parts", [2, 3])
def test_every_op_without_heads(partitioned, parts):
    pg = partitioned("square", parts)
    for case in DISTRIBUTED_CASES:
        _check_case(pg, _square(), case, H=None, seed=1)


def test_the_cases_cover_what_they_claim(partitioned):
    """The named graphs really have halos, no halo, an empty partition and sources apart."""
    square = partitioned("square", 3)
    assert square.halo_rows.sum() > 0 and not square.bipartite
    assert square.src_chunks == square.row_chunks
    assert not partitioned("no_halo", 2).halo_rows.any()
    hub_first = partitioned("hub_first", 3)
    assert 0 in hub_first.row_chunks and 0 in hub_first.edge_chunks
    wide = partitioned("wide", 3)
    assert wide.bipartite and sum(wide.src_chunks) == 41 and wide.halo_rows.sum() > 0
    assert partitioned("square", 3).workers[2] == partitioned("square", 3).workers[0]  # 3 partitions, 2 workers
    assert len(set(partitioned("square", 2).workers)) == 2


def test_source_gradients_are_reproducible(partitioned):
    pg = partitioned("square", 3)
    case = CASE_BY_NAME["graph_attention_backward"]
    first, values = _check_case(pg, _square(), case, H=2, seed=3)
    _, again = _check_case(pg, _square(), case, H=2, seed=3)
    for a, b in zip(values, again):
        assert np.array_equal(a, b)


def test_halo_gradients_are_added_in_partition_order(client):
    """Source 0 (partition 0's) is read by one row of each of 3 partitions, with weights 1e8, 1
    and -1e8: its float32 gradient added in partition order is (1e8 + 1) - 1e8 = 0 (1e8 + 1
    rounds to 1e8); any other order of the halo pieces gives 1."""
    graph = ca.CSRGraph(np.array([0, 1, 2, 3]), np.array([0, 0, 0]), 3)
    pg = cad.PartitionedGraph.from_graph(graph, client, 3)
    assert pg.row_chunks == (1, 1, 1) and pg.src_chunks == (1, 1, 1)
    weights = pg.as_edge_array(np.array([1e8, 1.0, -1e8], np.float32))
    values = pg.as_node_array(np.ones((3, 1), np.float32), "src")
    grad_out = pg.as_node_array(np.ones((3, 1), np.float32))
    _, grad_values = cad.spmm_backward(pg, weights, values, grad_out)
    assert grad_values.compute()[:, 0].tolist() == [0.0, 0.0, 0.0]


def test_partition_sums_are_added_in_partition_order():
    """gatv2's grad_att is each partition's sum added on one worker: in partition order,
    float32 (2**26 + 3) + -(2**26 - 4) = 2**26 - (2**26 - 4) = 4; reversed, (-(2**26 - 4) + 3)
    rounds to -(2**26 - 8), giving 8 (and 7 in the orders that add 3 last)."""
    parts = [np.array([x], np.float32) for x in (2.0**26, 3.0, -(2.0**26 - 4))]
    assert tasks.add_in_order(parts).tolist() == [4.0]
    assert parts[0].tolist() == [2.0**26]  # the first partition's own array is left as it was


def test_a_row_without_weight_leaves_other_partitions_rows_as_they_were(client):
    """Row 0's scores are all -inf (x_dst -inf): the single-device softmax computes that row
    shifted by its maximum; row 1, in the other partition, must come out as the whole graph
    gives it. The CPU softmax shifted every row of a graph holding such a row, so row 1's
    float32 lse was 1.3632824 on one device and 1.3632826 on its own partition."""
    graph = ca.CSRGraph(np.array([0, 2, 4]), np.array([0, 1, 0, 1]), 2)
    pg = cad.PartitionedGraph.from_graph(graph, client, 2)
    assert pg.row_chunks == (1, 1)
    x_dst = np.array([[-np.inf], [0.8]], np.float32)
    x_src = np.array([[0.3], [-1.3]], np.float32)
    att = np.array([1.0], np.float32)
    want_out, want_lse = ca.gatv2_attention(graph, x_dst, x_src, att, return_lse=True)
    out, lse = cad.gatv2_attention(pg, pg.as_node_array(x_dst), pg.as_node_array(x_src, "src"), att, return_lse=True)
    assert np.isneginf(want_lse[0])
    np.testing.assert_array_equal(lse.compute(), want_lse)
    np.testing.assert_array_equal(out.compute(), want_out)


def test_results_chain_into_the_next_op(client, partitioned):
    """A forward's dask results feed its backward as they are; from_scipy partitions a matrix."""
    A = scipy.sparse.random_array((40, 40), density=0.1, format="csr", rng=4)
    pg = cad.PartitionedGraph.from_scipy(A, client)
    assert pg.npartitions == 2 and pg.num_edges == A.nnz
    rng = np.random.default_rng(4)
    a_dst, a_src = rng.standard_normal((2, 40, 2)).astype(np.float32)
    values = rng.standard_normal((40, 2, 5)).astype(np.float32)
    grad_out = rng.standard_normal((40, 2, 5)).astype(np.float32)
    d_dst, d_src, d_values = pg.as_node_array(a_dst), pg.as_node_array(a_src, "src"), pg.as_node_array(values, "src")
    out, lse = cad.gat_attention(pg, d_dst, d_src, d_values, return_lse=True)
    grads = cad.gat_attention_backward(pg, d_dst, d_src, d_values, out, pg.as_node_array(grad_out), lse)
    want_out, want_lse = ca.gat_attention(A, a_dst, a_src, values, return_lse=True)
    assert np.array_equal(out.compute(), want_out) and np.array_equal(lse.compute(), want_lse)
    expected = ca.gat_attention_backward(A, a_dst, a_src, values, want_out, grad_out, want_lse)
    assert np.array_equal(grads[0].compute(), expected[0])
    for got, want in zip(grads[1:], expected[1:]):
        assert_close(got.compute(), want, np.float32, scale=magnitude(*expected))


def test_every_registered_op_is_distributed():
    assert set(cad.SIGNATURES) == set(OPS)
    for name in OPS:
        assert callable(getattr(cad, name))


def test_importing_the_package_does_not_import_dask():
    code = "import sys, cupy_csrattn; assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bounds_balance_edges():
    indptr = np.array([0, 10, 10, 10, 20, 21, 22, 40])
    bounds = partition.row_bounds(indptr, 3)
    assert bounds[0] == 0 and bounds[-1] == 7 and np.all(np.diff(bounds) >= 0)
    cost = (indptr + np.arange(8))[bounds]
    assert np.all(np.diff(cost) <= 47 // 3 + 18)  # no block holds more than a third plus the largest row
    assert list(partition.row_bounds(np.zeros(5, np.int64), 2)) == [0, 2, 4]  # rows spread without edges
    assert list(partition.row_bounds(np.zeros(1, np.int64), 3)) == [0, 0, 0, 0]
    assert list(partition.source_bounds(np.zeros(6, np.int64), 8, 3)) == [0, 1, 3, 8]  # unread sources count too


# -------------------------------------------------------------------------------- errors


def test_wrong_arrays_are_named(partitioned):
    pg = partitioned("square", 2)
    scores = np.ones((pg.num_edges, 2), np.float32)
    with pytest.raises(TypeError, match="scores must be a dask array"):
        cad.edge_softmax(pg, scores)
    with pytest.raises(ValueError, match=r"scores is chunked \(13, 13\).*edge_chunks"):
        cad.edge_softmax(pg, da.from_array(scores, chunks=(13, 2)))
    with pytest.raises(ValueError, match="scores must be one chunk along every axis but the first"):
        cad.edge_softmax(pg, da.from_array(scores, chunks=(pg.edge_chunks, 1)))
    with pytest.raises(ValueError, match="scores has 25 rows, but the graph has 26 edges"):
        cad.edge_softmax(pg, da.ones((25, 2), chunks=(pg.edge_chunks[:1] + (25 - pg.edge_chunks[0],), 2)))
    q = pg.as_node_array(np.ones((12, 2, 3), np.float32))
    with pytest.raises(ValueError, match="k has 4 features"):  # the single-device op's own check
        cad.graph_attention(pg, q, pg.as_node_array(np.ones((12, 2, 4), np.float32), "src"), q)
    k = pg.as_node_array(np.ones((12, 3, 3), np.float32), "src")  # its shapes are the probe's empty blocks'
    with pytest.raises(ValueError, match=r"k has shape \(0, 3, 3\).*a shape's leading 0 stands for its rows"):
        cad.graph_attention(pg, q, k, k)
    with pytest.raises(TypeError, match="graph must be a PartitionedGraph"):
        cad.edge_softmax(ca.CSRGraph(*_square()), pg.as_edge_array(scores))
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        cad.edge_softmax(pg, pg.as_edge_array(scores), timeout=0)


def test_chunking_helpers_name_wrong_arrays(partitioned):
    pg = partitioned("wide", 2)  # bipartite: 5 rows, 41 sources
    with pytest.raises(TypeError, match="x must be a NumPy, CuPy or dask array of one or more axes, got list"):
        pg.as_node_array([[1.0]] * 5)
    with pytest.raises(TypeError, match="got NoneType"):
        pg.as_edge_array(None)
    with pytest.raises(TypeError, match="got ndarray"):  # a 0-d array has no rows to chunk
        pg.as_node_array(np.ones(()))
    with pytest.raises(ValueError, match="x has 5 rows along axis 0, but the graph has 41 source nodes"):
        pg.as_node_array(np.ones((5, 2)), "src")
    with pytest.raises(ValueError, match=f"x has 4 rows along axis 0, but the graph has {pg.num_edges} edges"):
        pg.as_edge_array(da.ones((4, 2)))
    assert pg.as_node_array(np.ones((41, 2)), "src").chunks[0] == pg.src_chunks
    # A sparse matrix's blocks would be sparse matrices, which the workers concatenated into
    # NumPy's "zero-dimensional arrays cannot be concatenated".
    with pytest.raises(TypeError, match="x must be a dense array, got the sparse csr_matrix"):
        pg.as_node_array(scipy.sparse.csr_matrix(np.ones((41, 2))), "src")
    with pytest.raises(ValueError, match=r"side must be one of \('dst', 'src', 'edge'\), got \['dst'\]"):
        pg.chunks_of(["dst"])  # was TypeError: unhashable type: 'list'


@pytest.mark.parametrize("timeout", [math.inf, 10**400], ids=["inf", "10**400"])
def test_an_infinite_timeout_waits_without_limit(partitioned, timeout):
    """+inf, or an int beyond every float (10**400 was float()'s OverflowError), is no limit."""
    pg = partitioned("square", 2)
    scores = np.random.default_rng(0).standard_normal((pg.num_edges, 2))
    got = cad.edge_softmax(pg, pg.as_edge_array(scores), timeout=timeout).compute()
    assert np.array_equal(got, cad.edge_softmax(pg, pg.as_edge_array(scores), timeout=None).compute())


@pytest.mark.parametrize("timeout", [np.int64(60), np.float32(60.0), np.float64(np.inf)], ids=repr)
def test_a_numpy_timeout_is_taken(client, partitioned, timeout):
    """A NumPy number (a count of seconds read from a config array, say) is a number of seconds:
    it was refused as not "a positive number of seconds"."""
    pg = partitioned("square", 2)
    scores = np.random.default_rng(0).standard_normal((pg.num_edges, 2))
    got = cad.edge_softmax(pg, pg.as_edge_array(scores), timeout=timeout).compute()
    assert np.array_equal(got, ca.edge_softmax(ca.CSRGraph(*_square()), scores))
    assert cad.PartitionedGraph.from_graph(ca.CSRGraph(*_square()), client, 2, timeout=timeout).npartitions == 2


def test_wrong_set_up_is_named(client):
    g = ca.CSRGraph(*_square())
    with pytest.raises(ValueError, match="npartitions must be an integer >= 1"):
        cad.PartitionedGraph.from_graph(g, client, 0)
    with pytest.raises(ValueError, match="npartitions must be at most 4096 .* got 100000"):
        cad.PartitionedGraph.from_graph(g, client, 100_000)  # was a set-up of 10**10 halo counts
    with pytest.raises(TypeError, match="client must be a distributed.Client"):
        cad.PartitionedGraph.from_graph(g, "tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="graph must be a CSRGraph"):
        cad.PartitionedGraph.from_graph(_square(), client)


def test_client_without_workers():
    with (
        distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as empty,
    ):
        with pytest.raises(ValueError, match="client has no workers"):
            cad.PartitionedGraph.from_graph(ca.CSRGraph(*_square()), empty)


def test_workers_are_asked_of_the_scheduler(client, monkeypatch):
    """The client's periodic refresh replaces its cached identity with one that lists no
    worker (it asks for totals only), and could do so between scheduler_info's fetch and its
    return: a graph was then refused as if the cluster had no workers. The workers are asked
    of the scheduler itself, whatever the cache holds."""
    empty = dict(client.scheduler_info(), workers={})
    monkeypatch.setattr(client, "scheduler_info", lambda *args, **kwargs: empty)
    pg = cad.PartitionedGraph.from_graph(ca.CSRGraph(*_square()), client, 2)
    assert pg.npartitions == 2 and len(set(pg.workers)) == 2


def test_a_stuck_partition_times_out_with_its_name(client, partitioned):
    """Partition 1's worker is busy past the timeout (as a lost or hung worker would leave it):
    the call raises TimeoutError naming partition 1 instead of waiting."""
    pg = partitioned("square", 2)
    scores = pg.as_edge_array(np.ones((pg.num_edges, 2), np.float32))
    release = distributed.Event("release-partition-1", client=client)
    busy = client.submit(release.wait, 60, workers=[pg.workers[1]], pure=False)
    timer = threading.Timer(10, release.set)  # never blocks the worker longer than that
    timer.start()
    try:
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match=r"edge_softmax .* within 0\.5 s: .*partition 1 of 2"):
            cad.edge_softmax(pg, scores, timeout=0.5)
        assert time.perf_counter() - start < 5
    finally:
        release.set()
        timer.cancel()
        busy.result()
    probs = cad.edge_softmax(pg, scores)  # the graph still works afterwards
    assert np.array_equal(probs.compute(), ca.edge_softmax(ca.CSRGraph(*_square()), np.ones((26, 2), np.float32)))


# -------------------------------------------------------------------------------- CuPy chunks


def test_cupy_chunks(partitioned):
    """CuPy chunks in, CuPy chunks out (on a machine with a GPU; both workers share it here)."""
    cupy = require_cupy()
    pg = partitioned("square", 2)
    case = CASE_BY_NAME["graph_attention_backward"]
    rng = np.random.default_rng(6)
    args, kwargs = case.make(rng, _square(), 2, F, np.float32)
    expected = case.run(ca.CSRGraph(*_square()).to_gpu(), [cupy.asarray(a) for a in args], kwargs)
    positional, keywords = _dask_args(pg, case.op, [cupy.asarray(a) for a in args], kwargs)
    got = cad.graph_attention_backward(pg, *positional, **keywords)
    values = [result.compute() for result in got]
    assert all(isinstance(value, cupy.ndarray) for value in values)
    assert bool(cupy.array_equal(values[0], expected[0]))
    scale = magnitude(*[want.get() for want in expected])
    for value, want in zip(values[1:], expected[1:]):
        assert_close(value, want.get(), np.float32, scale=scale)


def test_example_runs_and_checks_itself():
    root = pathlib.Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, str(root / "examples" / "dask_attention.py"), "--nodes", "3000", "--degree", "8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "graph_attention: forward" in result.stdout and "gat_attention: forward" in result.stdout
    assert "forward equal" in result.stdout and "DIFFERENT" not in result.stdout


def test_local_graphs_keep_their_cache_on_the_workers(client, partitioned):
    """The transpose a backward builds stays on the partition's graph, on its worker, for the next call."""
    pg = partitioned("square", 2)
    _check_case(pg, _square(), CASE_BY_NAME["spmm_backward"], H=2)
    first = [client.submit(lambda g: (id(g), sorted(map(str, g._cache))), f, pure=False) for f in pg.local_graphs]
    first = client.gather(first)
    assert all("transpose" in keys for _, keys in first)
    again = client.gather([client.submit(lambda g: id(g), f, pure=False) for f in pg.local_graphs])
    assert again == [ident for ident, _ in first]
    assert client.who_has(pg.local_graphs) == {f.key: (w,) for f, w in zip(pg.local_graphs, pg.workers)}


def test_a_parameter_is_a_whole_array(partitioned):
    """gatv2's att is read whole by every partition: a dask array there is refused, naming it."""
    pg = partitioned("square", 2)
    x = pg.as_node_array(np.ones((pg.num_dst, 2, 3), np.float32))
    with pytest.raises(TypeError, match="att"):
        cad.gatv2_attention(pg, x, x, da.ones((2, 3), dtype=np.float32))


@pytest.mark.parametrize("att", [[[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], [[0.5, -1.0, 2.0]]], ids=["H2", "H1"])
def test_a_parameter_given_as_a_list(partitioned, att):
    """att as a list, as the single-graph op takes it: a task took a list argument for a
    source-side array's pieces, so each partition joined att into one axis."""
    pg = partitioned("square", 2)
    heads = len(att)
    x = np.random.default_rng(4).standard_normal((pg.num_dst, heads, 3)).astype(np.float32)
    graph = ca.CSRGraph(*_square())
    expected = ca.gatv2_attention(graph, x, x, att)
    got = cad.gatv2_attention(pg, pg.as_node_array(x), pg.as_node_array(x, "src"), att).compute()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_a_lost_worker_is_named():
    """A worker that leaves the cluster takes its partition's local graph with it: the next
    call says which partition was lost (at once, no hang) instead of a bare cancellation."""
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as own,
    ):
        pg = cad.PartitionedGraph.from_graph(ca.CSRGraph(*_square()), own, 2)
        scores = pg.as_edge_array(np.ones((pg.num_edges, 2), np.float32))
        cad.edge_softmax(pg, scores)
        with contextlib.suppress(Exception):  # the worker exits before it can answer
            own.run(os._exit, 1, workers=[pg.workers[1]])
        start = time.perf_counter()
        with pytest.raises(RuntimeError, match=r"partition 1 of 2 .* lost its data .* build the PartitionedGraph"):
            cad.edge_softmax(pg, scores, timeout=30)
        assert time.perf_counter() - start < 20


def test_nccl_exchange_without_nccl_is_named(client):
    """On workers without CuPy's NCCL, set-up of the NCCL exchange says so instead of hanging."""
    from cupy_csrattn.distributed import peers

    try:
        peers._nccl()
    except RuntimeError:
        pass
    else:
        pytest.skip("NCCL is usable here")
    with pytest.raises(RuntimeError, match="the NCCL exchange needs"):
        cad.PartitionedGraph.from_graph(ca.CSRGraph(*_square()), client, 2, exchange="nccl", timeout=60)
