"""Time two checkouts of cupy_csrattn against each other, in one process, on the same
graphs and inputs (this library's ops only, no baselines): is a change faster or slower?

Run on a machine with a GPU, from the repository root:
    git archive OLD_COMMIT | tar -x -C /tmp/old
    python3 benchmarks/compare_trees.py /tmp/old . results.json [GRAPH ...] [--case TEXT ...]
        [--tree NAME=TREE ...] [--host] [--rounds N]
Each case runs old, new, old, new (median of REPEAT event-timed calls each, through the new
tree's cupy_csrattn.bench.timing.time_gpu; with --host, the host's cost of issuing one call,
through its time_host_call; --rounds N: N rounds instead of two, their medians compared);
the first two runs of the old tree give the run-to-run noise. --tree adds checkouts timed in the
same rounds after new, each record giving their times and ratios to old under "more". The
graphs come from the new tree's cupy_csrattn.datasets: a uniform graph of 1M rows and 16M
edges, an R-MAT graph of scale 20, a 384-row graph (per-call cost) and a dense graph of 100k
rows and 50M edges. With --case, only the cases whose name contains one of the TEXTs run (and
draw inputs, on the GPU). The JSON is written after each case.
"""

import argparse
import json
import statistics
import sys
from functools import partial

import cupy
import numpy as np

REPEAT, WARMUP = 10, 2


def load(tree):
    """The cupy_csrattn package of checkout ``tree``, imported afresh: packages loaded one after
    the other live side by side, each holding its own modules. Load the tree that may import
    lazily (an older one) last, so that its late imports find its own modules."""
    for name in [m for m in sys.modules if m == "cupy_csrattn" or m.startswith("cupy_csrattn.")]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    import cupy_csrattn
    import cupy_csrattn.datasets  # noqa: F401

    sys.path.remove(tree)
    return cupy_csrattn


GRAPHS = {
    "uniform-1M": lambda datasets: datasets.uniform_graph(1 << 20, 16, seed=1),
    "rmat-20": lambda datasets: datasets.rmat_graph(20, 16, seed=2),
    "small-384": lambda datasets: datasets.uniform_graph(384, 18, seed=1),
    "dense-100k": lambda datasets: datasets.uniform_graph(100_000, 500, seed=3),
}


def graphs(datasets, names):
    """name -> (indptr, indices, num_src) as NumPy arrays, for the graphs ``names`` of GRAPHS."""
    unknown = sorted(set(names) - set(GRAPHS))
    if unknown:
        raise SystemExit(f"unknown graph(s) {unknown}; choose from {sorted(GRAPHS)}")
    built = {name: GRAPHS[name](datasets) for name in names}
    return {name: (np.asarray(g.indptr), np.asarray(g.indices), g.num_src) for name, g in built.items()}


def _inputs(rng, *shapes, dtype=np.float32):
    """A function returning standard normal arrays of ``shapes``, drawn (with rng, a NumPy
    Generator or a cupy.random.RandomState) at its first call and kept: the cases sharing them
    see the same arrays, and cases that do not run draw nothing."""
    drawn = []
    kind = np.float64 if np.dtype(dtype) == np.float64 else np.float32

    def get():
        if not drawn:
            drawn.extend(cupy.asarray(rng.standard_normal(shape, dtype=kind)).astype(dtype) for shape in shapes)
        return drawn

    return get


def _pick(inputs, *positions):
    """A function returning the arrays of inputs() at positions."""
    return lambda: [inputs()[i] for i in positions]


def cases(rng, num_edges, num_dst, num_src):
    """[(name, make)]: the core ops and the fused attentions, forward and backward; make()
    draws the case's inputs (cupy.random.RandomState rng: on the GPU, where drawing the large
    graphs' inputs on the host took longer than timing them) and returns fn(package, graph)."""
    E, Nd, Ns = num_edges, num_dst, num_src
    result = []

    def add(name, fn, *args, inputs):
        result.append((name, lambda: partial(fn, *args, *inputs())))

    for H, dt in ((8, np.float32), (1, np.float32), (8, np.float16), (8, np.float64)):
        add(f"edge_softmax H={H} {np.dtype(dt).name}", _call, "edge_softmax", inputs=_inputs(rng, (E, H), dtype=dt))
    add("edge_softmax_backward H=8", _call, "edge_softmax_backward", inputs=_inputs(rng, (E, 8), (E, 8)))
    for dt in (np.float16, np.float64):
        name = f"edge_softmax_backward H=8 {np.dtype(dt).name}"
        add(name, _call, "edge_softmax_backward", inputs=_inputs(rng, (E, 8), (E, 8), dtype=dt))
    for H, F, dt in ((1, 64, np.float32), (8, 16, np.float32), (8, 16, np.float16)):
        s_v = _inputs(rng, (E, H), (Ns, H, F), dtype=dt)
        tag = f"H={H} F={F} {np.dtype(dt).name}"
        add(f"attention_aggregate {tag}", _call, "attention_aggregate", inputs=s_v)
        add(f"spmm {tag}", _call, "spmm", inputs=s_v)
    s_v_go = _inputs(rng, (E, 8), (Ns, 8, 16), (Nd, 8, 16))
    add("attention_aggregate_backward H=8 F=16", _call, "attention_aggregate_backward", inputs=s_v_go)
    half = _inputs(rng, (E, 8), (Ns, 8, 16), (Nd, 8, 16), dtype=np.float16)
    add("attention_aggregate_backward H=8 F=16 float16", _call, "attention_aggregate_backward", inputs=half)
    add("spmm_backward H=8 F=16", _call, "spmm_backward", inputs=s_v_go)
    add("sddmm H=8 D=16", _call, "sddmm", inputs=_inputs(rng, (Nd, 8, 16), (Ns, 8, 16)))
    for dt in (np.float32, np.float16):
        for H, F in ((8, 16), (4, 64), (8, 64)):
            shapes = (Nd, H, F), (Ns, H, F), (Ns, H, F), (Nd, H, F), (Nd, H), (Ns, H), (H, F)
            drawn = _inputs(rng, *shapes, dtype=dt)
            # q, k, v, go; a_dst, a_src, v, go; x_dst, x_src, att, go
            fused = dict(graph_attention=(0, 1, 2, 3), gat_attention=(4, 5, 2, 3), gatv2_attention=(0, 1, 6, 3))
            saved = {}
            tag = f"H={H} F={F}" + ("" if dt == np.float32 else f" {np.dtype(dt).name}")
            for op, positions in fused.items():
                add(f"{op} {tag}", _forward, saved, op, inputs=_pick(drawn, *positions))
                add(f"{op}_backward {tag}", _backward, saved, op, inputs=_pick(drawn, *positions))
    return result


def _call(op, *args, package, graph):
    getattr(package, op)(graph, *args)


def _forward(saved, op, *inputs_and_grad, package, graph):
    """The forward (inputs_and_grad: its inputs, then the backward's grad_out), keeping out and
    lse (per package) for the backward case that follows."""
    saved[op, id(package)] = getattr(package, op)(graph, *inputs_and_grad[:-1], return_lse=True)


def _backward(saved, op, *inputs_and_grad, package, graph):
    if (op, id(package)) not in saved:  # the forward's case did not run (--case)
        _forward(saved, op, *inputs_and_grad, package=package, graph=graph)
    out, lse = saved[op, id(package)]
    getattr(package, op + "_backward")(graph, *inputs_and_grad[:-1], out, inputs_and_grad[-1], lse)


def main(old_tree, new_tree, out_path, *names, case_filter=(), more_trees=(), host=False, rounds=2):
    """more_trees: (name, tree) pairs timed beside old and new; host: time the host's cost of
    issuing each call (microseconds) instead of the GPU's time (milliseconds); rounds: how many
    times each tree is timed per case (the median is compared)."""
    new = load(new_tree)
    # The new tree's timer (an older tree may have none); it keeps working after load() below
    # drops the new tree's modules from sys.modules.
    from cupy_csrattn.bench.timing import time_gpu, time_host_call

    time_call = time_host_call if host else partial(time_gpu, repeat=REPEAT, warmup=WARMUP)
    unit = "us" if host else "ms"
    key = "host_us" if host else "ms"
    arrays = graphs(new.datasets, names or list(GRAPHS))
    packages = {"new": new, **{tag: load(tree) for tag, tree in more_trees}, "old": load(old_tree)}
    order = ["old", "new"] + [tag for tag, _ in more_trees]
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    trees = dict(old=old_tree, new=new_tree, **dict(more_trees))
    records = []
    for name, (indptr, indices, num_src) in arrays.items():
        on_gpu = cupy.asarray(indptr), cupy.asarray(indices)
        graph_of = {tag: package.CSRGraph(*on_gpu, num_src) for tag, package in packages.items()}
        num_edges, num_dst = len(indices), len(indptr) - 1
        print(f"-- {name}: {num_dst} rows, {num_edges} edges, max degree {int(np.diff(indptr).max())}", flush=True)
        for case, make in cases(cupy.random.RandomState(0), num_edges, num_dst, num_src):
            if case_filter and not any(text in case for text in case_filter):
                continue
            fn = make()
            times = {tag: [] for tag in order}
            for tag in order * rounds:
                times[tag].append(time_call(partial(fn, package=packages[tag], graph=graph_of[tag])))
            ms = {tag: statistics.median(t) for tag, t in times.items()}
            noise = abs(times["old"][0] - times["old"][1]) / ms["old"]
            record = {"graph": name, "case": case, f"old_{key}": times["old"], f"new_{key}": times["new"]}
            record.update(ratio=ms["new"] / ms["old"], noise=noise)
            if more_trees:
                record["more"] = {tag: {key: times[tag], "ratio": ms[tag] / ms["old"]} for tag, _ in more_trees}
            records.append(record)
            more = "".join(f"  {tag} {ms[tag]:9.4f} {unit} {ms[tag] / ms['old']:5.3f}" for tag, _ in more_trees)
            print(
                f"{name:>11} {case:<42} old {ms['old']:9.4f} {unit}  new {ms['new']:9.4f} {unit}  new/old "
                f"{ms['new'] / ms['old']:5.3f}{more}  (old run-to-run {noise * 100:4.1f}%)",
                flush=True,
            )
            with open(out_path, "w") as file:  # after each case: a run cut short keeps what it timed
                json.dump(dict(gpu=gpu, trees=trees, records=records), file, indent=1)
        del graph_of, on_gpu
        cupy.get_default_memory_pool().free_all_blocks()
    ratios = [r["ratio"] for r in records]
    print(
        f"new/old over {len(ratios)} cases: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
        f"max {max(ratios):.3f}; old run-to-run median {statistics.median(r['noise'] for r in records) * 100:.1f}%"
    )


def _tree(text):
    name, sep, tree = text.partition("=")
    if not sep or not name or not tree or name in ("old", "new"):
        raise argparse.ArgumentTypeError(f"--tree takes NAME=TREE, NAME neither old nor new; got {text!r}")
    return name, tree


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_tree")
    parser.add_argument("new_tree")
    parser.add_argument("out_path")
    parser.add_argument("graphs", nargs="*", metavar="GRAPH", help=f"of {sorted(GRAPHS)} (default: all)")
    parser.add_argument("--case", nargs="+", default=(), metavar="TEXT", help="only cases whose name contains a TEXT")
    parser.add_argument("--tree", nargs="+", type=_tree, default=(), metavar="NAME=TREE", help="more trees to time")
    parser.add_argument("--host", action="store_true", help="time the host's cost of issuing a call, not the GPU's")
    parser.add_argument("--rounds", type=int, default=2, help="times each tree is timed per case (default 2)")
    args = parser.parse_args(argv)
    if args.rounds < 2:  # the first two rounds of the old tree give the noise
        parser.error(f"--rounds must be at least 2; got {args.rounds}")
    return args


if __name__ == "__main__":
    args = _arguments(sys.argv[1:])
    main(
        args.old_tree,
        args.new_tree,
        args.out_path,
        *args.graphs,
        case_filter=tuple(args.case),
        more_trees=tuple(args.tree),
        host=args.host,
        rounds=args.rounds,
    )
