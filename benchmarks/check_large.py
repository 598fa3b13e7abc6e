"""Correctness of edge_softmax and attention_aggregate on graphs past the 32-bit limits.

Run on a GPU with enough memory (an H200 holds both), from the repository root:
    PYTHONPATH=. python3 benchmarks/check_large.py
Two graphs: int32 indices with E * H > 2^31 score elements, and more than 2^31 edges with
int64 indices (with one hub row of 10M edges). On a few thousand sampled rows (plus the
hub row and empty rows) the GPU results are compared with a float64 reference computed
on the host. Exits non-zero on a mismatch.
"""

import sys
import time

import cupy
import numpy as np

import cupy_csrattn as ca

RTOL = 1e-5


def build(num_dst, num_src, mean_degree, index_dtype, hub_edges=0, seed=0):
    rs = cupy.random.RandomState(seed)
    degrees = rs.randint(0, 2 * mean_degree + 1, num_dst, dtype=np.int64)
    degrees[::97] = 0  # empty rows
    if hub_edges:
        degrees[num_dst // 2] = hub_edges
    indptr = cupy.zeros(num_dst + 1, dtype=np.int64)
    cupy.cumsum(degrees, out=indptr[1:])
    num_edges = int(indptr[-1])
    indices = rs.randint(0, num_src, num_edges, dtype=np.int64).astype(index_dtype, copy=False)
    if index_dtype == np.int32 and num_edges < 2**31:
        indptr = indptr.astype(np.int32)
    return ca.CSRGraph(indptr, indices, num_src, check="fast")


def sample_rows(graph, count, seed=1):
    rng = np.random.default_rng(seed)
    degrees = cupy.asnumpy(graph.degrees())
    rows = set(rng.integers(0, graph.num_dst, count).tolist())
    rows.add(int(degrees.argmax()))
    rows.update(np.flatnonzero(degrees == 0)[:10].tolist())
    return np.array(sorted(rows)), cupy.asnumpy(graph.indptr.astype(np.int64))


def reference_row(scores, values_rows):
    """float64 softmax over a row's edges (E_row, H) and the weighted sum of values (E_row, H, F)."""
    if len(scores) == 0:
        return None, None
    shifted = scores - scores.max(axis=0)
    weights = np.exp(shifted)
    total = weights.sum(axis=0)
    probs = weights / total
    return probs, np.einsum("eh,ehf->hf", probs, values_rows)


def check(name, graph, heads, features):
    started = time.time()
    E = graph.num_edges
    rs = cupy.random.RandomState(3)
    scores = rs.standard_normal((E, heads), dtype=np.float32)
    values = rs.standard_normal((graph.num_src, heads, features), dtype=np.float32)
    probs = ca.edge_softmax(graph, scores)
    out, lse = ca.attention_aggregate(graph, scores, values, return_lse=True)
    cupy.cuda.Device().synchronize()
    elapsed = time.time() - started
    rows, indptr = sample_rows(graph, 3000)
    failures = 0
    for row in rows:
        begin, end = indptr[row], indptr[row + 1]
        row_scores = cupy.asnumpy(scores[begin:end]).astype(np.float64)
        cols = cupy.asnumpy(graph.indices[begin:end])
        want_probs, want_out = reference_row(
            row_scores, cupy.asnumpy(values[cupy.asarray(cols)]).astype(np.float64) if end > begin else None
        )
        got_out = cupy.asnumpy(out[row]).astype(np.float64)
        if want_probs is None:
            ok = (got_out == 0).all() and np.isneginf(cupy.asnumpy(lse[row])).all()
        else:
            got_probs = cupy.asnumpy(probs[begin:end]).astype(np.float64)
            ok = np.allclose(got_probs, want_probs, rtol=RTOL, atol=RTOL * want_probs.max()) and np.allclose(
                got_out, want_out, rtol=RTOL, atol=RTOL * max(1.0, np.abs(want_out).max())
            )
        if not ok:
            failures += 1
            if failures <= 5:
                print(f"  MISMATCH {name} row {row} (degree {end - begin})")
    print(
        f"{name}: {graph.num_dst} rows, {E} edges ({E * heads} score elements), index {graph.index_dtype}, "
        f"max degree {int(cupy.asnumpy(graph.degrees()).max())}; ran in {elapsed:.1f} s; "
        f"{len(rows)} sampled rows checked, {failures} mismatches",
        flush=True,
    )
    return failures


def main():
    failures = 0
    graph = build(num_dst=8_000_000, num_src=8_000_000, mean_degree=34, index_dtype=np.int32)
    assert graph.num_edges * 8 > 2**31
    failures += check("int32, E*H > 2^31", graph, heads=8, features=4)
    del graph
    cupy.get_default_memory_pool().free_all_blocks()
    graph = build(num_dst=50_000_000, num_src=50_000_000, mean_degree=45, index_dtype=np.int64, hub_edges=10_000_000)
    assert graph.num_edges > 2**31
    failures += check("int64, E > 2^31", graph, heads=1, features=4)
    print("all sampled rows match" if failures == 0 else f"{failures} mismatching rows")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
