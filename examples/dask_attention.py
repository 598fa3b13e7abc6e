"""Both fused attention ops, forward and backward, on a graph partitioned over Dask workers.

By default it starts a local CPU cluster (``--workers`` processes) and uses NumPy chunks;
``--gpus N`` starts one worker per GPU instead (cupy_csrattn.distributed.gpu_cluster) with CuPy
chunks; with ``--scheduler ADDRESS`` it runs on an existing cluster, for instance one worker
per GPU started by ``dask-cuda-worker``, and with ``--gpu`` its chunks are CuPy arrays.
``--exchange nccl`` moves halos between the GPU workers through NCCL. Every result is checked
against the single-process call on the whole
graph (forward exactly, source-side gradients to float32 rounding); it prints the timings.
Needs the distributed extra: ``python3 -m pip install ".[distributed]"``.
"""

import sys
import time

import numpy as np
import scipy.sparse
from _common import argument_parser, int_at_least

import cupy_csrattn as ca

try:
    import distributed

    import cupy_csrattn.distributed as cad
except ImportError:  # the optional extra
    distributed = cad = None


def parse_args(argv=None):
    parser = argument_parser(__doc__)
    parser.add_argument("--nodes", type=int_at_least(1), default=20000, help="nodes of the random graph")
    parser.add_argument("--degree", type=int_at_least(1), default=16, help="average in-degree")
    parser.add_argument("--heads", type=int_at_least(1), default=4, help="attention heads")
    parser.add_argument("--features", type=int_at_least(1), default=16, help="features per head")
    parser.add_argument("--workers", type=int_at_least(1), default=2, help="workers of the local cluster")
    parser.add_argument("--partitions", type=int_at_least(1), default=None, help="partitions (default: one per worker)")
    parser.add_argument("--scheduler", default=None, help="address of an existing cluster's scheduler (default: local)")
    parser.add_argument("--gpu", action="store_true", help="CuPy chunks (the workers need GPUs)")
    parser.add_argument("--gpus", type=int_at_least(1), default=None, help="a local cluster of one worker per GPU")
    parser.add_argument(
        "--exchange", choices=("tasks", "nccl"), default="tasks", help="how halos move (default: tasks)"
    )
    return parser.parse_args(argv)


def worst_gap(got, want):
    """Largest difference relative to the largest magnitude of want."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1.0)) if want.size else 0.0


def run(client, args):
    rng = np.random.default_rng(0)
    n, H, F = args.nodes, args.heads, args.features
    A = scipy.sparse.random_array((n, n), density=min(1.0, args.degree / n), format="csr", rng=1)
    start = time.perf_counter()
    pg = cad.PartitionedGraph.from_scipy(A, client, args.partitions, exchange=args.exchange)
    print(f"{pg}: set-up {time.perf_counter() - start:.2f} s, rows per partition {pg.row_chunks}")
    arrays = {
        "q": rng.standard_normal((n, H, F), dtype=np.float32),
        "k": rng.standard_normal((n, H, F), dtype=np.float32),
        "v": rng.standard_normal((n, H, F), dtype=np.float32),
        "a_dst": rng.standard_normal((n, H), dtype=np.float32),
        "a_src": rng.standard_normal((n, H), dtype=np.float32),
        "grad_out": rng.standard_normal((n, H, F), dtype=np.float32),
    }
    if args.gpu or args.gpus:
        import cupy  # the workers and this process need it for CuPy chunks

        arrays = {name: cupy.asarray(x) for name, x in arrays.items()}
    side = {"k": "src", "v": "src", "a_src": "src"}
    chunked = {name: pg.as_node_array(x, side.get(name, "dst")).persist() for name, x in arrays.items()}
    calls = {
        "graph_attention": (("q", "k", "v"), {}),
        "gat_attention": (("a_dst", "a_src", "v"), {"negative_slope": 0.2}),
    }
    worst = 0.0
    for name, (inputs, kwargs) in calls.items():
        forward, backward = getattr(cad, name), getattr(cad, name + "_backward")
        start = time.perf_counter()
        out, lse = forward(pg, *(chunked[x] for x in inputs), return_lse=True, **kwargs)
        middle = time.perf_counter()
        grads = backward(pg, *(chunked[x] for x in inputs), out, chunked["grad_out"], lse, **kwargs)
        end = time.perf_counter()
        want_out, want_lse = getattr(ca, name)(A, *(arrays[x] for x in inputs), return_lse=True, **kwargs)
        want_grads = getattr(ca, name + "_backward")(
            A, *(arrays[x] for x in inputs), want_out, arrays["grad_out"], want_lse, **kwargs
        )
        exact = all(bool((got.compute() == want).all()) for got, want in ((out, want_out), (lse, want_lse)))
        gaps = [
            worst_gap(ca.backend.to_device(g.compute(), False), ca.backend.to_device(w, False))
            for g, w in zip(grads, want_grads)
        ]
        worst = max(worst, *gaps)
        print(
            f"{name}: forward {1e3 * (middle - start):.1f} ms, backward {1e3 * (end - middle):.1f} ms; "
            f"forward {'equal' if exact else 'DIFFERENT'}, gradients within {max(gaps):.1e}"
        )
        if not exact:
            return 1
    return 0 if worst < 1e-5 else 1


def main(argv=None):
    args = parse_args(argv)
    if distributed is None:
        print("this example needs Dask: python3 -m pip install '.[distributed]'", file=sys.stderr)
        return 2
    if args.scheduler:
        with distributed.Client(args.scheduler) as client:
            return run(client, args)
    if args.gpus:
        with cad.gpu_cluster(args.gpus) as cluster, distributed.Client(cluster) as client:
            return run(client, args)
    with (
        distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        return run(client, args)


if __name__ == "__main__":
    sys.exit(main())
