"""Timing: CUDA events on the GPU, ``time.perf_counter`` on the host, and the copy bandwidths
that make the memory roofline (read + write counted).

Importable without CuPy: the GPU functions need it only when called.
"""

import statistics
import time

import numpy as np

from cupy_csrattn.backend import cupy


def time_gpu(fn, repeat=20, warmup=3):
    """Median milliseconds of ``fn()`` over ``repeat`` calls, each timed by CUDA events.

    Parameters
    ----------
    fn : callable
        Enqueues the work on the current stream.
    repeat, warmup : int
        Timed calls, and untimed calls before them.

    Returns
    -------
    float
    """
    return time_gpu_in_turns([fn], repeat, warmup)[0]


def time_gpu_in_turns(fns, repeat=20, warmup=3):
    """time_gpu of each of ``fns``, their calls taking turns (one call of each, then again).

    A synced call on a small graph is mostly host time, and a machine's host speed drifts
    within a run: calls timed in turns see the same drift, so their ratio holds where
    functions timed one after the other would not.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    cupy.cuda.Device().synchronize()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, samples in zip(fns, times):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, stop))
    return [statistics.median(samples) for samples in times]


def time_host_call(fn, calls=32, batches=40):
    """Microseconds of host time per call: median over ``batches`` batches of ``calls`` calls,
    each batch issued with the GPU idle and timed until its last call returns.

    The sync between batches stays outside the timed window, and a batch is short enough
    (a few hundred launches) that the GPU's launch queue never fills: a call that takes
    longer on the GPU than on the host does not make the host wait, so this is the cost of
    issuing the call, not its GPU time.
    """
    return time_host_calls([fn], calls, batches)[0]


def time_host_calls(fns, calls=32, batches=40):
    """time_host_call of each of ``fns``, their batches taking turns (a batch of the first, of
    the second, ..., then again): a machine's host speed drifts within a run, and functions
    timed side by side see the same drift, so their ratio holds where times taken one after
    the other would not."""
    device = cupy.cuda.Device()
    times = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(batches):
        for fn, samples in zip(fns, times):
            device.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - start) / calls * 1e6)
    device.synchronize()
    return [statistics.median(samples) for samples in times]


def time_back_to_back(fn, repeat=200):
    """Microseconds per call, calls back to back, one sync at the end: the host's cost or the
    GPU's, whichever is larger."""
    fn()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / repeat * 1e6


def copy_bandwidth():
    """Bytes per second of a large device copy, counting read + write."""
    n = 1 << 29  # 2 GiB of float32
    src = cupy.random.random(n, dtype=np.float32)
    dst = cupy.empty_like(src)
    ms = time_gpu(lambda: cupy.copyto(dst, src), repeat=20)
    return 2 * src.nbytes / (ms * 1e-3)


def time_cpu(fn, repeat=5, warmup=1):
    """Median milliseconds of ``fn()`` over ``repeat`` calls timed with ``time.perf_counter``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_bandwidth_cpu(nbytes=256 << 20):
    """Bytes per second of a large host memory copy (``np.copyto``), counting read + write."""
    src = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    ms = time_cpu(lambda: np.copyto(dst, src), repeat=5)
    return 2 * src.nbytes / (ms * 1e-3)
