"""The Python share of a replayed op call's host time, measured without a GPU.

A replayed call (cupy_csrattn/gpu/replay.py) describes its arguments, finds its record,
allocates its outputs, writes their addresses into the kernels' argument slots and launches.
Here CuPy's arrays are real (cupy.ndarray over made-up addresses: CuPy builds them without a
device) while the driver and the memory pool are stood in for (a context check that passes,
launches and CUDA-graph calls that do nothing, an allocator handing out addresses; a record
of several kernels launches as a graph, as on a GPU), so the time is the library's Python
and CuPy's array headers, without cuLaunchKernel, the pool's bookkeeping and CuPy's stream
and device queries (benchmarks/call_overhead.py times the whole call on a GPU).

Each case is a record shaped like an op's of benchmarks/call_overhead.py on its 384-row
graph: its arrays in (an out= among them where the case gives one), its outputs and
scratch, its kernels and their argument lists. Each
tree is timed in its own interpreter, the trees taking turns for ``--rounds`` rounds; a
case's figure is its best round (microseconds per call, 20,000 calls a round).

    python3 benchmarks/replay_python_path.py [TREE ...] [--rounds 4] [--out results.json]

TREE: checkouts of the repository to compare (default: this one), named in the JSON as given;
the ratios are to the first.
"""

import json
import sys
import timeit
from types import SimpleNamespace

import numpy as np

CALLS = 20_000
N, E = 384, 6912  # the 384-row graph of call_overhead.py: uniform degree 18
# name: (op, inputs, returned outputs, scratch, kernels, keyword arguments); float32 arrays
CASES = {
    "edge_softmax H=8": ("edge_softmax", [(E, 8)], [(E, 8)], [], 1, {}),
    "attention_aggregate H=8 F=16": ("attention_aggregate", [(E, 8), (N, 8, 16)], [(N, 8, 16)], [], 1, {}),
    "graph_attention H=8 F=16, lse": (
        "graph_attention",
        [(N, 8, 16)] * 3,
        [(N, 8, 16), (N, 8)],
        [],
        1,
        {"return_lse": True},
    ),
    "graph_attention H=8 F=16, out=, lse": (
        "graph_attention",
        [(N, 8, 16)] * 3,
        [(N, 8)],
        [],
        1,
        {"out": (N, 8, 16), "return_lse": True},
    ),
    "graph_attention_backward H=8 F=16": (
        "graph_attention_backward",
        [(N, 8, 16)] * 5 + [(N, 8)],
        [(N, 8, 16)] * 3,
        [(E, 8)],
        2,
        {},
    ),
}


def stand_in_device(cupy, replay):
    """Make CuPy allocate made-up addresses and replay's driver calls do nothing."""
    from cupy.cuda import memory

    next_address = [1 << 30]

    def allocate(size):
        address = next_address[0]
        next_address[0] += -(-max(size, 1) // 512) * 512
        return memory.MemoryPointer(memory.UnownedMemory(address, size, None, device_id=0), 0)

    def handle(reference, *arguments):  # a driver call that creates something: its handle
        reference._obj.value = 1
        return 0

    def succeed(*arguments):
        return 0

    graph_functions = dict(GraphCreate=handle, GraphAddKernelNode=handle, GraphInstantiateWithFlags=handle)
    graph_functions.update(dict.fromkeys(("GraphExecKernelNodeSetParams", "GraphLaunch", "GraphExecDestroy"), succeed))
    graph_functions["GraphDestroy"] = succeed
    stream = SimpleNamespace(ptr=0, is_capturing=lambda: False)
    cupy.cuda.set_allocator(allocate)
    cupy.cuda.alloc = allocate
    cupy.cuda.get_current_stream = lambda: stream
    cupy.cuda.runtime.getDevice = lambda: 0
    replay._driver_api = SimpleNamespace(ctxGetCurrent=lambda: 1, launchKernel=lambda *arguments: None)
    replay.cuda_graph.driver = lambda: graph_functions  # records of several kernels launch as a CUDA graph


def recorded_call(package, cupy, name, inputs, outputs, scratch, kernels, kwargs):
    """A function making one replayed call of a record shaped as described."""
    from cupy_csrattn.gpu import replay

    try:
        from cupy_csrattn.gpu.recording import Recorder
    except ImportError:  # a tree from before gpu/recording.py
        Recorder = replay.Recorder
    graph = package.CSRGraph(np.array([0, 1, 2]), np.array([0, 1]), 2)
    graph_arrays = [cupy.ndarray((N + 1,), np.int32), cupy.ndarray((E,), np.int32)]

    def op(graph, *arguments, **keywords):
        raise AssertionError("a replayed call never takes the full path")

    op.__name__ = name
    public = replay.replayed(op)
    args = (graph, *(cupy.ndarray(shape, np.float32) for shape in inputs))
    kwargs = dict(kwargs)
    given_out = kwargs.get("out")
    if given_out is not None:  # the shape of an out= the call is given
        kwargs["out"] = given_out = cupy.ndarray(given_out, np.float32)
    key, arrays = replay._describe(op, args, kwargs)[:2]
    collected = Recorder()
    collected.allocations = [cupy.ndarray(shape, np.float32) for shape in outputs + scratch]
    scalars = (np.int32(8), np.float32(0.25), np.int64(N))
    for stage in range(1, kernels + 1):
        arguments = (*graph_arrays, *arrays, *collected.allocations, *scalars)
        collected.launches.append((SimpleNamespace(kernel=SimpleNamespace(ptr=1)), (N,), (128,), arguments, stage))
    result = (() if given_out is None else (given_out,)) + tuple(collected.allocations[: len(outputs)])
    # the index of out= among the arrays, for the trees whose records test it by address
    out_at = () if given_out is None or not hasattr(replay, "_out_overlaps") else (len(arrays) - 1,)
    record = replay.Replay(collected, arrays, result if len(result) > 1 else result[0], *out_at)
    replay._records(graph)[key] = record
    return lambda: public(*args, **kwargs)


def time_tree(tree):
    """{case: best microseconds per call} of the package in checkout ``tree``, this process."""
    sys.path.insert(0, tree)
    import cupy

    import cupy_csrattn
    from cupy_csrattn import backend
    from cupy_csrattn.gpu import replay

    backend.cupy = cupy
    stand_in_device(cupy, replay)
    calls = {name: recorded_call(cupy_csrattn, cupy, name.split()[0], *case[1:]) for name, case in CASES.items()}
    return {name: min(timeit.repeat(call, number=CALLS, repeat=3)) / CALLS * 1e6 for name, call in calls.items()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--time-tree"]:  # a child: time one tree (before importing this checkout's package)
        print(json.dumps(time_tree(sys.argv[2])))
    else:
        from cupy_csrattn.bench import trees

        trees.main(__file__, __doc__, rounds=4, unit="us", calls=CALLS)
