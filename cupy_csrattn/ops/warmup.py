"""warmup(): compile every kernel the registered ops launch, ahead of the first call."""

from cupy_csrattn import _validate, backend
from cupy_csrattn.gpu import kernels
from cupy_csrattn.ops import registry


def warmup(dtypes=None, index_dtypes=None):
    """Compile (or load from CuPy's disk cache) every kernel for the current device.

    Parameters
    ----------
    dtypes : dtype or iterable of dtypes, optional
        Data types to prepare, among float16, float32 and float64 (all by default).
    index_dtypes : dtype or iterable of dtypes, optional
        Index types to prepare, among int32 and int64 (both by default).

    Raises TypeError or ValueError for an argument that names no supported dtype (before
    anything is compiled), RuntimeError without CuPy or a usable CUDA device.
    """
    dtypes = _validate.dtype_list("dtypes", dtypes, kernels.DTYPE_CODES)
    index_dtypes = _validate.dtype_list("index_dtypes", index_dtypes, kernels.INDEX_TYPES)
    usable, reason = backend.gpu_status()
    if not usable:
        raise RuntimeError(f"warmup needs CuPy and a usable CUDA device: {reason}")
    for family in registry.kernel_families():
        kernels.compile_family(family, dtypes, index_dtypes)
