"""The case table's entries of the fused attention ops: graph_attention, gat_attention and
gatv2_attention, forward and backward (see testing.cases)."""

from cupy_csrattn.testing import reference as ref
from cupy_csrattn.testing.arrays import edge_array, node_vectors
from cupy_csrattn.testing.compare import lse_dtype
from cupy_csrattn.testing.graphs import num_dst_of
from cupy_csrattn.testing.opcase import (
    ATTN_SCALE,
    GAT_SLOPE,
    OpCase,
    make_gat_inputs,
    make_grad_out,
    make_qkv,
    make_values,
)

FUSED_CASES = []


def _case(**kw):
    FUSED_CASES.append(OpCase(**kw))


def _make_backward(make_inputs, forward_reference, make_kwargs):
    """Inputs of a fused backward case: the forward's inputs, its float64 out and lse (rounded
    to the case's dtypes), a grad_out; the keyword arguments of make_kwargs(rng, g, H, F, dt),
    passed to the forward reference and to the op."""

    def make(rng, g, H, F, dt):
        inputs = make_inputs(rng, g, H, F, dt)
        kwargs = make_kwargs(rng, g, H, F, dt)
        out, lse = forward_reference(g.indptr, g.indices, *inputs, **kwargs)
        args = (*inputs, out.astype(dt), make_grad_out(rng, g, H, F, dt), lse.astype(lse_dtype(dt)))
        return args, kwargs

    return make


def _forward_case(name, op, make_inputs, forward_reference, make_kwargs, summed):
    """A forward case with the keyword arguments of make_kwargs and return_lse."""
    _case(
        name=name,
        summed=summed,
        op=op,
        lse_index=1,
        make=lambda rng, g, H, F, dt: (
            make_inputs(rng, g, H, F, dt),
            {**make_kwargs(rng, g, H, F, dt), "return_lse": True},
        ),
        reference=lambda g, a, kw: forward_reference(
            g.indptr, g.indices, *a, **{key: value for key, value in kw.items() if key != "return_lse"}
        ),
    )


def _backward_case(name, op, make_inputs, references, make_kwargs):
    """A backward case: the forward's inputs, out, grad_out and lse, with make_kwargs' keyword
    arguments."""
    forward_reference, backward_reference = references
    _case(
        name=name,
        op=f"{op}_backward",
        out_index=None,
        aux=(5,),
        # Every gradient is linear in grad_out (argument 4): with |grad_out| the reference
        # gives each gradient's sum of term magnitudes, the scale of its rounding where it
        # cancels (a source whose incoming p * grad_out[dst] terms nearly sum to 0).
        summed=(4,),
        make=_make_backward(make_inputs, forward_reference, make_kwargs),
        reference=lambda g, a, kw: backward_reference(g.indptr, g.indices, a[0], a[1], a[2], a[4], **kw),
    )


def _fused_op_cases(op, make_inputs, references, keyword, value, suffix, summed):
    """Four cases of a fused op: the forward, the forward with ``keyword=value`` and lse, the
    backward, and the backward with ``keyword=value``; references: (forward, backward)."""
    _case(
        name=op,
        summed=summed,
        op=op,
        make=lambda rng, g, H, F, dt: (make_inputs(rng, g, H, F, dt), {}),
        reference=lambda g, a, kw: (references[0](g.indptr, g.indices, *a)[0],),
    )
    _forward_case(f"{op}_lse_{suffix}", op, make_inputs, references[0], lambda *_: {keyword: value}, summed)
    _backward_case(f"{op}_backward", op, make_inputs, references, lambda *_: {})
    _backward_case(f"{op}_backward_{suffix}", op, make_inputs, references, lambda *_: {keyword: value})


def _edge_cases(op, make_inputs, references, edge_keyword, make_edge, keyword, value, summed):
    """Two cases of a fused op with its edge term ``edge_keyword=make_edge(rng, g, H, F, dt)``
    and ``keyword=value``: the forward with lse, and the backward."""

    def make_kwargs(rng, g, H, F, dt):
        return {edge_keyword: make_edge(rng, g, H, F, dt), keyword: value}

    _forward_case(f"{op}_{edge_keyword}", op, make_inputs, references[0], make_kwargs, summed)
    _backward_case(f"{op}_backward_{edge_keyword}", op, make_inputs, references, make_kwargs)


def _qkv_of_one_width(rng, g, H, F, dt):
    """q, k and v all of width F: an edge feature is added to the key and to the value."""
    q = node_vectors(rng, num_dst_of(g), H, F, dt)
    k = node_vectors(rng, g.num_src, H, F, dt)
    return q, k, make_values(rng, g, H, F, dt)


def _edge_features(rng, g, H, F, dt):
    return node_vectors(rng, len(g.indices), H, F, dt)


def _edge_scores(rng, g, H, F, dt):
    return edge_array(rng, len(g.indices), H, dt)


def _gatv2_inputs(rng, g, H, F, dt):
    """x_dst, x_src (head width D = F) and att ((F,) or (H, F))."""
    att = node_vectors(rng, 1, H, F, dt)[0]
    return node_vectors(rng, num_dst_of(g), H, F, dt), node_vectors(rng, g.num_src, H, F, dt), att


_GRAPH_ATTENTION = (ref.graph_attention, ref.graph_attention_backward)
_GAT = (ref.gat_attention, ref.gat_attention_backward)
_fused_op_cases("graph_attention", make_qkv, _GRAPH_ATTENTION, "scale", ATTN_SCALE, "scale", (2,))
# edge_feat enters the scores as well as the messages: no bound from summed terms.
_edge_cases(
    "graph_attention", _qkv_of_one_width, _GRAPH_ATTENTION, "edge_feat", _edge_features, "scale", ATTN_SCALE, ()
)
_fused_op_cases("gat_attention", make_gat_inputs, _GAT, "negative_slope", GAT_SLOPE, "slope", (2,))
_edge_cases("gat_attention", make_gat_inputs, _GAT, "edge_score", _edge_scores, "negative_slope", GAT_SLOPE, (2,))
# x_src enters the scores too: no bound from summed terms.
_fused_op_cases(
    "gatv2_attention",
    _gatv2_inputs,
    (ref.gatv2_attention, ref.gatv2_attention_backward),
    "negative_slope",
    GAT_SLOPE,
    "slope",
    (),
)
