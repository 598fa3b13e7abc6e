"""CPU backend against a straightforward per-row Python loop.

On a random graph of 100k rows and about 1M edges (fixed seed), times the vectorized
NumPy/SciPy backend of cupy_csrattn against the loop a user would write first: a Python
for loop over the rows calling NumPy on each row's slice. Cases: edge_softmax with H=8
and H=1, spmm with F=64, attention_aggregate with F=64 (float32 data).

The loop may be timed on every k-th row only (--loop-stride k) and its time extrapolated
linearly in the number of rows; the output and the JSON say when that was done. Each
backend time is the median of --repeats calls after one warm-up call. The loop's result
is checked against the backend's on the rows it ran.

Writes benchmarks/results/cpu_<cpu model>.json (or --output).

    python3 benchmarks/bench_cpu.py [--rows 100000] [--avg-degree 10] [--loop-stride 1]
"""

import argparse
import json
import os
import platform
import re
import socket
import sys
import time
from pathlib import Path

import numpy as np
import scipy

import cupy_csrattn as ca
from cupy_csrattn.bench.devices import cpu_name

TARGETS = {"edge_softmax": 30.0, "spmm": 5.0, "attention_aggregate": 5.0}


# ---------------------------------------------------------------------------------------
# The loops: what a user writes without the library.


def loop_edge_softmax(indptr, indices, scores, rows):
    out = np.zeros_like(scores)
    for d in rows:
        start, end = indptr[d], indptr[d + 1]
        if start == end:
            continue
        s = scores[start:end]
        e = np.exp(s - s.max(axis=0))
        out[start:end] = e / e.sum(axis=0)
    return out


def loop_spmm(indptr, indices, weights, values, rows):
    out = np.zeros((len(indptr) - 1,) + values.shape[1:], dtype=values.dtype)
    for d in rows:
        start, end = indptr[d], indptr[d + 1]
        if start == end:
            continue
        out[d] = weights[start:end] @ values[indices[start:end]]
    return out


def loop_attention_aggregate(indptr, indices, scores, values, rows):
    out = np.zeros((len(indptr) - 1,) + values.shape[1:], dtype=values.dtype)
    for d in rows:
        start, end = indptr[d], indptr[d + 1]
        if start == end:
            continue
        s = scores[start:end]
        e = np.exp(s - s.max())
        out[d] = (e / e.sum()) @ values[indices[start:end]]
    return out


# ---------------------------------------------------------------------------------------


def random_graph(num_rows, avg_degree, rng):
    """Log-normal in-degrees scaled to the wanted mean, 2% empty rows, random columns."""
    raw = rng.lognormal(mean=0.0, sigma=1.0, size=num_rows)
    degrees = np.floor(raw * (avg_degree / raw.mean()) + 0.5).astype(np.int64)
    degrees[rng.random(num_rows) < 0.02] = 0
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    indices = rng.integers(0, num_rows, size=int(indptr[-1]))
    return indptr.astype(np.int32), indices.astype(np.int32)


def median_time(call, repeats):
    call()  # warm-up: caches on the graph, page faults
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), times


def slug(text):
    text = re.sub(r"\((r|tm)\)", "", text.lower())
    text = re.sub(r"\b(cpu|processor)\b", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--loop-stride", type=int, default=1, help="time the loop on every k-th row only and extrapolate linearly"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    indptr, indices = random_graph(args.rows, args.avg_degree, rng)
    n, features = args.rows, args.features
    graph = ca.CSRGraph(indptr, indices, num_src=n)
    e = graph.num_edges
    degrees = np.diff(indptr)
    loop_rows = np.arange(0, n, args.loop_stride)
    extrapolation = n / len(loop_rows)
    print(
        f"graph: {n} rows, {e} edges, {int((degrees == 0).sum())} empty rows, "
        f"largest row {int(degrees.max())} edges, seed {args.seed}"
    )
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical cores; numpy {np.__version__}, scipy {scipy.__version__}")
    if args.loop_stride > 1:
        print(
            f"loop timed on every {args.loop_stride}th row ({len(loop_rows)} rows, "
            f"{int(degrees[loop_rows].sum())} edges) and extrapolated linearly x{extrapolation:.2f} to all rows"
        )
    else:
        print("loop timed on all rows (no extrapolation)")
    print(f"backend: median of {args.repeats} calls after one warm-up; loop: one call")

    def randn(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    scores8, scores1 = randn(e, 8), randn(e)
    weights, values = randn(e), randn(n, features)

    cases = [
        (
            "edge_softmax",
            {"H": 8},
            lambda: ca.edge_softmax(graph, scores8),
            lambda rows: loop_edge_softmax(indptr, indices, scores8, rows),
            "edges",
        ),
        (
            "edge_softmax",
            {"H": 1},
            lambda: ca.edge_softmax(graph, scores1),
            lambda rows: loop_edge_softmax(indptr, indices, scores1, rows),
            "edges",
        ),
        (
            "spmm",
            {"F": features},
            lambda: ca.spmm(graph, weights, values),
            lambda rows: loop_spmm(indptr, indices, weights, values, rows),
            "rows",
        ),
        (
            "attention_aggregate",
            {"F": features},
            lambda: ca.attention_aggregate(graph, scores1, values),
            lambda rows: loop_attention_aggregate(indptr, indices, scores1, values, rows),
            "rows",
        ),
    ]

    loop_edges = (
        np.concatenate([np.arange(indptr[d], indptr[d + 1]) for d in loop_rows])
        if args.loop_stride > 1
        else slice(None)
    )
    results = []
    for op, params, backend_call, loop_call, axis in cases:
        backend_seconds, backend_times = median_time(backend_call, args.repeats)
        start = time.perf_counter()
        loop_result = loop_call(loop_rows)
        loop_measured = time.perf_counter() - start
        loop_seconds = loop_measured * extrapolation
        expected = backend_call()
        if axis == "edges":
            got, want = loop_result[loop_edges], expected[loop_edges]
        else:
            got, want = loop_result[loop_rows], expected[loop_rows]
        if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            print(f"{op} {params}: the loop and the backend disagree", file=sys.stderr)
            return 1
        ratio = loop_seconds / backend_seconds
        target = TARGETS[op]
        results.append(
            {
                "op": op,
                **params,
                "dtype": "float32",
                "backend_seconds_median": backend_seconds,
                "backend_seconds_all": backend_times,
                "loop_seconds": loop_seconds,
                "loop_seconds_measured": loop_measured,
                "loop_rows_timed": int(len(loop_rows)),
                "loop_extrapolated": args.loop_stride > 1,
                "loop_extrapolation_factor": extrapolation,
                "ratio": ratio,
                "target_ratio": target,
                "meets_target": bool(ratio >= target),
            }
        )

    print()
    print(f"{'op':<22}{'params':<8}{'backend':>12}{'loop':>12}{'ratio':>10}{'target':>9}")
    for r in results:
        params = ",".join(f"{k}={r[k]}" for k in ("H", "F") if k in r)
        mark = "" if r["meets_target"] else "  BELOW TARGET"
        loop_note = "*" if r["loop_extrapolated"] else ""
        print(
            f"{r['op']:<22}{params:<8}{r['backend_seconds_median'] * 1e3:>9.1f} ms"
            f"{r['loop_seconds'] * 1e3:>9.0f} ms{loop_note}{r['ratio']:>9.1f}x{r['target_ratio']:>8.0f}x{mark}"
        )
    if args.loop_stride > 1:
        print(f"* extrapolated from {len(loop_rows)} of {n} rows")

    report = {
        "benchmark": "cupy_csrattn CPU backend vs per-row Python loop",
        "host": socket.gethostname(),
        "cpu_model": cpu_name(),
        "logical_cores": os.cpu_count(),
        "load_average_1_5_15min_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "cupy_csrattn": getattr(ca, "__version__", "unknown"),
        "graph": {
            "rows": n,
            "edges": int(e),
            "empty_rows": int((degrees == 0).sum()),
            "max_degree": int(degrees.max()),
            "avg_degree_target": args.avg_degree,
            "generator": "log-normal degrees (sigma 1) scaled to the average, 2% empty rows, uniform random columns",
            "seed": args.seed,
            "index_dtype": "int32",
        },
        "method": {
            "backend": f"median of {args.repeats} calls after one warm-up",
            "loop": "one call of a Python for loop over rows calling numpy on each row's slice",
            "loop_extrapolation": (
                f"timed on every {args.loop_stride}th row ({len(loop_rows)} rows), "
                f"scaled linearly by {extrapolation:.3f}"
            )
            if args.loop_stride > 1
            else "none: timed on all rows",
        },
        "results": results,
    }
    output = args.output or Path(__file__).resolve().parent / "results" / f"cpu_{slug(cpu_name())}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {output}")
    return 0 if all(r["meets_target"] for r in results) else 2


if __name__ == "__main__":
    sys.exit(main())
