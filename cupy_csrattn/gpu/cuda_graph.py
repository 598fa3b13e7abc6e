"""A fixed sequence of kernel launches as one CUDA graph whose kernel arguments change from
launch to launch, through the CUDA driver API (ctypes): a replay (gpu/replay.py) issues a
call's kernels with one graph launch instead of one launch per kernel.

Each kernel's arguments live in 8-byte slots (a pointer, or a scalar in its low bytes) that
the caller writes (``argument_slots``). A launch hands each node whose slots changed since the
executable last took them its new slots (cuGraphExecKernelNodeSetParams copies them; the
change affects only later launches of the graph) and launches the graph on a stream: calls
that repeat their addresses (a memory pool handing back the same blocks) set no parameters.
CUDA orders a graph's launch after its previous launch, on any stream. The graph launch goes
through CuPy's runtime binding where there is one (a CUgraphExec is a cudaGraphExec_t), which
costs the host less than a call through ctypes.

``driver()`` is None where the CUDA driver library or one of its functions is missing; the
callers then launch kernel by kernel.
"""

import ctypes
import functools
import sys
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_ulonglong, c_void_p

import numpy as np

try:  # CuPy's binding of the runtime API (graphLaunch), where CuPy is installed
    from cupy_backends.cuda.api import runtime as _runtime
except ImportError:  # pragma: no cover - without CuPy nothing launches a graph
    _runtime = None

_SUCCESS = 0


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 of cuda.h."""

    _fields_ = [
        ("func", c_void_p),
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("kernelParams", c_void_p),
        ("extra", c_void_p),
        ("kern", c_void_p),
        ("ctx", c_void_p),
    ]


# name in libcuda -> (argument types), each returning a CUresult
_SIGNATURES = {
    "cuGraphCreate": (POINTER(c_void_p), c_uint),
    "cuGraphAddKernelNode_v2": (POINTER(c_void_p), c_void_p, POINTER(c_void_p), c_size_t, POINTER(KernelNodeParams)),
    "cuGraphInstantiateWithFlags": (POINTER(c_void_p), c_void_p, c_ulonglong),
    "cuGraphExecKernelNodeSetParams_v2": (c_void_p, c_void_p, POINTER(KernelNodeParams)),
    "cuGraphLaunch": (c_void_p, c_void_p),
    "cuGraphExecDestroy": (c_void_p,),
    "cuGraphDestroy": (c_void_p,),
}


@functools.cache
def driver():
    """The driver functions this module calls, by name without the cu prefix, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        library = ctypes.CDLL("libcuda.so.1")
        functions = {}
        for name, argtypes in _SIGNATURES.items():
            function = getattr(library, name)
            function.argtypes, function.restype = argtypes, c_int
            functions[name[2:].removesuffix("_v2")] = function
    except (OSError, AttributeError):
        return None
    if _runtime is not None:
        functions["GraphLaunch"] = _graph_launch
    return functions


def _graph_launch(executable, stream):
    """Launch ``executable`` (a c_void_p) on ``stream`` through CuPy's binding: _SUCCESS, or 1
    where the runtime refuses."""
    try:
        _runtime.graphLaunch(executable.value, stream)
    except _runtime.CUDARuntimeError:
        return 1
    return _SUCCESS


def slot_value(value):
    """The 8-byte argument slot holding NumPy scalar ``value`` (its bytes, zero-padded)."""
    return int(np.frombuffer(np.asarray(value).tobytes().ljust(8, b"\0"), np.uint64)[0])


class GraphError(RuntimeError):
    pass


def argument_slots(slots):
    """(values, pointers): a kernel's 8-byte argument slots holding ``slots`` and the array of
    their addresses that a launch (cuLaunchKernel, a kernel node) takes as its kernelParams."""
    values = (ctypes.c_uint64 * max(len(slots), 1))(*slots)
    pointers = (c_void_p * max(len(slots), 1))(*(ctypes.addressof(values) + 8 * i for i in range(len(slots))))
    return values, pointers


class KernelGraph:
    """Kernels launched in stages as one CUDA graph.

    ``launches``: (function, grid, block, (values, pointers), stage) per kernel, in launch
    order: the CUfunction handle, 3-tuples of grid and block sizes, the kernel's argument
    slots (``argument_slots``: the caller writes ``values`` before each ``launch``; the graph
    keeps them alive) and its stage, a number that does not decrease from launch to launch.
    Each kernel depends on every kernel of the stage before its own, so the kernels of one
    stage may run side by side and the stages run one after the other. Raises GraphError
    where the driver refuses the graph.
    """

    def __init__(self, functions, launches):
        self._driver = functions
        self.graph, self.executable = c_void_p(), c_void_p()
        self.arguments, self._params, self._nodes, self._pointers = [], [], [], []
        self._check(functions["GraphCreate"](byref(self.graph), 0))
        before, current, current_stage = [], [], None  # the nodes of the stage before, of this one
        for function, grid, block, (values, pointers), stage in launches:
            if stage != current_stage:
                before, current, current_stage = current, [], stage
            params = KernelNodeParams(function, *grid, *block, 0, ctypes.addressof(pointers), None, None, None)
            node = c_void_p()
            dependencies = (c_void_p * max(len(before), 1))(*(n.value for n in before))
            self._check(
                functions["GraphAddKernelNode"](byref(node), self.graph, dependencies, len(before), byref(params))
            )
            self.arguments.append(values)
            self._pointers.append(pointers)
            self._params.append(params)
            self._nodes.append(node)
            current.append(node)
        self._check(functions["GraphInstantiateWithFlags"](byref(self.executable), self.graph, 0))
        # The slots each node of the executable holds: instantiation copies the nodes' own.
        self._held = [bytes(values) for values in self.arguments]

    def _check(self, result):
        if result != _SUCCESS:
            raise GraphError(f"CUDA driver error {result} building a kernel graph")

    def launch(self, stream, arguments_written=True):
        """Give each node whose arguments changed its new ones and launch the graph on
        ``stream`` (a CUstream address); False, with nothing launched, where the driver refuses
        (the graph is then not to be launched again). ``arguments_written`` False: the caller
        knows no slot changed since the last launch, and none is compared."""
        set_params = self._driver["GraphExecKernelNodeSetParams"]
        executable, held = self.executable, self._held
        for index, values in enumerate(self.arguments if arguments_written else ()):
            now = bytes(values)
            if now != held[index]:
                if set_params(executable, self._nodes[index], byref(self._params[index])) != _SUCCESS:
                    return False
                held[index] = now
        return self._driver["GraphLaunch"](executable, stream) == _SUCCESS

    def __del__(self):
        try:
            if self.executable:
                self._driver["GraphExecDestroy"](self.executable)
            if self.graph:
                self._driver["GraphDestroy"](self.graph)
        except Exception:  # noqa: BLE001 - the driver may be gone at interpreter exit
            pass
