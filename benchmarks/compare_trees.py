"""Time two checkouts of cupy_csrattn against each other, in one process, on the same
graphs and inputs (this library's ops only, no baselines): is a change faster or slower?

Run on a machine with a GPU, from the repository root:
    git archive OLD_COMMIT | tar -x -C /tmp/old
    python3 benchmarks/compare_trees.py /tmp/old . results.json [GRAPH ...] [--case TEXT ...]
Each case runs old, new, old, new (median of REPEAT event-timed calls each, through the new
tree's cupy_csrattn.bench.timing.time_gpu);
the two runs of the old tree give the run-to-run noise. The graphs come from the new tree's
cupy_csrattn.datasets: a uniform graph of 1M rows and 16M edges, an R-MAT graph of scale
20, a 384-row graph (per-call cost) and a dense graph of 100k rows and 50M edges. With
--case, only the cases whose name contains one of the TEXTs run.
"""

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


def _random(rng, *shape, dtype=np.float32):
    return cupy.asarray(rng.standard_normal(shape).astype(dtype))


def cases(rng, num_edges, num_dst, num_src):
    """[(name, fn(package, graph))]: the core ops and the fused attentions, forward and backward."""
    E, Nd, Ns = num_edges, num_dst, num_src
    result = []
    for H, dt in ((8, np.float32), (1, np.float32), (8, np.float16), (8, np.float64)):
        s = _random(rng, E, H, dtype=dt)
        result.append((f"edge_softmax H={H} {np.dtype(dt).name}", partial(_call, "edge_softmax", s)))
    result.append(("edge_softmax_backward H=8", partial(_call, "edge_softmax_backward", *_many(rng, (E, 8), (E, 8)))))
    for dt in (np.float16, np.float64):
        probs, grad = _random(rng, E, 8, dtype=dt), _random(rng, E, 8, dtype=dt)
        name = f"edge_softmax_backward H=8 {np.dtype(dt).name}"
        result.append((name, partial(_call, "edge_softmax_backward", probs, grad)))
    for H, F, dt in ((1, 64, np.float32), (8, 16, np.float32), (8, 16, np.float16)):
        s, v = _random(rng, E, H, dtype=dt), _random(rng, Ns, H, F, dtype=dt)
        tag = f"H={H} F={F} {np.dtype(dt).name}"
        result.append((f"attention_aggregate {tag}", partial(_call, "attention_aggregate", s, v)))
        if dt == np.float32:
            result.append((f"spmm {tag}", partial(_call, "spmm", s, v)))
    s, v, go = _many(rng, (E, 8), (Ns, 8, 16), (Nd, 8, 16))
    result.append(("attention_aggregate_backward H=8 F=16", partial(_call, "attention_aggregate_backward", s, v, go)))
    result.append(("spmm_backward H=8 F=16", partial(_call, "spmm_backward", s, v, go)))
    result.append(("sddmm H=8 D=16", partial(_call, "sddmm", *_many(rng, (Nd, 8, 16), (Ns, 8, 16)))))
    for H, F, dt in ((8, 16, np.float32), (4, 64, np.float32), (8, 16, np.float16), (4, 64, np.float16)):
        shapes = (Nd, H, F), (Ns, H, F), (Ns, H, F), (Nd, H, F), (Nd, H), (Ns, H)
        q, k, v, go, a_dst, a_src = (_random(rng, *shape, dtype=dt) for shape in shapes)
        saved = {}
        tag = f"H={H} F={F}" + ("" if dt == np.float32 else f" {np.dtype(dt).name}")
        result += [
            (f"graph_attention {tag}", partial(_forward, saved, "graph_attention", q, k, v)),
            (f"graph_attention_backward {tag}", partial(_backward, saved, "graph_attention", (q, k, v), go)),
            (f"gat_attention {tag}", partial(_forward, saved, "gat_attention", a_dst, a_src, v)),
            (f"gat_attention_backward {tag}", partial(_backward, saved, "gat_attention", (a_dst, a_src, v), go)),
        ]
    return result


def _many(rng, *shapes):
    return [_random(rng, *shape) for shape in shapes]


def _call(op, *args, package, graph):
    getattr(package, op)(graph, *args)


def _forward(saved, op, *args, package, graph):
    """The forward, keeping out and lse (per package) for the backward case that follows."""
    saved[op, id(package)] = getattr(package, op)(graph, *args, return_lse=True)


def _backward(saved, op, inputs, grad_out, *, package, graph):
    out, lse = saved[op, id(package)]
    getattr(package, op + "_backward")(graph, *inputs, out, grad_out, lse)


def main(old_tree, new_tree, out_path, *names, case_filter=()):
    new = load(new_tree)
    # The new tree's timer (an older tree may have none); it keeps working after load() below
    # drops the new tree's modules from sys.modules.
    from cupy_csrattn.bench.timing import time_gpu

    time_call = partial(time_gpu, repeat=REPEAT, warmup=WARMUP)
    arrays = graphs(new.datasets, names or list(GRAPHS))
    packages = {"old": load(old_tree), "new": new}
    records = []
    for name, (indptr, indices, num_src) in arrays.items():
        on_gpu = cupy.asarray(indptr), cupy.asarray(indices)
        graph_of = {tag: package.CSRGraph(*on_gpu, num_src) for tag, package in packages.items()}
        num_edges, num_dst = len(indices), len(indptr) - 1
        print(f"-- {name}: {num_dst} rows, {num_edges} edges, max degree {int(np.diff(indptr).max())}", flush=True)
        for case, fn in cases(np.random.default_rng(0), num_edges, num_dst, num_src):
            if case_filter and not any(text in case for text in case_filter):
                continue
            times = {"old": [], "new": []}
            for tag in ("old", "new", "old", "new"):
                times[tag].append(time_call(partial(fn, package=packages[tag], graph=graph_of[tag])))
            old_ms, new_ms = statistics.mean(times["old"]), statistics.mean(times["new"])
            noise = abs(times["old"][0] - times["old"][1]) / old_ms
            records.append(
                dict(
                    graph=name, case=case, old_ms=times["old"], new_ms=times["new"], ratio=new_ms / old_ms, noise=noise
                )
            )
            print(
                f"{name:>11} {case:<42} old {old_ms:9.4f} ms  new {new_ms:9.4f} ms  new/old {new_ms / old_ms:5.3f}"
                f"  (old run-to-run {noise * 100:4.1f}%)",
                flush=True,
            )
        del graph_of, on_gpu
        cupy.get_default_memory_pool().free_all_blocks()
        gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        with open(out_path, "w") as file:
            json.dump(dict(gpu=gpu, records=records), file, indent=1)
    ratios = [r["ratio"] for r in records]
    print(
        f"new/old over {len(ratios)} cases: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
        f"max {max(ratios):.3f}; old run-to-run median {statistics.median(r['noise'] for r in records) * 100:.1f}%"
    )


if __name__ == "__main__":
    at = sys.argv.index("--case") if "--case" in sys.argv else len(sys.argv)
    main(*sys.argv[1:at], case_filter=tuple(sys.argv[at + 1 :]))
