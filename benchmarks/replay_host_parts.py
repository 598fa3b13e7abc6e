"""Where a replayed op call's host time goes, piece by piece, on a 384-row graph (one process).

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/replay_host_parts.py [--out results.json]

First the CuPy and driver calls a replay makes, each alone (a bare RawKernel launch, a
cuLaunchKernel through CuPy's driver binding, a pool allocation, an array header, ...). Then,
for a few ops whose record exists, the host time of: the whole call (``full``, its results
dropped at once, so that a replay takes their memory again); ``floor``, what a replay with new
memory must do (allocate its arrays, write their addresses into the argument slots, launch its
kernels or its CUDA graph); the call's description (``describe``, the record's
key); the record's call without the description and the lookup (``record_call``); and each part
of the floor alone. A bare launch is timed before each op (a machine's host speed drifts within
a run). Times are microseconds per call, each the median of 40 batches of 64 calls issued with
the GPU idle (bench.timing.time_host_call).
"""

import argparse
import ctypes
import json
from functools import partial

import cupy
import numpy as np
from cupy_backends.cuda.api import driver

import cupy_csrattn
import cupy_csrattn.datasets
from cupy_csrattn.bench.timing import time_host_call
from cupy_csrattn.gpu import cuda_graph, replay

EMPTY = cupy.RawKernel('extern "C" __global__ void empty_kernel(float* x, int n) {}', "empty_kernel")
H, F = 8, 16


def host(fn):
    return time_host_call(fn, calls=64, batches=40)


def primitives(stream_ptr, num_rows):
    """name -> fn: the CuPy and driver calls a replay makes, each alone."""
    x = cupy.zeros(16, cupy.float32)
    slots = cuda_graph.argument_slots([x.data.ptr, 16])
    function, stream = EMPTY.kernel.ptr, cupy.cuda.get_current_stream()
    block = cupy.cuda.alloc(1 << 20)

    params = ctypes.addressof(slots[1])

    def bare_launch_kernel():
        driver.launchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream_ptr, params, 0)

    bare_launch_kernel.slots = slots  # the memory params points into, alive while the function is

    return dict(
        bare_rawkernel=partial(EMPTY, (1,), (32,), (x, np.int32(16))),
        bare_launchKernel=bare_launch_kernel,
        get_current_stream=cupy.cuda.get_current_stream,
        is_capturing=stream.is_capturing,
        ctxGetCurrent=driver.ctxGetCurrent,
        getDevice=cupy.cuda.runtime.getDevice,
        ndarray_alloc=lambda: cupy.ndarray((num_rows, H, F), np.float32),
        alloc_block=lambda: cupy.cuda.alloc(num_rows * H * F * 4),
        ndarray_memptr=lambda: cupy.ndarray((num_rows, H, F), np.float32, block),
    )


def parts(record, public, args, kwargs, stream_ptr):
    """name -> fn: the call, its floor, and their parts (see the module's docstring)."""
    function = public.__wrapped__
    _, arrays, addresses = replay._describe(function, args, kwargs)[:3]
    held = record._layout.allocate(stream_ptr)  # the slots point here while the parts alone run
    where = addresses + held.addresses

    def writes():
        for values, position, index, offset in record._writes:
            values[position] = where[index] + offset

    def direct_launches():
        for head, params, _ in record._launches:
            driver.launchKernel(*head, stream_ptr, params, 0)

    def floor():  # with new memory, as where the caller holds the last call's results
        arena = record._layout.allocate(stream_ptr)
        call_where = addresses + arena.addresses
        for values, position, index, offset in record._writes:
            values[position] = call_where[index] + offset
        if record._graph is not None:
            record._graph.launch(stream_ptr)
        else:
            direct_launches()

    timed = dict(
        full=lambda: public(*args, **kwargs),
        floor=floor,
        describe=lambda: replay._describe(function, args, kwargs),
        record_call=lambda: record(arrays, addresses),
        allocate=lambda: record._layout.allocate(stream_ptr),
        writes=writes,
        direct_launches=direct_launches,
    )
    if record._graph is not None:
        timed["graph_launch"] = lambda: record._graph.launch(stream_ptr)
    return timed, held


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out")
    options = parser.parse_args()
    g = cupy_csrattn.datasets.uniform_graph(384, 18, seed=1)
    graph = cupy_csrattn.CSRGraph(cupy.asarray(g.indptr), cupy.asarray(g.indices), g.num_src)
    E, N = graph.num_edges, graph.num_dst
    stream_ptr = cupy.cuda.get_current_stream().ptr
    result = dict(gpu=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), primitives_us={}, ops={})
    prims = primitives(stream_ptr, N)
    for name, fn in prims.items():
        result["primitives_us"][name] = host(fn)
        print(f"{name:<22} {result['primitives_us'][name]:7.2f} us", flush=True)
    rng = cupy.random.RandomState(0)
    q, k, v, go = (rng.standard_normal((N, H, F), dtype=np.float32) for _ in range(4))
    a_dst, a_src = (rng.standard_normal((N, H), dtype=np.float32) for _ in range(2))
    scores = rng.standard_normal((E, H), dtype=np.float32)
    out, lse = cupy_csrattn.graph_attention(graph, q, k, v, return_lse=True)
    gat_out, gat_lse = cupy_csrattn.gat_attention(graph, a_dst, a_src, v, return_lse=True)
    calls = dict(
        edge_softmax=(cupy_csrattn.edge_softmax, (graph, scores), {}),
        attention_aggregate=(cupy_csrattn.attention_aggregate, (graph, scores, v), {}),
        graph_attention_lse=(cupy_csrattn.graph_attention, (graph, q, k, v), dict(return_lse=True)),
        graph_attention_backward=(cupy_csrattn.graph_attention_backward, (graph, q, k, v, out, go, lse), {}),
        gat_attention_backward=(
            cupy_csrattn.gat_attention_backward,
            (graph, a_dst, a_src, v, gat_out, go, gat_lse),
            {},
        ),
        attention_aggregate_backward=(cupy_csrattn.attention_aggregate_backward, (graph, scores, v, go), {}),
    )
    for name, (public, args, kwargs) in calls.items():
        for _ in range(3):  # the full call, the recorded one, a replay
            public(*args, **kwargs)
        key = replay._describe(public.__wrapped__, args, kwargs)[0]
        record = replay._records(graph)[key]
        timed, held = parts(record, public, args, kwargs, stream_ptr)
        entry = dict(
            launches=len(record._launches),
            cuda_graph=record._graph is not None,
            slot_writes=len(record._writes),
            blocks=[size for size, _ in record._layout.blocks],
            bare_rawkernel_us=host(prims["bare_rawkernel"]),
            us={},
        )
        for part, fn in timed.items():
            entry["us"][part] = host(fn)
        del held
        result["ops"][name] = entry
        print(
            f"{name}: bare launch {entry['bare_rawkernel_us']:.2f} us, "
            + ", ".join(f"{p} {us:.2f}" for p, us in entry["us"].items()),
            flush=True,
        )
    if options.out:
        with open(options.out, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
