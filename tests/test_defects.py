"""Issue 13, core part: each defect a new user found, as a test that failed before its fix.

1. results of edge_softmax(A) own their structure arrays;
2. check="fast" still bounds-checks the indices and indptr;
3. spmm(A, None, X) and spmm_backward(A, None, ...) use A.data, as ``A @ X`` does;
4. a CSRGraph copies the caller's index arrays (copy=False keeps them, with a contract);
7. long double and every float dtype other than float16/32/64 are refused by name;
8. errors name the argument they are about.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from helpers import is_numpy, same_buffer

import cupy_csrattn as ca
import cupy_csrattn.testing.reference as ref
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.compare import check_result, to_np
from cupy_csrattn.testing.graphs import from_rows, named_graph, num_dst_of

CSRGraph = ca.CSRGraph


def _sparse_module(xp):
    if is_numpy(xp):
        import scipy.sparse

        return scipy.sparse
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


def _matrix(xp, fmt, cls="matrix", data=None):
    """A 4 x 5 sparse matrix with unsorted columns in row 0, a duplicate and an empty row."""
    if cls == "array" and not is_numpy(xp):
        pytest.skip("cupyx.scipy.sparse has no sparse array classes")
    rows = np.array([0, 0, 0, 2, 2, 3, 3], np.int32)
    cols = np.array([3, 0, 1, 4, 4, 2, 0], np.int32)
    data = np.array([1.5, -2.0, 0.5, 3.0, 1.0, -1.0, 2.5]) if data is None else data
    coo = getattr(_sparse_module(xp), f"coo_{cls}")((to_xp(xp, data), (to_xp(xp, rows), to_xp(xp, cols))), shape=(4, 5))
    if fmt == "coo":
        return coo
    if fmt == "csr":  # built from its arrays, so that row 0 stays unsorted
        indptr = np.array([0, 3, 3, 5, 7], np.int32)
        return getattr(_sparse_module(xp), f"csr_{cls}")(
            (to_xp(xp, data), to_xp(xp, cols), to_xp(xp, indptr)), shape=(4, 5)
        )
    return coo.tocsc()


def _structure(A):
    return (A.row, A.col) if A.format == "coo" else (A.indptr, A.indices)


# ------------------------------------------------------------------ 1. results own their structure


@pytest.mark.parametrize("cls", ["matrix", "array"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_edge_softmax_of_a_matrix_owns_its_structure(xp, fmt, cls):
    A = _matrix(xp, fmt, cls)
    P = ca.edge_softmax(A)
    for mine, theirs in zip(_structure(P), _structure(A)):
        assert not same_buffer(mine, theirs)
        np.testing.assert_array_equal(to_np(mine), to_np(theirs))


def test_in_place_method_on_the_result_leaves_the_input_alone():
    """The issue's example: P.sort_indices() used to reorder A.indices under A's data."""
    import scipy.sparse as sp

    A = sp.csr_array(([1.0, 2, 3], [2, 0, 1], [0, 3]), shape=(1, 3))
    P = ca.edge_softmax(A)
    P.sort_indices()
    np.testing.assert_array_equal(A.toarray(), [[2.0, 3.0, 1.0]])
    np.testing.assert_array_equal(A.indices, [2, 0, 1])


# ------------------------------------------------------------------ 2. check="fast" checks the bounds


@pytest.mark.parametrize(
    "indices,num_src",
    [([0, 10**9], 2), ([0, -1], 2), ([0, 2], 2), ([-(2**40), 1], 2), ([0, -1], None), ([-(2**40), 1], None)],
    ids=["huge", "negative", "num_src", "very_negative", "negative_derived", "very_negative_derived"],
)
def test_fast_check_rejects_out_of_range_indices(xp, indices, num_src):
    with pytest.raises(ValueError, match="indices"):
        CSRGraph(to_xp(xp, np.array([0, 2])), to_xp(xp, np.array(indices, np.int64)), num_src, check="fast")


@pytest.mark.parametrize(
    "indptr", [[0, 5], [0, 3, 2], [0, -1, 2], [1, 2], [0, 1]], ids=["end", "beyond", "negative", "start", "short"]
)
def test_fast_check_rejects_indptr_out_of_range(xp, indptr):
    with pytest.raises(ValueError, match="indptr"):
        CSRGraph(to_xp(xp, np.array(indptr)), to_xp(xp, np.array([0, 1])), 2, check="fast")


def test_fast_check_accepts_what_full_accepts(xp):
    graph = named_graph("zero_degree_rows")
    for check in ("full", "fast"):
        g = CSRGraph(to_xp(xp, graph.indptr), to_xp(xp, graph.indices), check=check)
        assert g.num_src == int(graph.indices.max()) + 1


def test_fast_check_graph_of_the_issue_does_not_crash():
    """The issue's reproduction, in a child process: it used to end in a segfault (exit 139)."""
    code = (
        "import numpy as np, cupy_csrattn as ca\n"
        "try:\n"
        "    g = ca.CSRGraph([0, 2], [0, 10**9], 2, check='fast')\n"
        "    ca.spmm(g, np.ones(2), np.ones((2, 4)))\n"
        "except ValueError as error:\n"
        "    print('ValueError', error)\n"
    )
    root = Path(__file__).resolve().parents[1]  # this checkout's package, whatever the working directory
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    assert "ValueError indices" in done.stdout


# ------------------------------------------------------------------ 3. spmm(A, None, X) uses A.data


def _dense(A):
    return to_np(A.toarray()) if hasattr(A, "toarray") else to_np(A.todense())


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_spmm_of_a_matrix_without_weights_is_a_times_x(xp, fmt):
    A = _matrix(xp, fmt)
    X = np.random.default_rng(0).standard_normal((5, 3))
    got = ca.spmm(A, None, to_xp(xp, X))
    check_result(xp, got, _dense(A) @ X, np.float64)
    check_result(xp, got, to_np(A @ to_xp(xp, X)), np.float64)


def test_spmm_of_a_matrix_without_weights_weights_every_head_by_the_data(xp):
    A = _matrix(xp, "coo")
    X = np.random.default_rng(1).standard_normal((5, 2, 3))
    got = ca.spmm(A, None, to_xp(xp, X))
    assert got.shape == (4, 2, 3)
    check_result(xp, got, np.einsum("ds,shf->dhf", _dense(A), X), np.float64)


@pytest.mark.parametrize("data_dtype", [np.int64, np.bool_])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spmm_of_an_integer_matrix_takes_the_dtype_of_values(xp, data_dtype, dtype):
    data = np.array([1, 2, 1, 3, 1, 1, 2]).astype(data_dtype)
    if not is_numpy(xp):
        pytest.skip("cupyx sparse matrices hold floating-point data")
    A = _matrix(xp, "csr", data=data)
    X = np.random.default_rng(2).standard_normal((5, 3)).astype(dtype)
    got = ca.spmm(A, None, to_xp(xp, X))
    # each stored entry counts (a bool duplicate adds twice, as in A @ X, though toarray() ORs it)
    expected = ref.spmm(to_np(A.indptr), to_np(A.indices), data.astype(np.float64), X.astype(np.float64))
    check_result(xp, got, expected, dtype)
    if is_numpy(xp):
        check_result(xp, got, A @ X.astype(np.float64), dtype)


def test_spmm_of_a_matrix_with_explicit_weights_ignores_data(xp):
    A = _matrix(xp, "csr")
    weights = np.arange(1.0, 8.0)
    X = np.random.default_rng(3).standard_normal((5, 3))
    got = ca.spmm(A, to_xp(xp, weights), to_xp(xp, X))
    indptr, indices = to_np(A.indptr), to_np(A.indices)
    check_result(xp, got, ref.spmm(indptr, indices, weights, X), np.float64)


@pytest.mark.parametrize("heads", [None, 2])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_spmm_backward_of_a_matrix_without_weights_uses_the_data(xp, fmt, heads):
    A = _matrix(xp, fmt)
    rng = np.random.default_rng(4)
    head = () if heads is None else (heads,)
    X = rng.standard_normal((5, *head, 3))
    G = rng.standard_normal((4, *head, 3))
    grad_weights, grad_values = ca.spmm_backward(A, None, to_xp(xp, X), to_xp(xp, G))
    assert grad_weights is None
    expected = np.einsum("ds,d...->s...", _dense(A), G)
    check_result(xp, grad_values, expected, np.float64)


def test_spmm_without_weights_is_still_all_ones_for_a_csrgraph_and_a_tuple(xp):
    graph = named_graph("unsorted_columns")
    X = np.random.default_rng(5).standard_normal((graph.num_src, 3))
    expected = ref.spmm(graph.indptr, graph.indices, None, X)
    for g in (make_graph(xp, graph), make_graph(xp, graph, "tuple3")):
        check_result(xp, ca.spmm(g, None, to_xp(xp, X)), expected, np.float64)


@pytest.mark.parametrize("data", [np.arange(6.0), np.arange(8.0), np.ones((7, 2))], ids=["short", "long", "2-D"])
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_spmm_of_a_matrix_whose_data_do_not_match_its_entries_names_its_data(fmt, data):
    """Data set on a matrix after it was built, not one weight per stored entry: they raised
    IndexError or scipy's error, or gave a result from some of them (a longer or a 2-D array)."""
    A = _matrix(np, fmt)
    A.data = data
    X, G = np.ones((5, 3)), np.ones((4, 3))
    with pytest.raises(ValueError, match=r"^graph\.data "):
        ca.spmm(A, None, X)
    with pytest.raises(ValueError, match=r"^graph\.data "):
        ca.spmm_backward(A, None, X, G)


def test_spmm_of_a_complex_matrix_names_its_data():
    A = _matrix(np, "csr", data=np.ones(7, np.complex128))
    with pytest.raises(TypeError, match="graph.data"):
        ca.spmm(A, None, np.ones((5, 3)))


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_edge_softmax_of_an_integer_matrix_names_its_data(fmt):
    """The matrix's data are the scores when none are given: the error names graph.data, not
    the scores argument the caller left out."""
    A = _matrix(np, fmt, data=np.ones(7, np.int64))
    with pytest.raises(TypeError, match=r"^graph\.data must be a real floating-point array"):
        ca.edge_softmax(A)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_edge_softmax_of_a_matrix_with_2d_data_names_its_data(fmt):
    """Data set on a matrix after it was built, (E, H) rather than one score per stored entry:
    the softmax ran, then scipy refused to build the result with an error naming nothing."""
    A = _matrix(np, fmt)
    A.data = np.ones((7, 2))
    with pytest.raises(ValueError, match=r"^graph\.data must be 1-D"):
        ca.edge_softmax(A)
    with pytest.raises(ValueError, match=r"^graph\.data must be 1-D"):
        ca.edge_softmax(A, norm_by="src")


def test_edge_softmax_of_a_coo_matrix_with_float16_data_names_its_data():
    """scipy builds CSR and CSC matrices of float16 data but no COO matrix: float16 data set on
    a COO matrix after it was built gave scipy's error, naming nothing, once the softmax had run.
    The CSR form of the same data works."""
    A = scipy.sparse.coo_array((np.ones(3), ([0, 1, 2], [0, 0, 1])), shape=(3, 2))
    A.data = A.data.astype(np.float16)
    with pytest.raises(TypeError, match=r"^graph\.data is float16, .* pass graph\.tocsr\(\)"):
        ca.edge_softmax(A)
    B = scipy.sparse.csr_array(A.astype(np.float32))
    B.data = B.data.astype(np.float16)
    assert ca.edge_softmax(B).data.tolist() == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------ 4. the graph owns its arrays


def _graph_arrays(xp):
    graph = named_graph("odd_sizes")
    return graph, to_xp(xp, graph.indptr.copy()), to_xp(xp, graph.indices.copy())


def test_graph_does_not_see_later_changes_to_the_callers_arrays(xp):
    """spmm (cached plan) and spmm_backward (cached transpose) both keep the graph as built."""
    graph, indptr, indices = _graph_arrays(xp)
    rng = np.random.default_rng(6)
    weights = rng.standard_normal(len(graph.indices))
    X = rng.standard_normal((graph.num_src, 3))
    G = rng.standard_normal((num_dst_of(graph), 3))
    g = CSRGraph(indptr, indices, graph.num_src)
    ca.spmm(g, to_xp(xp, weights), to_xp(xp, X))  # builds what the graph caches
    indices[:] = indices[::-1].copy()  # the caller reuses its buffer
    indptr[1:-1] = indptr[-1]
    check_result(xp, ca.spmm(g, to_xp(xp, weights), to_xp(xp, X)), ref.spmm(*graph[:2], weights, X), np.float64)
    got = ca.spmm_backward(g, to_xp(xp, weights), to_xp(xp, X), to_xp(xp, G))
    for have, want in zip(got, ref.spmm_backward(graph.indptr, graph.indices, weights, X, G)):
        check_result(xp, have, want, np.float64)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)
    np.testing.assert_array_equal(to_np(g.indptr), graph.indptr)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_graph_copies_by_default_and_shares_with_copy_false(xp, dtype):
    graph = named_graph("odd_sizes")
    indptr, indices = to_xp(xp, graph.indptr.astype(dtype)), to_xp(xp, graph.indices.astype(dtype))
    g = CSRGraph(indptr, indices, graph.num_src)
    assert not same_buffer(g.indptr, indptr) and not same_buffer(g.indices, indices)
    shared = CSRGraph(indptr, indices, graph.num_src, copy=False)
    assert same_buffer(shared.indptr, indptr) and same_buffer(shared.indices, indices)
    for h in (g, shared):
        assert np.dtype(h.index_dtype) == np.dtype(dtype)
        np.testing.assert_array_equal(to_np(h.indices), graph.indices)


_VIEWS = {
    "every_other": lambda xp, a: to_xp(xp, np.repeat(a, 2))[::2],
    "reversed": lambda xp, a: to_xp(xp, a[::-1].copy())[::-1],
}


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("view", sorted(_VIEWS))
def test_graph_arrays_are_contiguous_whatever_the_callers(xp, view, copy):
    """A strided view of int32/int64 indices was kept as it was with copy=False: the GPU
    kernels, which read the index arrays through their data pointers, then read the buffer
    it lies in. The graph holds C-contiguous arrays of the same values."""
    graph = named_graph("odd_sizes")
    indptr, indices = (_VIEWS[view](xp, a) for a in (graph.indptr, graph.indices))
    assert not indptr.flags.c_contiguous and not indices.flags.c_contiguous
    g = CSRGraph(indptr, indices, graph.num_src, copy=copy)
    assert g.indptr.flags.c_contiguous and g.indices.flags.c_contiguous
    np.testing.assert_array_equal(to_np(g.indptr), graph.indptr)
    np.testing.assert_array_equal(to_np(g.indices), graph.indices)


def test_from_scipy_copies_a_csr_matrix_by_default(xp):
    A = _matrix(xp, "csr")
    g = CSRGraph.from_scipy(A)
    assert not same_buffer(g.indices, A.indices) and not same_buffer(g.indptr, A.indptr)
    shared = CSRGraph.from_scipy(A, copy=False)
    assert same_buffer(shared.indices, A.indices) and same_buffer(shared.indptr, A.indptr)


# ------------------------------------------------------------------ 7. unsupported float dtypes


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 on this platform")
@pytest.mark.parametrize(
    "func,make",
    [
        ("edge_softmax", lambda g: (np.ones(g.num_edges, np.longdouble),)),
        ("spmm", lambda g: (None, np.ones((g.num_src, 2), np.longdouble))),
        ("spmm", lambda g: (np.ones(g.num_edges), np.ones((g.num_src, 2), np.longdouble))),
    ],
    ids=["scores", "values", "values_with_weights"],
)
def test_long_double_is_refused_with_advice(func, make):
    graph = make_graph(np, named_graph("odd_sizes"))
    args = make(graph)
    name = "scores" if func == "edge_softmax" else "values"
    with pytest.raises(TypeError, match=rf"{name} has dtype {np.dtype(np.longdouble)}.*convert it to float64"):
        getattr(ca, func)(graph, *args)


@pytest.mark.parametrize(
    "type_name", ["float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "float4_e2m1fn", "bfloat16"]
)
def test_ml_dtypes_floats_are_refused_by_name(type_name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if not hasattr(ml_dtypes, type_name):
        pytest.skip(f"this ml_dtypes has no {type_name}")
    dtype = np.dtype(getattr(ml_dtypes, type_name))
    graph = make_graph(np, named_graph("odd_sizes"))
    with pytest.raises(TypeError, match=rf"scores has dtype {type_name}\b"):
        ca.attention_aggregate(graph, np.zeros(graph.num_edges, dtype), np.ones((graph.num_src, 2)))
    with pytest.raises(TypeError, match=rf"values has dtype {type_name}\b"):
        ca.attention_aggregate(graph, np.zeros(graph.num_edges), np.ones((graph.num_src, 2), dtype))


# ------------------------------------------------------------------ 8. errors name their argument


@pytest.mark.parametrize("fmt", ["dok", "lil", "dia", "bsr"])
@pytest.mark.parametrize("cls", ["array", "matrix"])
def test_edge_softmax_of_an_unsupported_format_without_scores(fmt, cls):
    import scipy.sparse

    A = getattr(scipy.sparse, f"{fmt}_{cls}")(scipy.sparse.random(4, 5, density=0.5, format="csr", random_state=0))
    with pytest.raises(TypeError, match=rf"graph is a sparse matrix in format '{fmt}'.*CSR, CSC and COO"):
        ca.edge_softmax(A)


@pytest.mark.parametrize("bad", [2.0, "2", True, np.float64(2.0)], ids=["float", "str", "bool", "np_float"])
@pytest.mark.parametrize("name", ["num_dst", "num_src"])
def test_from_edge_index_counts_must_be_integers(xp, name, bad):
    with pytest.raises(TypeError, match=name):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, 1])), to_xp(xp, np.array([0, 1])), **{name: bad})


@pytest.mark.parametrize("name", ["num_dst", "num_src"])
def test_from_edge_index_negative_count(xp, name):
    with pytest.raises(ValueError, match=name):
        CSRGraph.from_edge_index(to_xp(xp, np.zeros(0, np.int64)), to_xp(xp, np.zeros(0, np.int64)), **{name: -1})


def test_from_edge_index_negative_src_is_called_src(xp):
    with pytest.raises(ValueError, match=r"^src must be >= 0"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, -1])), to_xp(xp, np.array([0, 1])))


def test_from_edge_index_src_beyond_num_src_is_called_src(xp):
    with pytest.raises(ValueError, match=r"^src must be < num_src = 3"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, 4])), to_xp(xp, np.array([0, 1])), num_dst=2, num_src=3)


@pytest.mark.parametrize("bad", [True, np.True_, False])
def test_num_src_bool_is_a_type_error(xp, bad):
    with pytest.raises(TypeError, match="num_src"):
        CSRGraph(to_xp(xp, np.array([0, 1])), to_xp(xp, np.array([0])), bad)


def test_read_only_out_is_named():
    graph = make_graph(np, named_graph("odd_sizes"))
    out = np.zeros(graph.num_edges)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"\bout\b.*read-only"):
        ca.edge_softmax(graph, np.ones(graph.num_edges), out=out)
    out = np.zeros((graph.num_dst, 3))
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"\bout\b.*read-only"):
        ca.spmm(graph, None, np.ones((graph.num_src, 3)), out=out)


def test_graph_attention_backward_names_v(xp):
    graph = from_rows([[0, 1], [1]], num_src=2)
    g = make_graph(xp, graph)
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, 4)), rng.standard_normal((2, 4)), rng.standard_normal((2, 3))
    with pytest.raises(ValueError, match=r"\bout has 5 features.*but v has 3") as error:
        ca.graph_attention_backward(
            g, *to_xp(xp, (q, k, v, rng.standard_normal((2, 5)), rng.standard_normal((2, 3)), np.zeros(2)))
        )
    assert "values" not in str(error.value)


@pytest.fixture
def memory_is(monkeypatch, xp):
    """A function setting the memory the backend reports for xp's device: the host's for NumPy,
    the GPU's for CuPy (None: a platform that does not say)."""
    from cupy_csrattn import backend

    def set_memory(nbytes):
        if is_numpy(xp):
            monkeypatch.setattr(backend, "host_memory_bytes", lambda: nbytes)
        else:
            monkeypatch.setattr(backend, "_gpu_memory_bytes", lambda device_id: nbytes)

    return set_memory


def test_an_input_copy_beyond_memory_is_refused_before_it_is_made(memory_is, xp):
    """A broadcast (zero-stride) input holds little memory but is copied at its whole size to
    the C-contiguous layout the backends take: a copy larger than the machine's memory (or the
    GPU's) was NumPy's or CuPy's MemoryError naming nothing (or, overcommitted on the host, a
    process killed while the copy was written). Now the argument, the copy's shape and its size
    are named first; a copy that fits is made and computed with."""
    kind = "host" if is_numpy(xp) else "GPU"
    num_src = 2**33
    graph = ca.CSRGraph(np.array([0, 2, 3]), np.array([0, num_src - 1, 5], np.int64), num_src=num_src)
    values = xp.broadcast_to(xp.ones((1, 2, 64), np.float32), (num_src, 2, 64))  # 4 TiB as a copy
    weights = xp.ones((3, 2), np.float32)
    memory_is(2**30)
    shape = rf"\({num_src}, 2, 64\)"
    with pytest.raises(
        MemoryError, match=rf"a copy of values of shape {shape} in float32 needs at least 4096.0 GiB of {kind}"
    ):
        ca.spmm(graph, weights, values)
    # A matrix's data as the weights of every head: the heads were merged by a reshape of the
    # caller's array, which copied a broadcast one unchecked.
    matrix = scipy.sparse.csr_array((np.ones(3, np.float32), graph.indices, graph.indptr), shape=(2, num_src))
    if is_numpy(xp):
        with pytest.raises(MemoryError, match=rf"a copy of values of shape {shape} in float32 needs"):
            ca.spmm(matrix, None, values)
    # An lse in float64 for float32 data is taken as a float32 copy: 2 rows of 2**36 heads,
    # whose node arrays have F = 0.
    lse = xp.broadcast_to(xp.zeros((1, 1), np.float64), (2, 2**36))
    nodes = xp.zeros((2, 2**36, 0), np.float32)
    two_rows = ca.CSRGraph(np.array([0, 0, 0]), np.zeros(0, np.int64), num_src=2)
    with pytest.raises(MemoryError, match=rf"a copy of lse of shape \(2, {2**36}\) in float32 needs"):
        ca.graph_attention_backward(two_rows, nodes, nodes, nodes, nodes, nodes, lse)
    scores = xp.broadcast_to(xp.arange(3, dtype=np.float32)[:, None], (3, 4096))  # 48 KiB as a copy
    memory_is(2**15)
    with pytest.raises(MemoryError, match=rf"a copy of scores of shape \(3, 4096\) in float32 .* of {kind}"):
        ca.edge_softmax(graph, scores)
    memory_is(2**30)
    e = np.e
    expected = np.broadcast_to(np.array([[1 / (1 + e)], [e / (1 + e)], [1.0]]), (3, 4096))
    np.testing.assert_allclose(to_np(ca.edge_softmax(graph, scores)), expected, rtol=1e-6)


def test_an_output_beyond_memory_is_named_before_it_is_made(memory_is, xp):
    """An output larger than the memory of the machine (or the GPU) that computes it was
    NumPy's or CuPy's MemoryError, naming no output (or, overcommitted on the host, a process
    killed when it was written): now the output is named first. attention_aggregate's lse of
    one row and 2**40 heads is 4 TiB, with inputs of size 0."""
    kind = "host" if is_numpy(xp) else "GPU"
    graph = ca.CSRGraph(np.array([0, 0]), np.zeros(0, np.int64), num_src=0)
    H = 2**40
    scores, values = xp.zeros((0, H), np.float32), xp.zeros((0, H, 0), np.float32)
    memory_is(2**30)
    with pytest.raises(MemoryError, match=rf"the output lse of shape \(1, {H}\) needs at least 4096.0 GiB of {kind}"):
        ca.attention_aggregate(graph, scores, values, return_lse=True)
    edges = ca.CSRGraph(np.array([0, 300]), np.zeros(300, np.int64), num_src=1)
    big = xp.ones((300, 1000), np.float32)  # 1.1 MiB: its output is over a 1 MiB machine's memory
    memory_is(2**20)
    with pytest.raises(MemoryError, match=rf"the output \w+ of shape \(300, 1000\) needs at least .* of {kind}"):
        ca.edge_softmax(edges, big)
    memory_is(None)  # a platform that does not say: no check
    expected = np.full((300, 1000), 1 / 300, np.float32)
    np.testing.assert_allclose(to_np(ca.edge_softmax(edges, big)), expected, rtol=1e-6)


def test_normalizing_by_source_beyond_memory_is_refused_before_anything_is_built(memory_is, xp):
    """norm_by="src" works on one row per source node, however few the edges: a tuple graph
    of 3 edges with one stray source id of 2**29 took over 24 GiB on the CPU and the process
    was killed. Now the per-source state is checked against the memory first, naming num_src,
    and nothing (no transpose) is built on the graph."""
    kind = "host" if is_numpy(xp) else "GPU"
    graph = ca.CSRGraph(np.array([0, 2, 3]), np.array([0, 1, 2**29]))
    scores = xp.zeros((3, 2), np.float32)
    memory_is(2**30)
    message = rf"normalizing by source \(num_src={2**29 + 1} source nodes, H=2\) needs at least .* of {kind}"
    with pytest.raises(MemoryError, match=message):
        ca.edge_softmax(graph, scores, norm_by="src")
    with pytest.raises(MemoryError, match=message):
        ca.edge_softmax_backward(graph, scores + 0.5, scores, norm_by="src")
    assert not any("transpose" in str(key) for key in graph._cache)
    small = ca.CSRGraph(np.array([0, 2, 3]), np.array([0, 1, 2**10]))
    np.testing.assert_array_equal(to_np(ca.edge_softmax(small, scores, norm_by="src")), np.ones((3, 2)))


def test_an_index_array_copy_beyond_memory_is_named_before_it_is_made(memory_is, xp):
    """A broadcast (zero-stride) index array is copied at its whole size to the C-contiguous
    array a graph holds: 2**40 int64 zeros were NumPy's MemoryError of 8 TiB, naming nothing.
    Now the copy is refused first, naming the argument; a copy that fits is made."""
    kind = "host" if is_numpy(xp) else "GPU"
    huge = xp.broadcast_to(xp.zeros((), np.int64), (2**40,))
    none = xp.zeros(0, np.int64)
    memory_is(2**30)
    with pytest.raises(MemoryError, match=rf"a copy of indptr \({2**40} elements of int64\) needs .* of {kind}"):
        ca.CSRGraph(huge, none)
    with pytest.raises(MemoryError, match=rf"a copy of indices \({2**40} elements of int64\) needs .* of {kind}"):
        ca.CSRGraph(xp.zeros(2, np.int64), huge)
    with pytest.raises(MemoryError, match=rf"a copy of src \({2**40} elements of int64\) needs .* of {kind}"):
        ca.CSRGraph.from_edge_index(huge, huge, num_dst=1, num_src=1)
    narrow = xp.broadcast_to(xp.zeros((), np.int16), (2**40,))  # converted to int32
    with pytest.raises(MemoryError, match=rf"a copy of indptr \({2**40} elements of int32\) needs .* of {kind}"):
        ca.CSRGraph(narrow, none)
    graph = ca.CSRGraph(xp.broadcast_to(xp.zeros((), np.int64), (3,)), none)  # 24 bytes: copied
    assert graph.num_dst == 2 and graph.num_edges == 0


class _NoDevice:
    """An object whose __dlpack_device__ answers None and whose __dlpack__ fails."""

    def __dlpack_device__(self):
        return None

    def __dlpack__(self, **options):
        raise BufferError("no export")


class _FailingConversion:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("conversion failed")


def test_array_likes_that_fail_to_convert_are_named():
    """An object with a __dlpack_device__ answering None was Python's TypeError "'NoneType'
    object is not subscriptable"; one whose __array__ raises, given in a tuple graph, was its
    RuntimeError. Now each is a TypeError naming the argument."""
    graph = (np.array([0, 1]), np.array([0]))
    with pytest.raises(TypeError, match="scores must be an array, got _NoDevice"):
        ca.edge_softmax(graph, _NoDevice())
    with pytest.raises(TypeError, match="indices must be an array, got _NoDevice"):
        ca.CSRGraph(np.array([0, 1]), _NoDevice())
    with pytest.raises(TypeError, match="graph as a tuple must be"):
        ca.edge_softmax((np.array([0, 1]), _FailingConversion()), np.zeros(1))
