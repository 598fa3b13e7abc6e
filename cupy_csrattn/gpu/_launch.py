"""Launch helpers shared by the GPU launchers: grids, scalars, scratch buffers."""
import numpy as np

from cupy_csrattn import _dispatch, _kernels

BLOCK_WARPS = 8  # as in the .cu files
BLOCK_THREADS = BLOCK_WARPS * 32
NULL = np.uint64(0)  # a null pointer argument


def acc_dtype(dtype):
    """Accumulation dtype: float32 for float16 and float32, float64 for float64."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def warp_grid(num_warps):
    """Grid of BLOCK_WARPS-warp blocks covering num_warps warps (num_warps > 0)."""
    return ((num_warps + BLOCK_WARPS - 1) // BLOCK_WARPS,)


def launch(family, name, dtype, index_dtype, grid, args):
    """Launch a kernel on CuPy's current stream; skipped when the grid is empty."""
    if grid[0] == 0:
        return
    _kernels.kernel(family, name, dtype, index_dtype)(grid, (BLOCK_THREADS,), args)


def scratch(shape, dtype):
    return _dispatch.cupy.empty(shape, dtype)


def i32(value):
    return np.int32(value)


def i64(value):
    return np.int64(value)


def vector_width(features, *arrays):
    """Elements per vector load (4, 2 or 1) for rows of `features` elements of these arrays:
    the widest that divides the row and keeps every row start aligned for its load size."""
    for width in (4, 2):
        if features % width == 0 and all(a.data.ptr % min(16, width * a.dtype.itemsize) == 0 for a in arrays):
            return width
    return 1
