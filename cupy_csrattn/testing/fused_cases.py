"""The case table's entries of the fused attention ops: graph_attention, gat_attention and
gatv2_attention, forward and backward (see testing.cases)."""

from cupy_csrattn.testing import reference as ref
from cupy_csrattn.testing.arrays import node_vectors
from cupy_csrattn.testing.compare import lse_dtype
from cupy_csrattn.testing.graphs import num_dst_of
from cupy_csrattn.testing.opcase import (
    ATTN_SCALE,
    GAT_SLOPE,
    OpCase,
    make_gat_inputs,
    make_grad_out,
    make_qkv,
)

FUSED_CASES = []


def _case(**kw):
    FUSED_CASES.append(OpCase(**kw))


# graph_attention ---------------------------------------------------------------
_case(
    name="graph_attention",
    summed=(2,),
    op="graph_attention",
    make=lambda rng, g, H, F, dt: (make_qkv(rng, g, H, F, dt), {}),
    reference=lambda g, a, kw: (ref.graph_attention(g.indptr, g.indices, *a)[0],),
)
_case(
    name="graph_attention_lse_scale",
    summed=(2,),
    op="graph_attention",
    lse_index=1,
    make=lambda rng, g, H, F, dt: (make_qkv(rng, g, H, F, dt), {"scale": ATTN_SCALE, "return_lse": True}),
    reference=lambda g, a, kw: ref.graph_attention(g.indptr, g.indices, *a, scale=kw["scale"]),
)


def _make_graph_attention_backward(scale):
    def make(rng, g, H, F, dt):
        q, k, v = make_qkv(rng, g, H, F, dt)
        out, lse = ref.graph_attention(g.indptr, g.indices, q, k, v, scale=scale)
        args = (q, k, v, out.astype(dt), make_grad_out(rng, g, H, F, dt), lse.astype(lse_dtype(dt)))
        return args, ({} if scale is None else {"scale": scale})

    return make


for _scale, _suffix in [(None, ""), (ATTN_SCALE, "_scale")]:
    _case(
        name="graph_attention_backward" + _suffix,
        op="graph_attention_backward",
        out_index=None,
        aux=(5,),
        make=_make_graph_attention_backward(_scale),
        reference=lambda g, a, kw: ref.graph_attention_backward(
            g.indptr, g.indices, a[0], a[1], a[2], a[4], scale=kw.get("scale")
        ),
    )

# gat_attention -----------------------------------------------------------------
_case(
    name="gat_attention",
    summed=(2,),
    op="gat_attention",
    make=lambda rng, g, H, F, dt: (make_gat_inputs(rng, g, H, F, dt), {}),
    reference=lambda g, a, kw: (ref.gat_attention(g.indptr, g.indices, *a)[0],),
)
_case(
    name="gat_attention_lse_slope",
    summed=(2,),
    op="gat_attention",
    lse_index=1,
    make=lambda rng, g, H, F, dt: (
        make_gat_inputs(rng, g, H, F, dt),
        {"negative_slope": GAT_SLOPE, "return_lse": True},
    ),
    reference=lambda g, a, kw: ref.gat_attention(g.indptr, g.indices, *a, negative_slope=kw["negative_slope"]),
)


def _make_gat_backward(slope):
    def make(rng, g, H, F, dt):
        a_dst, a_src, values = make_gat_inputs(rng, g, H, F, dt)
        out, lse = ref.gat_attention(
            g.indptr, g.indices, a_dst, a_src, values, negative_slope=0.2 if slope is None else slope
        )
        args = (a_dst, a_src, values, out.astype(dt), make_grad_out(rng, g, H, F, dt), lse.astype(lse_dtype(dt)))
        return args, ({} if slope is None else {"negative_slope": slope})

    return make


for _slope, _suffix in [(None, ""), (GAT_SLOPE, "_slope")]:
    _case(
        name="gat_attention_backward" + _suffix,
        op="gat_attention_backward",
        out_index=None,
        aux=(5,),
        make=_make_gat_backward(_slope),
        reference=lambda g, a, kw: ref.gat_attention_backward(
            g.indptr, g.indices, a[0], a[1], a[2], a[4], negative_slope=kw.get("negative_slope", 0.2)
        ),
    )

# gatv2_attention ---------------------------------------------------------------


def _gatv2_inputs(rng, g, H, F, dt):
    """x_dst, x_src (head width D = F) and att ((F,) or (H, F))."""
    att = node_vectors(rng, 1, H, F, dt)[0]
    return node_vectors(rng, num_dst_of(g), H, F, dt), node_vectors(rng, g.num_src, H, F, dt), att


_case(
    name="gatv2_attention",
    op="gatv2_attention",
    make=lambda rng, g, H, F, dt: (_gatv2_inputs(rng, g, H, F, dt), {}),
    reference=lambda g, a, kw: (ref.gatv2_attention(g.indptr, g.indices, *a)[0],),
)
_case(
    name="gatv2_attention_lse_slope",
    op="gatv2_attention",
    lse_index=1,
    make=lambda rng, g, H, F, dt: (
        _gatv2_inputs(rng, g, H, F, dt),
        {"negative_slope": GAT_SLOPE, "return_lse": True},
    ),
    reference=lambda g, a, kw: ref.gatv2_attention(g.indptr, g.indices, *a, negative_slope=kw["negative_slope"]),
)


def _make_gatv2_backward(slope):
    def make(rng, g, H, F, dt):
        x_dst, x_src, att = _gatv2_inputs(rng, g, H, F, dt)
        out, lse = ref.gatv2_attention(
            g.indptr, g.indices, x_dst, x_src, att, negative_slope=0.2 if slope is None else slope
        )
        args = (x_dst, x_src, att, out.astype(dt), make_grad_out(rng, g, H, F, dt), lse.astype(lse_dtype(dt)))
        return args, ({} if slope is None else {"negative_slope": slope})

    return make


for _slope, _suffix in [(None, ""), (GAT_SLOPE, "_slope")]:
    _case(
        name="gatv2_attention_backward" + _suffix,
        op="gatv2_attention_backward",
        out_index=None,
        aux=(5,),
        make=_make_gatv2_backward(_slope),
        reference=lambda g, a, kw: ref.gatv2_attention_backward(
            g.indptr, g.indices, a[0], a[1], a[2], a[4], negative_slope=kw.get("negative_slope", 0.2)
        ),
    )
