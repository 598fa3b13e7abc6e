"""Inputs from other array libraries: __dlpack__ and __cuda_array_interface__ objects are
taken without a copy, anything array-like through np.asarray; bfloat16 is refused clearly."""

import numpy as np
import pytest
from helpers import require_cupy

import cupy_csrattn as ca

INDPTR = np.array([0, 2, 2, 5], dtype=np.int32)
INDICES = np.array([0, 1, 1, 2, 0], dtype=np.int32)


class DLPackOnly:
    """Exposes an array through the DLPack protocol alone (as a CPU torch tensor would)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class CudaInterfaceOnly:
    """Exposes a CuPy array through __cuda_array_interface__ alone (as Numba or PyTorch do)."""

    def __init__(self, array):
        self.__cuda_array_interface__ = array.__cuda_array_interface__
        self._keep = array


def test_dlpack_inputs_are_not_copied():
    scores = np.random.default_rng(0).standard_normal(5)
    graph = ca.CSRGraph(DLPackOnly(INDPTR), DLPackOnly(INDICES), 3, copy=False)  # the graph copies by default
    assert np.shares_memory(graph.indices, INDICES)
    got = ca.edge_softmax(graph, DLPackOnly(scores))
    np.testing.assert_array_equal(got, ca.edge_softmax((INDPTR, INDICES, 3), scores))


def test_array_like_inputs():
    got = ca.spmm(([0, 1, 3], [1, 0, 1], 2), [0.5, 1.0, 2.0], [[1.0], [10.0]])
    np.testing.assert_allclose(got, [[5.0], [21.0]])


def test_bfloat16_is_a_clear_type_error():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    scores = np.zeros(5, dtype=ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="scores has dtype bfloat16"):
        ca.edge_softmax((INDPTR, INDICES, 3), scores)


def test_cuda_array_interface_inputs_are_not_copied():
    cupy = require_cupy()
    indices = cupy.asarray(INDICES)
    scores = cupy.asarray(np.random.default_rng(1).standard_normal((5, 2)))
    graph = ca.CSRGraph(CudaInterfaceOnly(cupy.asarray(INDPTR)), CudaInterfaceOnly(indices), 3, copy=False)
    assert graph.device == "gpu" and graph.indices.data.ptr == indices.data.ptr
    got = ca.edge_softmax(graph, CudaInterfaceOnly(scores))
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got), ca.edge_softmax((INDPTR, INDICES, 3), cupy.asnumpy(scores)))
