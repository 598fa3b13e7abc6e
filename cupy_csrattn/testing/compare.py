"""One comparison and one tolerance table, for the tests and ``csrattn check`` alike."""

import numpy as np

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


def to_np(a):
    """A NumPy copy or view of a NumPy or CuPy array (None stays None)."""
    if a is None:
        return None
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def array_module_of(a):
    return "cupy" if type(a).__module__.startswith("cupy") else "numpy"


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


def assert_close(got, expected, dtype, *, equal_nan=False, err_msg="", scale=0.0, bound=None):
    """got ~ expected (float64) at the tolerance of dtype; AssertionError otherwise.

    atol = rtol * (max abs finite expected value, or 1 when that is 0) so near-zero
    sums are judged on the scale of the result. ``scale`` raises that floor when the
    whole array is a cancelling sum (e.g. GAT's grad_a_dst sums a softmax gradient over a
    row, exactly 0 up to rounding): pass the magnitude of the op's other outputs.
    ``bound`` (an array like expected, optional) is, per element, the sum of the magnitudes of
    the terms the element sums: a floating-point sum is accurate to rtol times that, not to
    rtol times its result, so where it exceeds the scale above it sets the element's floor.
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
    got = got.astype(np.float64)
    if bound is not None:
        # Dividing both sides by s >= 1 turns the absolute tolerance rtol * scale into
        # rtol * scale * s elementwise and leaves the relative one as it is.
        bound = np.asarray(bound, dtype=np.float64)
        s = np.maximum(1.0, np.where(np.isfinite(bound), bound, 0.0) / scale)
        got, expected = got / s, expected / s
        err_msg = f"{err_msg} (elements divided by their sums of term magnitudes over {scale:g}, where larger)"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale, equal_nan=equal_nan, err_msg=err_msg)


def check_result(xp, got, expected, dtype, *, equal_nan=False, err_msg="", scale=0.0, bound=None):
    """Result lives on xp's device, has exactly dtype, and is close to expected."""
    assert array_module_of(got) == xp.__name__, f"result is a {type(got)}, expected a {xp.__name__} array {err_msg}"
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype} != {np.dtype(dtype)} {err_msg}"
    assert_close(got, expected, got.dtype, equal_nan=equal_nan, err_msg=err_msg, scale=scale, bound=bound)
