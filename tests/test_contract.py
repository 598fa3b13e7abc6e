"""Every call form of every op (cupy_csrattn.testing.cases) against the per-row loop
reference, on hypothesis-generated graphs and on the named graphs that break kernels; and
the op registry against the case table, the reference, the public names and the kernels."""

import signal

import numpy as np
import pytest
from helpers import HYP, case_params
from hypothesis import given
from strategies import csr_graphs, features, float_dtypes, heads, seeds

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.gpu import kernels
from cupy_csrattn.ops import registry
from cupy_csrattn.testing.cases import CASES, check_case
from cupy_csrattn.testing.graphs import SMALL_GRAPH_NAMES, named_graph

ALL_CASES = case_params()


@pytest.mark.parametrize("case", ALL_CASES)
@given(graph=csr_graphs(), H=heads, F=features, dtype=float_dtypes, seed=seeds)
@HYP
def test_random_graphs(xp, case, graph, H, F, dtype, seed):
    check_case(xp, case, graph, H, F, dtype, seed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("H", [None, 1, 3, (1, 3), (3, 4, 2)], ids=str)
@pytest.mark.parametrize("name", SMALL_GRAPH_NAMES)
@pytest.mark.parametrize("case", ALL_CASES)
def test_named_graphs(xp, case, name, H, dtype):
    check_case(xp, case, named_graph(name), H, 5, dtype, seed=1)


# Cases whose ops take a dot product over the feature axis: sddmm's, graph attention's
# scores, and every backward's <grad_out, values> terms.
FEATURE_DOT_CASES = case_params(
    "sddmm", "sddmm_backward", "spmm_backward", "attention_aggregate_backward",
    "graph_attention", "graph_attention_backward", "gat_attention_backward",
    "gatv2_attention", "gatv2_attention_backward",
)  # fmt: skip


@pytest.mark.parametrize("case", FEATURE_DOT_CASES)
def test_features_wider_than_a_dot_product_chunk(xp, case):
    """300 features: the CPU backend sums feature axes in chunks of 256 (cpu/edge_dots.py)."""
    check_case(xp, case, named_graph("warp_boundaries"), 2, 300, np.float64, seed=3)


@pytest.mark.parametrize("H, F", [(3, 0), ((2, 0), 4), ((0,), 4), ((0,), 1031), (None, 0)], ids=str)
@pytest.mark.parametrize("case", ALL_CASES)
def test_zero_sized_axes(xp, case, H, F):
    """No features, or a trailing shape of size 0: empty results of the right shapes, no
    division by the feature count (graph attention's default scale 1/sqrt(D)). No heads and
    1031 features: rows too wide for the head-span kernels, whose row kernels divided the warp
    by the head count (on the GPU, a division by zero and a launch that never ended)."""
    check_case(xp, case, named_graph("odd_sizes"), H, F, np.float64, seed=4)


def _alarm(signum, frame):
    raise TimeoutError("the call ran past its time limit")


def _run_within(seconds, case, graph, args, kwargs):
    """case.run(graph, args, kwargs), a TimeoutError once it runs past ``seconds``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return case.run(graph, args, kwargs)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs signal.SIGALRM")
@pytest.mark.parametrize("case", ALL_CASES)
def test_empty_arrays_of_many_heads_return_at_once(case):
    """Arrays of size 0 whose trailing shape is 2**40 heads (a graph without nodes): nothing to
    compute. The CPU backend's loops over the heads ran anyway (2**40 steps: a hang)."""
    graph = ca.CSRGraph(np.zeros(1, np.int64), np.zeros(0, np.int64), num_src=0)
    args, kwargs = case.make(np.random.default_rng(0), graph, (2**40,), 0, np.float64)
    results = _run_within(10, case, graph, args, kwargs)
    for result in results:
        assert result is None or (result.size == 0 and 2**40 in result.shape)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs signal.SIGALRM")
@pytest.mark.parametrize("case", ALL_CASES)
def test_a_graph_without_edges_of_many_heads_returns_at_once(case):
    """Nodes but no edges, 2**20 heads: every sum is empty (zero outputs, lse -inf), yet the
    CPU backend made one sparse product per head (about 20 s per gather-sum)."""
    heads = 2**20
    graph = ca.CSRGraph(np.zeros(4, np.int64), np.zeros(0, np.int64), num_src=2)
    args, kwargs = case.make(np.random.default_rng(0), graph, (1,), 1, np.float32)

    # One head repeated (the makers' references loop over the heads): the head axis is the
    # first of GATv2's att (1, D), the second of the node (3 or 2 rows) and edge (0 rows) arrays.
    def repeated(a):
        return np.repeat(a, heads, axis=0 if a.shape[0] == 1 else 1) if isinstance(a, np.ndarray) else a

    args, kwargs = tuple(map(repeated, args)), {key: repeated(value) for key, value in kwargs.items()}
    results = _run_within(10, case, graph, args, kwargs)
    for index, result in enumerate(results):
        if result is None or result.shape[0] == 0:  # edge arrays: empty
            continue
        assert heads in result.shape
        expected = -np.inf if index == case.lse_index else 0.0
        assert (result == expected).all(), f"output {index}"


# ------------------------------------------------------------------ the op registry


@pytest.mark.parametrize("name", list(registry.OPS))
def test_registered_op_has_cases_and_a_reference(name):
    assert any(case.op == name for case in CASES), f"op {name} has no case in testing.cases.CASES"
    assert callable(getattr(ref, name, None)), f"op {name} has no function in testing.reference"


def test_every_case_names_a_registered_op():
    unregistered = sorted({case.name for case in CASES if case.op not in registry.OPS})
    assert not unregistered, f"cases of unregistered ops: {unregistered}"


# Public names of cupy_csrattn that are not ops; every other name in __all__ is an op.
NOT_OPS = {"CSRGraph", "warmup"}


def test_registered_ops_are_exactly_the_public_ops():
    assert NOT_OPS <= set(ca.__all__)
    missing = sorted(set(registry.OPS) - set(ca.__all__))
    assert not missing, f"registered ops not exported in cupy_csrattn.__all__: {missing}"
    unregistered = sorted(set(ca.__all__) - NOT_OPS - set(registry.OPS))
    assert not unregistered, f"public ops not in the registry: {unregistered}"
    for name, op in registry.OPS.items():
        assert op.name == name and getattr(ca, name) is op.function, name
        assert op.forward is None or op.forward in registry.OPS, name


def test_kernel_families_are_the_declared_families():
    families = registry.kernel_families()
    assert len(families) == len(set(families))
    assert set(families) == set(kernels.FAMILIES)
