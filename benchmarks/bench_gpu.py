"""GPU benchmark of the core ops against plain CuPy, cuSPARSE, PyG and the memory roofline.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/bench_gpu.py [--quick] [graph.mtx ...]
Writes benchmarks/results/gpu_<gpu name>.json and prints a table. Times are medians of
device-synchronized calls (CUDA events) after warm-up; inputs are rotated when they would
fit in L2. The roofline is the bandwidth of a measured device-to-device copy (read + write).
"""
import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import numpy as np
import cupy
import cupyx
import cupyx.scipy.sparse

import cupy_csrattn as ca
from cupy_csrattn import _kernels

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
L2_BYTES = 60 << 20


# -- timing ----------------------------------------------------------------------------

def time_gpu(fn, repeat=20, warmup=3):
    """Median milliseconds of fn() over `repeat` event-timed calls."""
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def time_host_call(fn, repeat=200):
    """Microseconds per call from Python, calls back to back, one sync at the end."""
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / repeat * 1e6


def copy_bandwidth():
    """Bytes per second of a large device copy, counting read + write."""
    n = 1 << 29  # 2 GiB of float32
    src = cupy.random.random(n, dtype=np.float32)
    dst = cupy.empty_like(src)
    ms = time_gpu(lambda: cupy.copyto(dst, src), repeat=20)
    return 2 * src.nbytes / (ms * 1e-3)


# -- graphs ----------------------------------------------------------------------------

def csr_from_dst(dst, src, num_nodes):
    graph, _ = ca.CSRGraph.from_edge_index(src, dst, num_nodes, num_nodes)
    return graph


def small_graph(offset, modulus):
    n = 384
    rng = np.random.default_rng(modulus)
    degrees = np.maximum(1, 18 + (np.arange(n) % modulus) - offset)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int32)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int32)
    return ca.CSRGraph(indptr, indices, n)


def uniform_graph(num_nodes, degree, seed=1):
    rs = cupy.random.RandomState(seed)
    indptr = cupy.arange(0, num_nodes * degree + 1, degree, dtype=np.int32)
    indices = rs.randint(0, num_nodes, num_nodes * degree, dtype=np.int32)
    return ca.CSRGraph(indptr, indices, num_nodes)


def rmat_graph(scale, edge_factor, seed=2, a=0.57, b=0.19, c=0.19):
    """R-MAT (Graph500 parameters): row = destination, so in-degrees are power-law."""
    rs = cupy.random.RandomState(seed)
    num_edges = edge_factor << scale
    dst = cupy.zeros(num_edges, dtype=np.int32)
    src = cupy.zeros(num_edges, dtype=np.int32)
    for _ in range(scale):
        r = rs.random_sample(num_edges, dtype=np.float32)
        dst_bit = (r >= a + b).astype(np.int32)  # quadrants c, d
        src_bit = (((r >= a) & (r < a + b)) | (r >= a + b + c)).astype(np.int32)  # quadrants b, d
        dst = dst * 2 + dst_bit
        src = src * 2 + src_bit
    return csr_from_dst(dst, src, 1 << scale)


def dense_graph(num_nodes, degree, seed=3):
    return uniform_graph(num_nodes, degree, seed)


def mtx_graph(path):
    import scipy.io
    matrix = scipy.io.mmread(path).tocoo()
    n = max(matrix.shape)
    return csr_from_dst(cupy.asarray(matrix.row.astype(np.int32)), cupy.asarray(matrix.col.astype(np.int32)), n)


# -- baselines -------------------------------------------------------------------------

def cupy_softmax(rows, num_dst, scores):
    """Plain CuPy composition: scatter max, exp, scatter add, divide."""
    heads = scores.shape[1]
    row_max = cupy.full((num_dst, heads), -np.inf, dtype=scores.dtype)
    cupyx.scatter_max(row_max, rows, scores)
    exp = cupy.exp(scores - row_max[rows])
    total = cupy.zeros((num_dst, heads), dtype=scores.dtype)
    cupyx.scatter_add(total, rows, exp)
    return exp / total[rows]


def cusparse_spmm(graph, weights_1d, values_2d):
    matrix = cupyx.scipy.sparse.csr_matrix((weights_1d, graph.indices, graph.indptr), shape=graph.shape)
    return matrix @ values_2d


def cupy_aggregate(graph, rows, scores, values):
    probs = cupy_softmax(rows, graph.num_dst, scores)
    return cupy.stack([cusparse_spmm(graph, cupy.ascontiguousarray(probs[:, h]),
                                     cupy.ascontiguousarray(values[:, h])) for h in range(scores.shape[1])], axis=1)


def load_pyg():
    try:
        import torch
        import torch_geometric.utils
        return torch, torch_geometric.utils
    except Exception:
        return None, None


# -- the run ---------------------------------------------------------------------------

def edge_bytes(graph):
    return graph.num_edges * graph.indices.itemsize


def run_graph(name, graph, bandwidth, records, pyg, quick):
    torch, pyg_utils = pyg
    graph = graph.to_gpu()
    rows = graph.row_of_edge()
    E, N = graph.num_edges, graph.num_dst
    rs = cupy.random.RandomState(5)
    small = E * 8 * 4 < L2_BYTES
    sets = 8 if small else 1
    index_bytes = edge_bytes(graph) + graph.indptr.nbytes
    ca.edge_softmax(graph, cupy.zeros((E, 1), np.float32))  # builds and caches the plan

    def record(op, dtype, H, F, method, ms, nbytes, extra=None):
        entry = dict(graph=name, num_dst=N, num_edges=E, op=op, dtype=np.dtype(dtype).name, H=H, F=F,
                     method=method, ms=ms, bytes=nbytes, roofline_ms=nbytes / bandwidth * 1e3)
        entry["roofline_fraction"] = entry["roofline_ms"] / ms
        entry.update(extra or {})
        records.append(entry)
        print(f"{name:>14} {op:<30} {entry['dtype']:>7} H={H:<2} F={F:<3} {method:<12} "
              f"{ms:9.4f} ms  {entry['roofline_fraction'] * 100:6.1f}% of roofline", flush=True)

    def timed(fn_of_set, data_sets):
        counter = [0]

        def call():
            fn_of_set(data_sets[counter[0] % len(data_sets)])
            counter[0] += 1
        return time_gpu(call)

    def extras(fn_of_set, data_sets):
        if not small:
            return {}
        return {"us_per_call_host": time_host_call(lambda: fn_of_set(data_sets[0]))}

    def rand(shape, dtype=np.float32):
        return rs.standard_normal(shape, dtype=np.float32).astype(dtype)

    # edge_softmax and its backward
    for H, dtype in ((8, np.float32), (1, np.float32), (8, np.float16)):
        isz = np.dtype(dtype).itemsize
        data = [rand((E, H), dtype) for _ in range(sets)]
        out = cupy.empty((E, H), dtype)
        nbytes = 2 * E * H * isz + graph.indptr.nbytes
        fn = lambda s: ca.edge_softmax(graph, s, out=out)
        record("edge_softmax", dtype, H, 0, "csrattn", timed(fn, data), nbytes, extras(fn, data))
        if dtype == np.float32:
            record("edge_softmax", dtype, H, 0, "cupy", timed(lambda s: cupy_softmax(rows, N, s), data), nbytes)
            if torch is not None:
                ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
                tdata = [torch.as_tensor(s, device="cuda") for s in data]
                record("edge_softmax", dtype, H, 0, "pyg",
                       timed(lambda s: pyg_utils.softmax(s, ptr=ptr, dim=0), tdata), nbytes)
            grads = [rand((E, H), dtype) for _ in range(sets)]
            pairs = list(zip(data, grads))
            fn = lambda pg: ca.edge_softmax_backward(graph, pg[0], pg[1], out=out)
            record("edge_softmax_backward", dtype, H, 0, "csrattn", timed(fn, pairs),
                   3 * E * H * isz + graph.indptr.nbytes)

    # aggregation: attention_aggregate, spmm, and their backward
    for H, F, dtype in ((1, 64, np.float32), (8, 16, np.float32), (8, 16, np.float16)):
        isz = np.dtype(dtype).itemsize
        data = [(rand((E, H), dtype), rand((N, H, F), dtype)) for _ in range(sets)]
        out = cupy.empty((N, H, F), dtype)
        gather = E * (graph.indices.itemsize + H * isz + H * F * isz) + N * H * F * isz
        fn = lambda sv: ca.attention_aggregate(graph, sv[0], sv[1], out=out)
        record("attention_aggregate", dtype, H, F, "csrattn", timed(fn, data), gather, extras(fn, data))
        if dtype == np.float16:
            continue
        record("attention_aggregate", dtype, H, F, "cupy+cusparse",
               timed(lambda sv: cupy_aggregate(graph, rows, sv[0], sv[1]), data), gather)
        if torch is not None:
            ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
            t_rows = torch.as_tensor(rows.astype(np.int64), device="cuda")
            t_cols = torch.as_tensor(graph.indices.astype(np.int64), device="cuda")
            tdata = [(torch.as_tensor(s, device="cuda"), torch.as_tensor(v, device="cuda")) for s, v in data]

            def pyg_aggregate(sv):
                alpha = pyg_utils.softmax(sv[0], ptr=ptr, dim=0)
                messages = sv[1][t_cols] * alpha.unsqueeze(-1)
                return torch.zeros((N, H, F), device="cuda", dtype=messages.dtype).index_add_(0, t_rows, messages)
            record("attention_aggregate", dtype, H, F, "pyg", timed(pyg_aggregate, tdata), gather)
        lse = ca.attention_aggregate(graph, data[0][0], data[0][1], return_lse=True)[1]
        grad_out = rand((N, H, F), dtype)
        fn = lambda sv: ca.attention_aggregate_backward(graph, sv[0], sv[1], grad_out, lse=lse)
        backward_bytes = (E * (2 * graph.indices.itemsize + 8 + 2 * H * isz + 2 * H * F * isz)
                          + 2 * N * H * F * isz + E * H * isz)
        record("attention_aggregate_backward", dtype, H, F, "csrattn", timed(fn, data), backward_bytes)
        spmm_bytes = gather
        fn = lambda sv: ca.spmm(graph, sv[0], sv[1], out=out)
        record("spmm", dtype, H, F, "csrattn", timed(fn, data), spmm_bytes)
        if H == 1:
            flat = [(cupy.ascontiguousarray(s[:, 0]), cupy.ascontiguousarray(v[:, 0])) for s, v in data]
            record("spmm", dtype, H, F, "cusparse", timed(lambda sv: cusparse_spmm(graph, *sv), flat), spmm_bytes)
        fn = lambda sv: ca.spmm_backward(graph, sv[0], sv[1], grad_out)
        record("spmm_backward", dtype, H, F, "csrattn", timed(fn, data), backward_bytes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mtx", nargs="*", help="Matrix Market files to add as graphs")
    parser.add_argument("--quick", action="store_true", help="smaller large graphs (2M edges), for a smoke run")
    parser.add_argument("--only", nargs="*", help="graph names to run")
    args = parser.parse_args()

    device = cupy.cuda.Device()
    gpu_name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"].decode()
    started = time.time()
    _kernels.warmup()
    warmup_s = time.time() - started
    bandwidth = copy_bandwidth()
    print(f"{gpu_name}: copy bandwidth {bandwidth / 1e12:.3f} TB/s (read + write); warmup {warmup_s:.1f} s",
          flush=True)
    scale = 17 if args.quick else 20
    graphs = {
        "small-384-mod5": lambda: small_graph(2, 5),
        "small-384-mod7": lambda: small_graph(3, 7),
        "uniform": lambda: uniform_graph(1 << scale, 16),
        "rmat": lambda: rmat_graph(scale, 16),
        "dense": lambda: dense_graph(12_500 if args.quick else 100_000, 500 if not args.quick else 160),
    }
    for path in args.mtx:
        graphs[pathlib.Path(path).stem] = lambda path=path: mtx_graph(path)
    pyg = load_pyg()
    records = []
    for name, build in graphs.items():
        if args.only and name not in args.only:
            continue
        graph = build()
        degrees = cupy.asnumpy(graph.degrees())
        print(f"-- {name}: {graph.num_dst} rows, {graph.num_edges} edges, max degree {degrees.max()}", flush=True)
        run_graph(name, graph, bandwidth, records, pyg, args.quick)
        del graph
        cupy.get_default_memory_pool().free_all_blocks()
    result = dict(gpu=gpu_name, copy_bandwidth_bytes_per_s=bandwidth, cupy=cupy.__version__,
                  python=platform.python_version(), quick=args.quick, date=time.strftime("%Y-%m-%d"),
                  pyg=pyg[0] is not None, records=records)
    RESULTS.mkdir(exist_ok=True)
    stem = "gpu_" + gpu_name.replace(" ", "_") + ("_quick" if args.quick else "")
    path = RESULTS / f"{stem}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
