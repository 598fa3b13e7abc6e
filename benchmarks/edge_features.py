"""GPU benchmark of the fused attentions with edge data against PyG's message-passing core:
graph_attention with edge_feat against TransformerConv's (edge_attr added to the key and the
value), gat_attention with edge_score against GATConv's (the edge term added to the score),
forward and forward + backward, float32, H=8, D=F=16, on the uniform graph of 16.7M edges.

Run on a machine with a GPU and torch_geometric, from the repository root:
    PYTHONPATH=. python3 benchmarks/edge_features.py OUT.json
Times are medians of 10 event-timed, synchronized calls after two warm-up calls. Peak extra
memory: the device memory a call allocates beyond its inputs (CuPy's pool for this library,
torch's allocator for PyG), measured on one call after the timed ones.
"""

import json
import math
import sys
from functools import partial

import cupy
import numpy as np

import cupy_csrattn as ca
from cupy_csrattn import datasets
from cupy_csrattn.bench.baselines import GAT_SLOPE, load_pyg
from cupy_csrattn.bench.timing import time_gpu

H, D = 8, 16
timed = partial(time_gpu, repeat=10, warmup=2)


def cupy_peak(fn):
    """Bytes of device memory fn allocates at its peak beyond what is in use before (CuPy pool)."""
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    before = pool.used_bytes()
    result = fn()
    cupy.cuda.Device().synchronize()
    peak = pool.total_bytes() - before
    del result
    return peak


def torch_peak(torch, fn):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak


def pyg_functions(torch, softmax, rows, cols, num_dst):
    """TransformerConv's and GATConv's message passing with edge data, as PyG writes them."""

    def transformer(q, k, v, e):
        key = k[cols] + e
        alpha = softmax((q[rows] * key).sum(-1) / math.sqrt(D), rows, num_nodes=num_dst, dim=0)
        messages = (v[cols] + e) * alpha.unsqueeze(-1)
        return torch.zeros((num_dst, H, D), device="cuda").index_add_(0, rows, messages)

    def gat(a_dst, a_src, values, edge_score):
        z = a_dst[rows] + a_src[cols] + edge_score
        alpha = softmax(torch.nn.functional.leaky_relu(z, GAT_SLOPE), rows, num_nodes=num_dst, dim=0)
        messages = values[cols] * alpha.unsqueeze(-1)
        return torch.zeros((num_dst, H, D), device="cuda").index_add_(0, rows, messages)

    return {"graph_attention": transformer, "gat_attention": gat}


EDGE_KEYWORD = {"graph_attention": "edge_feat", "gat_attention": "edge_score"}


def measure_csrattn(graph, op, arrays, grad_out):
    forward, backward = getattr(ca, op), getattr(ca, op + "_backward")
    a, b, v, edge = arrays
    kw = {EDGE_KEYWORD[op]: edge}

    def fwd():
        return forward(graph, a, b, v, **kw)

    def fwd_bwd():
        out, lse = forward(graph, a, b, v, **kw, return_lse=True)
        return backward(graph, a, b, v, out, grad_out, lse, **kw)

    return [
        dict(op=op, method="csrattn", case=case, ms=timed(call), peak_extra_bytes=cupy_peak(call))
        for case, call in (("forward", fwd), ("forward+backward", fwd_bwd))
    ]


def measure_pyg(torch, fn, op, arrays, grad_out):
    tensors = [torch.from_dlpack(x).clone().requires_grad_(True) for x in arrays]
    t_grad_out = torch.from_dlpack(grad_out)

    def fwd():
        with torch.no_grad():
            return fn(*tensors)

    def fwd_bwd():
        return torch.autograd.grad(fn(*tensors), tensors, t_grad_out)

    return [
        dict(op=op, method="pyg", case=case, ms=timed(call), peak_extra_bytes=torch_peak(torch, call))
        for case, call in (("forward", fwd), ("forward+backward", fwd_bwd))
    ]


def main(out_path):
    g = datasets.uniform_graph(1 << 20, 16, seed=1)
    graph = ca.CSRGraph(cupy.asarray(g.indptr), cupy.asarray(g.indices), g.num_src)
    E, N = graph.num_edges, graph.num_dst
    rng = np.random.default_rng(0)

    def rand(*shape):
        return cupy.asarray(rng.standard_normal(shape).astype(np.float32))

    inputs = {
        "graph_attention": (rand(N, H, D), rand(N, H, D), rand(N, H, D), rand(E, H, D)),
        "gat_attention": (rand(N, H), rand(N, H), rand(N, H, D), rand(E, H)),
    }
    grad_out = rand(N, H, D)
    records = []
    for op, arrays in inputs.items():
        records += measure_csrattn(graph, op, arrays, grad_out)
    torch, pyg_utils = load_pyg()
    if torch is None:
        print("torch_geometric is not importable: PyG skipped", flush=True)
    else:
        rows = torch.as_tensor(np.repeat(np.arange(N), np.diff(np.asarray(g.indptr))), device="cuda")
        cols = torch.as_tensor(np.asarray(g.indices).astype(np.int64), device="cuda")
        functions = pyg_functions(torch, pyg_utils.softmax, rows, cols, N)
        for op, arrays in inputs.items():
            records += measure_pyg(torch, functions[op], op, arrays, grad_out)
    for record in records:
        print(json.dumps(record), flush=True)
    for op in inputs:
        for case in ("forward", "forward+backward"):
            ms = {r["method"]: r["ms"] for r in records if r["op"] == op and r["case"] == case}
            if "pyg" in ms:
                print(f"{op} {case}: {ms['pyg'] / ms['csrattn']:.2f}x faster than PyG", flush=True)
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(out_path, "w") as file:
        json.dump(dict(gpu=gpu, graph="uniform 1M rows, degree 8-24", H=H, D=D, records=records), file, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
