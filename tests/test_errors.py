"""Bad input: the right exception type, a message naming the argument, nothing else happens."""

import math

import numpy as np
import pytest
from helpers import is_numpy

import cupy_csrattn as ca
from cupy_csrattn import datasets
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.compare import to_np
from cupy_csrattn.testing.graphs import named_graph, num_dst_of

CSRGraph = ca.CSRGraph

GRAPH = named_graph("odd_sizes")  # 13 destinations, 11 sources, 37 edges
E, N_DST, N_SRC = len(GRAPH.indices), num_dst_of(GRAPH), GRAPH.num_src
H, F, D = 3, 4, 5
RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _raises(xp, exc, match, func, *args, **kwargs):
    """func(graph-on-xp, *args on xp) raises exc with a message matching match."""
    with pytest.raises(exc, match=match):
        getattr(ca, func)(make_graph(xp, GRAPH), *to_xp(xp, args), **to_xp(xp, kwargs))


def _csr(xp, indptr, indices, num_src=None, **kwargs):
    return CSRGraph(to_xp(xp, np.asarray(indptr)), to_xp(xp, np.asarray(indices)), num_src, **kwargs)


# ------------------------------------------------------------------ CSRGraph


def test_indptr_2d(xp):
    with pytest.raises(ValueError, match="indptr"):
        _csr(xp, np.array([[0, 1], [1, 2]]), np.array([0, 1]), 2)


def test_indices_2d(xp):
    with pytest.raises(ValueError, match="indices"):
        _csr(xp, np.array([0, 2]), np.array([[0, 1]]), 2)


def test_indptr_empty(xp):
    with pytest.raises(ValueError, match="indptr"):
        _csr(xp, np.zeros(0, np.int32), np.zeros(0, np.int32), 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_indptr(xp, dtype):
    with pytest.raises(TypeError, match="indptr"):
        _csr(xp, np.array([0, 1, 2], dtype), np.array([0, 1]), 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.bool_])
def test_non_integer_indices(xp, dtype):
    with pytest.raises(TypeError, match="indices"):
        _csr(xp, np.array([0, 1, 2]), np.array([0, 1], dtype), 2)


def test_indptr_not_starting_at_zero(xp):
    with pytest.raises(ValueError, match="indptr"):
        _csr(xp, np.array([1, 2, 3]), np.array([0, 1, 0]), 2)


def test_indptr_decreasing(xp):
    with pytest.raises(ValueError, match="indptr"):
        _csr(xp, np.array([0, 2, 1, 3]), np.array([0, 1, 0]), 2)


def test_indptr_not_ending_at_nnz(xp):
    with pytest.raises(ValueError, match="indptr"):
        _csr(xp, np.array([0, 1, 2]), np.array([0, 1, 0]), 2)


def test_negative_index(xp):
    with pytest.raises(ValueError, match="indices"):
        _csr(xp, np.array([0, 1, 2]), np.array([0, -1]), 2)


def test_too_large_index(xp):
    with pytest.raises(ValueError, match="indices"):
        _csr(xp, np.array([0, 1, 2]), np.array([0, 2]), 2)


def test_unknown_check_mode(xp):
    with pytest.raises(ValueError, match="check"):
        _csr(xp, np.array([0, 1]), np.array([0]), 1, check="paranoid")


@pytest.mark.parametrize("check", [np.array(["full", "x"]), None, 1])
def test_check_mode_of_another_type(xp, check):
    with pytest.raises(TypeError, match="check must be one of"):
        _csr(xp, np.array([0, 1]), np.array([0]), 1, check=check)


@pytest.mark.parametrize("copy", ["no", [], None, 1])
def test_copy_must_be_a_bool(xp, copy):
    """copy="no" is truthy and []/None falsy: a mistake to report, not an answer to guess."""
    with pytest.raises(TypeError, match="copy must be True or False"):
        _csr(xp, np.array([0, 1]), np.array([0]), 1, copy=copy)


def test_fast_check_still_checks_dtype(xp):
    with pytest.raises(TypeError, match="indices"):
        _csr(xp, np.array([0, 1]), np.array([0.0]), 1, check="fast")


def test_fast_check_still_checks_ndim(xp):
    with pytest.raises(ValueError, match="indices"):
        _csr(xp, np.array([0, 1]), np.array([[0]]), 1, check="fast")


def test_from_edge_index_length_mismatch(xp):
    with pytest.raises(ValueError, match="src has 3 entries but dst has 2"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, 1, 2])), to_xp(xp, np.array([0, 1])))


def test_from_edge_index_float_src(xp):
    with pytest.raises(TypeError, match="src"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0.0, 1.0])), to_xp(xp, np.array([0, 1])))


def test_from_edge_index_dst_beyond_num_dst(xp):
    with pytest.raises(ValueError, match="dst must be < num_dst = 3, got 5"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, 1])), to_xp(xp, np.array([0, 5])), num_dst=3, num_src=2)


def test_from_edge_index_src_beyond_num_src(xp):
    with pytest.raises(ValueError, match="src must be < num_src = 3, got 4"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0, 4])), to_xp(xp, np.array([0, 1])), num_dst=2, num_src=3)


@pytest.mark.parametrize("check", ["full", "fast", "none"])
def test_inferred_node_count_beyond_int64(xp, check):
    """An id of 2**63 - 1 (or 2**63 - 2) implies a node count that num_src=... would be refused:
    refused as such, naming the ids, not accepted as num_src = 2**63 for a later op to fail on."""
    for high in (2**63 - 1, 2**63 - 2):
        with pytest.raises(ValueError, match="^indices holds node id"):
            _csr(xp, np.array([0, 1]), np.array([high]), None, check=check)
        with pytest.raises(ValueError, match="^src holds node id"):
            CSRGraph.from_edge_index(to_xp(xp, np.array([high])), to_xp(xp, np.array([0])))
        with pytest.raises(ValueError, match="^dst holds node id"):
            CSRGraph.from_edge_index(to_xp(xp, np.array([0])), to_xp(xp, np.array([high])))
    assert _csr(xp, np.array([0, 1]), np.array([2**63 - 3]), None, check=check).num_src == 2**63 - 2


@pytest.mark.parametrize("count", [2**63 - 1, 2**70])
def test_node_counts_beyond_int64(xp, count):
    """A node count whose CSR indptr (count + 1 entries) cannot be indexed in int64 is refused
    when the graph is made, naming the argument, not later by an allocation."""
    with pytest.raises(ValueError, match="num_src"):
        _csr(xp, np.array([0, 1]), np.array([0]), count)
    with pytest.raises(ValueError, match="num_dst"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0])), to_xp(xp, np.array([0])), num_dst=count, num_src=1)


@pytest.mark.parametrize("high", [10**7, 2**40])
def test_from_edge_index_dst_id_far_beyond_the_edges_without_num_dst(xp, high):
    """One large dst id without num_dst made an indptr (and bincount's counts) of max(dst) + 2
    entries: 2**40 raised NumPy's MemoryError for 8 TiB, 10**7 allocated 160 MB for two edges.
    The implied count is held to the loaders' limit, naming dst and num_dst, before anything of
    that size is allocated; src ids make no array and stay free (as CSRGraph's indices)."""
    import tracemalloc

    src, dst = to_xp(xp, np.array([0, 2**40])), to_xp(xp, np.array([0, high]))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"^dst holds node id ") as caught:
            CSRGraph.from_edge_index(src, dst)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert str(caught.value) == (
        f"dst holds node id {high}, which makes {high + 1} destination nodes (rows of the graph's indptr): more "
        f"than the 1048576 allowed for 2 edges without num_dst (max(1048576, 16 per edge)); pass num_dst={high + 1} "
        "if the graph really has that many, or renumber them"
    )
    small = to_xp(xp, np.array([0, 2**20 - 1]))
    assert CSRGraph.from_edge_index(src, small)[0].shape == (2**20, 2**40 + 1)  # within the limit
    assert CSRGraph.from_edge_index(small, small, num_dst=2**21)[0].num_dst == 2**21  # given: taken as asked


@pytest.mark.parametrize("count", [2**60, 2**62, 2**63 - 3])
def test_from_edge_index_num_dst_past_the_largest_array(xp, count):
    """A num_dst within int64 whose indptr of num_dst + 1 int64 entries no array can hold: NumPy
    raised "array is too big" naming nothing; the count is named now, as CSRGraph names num_src."""
    with pytest.raises(ValueError, match=f"^num_dst = {count} is more destination nodes than an indptr can hold"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0])), to_xp(xp, np.array([0])), num_dst=count, num_src=1)


def test_from_edge_index_uint64_beyond_int64(xp):
    """Named as too large, not wrapped round into a negative id."""
    big = to_xp(xp, np.array([2**64 - 1], np.uint64))
    with pytest.raises(ValueError, match="src has values too large for int64"):
        CSRGraph.from_edge_index(big, to_xp(xp, np.array([0])))
    with pytest.raises(ValueError, match="dst has values too large for int64"):
        CSRGraph.from_edge_index(to_xp(xp, np.array([0])), big)


def test_from_scipy_not_sparse(xp):
    with pytest.raises(TypeError, match="sparse"):
        CSRGraph.from_scipy(to_xp(xp, np.eye(3)))


@pytest.mark.parametrize("fmt", ["dia", "lil", "bsr", "dok"])
def test_from_scipy_unsupported_format(fmt):
    import scipy.sparse

    A = scipy.sparse.random(4, 5, density=0.5, format=fmt, random_state=0)
    with pytest.raises(TypeError, match=fmt):
        CSRGraph.from_scipy(A)


def test_from_scipy_malformed_csc():
    """A CSC matrix whose column pointers decrease numbered its entries' columns wrong (scipy
    builds one without a check); as a graph or an op's graph argument it is refused."""
    import scipy.sparse

    A = scipy.sparse.csc_array((np.array([1.0, 2.0, 3.0]), np.array([0, 1, 0]), np.array([0, 2, 1, 3])), shape=(2, 3))
    with pytest.raises(ValueError, match="matrix is not a valid CSC matrix: indptr must be non-decreasing"):
        CSRGraph.from_scipy(A)
    with pytest.raises(ValueError, match="graph is not a valid CSC matrix"):
        ca.spmm(A, None, np.eye(3))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_from_scipy_indptr_of_another_length(fmt):
    """A matrix whose indptr disagrees with its shape (its arrays changed after it was made)."""
    import scipy.sparse

    A = scipy.sparse.random(4, 5, density=0.5, format=fmt, random_state=0)
    A.indptr = A.indptr[:-1].copy()
    A.indptr[-1] = A.nnz
    with pytest.raises(ValueError, match=r"matrix has shape \(4, 5\), but its indptr has"):
        CSRGraph.from_scipy(A)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy_checks_check_and_copy_in_every_format(fmt):
    import scipy.sparse

    A = scipy.sparse.random(4, 5, density=0.5, format=fmt, random_state=0)
    with pytest.raises(ValueError, match="check must be one of"):
        CSRGraph.from_scipy(A, check="bogus")
    with pytest.raises(TypeError, match="copy must be True or False"):
        CSRGraph.from_scipy(A, copy="no")


def test_from_scipy_entries_out_of_range_name_the_matrix_arrays():
    """COO and CSC entries changed after the matrix was made (scipy checks them at construction
    only): the errors name the matrix's arrays and shape, not from_edge_index's arguments."""
    import scipy.sparse

    A = scipy.sparse.coo_array(np.eye(3))
    A.col = np.array([0, 7, 2], A.col.dtype)
    with pytest.raises(ValueError, match=r"^matrix.col must be < matrix.shape\[1\] = 3, got 7"):
        CSRGraph.from_scipy(A)
    with pytest.raises(ValueError, match=r"^graph.col must be < graph.shape\[1\] = 3, got 7"):
        ca.spmm(A, None, np.eye(3))
    A.col, A.row = np.array([0, 1, 2], A.col.dtype), np.array([0, -1, 2], A.row.dtype)
    with pytest.raises(ValueError, match=r"^matrix.row must be >= 0, got -1"):
        CSRGraph.from_scipy(A)
    B = scipy.sparse.csc_array(np.eye(3))
    B.indices = np.array([0, 5, 2], B.indices.dtype)
    with pytest.raises(ValueError, match=r"^matrix.indices must be < matrix.shape\[0\] = 3, got 5"):
        CSRGraph.from_scipy(B)


@pytest.mark.parametrize(
    "indices,indptr,match",
    [
        ([0, 9, 1], [0, 1, 2, 3], "indices must be < num_src = 3, got 9"),
        ([0, -1, 1], [0, 1, 2, 3], "indices must be >= 0, got -1"),
        ([0, 1, 1], [0, 2, 1, 3], "indptr must be non-decreasing"),
        ([0.0, 1.0, 1.0], [0, 1, 2, 3], "indices must be an integer array"),
    ],
    ids=["index_beyond", "negative_index", "decreasing_indptr", "float_indices"],
)
def test_from_scipy_malformed_csr_names_the_matrix(indices, indptr, match):
    """A CSR matrix whose arrays scipy did not check (at construction it checks their lengths
    only, and they can be set afterwards): the error named indices or indptr, arguments of
    neither the op nor from_scipy; like a malformed CSC matrix, it names the matrix now."""
    import scipy.sparse

    A = scipy.sparse.csr_array((np.ones(3), np.array([0, 1, 2]), np.array(indptr)), shape=(3, 3))
    A.indices = np.array(indices)
    error = TypeError if isinstance(indices[0], float) else ValueError
    with pytest.raises(error, match=rf"^matrix is not a valid CSR matrix: {match}"):
        CSRGraph.from_scipy(A)
    with pytest.raises(error, match=rf"^graph is not a valid CSR matrix: {match}"):
        ca.spmm(A, None, np.eye(3))


def test_from_scipy_one_dimensional():
    import scipy.sparse

    for matrix in (scipy.sparse.coo_array(np.array([1.0, 0.0, 2.0])), scipy.sparse.csr_array(np.array([1.0, 0.0]))):
        with pytest.raises(ValueError, match="matrix must be a 2-D sparse matrix, got 1 dimension"):
            CSRGraph.from_scipy(matrix)
        with pytest.raises(ValueError, match="graph must be a 2-D sparse matrix"):
            ca.edge_softmax(matrix)


# ------------------------------------------------------------------ graph argument of the ops


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: [0, 1, 2, 3, 4], id="list"),
        pytest.param(lambda: {"indptr": GRAPH.indptr, "indices": GRAPH.indices}, id="dict"),
        pytest.param(lambda: np.eye(3), id="dense_array"),
        pytest.param(lambda: "graph", id="string"),
        pytest.param(lambda: (GRAPH.indptr,), id="one_tuple"),
        pytest.param(lambda: None, id="None"),
    ],
)
def test_unknown_graph_kind(xp, bad):
    with pytest.raises(TypeError, match="graph"):
        ca.edge_softmax(bad(), to_xp(xp, _r(E)))


@pytest.mark.parametrize("fmt", ["dia", "lil", "bsr", "dok"])
def test_unsupported_sparse_format_as_graph(xp, fmt):
    import scipy.sparse

    A = scipy.sparse.random(4, 5, density=0.5, format=fmt, random_state=0)
    with pytest.raises(TypeError, match="graph"):
        ca.edge_softmax(A, np.ones(A.nnz))


@pytest.mark.parametrize(
    "graph", [([0, [1]], [0]), ([0, 1], [[0]]), ([[0, 1]], [0], 2)], ids=["ragged", "2d", "2d_indptr"]
)
def test_tuple_graph_of_other_shapes(graph):
    """A ragged sequence raised NumPy's "inhomogeneous shape" ValueError, naming nothing."""
    with pytest.raises(TypeError, match=r"^graph as a tuple must be \(indptr, indices\[, num_src\]\) with 1-D"):
        ca.edge_softmax(graph, np.ones(1))


def test_bad_tuple_graph_is_checked(xp):
    with pytest.raises(ValueError, match="indices"):
        ca.edge_softmax((to_xp(xp, np.array([0, 1, 2])), to_xp(xp, np.array([0, 5])), 3), to_xp(xp, _r(2)))


def test_edge_softmax_needs_scores_for_a_non_matrix_graph(xp):
    with pytest.raises(TypeError, match="scores is required unless graph is a sparse matrix"):
        ca.edge_softmax(make_graph(xp, GRAPH))


# ------------------------------------------------------------------ edge arrays


def test_masked_arrays_are_refused():
    """A masked array's mask was dropped: its masked elements took part in the softmax."""
    scores = np.ma.masked_array(_r(E), mask=np.arange(E) == 1)
    with pytest.raises(TypeError, match=r"^scores is a masked array, whose mask the ops would ignore"):
        ca.edge_softmax((GRAPH.indptr, GRAPH.indices), scores)
    with pytest.raises(TypeError, match=r"^indices is a masked array"):
        ca.CSRGraph(GRAPH.indptr, np.ma.masked_array(GRAPH.indices))
    with pytest.raises(TypeError, match=r"^values is a masked array"):
        datasets.add_self_loops(ca.CSRGraph([0, 1, 1], [1]), np.ma.masked_array([2.0], mask=[True]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex128])
def test_non_float_scores(xp, dtype):
    _raises(xp, TypeError, "scores", "edge_softmax", np.ones(E, dtype))


def test_scores_wrong_length(xp):
    _raises(xp, ValueError, "scores", "edge_softmax", _r(E + 1))


def test_pyg_logits_with_values_lacking_their_axis(xp):
    """(E, H, 1) scores need (N, H, 1, F) values: the message names both and the view that fits."""
    _raises(
        xp,
        ValueError,
        r"values has shape \(11, 3, 4\), trailing shape \(3,\), but scores has trailing shape \(3, 1\): "
        r"values must be \(11, 3, 1, F\); values\[\.\.\., None, :\] \(a view\)",
        "attention_aggregate",
        _r(E, H, 1),
        _r(N_SRC, H, F),
    )


def test_scores_0d(xp):
    _raises(xp, ValueError, "scores", "edge_softmax", np.float64(1.0))


def test_softmax_backward_shape_mismatch(xp):
    _raises(xp, ValueError, "grad_probs", "edge_softmax_backward", _r(E, H), _r(E, H + 1))


def test_softmax_backward_wrong_length(xp):
    _raises(xp, ValueError, "probs", "edge_softmax_backward", _r(E - 1), _r(E - 1))


def test_softmax_backward_integer_grad(xp):
    _raises(xp, TypeError, "grad_probs", "edge_softmax_backward", _r(E), np.ones(E, np.int64))


# ------------------------------------------------------------------ spmm


def test_spmm_weights_wrong_length(xp):
    _raises(xp, ValueError, "weights", "spmm", _r(E - 1), _r(N_SRC, F))


def test_spmm_values_wrong_rows(xp):
    _raises(xp, ValueError, "values", "spmm", _r(E), _r(N_SRC + 1, F))


def test_node_rows_past_an_inferred_count_hint_at_it(xp):
    """More rows than the graph's nodes, the count perhaps inferred from the largest id (nodes
    past it have no edges, as PyG's num_nodes would count them): the error says how to give it."""
    graph = _csr(xp, [0, 1, 2], [0, 1])  # num_src = max(indices) + 1 = 2
    with pytest.raises(
        ValueError, match=r"^values has 4 rows, but the graph has 2 source nodes \(built without num_src"
    ):
        ca.spmm(graph, *to_xp(xp, [_r(2), _r(4, F)]))
    with pytest.raises(ValueError, match=r"^values has 1 rows, but the graph has 2 source nodes$"):
        ca.spmm(graph, *to_xp(xp, [_r(2), _r(1, F)]))
    edges, _ = ca.CSRGraph.from_edge_index(*to_xp(xp, [np.array([0, 1]), np.array([1, 0])]))
    with pytest.raises(ValueError, match=r"^q has 3 rows, but the graph has 2 destination nodes \(from_edge_index"):
        ca.graph_attention(edges, *to_xp(xp, [_r(3, 1, F), _r(2, 1, F), _r(2, 1, F)]))


def test_spmm_values_1d(xp):
    _raises(xp, ValueError, "values", "spmm", _r(E), _r(N_SRC))


def test_spmm_values_with_an_extra_axis(xp):
    _raises(xp, ValueError, "values.*weights", "spmm", _r(E, H), _r(N_SRC, H, F, 2))


def test_spmm_unheaded_weights_with_headed_values(xp):
    _raises(xp, ValueError, r"^values has shape .* but weights has trailing shape \(\)", "spmm", _r(E), _r(N_SRC, H, F))


def test_spmm_headed_weights_with_unheaded_values(xp):
    _raises(xp, ValueError, r"^values has shape .* but weights has .*\(3,\)", "spmm", _r(E, H), _r(N_SRC, F))


def test_spmm_head_count_mismatch(xp):
    _raises(xp, ValueError, r"^values has shape \(11, 4, 4\).* but weights", "spmm", _r(E, H), _r(N_SRC, H + 1, F))


def test_spmm_integer_values(xp):
    _raises(xp, TypeError, "values", "spmm", _r(E), np.ones((N_SRC, F), np.int32))


def test_spmm_integer_weights(xp):
    _raises(xp, TypeError, "weights", "spmm", np.ones(E, np.int32), _r(N_SRC, F))


def test_spmm_backward_grad_out_wrong_rows(xp):
    _raises(xp, ValueError, "grad_out", "spmm_backward", _r(E), _r(N_SRC, F), _r(N_DST + 1, F))


def test_spmm_backward_grad_out_wrong_features(xp):
    _raises(xp, ValueError, "grad_out", "spmm_backward", _r(E), _r(N_SRC, F), _r(N_DST, F + 1))


# ------------------------------------------------------------------ sddmm


@pytest.mark.parametrize("op", ["mul", None, np.array(["dot", "add"])])
def test_sddmm_unknown_op(xp, op):
    """op is passed as given (a NumPy array of strings has no CuPy counterpart)."""
    with pytest.raises(ValueError, match=r"\bop\b"):
        ca.sddmm(make_graph(xp, GRAPH), *to_xp(xp, (_r(N_DST, D), _r(N_SRC, D))), op=op)


def test_sddmm_feature_mismatch(xp):
    _raises(xp, ValueError, "^src_feat has 6 features .* but dst_feat has 5", "sddmm", _r(N_DST, D), _r(N_SRC, D + 1))


def test_sddmm_dst_wrong_rows(xp):
    _raises(xp, ValueError, "dst_feat", "sddmm", _r(N_DST + 2, D), _r(N_SRC, D))


def test_sddmm_src_wrong_rows(xp):
    _raises(xp, ValueError, "src_feat", "sddmm", _r(N_DST, D), _r(N_SRC - 1, D))


def test_sddmm_head_mismatch(xp):
    _raises(xp, ValueError, "^src_feat has shape .* but dst_feat has", "sddmm", _r(N_DST, H, D), _r(N_SRC, D))


def test_sddmm_add_head_mismatch(xp):
    _raises(xp, ValueError, "^src_feat has shape .* but dst_feat", "sddmm", _r(N_DST), _r(N_SRC, H), op="add")


def test_sddmm_add_with_feature_axis_on_one_side(xp):
    """ "add" takes per-node scalars (N, *S): an axis more on one side is a trailing-shape mismatch."""
    _raises(xp, ValueError, "src_feat.*dst_feat", "sddmm", _r(N_DST, H, D), _r(N_SRC, H), op="add")


@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf, 10**400, -(10**400)])
def test_sddmm_non_finite_scale(xp, scale):
    _raises(xp, ValueError, "scale", "sddmm", _r(N_DST, D), _r(N_SRC, D), scale=scale)


@pytest.mark.parametrize("func", ["sddmm", "sddmm_backward"])
def test_sddmm_add_takes_no_scale(xp, func):
    """op="add" has no scale: one other than 1 would be silently ignored."""
    grad = (_r(E),) if func == "sddmm_backward" else ()
    _raises(xp, ValueError, "scale", func, _r(N_DST), _r(N_SRC), *grad, op="add", scale=5.0)


@pytest.mark.parametrize(
    "func, args, name",
    [
        ("sddmm", (_r(N_DST, D), _r(N_SRC, D)), "scale"),
        ("graph_attention", (_r(N_DST, D), _r(N_SRC, D), _r(N_SRC, F)), "scale"),
        ("gat_attention", (_r(N_DST), _r(N_SRC), _r(N_SRC, F)), "negative_slope"),
    ],
)
@pytest.mark.parametrize(
    "value",
    [True, np.bool_(False), "1", 1j, np.timedelta64(2, "s"), np.timedelta64(2, "ns")],
    ids=["bool", "np_bool", "str", "complex", "timedelta_s", "timedelta_ns"],
)
def test_real_scalars_refuse_other_types(xp, func, args, name, value):
    """A bool (an int to Python), a str, a complex or a timedelta64 (an integer type to NumPy:
    float() raised an error naming nothing, or took 2 ns as 2.0) is a TypeError naming the
    argument, not a number taken."""
    _raises(xp, TypeError, f"{name} must be a real number, got", func, *args, **{name: value})


def test_sddmm_integer_features(xp):
    _raises(xp, TypeError, "dst_feat", "sddmm", np.ones((N_DST, D), np.int64), _r(N_SRC, D))


def test_sddmm_backward_grad_scores_wrong_length(xp):
    _raises(xp, ValueError, "grad_scores", "sddmm_backward", _r(N_DST, D), _r(N_SRC, D), _r(E + 3))


def test_sddmm_backward_unknown_op(xp):
    _raises(xp, ValueError, r"\bop\b", "sddmm_backward", _r(N_DST, D), _r(N_SRC, D), _r(E), op="concat")


# ------------------------------------------------------------------ attention_aggregate


def test_aggregate_values_wrong_rows(xp):
    _raises(xp, ValueError, "values", "attention_aggregate", _r(E, H), _r(N_DST, H, F))


def test_aggregate_headed_scores_unheaded_values(xp):
    _raises(xp, ValueError, "^values has shape .* but scores has", "attention_aggregate", _r(E, H), _r(N_SRC, F))


def test_aggregate_head_mismatch(xp):
    _raises(xp, ValueError, "^values has shape .* but scores has", "attention_aggregate", _r(E, H), _r(N_SRC, 2, F))


def test_aggregate_integer_values(xp):
    _raises(xp, TypeError, "values", "attention_aggregate", _r(E), np.ones((N_SRC, F), np.int64))


def test_aggregate_backward_lse_wrong_shape(xp):
    _raises(
        xp,
        ValueError,
        r"\blse\b",
        "attention_aggregate_backward",
        _r(E, H),
        _r(N_SRC, H, F),
        _r(N_DST, H, F),
        lse=_r(N_DST, H + 1),
    )


def test_aggregate_backward_grad_out_wrong_shape(xp):
    _raises(xp, ValueError, "grad_out", "attention_aggregate_backward", _r(E, H), _r(N_SRC, H, F), _r(N_DST, H, F + 1))


# ------------------------------------------------------------------ graph_attention


def test_graph_attention_q_wrong_rows(xp):
    _raises(xp, ValueError, r"\bq\b", "graph_attention", _r(N_DST + 1, H, D), _r(N_SRC, H, D), _r(N_SRC, H, F))


def test_graph_attention_k_wrong_rows(xp):
    _raises(xp, ValueError, r"\bk\b", "graph_attention", _r(N_DST, H, D), _r(N_SRC + 1, H, D), _r(N_SRC, H, F))


def test_graph_attention_v_wrong_rows(xp):
    _raises(xp, ValueError, r"\bv\b", "graph_attention", _r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC - 1, H, F))


def test_graph_attention_qk_width_mismatch(xp):
    _raises(xp, ValueError, r"\bq\b|\bk\b", "graph_attention", _r(N_DST, H, D), _r(N_SRC, H, D + 1), _r(N_SRC, H, F))


def test_graph_attention_head_mismatch(xp):
    _raises(
        xp, ValueError, r"\bq\b|\bk\b|\bv\b", "graph_attention", _r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC, H + 1, F)
    )


@pytest.mark.parametrize("scale", [math.nan, math.inf, 10**400])
def test_graph_attention_non_finite_scale(xp, scale):
    _raises(xp, ValueError, "scale", "graph_attention", _r(N_DST, D), _r(N_SRC, D), _r(N_SRC, F), scale=scale)


def test_graph_attention_integer_q(xp):
    _raises(xp, TypeError, r"\bq\b", "graph_attention", np.ones((N_DST, D), np.int32), _r(N_SRC, D), _r(N_SRC, F))


def test_graph_attention_backward_lse_wrong_shape(xp):
    _raises(
        xp,
        ValueError,
        r"\blse\b",
        "graph_attention_backward",
        _r(N_DST, H, D),
        _r(N_SRC, H, D),
        _r(N_SRC, H, F),
        _r(N_DST, H, F),
        _r(N_DST, H, F),
        _r(N_DST),
    )


def test_graph_attention_backward_out_wrong_shape(xp):
    _raises(
        xp,
        ValueError,
        r"\bout\b",
        "graph_attention_backward",
        _r(N_DST, H, D),
        _r(N_SRC, H, D),
        _r(N_SRC, H, F),
        _r(N_DST, H, F + 1),
        _r(N_DST, H, F),
        _r(N_DST, H),
    )


def test_graph_attention_backward_grad_out_wrong_shape(xp):
    _raises(
        xp,
        ValueError,
        "grad_out",
        "graph_attention_backward",
        _r(N_DST, H, D),
        _r(N_SRC, H, D),
        _r(N_SRC, H, F),
        _r(N_DST, H, F),
        _r(N_DST - 1, H, F),
        _r(N_DST, H),
    )


# edge_feat: added to the key and the value, so q, k and v share its width (D = F here)
def _qkv_one_width():
    return _r(N_DST, H, F), _r(N_SRC, H, F), _r(N_SRC, H, F)


@pytest.mark.parametrize(
    "shape,match",
    [
        ((E + 1, H, F), r"edge_feat has 38 rows, but the graph has 37 edges"),
        ((E, H + 1, F), r"edge_feat has shape .* but q has trailing shape \(3,\)"),
        ((E, F), r"edge_feat has shape .* but q has trailing shape \(3,\)"),
        ((E,), r"edge_feat must be \(E, D\) or \(E, \*S, D\)"),
        ((E, H, F + 1), r"edge_feat has 5 features in its last axis, but v has 4"),
    ],
    ids=["rows", "heads", "no_heads", "no_feature_axis", "width"],
)
def test_graph_attention_edge_feat_wrong_shape(xp, shape, match):
    _raises(xp, ValueError, match, "graph_attention", *_qkv_one_width(), edge_feat=_r(*shape))


def test_graph_attention_edge_feat_needs_q_of_v_width(xp):
    q, k, v = _r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC, H, F)
    _raises(
        xp,
        ValueError,
        r"edge_feat has 4 features in its last axis, but q has 5",
        "graph_attention",
        q,
        k,
        v,
        edge_feat=_r(E, H, F),
    )


def test_graph_attention_integer_edge_feat(xp):
    edge_feat = np.ones((E, H, F), np.int32)
    _raises(xp, TypeError, "edge_feat", "graph_attention", *_qkv_one_width(), edge_feat=edge_feat)


def test_graph_attention_backward_edge_feat_wrong_rows(xp):
    q, k, v = _qkv_one_width()
    saved = (_r(N_DST, H, F), _r(N_DST, H, F), _r(N_DST, H))
    _raises(xp, ValueError, "edge_feat", "graph_attention_backward", q, k, v, *saved, edge_feat=_r(E - 1, H, F))


# ------------------------------------------------------------------ gat_attention


def test_gat_a_dst_wrong_length(xp):
    _raises(xp, ValueError, "a_dst", "gat_attention", _r(N_DST + 1), _r(N_SRC), _r(N_SRC, F))


def test_gat_a_src_wrong_length(xp):
    _raises(xp, ValueError, "a_src", "gat_attention", _r(N_DST), _r(N_SRC + 1), _r(N_SRC, F))


def test_gat_headed_scores_unheaded_values(xp):
    _raises(xp, ValueError, "^values .* but a_dst has", "gat_attention", _r(N_DST, H), _r(N_SRC, H), _r(N_SRC, F))


def test_gat_a_dst_a_src_head_mismatch(xp):
    _raises(xp, ValueError, "^a_src .* but a_dst", "gat_attention", _r(N_DST, H), _r(N_SRC, H + 1), _r(N_SRC, H, F))


@pytest.mark.parametrize("slope", [math.nan, math.inf, -(10**400)])
def test_gat_non_finite_negative_slope(xp, slope):
    _raises(xp, ValueError, "negative_slope", "gat_attention", _r(N_DST), _r(N_SRC), _r(N_SRC, F), negative_slope=slope)


@pytest.mark.parametrize(
    "func,args,name",
    [
        ("sddmm", (_r(N_DST, H, D), _r(N_SRC, H, D)), "scale"),
        ("graph_attention", (_r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC, H, F)), "scale"),
        ("gat_attention", (_r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F)), "negative_slope"),
        ("gatv2_attention", (_r(N_DST, H, D), _r(N_SRC, H, D), _r(H, D)), "negative_slope"),
    ],
)
def test_scalar_beyond_the_compute_dtype(xp, func, args, name):
    """A scale or slope beyond float32's range with float16/float32 data is refused (it would
    be inf in the float32 arithmetic of both backends); float64 data takes it."""
    for dtype in (np.float16, np.float32):
        typed = tuple(a.astype(dtype) for a in args)
        _raises(xp, ValueError, f"^{name}=1e\\+39 overflows float32", func, *typed, **{name: 1e39})
        _raises(xp, ValueError, f"^{name}=-1e\\+39 overflows", func, *typed, **{name: -1e39})
    getattr(ca, func)(make_graph(xp, GRAPH), *to_xp(xp, args), **{name: 1e39})


def test_gat_integer_a_src(xp):
    _raises(xp, TypeError, "a_src", "gat_attention", _r(N_DST), np.ones(N_SRC, np.int64), _r(N_SRC, F))


def test_gat_backward_lse_wrong_shape(xp):
    _raises(
        xp,
        ValueError,
        r"\blse\b",
        "gat_attention_backward",
        _r(N_DST, H),
        _r(N_SRC, H),
        _r(N_SRC, H, F),
        _r(N_DST, H, F),
        _r(N_DST, H, F),
        _r(N_DST + 1, H),
    )


@pytest.mark.parametrize(
    "shape,match",
    [
        ((E - 1, H), r"edge_score has 36 rows, but the graph has 37 edges"),
        ((E, H + 1), r"edge_score has shape .* but a_dst has trailing shape \(3,\)"),
        ((E,), r"edge_score has shape .* but a_dst has trailing shape \(3,\)"),
        ((E, H, 1), r"edge_score has shape .* but a_dst has trailing shape \(3,\)"),
    ],
    ids=["rows", "heads", "no_heads", "extra_axis"],
)
def test_gat_edge_score_wrong_shape(xp, shape, match):
    _raises(xp, ValueError, match, "gat_attention", _r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F), edge_score=_r(*shape))


def test_gat_integer_edge_score(xp):
    edge_score = np.ones((E, H), np.int64)
    _raises(
        xp, TypeError, "edge_score", "gat_attention", _r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F), edge_score=edge_score
    )


def test_gat_backward_edge_score_wrong_heads(xp):
    args = (_r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F), _r(N_DST, H, F), _r(N_DST, H, F), _r(N_DST, H))
    _raises(xp, ValueError, "edge_score", "gat_attention_backward", *args, edge_score=_r(E, H - 1))


# ------------------------------------------------------------------ gatv2_attention


def test_gatv2_x_dst_wrong_rows(xp):
    _raises(xp, ValueError, "x_dst", "gatv2_attention", _r(N_DST + 1, H, D), _r(N_SRC, H, D), _r(H, D))


def test_gatv2_x_src_wrong_rows(xp):
    _raises(xp, ValueError, "x_src", "gatv2_attention", _r(N_DST, H, D), _r(N_SRC + 1, H, D), _r(H, D))


def test_gatv2_head_mismatch(xp):
    _raises(xp, ValueError, "x_src", "gatv2_attention", _r(N_DST, H, D), _r(N_SRC, H + 1, D), _r(H, D))


def test_gatv2_headed_x_dst_unheaded_x_src(xp):
    _raises(xp, ValueError, "x_src", "gatv2_attention", _r(N_DST, H, D), _r(N_SRC, D), _r(H, D))


def test_gatv2_feature_mismatch(xp):
    _raises(xp, ValueError, "x_src", "gatv2_attention", _r(N_DST, H, D), _r(N_SRC, H, D + 1), _r(H, D))


@pytest.mark.parametrize(
    "att_shape", [(D,), (H, D + 1), (H + 1, D), (1, H, D), ()], ids=["unheaded", "width", "heads", "3d", "scalar"]
)
def test_gatv2_att_wrong_shape(xp, att_shape):
    _raises(xp, ValueError, r"\batt\b", "gatv2_attention", _r(N_DST, H, D), _r(N_SRC, H, D), _r(*att_shape))


def test_gatv2_unheaded_att_must_be_a_vector(xp):
    _raises(xp, ValueError, r"\batt\b", "gatv2_attention", _r(N_DST, D), _r(N_SRC, D), _r(1, D))


def test_gatv2_integer_att(xp):
    _raises(xp, TypeError, r"\batt\b", "gatv2_attention", _r(N_DST, D), _r(N_SRC, D), np.ones(D, np.int64))


def test_gatv2_att_none(xp):
    _raises(xp, TypeError, r"\batt\b", "gatv2_attention", _r(N_DST, D), _r(N_SRC, D), None)


@pytest.mark.parametrize("slope", [np.inf, np.nan, 10**400])
def test_gatv2_non_finite_negative_slope(xp, slope):
    _raises(
        xp, ValueError, "negative_slope", "gatv2_attention", _r(N_DST, D), _r(N_SRC, D), _r(D), negative_slope=slope
    )


def test_gatv2_string_negative_slope(xp):
    _raises(xp, TypeError, "negative_slope", "gatv2_attention", _r(N_DST, D), _r(N_SRC, D), _r(D), negative_slope="0.2")


@pytest.mark.parametrize(
    "position,name,shape",
    [(3, "out", (N_DST, H, D + 1)), (4, "grad_out", (N_DST + 1, H, D)), (5, "lse", (N_DST, H + 1))],
    ids=["out", "grad_out", "lse"],
)
def test_gatv2_backward_saved_wrong_shape(xp, position, name, shape):
    args = [_r(N_DST, H, D), _r(N_SRC, H, D), _r(H, D), _r(N_DST, H, D), _r(N_DST, H, D), _r(N_DST, H)]
    args[position] = _r(*shape)
    _raises(xp, ValueError, rf"\b{name}\b", "gatv2_attention_backward", *args)


def test_gatv2_backward_lse_required(xp):
    args = (_r(N_DST, H, D), _r(N_SRC, H, D), _r(H, D), _r(N_DST, H, D), _r(N_DST, H, D), None)
    _raises(xp, TypeError, r"\blse\b", "gatv2_attention_backward", *args)


# ------------------------------------------------------------------ out=

OUT_OPS = [
    pytest.param("edge_softmax", (lambda: (_r(E, H),)), (E, H), id="edge_softmax"),
    pytest.param("edge_softmax_backward", (lambda: (_r(E, H), _r(E, H))), (E, H), id="edge_softmax_backward"),
    pytest.param("spmm", (lambda: (_r(E, H), _r(N_SRC, H, F))), (N_DST, H, F), id="spmm"),
    pytest.param("sddmm", (lambda: (_r(N_DST, H, D), _r(N_SRC, H, D))), (E, H), id="sddmm"),
    pytest.param("attention_aggregate", (lambda: (_r(E, H), _r(N_SRC, H, F))), (N_DST, H, F), id="attention_aggregate"),
    pytest.param(
        "graph_attention",
        (lambda: (_r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC, H, F))),
        (N_DST, H, F),
        id="graph_attention",
    ),
    pytest.param(
        "gat_attention", (lambda: (_r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F))), (N_DST, H, F), id="gat_attention"
    ),
    pytest.param(
        "gatv2_attention",
        (lambda: (_r(N_DST, H, D), _r(N_SRC, H, D), _r(H, D))),
        (N_DST, H, D),
        id="gatv2_attention",
    ),
]


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_wrong_shape(xp, func, make_args, shape):
    out = xp.zeros(shape[:-1] + (shape[-1] + 1,))
    _raises(xp, ValueError, r"\bout\b", func, *make_args(), out=out)


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_flattened(xp, func, make_args, shape):
    out = xp.zeros(int(np.prod(shape)))
    _raises(xp, ValueError, r"\bout\b", func, *make_args(), out=out)


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_wrong_dtype(xp, func, make_args, shape):
    out = xp.zeros(shape, dtype=np.float32)  # the result is float64
    _raises(xp, TypeError, r"\bout\b", func, *make_args(), out=out)


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_not_c_contiguous(xp, func, make_args, shape):
    out = xp.zeros(shape[::-1]).T  # right shape and dtype, Fortran order
    assert out.shape == shape and not out.flags.c_contiguous
    _raises(xp, ValueError, r"\bout\b", func, *make_args(), out=out)


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_of_the_wrong_library(xp, func, make_args, shape):
    """A NumPy out for a GPU computation; a nested list (not an ndarray) for a CPU one."""
    out = np.zeros(shape) if not is_numpy(xp) else np.zeros(shape).tolist()
    with pytest.raises(TypeError, match=r"\bout\b"):  # not through _raises: it would move out to xp
        getattr(ca, func)(make_graph(xp, GRAPH), *to_xp(xp, make_args()), out=out)


SINGLE_HEAD_FORWARDS = {
    "spmm": lambda: (_r(E), _r(N_SRC, F)),
    "attention_aggregate": lambda: (_r(E), _r(N_SRC, F)),
    "graph_attention": lambda: (_r(N_DST, F), _r(N_SRC, F), _r(N_SRC, F)),
    "gat_attention": lambda: (_r(N_DST), _r(N_SRC), _r(N_SRC, F)),
    "gatv2_attention": lambda: (_r(N_DST, F), _r(N_SRC, F), _r(F)),
}


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("op", sorted(SINGLE_HEAD_FORWARDS))
def test_out_numpy_matrix_is_named(op):
    """An np.matrix of the (N, F) result's shape stays 2-D when reshaped to the backend's
    (N, 1, F) layout: the call failed inside the backend with NumPy's unpacking error, naming
    nothing. (The GPU takes only a CuPy out.)"""
    out = np.matrix(np.zeros((N_DST, F)))
    with pytest.raises(TypeError, match=r"out is a numpy.matrix"):
        getattr(ca, op)(make_graph(np, GRAPH), *SINGLE_HEAD_FORWARDS[op](), out=out)
    assert not out.any()
    getattr(ca, op)(make_graph(np, GRAPH), *SINGLE_HEAD_FORWARDS[op](), out=np.asarray(out))  # the advice works


@pytest.mark.parametrize("func,make_args,shape", OUT_OPS)
def test_out_masked_array_is_named(func, make_args, shape):
    """A masked out was written through its data and returned with its mask as it was: the
    masked elements of the result were hidden (all of them under mask=True), as silently as an
    input's mask was ignored. (The GPU takes only a CuPy out.)"""
    out = np.ma.masked_array(np.zeros(shape), mask=True)
    with pytest.raises(TypeError, match=r"^out is a masked array"):
        getattr(ca, func)(make_graph(np, GRAPH), *make_args(), out=out)
    assert not out.data.any()
    getattr(ca, func)(make_graph(np, GRAPH), *make_args(), out=np.asarray(out))  # the advice works


def test_out_integer_dtype(xp):
    _raises(xp, TypeError, r"\bout\b", "edge_softmax", _r(E), out=xp.zeros(E, dtype=np.int64))


# ------------------------------------------------------------------ return_lse

FORWARDS_WITH_LSE = {
    "attention_aggregate": lambda: (_r(E, H), _r(N_SRC, H, F)),
    "graph_attention": lambda: (_r(N_DST, H, D), _r(N_SRC, H, D), _r(N_SRC, H, F)),
    "gat_attention": lambda: (_r(N_DST, H), _r(N_SRC, H), _r(N_SRC, H, F)),
    "gatv2_attention": lambda: (_r(N_DST, H, D), _r(N_SRC, H, D), _r(H, D)),
}


@pytest.mark.parametrize("op", sorted(FORWARDS_WITH_LSE))
@pytest.mark.parametrize("value", [1, 0, "no", None, [], np.array(True)], ids=repr)
def test_return_lse_not_a_bool(xp, op, value):
    """A truthy or falsy stand-in would decide between one result and a pair: a TypeError."""
    _raises(xp, TypeError, "return_lse must be True or False", op, *FORWARDS_WITH_LSE[op](), return_lse=value)


@pytest.mark.parametrize("op", sorted(FORWARDS_WITH_LSE))
def test_return_lse_takes_numpy_bools(xp, op):
    args = to_xp(xp, FORWARDS_WITH_LSE[op]())
    out, lse = getattr(ca, op)(make_graph(xp, GRAPH), *args, return_lse=np.True_)
    assert out.shape[0] == lse.shape[0] == N_DST
    assert not isinstance(getattr(ca, op)(make_graph(xp, GRAPH), *args, return_lse=np.False_), tuple)


# ------------------------------------------------------------------ nothing else happens


def test_failed_call_leaves_out_untouched(xp):
    out = xp.full((N_DST, F), 7.0)
    _raises(xp, ValueError, "values", "spmm", _r(E), _r(N_SRC + 1, F), out=out)
    assert (to_np(out) == 7.0).all()


# ------------------------------------------------------------------ warmup


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(dtypes=["int32"]), ValueError, "dtypes must hold dtypes among float32, float64, float16, got int32"),
        (dict(dtypes=[np.float32, "complex64"]), ValueError, "dtypes .* got complex64"),
        (dict(index_dtypes=["float32"]), ValueError, "index_dtypes must hold dtypes among int32, int64, got float32"),
        (dict(index_dtypes=[np.uint32]), ValueError, "index_dtypes .* got uint32"),
        (dict(dtypes=["no such type"]), TypeError, "dtypes must hold dtypes, got 'no such type'"),
        (dict(dtypes=[("f8", -1)]), TypeError, "dtypes must hold dtypes, got"),  # NumPy's ValueError
        (dict(dtypes=5), TypeError, "dtypes must be a dtype or an iterable of dtypes, got int"),
    ],
    ids=["int-data", "complex-data", "float-index", "uint-index", "unknown-name", "malformed-spec", "not-iterable"],
)
def test_warmup_bad_dtypes(kwargs, exc, match):
    """Checked before anything else, so the same error with or without a GPU."""
    with pytest.raises(exc, match=match):
        ca.warmup(**kwargs)
