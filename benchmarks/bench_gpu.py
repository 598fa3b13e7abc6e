"""GPU benchmark of the core ops against plain CuPy, cuSPARSE, PyG and the memory roofline.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/bench_gpu.py [--quick] [--only NAME ...] [--no-baselines]
        [--repeat N] [--out FILE] [graph.mtx ...]
Writes benchmarks/results/gpu_<gpu name>.json (or --out FILE) and prints each record. Times are medians of
device-synchronized calls (CUDA events) after warm-up; inputs are rotated when they would
fit in L2. The roofline is the bandwidth of a measured device-to-device copy (read + write).

The machinery (timing, graphs, baselines, byte counts) lives in cupy_csrattn.bench, shared
with `csrattn bench`; this script fixes the set of graphs and cases.
"""

import argparse
import dataclasses
import pathlib
import platform
import sys
import time

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def cases():
    """The fixed case list: op, dtype, heads, features, and whether baselines run."""
    from cupy_csrattn.bench import Case

    f32, f16 = "float32", "float16"
    result = []
    for H, dtype in ((8, f32), (1, f32), (8, f16)):
        result.append(Case("edge_softmax", dtype, H, 0, baselines=dtype == f32))
        if dtype == f32:
            result.append(Case("edge_softmax_backward", dtype, H, 0, baselines=False))
    for H, F, dtype in ((1, 64, f32), (8, 16, f32), (8, 16, f16)):
        result.append(Case("attention_aggregate", dtype, H, F, baselines=dtype != f16))
        if dtype == f16:
            continue
        result += [
            Case("attention_aggregate_backward", dtype, H, F, baselines=False),
            Case("spmm", dtype, H, F, baselines=True),
            Case("spmm_backward", dtype, H, F, baselines=False),
        ]
    return result


def print_record(entry):
    from cupy_csrattn import bench

    floor = bench.floor_text(entry)
    if "csrattn_ms_in_turns" in entry:
        ours = entry["csrattn_ms_in_turns"]
        floor = f"csrattn {ours:.4f} ms in turns with it ({entry['ms'] / ours:.2f}x)"
    print(
        f"{entry['graph']:>14} {entry['op']:<30} {entry['dtype']:>7} H={entry['H']:<2} F={entry['F']:<3} "
        f"{entry['method']:<12} {entry['ms']:9.4f} ms  {entry['roofline_fraction'] * 100:6.1f}% of roofline"
        + (f", {floor}" if floor else ""),
        flush=True,
    )


def main(case_list=cases, stem="gpu", description=__doc__):
    """Run ``case_list()`` on the fixed graphs (and any .mtx given); the JSON, named
    ``<stem>_<gpu name>.json`` (or --out), is rewritten after every record so a cut-short run keeps its results."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("mtx", nargs="*", help="Matrix Market files to add as graphs")
    parser.add_argument("--quick", action="store_true", help="smaller large graphs (2M edges), for a smoke run")
    parser.add_argument("--only", nargs="*", help="graph names to run")
    parser.add_argument("--no-baselines", action="store_true", help="time only this library's ops")
    parser.add_argument("--repeat", type=int, default=20, metavar="N", help="timed calls per measurement (default 20)")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        metavar="FILE",
        help=f"write the JSON here instead of benchmarks/results/{stem}_<gpu name>.json",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    from cupy_csrattn import bench

    try:
        device = bench.GpuDevice(args.repeat)
    except RuntimeError as error:  # no usable GPU: backend.gpu_status()'s reason
        parser.exit(1, f"{parser.prog}: {error}\n")
    gpu_name = device.name
    bandwidth = device.copy_bandwidth()
    print(f"{gpu_name}: copy bandwidth {bandwidth / 1e12:.3f} TB/s (read + write)", flush=True)
    scale = 17 if args.quick else 20
    graphs = {
        "small-384-mod5": lambda: bench.small_graph(2, 5),
        "small-384-mod7": lambda: bench.small_graph(3, 7),
        "uniform": lambda: bench.uniform_graph(1 << scale, 16),
        "rmat": lambda: bench.rmat_graph(scale, 16),
        "dense": lambda: bench.dense_graph(12_500 if args.quick else 100_000, 500 if not args.quick else 160),
    }
    for path in args.mtx:
        graphs[pathlib.Path(path).stem] = lambda path=path: bench.mtx_graph(path)
    selected = [(name, build) for name, build in graphs.items() if not args.only or name in args.only]
    selected_cases = case_list()
    if args.no_baselines:
        selected_cases = [dataclasses.replace(case, baselines=False) for case in selected_cases]

    def on_graph(name, graph):
        degrees = np.diff(graph.indptr)
        print(f"-- {name}: {graph.num_dst} rows, {graph.num_edges} edges, max degree {degrees.max()}", flush=True)

    pyg = (None, None) if args.no_baselines else bench.load_pyg()
    result = dict(
        gpu=gpu_name,
        copy_bandwidth_bytes_per_s=bandwidth,
        cupy=device.versions()["cupy"],
        python=platform.python_version(),
        quick=args.quick,
        date=time.strftime("%Y-%m-%d"),
        pyg=pyg[0] is not None,
        records=[],
        skipped=[],
    )
    path = args.out or RESULTS / (f"{stem}_" + gpu_name.replace(" ", "_") + ("_quick" if args.quick else "") + ".json")

    def on_record(entry):
        print_record(entry)
        result["records"].append(entry)
        bench.write_json(path, result)

    # Kernels compile on first use, inside the untimed warm-up calls.
    records, skipped = bench.run_cases(
        selected, selected_cases, device, bandwidth, pyg, on_graph=on_graph, on_record=on_record
    )
    for entry in skipped:
        print(
            f"{entry['graph']:>14} {entry['op']:<30} {entry['dtype']:>7} H={entry['H']:<2} F={entry['F']:<3} "
            f"{entry['method']:<12} skipped: {entry['reason']}",
            flush=True,
        )
    result["skipped"] = skipped
    bench.write_json(path, result)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
