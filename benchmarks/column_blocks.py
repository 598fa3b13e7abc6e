"""The fused backwards with and without column blocks (gpu/column_blocks.py), beside the
forward and this library's unfused chain, float32, on graphs of compare_trees.GRAPHS
(default: the dense 100k-row graph and the uniform 1M-row graph).

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/column_blocks.py OUT.json [GRAPH ...]
Per graph, op (graph_attention, gat_attention) and shape (H=8 D=F=16, H=4 D=F=64): the
forward; the backward unblocked (COLUMN_BLOCKS = 0), as the library chooses (the blocks it
chose for the pass over the rows and the pass over the transpose) and in the blocks it would
choose on a device of slow memory (``blocks_any_device``, both passes); the unfused chain's
backward (its forward + backward less its forward); the largest relative difference of the
chosen backward's gradients to the unblocked ones. Replay off; medians of 10 event-timed
calls after 2 untimed ones (bench.timing.time_gpu).
"""

import json
import sys
from functools import partial

import cupy
import numpy as np
from compare_trees import graphs

import cupy_csrattn as ca
from cupy_csrattn import datasets
from cupy_csrattn.bench import baselines
from cupy_csrattn.bench.report import write_json
from cupy_csrattn.bench.timing import time_gpu
from cupy_csrattn.gpu import column_blocks, replay

timed = partial(time_gpu, repeat=10, warmup=2)


def cached_blocks(graph):
    """The block counts of the column blocks cached on graph (its ("column blocks", B) entries)."""
    return {key[1] for key in graph._cache if isinstance(key, tuple) and key[0] == "column blocks"}


def chosen_blocks(graph, run):
    """The block counts ``run()`` builds or uses on graph: each cached entry of the graph is
    dropped before and restored after, so that what the call caches is what it chose."""
    keys = [key for key in graph._cache if isinstance(key, tuple) and key[0] == "column blocks"]
    held = {key: graph._cache.pop(key) for key in keys}
    run()
    chosen = sorted(cached_blocks(graph))
    graph._cache.update(held)
    return chosen


def measure(graph, name, op, H, F, rng):
    def rand(*shape):
        return cupy.asarray(rng.standard_normal(shape, dtype=np.float32))

    n, s = graph.num_dst, graph.num_src
    if op == "graph_attention":
        x = (rand(n, H, F), rand(s, H, F), rand(s, H, F))
    else:
        x = (rand(n, H), rand(s, H), rand(s, H, F))
    forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
    out, lse = forward(graph, *x, return_lse=True)
    grad_out = rand(n, H, F)
    record = dict(graph=name, op=op, H=H, F=F, forward_ms=timed(lambda: forward(graph, *x)))
    column_blocks.COLUMN_BLOCKS = 0
    unblocked = backward(graph, *x, out, grad_out, lse)
    record["backward_unblocked_ms"] = timed(lambda: backward(graph, *x, out, grad_out, lse))
    column_blocks.COLUMN_BLOCKS = None
    graph_t = graph.transpose()[0]
    chosen = [chosen_blocks(g, lambda: backward(graph, *x, out, grad_out, lse)) for g in (graph, graph_t)]
    record["blocks_rows_pass"], record["blocks_sources_pass"] = chosen
    blocked = backward(graph, *x, out, grad_out, lse)
    record["backward_ms"] = timed(lambda: backward(graph, *x, out, grad_out, lse))
    # The blocks the rows pass would take on a device whose memory is slow beside its
    # multiprocessors (where this one's is not, the blocks it declines), for both passes.
    l2_bytes, _ = column_blocks.device_memory(cupy.cuda.runtime.getDevice())
    row_bytes = 4 * H * (F + (F if op == "graph_attention" else 1))
    column_blocks.COLUMN_BLOCKS = column_blocks.choose_blocks(n, s, graph.num_edges, row_bytes, l2_bytes, 0.0)
    record["blocks_any_device"] = column_blocks.COLUMN_BLOCKS
    record["backward_blocks_any_device_ms"] = timed(lambda: backward(graph, *x, out, grad_out, lse))
    column_blocks.COLUMN_BLOCKS = None
    record["max_relative_difference"] = max(
        float(cupy.abs(a - b).max() / max(float(cupy.abs(b).max()), 1e-30)) for a, b in zip(blocked, unblocked)
    )
    chain_forward = timed(lambda: baselines.unfused_forward(graph, op, x))
    chain_both = timed(lambda: baselines.unfused_forward_backward(graph, op, x, grad_out))
    record["unfused_backward_ms"] = chain_both - chain_forward
    return record


def main(out_path, *names):
    replay.ENABLED = False
    rng = np.random.default_rng(0)
    records = []
    for name, (indptr, indices, num_src) in graphs(datasets, names or ("dense-100k", "uniform-1M")).items():
        graph = ca.CSRGraph(cupy.asarray(indptr), cupy.asarray(indices), num_src)
        for H, F in ((4, 64), (8, 16)):
            for op in ("graph_attention", "gat_attention"):
                records.append(measure(graph, name, op, H, F, rng))
                print(json.dumps(records[-1]), flush=True)
                cupy.get_default_memory_pool().free_all_blocks()
    write_json(out_path, dict(gpu=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), records=records))


if __name__ == "__main__":
    main(*sys.argv[1:])
