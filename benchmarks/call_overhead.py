"""Host cost of one op call on a small cached graph, beside a bare cupy.RawKernel launch.

Run on a machine with a GPU, from the repository root:
    PYTHONPATH=. python3 benchmarks/call_overhead.py [results.json] [--profile]
For each case of compare_trees.cases on a 384-row graph whose plan exists, the case's op
called with its arguments bound (``op_call``: the case's own lookups are not the op's): host
time per call (the cost of issuing it: short batches of calls, each started with the GPU idle
and timed until its last call returns) beside the host time of a bare launch timed batch by
batch beside it (a machine's host speed drifts within a run) and, for the ops taking out=,
of the call writing its first result into an array it is given (``out_call``); time per call
back to back (calls issued back to back, one sync at the end: the host's cost or the GPU's,
whichever is larger), synced time per call (median of calls each followed by a sync), the
number of kernel launches a call makes, the same three times for one call captured in a CUDA
graph and launched, the host time per call where the caller holds each call's results for
HELD_CALLS calls (the record's replays then take its kept arenas in turns) and last (such
calls leave the arenas paused for the record's next calls) for HELD_LONG_CALLS calls, longer
than the arenas last (its replays then allocate their results anew; gpu/replay_results.py),
each beside a bare launch timed in turns with it. Beside the float32
edge_softmax, attention_aggregate and spmm cases, the host time of the simplest kernels' call
(cupy_csrattn.bench.simple_kernels: an output allocated, a RawKernel launched with its
arguments), the first design anyone writes. --profile prints where the host time of each case
goes (cProfile, top functions by own time).
"""

import collections
import cProfile
import inspect
import json
import pstats
import statistics
import sys
import time
from functools import partial

import cupy
import numpy as np
from compare_trees import _backward, _call, _forward, cases

import cupy_csrattn
import cupy_csrattn.datasets
from cupy_csrattn.bench import timing
from cupy_csrattn.bench.simple_kernels import SimpleKernels
from cupy_csrattn.gpu import kernels, replay, replay_results

BACK_TO_BACK, SYNCED = 2000, 200

EMPTY = cupy.RawKernel('extern "C" __global__ void empty_kernel(float* x, int n) {}', "empty_kernel")


def host_time(fn):
    """Host seconds to issue one call (the GPU's queue never fills)."""
    return timing.time_host_call(fn) * 1e-6


def back_to_back_time(fn):
    """Seconds per call issued back to back, one sync at the end."""
    return timing.time_back_to_back(fn, repeat=BACK_TO_BACK) * 1e-6


def synced_time(fn, calls=SYNCED):
    """Median wall seconds of a call followed by a device sync."""
    device = cupy.cuda.Device()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        device.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def op_call(case_call):
    """The op call that compare_trees' ``case_call`` makes, as a partial of the public op and
    its arguments: the case's own Python (looking the op up, keeping a forward's results) is
    not the op's cost. A backward takes the results its forward's case kept."""
    function, args = case_call.func, case_call.args  # partial flattens the case's partial into this one
    package, graph = case_call.keywords["package"], case_call.keywords["graph"]
    if function is _call:
        op, *arrays = args
        return partial(getattr(package, op), graph, *arrays)
    saved, op, *inputs_and_grad = args
    if function is _forward:
        return partial(getattr(package, op), graph, *inputs_and_grad[:-1], return_lse=True)
    assert function is _backward, function
    out, lse = saved[op, id(package)]
    return partial(getattr(package, op + "_backward"), graph, *inputs_and_grad[:-1], out, inputs_and_grad[-1], lse)


def out_call(call, empty_like=None):
    """``call`` (an op_call) writing its first result into an array it is given as out=, where
    its op takes one (a keyword-only ``out``): the path of a caller reusing its buffers. None
    for the other ops."""
    parameter = inspect.signature(call.func).parameters.get("out")
    if parameter is None or parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
        return None
    result = call()
    first = result[0] if isinstance(result, tuple) else result
    return partial(call, out=(empty_like or cupy.empty_like)(first))


# Calls a caller holds each result for: within a record's kept arenas (gpu/replay_results.py),
# which its replays then take in turns, and longer than they last, so that each allocates.
HELD_CALLS = 8
HELD_LONG_CALLS = replay_results.KEPT_ARENAS + 4


def holding(fn, count):
    """``fn`` whose results the caller holds for ``count`` calls."""
    held = collections.deque(maxlen=count)
    return lambda: held.append(fn())


def captured(fn):
    """A function launching one call of ``fn`` captured in a CUDA graph, on the current stream."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        fn()
        graph = stream.end_capture()
    return lambda: graph.launch()


def launches_per_call(fn):
    """Kernel launches of one call (made in full: a replayed call launches the same kernels);
    a launch of an empty grid launches nothing and is not counted."""
    count = [0]
    original = kernels.launch

    def counting(name, dtype, index_dtype, grid, **arguments):
        count[0] += grid[0] != 0
        return original(name, dtype, index_dtype, grid, **arguments)

    kernels.launch = counting
    replay.ENABLED = False
    try:
        for module in list(sys.modules.values()):
            if getattr(module, "launch", None) is original and module.__name__.startswith("cupy_csrattn.gpu."):
                module.launch = counting
        fn()
    finally:
        replay.ENABLED = True
        for module in list(sys.modules.values()):
            if getattr(module, "launch", None) is counting:
                module.launch = original
    return count[0]


def simple_call(simple, name, num_edges, num_src):
    """The simple kernel's call matching case ``name`` ("edge_softmax H=8 float32",
    "attention_aggregate H=1 F=64 float32", ...), or None for the other cases."""
    op, *shape, dtype = name.split()
    if dtype != "float32" or op not in ("edge_softmax", "attention_aggregate", "spmm"):
        return None
    sizes = dict(part.split("=") for part in shape)
    H, F = int(sizes["H"]), int(sizes.get("F", 1))
    scores = cupy.random.standard_normal((num_edges, H), dtype=np.float32)
    if op == "edge_softmax":
        return partial(simple.softmax, scores)
    values = cupy.random.standard_normal((num_src, H, F), dtype=np.float32)
    return partial(simple.aggregate if op == "attention_aggregate" else simple.spmm, scores, values)


def main(out_path=None, profile=False):
    g = cupy_csrattn.datasets.uniform_graph(384, 18, seed=1)
    graph = cupy_csrattn.CSRGraph(cupy.asarray(g.indptr), cupy.asarray(g.indices), g.num_src)
    x = cupy.zeros(16, cupy.float32)
    bare = partial(EMPTY, (1,), (32,), (x, np.int32(16)))
    bare_host, bare_back, bare_synced = host_time(bare), back_to_back_time(bare), synced_time(bare)
    print(
        f"bare RawKernel launch: host {bare_host * 1e6:6.2f} us, back to back {bare_back * 1e6:6.2f} us,"
        f" synced {bare_synced * 1e6:6.2f} us"
    )
    records = dict(
        bare_host_us=bare_host * 1e6, bare_back_to_back_us=bare_back * 1e6, bare_synced_us=bare_synced * 1e6, cases=[]
    )
    simple = SimpleKernels(g)
    for name, make in cases(np.random.default_rng(0), graph.num_edges, graph.num_dst, graph.num_src):
        case_call = partial(make(), package=cupy_csrattn, graph=graph)
        case_call()  # plan, transpose, compilation; a forward keeps its results for its backward case
        call = op_call(case_call)
        baseline = simple_call(simple, name, graph.num_edges, graph.num_src)
        given_out = out_call(call)
        # The bare launch again (the call with out=, the simple kernel's call), their batches
        # taking turns with the case's: a machine's host speed drifts within a run.
        timed = [bare, call] + [fn for fn in (given_out, baseline) if fn is not None]
        case_bare, host, *others = (us * 1e-6 for us in timing.time_host_calls(timed))
        out_host = others.pop(0) if given_out is not None else None
        simple_host = others[0] if baseline is not None else None
        back, synced, count = back_to_back_time(call), synced_time(call), launches_per_call(call)
        graph_launch = captured(call)
        graph_host, graph_back, graph_synced = (
            host_time(graph_launch),
            back_to_back_time(graph_launch),
            synced_time(graph_launch),
        )
        held_bare, held_host = (us * 1e-6 for us in timing.time_host_calls([bare, holding(call, HELD_CALLS)]))
        # Last: calls holding their results longer than the arenas last leave them paused for
        # the record's next calls.
        long_bare, long_host = (us * 1e-6 for us in timing.time_host_calls([bare, holding(call, HELD_LONG_CALLS)]))
        records["cases"].append(
            dict(
                case=name,
                host_us=host * 1e6,
                host_out_us=None if out_host is None else out_host * 1e6,
                host_results_held_us=held_host * 1e6,
                bare_host_beside_held_us=held_bare * 1e6,
                host_results_held_long_us=long_host * 1e6,
                bare_host_beside_held_long_us=long_bare * 1e6,
                bare_host_us=case_bare * 1e6,
                back_to_back_us=back * 1e6,
                synced_us=synced * 1e6,
                launches=count,
                cuda_graph_host_us=graph_host * 1e6,
                cuda_graph_back_to_back_us=graph_back * 1e6,
                cuda_graph_synced_us=graph_synced * 1e6,
                simple_kernel_host_us=None if simple_host is None else simple_host * 1e6,
            )
        )
        beside_simple = "" if simple_host is None else f"  simple kernel's call: host {simple_host * 1e6:6.2f} us"
        with_out = "" if out_host is None else f"; out= {out_host * 1e6:6.2f} us, {out_host / case_bare:4.2f}x"
        print(
            f"{name:<42} host {host * 1e6:6.2f} us ({host / case_bare:4.2f}x the bare launch timed beside it,"
            f" {case_bare * 1e6:5.2f} us{with_out};"
            f" results held {held_host * 1e6:6.2f} us, {held_host / held_bare:4.2f}x;"
            f" held longer {long_host * 1e6:6.2f} us, {long_host / long_bare:4.2f}x)"
            f"  back to back {back * 1e6:6.2f} us"
            f"  synced {synced * 1e6:6.2f} us  launches {count}  CUDA graph: host {graph_host * 1e6:6.2f} us,"
            f" back to back {graph_back * 1e6:6.2f} us, synced {graph_synced * 1e6:6.2f} us{beside_simple}",
            flush=True,
        )
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(200):
                call()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    records["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    if out_path:
        with open(out_path, "w") as file:
            json.dump(records, file, indent=1)


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--profile"]
    main(*arguments[:1], profile="--profile" in sys.argv)
