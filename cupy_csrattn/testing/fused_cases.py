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


def _make_backward(make_inputs, forward_reference, keyword, value, default):
    """Inputs of a fused backward case: the forward's inputs, its float64 out and lse (rounded
    to the case's dtypes), a grad_out; ``keyword=value`` passed unless value is None."""

    def make(rng, g, H, F, dt):
        inputs = make_inputs(rng, g, H, F, dt)
        out, lse = forward_reference(g.indptr, g.indices, *inputs, **{keyword: default if value is None else value})
        args = (*inputs, out.astype(dt), make_grad_out(rng, g, H, F, dt), lse.astype(lse_dtype(dt)))
        return args, ({} if value is None else {keyword: value})

    return make


def _fused_op_cases(op, make_inputs, references, keyword, value, default, suffix, summed):
    """Four cases of a fused op: the forward, the forward with ``keyword=value`` and lse, the
    backward, and the backward with ``keyword=value``; references: (forward, backward)."""
    forward_reference, backward_reference = references
    _case(
        name=op,
        summed=summed,
        op=op,
        make=lambda rng, g, H, F, dt: (make_inputs(rng, g, H, F, dt), {}),
        reference=lambda g, a, kw: (forward_reference(g.indptr, g.indices, *a)[0],),
    )
    _case(
        name=f"{op}_lse_{suffix}",
        summed=summed,
        op=op,
        lse_index=1,
        make=lambda rng, g, H, F, dt: (make_inputs(rng, g, H, F, dt), {keyword: value, "return_lse": True}),
        reference=lambda g, a, kw: forward_reference(g.indptr, g.indices, *a, **{keyword: kw[keyword]}),
    )
    for chosen, name_suffix in [(None, ""), (value, "_" + suffix)]:
        _case(
            name=f"{op}_backward{name_suffix}",
            op=f"{op}_backward",
            out_index=None,
            aux=(5,),
            make=_make_backward(make_inputs, forward_reference, keyword, chosen, default),
            reference=lambda g, a, kw: backward_reference(
                g.indptr, g.indices, a[0], a[1], a[2], a[4], **{keyword: kw.get(keyword, default)}
            ),
        )


def _gatv2_inputs(rng, g, H, F, dt):
    """x_dst, x_src (head width D = F) and att ((F,) or (H, F))."""
    att = node_vectors(rng, 1, H, F, dt)[0]
    return node_vectors(rng, num_dst_of(g), H, F, dt), node_vectors(rng, g.num_src, H, F, dt), att


_fused_op_cases(
    "graph_attention",
    make_qkv,
    (ref.graph_attention, ref.graph_attention_backward),
    "scale",
    ATTN_SCALE,
    None,
    "scale",
    (2,),
)
_fused_op_cases(
    "gat_attention",
    make_gat_inputs,
    (ref.gat_attention, ref.gat_attention_backward),
    "negative_slope",
    GAT_SLOPE,
    0.2,
    "slope",
    (2,),
)
# x_src enters the scores too: no bound from summed terms.
_fused_op_cases(
    "gatv2_attention",
    _gatv2_inputs,
    (ref.gatv2_attention, ref.gatv2_attention_backward),
    "negative_slope",
    GAT_SLOPE,
    0.2,
    "slope",
    (),
)
