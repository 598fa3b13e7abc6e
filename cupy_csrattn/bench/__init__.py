"""Benchmark machinery shared by ``csrattn bench`` and ``benchmarks/bench_gpu.py``.

Times the library's ops against baselines and against the memory roofline, on the GPU
(CUDA events, against plain CuPy compositions, cuSPARSE through cupyx, and PyG when it
is importable) or on the CPU backend (``time.perf_counter``, against NumPy/SciPy
compositions). Each time is the median of device-synchronized calls after warm-up, on
fresh random data; inputs are rotated between several sets when they would fit in L2.
The roofline is the bandwidth of a copy measured in the same run (read + write counted),
and each case's byte count is its op's registry byte model (cupy_csrattn.ops.traffic): a
no-reuse lower bound, every input read once, every output written once, plus the gather
of source rows for aggregation.

Modules: timing, graphs, devices, baselines, primitives and fused (the per-op timers),
runner (cases, GraphBench, run_cases), report (table, JSON, plots). Importable without
CuPy: CuPy, PyTorch and matplotlib are used only when needed. The core package never
imports this one.
"""

from cupy_csrattn.bench.baselines import load_pyg
from cupy_csrattn.bench.devices import CpuDevice, GpuDevice
from cupy_csrattn.bench.fused import FLOOR_OPS, gather_floor_bytes
from cupy_csrattn.bench.graphs import (
    dense_graph,
    file_graph,
    graph_from_spec,
    is_generated,
    mtx_graph,
    rmat_graph,
    small_graph,
    uniform_graph,
)
from cupy_csrattn.bench.report import (
    file_stem,
    floor_text,
    format_table,
    matplotlib_available,
    plot_results,
    write_json,
)
from cupy_csrattn.bench.runner import BENCH_OPS, EDGE_ONLY_OPS, Case, GraphBench, make_cases, run_cases

__all__ = [
    "BENCH_OPS",
    "EDGE_ONLY_OPS",
    "FLOOR_OPS",
    "Case",
    "CpuDevice",
    "GpuDevice",
    "GraphBench",
    "dense_graph",
    "file_graph",
    "file_stem",
    "floor_text",
    "format_table",
    "gather_floor_bytes",
    "graph_from_spec",
    "is_generated",
    "load_pyg",
    "make_cases",
    "matplotlib_available",
    "mtx_graph",
    "plot_results",
    "rmat_graph",
    "run_cases",
    "small_graph",
    "uniform_graph",
    "write_json",
]
