"""``csrattn bench``: time the ops against baselines and the memory roofline (cupy_csrattn.bench)."""

import argparse
import contextlib
import os
import platform
import tempfile
import time

import numpy as np

import cupy_csrattn
from cupy_csrattn import backend
from cupy_csrattn import bench as bm
from cupy_csrattn.cli.common import (
    PROG,
    CommandError,
    Progress,
    UsageError,
    bounded_int,
    kernel_size,
    positive_int,
    progress_wanted,
)
from cupy_csrattn.datasets.base import MAX_COUNT, NodeLimitError

DEFAULT_GRAPHS = {"gpu": ["rmat:20", "uniform:1048576,16"], "cpu": ["rmat:14", "uniform:16384,16"]}


def add_parser(commands):
    """The ``bench`` subcommand's parser, added to ``commands``."""
    bench = commands.add_parser(
        "bench",
        help="time the ops against baselines and the memory roofline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time each op (median of device-synchronized calls after warm-up, fresh random data) against\n"
        "baselines and the memory roofline (a copy measured in the same run). On a GPU the baselines\n"
        "are plain CuPy compositions, cuSPARSE (through cupyx) and PyG when installed; without a GPU\n"
        "the CPU backend is timed against NumPy/SciPy compositions.\n"
        "Prints a table; with --out, writes JSON and one PNG per graph (when matplotlib is installed).",
        epilog="examples:\n"
        "  csrattn bench --graph rmat:16 uniform:100000,16 --ops edge_softmax attention_aggregate\n"
        "  csrattn bench --graph web-Google.mtx --dtype float32 float16 --heads 1 8 --out results/",
    )
    bench.add_argument(
        "--graph",
        nargs="+",
        metavar="SPEC",
        help="graphs: rmat:SCALE[,EDGE_FACTOR], uniform:N,DEG, or a file (.mtx, .npz or an edge "
        "list 'src dst' per line); default: rmat:20 and uniform:1048576,16 on a GPU, "
        "rmat:14 and uniform:16384,16 on the CPU",
    )
    bench.add_argument(
        "--ops",
        nargs="+",
        choices=bm.BENCH_OPS,
        metavar="OP",
        help=f"ops to time (default: all): {', '.join(bm.BENCH_OPS)}",
    )
    bench.add_argument(
        "--dtype",
        nargs="+",
        choices=["float16", "float32", "float64"],
        default=["float32"],
        help="data types (default: float32)",
    )
    bench.add_argument(
        "--heads",
        nargs="+",
        type=kernel_size,
        default=[8],
        metavar="H",
        help="numbers of heads, 1 to 2**31 - 1 (default: 8)",
    )
    bench.add_argument(
        "--features",
        nargs="+",
        type=kernel_size,
        default=[16],
        metavar="F",
        help="feature widths per head, 1 to 2**31 - 1 (default: 16)",
    )
    bench.add_argument(
        "--max-nodes",
        type=max_nodes_count,
        metavar="N",
        help="the most nodes a graph file may declare or imply (default: max(2**20, 16 per edge); more is "
        "refused, as a likely mistake in the file, unless allowed here)",
    )
    bench.add_argument(
        "--repeat", type=positive_int, metavar="N", help="timed calls per case (default: 20 on a GPU, 5 on the CPU)"
    )
    bench.add_argument(
        "--device",
        choices=["auto", "gpu", "cpu"],
        default="auto",
        help="where to run (default: the GPU when one is usable)",
    )
    bench.add_argument(
        "--out",
        metavar="DIR",
        help="write the results here: bench_<device>_<name>.json and bench_<graph>.png (the directory is "
        "created, and checked to be writable, before anything is timed)",
    )
    bench.add_argument("--no-plot", action="store_true", help="write no PNG plots")
    bench.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)
    return bench


def max_nodes_count(text):
    """argparse type of --max-nodes: a node count from 0 to 2**62, as the loaders take it."""
    return bounded_int(text, 0, MAX_COUNT, " (2**62)")


def parse_graphs(specs, plots=False, max_nodes=None):
    """(name, build) per graph spec; a bad spec, or a missing, unreadable or malformed file, is
    a usage error, as are two graphs of one name (or, with ``plots``, of one plot file).
    ``max_nodes`` (--max-nodes) goes to the loaders."""
    parsed = []
    for spec in specs:
        try:
            parsed.append((spec, *bm.graph_from_spec(spec, max_nodes)))
        except FileNotFoundError as error:
            raise UsageError(f"{PROG} bench: error: --graph {spec}: {error.strerror}") from None
        except ValueError as error:
            raise UsageError(f"{PROG} bench: error: --graph: {error}") from None
    check_graph_names([name for _, name, _ in parsed], plots)
    return [(name, build if bm.is_generated(spec) else read_graph_file(spec, build)) for spec, name, build in parsed]


def check_graph_names(names, plots):
    """A usage error for two graphs of one name or, with ``plots``, of names that make one plot
    file name ("a b" and "a_b" are both plotted to bench_a_b.png: the second replaced the first)."""
    if len(set(names)) != len(names):
        raise UsageError(f"{PROG} bench: error: --graph names a graph twice ({', '.join(names)})")
    plotted = {}
    for name in names if plots else ():
        stem = bm.file_stem(name)
        if stem in plotted:
            raise UsageError(
                f"{PROG} bench: error: --graph: graphs {plotted[stem]!r} and {name!r} would be plotted to one "
                f"file, bench_{stem}.png (rename a file)"
            )
        plotted[stem] = name


def read_graph_file(spec, build):
    """Read a graph file now, before --out is made or anything is timed: read in its turn, a
    malformed file failed after the graphs before it were timed, and their results were lost.

    Returns a build that hands the graph over once (run_cases frees each graph after timing it).
    """
    try:
        held = [build()]
    except NodeLimitError as error:  # it names the loaders' max_nodes=, which is --max-nodes here
        raise UsageError(f"{PROG} bench: error: --graph: {error.message('--max-nodes')}") from None
    except (ValueError, OSError) as error:  # the loaders' errors name the file (and line)
        raise UsageError(f"{PROG} bench: error: --graph: {backend.first_line(error)}") from None
    return held.pop


def check_out_dir(path):
    """Create the --out directory and write (then remove) a small file in it, before anything
    is timed: a directory that cannot be made or written is a usage error naming --out, at
    once instead of after the whole benchmark."""
    if not path:
        raise UsageError(f"{PROG} bench: error: --out: an empty path")
    existed = os.path.isdir(path)
    if os.path.exists(path) and not existed:
        raise UsageError(f"{PROG} bench: error: --out {path}: exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"{PROG} bench: error: --out {path}: cannot create the directory ({error.strerror or error})"
        ) from None
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".csrattn-bench-", suffix=".tmp") as probe:
            probe.write(b"csrattn bench: can the results be written here?\n")
            probe.flush()
    except OSError as error:
        if not existed:
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise UsageError(
            f"{PROG} bench: error: --out {path}: cannot write a file there ({error.strerror or error})"
        ) from None


def results_path(out, device):
    """Where the JSON results of a run on ``device`` go in --out directory ``out``."""
    return os.path.join(out, f"bench_{device.kind}_{bm.file_stem(device.name)}.json")


def check_results_path(out, device):
    """A usage error, before anything is timed, where a directory holds the results file's name
    (the write failed after the whole benchmark)."""
    path = results_path(out, device)
    if os.path.isdir(path):
        raise UsageError(f"{PROG} bench: error: --out {out}: {path} is a directory, where the results are written")


def cmd_bench(args):
    usable, reason = backend.gpu_status()
    if args.device == "gpu" and not usable:
        raise CommandError(f"--device gpu: {reason}")
    on_gpu = usable and args.device != "cpu"
    specs = args.graph or DEFAULT_GRAPHS["gpu" if on_gpu else "cpu"]
    graphs = parse_graphs(specs, plots=args.out is not None and not args.no_plot, max_nodes=args.max_nodes)
    ops = args.ops or list(bm.BENCH_OPS)
    cases = bm.make_cases(ops, args.dtype, args.heads, args.features)
    repeat = args.repeat or (20 if on_gpu else 5)
    if args.out is not None:
        check_out_dir(args.out)  # before anything is timed
    device = bm.GpuDevice(repeat) if on_gpu else bm.CpuDevice(repeat)
    if args.out is not None:
        check_results_path(args.out, device)  # before anything is timed too
    if on_gpu:
        print(f"GPU {device.name}: timing the ops against CuPy compositions, cuSPARSE and PyG (when installed)")
        started = time.perf_counter()
        cupy_csrattn.warmup(dtypes=args.dtype)
        print(f"kernels ready in {time.perf_counter() - started:.1f} s (compiled once, then loaded from CuPy's cache)")
    else:
        why = reason if args.device == "auto" else "--device cpu given"
        print(f"No GPU used ({why}): timing the CPU backend on {device.name}, against NumPy/SciPy compositions")
    bandwidth = device.copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write): the roofline")
    pyg = bm.load_pyg() if on_gpu else (None, None)
    with Progress(len(graphs) * len(cases), "bench", enabled=progress_wanted(args)) as progress:

        def on_graph(name, graph):
            degrees = np.diff(graph.indptr)
            progress.write(
                f"{name}: {graph.num_dst} rows, {graph.num_edges} edges, "
                f"max degree {int(degrees.max()) if len(degrees) else 0}"
            )

        def on_case(name, case):
            progress.advance(note=f"{name} {case.op} {case.dtype} H={case.H}")

        records, skipped = bm.run_cases(graphs, cases, device, bandwidth, pyg, on_graph=on_graph, on_case=on_case)
    print()
    print(bm.format_table(records, skipped))
    if args.out is None:
        print("\nno --out given: results not written (--out DIR writes JSON and plots)")
        return 0
    date = time.strftime("%Y-%m-%d")
    document = dict(
        device=device.kind,
        device_name=device.name,
        copy_bandwidth_bytes_per_s=bandwidth,
        date=date,
        python=platform.python_version(),
        cupy_csrattn=cupy_csrattn.__version__,
        versions=device.versions(),
        pyg=pyg[0] is not None,
        settings=dict(
            graphs=specs, ops=ops, dtypes=args.dtype, heads=args.heads, features=args.features, repeat=repeat
        ),
        records=records,
        skipped=skipped,
    )
    path = bm.write_json(results_path(args.out, device), document)
    print(f"\nwrote {path}")
    if args.no_plot:
        print("plots not made (--no-plot)")
    elif not records:
        print("plots not made: nothing was timed")
    elif bm.matplotlib_available():
        for png in bm.plot_results(records, args.out, title=f"{device.name}, {date}"):
            print(f"wrote {png}")
    else:
        print("plots skipped: matplotlib is not installed (pip install matplotlib, or the package's 'plot' extra)")
    return 0
