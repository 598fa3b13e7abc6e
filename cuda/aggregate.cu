// Weighted neighbour sums with weights read from per-edge arrays (spmm, sddmm's backward,
// attention_aggregate); the kernels themselves are in aggregate.cuh.
//   aggregate_ones_*          w = 1                                          (spmm, weights=None)
//   aggregate_weights_*       w = scale * weights[e, h]                      (spmm, sddmm's backward)
//   aggregate_weights_perm_*  w = scale * weights[perm[e], h]                (their backward on the transpose)
// (scale applied to each weight, before the sum is rounded to the output type: a float16 sum
// that overflows unscaled still gives its scaled value.)
//   aggregate_softmax_*       w = softmax over the row of scores[e, h]       (attention_aggregate)
//   aggregate_probs_perm_*    w = exp(scores[perm[e], h] - lse[col(e), h])   (its backward on the transpose;
//                             none from destinations of lse -inf)
// and aggregate_merge_{sum,softmax}, which merge the partials of split rows for every family.
// Each functor's extra kernel parameters (*_ARGS, each after a comma) follow the row
// kernels' own (AGGREGATE_ROWS_ARGS).
#include "aggregate.cuh"

struct Ones {
    static constexpr int KIND = WEIGHTS;
    __device__ acc_t operator()(i64, i64, i64, int) const { return 1; }
};

struct Given {
    static constexpr int KIND = WEIGHTS;
    const scalar_t* weights;
    acc_t scale;
    int H;
    __device__ acc_t operator()(i64 e, i64, i64, int head) const {
        return scale * load_scalar(weights + e * H + head);
    }
};

struct GivenPerm {
    static constexpr int KIND = WEIGHTS;
    const scalar_t* weights;
    const i64* perm;
    acc_t scale;
    int H;
    __device__ acc_t operator()(i64 e, i64, i64, int head) const {
        return scale * load_scalar(weights + perm[e] * H + head);
    }
};

struct SoftmaxOfScores {
    static constexpr int KIND = SOFTMAX_TWO_PASS;
    const scalar_t* scores;
    int H;
    __device__ acc_t operator()(i64 e, i64, i64, int head) const { return load_scalar(scores + e * H + head); }
};

// A destination row without weight adds nothing to grad_values, whatever its grad_out holds.
struct ProbsPerm {
    static constexpr int KIND = WEIGHTS_OR_NONE;
    const scalar_t* scores;
    const i64* perm;
    const lse_t* lse;
    int H;
    __device__ acc_t operator()(i64 e, i64, i64 col, int head, bool& none) const {
        const acc_t row_lse = lse[col * H + head];
        none = row_lse == neg_inf();
        return prob_from_lse(load_scalar(scores + perm[e] * H + head), row_lse);
    }
};

#define NO_ARGS
#define ONES_W (Ones{})
AGGREGATE_ROWS_ENTRY_POINTS(aggregate_ones, NO_ARGS, ONES_W)

#define GIVEN_ARGS , const scalar_t *weights, acc_t scale
#define GIVEN_W (Given{weights, scale, H})
AGGREGATE_ROWS_ENTRY_POINTS(aggregate_weights, GIVEN_ARGS, GIVEN_W)

#define GIVEN_PERM_ARGS , const scalar_t *weights, const i64 *perm, acc_t scale
#define GIVEN_PERM_W (GivenPerm{weights, perm, scale, H})
AGGREGATE_ROWS_ENTRY_POINTS(aggregate_weights_perm, GIVEN_PERM_ARGS, GIVEN_PERM_W)

#define SOFTMAX_ARGS , const scalar_t *scores
#define SOFTMAX_W (SoftmaxOfScores{scores, H})
AGGREGATE_ROWS_ENTRY_POINTS(aggregate_softmax, SOFTMAX_ARGS, SOFTMAX_W)

#define PROBS_PERM_ARGS , const scalar_t *scores, const i64 *perm, const lse_t *lse
#define PROBS_PERM_W (ProbsPerm{scores, perm, lse, H})
AGGREGATE_ROWS_ENTRY_POINTS(aggregate_probs_perm, PROBS_PERM_ARGS, PROBS_PERM_W)

#define AGGREGATE_MERGE_ENTRY_POINT(NAME, SOFTMAX)                                                             \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                               \
        aggregate_merge_##NAME(const i64* split_rows, i64 num_split, int H, int F, const acc_t* partial_acc,   \
                               const SoftmaxState* partial_state, scalar_t* out, lse_t* lse_out) {            \
        aggregate_merge<SOFTMAX>(split_rows, num_split, H, F, partial_acc, partial_state, out, lse_out);      \
    }

AGGREGATE_MERGE_ENTRY_POINT(sum, false)
AGGREGATE_MERGE_ENTRY_POINT(softmax, true)
