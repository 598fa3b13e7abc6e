"""The fused attentions on one GPU called directly, against two GPUs on Dask (both exchanges).

Run on a machine with two GPUs and Dask (dask, distributed; dask_cuda optional), from the
repository root:
    PYTHONPATH=. python3 benchmarks/bench_distributed.py [--scale 24] [--edge-factor 16]
        [--heads 8] [--dim 16] [--ops graph_attention gat_attention] [--repeat 3] [--out FILE]
On an R-MAT graph (float32, H heads of D features, D = F): for graph_attention and
gat_attention, forward and forward + backward wall seconds per call (median of --repeat after
one untimed call): on GPU 0 with the single-device ops, and on one Dask worker per GPU
(cupy_csrattn.distributed.cluster.gpu_cluster) with the "tasks" and the "nccl" exchange. Also:
each partition's halo rows and bytes; its kernel time (the single-device op on its local graph,
its own and halo rows as inputs, timed on GPU 0 with events: the time a partition's GPU spends
computing); the exchange's share (a call's time less its slowest partition's kernel time);
the device memory each worker's pool holds after the calls; the GPUs' link (nvidia-smi topo
-m) and a measured peer copy bandwidth; whether the two-GPU forward output equals one GPU's
(max abs difference). Writes benchmarks/results/distributed_<graph>_<gpu>.json or --out.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from functools import partial

import cupy
import distributed
import numpy as np

import cupy_csrattn as ca
import cupy_csrattn.distributed as cad
from cupy_csrattn.bench import graphs
from cupy_csrattn.distributed import cluster, partition


def wall(fn, repeat):
    """Median wall seconds of ``fn()`` (which waits for its own work) after one untimed call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synced(fn):
    def call():
        fn()
        cupy.cuda.Device().synchronize()

    return call


def inputs(op, rows_dst, rows_src, heads, dim):
    """The op's forward node arrays, float32 NumPy (q, k, v or a_dst, a_src, values), and grad_out."""
    rng = np.random.default_rng(7)

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    if op == "graph_attention":
        forward = normal(rows_dst, heads, dim), normal(rows_src, heads, dim), normal(rows_src, heads, dim)
    else:
        forward = normal(rows_dst, heads), normal(rows_src, heads), normal(rows_src, heads, dim)
    return forward, normal(rows_dst, heads, dim)


def fused(module, op, graph, forward, grad_out, backward):
    """One forward (and backward) of ``op`` from ``module`` (cupy_csrattn or its distributed twin)."""
    out, lse = getattr(module, op)(graph, *forward, return_lse=True)
    if backward:
        getattr(module, op + "_backward")(graph, *forward, out, grad_out, lse)
    return out


def one_gpu(graph, args, pg_bounds, host_inputs):
    """Per op: forward and forward + backward seconds on GPU 0, the output, and each
    partition's kernel time (its local graph and own + halo rows) for the bounds given."""
    gpu_graph = graph.to_gpu()
    records, outputs = {}, {}
    for op in args.ops:
        forward, grad_out = (tuple(cupy.asarray(x) for x in host_inputs[op][0]), cupy.asarray(host_inputs[op][1]))
        record = {}
        for backward in (False, True):
            key = "forward_backward_s" if backward else "forward_s"
            record[key] = wall(synced(partial(fused, ca, op, gpu_graph, forward, grad_out, backward)), args.repeat)
        outputs[op] = cupy.asnumpy(fused(ca, op, gpu_graph, forward, grad_out, False))
        record["partitions"] = {
            str(parts): partition_kernels(graph, op, forward, grad_out, bounds, args.repeat)
            for parts, bounds in pg_bounds.items()
        }
        records[op] = record
        forward = grad_out = None
        cupy.get_default_memory_pool().free_all_blocks()
    gpu_graph = None
    cupy.get_default_memory_pool().free_all_blocks()
    return records, outputs


def partition_kernels(graph, op, forward, grad_out, bounds, repeat):
    """Each partition's forward and forward + backward seconds on GPU 0: the single-device op
    on its local graph with its own rows and its halo rows (what its worker computes)."""
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
    result = []
    for q in range(len(bounds) - 1):
        rows = slice(int(bounds[q]), int(bounds[q + 1]))
        block_indptr = indptr[rows.start : rows.stop + 1]
        block_indices = indices[int(block_indptr[0]) : int(block_indptr[-1])]
        local_indptr, local_indices, num_src, needs = partition.local_block(block_indptr, block_indices, bounds, q)
        local = ca.CSRGraph(local_indptr, local_indices, num_src, check="fast").to_gpu()
        sources = np.concatenate([np.arange(rows.start, rows.stop)] + [n + bounds[p] for p, n in enumerate(needs)])
        sources = cupy.asarray(sources)
        local_forward = (forward[0][rows], forward[1][sources], forward[2][sources])
        local_grad = grad_out[rows]
        own = rows.stop - rows.start
        record = {"rows": own, "edges": local.num_edges, "halo_rows": num_src - own}
        for backward in (False, True):
            key = "forward_s" if not backward else "forward_backward_s"
            record[key] = wall(synced(partial(fused, ca, op, local, local_forward, local_grad, backward)), repeat)
        result.append(record)
    return result


def dask_array(pg, side, futures, trailing):
    """A dask array of float32 CuPy chunks from one future per partition (held on its worker)."""
    import dask.array as da

    chunks = pg.chunks_of(side)
    meta = cupy.empty((0, *trailing), np.float32)
    parts = [
        da.from_delayed(future, shape=(rows, *trailing), dtype=np.float32, meta=meta)
        for future, rows in zip(futures, chunks)
    ]
    return da.concatenate(parts, axis=0).rechunk({0: chunks})


def random_block(rows, trailing, seed):
    import cupy as worker_cupy

    return worker_cupy.random.default_rng(seed).standard_normal((rows, *trailing), dtype=np.float32)


def worker_arrays(pg, op, heads, dim):
    """The op's inputs as dask arrays of CuPy chunks made on each partition's worker."""

    def array(side, trailing, seed):
        futures = [
            pg.client.submit(random_block, rows, trailing, seed * 1000 + q, workers=[pg.workers[q]], pure=False)
            for q, rows in enumerate(pg.chunks_of(side))
        ]
        return dask_array(pg, side, futures, trailing)

    if op == "graph_attention":
        forward = array("dst", (heads, dim), 1), array("src", (heads, dim), 2), array("src", (heads, dim), 3)
    else:
        forward = array("dst", (heads,), 1), array("src", (heads,), 2), array("src", (heads, dim), 3)
    return forward, array("dst", (heads, dim), 4)


def placed_array(pg, x, side):
    """Host array ``x`` as a dask array of CuPy chunks, each sent straight to its worker."""
    bounds = np.concatenate(([0], np.cumsum(pg.chunks_of(side))))
    futures = []
    for q in range(pg.npartitions):
        block = pg.client.scatter(x[bounds[q] : bounds[q + 1]], workers=[pg.workers[q]], direct=True)
        futures.append(pg.client.submit(cupy.asarray, block, workers=[pg.workers[q]], pure=False))
    return dask_array(pg, side, futures, x.shape[1:])


def two_gpus(graph, args, client):
    records = {}
    for exchange in ("tasks", "nccl"):
        start = time.perf_counter()
        pg = cad.PartitionedGraph.from_graph(graph, client, 2, exchange=exchange)
        record = {"set_up_s": time.perf_counter() - start, "halo_rows": pg.halo_rows.tolist(), "ops": {}}
        for op in args.ops:
            forward, grad_out = worker_arrays(pg, op, args.heads, args.dim)
            record["ops"][op] = {
                ("forward_backward_s" if backward else "forward_s"): wall(
                    partial(fused, cad, op, pg, forward, grad_out, backward), args.repeat
                )
                for backward in (False, True)
            }
        record["pool_bytes_by_worker"] = client.run(pool_bytes)
        pg.close()
        records[exchange] = record
    return records


def pool_bytes():
    """The device memory a worker's CuPy pool holds (its peak, as the pool keeps what it took)."""
    import cupy as worker_cupy

    return worker_cupy.get_default_memory_pool().total_bytes()


def equal_to_one_gpu(graph, args, client, outputs, host_inputs):
    """Max abs difference of the two-GPU forward output (NCCL exchange, the same inputs as on
    one GPU, moved to the workers) from one GPU's."""
    pg = cad.PartitionedGraph.from_graph(graph, client, 2, exchange="nccl")
    differences = {}
    for op in args.ops:
        forward = host_inputs[op][0]
        dask_forward = [placed_array(pg, x, side) for x, side in zip(forward, ("dst", "src", "src"))]
        out, _ = getattr(cad, op)(pg, *dask_forward, return_lse=True)
        differences[op] = float(np.abs(cupy.asnumpy(out.compute()) - outputs[op]).max())
    pg.close()
    return differences


def link():
    topology = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    nbytes = 1 << 30
    with cupy.cuda.Device(0):
        source = cupy.ones(nbytes // 4, np.float32)
    with cupy.cuda.Device(1):
        target = cupy.empty_like(source)

    def copy():
        cupy.cuda.runtime.memcpyPeer(target.data.ptr, 1, source.data.ptr, 0, nbytes)
        cupy.cuda.runtime.deviceSynchronize()

    seconds = wall(copy, 5)
    return {"topology": topology, "peer_copy_GBps": nbytes / seconds / 1e9}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=24)
    parser.add_argument("--edge-factor", type=int, default=16)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--ops", nargs="+", default=["graph_attention", "gat_attention"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    if cluster.gpu_count() < 2:
        sys.exit(f"needs two GPUs, {cluster.gpu_count()} visible")
    started = time.perf_counter()
    graph = graphs.rmat_graph(args.scale, args.edge_factor)
    name = f"rmat-{args.scale}-{args.edge_factor}"
    print(f"{name}: {graph.num_dst} nodes, {graph.num_edges} edges ({time.perf_counter() - started:.0f} s)", flush=True)
    results = {"graph": name, "num_nodes": graph.num_dst, "num_edges": graph.num_edges, "H": args.heads, "D": args.dim}
    results["link"] = link()
    print(results["link"]["topology"], f"peer copy {results['link']['peer_copy_GBps']:.1f} GB/s", flush=True)
    bounds = {2: partition.row_bounds(graph.indptr, 2)}
    host_inputs = {op: inputs(op, graph.num_dst, graph.num_src, args.heads, args.dim) for op in args.ops}
    results["one_gpu"], outputs = one_gpu(graph, args, bounds, host_inputs)
    print(json.dumps(results["one_gpu"], indent=1), flush=True)
    with cluster.gpu_cluster(2) as gpus, distributed.Client(gpus) as client:
        results["two_gpus"] = two_gpus(graph, args, client)
        print(json.dumps(results["two_gpus"], indent=1), flush=True)
        results["max_abs_difference_from_one_gpu"] = equal_to_one_gpu(graph, args, client, outputs, host_inputs)
    for op in args.ops:
        slowest = {
            key: max(p[key] for p in results["one_gpu"][op]["partitions"]["2"])
            for key in ("forward_s", "forward_backward_s")
        }
        for record in results["two_gpus"].values():
            timing = record["ops"][op]
            timing["speedup_over_one_gpu"] = {
                key: results["one_gpu"][op][key] / timing[key] for key in ("forward_s", "forward_backward_s")
            }
            timing["exchange_and_overhead_s"] = {key: timing[key] - slowest[key] for key in slowest}
    dtype_bytes = 4
    trailing = args.heads * args.dim * dtype_bytes
    results["halo_bytes_per_source_array"] = int(np.asarray(results["two_gpus"]["tasks"]["halo_rows"]).sum()) * trailing
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode().replace(" ", "_")
    out = args.out or f"benchmarks/results/distributed_{name}_{gpu}.json"
    with open(out, "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"wrote {out} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
