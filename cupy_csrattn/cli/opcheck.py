"""The op step of ``csrattn check``: every op call form of cupy_csrattn.testing.cases on a few graphs.

Without a GPU the CPU backend is compared with the naive float64 reference
(cupy_csrattn.testing.reference); with one, the GPU results are compared with the CPU
backend's on the same inputs. cupy_csrattn.testing.compare decides (one tolerance table);
this module only says where a result is off, in one line.
"""

from collections import namedtuple

import numpy as np

from cupy_csrattn import backend
from cupy_csrattn.cli.common import Progress
from cupy_csrattn.testing import graphs
from cupy_csrattn.testing.arrays import make_graph, to_xp
from cupy_csrattn.testing.cases import CASES
from cupy_csrattn.testing.compare import RTOL, assert_close, check_result, magnitude, to_np

#: One graph of the check: its name, its arrays (testing.graphs.GraphData), and as the
#: graph argument of the CPU backend and of the device under test.
CheckGraph = namedtuple("CheckGraph", ["name", "data", "cpu", "device"])

HEAD_LAYOUTS = (None, 3)  # no head axis, and 3 heads


def check_graphs(seed, on_gpu, quick):
    """(name, GraphData) pairs: a random graph with empty rows and one hub row, an int64 one, and
    one without edges; without ``quick`` testing.graphs' small named graphs stand for the last.

    Sized for the device: a GPU gets rows long enough to be split across warps.
    """
    rng = np.random.default_rng(seed)

    def random_graph(num_dst, num_src, hub, dtype):
        degrees = rng.integers(0, 12, num_dst)
        degrees[rng.random(num_dst) < 0.15] = 0
        degrees[num_dst // 3] = hub
        return graphs.from_degrees(degrees, num_src, seed=int(rng.integers(2**31)), dtype=dtype)

    if on_gpu:
        mixed = random_graph(1500, 1300, 20_003, np.int32) if quick else random_graph(6000, 5000, 100_003, np.int32)
        wide = random_graph(300, 250, 5_001, np.int64)
    else:
        mixed = random_graph(120, 100, 700, np.int32) if quick else random_graph(400, 350, 3_001, np.int32)
        wide = random_graph(40, 33, 150, np.int64)
    named = ["all_rows_empty"] if quick else graphs.SMALL_GRAPH_NAMES
    return [("random+hub", mixed), ("int64", wide)] + [(name, graphs.named_graph(name)) for name in named]


def takes_features(case):
    """Whether the case's inputs have a feature axis (else it runs for one feature width only)."""
    graph = graphs.single_edge()
    shapes = [[np.shape(a) for a in case.make(np.random.default_rng(0), graph, None, F, np.float64)[0]] for F in (1, 2)]
    return shapes[0] != shapes[1]


def worst_element(actual, expected, dtype, scale=0.0):
    """Where ``actual`` is furthest outside the bounds of testing.compare.assert_close, in words;
    None when no element is outside them (a mismatch of shape, dtype or device then)."""
    actual = np.asarray(to_np(actual), dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape or not actual.size:
        return None
    nan = np.isnan(actual)
    if nan.any():
        return f"NaN at {np.argwhere(nan)[0].tolist()}"
    inf = np.isinf(expected)
    wrong_inf = (np.isinf(actual) != inf) | (inf & (actual != expected))
    if wrong_inf.any():
        return f"infinity mismatch at {np.argwhere(wrong_inf)[0].tolist()}"
    rtol = RTOL[np.dtype(dtype)]
    atol = rtol * (max(magnitude(expected), scale) or 1.0)
    actual, expected = np.where(inf, 0.0, actual), np.where(inf, 0.0, expected)  # infinities agree
    error = np.abs(actual - expected)
    allowed = atol + rtol * np.abs(expected)
    ratio = error / allowed
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if ratio[worst] <= 1.0:
        return None
    return (
        f"max error {error[worst]:.3g} at {[int(i) for i in worst]} (got {actual[worst]:.6g}, "
        f"expected {expected[worst]:.6g}; tolerance {allowed[worst]:.3g})"
    )


def compare_arrays(actual, expected, dtype, xp=None, scale=0.0):
    """None when ``actual`` matches ``expected`` at the tolerance of ``dtype``, else a short description.

    testing.compare decides: with ``xp`` (the array module ``actual`` must come from) through
    ``check_result``, which also wants ``dtype`` exactly, else through ``assert_close``.
    """
    try:
        if xp is None:
            assert_close(actual, expected, dtype, scale=scale)
        else:
            check_result(xp, actual, expected, dtype, scale=scale)
    except AssertionError as error:
        return worst_element(actual, expected, dtype, scale) or backend.first_line(error)
    return None


def compare_outputs(xp, got, expected, dtypes):
    """None when every result agrees, else a description of the first that does not."""
    if len(got) != len(expected):
        return f"returned {len(got)} arrays, expected {len(expected)}"
    # the outputs of one op share a scale (as in testing.cases.check_outputs)
    scale = magnitude(*expected)
    for i, (actual, wanted, dtype) in enumerate(zip(got, expected, dtypes, strict=True)):
        if actual is None and wanted is None:
            continue
        if actual is None or wanted is None:
            what = ("an array", "None")
            return f"result {i}: {what[actual is None]}, expected {what[wanted is None]}"
        mismatch = compare_arrays(actual, wanted, dtype, xp=xp, scale=scale)
        if mismatch is not None:
            return f"result {i}: {mismatch}"
    return None


def run_case(case, graph, xp, dtype, heads, features, rng):
    """One case on random inputs: None when it agrees, else what is wrong.

    ``xp`` None: the CPU backend against the reference; else results of ``graph.device``
    and ``xp`` arrays against the CPU backend's.
    """
    args, kwargs = case.make(rng, graph.data, heads, features, dtype)
    if xp is None:
        expected = case.reference(graph.data, args, kwargs)
        got = case.run(graph.cpu, args, kwargs)
    else:
        expected = case.run(graph.cpu, args, kwargs)
        got = case.run(graph.device, to_xp(xp, args), to_xp(xp, kwargs))
    dtypes = [case.expected_dtype(i, args, kwargs) for i in range(len(expected))]
    return compare_outputs(xp, got, expected, dtypes)


def check_ops(xp, quick, seed, progress_enabled):
    """Every case of testing.cases on the check's graphs, dtypes and head layouts.

    ``xp`` None: the CPU backend against the naive reference. Else the array module of the
    device (CuPy): its results against the CPU backend's.

    Returns (counts per case name: cases, ok, mismatch; failure lines).
    """
    on_gpu = xp is not None
    rng = np.random.default_rng(seed)
    check = [
        CheckGraph(name, data, make_graph(np, data), make_graph(xp, data) if on_gpu else None)
        for name, data in check_graphs(seed, on_gpu, quick)
    ]
    if on_gpu:
        dtypes = [np.float32, np.float64] + ([] if quick else [np.float16])
        feature_sizes = [7, 32]
    else:
        dtypes = [np.float32, np.float64]
        feature_sizes = [5]
    runs = []
    for case in CASES:
        with_features = takes_features(case)
        for graph in check:
            for dtype in dtypes:
                for heads in HEAD_LAYOUTS:
                    for features in feature_sizes if with_features else [4]:
                        runs.append((case, with_features, graph, np.dtype(dtype), heads, features))
    summary = {case.name: {"cases": 0, "ok": 0, "mismatch": 0} for case in CASES}
    failures = []
    with Progress(len(runs), "GPU vs CPU" if on_gpu else "CPU vs reference", enabled=progress_enabled) as progress:
        for case, with_features, graph, dtype, heads, features in runs:
            counts = summary[case.name]
            counts["cases"] += 1
            where = (
                f"{case.name} on {graph.name}, {dtype.name}, "
                f"{'single head' if heads is None else f'H={heads}'}{f', F={features}' if with_features else ''}"
            )
            try:
                problem = run_case(case, graph, xp, dtype, heads, features, rng)
            except Exception as error:
                problem = f"raised {type(error).__name__}: {backend.first_line(error)}"
            if problem is None:
                counts["ok"] += 1
            else:
                counts["mismatch"] += 1
                failures.append(f"{where}: {problem}")
                progress.write(f"MISMATCH {failures[-1]}")
            progress.advance(note=case.name)
    return summary, failures
