"""The CPU backend on graphs with few edges per head, in one or more checkouts.

Times spmm, graph_attention and graph_attention_backward (float32) on small graphs with
many heads, where a sparse product or a bincount per head costs more in calls than in work,
and on a 384-row graph of degree 18 with 8 heads, where the per-head products stay. Each
tree is timed in its own interpreter, the trees taking turns for ``--rounds`` rounds; a
case's figure is its best round (the median of 5 to 25 calls after a warm-up call).

    python3 benchmarks/cpu_heads.py [TREE ...] [--rounds 3] [--out results.json]

TREE: checkouts of the repository to compare (default: this one); ratios are to the first.
"""

import json
import sys
import time

import numpy as np

# name: (rows, degree, heads, features)
CASES = {
    "1 edge, H=20000 F=4": (1, 1, 20000, 4),
    "64 rows x 8, H=512 F=4": (64, 8, 512, 4),
    "384 rows x 18, H=8 F=16": (384, 18, 8, 16),
}
OPS = ("spmm", "graph_attention", "graph_attention_backward")


def case_calls(ca, rows, degree, heads, features):
    """{op: a function making one call} on the case's graph and arrays."""
    rng = np.random.default_rng(0)
    graph = ca.CSRGraph(np.arange(rows + 1) * degree, rng.integers(0, rows, rows * degree), rows)
    weights = rng.random((rows * degree, heads), dtype=np.float32)
    q, k, v, grad_out = (rng.standard_normal((rows, heads, features), dtype=np.float32) for _ in range(4))
    out, lse = ca.graph_attention(graph, q, k, v, return_lse=True)
    return {
        "spmm": lambda: ca.spmm(graph, weights, v),
        "graph_attention": lambda: ca.graph_attention(graph, q, k, v, return_lse=True),
        "graph_attention_backward": lambda: ca.graph_attention_backward(graph, q, k, v, out, grad_out, lse),
    }


def median_ms(call, least=5, most=25, seconds=1.0):
    """Median milliseconds of calls after a warm-up one: ``least`` calls, more (up to ``most``)
    while they take under ``seconds`` in all (this machine's speed drifts; more samples of the
    short cases steady their medians)."""
    call()
    samples = []
    while len(samples) < least or (len(samples) < most and sum(samples) < seconds):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e3


def time_tree(tree):
    """{"case: op": median ms} of the package in checkout ``tree``, this process."""
    sys.path.insert(0, tree)
    import cupy_csrattn as ca

    times = {}
    for name, case in CASES.items():
        calls = case_calls(ca, *case)
        times.update({f"{name}: {op}": median_ms(calls[op]) for op in OPS})
    return times


if __name__ == "__main__":
    if sys.argv[1:2] == ["--time-tree"]:  # a child: time one tree (before importing this checkout's package)
        print(json.dumps(time_tree(sys.argv[2])))
    else:
        from cupy_csrattn.bench import trees

        trees.main(__file__, __doc__, rounds=3, unit="ms", width=52, digits=3)
