"""Test helpers shared by every test file.

- the CuPy backend probe (``cupy_or_reason``) used by the ``xp`` fixture,
- tolerances by dtype (``RTOL``) and ``assert_close`` / ``check_result``,
- array moves between backends, NaN-poisoned outputs, random data.
"""
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# -------------------------------------------------------------------- hypothesis

HYP = settings(max_examples=25, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HYP_FEW = settings(HYP, max_examples=12)


# -------------------------------------------------------------------- backends

@functools.lru_cache(maxsize=None)
def cupy_or_reason():
    """(cupy module, None) when a GPU is usable, else (None, why not)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return None, f"cupy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"no usable GPU: getDeviceCount() raised {type(exc).__name__}: {exc}"
    if count == 0:
        return None, "no usable GPU: getDeviceCount() == 0"
    try:
        cupy.zeros(1).sum().item()
    except Exception as exc:
        return None, f"no usable GPU: a tiny CuPy computation raised {type(exc).__name__}: {exc}"
    return cupy, None


def require_cupy():
    cupy, reason = cupy_or_reason()
    if cupy is None:
        pytest.skip(reason)
    return cupy


def is_numpy(xp):
    return xp is np


def to_xp(xp, a):
    """NumPy arrays (alone or in a tuple / dict) -> arrays of backend xp; all else as is."""
    if isinstance(a, tuple):
        return tuple(to_xp(xp, x) for x in a)
    if isinstance(a, dict):
        return {k: to_xp(xp, v) for k, v in a.items()}
    if isinstance(a, np.ndarray):
        return xp.asarray(a)
    return a


def to_np(a):
    if a is None:
        return None
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def array_module_of(a):
    return "cupy" if type(a).__module__.startswith("cupy") else "numpy"


def same_buffer(a, b):
    if array_module_of(a) == "cupy":
        return array_module_of(b) == "cupy" and a.data.ptr == b.data.ptr
    return isinstance(b, np.ndarray) and np.shares_memory(a, b)


def poison(xp, shape, dtype):
    """An output buffer full of NaN: an element the op forgets to write fails the check."""
    return xp.full(shape, np.nan, dtype=dtype)


def make_graph(xp, graph, kind="csrgraph"):
    """The graph argument in one of the accepted forms, on backend xp.

    kind: "csrgraph" (CSRGraph of xp arrays), "tuple3" (indptr, indices, num_src),
    "csr" (scipy.sparse / cupyx.scipy.sparse csr_matrix with data 1).
    """
    import cupy_csrattn

    indptr, indices, num_src = graph
    if kind == "csrgraph":
        return cupy_csrattn.CSRGraph(to_xp(xp, indptr), to_xp(xp, indices), num_src)
    if kind == "tuple3":
        return (to_xp(xp, indptr), to_xp(xp, indices), num_src)
    if kind == "csr":
        shape = (len(indptr) - 1, num_src)
        data = np.ones(len(indices))
        if is_numpy(xp):
            import scipy.sparse

            return scipy.sparse.csr_matrix((data, indices, indptr), shape=shape)
        import cupyx.scipy.sparse

        return cupyx.scipy.sparse.csr_matrix(
            (xp.asarray(data), xp.asarray(indices), xp.asarray(indptr)), shape=shape)
    raise AssertionError(f"unknown graph kind {kind}")


# -------------------------------------------------------------------- tolerances

# Relative tolerance by result dtype; never looser than 1e-5 for float32.
RTOL = {
    np.dtype(np.float64): 1e-10,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.float16): 1e-3,
}


def lse_dtype(result_dtype):
    """lse is float32 for float16 results, otherwise the result dtype (contract)."""
    result_dtype = np.dtype(result_dtype)
    return np.dtype(np.float32) if result_dtype == np.float16 else result_dtype


def magnitude(*arrays):
    """Largest finite absolute value over arrays (None entries ignored); 0 if none."""
    largest = 0.0
    for a in arrays:
        if a is None:
            continue
        a = np.abs(np.asarray(a, dtype=np.float64))
        finite = a[np.isfinite(a)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest


def assert_close(got, expected, dtype, *, equal_nan=False, err_msg="", scale=0.0):
    """got ~ expected (float64) at the tolerance of dtype.

    atol = rtol * (max abs finite expected value, or 1 when that is 0) so near-zero
    sums are judged on the scale of the result. ``scale`` raises that floor when the
    whole array is a cancelling sum (e.g. GAT's grad_a_dst sums a softmax gradient over a
    row, exactly 0 up to rounding): pass the magnitude of the op's other outputs.
    Infinities must match exactly. NaN passes only with equal_nan=True and only where
    expected is NaN too.
    """
    got = to_np(got)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, f"shape {got.shape} != expected {expected.shape} {err_msg}"
    if not equal_nan:
        assert not np.isnan(expected).any(), "test bug: NaN expected but equal_nan=False"
    rtol = RTOL[np.dtype(dtype)]
    scale = max(magnitude(expected), scale) or 1.0
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=rtol * scale,
                               equal_nan=equal_nan, err_msg=err_msg)


def check_result(xp, got, expected, dtype, *, equal_nan=False, err_msg="", scale=0.0):
    """Result lives on xp's device, has exactly dtype, and is close to expected."""
    assert array_module_of(got) == xp.__name__, (
        f"result is a {type(got)}, expected a {xp.__name__} array {err_msg}")
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype} != {np.dtype(dtype)} {err_msg}"
    assert_close(got, expected, got.dtype, equal_nan=equal_nan, err_msg=err_msg, scale=scale)


# -------------------------------------------------------------------- random data

def edge_array(rng, num_edges, H, dtype, scale=1.0):
    shape = (num_edges,) if H is None else (num_edges, H)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def node_vectors(rng, num_nodes, H, F, dtype, scale=1.0):
    shape = (num_nodes, F) if H is None else (num_nodes, H, F)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def node_scalars(rng, num_nodes, H, dtype, scale=1.0):
    shape = (num_nodes,) if H is None else (num_nodes, H)
    return (rng.standard_normal(shape) * scale).astype(dtype)
