"""Time each kernel stage of the fused graph_attention on the head-span kernels (the forward,
the backward's pass over the rows, its pass over the sources) and the whole backward of
graph_attention and gat_attention, float32 (or DTYPE), on a uniform and an R-MAT graph of
16.7M edges.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/fused_stages.py OUT.json [DTYPE]
The stages are launched through the launcher's own helpers (gpu/attention.py: span_for,
run_span), the whole ops through the public API with replay of repeated calls off.
Medians of 10 event-timed calls after 2 untimed ones (bench.timing.time_gpu).
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

GRAPH_NAMES = ("uniform-1M", "rmat-20")  # graphs of compare_trees.GRAPHS


def measure(graph, graph_t, graph_name, H, F, dtype, rng):
    """One record: the stages of graph_attention and the whole fused ops at H heads of F."""

    def rand(*shape):
        return cupy.asarray(rng.standard_normal(shape).astype(dtype))

    q, k, v, grad_out = (
        rand(graph.num_dst, H, F),
        rand(graph.num_src, H, F),
        rand(graph.num_src, H, F),
        rand(graph.num_dst, H, F),
    )
    a_dst, a_src = rand(graph.num_dst, H), rand(graph.num_src, H)
    out, lse = ca.graph_attention(graph, q, k, v, return_lse=True)
    gat_out, gat_lse = ca.gat_attention(graph, a_dst, a_src, v, return_lse=True)
    row_dot = attention.row_dots(graph, grad_out, out)
    grad_q, grad_k, grad_v = cupy.empty_like(q), cupy.empty_like(k), cupy.empty_like(v)
    shape = attention.span_for("grad", q, k, v, grad_out)
    span = dict(score="dot", a=q, b=k, c=1 / np.sqrt(F), v=v)
    backward = dict(grad_out=grad_out, lse=lse, row_dot=row_dot)
    return dict(
        graph=graph_name,
        H=H,
        F=F,
        dtype=np.dtype(dtype).name,
        forward_ms=timed(lambda: attention.run_span("forward", shape, graph=graph, out1=out, lse_out=lse, **span)),
        rows_pass_ms=timed(
            lambda: attention.run_span("grad", shape, graph=graph, out1=grad_q, fwd_out=out, **backward, **span)
        ),
        sources_pass_ms=timed(
            lambda: attention.run_span("sources", shape, graph=graph_t, out1=grad_k, out2=grad_v, **backward, **span)
        ),
        graph_attention_backward_ms=timed(lambda: ca.graph_attention_backward(graph, q, k, v, out, grad_out, lse)),
        gat_attention_forward_ms=timed(lambda: ca.gat_attention(graph, a_dst, a_src, v)),
        gat_attention_backward_ms=timed(
            lambda: ca.gat_attention_backward(graph, a_dst, a_src, v, gat_out, grad_out, gat_lse)
        ),
    )


def main(out_path, dtype="float32"):
    replay.ENABLED = False
    rng = np.random.default_rng(0)
    records = []
    for name, (indptr, indices, num_src) in graphs(datasets, GRAPH_NAMES).items():
        graph = ca.CSRGraph(cupy.asarray(indptr), cupy.asarray(indices), num_src)
        graph_t, _ = graph.transpose()
        for H, F in ((8, 16), (4, 64)):
            records.append(measure(graph, graph_t, name, H, F, dtype, rng))
            print(json.dumps(records[-1]), flush=True)
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(out_path, "w") as file:
        json.dump(dict(gpu=gpu, records=records), file, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
