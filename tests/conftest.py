"""Backend parametrization: every test taking ``xp`` runs on NumPy and on CuPy.

The CuPy run is skipped (reason printed in the header and in the skip summary) when
CuPy is not importable or no GPU device is usable (cupy_csrattn.backend.gpu_status).
Every GPU kernel launch in the tests checks its arguments' dtypes against the declared
signatures (cupy_csrattn.gpu.kernels.CHECK_ARGUMENT_DTYPES).
"""

import numpy as np
import pytest
from helpers import cupy_or_reason

from cupy_csrattn.gpu import kernels


def pytest_report_header(config):
    cupy, reason = cupy_or_reason()
    if cupy is None:
        return f"cupy_csrattn backends: numpy only; cupy tests skipped: {reason}"
    return f"cupy_csrattn backends: numpy and cupy {cupy.__version__}"


@pytest.fixture(scope="session", autouse=True)
def check_kernel_argument_dtypes():
    """Every kernel launch of the session checks its array arguments' dtypes."""
    previous = kernels.CHECK_ARGUMENT_DTYPES
    kernels.CHECK_ARGUMENT_DTYPES = True
    yield
    kernels.CHECK_ARGUMENT_DTYPES = previous


@pytest.fixture(scope="session", params=["numpy", "cupy"])
def xp(request):
    """The array module of the backend under test."""
    if request.param == "numpy":
        return np
    cupy, reason = cupy_or_reason()
    if cupy is None:
        pytest.skip(reason)
    return cupy
