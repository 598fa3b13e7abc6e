"""Time the fused graph_attention and gat_attention, forward and backward (each call alone),
on the head-span kernels against the row kernels of aggregate.cuh that they replace, in one
process on the same graphs and inputs.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/fused_paths.py OUT.json
The kernels are chosen through cupy_csrattn.gpu.attention.SPAN_STAGES: "row" runs none of
the stages on the head-span kernels, "span" all of them, "span-sources-only" only the
backward's pass over the sources. Replay of repeated calls is turned off, so that each call
takes the kernels the switch names. Medians of 10 event-timed calls after 2 untimed ones (bench.timing.time_gpu).
"""

import json
import sys
from functools import partial

import cupy
import numpy as np
from compare_trees import graphs

import cupy_csrattn as ca
from cupy_csrattn import datasets
from cupy_csrattn.bench.timing import time_gpu
from cupy_csrattn.gpu import attention, replay

# The timing the committed results were taken with.
timed = partial(time_gpu, repeat=10, warmup=2)

GRAPH_NAMES = ("uniform-1M", "rmat-20", "dense-100k")  # graphs of compare_trees.GRAPHS
CONFIGS = {"row": set(), "span": {"forward", "grad", "sources"}, "span-sources-only": {"sources"}}


def measure(graph, graph_name, op, inputs, grad_out):
    """One record: forward and backward times of ``op`` under each configuration."""
    forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
    v = inputs[2]
    record = dict(graph=graph_name, op=op, H=v.shape[1], F=v.shape[2], dtype=v.dtype.name)
    for config, stages in CONFIGS.items():
        attention.SPAN_STAGES = stages
        out, lse = forward(graph, *inputs, return_lse=True)
        record[config + "_forward_ms"] = timed(lambda: forward(graph, *inputs, return_lse=True))
        record[config + "_backward_ms"] = timed(partial(backward, graph, *inputs, out, grad_out, lse))
    return record


def main(out_path):
    replay.ENABLED = False
    rng = np.random.default_rng(0)
    records = []
    for name, (indptr, indices, num_src) in graphs(datasets, GRAPH_NAMES).items():
        graph = ca.CSRGraph(cupy.asarray(indptr), cupy.asarray(indices), num_src)
        for dtype, H, F in ((np.float32, 8, 16), (np.float32, 4, 64), (np.float16, 8, 16)):
            q, k, v, grad_out = (
                cupy.asarray(rng.standard_normal((n, H, F)).astype(dtype))
                for n in (graph.num_dst, graph.num_src, graph.num_src, graph.num_dst)
            )
            a_dst, a_src = (
                cupy.asarray(rng.standard_normal((n, H)).astype(dtype)) for n in (graph.num_dst, graph.num_src)
            )
            for op, inputs in (("graph_attention", (q, k, v)), ("gat_attention", (a_dst, a_src, v))):
                records.append(measure(graph, name, op, inputs, grad_out))
                print(json.dumps(records[-1]), flush=True)
        del graph
        cupy.get_default_memory_pool().free_all_blocks()
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(out_path, "w") as file:
        json.dump(dict(gpu=gpu, records=records), file, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
