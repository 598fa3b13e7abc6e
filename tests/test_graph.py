"""CSRGraph: construction, dtypes, from_scipy, from_edge_index, degrees, transpose, devices."""

import copy
import pickle
import re

import numpy as np
import pytest
from helpers import HYP, is_numpy, require_cupy, same_buffer
from hypothesis import given
from hypothesis import strategies as st
from strategies import csr_graphs, seeds

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn import backend
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.compare import array_module_of, check_result, to_np
from cupy_csrattn.testing.graphs import SMALL_GRAPH_NAMES, from_rows, named_graph, num_dst_of, row_of_edges

CSRGraph = ca.CSRGraph


def _device(xp):
    return "cpu" if is_numpy(xp) else "gpu"


def _assert_structure(xp, g, graph):
    assert g.device == _device(xp)
    assert array_module_of(g.indptr) == xp.__name__ and array_module_of(g.indices) == xp.__name__
    np.testing.assert_array_equal(to_np(g.indptr), graph.indptr)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)
    assert g.num_dst == num_dst_of(graph) and g.num_src == graph.num_src
    assert g.num_edges == len(graph.indices)
    assert tuple(g.shape) == (num_dst_of(graph), graph.num_src)
    for name in ("num_dst", "num_src", "num_edges"):
        assert isinstance(getattr(g, name), int), name


@pytest.mark.parametrize("name", SMALL_GRAPH_NAMES)
def test_attributes(xp, name):
    graph = named_graph(name)
    g = CSRGraph(to_xp(xp, graph.indptr), to_xp(xp, graph.indices), graph.num_src)
    _assert_structure(xp, g, graph)
    assert np.dtype(g.index_dtype) == graph.indices.dtype


@pytest.mark.parametrize("check", ["full", "fast", "none"])
def test_check_modes_accept_valid_graphs(xp, check):
    graph = named_graph("duplicates")
    g = CSRGraph(to_xp(xp, graph.indptr), to_xp(xp, graph.indices), graph.num_src, check=check)
    _assert_structure(xp, g, graph)


def test_check_none_trusts_the_caller(xp):
    """check="none" does not look at the values (an out-of-range index is not detected)."""
    g = CSRGraph(to_xp(xp, np.array([0, 2], np.int32)), to_xp(xp, np.array([0, 7], np.int32)), 3, check="none")
    assert g.num_edges == 2 and g.num_src == 3


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_right_arrays_are_not_copied_with_copy_false(xp, dtype):
    """copy=False keeps the caller's int32/int64 arrays (by default the graph copies them: issue 13)."""
    graph = named_graph("odd_sizes")
    indptr = to_xp(xp, graph.indptr.astype(dtype))
    indices = to_xp(xp, graph.indices.astype(dtype))
    g = CSRGraph(indptr, indices, graph.num_src, copy=False)
    assert np.dtype(g.index_dtype) == np.dtype(dtype)
    assert same_buffer(g.indptr, indptr) and same_buffer(g.indices, indices)


def test_what_a_cpu_graph_hands_out_is_read_only():
    """Its own arrays, row_of_edge and the transpose (graph and perm) are read-only NumPy
    arrays: writing into one would change later results (softmax by source reads the cached
    transpose), so it is an error instead. The caller's arrays (copy=False) keep their flags."""
    graph = named_graph("duplicates")
    g = CSRGraph(graph.indptr, graph.indices, graph.num_src)
    g_t, perm = g.transpose()
    edge_graph = CSRGraph.from_edge_index(graph.indices, row_of_edges(graph.indptr))[0]
    for array in (g.indptr, g.indices, g.row_of_edge(), g_t.indptr, g_t.indices, perm, edge_graph.indptr):
        with pytest.raises(ValueError, match="read-only"):
            array[:1] = 0
    indptr, indices = graph.indptr.copy(), graph.indices.copy()
    shared = CSRGraph(indptr, indices, graph.num_src, copy=False)
    assert shared.indptr is indptr and indptr.flags.writeable and indices.flags.writeable


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_carry_the_arrays_not_the_caches(xp, how):
    """A used graph's copy (copy.deepcopy, pickle) holds its arrays, read-only on the CPU,
    and none of its caches (plans, transpose, replay records: rebuilt on use, and possibly
    filled meanwhile by another thread): the same size as a fresh graph's, the same results."""
    graph = named_graph("duplicates")
    g = make_graph(xp, graph)
    scores = to_xp(xp, np.random.default_rng(1).standard_normal((len(graph.indices), 2)))
    fresh = len(pickle.dumps(g))
    expected = [to_np(ca.edge_softmax(g, scores, norm_by=norm_by)) for norm_by in ("dst", "src")]
    assert len(pickle.dumps(g)) == fresh  # the used graph pickles as small as the fresh one
    twin = copy.deepcopy(g) if how == "deepcopy" else pickle.loads(pickle.dumps(g))
    assert (twin.num_dst, twin.num_src, twin.device) == (g.num_dst, g.num_src, g.device)
    assert np.array_equal(to_np(twin.indptr), graph.indptr) and np.array_equal(to_np(twin.indices), graph.indices)
    if is_numpy(xp):
        for array in (twin.indptr, twin.indices):
            with pytest.raises(ValueError, match="read-only"):
                array[:1] = 0
    for norm_by, want in zip(("dst", "src"), expected):
        np.testing.assert_array_equal(to_np(ca.edge_softmax(twin, scores, norm_by=norm_by)), want)


def test_a_shallow_copy_leaves_shared_arrays_writeable():
    """copy.copy of a graph that shares the caller's arrays (copy=False, or from_scipy's CSR
    matrix) made those arrays read-only: the caller's arrays, and the matrix's, changed."""
    import scipy.sparse

    indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    matrix = scipy.sparse.csr_matrix(np.eye(3))
    for g in (CSRGraph(indptr, indices, copy=False), CSRGraph.from_scipy(matrix, copy=False)):
        twin = copy.copy(g)
        assert twin.indptr is g.indptr and twin.indices is g.indices and twin.shape == g.shape
        assert twin._cache == {} and twin._cache is not g._cache
    assert indptr.flags.writeable and indices.flags.writeable
    assert matrix.indptr.flags.writeable and matrix.indices.flags.writeable
    own = CSRGraph(indptr, indices)  # its own arrays stay read-only in a copy
    assert not copy.copy(own).indptr.flags.writeable


@pytest.mark.parametrize("empty", [[], ()])
def test_empty_lists_are_index_arrays(empty):
    """np.asarray([]) is float64; an empty list of indices or edges is still a graph."""
    g = CSRGraph([0, 0], empty, 3)
    assert g.num_edges == 0 and g.shape == (1, 3) and g.index_dtype == np.int32
    g, perm = CSRGraph.from_edge_index(empty, empty, num_dst=2)
    assert g.num_edges == 0 and g.shape == (2, 0) and len(perm) == 0


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64])
def test_narrow_or_unsigned_indices_are_converted(xp, dtype):
    graph = named_graph("unsorted_columns")
    g = CSRGraph(to_xp(xp, graph.indptr.astype(dtype)), to_xp(xp, graph.indices.astype(dtype)), graph.num_src)
    assert np.dtype(g.index_dtype) in (np.dtype(np.int32), np.dtype(np.int64))
    assert g.indices.dtype == g.index_dtype
    assert g.indptr.dtype in (np.dtype(np.int32), np.dtype(np.int64))
    np.testing.assert_array_equal(to_np(g.indptr), graph.indptr)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)
    # and the converted graph computes correctly
    scores = np.random.default_rng(0).standard_normal(len(graph.indices))
    got = ca.edge_softmax(g, to_xp(xp, scores))
    check_result(xp, got, ref.edge_softmax(graph.indptr, scores)[0], np.float64)


def test_mixed_index_dtypes(xp):
    graph = named_graph("zero_degree_rows")
    g = CSRGraph(to_xp(xp, graph.indptr.astype(np.int64)), to_xp(xp, graph.indices.astype(np.int32)), graph.num_src)
    np.testing.assert_array_equal(to_np(g.indptr), graph.indptr)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)


def test_default_num_src_covers_every_index(xp):
    graph = from_rows([[4, 1], [], [0, 2, 4]], num_src=5)
    g = CSRGraph(to_xp(xp, graph.indptr), to_xp(xp, graph.indices))
    assert g.num_src == 5 and g.num_dst == 3  # the largest index + 1


@pytest.mark.parametrize("name", SMALL_GRAPH_NAMES + ["hub"])
def test_degrees(xp, name):
    graph = named_graph(name)
    degrees = make_graph(xp, graph).degrees()
    assert array_module_of(degrees) == xp.__name__
    assert np.issubdtype(degrees.dtype, np.integer)
    np.testing.assert_array_equal(to_np(degrees), np.diff(graph.indptr))


# ------------------------------------------------------------------ from_edge_index


@st.composite
def edge_lists(draw):
    num_dst = draw(st.integers(1, 10))
    num_src = draw(st.integers(1, 10))
    E = draw(st.integers(0, 40))
    dst = draw(st.lists(st.integers(0, num_dst - 1), min_size=E, max_size=E))
    src = draw(st.lists(st.integers(0, num_src - 1), min_size=E, max_size=E))
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    return np.array(src, dtype), np.array(dst, dtype), num_dst, num_src


@given(edges=edge_lists())
@HYP
def test_from_edge_index(xp, edges):
    src, dst, num_dst, num_src = edges
    g, perm = CSRGraph.from_edge_index(to_xp(xp, src), to_xp(xp, dst), num_dst, num_src)
    assert g.device == _device(xp) and array_module_of(perm) == xp.__name__
    perm = to_np(perm)
    np.testing.assert_array_equal(perm, np.argsort(dst, kind="stable"))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=num_dst))])
    np.testing.assert_array_equal(to_np(g.indptr), indptr)
    np.testing.assert_array_equal(to_np(g.indices), src[perm])
    assert (g.num_dst, g.num_src, g.num_edges) == (num_dst, num_src, len(src))


def test_from_edge_index_stable_order(xp):
    dst = np.array([2, 0, 2, 1, 0, 2])
    src = np.array([5, 1, 3, 0, 4, 5])
    g, perm = CSRGraph.from_edge_index(to_xp(xp, src), to_xp(xp, dst))
    np.testing.assert_array_equal(to_np(perm), [1, 4, 3, 0, 2, 5])
    np.testing.assert_array_equal(to_np(g.indptr), [0, 2, 3, 6])
    np.testing.assert_array_equal(to_np(g.indices), [1, 4, 0, 5, 3, 5])
    assert g.num_dst == 3 and g.num_src == 6
    g, _ = CSRGraph.from_edge_index(to_xp(xp, np.array([1, 0])), to_xp(xp, np.array([4, 2])))
    assert g.shape == (5, 2)  # each side's largest id + 1, not one count for both


def test_from_edge_index_larger_num_dst(xp):
    g, _ = CSRGraph.from_edge_index(to_xp(xp, np.array([0, 1])), to_xp(xp, np.array([1, 1])), num_dst=4, num_src=3)
    np.testing.assert_array_equal(to_np(g.indptr), [0, 0, 2, 2, 2])
    assert g.shape == (4, 3)


# ------------------------------------------------------------------ from_scipy


def _sparse_namespace(xp, cls):
    if is_numpy(xp):
        import scipy.sparse

        return scipy.sparse
    if cls == "array":
        pytest.skip("cupyx.scipy.sparse has no sparse array classes")
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


@pytest.mark.parametrize("cls", ["matrix", "array"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy(xp, fmt, cls):
    sparse = _sparse_namespace(xp, cls)
    rows = np.array([2, 0, 2, 3, 0, 2, 3], np.int32)  # duplicates (2, 1) and unsorted
    cols = np.array([1, 3, 1, 0, 2, 4, 0], np.int32)
    data = np.arange(1.0, 8.0)
    coo = getattr(sparse, f"coo_{cls}")((to_xp(xp, data), (to_xp(xp, rows), to_xp(xp, cols))), shape=(5, 6))
    A = coo if fmt == "coo" else getattr(coo, f"to{fmt}")()
    g = CSRGraph.from_scipy(A)
    assert g.device == _device(xp)
    assert tuple(g.shape) == (5, 6) and g.num_dst == 5 and g.num_src == 6
    # the multiset of (row, col) edges is A's stored entries
    dense = np.zeros((5, 6), int)
    np.add.at(dense, (row_of_edges(to_np(g.indptr)), to_np(g.indices).astype(np.int64)), 1)
    if fmt == "coo":
        want = np.zeros((5, 6), int)
        np.add.at(want, (rows, cols), 1)
        assert g.num_edges == len(rows)
    else:
        rows_a, cols_a = (
            (row_of_edges(to_np(A.indptr)), to_np(A.indices))
            if fmt == "csr"
            else (to_np(A.indices), row_of_edges(to_np(A.indptr)))
        )
        want = np.zeros((5, 6), int)
        np.add.at(want, (rows_a.astype(np.int64), cols_a.astype(np.int64)), 1)
        assert g.num_edges == A.nnz
    np.testing.assert_array_equal(dense, want)
    if fmt == "csr":  # CSR is taken as is
        np.testing.assert_array_equal(to_np(g.indptr), to_np(A.indptr))
        np.testing.assert_array_equal(to_np(g.indices), to_np(A.indices))


def test_from_scipy_keeps_duplicates_and_order(xp):
    sparse = _sparse_namespace(xp, "matrix")
    graph = named_graph("duplicates")
    A = sparse.csr_matrix(
        (to_xp(xp, np.ones(len(graph.indices))), to_xp(xp, graph.indices), to_xp(xp, graph.indptr)),
        shape=(num_dst_of(graph), graph.num_src),
    )
    g = CSRGraph.from_scipy(A)
    _assert_structure(xp, g, graph)


# ------------------------------------------------------------------ transpose


@given(graph=csr_graphs(hub_degrees=None))
@HYP
def test_transpose(xp, graph):
    g = make_graph(xp, graph)
    gt, perm = g.transpose()
    assert gt.device == g.device and array_module_of(perm) == xp.__name__
    assert gt.num_dst == graph.num_src and gt.num_src == num_dst_of(graph)
    assert gt.num_edges == len(graph.indices)
    perm = to_np(perm).astype(np.int64)
    np.testing.assert_array_equal(np.sort(perm), np.arange(len(graph.indices)))
    t_indptr = to_np(gt.indptr)
    assert t_indptr[0] == 0 and t_indptr[-1] == len(graph.indices)
    assert (np.diff(t_indptr) >= 0).all()
    # edge e of the transpose is edge perm[e] of the graph, reversed
    rows = row_of_edges(graph.indptr)
    np.testing.assert_array_equal(row_of_edges(t_indptr), graph.indices[perm])
    np.testing.assert_array_equal(to_np(gt.indices), rows[perm])


@given(graph=csr_graphs(hub_degrees=None), seed=seeds)
@HYP
def test_transpose_spmm_is_the_adjoint(xp, graph, seed):
    """spmm over the transpose with weights[perm] computes A^T y (the spmm backward's grad_values)."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal(len(graph.indices))
    y = rng.standard_normal((num_dst_of(graph), 3))
    g = make_graph(xp, graph)
    gt, perm = g.transpose()
    got = ca.spmm(gt, to_xp(xp, weights[to_np(perm)]), to_xp(xp, y))
    expected = ref.spmm_backward(graph.indptr, graph.indices, weights, np.zeros((graph.num_src, 3)), y)[1]
    check_result(xp, got, expected, np.float64)


@pytest.mark.parametrize("num_src, error", [(2**62, ValueError), (10**15, MemoryError)])
def test_a_transpose_beyond_memory_names_num_src(xp, monkeypatch, num_src, error):
    """The transpose needs an indptr of num_src + 1 entries (norm_by="src" that and its state
    per source, test_defects): where that cannot fit (an address space; this machine's or the
    GPU's memory), the error names num_src before anything is allocated, and the graph is
    unchanged."""
    g = ca.CSRGraph(xp.asarray([0, 1, 1]), xp.asarray([0]), num_src=num_src)
    with pytest.raises(error, match=f"the transpose of a graph of num_src={num_src} needs"):
        g.transpose()
    with pytest.raises(error, match=rf"normalizing by source \(num_src={num_src} source nodes, H=2\) needs"):
        ca.edge_softmax(g, xp.ones((1, 2), xp.float32), norm_by="src")
    assert "transpose" not in g._cache and g.num_src == num_src


@pytest.mark.parametrize("how", ["from_edge_index", "from_scipy"])
def test_a_num_dst_beyond_memory_is_named_before_allocating(xp, monkeypatch, how):
    """from_edge_index makes an indptr and bincount's counts of num_dst (+ 1) entries each: a
    num_dst given that large raised NumPy's MemoryError naming no argument (8 TiB), or one
    just under this machine's memory got the process killed. It is named now, before anything
    of that size is allocated, as a COO matrix's shape[0] is."""
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 2**30)
    count = 2**40
    if how == "from_edge_index":
        call = lambda: CSRGraph.from_edge_index(xp.asarray([0]), xp.asarray([0]), num_dst=count)
        name = "num_dst"
    else:
        sparse = _sparse_namespace(xp, "matrix")
        matrix = sparse.coo_matrix((xp.ones(1), (xp.asarray([0]), xp.asarray([0]))), shape=(count, 1))
        call = lambda: CSRGraph.from_scipy(matrix)
        name = "matrix.shape[0]"
    with pytest.raises(MemoryError, match=rf"^a graph of {re.escape(name)}={count} needs at least .* GiB of .* memory"):
        call()


# ------------------------------------------------------------------ devices


def test_to_cpu(xp):
    graph = named_graph("zero_degree_rows")
    g = make_graph(xp, graph).to_cpu()
    _assert_structure(np, g, graph)


def test_to_gpu_without_a_usable_gpu_says_why():
    if ca.backend.gpu_available():
        pytest.skip("this machine has a usable GPU")
    with pytest.raises(RuntimeError, match="to_gpu needs CuPy and a usable CUDA device: "):
        CSRGraph([0, 1], [0]).to_gpu()


def test_to_gpu(xp):
    cupy = require_cupy()
    graph = named_graph("int64_indices")
    g = make_graph(xp, graph).to_gpu()
    _assert_structure(cupy, g, graph)
    assert np.dtype(g.index_dtype) == np.int64
    back = g.to_cpu()
    _assert_structure(np, back, graph)
    assert np.dtype(back.index_dtype) == np.int64
