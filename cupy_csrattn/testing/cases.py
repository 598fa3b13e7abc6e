"""One table of every op call form, so the tests and ``csrattn check`` cover all ops alike.

An OpCase makes random NumPy inputs for a graph, calls a registered op (see
cupy_csrattn.ops.registry) and knows the naive loop reference's answer. ``check_case`` is
the standard comparison. Every registered op has at least one case (a test checks it).
"""

import numpy as np

from cupy_csrattn.testing import reference as ref
from cupy_csrattn.testing.arrays import edge_array, make_graph, node_scalars, node_vectors, to_xp
from cupy_csrattn.testing.compare import check_result, lse_dtype, magnitude
from cupy_csrattn.testing.fused_cases import FUSED_CASES
from cupy_csrattn.testing.graphs import num_dst_of
from cupy_csrattn.testing.opcase import SDDMM_SCALE, OpCase, make_grad_out, make_scores, make_values

CASES = []


def _case(**kw):
    CASES.append(OpCase(**kw))


# edge_softmax ------------------------------------------------------------------
for _norm_by in ("dst", "src"):
    _kwargs = {} if _norm_by == "dst" else {"norm_by": _norm_by}
    _suffix = "" if _norm_by == "dst" else "_by_src"
    _case(
        name="edge_softmax" + _suffix,
        op="edge_softmax",
        make=lambda rng, g, H, F, dt, kw=_kwargs: ((make_scores(rng, g, H, dt),), dict(kw)),
        reference=lambda g, a, kw: (ref.edge_softmax(g.indptr, a[0], g.indices, kw.get("norm_by", "dst"))[0],),
    )

    def _make_softmax_backward(rng, g, H, F, dt, kw=_kwargs):
        norm_by = kw.get("norm_by", "dst")
        probs = ref.edge_softmax(g.indptr, make_scores(rng, g, H, dt), g.indices, norm_by)[0].astype(dt)
        return (probs, edge_array(rng, len(g.indices), H, dt)), dict(kw)

    _case(
        name="edge_softmax_backward" + _suffix,
        op="edge_softmax_backward",
        make=_make_softmax_backward,
        reference=lambda g, a, kw: (
            ref.edge_softmax_backward(g.indptr, a[0], a[1], g.indices, kw.get("norm_by", "dst")),
        ),
    )

# spmm --------------------------------------------------------------------------
_case(
    name="spmm",
    summed=(0, 1),
    op="spmm",
    make=lambda rng, g, H, F, dt: ((edge_array(rng, len(g.indices), H, dt), make_values(rng, g, H, F, dt)), {}),
    reference=lambda g, a, kw: (ref.spmm(g.indptr, g.indices, a[0], a[1]),),
)
_case(
    name="spmm_unweighted",
    summed=(1,),
    op="spmm",
    make=lambda rng, g, H, F, dt: ((None, make_values(rng, g, H, F, dt)), {}),
    reference=lambda g, a, kw: (ref.spmm(g.indptr, g.indices, None, a[1]),),
)
_case(
    name="spmm_backward",
    summed=(0, 1, 2),
    op="spmm_backward",
    out_index=None,
    make=lambda rng, g, H, F, dt: (
        (edge_array(rng, len(g.indices), H, dt), make_values(rng, g, H, F, dt), make_grad_out(rng, g, H, F, dt)),
        {},
    ),
    reference=lambda g, a, kw: ref.spmm_backward(g.indptr, g.indices, *a),
)
_case(
    name="spmm_backward_unweighted",
    summed=(1, 2),
    op="spmm_backward",
    out_index=None,
    make=lambda rng, g, H, F, dt: ((None, make_values(rng, g, H, F, dt), make_grad_out(rng, g, H, F, dt)), {}),
    reference=lambda g, a, kw: ref.spmm_backward(g.indptr, g.indices, *a),
)

# sddmm -------------------------------------------------------------------------
_case(
    name="sddmm_dot",
    summed=(0, 1),
    op="sddmm",
    make=lambda rng, g, H, F, dt: (
        (node_vectors(rng, num_dst_of(g), H, F, dt), node_vectors(rng, g.num_src, H, F, dt)),
        {"op": "dot", "scale": SDDMM_SCALE},
    ),
    reference=lambda g, a, kw: (ref.sddmm(g.indptr, g.indices, a[0], a[1], "dot", kw["scale"]),),
)
_case(
    name="sddmm_dot_default_scale",
    summed=(0, 1),
    op="sddmm",
    make=lambda rng, g, H, F, dt: (
        (node_vectors(rng, num_dst_of(g), H, F, dt), node_vectors(rng, g.num_src, H, F, dt)),
        {},
    ),
    reference=lambda g, a, kw: (ref.sddmm(g.indptr, g.indices, a[0], a[1], "dot", 1.0),),
)
_case(
    name="sddmm_add",
    summed=(0, 1),
    op="sddmm",
    make=lambda rng, g, H, F, dt: (
        (node_scalars(rng, num_dst_of(g), H, dt), node_scalars(rng, g.num_src, H, dt)),
        {"op": "add"},
    ),
    reference=lambda g, a, kw: (ref.sddmm(g.indptr, g.indices, a[0], a[1], "add"),),
)
_case(
    name="sddmm_backward_dot",
    summed=(0, 1, 2),
    op="sddmm_backward",
    out_index=None,
    make=lambda rng, g, H, F, dt: (
        (
            node_vectors(rng, num_dst_of(g), H, F, dt),
            node_vectors(rng, g.num_src, H, F, dt),
            edge_array(rng, len(g.indices), H, dt),
        ),
        {"op": "dot", "scale": SDDMM_SCALE},
    ),
    reference=lambda g, a, kw: ref.sddmm_backward(g.indptr, g.indices, *a, "dot", kw["scale"]),
)
_case(
    name="sddmm_backward_add",
    summed=(2,),
    op="sddmm_backward",
    out_index=None,
    make=lambda rng, g, H, F, dt: (
        (
            node_scalars(rng, num_dst_of(g), H, dt),
            node_scalars(rng, g.num_src, H, dt),
            edge_array(rng, len(g.indices), H, dt),
        ),
        {"op": "add"},
    ),
    reference=lambda g, a, kw: ref.sddmm_backward(g.indptr, g.indices, *a, "add"),
)

# attention_aggregate -----------------------------------------------------------
_case(
    name="attention_aggregate",
    summed=(1,),
    op="attention_aggregate",
    make=lambda rng, g, H, F, dt: ((make_scores(rng, g, H, dt), make_values(rng, g, H, F, dt)), {}),
    reference=lambda g, a, kw: (ref.attention_aggregate(g.indptr, g.indices, *a)[0],),
)
_case(
    name="attention_aggregate_lse",
    summed=(1,),
    op="attention_aggregate",
    lse_index=1,
    make=lambda rng, g, H, F, dt: ((make_scores(rng, g, H, dt), make_values(rng, g, H, F, dt)), {"return_lse": True}),
    reference=lambda g, a, kw: ref.attention_aggregate(g.indptr, g.indices, *a),
)
_case(
    name="attention_aggregate_backward",
    op="attention_aggregate_backward",
    out_index=None,
    make=lambda rng, g, H, F, dt: (
        (make_scores(rng, g, H, dt), make_values(rng, g, H, F, dt), make_grad_out(rng, g, H, F, dt)),
        {},
    ),
    reference=lambda g, a, kw: ref.attention_aggregate_backward(g.indptr, g.indices, *a),
)


def _make_aggregate_backward_lse(rng, g, H, F, dt):
    scores, values = make_scores(rng, g, H, dt), make_values(rng, g, H, F, dt)
    lse = ref.attention_aggregate(g.indptr, g.indices, scores, values)[1]
    return (scores, values, make_grad_out(rng, g, H, F, dt)), {"lse": lse.astype(lse_dtype(dt))}


_case(
    name="attention_aggregate_backward_lse",
    op="attention_aggregate_backward",
    out_index=None,
    make=_make_aggregate_backward_lse,
    reference=lambda g, a, kw: ref.attention_aggregate_backward(g.indptr, g.indices, *a),
)

CASES += FUSED_CASES

CASE_BY_NAME = {case.name: case for case in CASES}
assert len(CASE_BY_NAME) == len(CASES)


def cases(*ops, where=None):
    """The cases of the given ops (all when none given)."""
    selected = [c for c in CASES if not ops or c.op in ops]
    return [c for c in selected if where is None or where(c)]


# ---------------------------------------------------------------- standard check


def check_outputs(xp, case, got, expected, args, kwargs, *, equal_nan=False, dtype=None, bounds=None):
    """Every output against the reference; ``bounds``: per output, the sums of its elements'
    term magnitudes (OpCase.magnitudes), which raise the absolute tolerance of cancelling sums."""
    assert len(got) == len(expected), f"{case}: {len(got)} outputs, expected {len(expected)}"
    # outputs of one op share a scale: a gradient that cancels to ~0 everywhere (GAT's
    # grad_a_dst on rows whose edges are all on one side of 0) is judged on the others' scale
    scale = magnitude(*expected)
    for i, (g_out, e_out) in enumerate(zip(got, expected)):
        if e_out is None:
            assert g_out is None, f"{case}: output {i} should be None"
            continue
        want = case.expected_dtype(i, args, kwargs) if dtype is None else dtype
        bound = None if bounds is None else bounds[i]
        check_result(
            xp, g_out, e_out, want, equal_nan=equal_nan, scale=scale, bound=bound, err_msg=f"({case}, output {i})"
        )


def check_case(xp, case, graph, H, F, dtype, seed, kind="csrgraph"):
    """Run one case on random inputs and compare every output with the loop reference."""
    rng = np.random.default_rng(seed)
    args, kwargs = case.make(rng, graph, H, F, dtype)
    expected = case.reference(graph, args, kwargs)
    got = case.run(make_graph(xp, graph, kind), to_xp(xp, args), to_xp(xp, kwargs))
    check_outputs(xp, case, got, expected, args, kwargs, bounds=case.magnitudes(graph, args, kwargs))
    return args, kwargs, got
