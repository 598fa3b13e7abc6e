"""A local cluster of one Dask worker per GPU, for the NCCL exchange and the multi-GPU tests.

dask_cuda's LocalCUDACluster where it is installed; otherwise a SpecCluster whose nannies
start each worker process with ``CUDA_VISIBLE_DEVICES`` set to its own GPU (what dask_cuda
does, without its memory-spilling extras), so that each worker sees its GPU as device 0.
"""

import os

import distributed

# NCCL settings every worker keeps (NVLink multicast stays off, as on the machines it runs on).
_KEPT = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def gpu_count():
    """GPUs visible to this process (0 without CuPy or a driver)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: no GPU
        return 0


def gpu_cluster(n_gpus=None, *, threads_per_worker=1, use_dask_cuda=True):
    """A started local cluster of ``n_gpus`` workers (default: every visible GPU), worker i
    on GPU i. Close it (or use it as a context manager) when done."""
    available = gpu_count()
    n_gpus = available if n_gpus is None else n_gpus
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
    if n_gpus > available:
        raise ValueError(f"n_gpus={n_gpus} needs that many GPUs; {available} are visible here")
    if use_dask_cuda:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            pass
        else:
            return LocalCUDACluster(n_workers=n_gpus, threads_per_worker=threads_per_worker, dashboard_address=":0")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(i) for i in range(available)]
    kept = {name: os.environ[name] for name in _KEPT if name in os.environ}
    workers = {
        i: {
            "cls": distributed.Nanny,
            "options": {"nthreads": threads_per_worker, "env": {**kept, "CUDA_VISIBLE_DEVICES": devices[i]}},
        }
        for i in range(n_gpus)
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    return distributed.SpecCluster(scheduler=scheduler, workers=workers)
