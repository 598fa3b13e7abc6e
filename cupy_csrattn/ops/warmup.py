"""warmup(): compile every kernel the registered ops launch, ahead of the first call."""

from cupy_csrattn import backend
from cupy_csrattn.gpu import kernels
from cupy_csrattn.ops import registry


def warmup(dtypes=None, index_dtypes=None):
    """Compile (or load from CuPy's disk cache) every kernel for the current device.

    Parameters
    ----------
    dtypes : iterable of dtypes, optional
        Data types to prepare; all supported (float16, float32, float64) by default.
    index_dtypes : iterable of dtypes, optional
        Index types to prepare; int32 and int64 by default.
    """
    usable, reason = backend.gpu_status()
    if not usable:
        raise RuntimeError(f"warmup needs CuPy and a usable CUDA device: {reason}")
    for family in registry.kernel_families():
        kernels.compile_family(family, dtypes, index_dtypes)
