"""Where an op runs, the one GPU probe, moving arrays to that place, and the forms of
argument every module takes (as_array, flag).

NumPy inputs run on the CPU backend. Any CuPy input, or a graph that already lives on the
GPU, runs on the GPU backend. CuPy is optional: without it every op runs on the CPU.
"""

import functools
import os
import sys

import numpy as np

_cupy_import_error = None  # what an installed CuPy raised on import (the CPU backend serves then)
try:  # CuPy is an optional dependency.
    import cupy
except ImportError:  # pragma: no cover - depends on the environment
    cupy = None
except Exception as error:  # pragma: no cover - a broken installation or environment
    cupy, _cupy_import_error = None, error


def is_cupy_array(x):
    return cupy is not None and isinstance(x, cupy.ndarray)


def is_cupyx_sparse(x):
    """True for a cupyx.scipy.sparse matrix.

    Such a matrix exists only once its module is loaded, so an unloaded module means no,
    without paying for the import.
    """
    module = sys.modules.get("cupyx.scipy.sparse")
    return module is not None and module.issparse(x)


_DLPACK_CUDA_DEVICES = (2, 13)  # kDLCUDA, kDLCUDAManaged


def as_array(name, x):
    """x as a NumPy or CuPy array, without a copy where the data allow.

    NumPy and CuPy arrays pass as they are, except NumPy arrays of the other byte order (a
    FITS file's or a big-endian machine's data), which become native copies: the kernels, the
    dtype checks and a copy to the GPU (CuPy copies the bytes as they are) all read native
    values. Objects on a CUDA device (exposing __cuda_array_interface__, or __dlpack__ with a
    CUDA __dlpack_device__: PyTorch, JAX, Numba arrays) become CuPy views of the same memory;
    other __dlpack__ objects become NumPy views; anything else goes through np.asarray.
    """
    if isinstance(x, np.ma.MaskedArray):  # computed as an ndarray, its masked elements would count
        raise TypeError(f"{name} is a masked array, whose mask the ops would ignore; pass {name}.filled(value)")
    if isinstance(x, np.ndarray):
        array = x
    elif is_cupy_array(x):
        return x
    elif hasattr(x, "__cuda_array_interface__") or _dlpack_on_cuda(x):
        if cupy is None:
            raise TypeError(f"{name} lives on a CUDA device, which needs CuPy ({cupy_missing()})")
        return cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
    else:
        try:
            array = np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
        except Exception as error:
            raise TypeError(f"{name} must be an array, got {type(x).__name__}") from error
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _dlpack_on_cuda(x):
    """Whether x's __dlpack_device__ names a CUDA device; False where x has none, or where it
    raises or answers with something else than a (device type, id) pair."""
    try:
        return x.__dlpack_device__()[0] in _DLPACK_CUDA_DEVICES
    except Exception:
        return False


def flag(name, value):
    """``value`` as a bool: True or False (Python's or NumPy's), else a TypeError naming it.

    Truthiness is not enough: ``return_lse="no"`` or ``copy=[]`` is a mistake to report,
    not an answer to guess."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return bool(value)


def first_line(error):
    """The first line of an exception's message, with its type when the message is empty."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def cupy_missing():
    """Why CuPy is missing: not installed, or what an installed CuPy raised on import."""
    if _cupy_import_error is not None:
        error = _cupy_import_error
        return f"importing CuPy raised {type(error).__name__}: {first_line(error)}"
    return "CuPy is not installed"


@functools.lru_cache(maxsize=None)
def gpu_status():
    """(True, None) when CuPy is installed and a CUDA device works, else (False, why not).

    Probed once per process: the device count, then a tiny computation, so that a broken
    driver or an unusable device is reported here rather than in the first op.
    """
    if cupy is None:
        return False, cupy_missing()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver, no device
        return False, f"no usable GPU: getDeviceCount() raised {type(error).__name__}: {first_line(error)}"
    if count == 0:
        return False, "no usable GPU: CuPy finds no CUDA device"
    try:
        cupy.zeros(1).sum().item()  # host sync (once per process)
    except Exception as error:
        return False, f"no usable GPU: a tiny CuPy computation raised {type(error).__name__}: {first_line(error)}"
    return True, None


def gpu_available():
    """True when CuPy is installed and a CUDA device can be used (see gpu_status)."""
    return gpu_status()[0]


def uses_gpu(graph_device, arrays):
    """True when the op must run on the GPU: the graph is there or any input is CuPy."""
    return graph_device == "gpu" or any(is_cupy_array(a) for a in arrays)


def byte_bounds(x):
    """[first, last) bytes of a non-empty CuPy array x."""
    first = last = x.data.ptr
    for n, stride in zip(x.shape, x.strides):
        step = (n - 1) * stride
        if step > 0:
            last += step
        else:
            first += step
    return first, last + x.dtype.itemsize


def may_share_memory(a, b):
    """Whether arrays a and b (both NumPy or both CuPy) may overlap: their byte bounds do.
    CuPy arrays are compared by address whatever allocation holds them (cupy.may_share_memory
    calls arrays of two allocations apart, which two imports of one foreign buffer are)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    if a.size == 0 or b.size == 0:
        return False
    a_first, a_last = byte_bounds(a)
    b_first, b_last = byte_bounds(b)
    return a_first < b_last and b_first < a_last


def host_memory_bytes():
    """This machine's physical memory in bytes, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


@functools.cache
def _gpu_memory_bytes(device_id):
    """The total memory of GPU ``device_id`` (asked once: building a graph on the GPU checks it)."""
    return cupy.cuda.Device(device_id).mem_info[1]


def check_memory(what, nbytes, on_gpu):
    """Before arrays of ``nbytes`` in all are made: ValueError when that is more than an array
    can address, MemoryError when more than this machine's physical memory (on_gpu: the current
    GPU's), where an allocation may succeed and the process be killed when it is written, or
    the allocator's error name no argument; ``what`` names the sizes that asked for them."""
    if nbytes > np.iinfo(np.intp).max:
        raise ValueError(f"{what} needs {nbytes} bytes of arrays, more than an address space holds")
    if on_gpu:
        available, kind, holder = _gpu_memory_bytes(cupy.cuda.runtime.getDevice()), "GPU", "this GPU"
    else:
        available, kind, holder = host_memory_bytes(), "host", "this machine"
    if available is not None and nbytes > available:
        need, have = nbytes / 2**30, available / 2**30
        raise MemoryError(f"{what} needs at least {need:.1f} GiB of {kind} memory; {holder} has {have:.1f} GiB")


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


def accumulation_dtype(dtype):
    """The dtype both backends compute in: float32 for float16 and float32, float64 for float64."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)
