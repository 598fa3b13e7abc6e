"""Every kernel entry point, declared once: its family (cuda/<family>.cu) and its ordered,
typed parameters.

Launchers pass arguments by name (gpu/kernels.launch); the C types here are checked against
the .cu sources by the compiler itself: each specialization's source ends with one
``static_assert`` per declared entry point comparing its type with this declaration, so a
kernel whose parameters differ (or that is missing) fails to compile, in CI too (NVRTC runs
there without a GPU).

C types are those of common.cuh: scalar_t (the data type), acc_t (its accumulation type),
lse_t, idx_t (the graph's index type), i64, int, SoftmaxState.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str
    optional: bool = False  # a pointer that may be null: omitted or None at launch

    @property
    def is_pointer(self):
        return self.ctype.endswith("*")


@dataclass(frozen=True)
class Signature:
    family: str
    name: str
    params: tuple


def _params(text):
    """Parameters from C-like text: "const i64* items, i64 n, lse_t* lse_out?" ("?": optional)."""
    params = []
    for part in text.split(","):
        ctype, name = part.strip().rsplit(" ", 1)
        optional = name.endswith("?")
        params.append(Param(name.rstrip("?"), ctype, optional))
    return tuple(params)


SIGNATURES = {}


def _declare(family, names, params):
    for name in names:
        if name in SIGNATURES:
            raise ValueError(f"kernel {name} declared twice")
        SIGNATURES[name] = Signature(family, name, params)


# softmax.cu: row-wise softmax and its backward, one set of four kernels per mode.
SOFTMAX_MODES = ("forward", "lse", "grad_probs", "grad_scores")
# The per-mode arrays: a (scores or probs), g (the incoming gradient), lse_in, out, lse_out.
_SOFTMAX_ARRAYS = "const scalar_t* a, const scalar_t* g?, const lse_t* lse_in?, scalar_t* out?"
for _mode in SOFTMAX_MODES:
    # The unstaged kernels read grad_scores's g in the accumulation type (softmax.cu's grad_t).
    _unstaged = _SOFTMAX_ARRAYS.replace("scalar_t* g?", "acc_t* g?") if _mode == "grad_scores" else _SOFTMAX_ARRAYS
    _declare(
        "softmax",
        [f"softmax_runs_{_mode}"],
        _params(
            f"const i64* runs?, i64 num_runs, int R, i64 num_rows, int H, const i64* indptr, {_SOFTMAX_ARRAYS}, "
            "lse_t* lse_out?"
        ),
    )
    _declare(
        "softmax",
        [f"softmax_block_rows_{_mode}"],
        _params(
            f"const i64* rows, const int* stage_offsets, const i64* packs, i64 num_packs, int H, const i64* indptr, "
            f"{_SOFTMAX_ARRAYS}, lse_t* lse_out?"
        ),
    )
    _declare(
        "softmax",
        [f"softmax_groups_{_mode}"],
        _params(f"const i64* rows, i64 num_rows, int S, int K, int H, const i64* indptr, {_unstaged}, lse_t* lse_out?"),
    )
    _declare(
        "softmax",
        [f"softmax_rows_{_mode}"],
        _params(
            f"const i64* items, i64 num_items, i64 num_whole, int H, {_unstaged}, lse_t* lse_out?, "
            "SoftmaxState* partial?"
        ),
    )
    _declare(
        "softmax",
        [f"softmax_merge_{_mode}"],
        _params(
            "const i64* split_rows, i64 num_split, int H, const SoftmaxState* partial, SoftmaxState* row_states, "
            "lse_t* lse_out?"
        ),
    )
    _declare(
        "softmax",
        [f"softmax_write_{_mode}"],
        _params(f"const i64* items, i64 num_items, i64 num_whole, int H, {_unstaged}, const SoftmaxState* row_states"),
    )

# aggregate.cuh: the row kernels of one weight functor, batched with 1-, 2- and 4-element
# vectors and wide; their shared leading parameters, then the functor's own.
ROW_VARIANTS = ("v1", "v2", "v4", "wide")
_ROWS = (
    "const i64* items, i64 num_items, i64 num_whole, int H, int F, const idx_t* indices, const scalar_t* X, "
    "scalar_t* out, lse_t* lse_out?, acc_t* partial_acc?, SoftmaxState* partial_state?"
)


def _declare_rows(family, prefix, weight_params):
    params = _params(_ROWS + (", " + weight_params if weight_params else ""))
    _declare(family, [f"{prefix}_{variant}" for variant in ROW_VARIANTS], params)


# aggregate.cu: weights from per-edge arrays.
_declare_rows("aggregate", "aggregate_ones", "")
_declare_rows("aggregate", "aggregate_weights", "const scalar_t* weights, acc_t scale")
_declare_rows("aggregate", "aggregate_weights_perm", "const scalar_t* weights, const i64* perm, acc_t scale")
_declare_rows("aggregate", "aggregate_softmax", "const scalar_t* scores")
_declare_rows("aggregate", "aggregate_probs_perm", "const scalar_t* scores, const i64* perm, const lse_t* lse")
_declare(
    "aggregate",
    ["aggregate_merge_sum", "aggregate_merge_softmax"],
    _params(
        "const i64* split_rows, i64 num_split, int H, int F, const acc_t* partial_acc, "
        "const SoftmaxState* partial_state?, scalar_t* out, lse_t* lse_out?"
    ),
)

# attention.cu: the fused attention ops' row kernels share one trailing parameter list:
# a, b (q and k, or a_dst and a_src), D (0 for "gat"), c (scale, or the negative slope), and
# for the backward the forward's lse, grad_out, v, its width Fv and row_dot.
_ATTENTION = (
    "const scalar_t* a, const scalar_t* b, int D, acc_t c, const lse_t* lse?, "
    "const scalar_t* grad_out?, const scalar_t* v?, int Fv, const acc_t* row_dot?"
)
ATTENTION_SCORES = ("dot", "gat")
ATTENTION_STAGES = ("forward", "probs_t", "grad", "grad_t")
for _score in ATTENTION_SCORES:
    for _stage in ATTENTION_STAGES:
        _declare_rows("attention", f"attention_{_score}_{_stage}", _ATTENTION)
# The head-span kernels (VEC-element loads, NV vectors per lane) of each score and stage;
# "dot" and "gat" also with edge data (_edges); gatv2's att and the att gradient's per-warp
# partials at the end.
SPAN_SHAPES = ((1, 1), (1, 2), (1, 4), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2))
SPAN_STAGES = ("forward", "grad", "sources")
SPAN_SCORES = {"dot": ("", "_edges"), "gat": ("", "_edges"), "gatv2": ("",), "given": ("",), "weights": ("",)}
# attention_aggregate's given scores and spmm's given weights: the forward only.
SPAN_SCORE_STAGES = {"given": ("forward",), "weights": ("forward",)}
for _score, _variants in SPAN_SCORES.items():
    for _stage in SPAN_SCORE_STAGES.get(_score, SPAN_STAGES):
        _declare(
            "attention",
            [
                f"attention_{_score}_{_stage}_span{vec}x{nv}{variant}"
                for variant in _variants
                for vec, nv in SPAN_SHAPES
            ],
            _params(
                "const i64* items, i64 num_items, i64 num_whole, int H, int S, int D, int F, const idx_t* indices, "
                "const scalar_t* a, const scalar_t* b, acc_t c, const scalar_t* v, const scalar_t* grad_out?, "
                "const lse_t* lse?, const scalar_t* fwd_out?, acc_t* row_dot?, scalar_t* out1, lse_t* lse_out?, "
                "acc_t* partial1?, "
                "SoftmaxState* partial_state?, scalar_t* out2?, acc_t* partial2?, const scalar_t* edge?, "
                "const i64* edge_perm?, scalar_t* grad_edge?, const scalar_t* att?, acc_t* att_partial?, "
                "int accumulate"
            ),
        )
_declare(
    "attention",
    ["attention_row_dot"],
    _params("i64 num_pairs, int F, const scalar_t* grad_out, const scalar_t* out, acc_t* row_dot"),
)
_declare(
    "attention",
    ["attention_zero_empty"],
    _params(
        "const i64* items, i64 first, i64 num_rows, int chunks, int aligned, int W1, scalar_t* out1, int W2, "
        "scalar_t* out2?"
    ),
)

# gatv2.cu: GATv2's row kernels share their leading parameters; G heads side by side per warp.
_GATV2_ROWS = (
    "const i64* items, i64 num_items, i64 num_whole, int H, int D, int G, const idx_t* indices, "
    "const scalar_t* x_dst, const scalar_t* x_src, const scalar_t* att, acc_t slope"
)
_GATV2_GRAD = "const scalar_t* grad_out, const lse_t* lse, const acc_t* row_dot, scalar_t* grad, acc_t* partial_acc?"
_declare(
    "gatv2",
    ["gatv2_forward"],
    _params(_GATV2_ROWS + ", scalar_t* out, lse_t* lse_out?, acc_t* partial_acc?, SoftmaxState* partial_state?"),
)
_declare("gatv2", ["gatv2_grad_dst"], _params(_GATV2_ROWS + ", " + _GATV2_GRAD + ", acc_t* att_partial"))
_declare("gatv2", ["gatv2_grad_src"], _params(_GATV2_ROWS + ", " + _GATV2_GRAD))
_declare("gatv2", ["gatv2_reduce_att"], _params("i64 num_slots, int HD, const acc_t* att_partial, scalar_t* grad_att"))

# sddmm.cu: per-edge scores.
for _out in ("scalar_t", "acc_t"):  # sddmm_dot_*, and sddmm_dot_acc_* writing the accumulation type
    _declare(
        "sddmm",
        [f"sddmm_dot{'_acc' if _out == 'acc_t' else ''}_v{vec}" for vec in (1, 2, 4)],
        _params(
            "i64 num_edges, int H, int D, const idx_t* row_of_edge, const idx_t* indices, const scalar_t* A, "
            f"const scalar_t* B, acc_t scale, {_out}* out"
        ),
    )
_declare(
    "sddmm",
    ["sddmm_add"],
    _params(
        "i64 num_edges, int H, const idx_t* row_of_edge, const idx_t* indices, const scalar_t* A, const scalar_t* B, "
        "scalar_t* out"
    ),
)
_declare(
    "sddmm",
    ["gather_edges"],
    _params("i64 num_edges, int H, const idx_t* order, const scalar_t* a, scalar_t* out"),
)


def families():
    """Kernel family -> its entry point names, in declaration order."""
    result = {}
    for signature in SIGNATURES.values():
        result.setdefault(signature.family, []).append(signature.name)
    return {family: tuple(names) for family, names in result.items()}
