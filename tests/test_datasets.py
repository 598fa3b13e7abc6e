"""cupy_csrattn.datasets: generators (shapes, seeds, degree distributions) and loaders
(Matrix Market, .npz, edge lists), including malformed files named by file and line."""

import gzip
import inspect
import io
import os
import re
import threading
import warnings
import zipfile

import numpy as np
import pytest
import scipy.io
import scipy.sparse
from helpers import HYP
from hypothesis import given, settings
from hypothesis import strategies as st

import cupy_csrattn as ca
from cupy_csrattn import backend, datasets


def _mmread_dense(path):
    """scipy's reading of a Matrix Market file, dense (as a sparse array where scipy has the
    choice: its spmatrix default is deprecated)."""
    keywords = {"spmatrix": False} if "spmatrix" in inspect.signature(scipy.io.mmread).parameters else {}
    return scipy.io.mmread(path, **keywords).toarray()


def dense(graph, values=None):
    """The graph as a dense (num_dst, num_src) matrix summing values (ones by default)."""
    data = np.ones(graph.num_edges) if values is None else np.asarray(values)
    return scipy.sparse.csr_array(
        (data, np.asarray(graph.indices), np.asarray(graph.indptr)), shape=graph.shape
    ).toarray()


def rows_of(graph):
    return np.repeat(np.arange(graph.num_dst), np.diff(graph.indptr))


def same_graph(a, b):
    return a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


def write(path, text):
    path.write_text(text)
    return path


def error_at(path, line):
    """pytest.raises matcher for ValueError("{path}:{line}: ...")."""
    return pytest.raises(ValueError, match=re.escape(f"{path}:{line}:"))


# ---------------------------------------------------------------------------------------
# uniform_graph


def test_uniform_degrees_exact_and_shape():
    g = datasets.uniform_graph(500, 7, seed=3)
    assert isinstance(g, ca.CSRGraph) and g.device == "cpu"
    assert g.shape == (500, 500) and g.num_edges == 3500
    assert np.all(g.degrees() == 7)
    assert g.index_dtype == np.int32
    assert g.indices.min() >= 0 and g.indices.max() < 500


def test_uniform_num_src_and_degree_zero():
    g = datasets.uniform_graph(10, 4, num_src=3, seed=0)
    assert g.shape == (10, 3) and g.indices.max() < 3
    empty = datasets.uniform_graph(6, 0)
    assert empty.num_edges == 0 and empty.shape == (6, 6)


def test_uniform_seed_determinism():
    assert same_graph(datasets.uniform_graph(100, 5, seed=1), datasets.uniform_graph(100, 5, seed=1))
    assert not same_graph(datasets.uniform_graph(100, 5, seed=1), datasets.uniform_graph(100, 5, seed=2))


def test_uniform_bad_arguments():
    with pytest.raises(ValueError, match="degree"):
        datasets.uniform_graph(10, -1)
    with pytest.raises(TypeError, match="num_nodes"):
        datasets.uniform_graph(10.0, 2)


@pytest.mark.parametrize(
    "generator, args, kwargs, message",
    [
        ("uniform_graph", (0, 2**63), {}, "degree must be at most 2\\*\\*62"),  # was OverflowError
        ("uniform_graph", (10**23, 1), {}, "num_nodes must be at most"),
        ("uniform_graph", (3, 1), {"num_src": 10**23}, "num_src must be at most"),  # was "high is out of bounds"
        ("uniform_graph", (2**40, 2**40), {}, "num_nodes \\* degree = .* the most a generator makes"),
        ("rmat_graph", (2, 2**62), {}, "edge_factor \\* 2\\*\\*scale = "),  # was "Maximum allowed dimension exceeded"
        ("contextual_sbm", (4, 1), {"num_features": 10**23}, "num_features must be at most"),
        ("contextual_sbm", (4, 1), {"num_features": 2**61}, "num_nodes \\* num_features = "),
    ],
)
def test_generators_name_sizes_beyond_64_bits(generator, args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(datasets, generator)(*args, **kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: datasets.uniform_graph(2**62, 1), r"uniform_graph\(num_nodes=4611686018427387904, degree=1\)"),
        (lambda: datasets.uniform_graph(2**31, 2**31), r"uniform_graph\(num_nodes=2147483648, degree=2147483648\)"),
    ],
)
def test_generators_name_sizes_beyond_an_address_space(call, message):
    # was NumPy's "array is too big", or the process killed writing an overcommitted array
    with pytest.raises(ValueError, match=message + " needs .* bytes of arrays, more than an address space holds"):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: datasets.uniform_graph(10**5, 4), r"uniform_graph\(num_nodes=100000, degree=4\)"),
        (lambda: datasets.rmat_graph(16, 8), r"rmat_graph\(scale=16, edge_factor=8\)"),
        (lambda: datasets.contextual_sbm(10**4, 3), r"contextual_sbm\(num_nodes=10000, degree=10, num_features=16\)"),
    ],
)
def test_generators_refuse_sizes_beyond_host_memory(monkeypatch, call, message):
    """A graph whose arrays cannot fit this machine's memory is refused before any is made."""
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 2**20)
    with pytest.raises(MemoryError, match=message + r" needs at least .* GiB of host memory; this machine has 0.0 GiB"):
        call()
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: None)  # a platform that does not say: no check
    call()


@pytest.mark.parametrize(
    "seed, error", [(-1, ValueError), ("x", TypeError), (1.5, TypeError), (True, TypeError), ([1, -2], ValueError)]
)
@pytest.mark.parametrize("generator", ["uniform_graph", "rmat_graph", "contextual_sbm"])
def test_generators_name_a_bad_seed(generator, seed, error):
    args = {"uniform_graph": (10, 2), "rmat_graph": (3, 2), "contextual_sbm": (10, 2)}[generator]
    with pytest.raises(error, match="^seed must be a non-negative integer or a numpy.random.Generator"):
        getattr(datasets, generator)(*args, seed=seed)
    same = [getattr(datasets, generator)(*args, seed=s) for s in (np.int64(3), 3, np.random.default_rng(3))]
    first = same[0][0] if isinstance(same[0], tuple) else same[0]
    for other in same[1:]:
        other = other[0] if isinstance(other, tuple) else other
        assert np.array_equal(first.indices, other.indices)


# ---------------------------------------------------------------------------------------
# rmat_graph


@pytest.fixture(scope="module")
def rmat14():
    return datasets.rmat_graph(14, seed=5)


def test_rmat_shape_and_determinism(rmat14):
    assert rmat14.shape == (1 << 14, 1 << 14)
    assert rmat14.num_edges == 16 << 14
    assert same_graph(rmat14, datasets.rmat_graph(14, seed=5))
    assert not same_graph(rmat14, datasets.rmat_graph(14, seed=6))
    small = datasets.rmat_graph(6, 4, seed=0)
    assert small.shape == (64, 64) and small.num_edges == 256


def test_rmat_in_degrees_are_heavy_tailed(rmat14):
    degrees = np.asarray(rmat14.degrees())
    mean = degrees.mean()
    assert degrees.max() > 50 * mean  # hubs
    assert (degrees == 0).mean() > 0.1  # and many empty rows
    # Rough power law: the complementary CDF falls on a line in log-log space.
    ks = 2.0 ** np.arange(2, 10)
    ccdf = np.array([(degrees >= k).mean() for k in ks])
    slope, _ = np.polyfit(np.log(ks), np.log(ccdf), 1)
    assert -2.5 < slope < -0.5, slope
    fit = np.polyval(np.polyfit(np.log(ks), np.log(ccdf), 1), np.log(ks))
    assert np.corrcoef(fit, np.log(ccdf))[0, 1] > 0.97
    # A uniform graph with the same mean has nothing of the kind.
    uniform = np.asarray(datasets.uniform_graph(1 << 14, 16).degrees())
    assert uniform.max() == 16


def test_rmat_quadrant_probabilities_set_the_skew():
    flat = np.asarray(datasets.rmat_graph(12, a=0.25, b=0.25, c=0.25, seed=0).degrees())
    skewed = np.asarray(datasets.rmat_graph(12, seed=0).degrees())
    assert flat.max() < 3 * flat.mean()
    assert skewed.max() > 20 * skewed.mean()


def test_rmat_self_loops_and_duplicates_removed():
    for name in ("self_loops", "duplicates", "scramble_ids"):  # "no" was taken as True
        for value in ("no", np.array([True, False]), None):
            with pytest.raises(TypeError, match=f"{name} must be True or False"):
                datasets.rmat_graph(4, 8, **{name: value})
    g = datasets.rmat_graph(10, self_loops=False, duplicates=False, seed=1)
    rows = rows_of(g)
    assert not np.any(rows == g.indices)
    keys = rows.astype(np.int64) * g.num_src + g.indices
    assert len(np.unique(keys)) == g.num_edges
    full = datasets.rmat_graph(10, seed=1)
    full_rows = rows_of(full)
    assert np.any(full_rows == full.indices)  # the default keeps both
    assert g.num_edges < full.num_edges


def test_rmat_quadrants_set_rows_and_columns_apart():
    """The row (destination) bit of a quadrant is its second: with b = 0.4 and c = 0.05 the
    upper half of the ids takes c + d = 0.1 of the destinations and b + d = 0.45 of the sources."""
    g = datasets.rmat_graph(10, 16, a=0.5, b=0.4, c=0.05, seed=3)
    rows = np.repeat(np.arange(g.num_dst), np.diff(g.indptr))
    assert abs(np.mean(rows >= 512) - 0.10) < 0.02
    assert abs(np.mean(g.indices >= 512) - 0.45) < 0.02


def test_rmat_without_duplicates_sorts_each_row_by_source():
    g = datasets.rmat_graph(8, 16, duplicates=False, seed=4)
    for row in range(g.num_dst):
        sources = g.indices[g.indptr[row] : g.indptr[row + 1]]
        assert np.all(np.diff(sources) > 0), row


def test_uniform_sources_cover_every_node():
    g = datasets.uniform_graph(1000, 8, num_src=3, seed=5)
    assert set(np.unique(g.indices).tolist()) == {0, 1, 2}


def test_rmat_scramble_keeps_the_degree_sequence():
    plain = np.sort(np.asarray(datasets.rmat_graph(10, seed=4).degrees()))
    scrambled = np.asarray(datasets.rmat_graph(10, scramble_ids=True, seed=4).degrees())
    assert np.array_equal(np.sort(scrambled), plain)

    # Unscrambled, the hubs are the ids with few 1 bits (0, 1, 2, 4, ...); scrambled, any ids.
    def bits(ids):
        return np.array([bin(int(i)).count("1") for i in ids])

    top = np.argsort(np.asarray(datasets.rmat_graph(10, seed=4).degrees()))[-8:]
    assert bits(top).max() <= 2
    assert bits(np.argsort(scrambled)[-8:]).max() >= 3


def test_rmat_bad_probabilities():
    with pytest.raises(ValueError, match="a, b, c"):
        datasets.rmat_graph(4, a=0.6, b=0.3, c=0.3)


# ---------------------------------------------------------------------------------------
# contextual_sbm


def test_sbm_shapes_and_types():
    g, x, y = datasets.contextual_sbm(600, 4, degree=8, num_features=5, seed=0)
    assert g.shape == (600, 600)
    assert x.shape == (600, 5) and x.dtype == np.float32
    assert y.shape == (600,) and y.dtype == np.int64
    assert np.array_equal(np.bincount(y), [150] * 4)  # balanced classes
    assert abs(g.num_edges / 600 - 8) < 0.5  # mean degree as asked


@pytest.mark.parametrize("homophily", [0.9, 0.5, 0.1])
def test_sbm_homophily_as_asked(homophily):
    g, _, y = datasets.contextual_sbm(4000, 5, degree=10, homophily=homophily, seed=1)
    measured = np.mean(y[rows_of(g)] == y[g.indices])
    assert abs(measured - homophily) < 0.03, measured


def test_sbm_features_follow_the_classes():
    _, x, y = datasets.contextual_sbm(2000, 3, num_features=16, feature_noise=0.3, seed=2)
    means = np.stack([x[y == c].mean(axis=0) for c in range(3)])
    nearest = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == y) > 0.95
    _, noisy, _ = datasets.contextual_sbm(2000, 3, num_features=16, feature_noise=3.0, seed=2)
    assert noisy.std() > 2 * x.std()


def test_sbm_determinism_and_single_class():
    a = datasets.contextual_sbm(300, 3, seed=7)
    b = datasets.contextual_sbm(300, 3, seed=7)
    assert same_graph(a[0], b[0]) and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
    c = datasets.contextual_sbm(300, 3, seed=8)
    assert not np.array_equal(a[1], c[1])
    g, _, y = datasets.contextual_sbm(50, 1, seed=0)
    assert np.all(y == 0) and g.num_edges > 0


def test_sbm_bad_arguments():
    with pytest.raises(ValueError, match="homophily"):
        datasets.contextual_sbm(100, 2, homophily=1.5)
    with pytest.raises(ValueError, match="num_classes"):
        datasets.contextual_sbm(3, 5)
    for noise in (1e39, 1e308):  # was a RuntimeWarning and features of inf
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="feature_noise = .* makes features overflow float32"):
                datasets.contextual_sbm(4, 2, feature_noise=noise)


# ---------------------------------------------------------------------------------------
# add_self_loops


def test_add_self_loops_appends_one_loop_per_row():
    g = ca.CSRGraph(np.array([0, 2, 2, 4]), np.array([1, 2, 2, 0]), 3)
    looped = datasets.add_self_loops(g)
    assert looped.indptr.tolist() == [0, 3, 4, 6]
    assert looped.indices.tolist() == [1, 2, 0, 1, 2, 0]  # row 2 already had its loop
    assert np.array_equal(np.diag(dense(looped)), [1, 1, 1])
    every = datasets.add_self_loops(g, skip_existing=False)
    assert every.num_edges == g.num_edges + 3


def test_add_self_loops_carries_values():
    g = ca.CSRGraph(np.array([0, 1, 3]), np.array([1, 0, 1]), 2)
    looped, values = datasets.add_self_loops(g, np.array([5.0, 6.0, 7.0]), fill_value=-1.0)
    assert looped.indices.tolist() == [1, 0, 0, 1]
    assert values.tolist() == [5.0, -1.0, 6.0, 7.0]


def test_add_self_loops_needs_square():
    with pytest.raises(ValueError, match="square"):
        datasets.add_self_loops(ca.CSRGraph(np.array([0, 1]), np.array([0]), 3))


# ---------------------------------------------------------------------------------------
# Matrix Market

MTX_GENERAL = """%%MatrixMarket matrix coordinate real general
% a comment
3 4 5
1 2 0.5
3 1 -2.0
1 4 1e-3
2 2 3
3 1 4.25
"""


def test_mtx_matches_scipy(tmp_path):
    path = write(tmp_path / "g.mtx", MTX_GENERAL)
    graph, values = datasets.load_mtx(path, return_values=True)
    assert graph.shape == (3, 4) and graph.num_edges == 5
    expected = _mmread_dense(path)  # sums the duplicate (3, 1)
    assert np.allclose(dense(graph, values), expected)
    assert graph.indices[graph.indptr[2] :].tolist() == [0, 0]  # duplicates stay distinct edges, file order
    assert values.dtype == np.float64
    assert isinstance(datasets.load_mtx(path), ca.CSRGraph)


def test_mtx_transpose_and_dtype(tmp_path):
    path = write(tmp_path / "g.mtx", MTX_GENERAL)
    graph, values = datasets.load_mtx(path, transpose=True, dtype=np.float32, return_values=True)
    assert graph.shape == (4, 3)
    assert values.dtype == np.float32
    assert np.allclose(dense(graph, values), _mmread_dense(path).T)


@pytest.mark.parametrize(
    "field,value,dtype,becomes",
    [
        ("integer", "500", np.int8, "-12"),  # wrapped
        ("real", "1.5", np.int32, "1"),  # cut
        ("real", "nan", np.int64, "-9223372036854775808"),
        ("real", "1e300", np.float32, "inf"),  # overflowed
        ("complex", "1 2", np.float64, "1.0"),  # imaginary part dropped
        ("integer", "-1", np.uint16, "65535"),
    ],
)
def test_loader_dtype_that_changes_a_value_is_refused(tmp_path, field, value, dtype, becomes):
    """dtype= casts the values only where each keeps its value up to rounding (as add_self_loops'
    fill_value must); astype alone returned other numbers without a word."""
    path = write(
        tmp_path / "v.mtx", f"%%MatrixMarket matrix coordinate {field} general\n2 2 2\n1 2 {value}\n2 1 {value}\n"
    )
    with pytest.raises(ValueError, match=re.escape(f"{path}: dtype={np.dtype(dtype)}") + f".*become {becomes}\\)"):
        datasets.load_mtx(path, dtype=dtype, return_values=True)
    edges = write(tmp_path / "v.txt", f"0 1 {value.split()[0]}\n1 0 3\n")
    if field != "complex":
        with pytest.raises(ValueError, match="dtype="):
            datasets.load_edge_list(edges, dtype=dtype, return_values=True)
    # casts that keep every value (rounding allowed) still load
    _, values = datasets.load_mtx(write(path, MTX_GENERAL), dtype=np.float16, return_values=True)
    assert values.dtype == np.float16 and np.array_equal(values, np.float16([0.5, 1e-3, 3, -2, 4.25]))
    path = write(tmp_path / "i.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 7.0\n")
    assert datasets.load_mtx(path, dtype=np.uint8, return_values=True)[1].tolist() == [7]


def test_edge_list_integer_dtype_keeps_integers_past_float64s(tmp_path):
    """The value column was read as float64 and then cast: with dtype=int64, 2**53 + 1 loaded
    as 2**53 without a word, and int64's largest value was refused as beyond int64, the
    message offering float64 (which changes it). Integer values are now read exactly for an
    integer dtype; values no integer dtype holds are still refused, as are non-integers."""
    path = write(tmp_path / "v.txt", f"0 1 {2**53 + 1}\n1 0 {-(2**63)}\n1 1 {2**63 - 1}\n")
    graph, values = datasets.load_edge_list(path, dtype=np.int64, return_values=True)
    assert values.dtype == np.int64 and sorted(values.tolist()) == [-(2**63), 2**53 + 1, 2**63 - 1]
    assert values[rows_of(graph) == 1].tolist() == [2**53 + 1, 2**63 - 1]  # row 1: edges 0 -> 1 and 1 -> 1
    unsigned = write(tmp_path / "u.txt", f"0 1 {2**64 - 1}\n1 0 {2**53 + 1}\n")
    _, values = datasets.load_edge_list(unsigned, dtype=np.uint64, return_values=True)
    assert values.dtype == np.uint64 and sorted(values.tolist()) == [2**53 + 1, 2**64 - 1]
    for dtype in (np.int64, np.int32):  # 2**64 - 1 fits neither: refused, as before
        with pytest.raises(ValueError, match=re.escape(f"{unsigned}: dtype={np.dtype(dtype)} cannot hold")):
            datasets.load_edge_list(unsigned, dtype=dtype, return_values=True)
    with pytest.raises(ValueError, match="dtype=uint64 cannot hold the value -1"):  # a negative value
        datasets.load_edge_list(write(unsigned, f"0 1 {2**60}\n1 0 -1\n"), dtype=np.uint64, return_values=True)
    mixed = write(tmp_path / "m.txt", f"0 1 {2**60}\n1 0 2.5\n")  # read as float64, 2.5 refused by the cast
    with pytest.raises(ValueError, match="dtype=int64 cannot hold the value 2.5"):
        datasets.load_edge_list(mixed, dtype=np.int64, return_values=True)
    assert datasets.load_edge_list(mixed, return_values=True)[1].dtype == np.float64  # no dtype: as before


def test_mtx_symmetric_pattern_with_self_loops(tmp_path):
    path = write(tmp_path / "s.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n2 1\n3 3\n")
    graph, values = datasets.load_mtx(path, return_values=True)
    assert values is None
    assert np.array_equal(dense(graph), [[0, 1, 0], [1, 0, 0], [0, 0, 1]])
    looped = datasets.load_mtx(path, add_self_loops=True)
    assert np.array_equal(dense(looped), [[1, 1, 0], [1, 1, 0], [0, 0, 1]])


def test_mtx_symmetric_entries_above_the_diagonal_are_mirrored_too(tmp_path):
    """The format stores the lower triangle; files that store upper entries exist, and scipy
    mirrors them as well: so does the loader."""
    text = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 2 5.0\n3 1 7.0\n2 2 1.5\n"
    path = write(tmp_path / "u.mtx", text)
    graph, values = datasets.load_mtx(path, return_values=True)
    assert np.array_equal(dense(graph, values), _mmread_dense(path))


def test_mtx_integer_skew_and_gzip(tmp_path):
    text = "%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n2 1 4\n3 2 -1\n"
    path = tmp_path / "k.mtx.gz"
    with gzip.open(path, "wt") as file:
        file.write(text)
    graph, values = datasets.load_mtx(path, return_values=True)
    assert values.dtype == np.int64
    assert np.array_equal(dense(graph, values), [[0, -4, 0], [4, 0, 1], [0, -1, 0]])


def test_mtx_unsigned_integer_values_are_uint64(tmp_path):
    """unsigned-integer files were read as int64: a value of 2**63 or more was refused, a
    negative one loaded. Now uint64, as scipy.io.mmread reads them."""
    header = "%%MatrixMarket matrix coordinate unsigned-integer"
    path = write(tmp_path / "u.mtx", f"{header} symmetric\n2 2 2\n1 1 5\n2 1 18446744073709551615\n")
    graph, values = datasets.load_mtx(path, return_values=True)
    assert values.dtype == np.uint64 and values.tolist() == [5, 2**64 - 1, 2**64 - 1]
    assert np.array_equal(values, _mmread_dense(path)[rows_of(graph), graph.indices])
    with error_at(path, 4):
        datasets.load_mtx(write(path, f"{header} general\n2 2 2\n1 1 5\n2 1 -5\n"))
    with pytest.raises(ValueError, match="non-negative integer"):
        datasets.load_mtx(write(path, f"{header} general\n2 2 1\n1 1 -0\n"))
    with error_at(path, 1):  # the mirrored entries would be negative
        datasets.load_mtx(write(path, f"{header} skew-symmetric\n2 2 1\n2 1 5\n"))
    dense_path = write(tmp_path / "a.mtx", "%%MatrixMarket matrix array unsigned-integer general\n2 1\n0\n7\n")
    assert datasets.load_mtx(dense_path, return_values=True)[1].tolist() == [7]


def test_mtx_array_format(tmp_path):
    path = write(tmp_path / "a.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n0\n0\n2\n")
    graph, values = datasets.load_mtx(path, return_values=True)
    assert np.array_equal(dense(graph, values), [[1, 0], [0, 2]])


def _dense_file_text(matrix, field, symmetry):
    """A dense Matrix Market file of ``matrix``, as the format lays it out: column by column,
    the lower triangle only (without the diagonal if skew) unless general."""
    rows, cols = matrix.shape
    lines = [f"%%MatrixMarket matrix array {field} {symmetry}", "% a comment", f"{rows} {cols}"]
    for j in range(cols):
        for i in range(rows):
            if symmetry == "general" or i > j or (i == j and symmetry != "skew-symmetric"):
                v = matrix[i, j]
                lines.append(f"{float(v.real)!r} {float(v.imag)!r}" if field == "complex" else repr(v.item()))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "field,symmetry",
    [
        ("real", "general"),
        ("integer", "general"),
        ("complex", "general"),
        ("real", "symmetric"),
        ("integer", "skew-symmetric"),
        ("complex", "hermitian"),
    ],
)
@pytest.mark.parametrize("transpose", [False, True])
def test_mtx_array_format_every_field_and_symmetry(tmp_path, field, symmetry, transpose):
    """Dense files give the nonzero entries of the matrix scipy.io.mmread reads, each row's in
    column order, with their values."""
    rng = np.random.default_rng(5)
    shape = (4, 3) if symmetry == "general" else (4, 4)
    matrix = rng.integers(-2, 3, shape) * (rng.random(shape) < 0.6)
    if field == "complex":
        matrix = matrix + 1j * rng.integers(-1, 2, shape)
    if symmetry == "symmetric":
        matrix = np.tril(matrix) + np.tril(matrix, -1).T
    elif symmetry == "skew-symmetric":
        matrix = np.tril(matrix, -1) - np.tril(matrix, -1).T
    elif symmetry == "hermitian":
        matrix = np.tril(matrix, -1) + np.tril(matrix, -1).conj().T + np.diag(np.diag(matrix).real)
    path = write(tmp_path / "d.mtx", _dense_file_text(matrix, field, symmetry))
    assert np.array_equal(np.asarray(scipy.io.mmread(path)), matrix)  # the file says what the test means
    graph, values = datasets.load_mtx(path, return_values=True, transpose=transpose)
    expected = matrix.T if transpose else matrix
    assert graph.shape == expected.shape
    assert np.array_equal(dense(graph, values), expected)
    assert np.count_nonzero(values) == graph.num_edges == np.count_nonzero(expected)
    for row in range(graph.num_dst):  # each row's entries by column
        assert np.all(np.diff(np.asarray(graph.indices)[graph.indptr[row] : graph.indptr[row + 1]]) > 0)


def test_mtx_array_format_with_comments_after_values(tmp_path):
    """A value followed by a comment on its line is the value. scipy 1.17's reader crashed the
    process on the last line here ("4%%MatrixMarket", no line end)."""
    path = write(tmp_path / "c.mtx", "%%MatrixMarket matrix array real general\n2 2\n1\n0\n3%x\n4%%MatrixMarket")
    graph, values = datasets.load_mtx(path, return_values=True)
    assert np.array_equal(dense(graph, values), [[1, 3], [0, 4]])


@pytest.mark.parametrize(
    "text,line,message",
    [
        ("not a header\n1 1 0\n", 1, "not a Matrix Market file"),
        ("%%MatrixMarket matrix coordinate real weird\n1 1 0\n", 1, "unsupported"),
        ("%%MatrixMarket matrix coordinate real general\n% only comments\n", 2, "size line"),
        ("%%MatrixMarket matrix coordinate real general\n3 3\n", 2, "size line"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 x\n", 2, "not an integer"),
        # int() alone read "2_0" as 20 (a 20-row matrix), where an entry "2_0" is refused
        ("%%MatrixMarket matrix coordinate real general\n2_0 3 1\n1 1 1.0\n", 2, "size '2_0' is not an integer"),
        ("%%MatrixMarket matrix array real general\n1 1_0\n1\n", 2, "size '1_0' is not an integer"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2\n", 4, "expected 3 columns"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 4 1.0\n", 4, "out of range 1..3"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n0 2 1.0\n", 4, "id 0 in a one-based file"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 abc\n", 4, "'abc' is not a number"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1.5 1 1.0\n2 2 1\n", 3, "'1.5' is not an integer"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 1\n", 4, "ends after 2 of the 3"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1.0\n\n2 2 1\n", 5, "more entries than the 1"),
        ("%%MatrixMarket matrix array pattern general\n1 1\n1\n", 1, "pattern matrix must be in coordinate format"),
        ("%%MatrixMarket matrix array real symmetric\n2 3\n1\n2\n3\n", 2, "must be square, got 2 x 3"),
        ("%%MatrixMarket matrix array real general\n1 2\n1\n2\n3\n", 5, "more than the 2 values of the 1 x 2"),
        ("%%MatrixMarket matrix array real general\n2 1\n1\nx\n", 4, "'x' is not a number"),
        # numpy.loadtxt reads a number beyond float64's range as an infinity
        ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 inf\n2 2 1e400\n", 4, "'1e400' is beyond"),
        ("%%MatrixMarket matrix array real general\n2 1\n1\n-1E999\n", 4, "(it would read as -inf)"),
        ("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 0 2e308\n", 3, "column 4: '2e308' is beyond"),
        ("%%MatrixMarket matrix array integer general\n2 1\n1\n2.5\n", 4, "'2.5' is not an integer"),
        ("%%MatrixMarket matrix array real general\n2 1\n1 2\n3\n", 3, "expected 1 column"),
        ("%%MatrixMarket matrix array complex general\n1 1\n1\n", 3, "expected 2 columns"),
        ("%%MatrixMarket matrix array real general\n0 1000000000000\n", 2, "1000000000000 nodes"),
    ],
)
def test_mtx_malformed_names_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path / "bad.mtx", text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}:") + ".*" + re.escape(message)):
        datasets.load_mtx(path)


_WELL_FORMED = {
    "mtx": [
        b"%%MatrixMarket matrix coordinate real general\n% c\n4 5 6\n1 1 1.0\n2 3 2.5\n3 5 -1\n4 4 .5\n4 1 3\n1 2 7\n",
        b"%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 1\n4 2\n",
        b"%%MatrixMarket matrix array complex hermitian\n2 2\n1 0\n2 -1\n3 0\n",
        b"%%MatrixMarket matrix array integer general\n2 2\n1\n0\n3\n4\n",
    ],
    "txt": [b"# src dst\n0 1\n1 2\n2 0\n3 1\n", b"1,2,0.5\n2,3,1.5\n"],
}
_TOKENS = [b" ", b"\n", b"-1", b"0", b"1e400", b"nan", b"inf", b"99999999999999999999", b"%", b"%%MatrixMarket",
           b"x", b"\t", b",", b"\x00", b"\xff", b"1.5", b"4611686018427387904", b"pattern", b"array", b"#"]  # fmt: skip


@settings(HYP, max_examples=300)
@given(data=st.data())
def test_mangled_files_load_or_raise_value_errors(tmp_path_factory, data):
    """A well-formed file with bytes deleted, inserted or replaced (numbers out of range,
    comment markers, header words, NUL) loads, or raises ValueError or TypeError: never
    another exception, never a crash (scipy's dense reader crashed on one such file)."""
    ext = data.draw(st.sampled_from(sorted(_WELL_FORMED)))
    raw = bytearray(data.draw(st.sampled_from(_WELL_FORMED[ext])))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw)))
        edit = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        token = data.draw(st.sampled_from(_TOKENS))
        raw[at : at + (data.draw(st.integers(1, 5)) if edit == "delete" else edit == "replace")] = (
            b"" if edit == "delete" else token
        )
    path = tmp_path_factory.mktemp("mangled") / f"f.{ext}"
    path.write_bytes(bytes(raw))
    kwargs = data.draw(st.sampled_from([{}, {"transpose": True, "add_self_loops": True}, {"return_values": True}]))
    try:
        datasets.load(path, **kwargs)
    except (ValueError, TypeError):
        pass


def test_missing_files(tmp_path):
    for loader in (datasets.load_mtx, datasets.load_npz, datasets.load_edge_list, datasets.load):
        with pytest.raises(FileNotFoundError, match="nope"):
            loader(tmp_path / "nope.mtx")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"transpose": 1}, TypeError, "transpose must be True or False, got int"),
        ({"add_self_loops": "yes"}, TypeError, "add_self_loops must be True or False, got str"),
        ({"return_values": None}, TypeError, "return_values must be True or False, got NoneType"),
        ({"dtype": "no such type"}, TypeError, "dtype must be a NumPy dtype, got 'no such type'"),
        ({"dtype": "\n"}, TypeError, r"dtype must be a NumPy dtype, got '\\n'"),  # NumPy: uint64
        ({"dtype": "\t"}, TypeError, r"dtype must be a NumPy dtype, got '\\t'"),  # NumPy: int64
        ({"dtype": str}, ValueError, "dtype must be a bool, integer, float or complex dtype, got <U0"),
        ({"dtype": "datetime64[s]"}, ValueError, "dtype must be a bool, .* got datetime64"),
        ({"dtype": object}, ValueError, "dtype must be a bool, .* got object"),
        ({"max_nodes": 2.5}, TypeError, "max_nodes must be an integer"),
    ],
    ids=[
        "transpose",
        "add_self_loops",
        "return_values",
        "dtype-name",
        "dtype-newline",
        "dtype-tab",
        "dtype-str",
        "dtype-datetime",
        "dtype-object",
        "max_nodes",
    ],
)
@pytest.mark.parametrize("loader", ["load_mtx", "load_npz", "load_edge_list", "load"])
def test_loader_options_checked_before_the_file(tmp_path, loader, kwargs, error, message):
    """A bad option is named before the file is read: the same error for a file that does not exist."""
    with pytest.raises(error, match=message):
        getattr(datasets, loader)(tmp_path / "nope.mtx", **kwargs)


def test_flags_of_edge_lists_and_self_loops_are_bools(tmp_path):
    path = write(tmp_path / "e.txt", "1 2\n2 1\n")
    with pytest.raises(TypeError, match="one_based must be True or False, got int"):
        datasets.load_edge_list(path, one_based=1)
    assert datasets.load_edge_list(path, one_based=np.True_, transpose=np.False_).shape == (2, 2)
    graph = ca.CSRGraph(np.array([0, 1, 2]), np.array([1, 0]), 2)
    with pytest.raises(TypeError, match="skip_existing must be True or False, got str"):
        datasets.add_self_loops(graph, skip_existing="no")
    assert datasets.add_self_loops(graph, skip_existing=np.False_).num_edges == 4


# ---------------------------------------------------------------------------------------
# .npz


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_npz_scipy_formats(tmp_path, fmt):
    matrix = scipy.sparse.random_array((30, 20), density=0.2, format=fmt, rng=0)
    path = tmp_path / "m.npz"
    scipy.sparse.save_npz(path, matrix)
    graph, values = datasets.load_npz(path, return_values=True)
    assert graph.shape == (30, 20)
    assert np.allclose(dense(graph, values), matrix.toarray())
    graph_t, values_t = datasets.load_npz(path, transpose=True, return_values=True)
    assert np.allclose(dense(graph_t, values_t), matrix.toarray().T)


def test_npz_indptr_indices_and_edge_index(tmp_path):
    path = tmp_path / "csr.npz"
    np.savez(path, indptr=np.array([0, 1, 3]), indices=np.array([2, 0, 1]), num_src=3)
    graph = datasets.load_npz(path)
    assert graph.shape == (2, 3) and graph.indices.tolist() == [2, 0, 1]
    path = tmp_path / "ei.npz"
    np.savez(path, edge_index=np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), data=np.array([1.0, 2.0, 3.0, 4.0]))
    graph, values = datasets.load_npz(path, return_values=True)
    assert graph.shape == (3, 3)
    # edge_index row 0 = sources, row 1 = destinations (PyG)
    assert np.array_equal(dense(graph, values), [[0, 0, 3], [1, 0, 4], [0, 2, 0]])


def test_npz_transposed_keeps_each_value_with_its_entry(tmp_path):
    """transpose=True of indptr/indices arrays: the values follow their entries into the
    transpose's order (a graph whose rows reorder its entries)."""
    path = tmp_path / "csr.npz"
    indptr, indices, data = np.array([0, 2, 4]), np.array([2, 0, 1, 0]), np.array([1.0, 2.0, 3.0, 4.0])
    np.savez(path, indptr=indptr, indices=indices, num_src=3, data=data)
    graph, values = datasets.load_npz(path, transpose=True, return_values=True)
    expected = scipy.sparse.csr_array((data, indices, indptr), shape=(2, 3)).toarray().T
    assert graph.shape == (3, 2) and np.array_equal(dense(graph, values), expected)


def test_npz_edge_index_id_equal_to_num_nodes_is_refused(tmp_path):
    path = tmp_path / "ei.npz"
    np.savez(path, edge_index=np.array([[0, 3], [1, 2]]), num_nodes=3)
    with npz_error(path, "node ids >= num_nodes = 3"):
        datasets.load_npz(path)


def test_npz_errors_name_the_file(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, something=np.arange(3))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*no graph found"):
        datasets.load_npz(path)
    path = write(tmp_path / "text.npz", "not a zip")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        datasets.load_npz(path)
    path = tmp_path / "broken.npz"
    np.savez(path, indptr=np.array([0, 5]), indices=np.array([0]))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*indptr"):
        datasets.load_npz(path)


def _npy_member(array=None, shape=None, dtype="<i8"):
    """The bytes of a .npy member: of ``array``, or a header declaring ``shape`` over 64 bytes."""
    buffer = io.BytesIO()
    if array is not None:
        np.save(buffer, np.asarray(array))
        return buffer.getvalue()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + bytes(64)


def _zip(path, **members):
    with zipfile.ZipFile(path, "w") as archive:
        for key, member in members.items():
            archive.writestr(f"{key}.npy", member)
    return path


@pytest.mark.parametrize(
    "members, key",
    [
        (dict(edge_index=_npy_member(shape=(2, 10**12))), "edge_index"),
        (dict(indptr=_npy_member(shape=(10**12,)), indices=_npy_member(np.zeros(0, np.int64))), "indptr"),
        (dict(edge_index=_npy_member([[0], [1]]), data=_npy_member(shape=(10**12,), dtype="<f8")), "data"),
        (
            dict(
                format=_npy_member("csr"),
                shape=_npy_member([3, 3]),
                indptr=_npy_member(shape=(10**12,)),
                indices=_npy_member([0]),
                data=_npy_member([1.0]),
            ),
            "indptr",
        ),
    ],
    ids=["edge_index", "indptr", "data", "scipy"],
)
def test_npz_member_declaring_more_than_it_holds_is_refused_before_reading(tmp_path, members, key):
    """np.load allocates the shape a .npy header declares before reading it: a file of a few
    hundred bytes asked for 8-16 TB (NumPy's MemoryError naming nothing; under the machine's
    memory, the allocation made). Now the header is checked against the member first."""
    path = _zip(tmp_path / "huge.npz", **members)
    with pytest.raises(ValueError, match=re.escape(str(path)) + f": array '{key}' declares shape .* holds 64 bytes"):
        datasets.load_npz(path)


def test_npz_member_beyond_memory_is_named(tmp_path, monkeypatch):
    path = tmp_path / "e.npz"
    np.savez(path, edge_index=np.zeros((2, 64), np.int64))  # 1 KiB
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 512)
    with pytest.raises(MemoryError, match=re.escape(str(path)) + ": array 'edge_index' of shape \\(2, 64\\)"):
        datasets.load_npz(path)


def test_npz_damaged_members_are_named(tmp_path):
    """A member that is no .npy array (np.load returned its bytes: AttributeError), one with a
    bad CRC (zipfile's BadZipFile) and deflate data that do not decompress (zlib.error) are
    ValueErrors naming the file and the array."""
    junk = _zip(tmp_path / "junk.npz", edge_index=b"not an array")
    with pytest.raises(ValueError, match=re.escape(str(junk)) + ": array 'edge_index' is not a .npy array"):
        datasets.load_npz(junk)
    junk_count = _zip(tmp_path / "count.npz", edge_index=_npy_member([[0, 1], [1, 0]]), num_nodes=b"junk")
    with pytest.raises(ValueError, match="array 'num_nodes' is not a .npy array"):
        datasets.load_npz(junk_count)
    stored = tmp_path / "stored.npz"
    np.savez(stored, edge_index=np.array([[0, 1, 2], [1, 2, 0]]))
    raw = bytearray(stored.read_bytes())
    raw[raw.find(b"\x93NUMPY") + 130] ^= 0xFF  # a byte of the array's data
    stored.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="array 'edge_index' cannot be read \\(BadZipFile: Bad CRC-32"):
        datasets.load_npz(stored)
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, edge_index=np.arange(2000).reshape(2, 1000) % 7)
    raw = bytearray(compressed.read_bytes())
    start = raw.find(b"edge_index.npy") + 34  # the deflate stream
    raw[start : start + 30] = bytes(b ^ 0x55 for b in raw[start : start + 30])
    compressed.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=re.escape(str(compressed)) + ": array 'edge_index' cannot be read"):
        datasets.load_npz(compressed)


def test_damaged_gzip_text_is_named(tmp_path):
    """A .gz whose deflate data do not decompress raised zlib.error, naming nothing."""
    raw = bytearray(gzip.compress(b"0 1\n1 2\n2 0\n" * 100))
    raw[15:30] = bytes(b ^ 0x5A for b in raw[15:30])
    for name, load in (("e.txt.gz", datasets.load_edge_list), ("e.mtx.gz", datasets.load_mtx)):
        path = tmp_path / name
        path.write_bytes(bytes(raw))
        with pytest.raises(ValueError, match=re.escape(str(path)) + ": cannot read the file"):
            load(path)


def test_text_beyond_memory_is_refused_while_read(tmp_path, monkeypatch):
    """The loaders read a file whole: a pipe that never ends (or /dev/zero) was read until
    the process ran out of memory, and a .gz that inflates beyond it likewise. Now the read
    stops with a MemoryError naming the file once it passes the machine's memory (here
    made 4 kB), before any parsing."""
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 4096)
    small = write(tmp_path / "small.txt", "0 1\n1 2\n")
    assert datasets.load_edge_list(small).num_edges == 2  # within the bound: read as before
    lines = b"0 1\n" * 2000  # 8000 bytes, about 60 compressed
    for name, data in (("big.txt", lines), ("big.mtx.gz", gzip.compress(b"%%MatrixMarket" + lines))):
        path = tmp_path / name
        path.write_bytes(data)
        load = datasets.load_mtx if ".mtx" in name else datasets.load_edge_list
        with pytest.raises(MemoryError, match=re.escape(str(path)) + ": the file holds more than"):
            load(path)
    if hasattr(os, "mkfifo"):  # a pipe whose writer sends more than the bound
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: _write_until_closed(fifo, lines))
        writer.start()
        with pytest.raises(MemoryError, match=re.escape(str(fifo)) + ": the file holds more than"):
            datasets.load_edge_list(fifo)
        writer.join(timeout=10)
        assert not writer.is_alive()


def _write_until_closed(path, data):
    with open(path, "wb") as pipe:
        try:
            while True:
                pipe.write(data)
        except BrokenPipeError:
            pass


# ---------------------------------------------------------------------------------------
# Edge lists


def test_edge_list_comments_blank_lines_and_commas(tmp_path):
    path = write(tmp_path / "e.txt", "# src dst\n0 1\n\n1\t2   # trailing comment\n% konect comment\n2,0\n0 , 2\n")
    graph = datasets.load_edge_list(path)
    assert graph.shape == (3, 3)
    # line "u v" is the edge u -> v: row v holds source u
    assert np.array_equal(dense(graph), [[0, 0, 1], [1, 0, 0], [1, 1, 0]])
    assert graph.indices.tolist() == [2, 0, 1, 0]  # file order within a row


def test_edge_list_one_based_transpose_values_num_nodes(tmp_path):
    path = write(tmp_path / "e.csv", "1,2,0.5\n2,3,1.5\n3,1,2\n")
    graph, values = datasets.load_edge_list(path, one_based=True, return_values=True)
    assert graph.shape == (3, 3)
    assert np.array_equal(dense(graph, values), [[0, 0, 2], [0.5, 0, 0], [0, 1.5, 0]])
    transposed, values_t = datasets.load_edge_list(path, one_based=True, transpose=True, return_values=True)
    assert np.array_equal(dense(transposed, values_t), dense(graph, values).T)
    wide = datasets.load_edge_list(path, one_based=True, num_nodes=10, dtype=np.float32)
    assert wide.shape == (10, 10)
    looped = datasets.load_edge_list(path, one_based=True, add_self_loops=True)
    assert np.array_equal(np.diag(dense(looped)), [1, 1, 1])


def test_edge_list_extra_columns_and_explicit_delimiter(tmp_path):
    path = write(tmp_path / "k.tsv", "0;1;2.0;1700000000\n1;0;3.0;1700000001\n")
    graph, values = datasets.load_edge_list(path, delimiter=";", return_values=True)
    assert np.array_equal(dense(graph, values), [[0, 3], [2, 0]])


def test_lines_ending_in_a_lone_carriage_return(tmp_path):
    """Classic Mac line ends: each \\r ends a line, as \\n and \\r\\n do (the whole file was one
    line: an edge list kept its first edge and dropped the rest as extra columns)."""
    path = write(tmp_path / "mac.txt", "# src dst\r0 1\r1 2\r\r2 0\r")
    graph = datasets.load_edge_list(path)
    assert graph.num_edges == 3
    assert np.array_equal(dense(graph), [[0, 0, 1], [1, 0, 0], [0, 1, 0]])
    with error_at(path, 3):  # lines are numbered as an editor shows them
        datasets.load_edge_list(write(path, "0 1\r1 2\r2 x\r"))
    mtx = write(tmp_path / "mac.mtx", MTX_GENERAL.replace("\n", "\r"))
    assert same_graph(datasets.load_mtx(mtx), datasets.load_mtx(write(tmp_path / "unix.mtx", MTX_GENERAL)))


def test_edge_list_empty_file(tmp_path):
    graph = datasets.load_edge_list(write(tmp_path / "e.txt", "# nothing\n\n"))
    assert graph.num_edges == 0 and graph.shape == (0, 0)
    graph = datasets.load_edge_list(write(tmp_path / "e2.txt", ""), num_nodes=4)
    assert graph.shape == (4, 4)


@pytest.mark.parametrize("text", ["", "0 1\n"])
@pytest.mark.parametrize("num_nodes, error", [(2**40, MemoryError), (2**61, ValueError)])
def test_edge_list_num_nodes_beyond_memory_is_named(tmp_path, monkeypatch, text, num_nodes, error):
    """An explicit num_nodes is taken as asked, but one whose indptr cannot fit this machine's
    memory (or any address space) raised NumPy's MemoryError or "array is too big", naming
    neither num_nodes nor the loader, or the error named from_edge_index's num_dst."""
    monkeypatch.setattr(backend, "host_memory_bytes", lambda: 2**30)
    path = write(tmp_path / "e.txt", text)
    with pytest.raises(error, match=rf"^load_edge_list\(num_nodes={num_nodes}\) needs "):
        datasets.load_edge_list(path, num_nodes=num_nodes)


@pytest.mark.parametrize(
    "text,kwargs,line,message",
    [
        ("0 1\n# c\n1 x\n", {}, 3, "column 2: 'x' is not an integer"),
        ("0 1\n1.5 2\n", {}, 2, "'1.5' is not an integer"),
        ("0 1\n\n1 2 3\n", {}, 3, "expected 2 columns"),
        ("0 1 1.0\n1 2\n", {}, 2, "expected 3 columns"),
        ("7\n", {}, 1, "at least 2 columns"),
        ("0 1\n-1 2\n", {}, 2, "negative node id -1"),
        ("1 2\n0 1\n", {"one_based": True}, 2, "column 1: id 0 in a one-based file"),
        ("0 1\n1 5\n", {"num_nodes": 3}, 2, "out of range 0..2"),
        ("0 1 0.5\n1 2 oops\n", {}, 2, "'oops' is not a number"),
        ("0 1 -Infinity\n1 2 -1e309\n", {}, 2, "column 3: '-1e309' is beyond float64's range"),
    ],
)
def test_edge_list_malformed_names_file_and_line(tmp_path, text, kwargs, line, message):
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:{line}:") + ".*" + re.escape(message)):
        datasets.load_edge_list(path, **kwargs)


def test_edge_list_large_file_error_found_by_line(tmp_path):
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 5000, (100_000, 2))
    lines = [f"{s} {d}" for s, d in edges.tolist()]
    lines[77_777] = "12 twelve"
    path = write(tmp_path / "big.txt", "# header\n" + "\n".join(lines) + "\n")
    with error_at(path, 77_779):
        datasets.load_edge_list(path)
    lines[77_777] = "12 13"
    edges[77_777] = (12, 13)
    write(path, "\n".join(lines))
    graph = datasets.load_edge_list(path)
    assert graph.num_edges == 100_000
    n = int(edges.max()) + 1
    expected, _ = ca.CSRGraph.from_edge_index(edges[:, 0], edges[:, 1], n, n)
    assert same_graph(graph, expected)


def test_infinities_load_and_numbers_beyond_float64_are_found_by_line(tmp_path):
    """Infinities written as such load in every spelling numpy.loadtxt reads, however many; a
    number that only overflows to one is a ValueError naming its line, late in a large file."""
    spellings = ["inf", "-inf", "+Inf", "INFINITY", "-Infinity", "1.5", "nan"]
    lines = [f"{i % 900} {(i * 7) % 900} {spellings[i % len(spellings)]}" for i in range(200_000)]
    path = write(tmp_path / "inf.txt", "\n".join(lines) + "\n")
    graph, values = datasets.load_edge_list(path, return_values=True)
    written = np.array([spellings[i % len(spellings)] for i in range(200_000)], dtype=np.float64)
    np.testing.assert_array_equal(np.sort(values), np.sort(written))  # NaNs sort last, equal
    lines[199_990] = "3 4 1e999"
    write(path, "\n".join(lines) + "\n")
    with error_at(path, 199_991):
        datasets.load_edge_list(path)


def test_load_dispatches_on_the_name(tmp_path):
    mtx = write(tmp_path / "g.mtx", MTX_GENERAL)
    assert datasets.load(mtx).shape == (3, 4)
    npz = tmp_path / "g.npz"
    scipy.sparse.save_npz(npz, scipy.sparse.csr_array(np.eye(3)))
    assert datasets.load(npz).num_edges == 3
    edges = write(tmp_path / "g.edges", "0 1\n")
    assert datasets.load(edges).num_edges == 1


def test_names_in_any_case_and_as_bytes(tmp_path):
    """A name's suffix picks the loader and gzip whatever its case; a bytes path works as a str one."""
    gz = tmp_path / "UP.MTX.GZ"
    gz.write_bytes(gzip.compress(MTX_GENERAL.encode()))
    assert datasets.load(gz).shape == (3, 4)  # was "not a Matrix Market file"
    edges = tmp_path / "E.TXT.Gz"
    edges.write_bytes(gzip.compress(b"0 1\n2 0\n"))
    for path in (edges, os.fsencode(edges)):
        assert datasets.load_edge_list(path).num_edges == 2  # a bytes name was not gunzipped
        assert datasets.load(path).num_edges == 2  # a bytes path raised TypeError


def test_errors_of_a_bytes_path_name_the_file_as_a_str_one(tmp_path):
    """A malformed file given by a bytes path: load_npz raised str.startswith's TypeError (about
    bytes, naming nothing) instead of its ValueError naming the file, and the text loaders
    named the file as b'...'."""
    mtx = write(tmp_path / "bad.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 9 1.0\n")
    edges = write(tmp_path / "bad.txt", "0 1\n1 x\n")
    npz = tmp_path / "bad.npz"
    np.savez(npz, indptr=np.array([0, 5]), indices=np.array([0]))
    for load, path in ((datasets.load_mtx, mtx), (datasets.load_edge_list, edges), (datasets.load_npz, npz)):
        for name in (path, os.fsencode(path)):
            for loader in (load, datasets.load):
                with pytest.raises(ValueError, match="^" + re.escape(str(path)) + ":"):
                    loader(name)


@pytest.mark.parametrize("bad", [None, 3, 1.5, ["g.mtx"]])
@pytest.mark.parametrize("loader", ["load", "load_mtx", "load_npz", "load_edge_list"])
def test_a_path_of_another_type_is_named(loader, bad):
    """os.fspath's TypeError ("expected str, bytes or os.PathLike object, not NoneType") named no argument."""
    with pytest.raises(TypeError, match=r"^path must be a str, bytes or os\.PathLike file name, got "):
        getattr(datasets, loader)(bad)


# ---------------------------------------------------------------------------------------
# Bad contents and bad arguments (issue 13, items 5, 6 and 8)


def npz_error(path, *words):
    """pytest.raises matcher for ValueError("{path}: ...") holding ``words`` in order."""
    return pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + ".*".join(re.escape(w) for w in words))


def test_npz_refuses_non_integer_index_arrays_and_counts(tmp_path):
    path = tmp_path / "float.npz"
    np.savez(path, edge_index=np.array([[0.5, 1.9], [1, 2]]))
    with npz_error(path, "'edge_index'", "integer"):  # was truncated to sources [0, 1]
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[0.0, 1.0], [1.0, 2.0]]))  # integral floats too: ids are not floats
    with npz_error(path, "'edge_index'", "integer"):
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[True, False], [False, True]]))
    with npz_error(path, "'edge_index'", "integer"):
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), num_nodes=3.5)
    with npz_error(path, "'num_nodes'", "integer"):
        datasets.load_npz(path)
    np.savez(path, indptr=np.array([0, 1, 2]), indices=np.array([0, 1]), num_src=2.7)
    with npz_error(path, "'num_src'", "integer"):
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[0, 2**63 + 5], [1, 2]], dtype=np.uint64))
    with npz_error(path, "'edge_index'", "node id"):
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]], dtype=np.uint16), num_nodes=np.array([4]))
    assert datasets.load_npz(path).shape == (4, 4)  # unsigned ids and a one-element count are fine


@pytest.mark.parametrize(
    "arrays",
    [
        dict(format=np.array("coo"), shape=np.array([3, 3]), row=np.array([0, 1]), data=np.ones(2)),  # no col
        dict(format=np.array("csr"), shape=np.array([3, 3]), data=np.ones(2)),  # no indices, indptr
        dict(format=np.array(5), shape=np.array([3, 3])),  # a format that is not text
        dict(
            format=np.array("coo"),
            shape=np.array([2, 2]),
            row=np.array([0j, 1j]),
            col=np.array([0, 1]),
            data=np.ones(2),
        ),  # complex indices
    ],
    ids=["coo-without-col", "csr-without-indices", "numeric-format", "complex-row"],
)
def test_npz_malformed_scipy_archive_is_a_value_error(tmp_path, arrays):
    """An archive laid out like scipy.sparse.save_npz's but malformed: scipy's reader raised
    KeyError or AttributeError from inside, or warned and dropped imaginary parts."""
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with npz_error(path, "not a valid scipy.sparse.save_npz file"):
        datasets.load_npz(path)


@pytest.mark.parametrize("shape", [(3,), (2, 2, 2)])
def test_npz_scipy_array_of_other_than_two_dimensions_is_refused(tmp_path, shape):
    """scipy.sparse.save_npz writes 1-D and n-D sparse arrays too: a 1-D one raised IndexError
    from the loader, a 3-D one a ValueError about csr_from_edges' arguments."""
    path = tmp_path / "nd.npz"
    scipy.sparse.save_npz(path, scipy.sparse.coo_array(np.ones(shape)))
    with npz_error(path, f"a {len(shape)}-D sparse array", "2-D"):
        datasets.load_npz(path)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_scipy_archive_of_float_indices_or_text_data_is_refused(tmp_path, compressed):
    """scipy's reader cut float index arrays to integers (row 1.5 became row 1) and kept text
    data: refused by name, as in the indptr/indices and edge_index layouts."""
    save = np.savez_compressed if compressed else np.savez
    path = tmp_path / "s.npz"
    coo = dict(format=np.array("coo"), shape=np.array([3, 3]), row=np.array([0, 1]), col=np.array([2, 0]))
    save(path, **dict(coo, row=np.array([0.0, 1.5]), data=np.ones(2)))
    with npz_error(path, "'row'", "integer dtype", "float64"):
        datasets.load_npz(path)
    csr = dict(format=np.array("csr"), shape=np.array([2, 3]), indptr=np.array([0, 1, 2]), indices=np.array([2, 0]))
    save(path, **dict(csr, indices=np.array([2.0, 0.0]), data=np.ones(2)))
    with npz_error(path, "'indices'", "integer dtype"):
        datasets.load_npz(path)
    save(path, **dict(csr, data=np.array(["a", "b"])))
    with npz_error(path, "'data'", "numeric"):
        datasets.load_npz(path, return_values=True)
    save(path, **dict(coo, data=np.ones(2)))  # the archive scipy writes still loads
    assert same_graph(datasets.load_npz(path), ca.CSRGraph(np.array([0, 1, 2, 2]), np.array([2, 0]), 3))


@pytest.mark.parametrize("key", ["data", "values"])
@pytest.mark.parametrize("length", [1, 3, 5])
def test_npz_refuses_data_of_the_wrong_length(tmp_path, key, length):
    path = tmp_path / "d.npz"
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), **{key: np.arange(float(length))})
    with npz_error(path, f"'{key}'", f"{length} entr", "2 edges"):  # was cut (5) or an IndexError (1)
        datasets.load_npz(path, return_values=True)
    np.savez(path, indptr=np.array([0, 1, 2]), indices=np.array([0, 1]), **{key: np.arange(float(length))})
    with npz_error(path, f"'{key}'", f"{length} entr", "2 edges"):  # was returned at full length
        datasets.load_npz(path, return_values=True)


def test_npz_refuses_scalar_and_non_numeric_data(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), data=np.float64(3.0))
    with npz_error(path, "'data'", "scalar"):
        datasets.load_npz(path, return_values=True)
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), data=np.array(["a", "b"]))
    with npz_error(path, "'data'", "numeric"):
        datasets.load_npz(path, return_values=True, dtype=np.float32)
    np.savez(path, edge_index=np.array([[0, 1], [1, 2]]), data=np.ones((2, 3)))
    graph, values = datasets.load_npz(path, return_values=True)  # one row per edge is fine
    assert values.shape == (2, 3) and graph.num_edges == 2


def test_edge_list_refuses_a_node_count_far_beyond_its_edges(tmp_path):
    path = write(tmp_path / "e.txt", "0 10000000000\n")  # tried to allocate 74.5 GiB
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: column 2: node id 10000000000") + ".*num_nodes="):
        datasets.load_edge_list(path)
    big = 2**21  # beyond max(2**20, 16 per edge) for 3 edges, but small enough to build
    path = write(tmp_path / "e2.txt", f"# ids\n1 2\n{big} 3\n2 1\n")
    with error_at(path, 3):
        datasets.load_edge_list(path)
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: column 1: node id {big} makes {big} nodes")):
        datasets.load_edge_list(path, one_based=True)  # the id as written in the file
    with pytest.raises(ValueError, match=re.escape(f"{path}:3:") + ".*more than max_nodes = 10"):
        datasets.load_edge_list(path, max_nodes=10)
    assert datasets.load_edge_list(path, num_nodes=big + 1).shape == (big + 1, big + 1)  # explicit: allowed
    assert datasets.load_edge_list(path, max_nodes=big + 1).shape == (big + 1, big + 1)
    assert datasets.load(path, max_nodes=big + 1).shape == (big + 1, big + 1)
    near = write(tmp_path / "e3.txt", f"0 {2**20 - 1}\n")  # within the allowance: loads as before
    assert datasets.load_edge_list(near).shape == (2**20, 2**20)
    with pytest.raises(ValueError, match="num_nodes"):
        datasets.load_edge_list(near, num_nodes=2**63)
    with pytest.raises(TypeError, match="max_nodes"):
        datasets.load_edge_list(near, max_nodes=1.5)


MTX_HEADER = "%%MatrixMarket matrix coordinate real general\n"


def test_mtx_refuses_sizes_far_beyond_its_entries(tmp_path):
    path = write(tmp_path / "big.mtx", MTX_HEADER + "1000000000000 1000000000000 1\n1 1 1.0\n")  # was 7.28 TiB
    with pytest.raises(ValueError, match=re.escape(f"{path}:2:") + ".*1000000000000 nodes.*max_nodes=1000000000000"):
        datasets.load_mtx(path)
    big = 2**21
    for size in (f"{big} 3 1", f"3 {big} 1"):
        path = write(tmp_path / "tall.mtx", MTX_HEADER + f"% comment\n{size}\n1 1 1.0\n")
        with error_at(path, 3):
            datasets.load_mtx(path)
        assert max(datasets.load_mtx(path, max_nodes=big).shape) == big
        assert max(datasets.load(path, max_nodes=big).shape) == big
    path = write(tmp_path / "empty.mtx", MTX_HEADER + f"{big} {big} 0\n")
    with error_at(path, 2):
        datasets.load_mtx(path)
    path = write(tmp_path / "ok.mtx", MTX_HEADER + f"{2**20} 5 1\n1 1 1.0\n")  # within the allowance
    assert datasets.load_mtx(path).shape == (2**20, 5)


def test_node_limit_error_keeps_its_parts_through_pickle(tmp_path):
    """The refusal is a ValueError whose parts stay apart, so that a caller with its own way of
    setting the limit (csrattn bench --max-nodes) can name it; pickled (between processes) and
    copied it keeps them."""
    import copy
    import pickle

    path = write(tmp_path / "big.mtx", MTX_HEADER + "5000000 5000000 1\n1 1 1.0\n")
    with pytest.raises(datasets.base.NodeLimitError) as caught:
        datasets.load(path)
    error = caught.value
    assert isinstance(error, ValueError) and error.count == 5000000
    assert str(error).endswith(
        "without an explicit argument (max(1048576, 16 per edge)); pass max_nodes=5000000 "
        "if the graph really has that many nodes, or renumber them"
    )
    assert error.message("--max-nodes").startswith(f"{path}:2: the size line declares a 5000000 x 5000000 matrix: ")
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is type(error) and str(clone) == str(error)
        assert clone.message("--max-nodes") == error.message("--max-nodes")


def test_mtx_dense_file_shorter_than_its_size_line(tmp_path):
    path = write(tmp_path / "a.mtx", "%%MatrixMarket matrix array real general\n100000 100000\n1\n")  # 74.5 GiB
    with pytest.raises(ValueError, match=re.escape(f"{path}:3:") + ".*1 of the 10000000000 values.*line 2"):
        datasets.load_mtx(path)
    path = write(tmp_path / "s.mtx", "%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n3\n4\n5\n")
    with error_at(path, 7):
        datasets.load_mtx(path)
    write(path, "%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n3\n4\n5\n6\n")
    assert datasets.load_mtx(path).num_edges == 9


@pytest.mark.parametrize(
    "header,size,name",
    [
        ("coordinate real general", "99999999999999999999 3 1", "rows"),
        ("coordinate real general", "3 99999999999999999999 1", "columns"),
        ("coordinate real general", "3 3 99999999999999999999", "entries"),
        ("coordinate pattern symmetric", f"{2**62} {2**62} 1", "rows"),
        ("array real general", "99999999999999999999 1", "rows"),
        ("array real general", "1 99999999999999999999", "columns"),
    ],
)
def test_mtx_huge_size_names_file_and_line(tmp_path, header, size, name):
    path = write(tmp_path / "huge.mtx", f"%%MatrixMarket matrix {header}\n% c\n{size}\n1 1 1.0\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: {name} = ") + ".*64-bit indices"):
        datasets.load_mtx(path)


def test_npz_refuses_node_counts_far_beyond_its_edges(tmp_path):
    path = tmp_path / "n.npz"
    np.savez(path, edge_index=np.array([[0], [10**10]]))
    with npz_error(path, "node id 10000000000", "max_nodes=10000000001"):
        datasets.load_npz(path)
    np.savez(path, edge_index=np.array([[0], [1]]), num_nodes=10**12)
    with npz_error(path, "'num_nodes'", "max_nodes=1000000000000"):
        datasets.load_npz(path)
    np.savez(path, indptr=np.array([0, 1]), indices=np.array([0]), num_src=10**12)
    with npz_error(path, "'num_src'", "max_nodes="):
        datasets.load_npz(path, transpose=True)
    np.savez(path, edge_index=np.array([[0], [1]]), num_nodes=2**63 - 1)
    with npz_error(path, "'num_nodes'", "2**62"):
        datasets.load_npz(path)
    big = 2**21
    np.savez(path, edge_index=np.array([[0], [big - 1]]))
    with npz_error(path, f"{big} nodes"):
        datasets.load_npz(path)
    assert datasets.load_npz(path, max_nodes=big).shape == (big, big)
    assert datasets.load(path, max_nodes=big).shape == (big, big)


@pytest.mark.parametrize("fmt,shape", [("coo", (10**12, 10**12)), ("csc", (10**12, 3)), ("csr", (3, 10**12))])
def test_npz_scipy_shape_far_beyond_its_entries(tmp_path, fmt, shape):
    # Only the dimensions without an index pointer array in the file are checked (a csr file
    # with 10**12 rows holds 10**12 + 1 row pointers already).
    path = tmp_path / "s.npz"
    scipy.sparse.save_npz(path, scipy.sparse.coo_array(([1.0], ([0], [0])), shape=shape).asformat(fmt))
    with npz_error(path, "shape", "max_nodes=1000000000000"):
        datasets.load_npz(path)
    big = 2**21
    shape = tuple(big if n == 10**12 else n for n in shape)
    scipy.sparse.save_npz(path, scipy.sparse.coo_array(([1.0], ([0], [0])), shape=shape).asformat(fmt))
    with npz_error(path, f"{big} nodes"):
        datasets.load_npz(path)
    graph, values = datasets.load_npz(path, max_nodes=big, return_values=True)
    assert graph.shape == shape and values.tolist() == [1.0]
    assert datasets.load_npz(path, max_nodes=big, transpose=True).shape == shape[::-1]


def test_edge_list_delimiter_and_comments_must_be_strings(tmp_path):
    path = write(tmp_path / "e.txt", "0;1 # c\n1;2\n")
    with pytest.raises(TypeError, match="delimiter must be a str or bytes, got int"):
        datasets.load_edge_list(path, delimiter=5)
    with pytest.raises(TypeError, match="comments must be"):
        datasets.load_edge_list(path, comments=5)
    with pytest.raises(TypeError, match="comments must be"):
        datasets.load_edge_list(path, comments=["#", 5])
    with pytest.raises(TypeError, match="delimiter"):
        datasets.load_edge_list(path, delimiter=[";"])
    with pytest.raises(ValueError, match="delimiter must not contain a line break"):
        datasets.load_edge_list(path, delimiter="\n")
    assert datasets.load_edge_list(path, delimiter=b";", comments=b"#").num_edges == 2
    assert datasets.load_edge_list(path, delimiter=";", comments=("#",)).num_edges == 2


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"degree": float("inf")}, ValueError, "degree must be finite"),
        ({"degree": float("nan")}, ValueError, "degree must be finite"),
        ({"degree": "3"}, TypeError, "degree must be a real number, got str"),
        ({"degree": -1}, ValueError, "degree must be >= 0"),
        ({"degree": 1e300}, ValueError, "degree \\* num_nodes"),
        ({"homophily": "0.5"}, TypeError, "homophily must be a real number"),
        ({"homophily": float("nan")}, ValueError, "homophily must be finite"),
        ({"homophily": 10**400}, ValueError, "homophily must be finite"),  # float() raised OverflowError
        ({"feature_noise": None}, TypeError, "feature_noise must be a real number"),
    ],
)
def test_sbm_real_arguments_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        datasets.contextual_sbm(20, 2, **kwargs)


def test_sbm_accepts_integer_and_numpy_degrees():
    a = datasets.contextual_sbm(50, 2, degree=3, seed=1)[0]
    b = datasets.contextual_sbm(50, 2, degree=np.float32(3.0), seed=1)[0]
    assert same_graph(a, b)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"a": "0.5"}, TypeError, "^a must be a real number, got str"),
        ({"a": float("nan")}, ValueError, "^a must be finite"),  # was accepted: all edges in row 0
        ({"b": float("inf")}, ValueError, "^b must be finite"),
        ({"b": -(10**400)}, ValueError, "^b must be finite"),
        ({"c": -0.1}, ValueError, "^c must be >= 0"),
        ({"c": None}, TypeError, "^c must be a real number"),
    ],
)
def test_rmat_probabilities_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        datasets.rmat_graph(4, **kwargs)


def test_add_self_loops_fill_must_fit_the_values():
    g = ca.CSRGraph(np.array([0, 1, 1]), np.array([1]), 2)
    with pytest.raises(ValueError, match="fill_value 0.5 cannot be stored in values of dtype int64"):
        datasets.add_self_loops(g, np.array([5]), fill_value=0.5)  # the fill silently became 0
    with pytest.raises(ValueError, match="fill_value"):
        datasets.add_self_loops(g, np.array([5], dtype=np.int8), fill_value=300)
    with pytest.raises(ValueError, match="fill_value"):
        datasets.add_self_loops(g, np.array([5]), fill_value=float("nan"))
    with pytest.raises(ValueError, match="fill_value"):
        datasets.add_self_loops(g, np.array([5.0]), fill_value=1 + 2j)
    with pytest.raises(ValueError, match="fill_value"):
        datasets.add_self_loops(g, np.array([5.0], dtype=np.float16), fill_value=1e6)  # would become inf
    with pytest.raises(TypeError, match="fill_value must be a number"):
        datasets.add_self_loops(g, np.array([5.0]), fill_value="x")
    _, values = datasets.add_self_loops(g, np.array([5]))  # the default 1.0 fits integers
    assert values.dtype == np.int64 and values.tolist() == [5, 1, 1]
    _, values = datasets.add_self_loops(g, np.array([5], dtype=np.uint8), fill_value=np.int64(7))
    assert values.dtype == np.uint8 and values.tolist() == [5, 7, 7]
    _, values = datasets.add_self_loops(g, np.array([5.0], dtype=np.float32), fill_value=0.1)  # rounding is fine
    assert values.dtype == np.float32 and values[1] == np.float32(0.1)
    _, values = datasets.add_self_loops(g, np.array([5.0], dtype=np.float16), fill_value=float("-inf"))
    assert values[1] == -np.inf
    _, values = datasets.add_self_loops(g, np.array([[1.0, 2.0]]), fill_value=np.array([3.0, 4.0]))
    assert values.tolist() == [[1.0, 2.0], [3.0, 4.0], [3.0, 4.0]]
    _, values = datasets.add_self_loops(g, np.array([True]), fill_value=1.0)
    assert values.tolist() == [True, True, True]


@pytest.mark.parametrize(
    "values", [np.array(["a"]), np.array(["2026-01-01"], dtype="datetime64[D]"), np.array([object()], dtype=object)]
)
def test_add_self_loops_values_must_be_numbers(values):
    # the loops' value was fill_value cast to the values' kind: the text "1", one day after 1970, the float 1.0
    g = ca.CSRGraph(np.array([0, 1, 1]), np.array([1]), 2)
    with pytest.raises(TypeError, match=f"^values must hold numbers .*, got dtype {re.escape(str(values.dtype))}$"):
        datasets.add_self_loops(g, values)


def test_add_self_loops_fill_of_any_size_and_shape():
    g = ca.CSRGraph(np.array([0, 1, 1]), np.array([1]), 2)  # two loops added
    _, values = datasets.add_self_loops(g, np.array([5.0]), fill_value=2**70)  # was "fill_value must be a number"
    assert values.tolist() == [5.0, 2.0**70, 2.0**70]
    for dtype, fill in ((np.float64, 10**400), (np.int64, 2**70)):
        with pytest.raises(ValueError, match="fill_value .* cannot be stored in values of dtype"):
            datasets.add_self_loops(g, np.array([5], dtype), fill_value=fill)
    with pytest.raises(ValueError, match=r"fill_value has shape \(2,\), .* trailing shape \(3,\)"):
        datasets.add_self_loops(g, np.ones((1, 3)), fill_value=[1.0, 2.0])  # was NumPy's "shape mismatch"
    with pytest.raises(ValueError, match=r"fill_value has shape \(2,\), .* trailing shape \(\)"):
        datasets.add_self_loops(g, np.ones(1), fill_value=[1.0, 2.0])  # was one value per added loop
