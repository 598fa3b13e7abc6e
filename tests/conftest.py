"""Backend parametrization: every test taking ``xp`` runs on NumPy and on CuPy.

The CuPy run is skipped (reason printed in the header and in the skip summary) when
CuPy is not importable or no GPU device is usable.
"""
import numpy as np
import pytest

import cupy_csrattn
from helpers import cupy_or_reason


def pytest_report_header(config):
    cupy, reason = cupy_or_reason()
    if cupy is None:
        return f"cupy_csrattn backends: numpy only; cupy tests skipped: {reason}"
    return f"cupy_csrattn backends: numpy and cupy {cupy.__version__}"


@pytest.fixture(scope="session", params=["numpy", "cupy"])
def xp(request):
    """The array module of the backend under test."""
    if request.param == "numpy":
        return np
    cupy, reason = cupy_or_reason()
    if cupy is None:
        pytest.skip(reason)
    return cupy


@pytest.fixture(scope="session")
def api(xp):
    """The cupy_csrattn namespace, for tests run on backend ``xp`` (every op has both backends)."""
    return cupy_csrattn
