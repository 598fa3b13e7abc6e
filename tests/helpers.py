"""pytest-specific helpers shared by the test files.

- hypothesis settings (``HYP``, ``HYP_FEW``),
- the CuPy backend probe (``cupy_or_reason``, through cupy_csrattn.backend.gpu_status) used
  by the ``xp`` fixture, and ``require_cupy``,
- NaN-poisoned outputs, buffer identity, the case table as pytest params,
- ``load_benchmark``: a script of benchmarks/ as a module.

Tolerances, comparisons, array moves and random data live in cupy_csrattn.testing.
"""

import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from cupy_csrattn import backend
from cupy_csrattn.testing.cases import cases
from cupy_csrattn.testing.compare import array_module_of

# -------------------------------------------------------------------- hypothesis

HYP = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HYP_FEW = settings(HYP, max_examples=12)


# -------------------------------------------------------------------- backends


def cupy_or_reason():
    """(cupy module, None) when a GPU is usable, else (None, why not): backend.gpu_status()."""
    usable, reason = backend.gpu_status()
    return (backend.cupy, None) if usable else (None, reason)


def require_cupy():
    cupy, reason = cupy_or_reason()
    if cupy is None:
        pytest.skip(reason)
    return cupy


def is_numpy(xp):
    return xp is np


def same_buffer(a, b):
    if array_module_of(a) == "cupy":
        return array_module_of(b) == "cupy" and a.data.ptr == b.data.ptr
    return isinstance(b, np.ndarray) and np.shares_memory(a, b)


def poison(xp, shape, dtype):
    """An output buffer full of NaN: an element the op forgets to write fails the check."""
    return xp.full(shape, np.nan, dtype=dtype)


# -------------------------------------------------------------------- case table


def case_params(*ops, where=None):
    """cupy_csrattn.testing.cases.cases(*ops, where=where) as pytest params named after the cases."""
    return [pytest.param(case, id=case.name) for case in cases(*ops, where=where)]


def load_benchmark(name):
    """The script benchmarks/<name>.py as a module (they import without CuPy)."""
    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
