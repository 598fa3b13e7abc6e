"""Time the fused graph_attention, gat_attention and gatv2_attention, forward and backward
(each call alone), on the head-span kernels against the row kernels (aggregate.cuh, gatv2.cu)
that they replace, in one process on the same graphs and inputs.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/fused_paths.py OUT.json
The kernels are chosen through cupy_csrattn.gpu.attention.SPAN_STAGES and
SPAN_GROUP_STAGES: "row" runs none of the stages on the head-span kernels, "span" all of
them, "span-sources-only" only the backward's pass over the sources, "span-no-groups" all of
them without edge groups, "span-forward-no-groups" without edge groups in the forward.
Replay of repeated calls is turned off, so that each call takes the kernels the switches
name. Medians of 10 event-timed calls after 2 untimed ones (bench.timing.time_gpu).
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
ALL = {"forward", "grad", "sources"}
# config -> (SPAN_STAGES, SPAN_GROUP_STAGES)
CONFIGS = {
    "row": (set(), ALL),
    "span": (ALL, ALL),
    "span-sources-only": ({"sources"}, ALL),
    "span-no-groups": (ALL, set()),
    "span-forward-no-groups": (ALL, {"grad", "sources"}),
}


def measure(graph, graph_name, op, inputs, grad_out):
    """One record: forward and backward times of ``op`` under each configuration."""
    forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
    record = dict(graph=graph_name, op=op, H=grad_out.shape[1], F=grad_out.shape[2], dtype=grad_out.dtype.name)
    for config, (stages, group_stages) in CONFIGS.items():
        attention.SPAN_STAGES, attention.SPAN_GROUP_STAGES = stages, group_stages
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
            att = cupy.asarray(rng.standard_normal((H, F)).astype(dtype))
            ops = ("graph_attention", (q, k, v)), ("gat_attention", (a_dst, a_src, v)), ("gatv2_attention", (q, k, att))
            for op, inputs in ops:
                records.append(measure(graph, name, op, inputs, grad_out))
                print(json.dumps(records[-1]), flush=True)
        del graph
        cupy.get_default_memory_pool().free_all_blocks()
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(out_path, "w") as file:
        json.dump(dict(gpu=gpu, records=records), file, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
