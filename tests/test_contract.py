"""Every call form of every op (tests/cases.py) against the per-row loop reference, on
hypothesis-generated graphs and on the named graphs that break kernels."""
import numpy as np
import pytest
from hypothesis import given

from cases import case_params, check_case
from graphs import SMALL_GRAPH_NAMES, csr_graphs, features, float_dtypes, heads, named_graph, seeds
from helpers import HYP

ALL_CASES = case_params()


@pytest.mark.parametrize("case", ALL_CASES)
@given(graph=csr_graphs(), H=heads, F=features, dtype=float_dtypes, seed=seeds)
@HYP
def test_random_graphs(xp, api, case, graph, H, F, dtype, seed):
    check_case(xp, api, case, graph, H, F, dtype, seed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("H", [None, 1, 3])
@pytest.mark.parametrize("name", SMALL_GRAPH_NAMES)
@pytest.mark.parametrize("case", ALL_CASES)
def test_named_graphs(xp, api, case, name, H, dtype):
    check_case(xp, api, case, named_graph(name), H, 5, dtype, seed=1)
