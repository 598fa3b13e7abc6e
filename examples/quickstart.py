"""cupy_csrattn quick start: every op, forward and backward, checked and timed.

Builds a random multigraph in CSR form (row = destination node, column = source
neighbour) with power-law-like degrees, a few hub rows and some empty rows, then runs
every op of the library on NumPy arrays (the CPU backend) and, when a CUDA device is
present, on CuPy arrays.

Each result is compared with an independent float64 reference written below with
np.bincount, a sort and scipy.sparse products. The script prints a table of timings
and exits with status 1 on any mismatch.

    python3 examples/quickstart.py [--rows 50000] [--heads 4] [--features 32] [--seed 0]
"""

import argparse
import functools
import sys
import time

import numpy as np
import scipy.sparse
from _common import int_at_least  # examples/_common.py, beside this script

import cupy_csrattn as ca
from cupy_csrattn.backend import cupy, gpu_available  # cupy: None without CuPy

# ---------------------------------------------------------------------------------------
# The graph


def random_graph(num_rows, rng):
    """indptr, indices of a square multigraph with heavy-tailed in-degrees.

    Degrees are log-normal (most rows have a handful of neighbours), 5% of the rows have
    none, and three hub rows have thousands. Columns are random: duplicates and unsorted
    rows occur, as in real edge lists.
    """
    degrees = np.floor(rng.lognormal(mean=1.6, sigma=1.0, size=num_rows)).astype(np.int64)
    np.minimum(degrees, 2000, out=degrees)
    degrees[rng.random(num_rows) < 0.05] = 0
    hubs = rng.choice(num_rows, size=3, replace=False)
    degrees[hubs] = [min(40_000, 4 * num_rows), 8_000, 2_500]
    indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    indices = rng.integers(0, num_rows, size=int(indptr[-1]), dtype=np.int64)
    return indptr.astype(np.int32), indices.astype(np.int32)


# ---------------------------------------------------------------------------------------
# The reference: float64, one head at a time, built on other primitives than the library
# (sorting and np.bincount for per-row reductions, scipy.sparse matrices for the sums).


class Reference:
    def __init__(self, indptr, indices, num_src):
        self.num_dst = len(indptr) - 1
        self.num_src = num_src
        self.indptr = indptr.astype(np.int64)
        self.indices = indices.astype(np.int64)
        self.dst = np.repeat(np.arange(self.num_dst), np.diff(self.indptr))
        self.nonempty = np.diff(self.indptr) > 0

    def matrix(self, weights):
        """(num_dst, num_src) scipy CSR matrix with duplicates kept as separate entries."""
        return scipy.sparse.csr_matrix((weights, self.indices, self.indptr), shape=(self.num_dst, self.num_src))

    def row_sum(self, x):
        return np.bincount(self.dst, weights=x, minlength=self.num_dst)

    def src_sum(self, x):
        return np.bincount(self.indices, weights=x, minlength=self.num_src)

    def row_max(self, x):
        order = np.lexsort((x, self.dst))
        result = np.full(self.num_dst, -np.inf)
        last = self.indptr[1:][self.nonempty] - 1
        result[self.nonempty] = x[order][last]
        return result

    def softmax(self, s):
        """(probs, lse) of (E,) float64 scores."""
        m = self.row_max(s)
        e = np.exp(s - m[self.dst])
        z = self.row_sum(e)
        with np.errstate(divide="ignore"):
            lse = np.where(self.nonempty, m + np.log(z), -np.inf)
        return e / z[self.dst], lse

    def edge_dot(self, a, b):
        """<a[dst(e)], b[src(e)]> per edge, for (N, F) arrays."""
        return np.einsum("ef,ef->e", a[self.dst], b[self.indices])

    def softmax_grad(self, p, grad_p):
        return p * (grad_p - self.row_sum(p * grad_p)[self.dst])

    # Every public op, per head (arrays here have the head axis; f64 throughout).
    def edge_softmax(self, s):
        return np.stack([self.softmax(s[:, h])[0] for h in range(s.shape[1])], 1)

    def edge_softmax_backward(self, p, gp):
        return np.stack([self.softmax_grad(p[:, h], gp[:, h]) for h in range(p.shape[1])], 1)

    def spmm(self, w, x):
        return np.stack([self.matrix(w[:, h]) @ x[:, h] for h in range(x.shape[1])], 1)

    def spmm_backward(self, w, x, go):
        grad_w = np.stack([self.edge_dot(go[:, h], x[:, h]) for h in range(x.shape[1])], 1)
        grad_x = np.stack([self.matrix(w[:, h]).T @ go[:, h] for h in range(x.shape[1])], 1)
        return grad_w, grad_x

    def sddmm_dot(self, a, b, scale):
        return scale * np.stack([self.edge_dot(a[:, h], b[:, h]) for h in range(a.shape[1])], 1)

    def sddmm_dot_backward(self, a, b, gs, scale):
        grad_a = np.stack([scale * (self.matrix(gs[:, h]) @ b[:, h]) for h in range(a.shape[1])], 1)
        grad_b = np.stack([scale * (self.matrix(gs[:, h]).T @ a[:, h]) for h in range(a.shape[1])], 1)
        return grad_a, grad_b

    def sddmm_add(self, a, b):
        return a[self.dst] + b[self.indices]

    def sddmm_add_backward(self, gs):
        grad_a = np.stack([self.row_sum(gs[:, h]) for h in range(gs.shape[1])], 1)
        grad_b = np.stack([self.src_sum(gs[:, h]) for h in range(gs.shape[1])], 1)
        return grad_a, grad_b

    def aggregate(self, s, v):
        """out (N, H, F), lse (N, H) of the softmax of s weighting v."""
        outs, lses = [], []
        for h in range(s.shape[1]):
            p, lse = self.softmax(s[:, h])
            outs.append(self.matrix(p) @ v[:, h])
            lses.append(lse)
        return np.stack(outs, 1), np.stack(lses, 1)

    def aggregate_backward(self, s, v, go):
        """grad_scores (E, H), grad_values (N, H, F)."""
        grad_s, grad_v = [], []
        for h in range(s.shape[1]):
            p, _ = self.softmax(s[:, h])
            grad_s.append(self.softmax_grad(p, self.edge_dot(go[:, h], v[:, h])))
            grad_v.append(self.matrix(p).T @ go[:, h])
        return np.stack(grad_s, 1), np.stack(grad_v, 1)

    def graph_attention_backward(self, q, k, v, go, scale):
        s = self.sddmm_dot(q, k, scale)
        grad_s, grad_v = self.aggregate_backward(s, v, go)
        grad_q, grad_k = self.sddmm_dot_backward(q, k, grad_s, scale)
        return grad_q, grad_k, grad_v

    def gat_scores(self, a_dst, a_src, slope):
        z = self.sddmm_add(a_dst, a_src)
        return z, np.where(z > 0, z, slope * z)

    def gat_attention_backward(self, a_dst, a_src, v, go, slope):
        z, s = self.gat_scores(a_dst, a_src, slope)
        grad_s, grad_v = self.aggregate_backward(s, v, go)
        grad_a_dst, grad_a_src = self.sddmm_add_backward(grad_s * np.where(z > 0, 1.0, slope))
        return grad_a_dst, grad_a_src, grad_v

    def node_sums(self, ids, count, x):
        """(count, H, D) sums of the (E, H, D) edge values x by node ids (self.dst or self.indices)."""
        flat = x.reshape(len(x), -1)
        sums = [np.bincount(ids, weights=flat[:, j], minlength=count) for j in range(flat.shape[1])]
        return np.stack(sums, 1).reshape((count,) + x.shape[1:])

    def gatv2_scores(self, x_dst, x_src, att, slope):
        """z = x_dst[d] + x_src[s] (E, H, D) and the scores <att, leaky_relu(z)> (E, H)."""
        z = x_dst[self.dst] + x_src[self.indices]
        return z, np.einsum("ehd,hd->eh", np.where(z > 0, z, slope * z), att)

    def gatv2_attention_backward(self, x_dst, x_src, att, go, slope):
        z, s = self.gatv2_scores(x_dst, x_src, att, slope)
        grad_s, grad_v = self.aggregate_backward(s, x_src, go)
        grad_z = grad_s[:, :, None] * att * np.where(z > 0, 1.0, slope)
        grad_att = np.einsum("eh,ehd->hd", grad_s, np.where(z > 0, z, slope * z))
        grad_x_src = grad_v + self.node_sums(self.indices, self.num_src, grad_z)
        return self.node_sums(self.dst, self.num_dst, grad_z), grad_x_src, grad_att


# ---------------------------------------------------------------------------------------
# Comparison and timing

RTOL = 1e-4  # float32 results against a float64 reference


def mismatch(name, got, want):
    """None when got matches want; otherwise a line saying where it does not."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, expected {want.shape}"
    if np.isnan(got).any():
        return f"{name}: {int(np.isnan(got).sum())} NaN entries"
    finite = np.isfinite(want)
    if not np.array_equal(got[~finite], want[~finite]):
        return f"{name}: non-finite entries differ"
    scale = float(np.abs(want[finite]).max()) if finite.any() else 1.0
    error = np.abs(got[finite] - want[finite])
    bound = RTOL * np.abs(want[finite]) + RTOL * 0.1 * max(scale, 1e-30)
    if (error > bound).any():
        worst = int(np.argmax(error - bound))
        return (
            f"{name}: {int((error > bound).sum())} entries off, worst |diff| {error[worst]:.3g} "
            f"where the reference is {want[finite][worst]:.6g}"
        )
    return None


def fused_backward(name, inputs, grad_out, **kwargs):
    """The call of fused backward op ``name`` on the arrays named ``inputs``, the out and lse of
    its forward's earlier call (``prev``) and the gradient named ``grad_out``."""
    forward = name.removesuffix("_backward")

    def call(g, a, prev):
        out, lse = prev[forward]
        return getattr(ca, name)(g, *(a[x] for x in inputs), out, a[grad_out], lse, **kwargs)

    return call


def timed(call, repeats, synchronize=None):
    """(result of the first call, best wall time in seconds over `repeats` calls)."""
    best, result = np.inf, None
    for i in range(repeats):
        start = time.perf_counter()
        value = call()
        if synchronize is not None:
            synchronize()
        best = min(best, time.perf_counter() - start)
        if i == 0:
            result = value
    return result, best


# ---------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int_at_least(3), default=50_000, help="rows (and columns) of the random graph, >= 3 (its hubs)"
    )
    parser.add_argument("--heads", type=int_at_least(1), default=4, help="attention heads H")
    parser.add_argument("--features", type=int_at_least(1), default=32, help="feature width F per head")
    parser.add_argument(
        "--head-dim", type=int_at_least(1), default=16, help="query/key width D per head (graph_attention, gatv2)"
    )
    parser.add_argument("--repeats", type=int_at_least(1), default=2, help="timed calls per op (best is shown)")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the graph and the data")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    indptr, indices = random_graph(args.rows, rng)
    n, heads, features, head_dim = args.rows, args.heads, args.features, args.head_dim
    graph = ca.CSRGraph(indptr, indices, num_src=n)
    degrees = graph.degrees()
    print(
        f"graph: {graph.num_dst} rows, {graph.num_edges} edges, {int((degrees == 0).sum())} empty rows, "
        f"largest row {int(degrees.max())} edges, index dtype {graph.index_dtype}"
    )
    print(f"heads H={heads}, features F={features}, head dim D={head_dim}, float32 data")

    def randn(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    e = graph.num_edges
    data = {
        "scores": 2 * randn(e, heads),
        "grad_e": randn(e, heads),
        "weights": randn(e, heads),
        "values": randn(n, heads, features),
        "grad_out": randn(n, heads, features),
        "q": randn(n, heads, head_dim),
        "k": randn(n, heads, head_dim),
        "a_dst": randn(n, heads),
        "a_src": randn(n, heads),
        "x_dst": randn(n, heads, head_dim),
        "x_src": randn(n, heads, head_dim),
        "att": randn(heads, head_dim),
        "grad_out_d": randn(n, heads, head_dim),
    }
    scale = 1.0 / np.sqrt(head_dim)
    slope = 0.2
    ref = Reference(indptr, indices, n)
    f64 = {name: a.astype(np.float64) for name, a in data.items()}

    # Each case: (name, call(graph, arrays) -> result, expected result(s) from the reference).
    # `prev` holds results of earlier calls that a backward takes (probs, out, lse).
    r_softmax = ref.edge_softmax(f64["scores"])
    r_agg_out, r_agg_lse = ref.aggregate(f64["scores"], f64["values"])
    r_ga_out, r_ga_lse = ref.aggregate(ref.sddmm_dot(f64["q"], f64["k"], scale), f64["values"])
    r_gat_out, r_gat_lse = ref.aggregate(ref.gat_scores(f64["a_dst"], f64["a_src"], slope)[1], f64["values"])
    r_gatv2 = ref.aggregate(ref.gatv2_scores(f64["x_dst"], f64["x_src"], f64["att"], slope)[1], f64["x_src"])

    cases = [
        ("edge_softmax", lambda g, a, prev: ca.edge_softmax(g, a["scores"]), lambda: r_softmax),
        (
            "edge_softmax_backward",
            lambda g, a, prev: ca.edge_softmax_backward(g, prev["edge_softmax"], a["grad_e"]),
            lambda: ref.edge_softmax_backward(r_softmax, f64["grad_e"]),
        ),
        (
            "spmm",
            lambda g, a, prev: ca.spmm(g, a["weights"], a["values"]),
            lambda: ref.spmm(f64["weights"], f64["values"]),
        ),
        (
            "spmm_backward",
            lambda g, a, prev: ca.spmm_backward(g, a["weights"], a["values"], a["grad_out"]),
            lambda: ref.spmm_backward(f64["weights"], f64["values"], f64["grad_out"]),
        ),
        (
            "sddmm dot",
            lambda g, a, prev: ca.sddmm(g, a["q"], a["k"], op="dot", scale=scale),
            lambda: ref.sddmm_dot(f64["q"], f64["k"], scale),
        ),
        (
            "sddmm_backward dot",
            lambda g, a, prev: ca.sddmm_backward(g, a["q"], a["k"], a["grad_e"], op="dot", scale=scale),
            lambda: ref.sddmm_dot_backward(f64["q"], f64["k"], f64["grad_e"], scale),
        ),
        (
            "sddmm add",
            lambda g, a, prev: ca.sddmm(g, a["a_dst"], a["a_src"], op="add"),
            lambda: ref.sddmm_add(f64["a_dst"], f64["a_src"]),
        ),
        (
            "sddmm_backward add",
            lambda g, a, prev: ca.sddmm_backward(g, a["a_dst"], a["a_src"], a["grad_e"], op="add"),
            lambda: ref.sddmm_add_backward(f64["grad_e"]),
        ),
        (
            "attention_aggregate",
            lambda g, a, prev: ca.attention_aggregate(g, a["scores"], a["values"], return_lse=True),
            lambda: (r_agg_out, r_agg_lse),
        ),
        (
            "attention_aggregate_backward",
            lambda g, a, prev: ca.attention_aggregate_backward(
                g, a["scores"], a["values"], a["grad_out"], lse=prev["attention_aggregate"][1]
            ),
            lambda: ref.aggregate_backward(f64["scores"], f64["values"], f64["grad_out"]),
        ),
        (
            "graph_attention",
            lambda g, a, prev: ca.graph_attention(g, a["q"], a["k"], a["values"], scale=scale, return_lse=True),
            lambda: (r_ga_out, r_ga_lse),
        ),
        (
            "graph_attention_backward",
            fused_backward("graph_attention_backward", ("q", "k", "values"), "grad_out", scale=scale),
            lambda: ref.graph_attention_backward(f64["q"], f64["k"], f64["values"], f64["grad_out"], scale),
        ),
        (
            "gat_attention",
            lambda g, a, prev: ca.gat_attention(
                g, a["a_dst"], a["a_src"], a["values"], negative_slope=slope, return_lse=True
            ),
            lambda: (r_gat_out, r_gat_lse),
        ),
        (
            "gat_attention_backward",
            fused_backward("gat_attention_backward", ("a_dst", "a_src", "values"), "grad_out", negative_slope=slope),
            lambda: ref.gat_attention_backward(f64["a_dst"], f64["a_src"], f64["values"], f64["grad_out"], slope),
        ),
        (
            "gatv2_attention",
            lambda g, a, prev: ca.gatv2_attention(
                g, a["x_dst"], a["x_src"], a["att"], negative_slope=slope, return_lse=True
            ),
            lambda: r_gatv2,
        ),
        (
            "gatv2_attention_backward",
            fused_backward("gatv2_attention_backward", ("x_dst", "x_src", "att"), "grad_out_d", negative_slope=slope),
            lambda: ref.gatv2_attention_backward(f64["x_dst"], f64["x_src"], f64["att"], f64["grad_out_d"], slope),
        ),
    ]

    backends = [("cpu", graph, data, np.asarray, None)]
    if gpu_available():
        device = cupy.cuda.Device()
        print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}")
        backends.append(
            ("gpu", graph.to_gpu(), {k: cupy.asarray(v) for k, v in data.items()}, cupy.asnumpy, device.synchronize)
        )
    else:
        print("GPU: none found (CuPy not installed or no CUDA device); running on the CPU only")

    failures = []
    timings = {name: {} for name, _, _ in cases}
    expected_cache = {}
    for backend, g, arrays, to_host, sync in backends:
        prev = {}
        for name, call, expected in cases:  # a backward takes its forward's results (prev), computed before it
            result, seconds = timed(functools.partial(call, g, arrays, prev), args.repeats, sync)
            prev[name] = result
            got = result if isinstance(result, tuple) else (result,)
            if name not in expected_cache:
                expected_cache[name] = expected()
            want = expected_cache[name]
            want = want if isinstance(want, tuple) else (want,)
            problems = [mismatch(f"{backend} {name} [{i}]", to_host(x), w) for i, (x, w) in enumerate(zip(got, want))]
            problems = [p for p in problems if p]
            failures += problems
            timings[name][backend] = f"{seconds * 1e3:.2f} ms " + ("MISMATCH" if problems else "ok")

    # A scipy matrix in, a scipy matrix of probabilities out (single head, data = scores).
    matrix = scipy.sparse.csr_matrix((data["scores"][:, 0].copy(), indices, indptr), shape=(n, n))
    probs = ca.edge_softmax(matrix)
    problem = mismatch("edge_softmax(scipy matrix)", probs.data, r_softmax[:, 0])
    if type(probs) is not type(matrix):
        problem = f"edge_softmax(scipy matrix) returned {type(probs).__name__}"
    if problem:
        failures.append(problem)

    width = max(len(name) for name, _, _ in cases)
    print()
    print(f"{'op':<{width}}  {'CPU (NumPy/SciPy)':>20}" + (f"  {'GPU (CuPy)':>20}" if len(backends) > 1 else ""))
    for name, _, _ in cases:
        line = f"{name:<{width}}  {timings[name].get('cpu', '-'):>20}"
        if len(backends) > 1:
            line += f"  {timings[name].get('gpu', '-'):>20}"
        print(line)
    print(f"(best of {args.repeats} calls; float32 results checked against a float64 reference, rtol {RTOL:g})")
    print()
    if failures:
        print("MISMATCHES:")
        for line in failures:
            print("  " + line)
        return 1
    print("all results match the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
