"""Devices: where the benchmarked ops run, how they are timed, what the roofline is.

A device has ``kind`` ("gpu" or "cpu"), ``name``, ``xp`` (its array module), ``repeat``,
and ``time(fn)``, ``time_host_call(fn)``, ``copy_bandwidth()``, ``random_state(seed)``,
``standard_normal(rs, shape)``, ``free()``, ``peak_extra_bytes(fn)`` and ``versions()``; a
GpuDevice also ``time_in_turns(fns)`` (the simple kernels' baselines run on the GPU only).
"""

import platform
import sys

import numpy as np
import scipy

from cupy_csrattn import backend
from cupy_csrattn.bench import timing


def cpu_name():
    """The CPU model name, best effort."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class GpuDevice:
    """The current CUDA device: CuPy arrays, CUDA-event timing, device copy bandwidth.

    Raises RuntimeError (with :func:`backend.gpu_status`'s reason) when no GPU is usable.
    """

    kind = "gpu"

    def __init__(self, repeat=20):
        usable, reason = backend.gpu_status()
        if not usable:
            raise RuntimeError(reason)
        cupy = backend.cupy
        self.xp = cupy
        self.repeat = repeat
        device = cupy.cuda.Device()
        self.name = cupy.cuda.runtime.getDeviceProperties(device.id)["name"].decode()

    def time(self, fn):
        return timing.time_gpu(fn, repeat=self.repeat)

    def time_in_turns(self, fns):
        return timing.time_gpu_in_turns(fns, repeat=self.repeat)

    @staticmethod
    def time_host_call(fn):
        return timing.time_host_call(fn)

    @staticmethod
    def copy_bandwidth():
        return timing.copy_bandwidth()

    def random_state(self, seed):
        return self.xp.random.RandomState(seed)

    def memory_bytes(self):
        """The device's total memory."""
        return self.xp.cuda.runtime.memGetInfo()[1]

    @staticmethod
    def standard_normal(rs, shape):
        return rs.standard_normal(shape, dtype=np.float32)

    def free(self):
        self.xp.get_default_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def peak_extra_bytes(self, fn):
        """Peak device memory that ``fn()`` allocates beyond what is allocated before it: CuPy's
        pool (through a memory hook) plus PyTorch's caching allocator when torch is in use."""
        torch = sys.modules.get("torch")
        torch_base = None
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            torch_base = torch.cuda.memory_allocated()
        hook = peak_memory_hook()
        with hook:
            fn()
            self.xp.cuda.Device().synchronize()
        extra = hook.peak
        if torch_base is not None:
            extra += torch.cuda.max_memory_allocated() - torch_base
        return extra

    def versions(self):
        return {"gpu": self.name, "cupy": self.xp.__version__}


def peak_memory_hook():
    """A CuPy memory hook that tracks the bytes held by allocations made while it is active."""

    class PeakHook(backend.cupy.cuda.MemoryHook):
        name = "csrattn_peak"

        def __init__(self):
            self.current = 0
            self.peak = 0

        def malloc_postprocess(self, **kwargs):
            self.current += kwargs["mem_size"]
            self.peak = max(self.peak, self.current)

        def free_postprocess(self, **kwargs):
            self.current -= kwargs["mem_size"]

    return PeakHook()


class CpuDevice:
    """The CPU backend: NumPy arrays, ``perf_counter`` timing, host copy bandwidth."""

    kind = "cpu"
    xp = np

    def __init__(self, repeat=5):
        self.repeat = repeat
        self.name = cpu_name()

    def time(self, fn):
        return timing.time_cpu(fn, repeat=self.repeat)

    @staticmethod
    def time_host_call(fn):
        return None

    @staticmethod
    def copy_bandwidth():
        return timing.copy_bandwidth_cpu()

    @staticmethod
    def random_state(seed):
        return np.random.default_rng(seed)

    @staticmethod
    def standard_normal(rs, shape):
        return rs.standard_normal(shape, dtype=np.float32)

    def free(self):
        pass

    @staticmethod
    def peak_extra_bytes(fn):
        return None  # not measured on the host

    def versions(self):
        return {"cpu": self.name, "numpy": np.__version__, "scipy": scipy.__version__}
