"""Where an op runs, and moving arrays to that place.

NumPy inputs run on the CPU backend. Any CuPy input, or a graph that already lives on the
GPU, runs on the GPU backend. CuPy is optional: without it every op runs on the CPU.
"""
import functools
import importlib

import numpy as np

try:  # CuPy is an optional dependency.
    import cupy
except ImportError:  # pragma: no cover - depends on the environment
    cupy = None


def is_cupy_array(x):
    return cupy is not None and isinstance(x, cupy.ndarray)


_DLPACK_CUDA_DEVICES = (2, 13)  # kDLCUDA, kDLCUDAManaged


def as_array(name, x):
    """x as a NumPy or CuPy array, without a copy where the data allow.

    NumPy and CuPy arrays pass as they are. Objects on a CUDA device (exposing
    __cuda_array_interface__, or __dlpack__ with a CUDA __dlpack_device__: PyTorch, JAX,
    Numba arrays) become CuPy views of the same memory; other __dlpack__ objects become
    NumPy views; anything else goes through np.asarray.
    """
    if isinstance(x, np.ndarray) or is_cupy_array(x):
        return x
    on_cuda = hasattr(x, "__cuda_array_interface__") or (
        hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] in _DLPACK_CUDA_DEVICES)
    if on_cuda:
        if cupy is None:
            raise TypeError(f"{name} lives on a CUDA device, which needs CuPy; it is not installed")
        return cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
    try:
        return np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
    except Exception as error:
        raise TypeError(f"{name} must be an array, got {type(x).__name__}") from error


@functools.lru_cache(maxsize=None)
def gpu_available():
    """True when CuPy is installed and a CUDA device can be used (probed once per process)."""
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device
        return False


def uses_gpu(graph_device, arrays):
    """True when the op must run on the GPU: the graph is there or any input is CuPy."""
    return graph_device == "gpu" or any(is_cupy_array(a) for a in arrays)


def array_module(on_gpu):
    return cupy if on_gpu else np


def to_device(x, on_gpu):
    """x as an array of the computing device's library (no copy when already there)."""
    if x is None:
        return None
    if on_gpu:
        return cupy.asarray(x)
    if is_cupy_array(x):
        raise TypeError("internal: a CuPy array reached the CPU backend")
    return np.asarray(x)


_CPU_MODULES = {}
_GPU_MODULES = {}


def backend_function(op_name, impl_name, on_gpu, family):
    """The backend function `impl_name` of module `family` (softmax, spmm, sddmm, attention).

    The GPU module of a family may be missing or lack the function while its kernel is
    not written; then the op raises NotImplementedError naming the public op, never a
    silent host round trip.
    """
    cache = _GPU_MODULES if on_gpu else _CPU_MODULES
    package = "gpu" if on_gpu else "cpu"
    if family not in cache:
        try:
            cache[family] = importlib.import_module(f"cupy_csrattn.{package}.{family}")
        except ModuleNotFoundError as error:
            if not on_gpu or error.name != f"cupy_csrattn.{package}.{family}":
                raise
            cache[family] = None
    module = cache[family]
    function = getattr(module, impl_name, None) if module is not None else None
    if function is None:
        raise NotImplementedError(
            f"{op_name} has no GPU kernel yet; pass NumPy arrays and a CPU graph to run it on the CPU")
    return function


class Placement:
    """Moves one call's arrays to where it runs, in the canonical layout the backends take.

    Backends see edge arrays as (E, H), node features as (N, H, F) and per-node scalars as
    (N, H), all C-contiguous in one dtype, and write into outputs they are handed. For a
    CSC/COO matrix given as the graph, ``edge_order`` maps graph edges to the matrix's
    stored entries: edge inputs are gathered into graph order and edge outputs scattered back.
    """

    def __init__(self, graph, edge_order, arrays):
        self.on_gpu = uses_gpu(graph.device, [a for a in arrays if a is not None])
        if self.on_gpu and not gpu_available():
            raise RuntimeError("CuPy input needs a usable CUDA device, and none was found")
        self.graph = graph.to_gpu() if self.on_gpu else graph
        self.xp = array_module(self.on_gpu)
        self.edge_order = to_device(edge_order, self.on_gpu)
        self._scatter = []

    def node_input(self, x, dtype, heads, per_node_scalar=False):
        """(N, H, F) view or copy of a node array; (N, H) when per_node_scalar."""
        x = self.xp.ascontiguousarray(to_device(x, self.on_gpu).astype(dtype, copy=False))
        if heads is None:
            x = x.reshape(x.shape[0], 1, *x.shape[1:]) if not per_node_scalar else x.reshape(-1, 1)
        return x

    def edge_input(self, x, dtype):
        """(E, H) array in graph edge order."""
        x = to_device(x, self.on_gpu)
        if self.edge_order is not None:
            x = x[self.edge_order]
        x = self.xp.ascontiguousarray(x.astype(dtype, copy=False))
        return x.reshape(x.shape[0], 1) if x.ndim == 1 else x

    def output(self, name, out, shape, dtype, canonical_shape, edge=False):
        """(array handed to the backend, array returned to the caller)."""
        if out is not None:
            from cupy_csrattn._validate import out_array
            out_array(name, out, shape, dtype, self.on_gpu)
        if edge and self.edge_order is not None:
            result = out if out is not None else self.xp.empty(shape, dtype)
            work = self.xp.empty(canonical_shape, dtype)
            self._scatter.append((work, result))
            return work, result
        result = out if out is not None else self.xp.empty(shape, dtype)
        return result.reshape(canonical_shape), result

    def finish(self):
        """Scatter edge outputs back into the matrix's stored order."""
        for work, result in self._scatter:
            result.reshape(work.shape)[self.edge_order] = work
        self._scatter.clear()
