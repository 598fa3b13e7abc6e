// Fused attention: graph_attention (scores scale * <q[dst], k[src]>) and gat_attention
// (scores leaky_relu(a_dst[dst] + a_src[src])), forward and backward, on the row kernels
// of aggregate.cuh. Scores are computed where they are used and never stored: the forward
// is one online-softmax pass per row that writes out and the row lse; the backward
// recomputes each weight p = exp(score - lse[dst]) and, with
// ds = p * (<grad_out[dst], v[src]> - row_dot[dst]) and row_dot = <grad_out, out> per row
// and head, sums
//   attention_*_grad_*     over each row (the CSR graph):         ds * dscore * X[src]  (grad_q, grad_a_dst)
//   attention_*_grad_t_*   over each source (the transposed graph): ds * dscore * X[dst] (grad_k, grad_a_src)
//   attention_*_probs_t_*  over each source:                        p * grad_out[dst]    (grad_v)
// where dscore is the derivative of the score in the op's own input (scale, or the slope
// of leaky_relu at a_dst + a_src). On the transposed graph a row is a source node and a
// column a destination node. Every sum runs in a fixed order: no atomics, reproducible.
//
// Threads, memory and bounds: the row kernels of aggregate.cuh (one warp per plan item; the
// plan splits rows sooner here, see gpu/plan.py), with scores computed in the weight lanes.
// All row kernels take the same trailing parameters (ATTENTION_ARGS), unused ones null:
//   a, b      q and k (each (N, H, D)) or a_dst and a_src (each (N, H))
//   c         scale, or the negative slope
//   lse       (num_dst, H) forward log-sum-exp (backward only)
//   grad_out, v, Fv, row_dot   (score gradients only)
#include "aggregate.cuh"

// <a[0:n], b[0:n]> in a fixed order; 16-byte loads where both rows are aligned.
__device__ __forceinline__ acc_t vector_dot(const scalar_t* a, const scalar_t* b, int n) {
    constexpr int VEC16 = 16 / (int)sizeof(scalar_t);
    acc_t sum = 0;
    int i = 0;
    if ((((unsigned long long)a | (unsigned long long)b) & 15) == 0) {
        for (; i + VEC16 <= n; i += VEC16) {
            acc_t x[VEC16], y[VEC16];
            load_vec<VEC16>(a + i, x);
            load_vec<VEC16>(b + i, y);
#pragma unroll
            for (int v = 0; v < VEC16; ++v) sum += x[v] * y[v];
        }
    }
    for (; i < n; ++i) sum += load_scalar(a + i) * load_scalar(b + i);
    return sum;
}

// score = scale * <q[dst, h], k[src, h]>; its derivative in the dot product is scale.
struct DotScore {
    const scalar_t* q;
    const scalar_t* k;
    int H;
    int D;
    acc_t scale;
    __device__ acc_t operator()(i64 dst, i64 src, int head, acc_t* dscore) const {
        *dscore = scale;
        return scale * vector_dot(q + (dst * H + head) * D, k + (src * H + head) * D, D);
    }
};

// score = leaky_relu(z), z = a_dst[dst, h] + a_src[src, h]; its derivative in z is 1 for
// z > 0 and the slope otherwise (also at exactly 0, as on the CPU).
struct GatScore {
    const scalar_t* a_dst;
    const scalar_t* a_src;
    int H;
    acc_t slope;
    __device__ acc_t operator()(i64 dst, i64 src, int head, acc_t* dscore) const {
        acc_t z = load_scalar(a_dst + dst * H + head) + load_scalar(a_src + src * H + head);
        *dscore = z > 0 ? (acc_t)1 : slope;
        return z > 0 ? z : slope * z;
    }
};

// The forward: softmax of the scores over each row.
template <class S>
struct FusedSoftmax {
    static constexpr int KIND = SOFTMAX_ONLINE;
    S score;
    __device__ acc_t operator()(i64, i64 row, i64 col, int head) const {
        acc_t dscore;
        return score(row, col, head, &dscore);
    }
};

// The weight p = exp(score - lse[dst]); TRANSPOSED: the graph's rows are sources.
template <class S, bool TRANSPOSED>
struct FusedProbs {
    static constexpr int KIND = WEIGHTS;
    S score;
    const lse_t* lse;
    int H;
    __device__ acc_t operator()(i64, i64 row, i64 col, int head) const {
        i64 dst = TRANSPOSED ? col : row, src = TRANSPOSED ? row : col;
        acc_t dscore;
        return prob_from_lse(score(dst, src, head, &dscore), lse[dst * H + head]);
    }
};

// The gradient of the op's input inside the score: dscore * p * (<grad_out[dst], v[src]> - row_dot[dst]).
template <class S, bool TRANSPOSED>
struct FusedScoreGrad {
    static constexpr int KIND = WEIGHTS;
    S score;
    const lse_t* lse;
    const scalar_t* grad_out;
    const scalar_t* v;
    const acc_t* row_dot;
    int H;
    int Fv;
    __device__ acc_t operator()(i64, i64 row, i64 col, int head) const {
        i64 dst = TRANSPOSED ? col : row, src = TRANSPOSED ? row : col;
        acc_t dscore;
        acc_t p = prob_from_lse(score(dst, src, head, &dscore), lse[dst * H + head]);
        acc_t dp = vector_dot(grad_out + (dst * H + head) * Fv, v + (src * H + head) * Fv, Fv);
        return dscore * p * (dp - row_dot[dst * H + head]);
    }
};

#define ATTENTION_ARGS                                                                                      \
    , const scalar_t *a, const scalar_t *b, int D, acc_t c, const lse_t *lse, const scalar_t *grad_out, \
        const scalar_t *v, int Fv, const acc_t *row_dot

#define DOT_SCORE (DotScore{a, b, H, D, c})
#define DOT_FORWARD (FusedSoftmax<DotScore>{DOT_SCORE})
#define DOT_PROBS_T (FusedProbs<DotScore, true>{DOT_SCORE, lse, H})
#define DOT_GRAD (FusedScoreGrad<DotScore, false>{DOT_SCORE, lse, grad_out, v, row_dot, H, Fv})
#define DOT_GRAD_T (FusedScoreGrad<DotScore, true>{DOT_SCORE, lse, grad_out, v, row_dot, H, Fv})
AGGREGATE_ROWS_ENTRY_POINTS(attention_dot_forward, ATTENTION_ARGS, DOT_FORWARD)
AGGREGATE_ROWS_ENTRY_POINTS(attention_dot_probs_t, ATTENTION_ARGS, DOT_PROBS_T)
AGGREGATE_ROWS_ENTRY_POINTS(attention_dot_grad, ATTENTION_ARGS, DOT_GRAD)
AGGREGATE_ROWS_ENTRY_POINTS(attention_dot_grad_t, ATTENTION_ARGS, DOT_GRAD_T)

#define GAT_SCORE (GatScore{a, b, H, c})
#define GAT_FORWARD (FusedSoftmax<GatScore>{GAT_SCORE})
#define GAT_PROBS_T (FusedProbs<GatScore, true>{GAT_SCORE, lse, H})
#define GAT_GRAD (FusedScoreGrad<GatScore, false>{GAT_SCORE, lse, grad_out, v, row_dot, H, Fv})
#define GAT_GRAD_T (FusedScoreGrad<GatScore, true>{GAT_SCORE, lse, grad_out, v, row_dot, H, Fv})
AGGREGATE_ROWS_ENTRY_POINTS(attention_gat_forward, ATTENTION_ARGS, GAT_FORWARD)
AGGREGATE_ROWS_ENTRY_POINTS(attention_gat_probs_t, ATTENTION_ARGS, GAT_PROBS_T)
AGGREGATE_ROWS_ENTRY_POINTS(attention_gat_grad, ATTENTION_ARGS, GAT_GRAD)
AGGREGATE_ROWS_ENTRY_POINTS(attention_gat_grad_t, ATTENTION_ARGS, GAT_GRAD_T)

// row_dot[n, h] = <grad_out[n, h, :], out[n, h, :]>: one thread per (node, head), pairs in
// order across the grid, no shared memory. Bound: memory (reads both (N, H, F) arrays once).
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    attention_row_dot(i64 num_pairs, int F, const scalar_t* grad_out, const scalar_t* out, acc_t* row_dot) {
    i64 pair = grid_thread();
    if (pair >= num_pairs) return;
    row_dot[pair] = vector_dot(grad_out + pair * F, out + pair * F, F);
}
