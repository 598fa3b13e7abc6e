"""Benchmark machinery shared by ``csrattn bench`` and ``benchmarks/bench_gpu.py``.

Times the library's ops against baselines and against the memory roofline, on the GPU
(CUDA events, against plain CuPy compositions, cuSPARSE through cupyx, and PyG when it
is importable) or on the CPU backend (``time.perf_counter``, against NumPy/SciPy
compositions). Each time is the median of device-synchronized calls after warm-up, on
fresh random data; inputs are rotated between several sets when they would fit in L2.
The roofline is the bandwidth of a copy measured in the same run (read + write counted),
and each case's byte count is a no-reuse lower bound: every input read once, every
output written once, plus the gather of source rows for aggregation.

Importable without CuPy: CuPy, PyTorch and matplotlib are imported only when used.
"""
import gc
import json
import math
import os
import pathlib
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import cupy_csrattn as ca
from cupy_csrattn import _dispatch, datasets

L2_BYTES = 60 << 20

#: The ops ``csrattn bench`` can time, in the order they are run.
OPS = ("edge_softmax", "edge_softmax_backward", "spmm", "spmm_backward", "attention_aggregate",
       "attention_aggregate_backward", "sddmm", "graph_attention", "gat_attention", "graph_attention_backward",
       "gat_attention_backward")
#: Ops without a feature axis: their cases ignore ``F`` (recorded as 0).
EDGE_ONLY_OPS = frozenset({"edge_softmax", "edge_softmax_backward"})
#: PyG-style baselines are skipped when their per-edge message tensor alone would pass this.
PYG_MESSAGE_LIMIT = 8 << 30


def _cupy():
    import cupy
    return cupy


# ---------------------------------------------------------------------------------------
# Timing

def time_gpu(fn, repeat=20, warmup=3):
    """Median milliseconds of ``fn()`` over ``repeat`` calls, each timed by CUDA events.

    Parameters
    ----------
    fn : callable
        Enqueues the work on the current stream.
    repeat, warmup : int
        Timed calls, and untimed calls before them.

    Returns
    -------
    float
    """
    cupy = _cupy()
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
    cupy = _cupy()
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / repeat * 1e6


def copy_bandwidth():
    """Bytes per second of a large device copy, counting read + write."""
    cupy = _cupy()
    n = 1 << 29  # 2 GiB of float32
    src = cupy.random.random(n, dtype=np.float32)
    dst = cupy.empty_like(src)
    ms = time_gpu(lambda: cupy.copyto(dst, src), repeat=20)
    return 2 * src.nbytes / (ms * 1e-3)


def time_cpu(fn, repeat=5, warmup=1):
    """Median milliseconds of ``fn()`` over ``repeat`` calls timed with ``time.perf_counter``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_bandwidth_cpu(nbytes=256 << 20):
    """Bytes per second of a large host memory copy (``np.copyto``), counting read + write."""
    src = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    ms = time_cpu(lambda: np.copyto(dst, src), repeat=5)
    return 2 * src.nbytes / (ms * 1e-3)


# ---------------------------------------------------------------------------------------
# Graphs (built on the host; the benchmark moves them to the device)

def small_graph(offset, modulus):
    """384 rows of degree ``max(1, 18 + d % modulus - offset)``: a launch-overhead case."""
    n = 384
    rng = np.random.default_rng(modulus)
    degrees = np.maximum(1, 18 + (np.arange(n) % modulus) - offset)
    indptr = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int32)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int32)
    return ca.CSRGraph(indptr, indices, n)


def uniform_graph(num_nodes, degree, seed=1):
    """Every row has ``degree`` uniformly random sources (:func:`datasets.uniform_graph`)."""
    return datasets.uniform_graph(num_nodes, degree, seed=seed)


def rmat_graph(scale, edge_factor, seed=2):
    """R-MAT with the Graph500 parameters (:func:`datasets.rmat_graph`): power-law in-degrees."""
    return datasets.rmat_graph(scale, edge_factor, seed=seed)


def dense_graph(num_nodes, degree, seed=3):
    """Few long rows: a uniform graph of large degree."""
    return uniform_graph(num_nodes, degree, seed)


def square(graph):
    """The graph padded with empty rows (or unused sources) to ``n x n``, ``n = max(shape)``.

    The benchmark uses one node set for destinations and sources (values of ``num_dst``
    rows), as the byte counts assume.
    """
    n = max(graph.shape)
    if graph.shape == (n, n):
        return graph
    indptr = graph.indptr
    if graph.num_dst < n:
        indptr = np.concatenate([indptr, np.full(n - graph.num_dst, indptr[-1], dtype=indptr.dtype)])
    return ca.CSRGraph(indptr, graph.indices, n, check="none")


def mtx_graph(path):
    """A Matrix Market file as a square graph (row i = destination i, as scipy reads it)."""
    return square(datasets.load_mtx(path))


def file_graph(path):
    """A graph file (.mtx, .npz or an edge list; see :func:`datasets.load`) as a square graph."""
    return square(datasets.load(path))


def graph_from_spec(spec):
    """Name and builder of a graph given on the command line.

    Parameters
    ----------
    spec : str
        ``rmat:SCALE`` or ``rmat:SCALE,EDGE_FACTOR`` (R-MAT, Graph500 parameters, edge factor
        16 by default), ``uniform:N,DEG`` (N rows of DEG random sources), or the path of a
        graph file (.mtx, .npz or an edge list).

    Returns
    -------
    name : str
    build : callable
        Returns a host CSRGraph.

    Raises
    ------
    ValueError
        A malformed ``rmat:``/``uniform:`` spec.
    FileNotFoundError
        A file spec that does not exist.
    """
    kind, _, rest = spec.partition(":")
    if ":" in spec and kind in ("rmat", "uniform"):
        try:
            numbers = [int(part) for part in rest.split(",")]
        except ValueError:
            numbers = None
        if kind == "rmat" and numbers and len(numbers) in (1, 2) and 0 <= numbers[0] <= 34 \
                and all(v >= 0 for v in numbers):
            scale, edge_factor = numbers[0], (numbers[1] if len(numbers) == 2 else 16)
            return f"rmat-{scale}" + (f"x{edge_factor}" if edge_factor != 16 else ""), \
                lambda: rmat_graph(scale, edge_factor)
        if kind == "uniform" and numbers and len(numbers) == 2 and min(numbers) >= 0:
            num_nodes, degree = numbers
            return f"uniform-{num_nodes}x{degree}", lambda: uniform_graph(num_nodes, degree)
        usage = "rmat:SCALE[,EDGE_FACTOR] with 0 <= SCALE <= 34" if kind == "rmat" else "uniform:N,DEG"
        raise ValueError(f"bad graph spec {spec!r}: expected {usage}")
    if not os.path.exists(spec):
        raise FileNotFoundError(2, "No such graph file (expected a file, rmat:SCALE or uniform:N,DEG)", spec)
    stem = pathlib.Path(spec).name
    for suffix in (".gz", ".mtx", ".npz", ".txt", ".csv", ".tsv", ".el", ".edges"):
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
    return stem, lambda: file_graph(spec)


# ---------------------------------------------------------------------------------------
# Devices: where the ops run, how they are timed, what the roofline is

def cpu_name():
    """The CPU model name, best effort."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class GpuDevice:
    """The current CUDA device: CuPy arrays, CUDA-event timing, device copy bandwidth."""

    kind = "gpu"

    def __init__(self, repeat=20):
        cupy = _cupy()
        self.xp = cupy
        self.repeat = repeat
        device = cupy.cuda.Device()
        self.name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"].decode()

    def time(self, fn):
        return time_gpu(fn, repeat=self.repeat)

    def time_host_call(self, fn):
        return time_host_call(fn)

    def copy_bandwidth(self):
        return copy_bandwidth()

    def random_state(self, seed):
        return self.xp.random.RandomState(seed)

    @staticmethod
    def standard_normal(rs, shape):
        return rs.standard_normal(shape, dtype=np.float32)

    def free(self):
        self.xp.get_default_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def peak_extra_bytes(self, fn):
        """Peak device memory that ``fn()`` allocates beyond what is allocated before it: CuPy's
        pool (through a memory hook) plus PyTorch's caching allocator when torch is in use."""
        cupy = self.xp
        torch = sys.modules.get("torch")
        torch_base = None
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            torch_base = torch.cuda.memory_allocated()
        hook = _peak_memory_hook()
        with hook:
            fn()
            cupy.cuda.Device().synchronize()
        extra = hook.peak
        if torch_base is not None:
            extra += torch.cuda.max_memory_allocated() - torch_base
        return extra

    def versions(self):
        return {"gpu": self.name, "cupy": self.xp.__version__}


def _peak_memory_hook():
    """A CuPy memory hook that tracks the bytes held by allocations made while it is active."""
    cupy = _cupy()

    class PeakHook(cupy.cuda.MemoryHook):
        name = "csrattn_peak"

        def __init__(self):
            self.current = 0
            self.peak = 0

        def malloc_postprocess(self, **kwargs):
            self.current += kwargs["mem_size"]
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, **kwargs):
            self.current -= kwargs["mem_size"]

    return PeakHook()


class CpuDevice:
    """The CPU backend: NumPy arrays, ``perf_counter`` timing, host copy bandwidth."""

    kind = "cpu"
    xp = np

    def __init__(self, repeat=5):
        self.repeat = repeat
        self.name = cpu_name()

    def time(self, fn):
        return time_cpu(fn, repeat=self.repeat)

    def time_host_call(self, fn):
        return None

    def copy_bandwidth(self):
        return copy_bandwidth_cpu()

    @staticmethod
    def random_state(seed):
        return np.random.default_rng(seed)

    @staticmethod
    def standard_normal(rs, shape):
        return rs.standard_normal(shape, dtype=np.float32)

    def free(self):
        pass

    @staticmethod
    def peak_extra_bytes(fn):
        return None  # not measured on the host

    def versions(self):
        import scipy
        return {"cpu": self.name, "numpy": np.__version__, "scipy": scipy.__version__}


def gpu_usable():
    """(True, None) when CuPy can run on a GPU here, else (False, the reason)."""
    if _dispatch.cupy is None:
        return False, "CuPy is not installed"
    try:
        count = _dispatch.cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        return False, f"CUDA is not usable: {_first_line(error)}"
    if count == 0:
        return False, "CUDA found no device"
    try:
        _dispatch.cupy.zeros(1).sum().item()
    except Exception as error:
        return False, f"the CUDA device does not work: {_first_line(error)}"
    return True, None


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# ---------------------------------------------------------------------------------------
# Baselines: what a user would write without the library

def cupy_softmax(rows, num_dst, scores):
    """Plain CuPy composition: scatter max, exp, scatter add, divide."""
    cupy = _cupy()
    import cupyx
    heads = scores.shape[1]
    row_max = cupy.full((num_dst, heads), -np.inf, dtype=scores.dtype)
    cupyx.scatter_max(row_max, rows, scores)
    exp = cupy.exp(scores - row_max[rows])
    total = cupy.zeros((num_dst, heads), dtype=scores.dtype)
    cupyx.scatter_add(total, rows, exp)
    return exp / total[rows]


def cupy_softmax_backward(rows, num_dst, probs, grad_probs):
    """Plain CuPy composition: p * (g - scatter_add(p * g)[row])."""
    cupy = _cupy()
    import cupyx
    weighted = probs * grad_probs
    total = cupy.zeros((num_dst, probs.shape[1]), dtype=probs.dtype)
    cupyx.scatter_add(total, rows, weighted)
    return weighted - probs * total[rows]


def cusparse_spmm(graph, weights_1d, values_2d):
    """One head through cuSPARSE (cupyx.scipy.sparse CSR matrix times dense)."""
    import cupyx.scipy.sparse
    matrix = cupyx.scipy.sparse.csr_matrix((weights_1d, graph.indices, graph.indptr), shape=graph.shape)
    return matrix @ values_2d


def cupy_aggregate(graph, rows, scores, values):
    """CuPy softmax, then one cuSPARSE spmm per head."""
    cupy = _cupy()
    probs = cupy_softmax(rows, graph.num_dst, scores)
    return cupy.stack([cusparse_spmm(graph, cupy.ascontiguousarray(probs[:, h]),
                                     cupy.ascontiguousarray(values[:, h])) for h in range(scores.shape[1])], axis=1)


def _segment_reduce(ufunc, graph, x, empty_value):
    """Per-row reduction of edge array x (E, ...) with ``ufunc.reduceat``; empty rows get empty_value."""
    degrees = np.diff(graph.indptr)
    nonempty = degrees > 0
    out = np.full((graph.num_dst,) + x.shape[1:], empty_value, dtype=x.dtype)
    if graph.num_edges:
        out[nonempty] = ufunc.reduceat(x, graph.indptr[:-1][nonempty], axis=0)
    return out


def numpy_softmax(graph, rows, scores):
    """NumPy composition: maximum.reduceat, exp, add.reduceat, divide."""
    row_max = _segment_reduce(np.maximum, graph, scores, -np.inf)
    exp = np.exp(scores - row_max[rows])
    return exp / _segment_reduce(np.add, graph, exp, 0)[rows]


def numpy_softmax_backward(graph, rows, probs, grad_probs):
    """NumPy composition: p * (g - add.reduceat(p * g)[row])."""
    weighted = probs * grad_probs
    return weighted - probs * _segment_reduce(np.add, graph, weighted, 0)[rows]


def scipy_spmm(graph, weights, values):
    """One scipy.sparse CSR matrix times dense per head: weights (E, H), values (N, H, F)."""
    import scipy.sparse
    out = np.empty((graph.num_dst,) + values.shape[1:], dtype=np.result_type(weights, values))
    for h in range(values.shape[1]):
        matrix = scipy.sparse.csr_matrix((weights[:, h], graph.indices, graph.indptr), shape=graph.shape)
        out[:, h] = matrix @ values[:, h]
    return out


def numpy_scipy_aggregate(graph, rows, scores, values):
    """NumPy softmax, then one scipy spmm per head."""
    return scipy_spmm(graph, numpy_softmax(graph, rows, scores), values)


def composed_edge_dot(graph, rows, dst_feat, src_feat, scale=1.0):
    """Gather both ends and reduce: (dst[row] * src[col]).sum(-1); features (N, H, D)."""
    return (dst_feat[rows] * src_feat[graph.indices]).sum(-1) * scale


def load_pyg():
    """(torch, torch_geometric.utils), or (None, None) when PyG is not importable."""
    try:
        import torch
        import torch_geometric.utils
        return torch, torch_geometric.utils
    except Exception:
        return None, None


# ---------------------------------------------------------------------------------------
# Cases and records

@dataclass(frozen=True)
class Case:
    """One timed configuration: an op on one dtype, head count and feature width."""

    op: str
    dtype: str
    H: int
    F: int
    baselines: bool = True


def make_cases(ops, dtypes, heads, features):
    """The grid ops x dtypes x heads x features, without repeating ``F`` for edge-only ops."""
    cases = []
    for op in ops:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")
        for dtype in dtypes:
            dtype = np.dtype(dtype).name
            for H in heads:
                for F in ([0] if op in EDGE_ONLY_OPS else features):
                    case = Case(op, dtype, int(H), int(F))
                    if case not in cases:
                        cases.append(case)
    return cases


def edge_bytes(graph):
    return graph.num_edges * graph.indices.itemsize


def op_bytes(op, graph, dtype, H, F):
    """Bytes a case must move at least: inputs read once, outputs written once, gathers per edge."""
    isz = np.dtype(dtype).itemsize
    E, N, idx = graph.num_edges, graph.num_dst, graph.indices.itemsize
    indptr = graph.indptr.nbytes
    gather = E * (idx + H * isz + H * F * isz) + N * H * F * isz
    backward = E * (2 * idx + 8 + 2 * H * isz + 2 * H * F * isz) + 2 * N * H * F * isz + E * H * isz
    table = {
        "edge_softmax": 2 * E * H * isz + indptr,
        "edge_softmax_backward": 3 * E * H * isz + indptr,
        "attention_aggregate": gather,
        "attention_aggregate_backward": backward,
        "spmm": gather,
        "spmm_backward": backward,
        # indices, dst rows once, src rows gathered per edge, scores written
        "sddmm": indptr + E * (idx + H * F * isz + H * isz) + N * H * F * isz,
        # indices, q once, k and v gathered per edge, out written
        "graph_attention": E * (idx + 2 * H * F * isz) + 2 * N * H * F * isz,
        # indices, a_dst once, a_src and values gathered per edge, out written
        "gat_attention": E * (idx + H * isz + H * F * isz) + N * H * isz + N * H * F * isz,
    }
    # forward + backward: the forward, then three passes (over rows, and twice over sources
    # on the transpose) that each read the indices and gather two node rows per edge
    # (q and k, or a_src and values, or q and grad_out ...), reading and writing node rows.
    table["graph_attention_backward"] = (table["graph_attention"] + 3 * E * (idx + 2 * H * F * isz)
                                         + 6 * N * H * F * isz)
    table["gat_attention_backward"] = (table["gat_attention"] + 3 * E * (idx + H * isz + H * F * isz)
                                       + 4 * N * H * F * isz)
    return table[op]


class GraphBench:
    """Times cases on one graph: the library's op, then each applicable baseline.

    Parameters
    ----------
    name : str
        Graph name for the records.
    graph : CSRGraph
        Moved to ``device``.
    device : GpuDevice or CpuDevice
    bandwidth : float
        Roofline bytes per second.
    pyg : (torch, torch_geometric.utils) or (None, None)
        PyG baselines on the GPU when given.
    on_record : callable, optional
        Called with each record as it is made.
    """

    def __init__(self, name, graph, device, bandwidth, pyg=(None, None), on_record=None):
        self.name = name
        self.device = device
        self.xp = device.xp
        self.graph = graph.to_gpu() if device.kind == "gpu" else graph.to_cpu()
        self.rows = self.graph.row_of_edge()
        self.bandwidth = bandwidth
        self.torch, self.pyg_utils = pyg if device.kind == "gpu" else (None, None)
        self.on_record = on_record
        self.records = []
        self.skipped = []
        self.rs = device.random_state(5)
        E = self.graph.num_edges
        self.small = E * 8 * 4 < L2_BYTES
        self.sets = 8 if self.small else 1
        try:
            ca.edge_softmax(self.graph, self.xp.zeros((E, 1), np.float32))  # builds and caches the plan
        except NotImplementedError:
            pass

    # -- helpers ------------------------------------------------------------------------
    def rand(self, shape, dtype=np.float32):
        return self.device.standard_normal(self.rs, shape).astype(dtype)

    def record(self, case, method, ms, nbytes, extra=None):
        graph = self.graph
        entry = dict(graph=self.name, num_dst=graph.num_dst, num_edges=graph.num_edges, op=case.op,
                     dtype=np.dtype(case.dtype).name, H=case.H, F=case.F, method=method, ms=ms, bytes=nbytes,
                     roofline_ms=nbytes / self.bandwidth * 1e3)
        entry["roofline_fraction"] = entry["roofline_ms"] / ms if ms > 0 else math.inf
        entry.update(extra or {})
        self.records.append(entry)
        if self.on_record is not None:
            self.on_record(entry)
        return entry

    def skip(self, case, method, reason):
        self.skipped.append(dict(graph=self.name, op=case.op, dtype=np.dtype(case.dtype).name, H=case.H,
                                 F=case.F, method=method, reason=reason))

    def timed(self, fn_of_set, data_sets):
        counter = [0]

        def call():
            fn_of_set(data_sets[counter[0] % len(data_sets)])
            counter[0] += 1
        return self.device.time(call)

    def extras(self, fn_of_set, data_sets):
        if not self.small or self.device.kind != "gpu":
            return {}
        return {"us_per_call_host": self.device.time_host_call(lambda: fn_of_set(data_sets[0]))}

    def memory(self, fn_of_set, data_sets):
        """{"peak_extra_bytes": ...} of one call, where the device measures it."""
        peak = self.device.peak_extra_bytes(lambda: fn_of_set(data_sets[0]))
        return {} if peak is None else {"peak_extra_bytes": int(peak)}

    def library(self, case, fn_of_set, data_sets, nbytes, host_call=False, memory=False):
        """Time the library's op; False (and a skip entry) when it has no kernel on this device."""
        try:
            ms = self.timed(fn_of_set, data_sets)
        except NotImplementedError:
            self.skip(case, "csrattn", "no GPU kernel yet")
            return False
        extra = self.extras(fn_of_set, data_sets) if host_call else {}
        if memory:
            extra.update(self.memory(fn_of_set, data_sets))
        self.record(case, "csrattn", ms, nbytes, extra)
        return True

    def baseline(self, case, method, fn_of_set, data_sets, nbytes, memory=False):
        try:
            ms = self.timed(fn_of_set, data_sets)
            extra = self.memory(fn_of_set, data_sets) if memory else None
        except Exception as error:  # a baseline that cannot run this case is reported, not fatal
            self.skip(case, method, f"{type(error).__name__}: {_first_line(error)}")
            self.device.free()
            return
        self.record(case, method, ms, nbytes, extra)

    # -- the cases ----------------------------------------------------------------------
    def run(self, case):
        """Time one case (its records go to ``self.records``, skips to ``self.skipped``)."""
        dtype = np.dtype(case.dtype)
        getattr(self, "_" + case.op)(case, dtype, case.H, case.F)

    def _edge_softmax(self, case, dtype, H, F):
        graph, rows, xp, E, N = self.graph, self.rows, self.xp, self.graph.num_edges, self.graph.num_dst
        data = [self.rand((E, H), dtype) for _ in range(self.sets)]
        out = xp.empty((E, H), dtype)
        nbytes = op_bytes("edge_softmax", graph, dtype, H, F)
        fn = lambda s: ca.edge_softmax(graph, s, out=out)
        if not self.library(case, fn, data, nbytes, host_call=True) or not case.baselines:
            return
        if self.device.kind == "gpu":
            self.baseline(case, "cupy", lambda s: cupy_softmax(rows, N, s), data, nbytes)
            if self.torch is not None:
                torch, pyg_utils = self.torch, self.pyg_utils
                ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
                tdata = [torch.as_tensor(s, device="cuda") for s in data]
                self.baseline(case, "pyg", lambda s: pyg_utils.softmax(s, ptr=ptr, dim=0), tdata, nbytes)
        else:
            self.baseline(case, "numpy", lambda s: numpy_softmax(graph, rows, s), data, nbytes)

    def _edge_softmax_backward(self, case, dtype, H, F):
        graph, rows, xp, E, N = self.graph, self.rows, self.xp, self.graph.num_edges, self.graph.num_dst
        data = [self.rand((E, H), dtype) for _ in range(self.sets)]
        grads = [self.rand((E, H), dtype) for _ in range(self.sets)]
        pairs = list(zip(data, grads))
        out = xp.empty((E, H), dtype)
        nbytes = op_bytes("edge_softmax_backward", graph, dtype, H, F)
        fn = lambda pg: ca.edge_softmax_backward(graph, pg[0], pg[1], out=out)
        if not self.library(case, fn, pairs, nbytes) or not case.baselines:
            return
        if self.device.kind == "gpu":
            self.baseline(case, "cupy", lambda pg: cupy_softmax_backward(rows, N, pg[0], pg[1]), pairs, nbytes)
        else:
            self.baseline(case, "numpy", lambda pg: numpy_softmax_backward(graph, rows, pg[0], pg[1]), pairs,
                          nbytes)

    def _score_value_sets(self, dtype, H, F):
        E, num_src = self.graph.num_edges, self.graph.num_src
        return [(self.rand((E, H), dtype), self.rand((num_src, H, F), dtype)) for _ in range(self.sets)]

    def _attention_aggregate(self, case, dtype, H, F):
        graph, rows, xp, N = self.graph, self.rows, self.xp, self.graph.num_dst
        data = self._score_value_sets(dtype, H, F)
        out = xp.empty((N, H, F), dtype)
        nbytes = op_bytes("attention_aggregate", graph, dtype, H, F)
        fn = lambda sv: ca.attention_aggregate(graph, sv[0], sv[1], out=out)
        if not self.library(case, fn, data, nbytes, host_call=True) or not case.baselines:
            return
        if self.device.kind == "gpu":
            self.baseline(case, "cupy+cusparse", lambda sv: cupy_aggregate(graph, rows, sv[0], sv[1]), data, nbytes)
            if self.torch is not None:
                torch, pyg_utils = self.torch, self.pyg_utils
                ptr = torch.as_tensor(graph.indptr.astype(np.int64), device="cuda")
                t_rows = torch.as_tensor(rows.astype(np.int64), device="cuda")
                t_cols = torch.as_tensor(graph.indices.astype(np.int64), device="cuda")
                tdata = [(torch.as_tensor(s, device="cuda"), torch.as_tensor(v, device="cuda")) for s, v in data]

                def pyg_aggregate(sv):
                    alpha = pyg_utils.softmax(sv[0], ptr=ptr, dim=0)
                    messages = sv[1][t_cols] * alpha.unsqueeze(-1)
                    return torch.zeros((N, H, F), device="cuda", dtype=messages.dtype).index_add_(0, t_rows, messages)
                self.baseline(case, "pyg", pyg_aggregate, tdata, nbytes)
        else:
            self.baseline(case, "numpy+scipy", lambda sv: numpy_scipy_aggregate(graph, rows, sv[0], sv[1]), data,
                          nbytes)

    def _attention_aggregate_backward(self, case, dtype, H, F):
        graph, N = self.graph, self.graph.num_dst
        data = self._score_value_sets(dtype, H, F)
        nbytes = op_bytes("attention_aggregate_backward", graph, dtype, H, F)
        try:
            lse = ca.attention_aggregate(graph, data[0][0], data[0][1], return_lse=True)[1]
        except NotImplementedError:
            self.skip(case, "csrattn", "no GPU kernel yet")
            return
        grad_out = self.rand((N, H, F), dtype)
        fn = lambda sv: ca.attention_aggregate_backward(graph, sv[0], sv[1], grad_out, lse=lse)
        self.library(case, fn, data, nbytes)

    def _spmm(self, case, dtype, H, F):
        graph, xp, N = self.graph, self.xp, self.graph.num_dst
        data = self._score_value_sets(dtype, H, F)
        out = xp.empty((N, H, F), dtype)
        nbytes = op_bytes("spmm", graph, dtype, H, F)
        fn = lambda sv: ca.spmm(graph, sv[0], sv[1], out=out)
        if not self.library(case, fn, data, nbytes) or not case.baselines:
            return
        if self.device.kind == "gpu":
            if H == 1:
                flat = [(xp.ascontiguousarray(s[:, 0]), xp.ascontiguousarray(v[:, 0])) for s, v in data]
                self.baseline(case, "cusparse", lambda sv: cusparse_spmm(graph, *sv), flat, nbytes)
        else:
            self.baseline(case, "scipy", lambda sv: scipy_spmm(graph, sv[0], sv[1]), data, nbytes)

    def _spmm_backward(self, case, dtype, H, F):
        graph, N = self.graph, self.graph.num_dst
        data = self._score_value_sets(dtype, H, F)
        grad_out = self.rand((N, H, F), dtype)
        nbytes = op_bytes("spmm_backward", graph, dtype, H, F)
        fn = lambda sv: ca.spmm_backward(graph, sv[0], sv[1], grad_out)
        self.library(case, fn, data, nbytes)

    def _composed_name(self):
        return "cupy" if self.device.kind == "gpu" else "numpy"

    def _sddmm(self, case, dtype, H, F):
        graph, rows, xp = self.graph, self.rows, self.xp
        E, N, num_src = graph.num_edges, graph.num_dst, graph.num_src
        data = [(self.rand((N, H, F), dtype), self.rand((num_src, H, F), dtype)) for _ in range(self.sets)]
        out = xp.empty((E, H), dtype)
        nbytes = op_bytes("sddmm", graph, dtype, H, F)
        fn = lambda qk: ca.sddmm(graph, qk[0], qk[1], op="dot", out=out)
        if not self.library(case, fn, data, nbytes) or not case.baselines:
            return
        self.baseline(case, self._composed_name(), lambda qk: composed_edge_dot(graph, rows, qk[0], qk[1]), data,
                      nbytes)

    def _aggregate_baseline(self, scores, values):
        if self.device.kind == "gpu":
            return cupy_aggregate(self.graph, self.rows, scores, values)
        return numpy_scipy_aggregate(self.graph, self.rows, scores, values)

    # -- fused attention: the library's op, this library's unfused chain, a plain
    # composition and PyG-style message passing (gather, softmax, scatter-add), each with the
    # peak device memory it allocates beyond its inputs (and the output where it is passed in).

    def _fused_sets(self, op, dtype, H, F):
        N, num_src = self.graph.num_dst, self.graph.num_src
        if op == "graph_attention":  # q, k, v with D = F
            shapes = ((N, H, F), (num_src, H, F), (num_src, H, F))
        else:  # a_dst, a_src, values
            shapes = ((N, H), (num_src, H), (num_src, H, F))
        return [tuple(self.rand(shape, dtype) for shape in shapes) for _ in range(self.sets)]

    def _chain_scores(self, op, inputs):
        """(E, H) scores through this library's unfused primitives; for gat also the logits."""
        graph, xp = self.graph, self.xp
        if op == "graph_attention":
            q, k = inputs[0], inputs[1]
            return ca.sddmm(graph, q, k, op="dot", scale=1.0 / math.sqrt(max(q.shape[-1], 1))), None
        z = ca.sddmm(graph, inputs[0], inputs[1], op="add")
        return xp.where(z > 0, z, z * z.dtype.type(0.2)), z

    def _pyg_fused(self, case, op, data, grad_out=None):
        """The PyG-style forward (grad_out None) or forward + autograd backward, as a baseline
        function of a set of torch tensors; None (and a skip entry) when it cannot run here."""
        graph, torch, pyg_utils = self.graph, self.torch, self.pyg_utils
        N, E = graph.num_dst, graph.num_edges
        message_bytes = E * case.H * case.F * np.dtype(case.dtype).itemsize
        if message_bytes > PYG_MESSAGE_LIMIT:
            self.skip(case, "pyg", f"its (E, H, F) message tensor would take {message_bytes / 2**30:.0f} GiB")
            return None, None
        t_rows = torch.as_tensor(self.rows.astype(np.int64), device="cuda")
        t_cols = torch.as_tensor(graph.indices.astype(np.int64), device="cuda")

        def forward(x):
            if op == "graph_attention":  # TransformerConv's message passing
                alpha = (x[0][t_rows] * x[1][t_cols]).sum(-1) / math.sqrt(max(x[0].shape[-1], 1))
            else:  # GATConv's
                alpha = torch.nn.functional.leaky_relu(x[0][t_rows] + x[1][t_cols], 0.2)
            alpha = pyg_utils.softmax(alpha, t_rows, num_nodes=N, dim=0)
            messages = x[2][t_cols] * alpha.unsqueeze(-1)
            return torch.zeros((N, *messages.shape[1:]), device="cuda", dtype=messages.dtype).index_add_(
                0, t_rows, messages)

        if grad_out is None:
            return forward, [tuple(torch.as_tensor(a, device="cuda") for a in inputs) for inputs in data]
        t_grad = torch.as_tensor(grad_out, device="cuda")

        def forward_backward(x):
            return torch.autograd.grad(forward(x), x, t_grad)
        tdata = [tuple(torch.as_tensor(a, device="cuda").clone().requires_grad_() for a in inputs)
                 for inputs in data]
        return forward_backward, tdata

    def _fused_forward(self, case, op, dtype, H, F):
        graph, xp, N = self.graph, self.xp, self.graph.num_dst
        data = self._fused_sets(op, dtype, H, F)
        out = xp.empty((N, H, F), dtype)
        nbytes = op_bytes(op, graph, dtype, H, F)
        fused = getattr(ca, op)
        if not self.library(case, lambda x: fused(graph, *x, out=out), data, nbytes, host_call=True,
                            memory=True) or not case.baselines:
            return
        self.baseline(case, "csrattn-unfused",
                      lambda x: ca.spmm(graph, ca.edge_softmax(graph, self._chain_scores(op, x)[0]), x[2], out=out),
                      data, nbytes, memory=True)
        self.baseline(case, "cupy+cusparse" if self.device.kind == "gpu" else "numpy+scipy",
                      lambda x: self._aggregate_baseline(self._composed_scores(op, x), x[2]), data, nbytes,
                      memory=True)
        if self.torch is not None:
            fn, tdata = self._pyg_fused(case, op, data)
            if fn is not None:
                self.baseline(case, "pyg", fn, tdata, nbytes, memory=True)

    def _composed_scores(self, op, x):
        """Scores by plain array ops (gather both ends), as a user would write them."""
        graph, rows, xp = self.graph, self.rows, self.xp
        if op == "graph_attention":
            return composed_edge_dot(graph, rows, x[0], x[1], 1.0 / math.sqrt(max(x[0].shape[-1], 1)))
        z = x[0][rows] + x[1][graph.indices]
        return xp.where(z > 0, z, z * z.dtype.type(0.2))

    def _fused_backward(self, case, op, dtype, H, F):
        """Forward + backward, timed together (the backward needs the forward's out and lse)."""
        forward_op = op[:-len("_backward")]
        graph, xp, N = self.graph, self.xp, self.graph.num_dst
        data = self._fused_sets(forward_op, dtype, H, F)
        grad_out = self.rand((N, H, F), dtype)
        nbytes = op_bytes(op, graph, dtype, H, F)
        forward, backward = getattr(ca, forward_op), getattr(ca, op)

        def fused(x):
            out, lse = forward(graph, *x, return_lse=True)
            return backward(graph, *x, out, grad_out, lse)
        if not self.library(case, fused, data, nbytes, memory=True) or not case.baselines:
            return

        def unfused(x):
            scores, logits = self._chain_scores(forward_op, x)
            probs = ca.edge_softmax(graph, scores)
            out = ca.spmm(graph, probs, x[2])
            grad_probs, grad_values = ca.spmm_backward(graph, probs, x[2], grad_out)
            grad_scores = ca.edge_softmax_backward(graph, probs, grad_probs)
            if forward_op == "graph_attention":
                grads = ca.sddmm_backward(graph, x[0], x[1], grad_scores, op="dot",
                                          scale=1.0 / math.sqrt(max(x[0].shape[-1], 1)))
            else:
                grad_scores *= xp.where(logits > 0, 1, 0.2).astype(grad_scores.dtype)
                grads = ca.sddmm_backward(graph, x[0], x[1], grad_scores, op="add")
            return out, grads, grad_values
        self.baseline(case, "csrattn-unfused", unfused, data, nbytes, memory=True)
        if self.torch is not None:
            fn, tdata = self._pyg_fused(case, forward_op, data, grad_out)
            if fn is not None:
                self.baseline(case, "pyg", fn, tdata, nbytes, memory=True)

    def _graph_attention(self, case, dtype, H, F):
        self._fused_forward(case, "graph_attention", dtype, H, F)

    def _gat_attention(self, case, dtype, H, F):
        self._fused_forward(case, "gat_attention", dtype, H, F)

    def _graph_attention_backward(self, case, dtype, H, F):
        self._fused_backward(case, "graph_attention_backward", dtype, H, F)

    def _gat_attention_backward(self, case, dtype, H, F):
        self._fused_backward(case, "gat_attention_backward", dtype, H, F)


def run_cases(graphs, cases, device, bandwidth, pyg=(None, None), on_graph=None, on_case=None, on_record=None):
    """Run every case on every graph.

    Parameters
    ----------
    graphs : iterable of (name, build)
        ``build()`` returns a host CSRGraph; graphs are built one at a time.
    cases : list of Case
    device : GpuDevice or CpuDevice
    bandwidth : float
        Roofline bytes per second.
    pyg : (torch, torch_geometric.utils) or (None, None)
    on_graph : callable, optional
        ``on_graph(name, graph)`` after a graph is built (host graph).
    on_case : callable, optional
        ``on_case(name, case)`` after each case.
    on_record : callable, optional
        ``on_record(record)`` after each timing.

    Returns
    -------
    records : list of dict
    skipped : list of dict
        Cases or baselines that could not run here, with the reason.
    """
    records, skipped = [], []
    for name, build in graphs:
        graph = build()
        if on_graph is not None:
            on_graph(name, graph)
        bench = GraphBench(name, graph, device, bandwidth, pyg, on_record)
        for case in cases:
            bench.run(case)
            if on_case is not None:
                on_case(name, case)
        records += bench.records
        skipped += bench.skipped
        del bench, graph
        gc.collect()  # a host graph and its device twin refer to each other
        device.free()
    return records, skipped


# ---------------------------------------------------------------------------------------
# Output: table, JSON, plots

def format_table(records, skipped=()):
    """The records as a text table, each baseline with its time relative to the library's."""
    library_ms = {_case_key(r): r["ms"] for r in records if r["method"] == "csrattn"}
    header = (f"{'graph':<16} {'op':<29} {'dtype':<7} {'H':>3} {'F':>4} {'method':<14} "
              f"{'ms':>10} {'roofline':>9} {'vs csrattn':>11}")
    lines = [header, "-" * len(header)]
    previous = None
    for r in records:
        key = _case_key(r)
        same = key == previous
        previous = key
        ratio = ""
        if r["method"] != "csrattn" and key in library_ms and library_ms[key] > 0:
            ratio = f"{r['ms'] / library_ms[key]:.2f}x"
        label = ("", "", "", "", "") if same else (r["graph"], r["op"], r["dtype"], r["H"], r["F"] or "-")
        lines.append(f"{label[0]:<16} {label[1]:<29} {label[2]:<7} {label[3]:>3} {label[4]:>4} {r['method']:<14} "
                     f"{r['ms']:10.4f} {r['roofline_fraction'] * 100:8.1f}% {ratio:>11}")
    for s in skipped:
        lines.append(f"{s['graph']:<16} {s['op']:<29} {s['dtype']:<7} {s['H']:>3} {s['F'] or '-':>4} "
                     f"{s['method']:<14} skipped: {s['reason']}")
    lines.append("vs csrattn: the baseline's time over the library's (above 1: the library is faster); "
                 "roofline: the time of the byte count at the measured copy bandwidth, over the time")
    return "\n".join(lines)


def _case_key(record):
    return (record["graph"], record["op"], record["dtype"], record["H"], record["F"])


def write_json(path, document):
    """Write ``document`` as indented JSON (creating the folder); returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1))
    return path


def file_stem(text):
    """``text`` made safe for a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "bench"


def matplotlib_available():
    try:
        import matplotlib
    except Exception:  # not installed, or broken
        return False
    return bool(matplotlib.__version__)


def plot_results(records, out_dir, title=""):
    """One PNG per graph: time per case for each method, and the library's fraction of the roofline.

    Parameters
    ----------
    records : list of dict
        As made by :class:`GraphBench`.
    out_dir : str or os.PathLike
        Folder for ``bench_<graph>.png``.
    title : str
        Appended to each figure's title (the device and date, say).

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for graph in dict.fromkeys(r["graph"] for r in records):
        mine = [r for r in records if r["graph"] == graph]
        cases = list(dict.fromkeys(_case_key(r)[1:] for r in mine))
        methods = list(dict.fromkeys(r["method"] for r in mine))
        ms = {(_case_key(r)[1:], r["method"]): r["ms"] for r in mine}
        roof = [next((r["roofline_fraction"] for r in mine if _case_key(r)[1:] == case and r["method"] == "csrattn"),
                     0.0) * 100 for case in cases]
        labels = [f"{op} {dtype} H={H}" + (f" F={F}" if F else "") for op, dtype, H, F in cases]
        present = [[m for m in methods if (case, m) in ms] for case in cases]
        widest = max(len(p) for p in present)
        colors = {m: f"C{i}" for i, m in enumerate(methods)}
        height = 1.6 + len(cases) * (0.16 * widest + 0.12)
        fig, (ax_time, ax_roof) = plt.subplots(1, 2, figsize=(13, height), sharey=True,
                                               gridspec_kw={"width_ratios": [3, 2]})
        bar = 0.8 / widest
        for y, (case, here) in enumerate(zip(cases, present)):
            for i, method in enumerate(here):
                ax_time.barh(y + (i - (len(here) - 1) / 2) * bar, ms[(case, method)], height=bar * 0.9,
                             color=colors[method])
        handles = [matplotlib.patches.Patch(color=colors[m], label=m) for m in methods]
        ax_time.legend(handles=handles, loc="lower right", fontsize="small")
        ax_time.set_xscale("log")
        ax_time.set_xlabel("time per call (ms, log scale; shorter is better)")
        ax_time.set_yticks(np.arange(len(cases)), labels, fontsize="small")
        ax_time.set_ylim(len(cases) - 0.5, -0.5)
        ax_time.grid(axis="x", which="both", alpha=0.3)
        ax_roof.barh(np.arange(len(cases)), roof, height=0.6, color="0.45")
        ax_roof.axvline(100, color="black", linewidth=0.8)
        ax_roof.set_xlabel("csrattn: % of the memory roofline (copy bandwidth)")
        ax_roof.grid(axis="x", alpha=0.3)
        for y, value in enumerate(roof):
            ax_roof.text(value, y, f" {value:.0f}%", va="center", fontsize="x-small")
        fig.suptitle(f"{graph}: {mine[0]['num_dst']} rows, {mine[0]['num_edges']} edges"
                     + (f" ({title})" if title else ""))
        fig.tight_layout()
        path = out_dir / f"bench_{file_stem(graph)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
