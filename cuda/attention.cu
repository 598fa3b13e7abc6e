// Fused attention: graph_attention (scores scale * <q[dst], k[src]>) and gat_attention
// (scores leaky_relu(a_dst[dst] + a_src[src])), forward and backward. Scores are computed
// where they are used and never stored: the forward is one online-softmax pass per row that
// writes out and the row lse; the backward recomputes each weight p = exp(score - lse[dst])
// and, with ds = p * (<grad_out[dst], v[src]> - row_dot[dst]) and row_dot = <grad_out, out>
// per row and head (attention_row_dot), sums (the edges of a row without weight, lse -inf,
// adding nothing, whatever its inputs hold)
//   over each row (the CSR graph):           ds * dscore * k[src] or ds * dscore  (grad_q, grad_a_dst)
//   over each source (the transposed graph): ds * dscore * q[dst] or ds * dscore  (grad_k, grad_a_src)
//                                            and p * grad_out[dst]                (grad_v)
// where dscore is the derivative of the score in the op's own input (scale, or the slope
// of leaky_relu at a_dst + a_src). On the transposed graph a row is a source node and a
// column a destination node. Every sum runs in a fixed order: no atomics, reproducible.
//
// Two sets of kernels:
//   the head-span kernels (attention_*_{forward,grad,sources}_span*, at the end of this
//     file), used where H <= 32 and a head's row fits its lanes: the whole warp gathers each
//     edge's node rows once, so the backward reads each edge's rows in two passes (k[src]
//     and v[src] over the rows, q[dst] and grad_out[dst] over the sources);
//   the row kernels of aggregate.cuh (attention_*_{forward,grad,grad_t,probs_t}_*), for any
//     shape, with the scores computed in the weight lanes; over the sources they take two
//     passes, grad_t (ds * dscore * X[dst]) and probs_t (p * grad_out[dst]).
// Both run over the fused plan (one warp per item; the plan splits rows sooner here, see
// gpu/plan.py). All row kernels take the same trailing parameters (ATTENTION_ARGS),
// unused ones null:
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

// score = leaky_relu(z), z = a_dst[dst, h] + a_src[src, h], and its derivative in z.
struct GatScore {
    const scalar_t* a_dst;
    const scalar_t* a_src;
    int H;
    acc_t slope;
    __device__ acc_t operator()(i64 dst, i64 src, int head, acc_t* dscore) const {
        acc_t z = load_scalar(a_dst + dst * H + head) + load_scalar(a_src + src * H + head);
        *dscore = leaky_grad(z, slope);
        return leaky(z, slope);
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

// The weight p = exp(score - lse[dst]); TRANSPOSED: the graph's rows are sources. Here and in
// FusedScoreGrad (the backward's weights), none for the edges of a destination row without
// weight (lse -inf), which add nothing to any gradient, as a row without edges: their q or k
// (the -inf that made the scores), grad_out or v may be infinite, where a zero weight would
// add NaN.
template <class S, bool TRANSPOSED>
struct FusedProbs {
    static constexpr int KIND = WEIGHTS_OR_NONE;
    S score;
    const lse_t* lse;
    int H;
    __device__ acc_t operator()(i64, i64 row, i64 col, int head, bool& none) const {
        i64 dst = TRANSPOSED ? col : row, src = TRANSPOSED ? row : col;
        const acc_t row_lse = lse[dst * H + head];
        none = row_lse == neg_inf();
        if (none) return 0;
        acc_t dscore;
        return prob_from_lse(score(dst, src, head, &dscore), row_lse);
    }
};

// The gradient of the op's input inside the score: dscore * p * (<grad_out[dst], v[src]> - row_dot[dst]).
template <class S, bool TRANSPOSED>
struct FusedScoreGrad {
    static constexpr int KIND = WEIGHTS_OR_NONE;
    S score;
    const lse_t* lse;
    const scalar_t* grad_out;
    const scalar_t* v;
    const acc_t* row_dot;
    int H;
    int Fv;
    __device__ acc_t operator()(i64, i64 row, i64 col, int head, bool& none) const {
        i64 dst = TRANSPOSED ? col : row, src = TRANSPOSED ? row : col;
        const acc_t row_lse = lse[dst * H + head];
        none = row_lse == neg_inf();
        if (none) return 0;
        acc_t dscore;
        acc_t p = prob_from_lse(score(dst, src, head, &dscore), row_lse);
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

// The gradients of the plan's empty rows (items first, first + 1, ...: the plan puts them last),
// which the head-span backward passes are not launched over: zeros in out1 (W1 elements per
// row) and out2 (W2, where given). A warp per empty row in those passes cost a warp's start,
// its item and its own node rows' loads (two or three rows) for each such row, half the rows
// of an R-MAT graph. Thread j of a row writes its elements [j * Z, j * Z + Z), Z = 16 /
// sizeof(scalar_t): one 16-byte store where the array's rows are 16-byte aligned (bit 0 of
// `aligned` for out1, bit 1 for out2; the launcher checks), else element by element. No
// shared memory. Bound: memory (writes only).
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    attention_zero_empty(const i64* items, i64 first, i64 num_rows, int chunks, int aligned, int W1, scalar_t* out1,
                         int W2, scalar_t* out2) {
    constexpr int Z = 16 / (int)sizeof(scalar_t);
    const i64 t = grid_thread();
    if (t >= num_rows * chunks) return;
    const i64 k = t / chunks;
    const int j = (int)(t - k * chunks);
    const i64 row = items[4 * (first + k)];
    scalar_t* arrays[2] = {out1, out2};
    const int widths[2] = {W1, W2};
#pragma unroll
    for (int a = 0; a < 2; ++a) {
        const int W = widths[a];
        if (arrays[a] == 0 || j * Z >= W) continue;
        scalar_t* p = arrays[a] + row * W + j * Z;
        if (aligned >> a & 1) {
            *reinterpret_cast<uint4*>(p) = make_uint4(0, 0, 0, 0);
        } else {
            for (int i = 0; i < Z && j * Z + i < W; ++i) store_scalar(p + i, 0);
        }
    }
}

// ---- Head-span kernels: the fused ops' row passes with each node row gathered by the whole warp ----
//
// Also gatv2_attention's (score kind SCORE_GATV2; the row kernels of gatv2.cu take the shapes
// these do not): a, b = x_dst, x_src, v = x_src, c = the slope, att (H, D) read whole by
// every warp. Over the rows each edge's x_src row is gathered once, for the score and the
// message; the row pass writes grad_x_dst and, per warp, the att gradient's terms (see
// attention_span); the pass over the sources gathers x_dst[dst] and grad_out[dst] and writes
// grad_x_src = sum ds * att * leaky_relu'(z) + p * grad_out[dst].
//
// Lanes: S lanes per head (from the launcher: the fewest, a power of two, whose loads cover
// a head's row); a group is S lanes for each of the heads rounded up to a power of two, and
// the warp holds G = WARP / group groups, which take the item's edges in turn (group g the
// edges begin + g + G * j) and combine their results at the end in a fixed order. Lane l of
// group g serves head h (lanes with h >= H hold nothing but join every shuffle) at position
// r, and owns elements [r * W, r * W + W) of its head's D elements (q, k)
// and of its F elements (v, grad_out), W = VEC * NV, those past D or F masked. The item's
// own node rows (its row of q, grad_out, k or v) stay in registers for the whole item; each
// edge's node rows are gathered once, VEC elements per load, coalesced across the warp; a
// dot product of two rows is each lane's W terms summed in order, then summed over the
// head's S lanes by an xor butterfly (every lane gets the same, order-fixed sum). SPAN_EDGES
// edges per group are loaded before any is used, so each warp has G * SPAN_EDGES gathers in
// flight; they wait for their turn as loaded (Packed: float16 two elements to a register) and
// are converted once, when used. Float16 rows load 16 bytes at a time (VEC = 8) where aligned.
// Stages:
//   forward  (rows)      online softmax of the scores, out = sum p * v[col] and the row lse
//   grad     (rows)      row_dot[row] = <grad_out[row], out[row]> (stored for the sources),
//                        ds = p * (<grad_out[row], v[col]> - row_dot[row]); grad_q (dot:
//                        sum ds * scale * k[col]) or grad_a_dst (gat: sum ds * dscore)
//   sources  (transpose) ds with p = exp(score - lse[col]), col a destination; grad_k (sum
//                        ds * scale * q[col]) or grad_a_src (sum ds * dscore), and grad_v
//                        (sum p * grad_out[col]), both in the one pass
// Edge data (the _edges kernels, head-span only): graph_attention's edge_feat (E, H, D), with
// D = F, joins k and v (score scale * <q[dst], k[src] + e>, message v[src] + e), and
// gat_attention's edge_score (E, H) joins z. Each pass reads each edge's row once: over the
// rows in edge order, over the sources through the transpose's permutation (edge_perm). The
// row pass writes each edge's gradient once, in edge order: ds * scale * q[dst] +
// p * grad_out[dst] (dot) or ds * dscore (gat).
// Whole rows write their outputs; split rows write partials (forward: accumulators and
// softmax states, merged by aggregate_merge_softmax; backward: sums, merged by
// aggregate_merge_sum), in item order. No atomics, no shared memory. Bound: memory (the gathers).
#define SPAN_FORWARD 0
#define SPAN_GRAD 1
#define SPAN_SOURCES 2

// W elements of a lane's segment of node `node`'s row of head h (head width `width`):
// VEC-element loads, zeros past the width and for lanes of no head.
template <int VEC, int NV>
__device__ __forceinline__ void span_load(const scalar_t* X, i64 node, int H, int h, int r, int width, bool on,
                                          acc_t* x) {
    constexpr int W = VEC * NV;
    const scalar_t* p = X + (node * H + h) * width + r * W;
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        if (on && r * W + v * VEC < width) {
            load_vec<VEC>(p + v * VEC, x + v * VEC);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) x[v * VEC + i] = 0;
        }
    }
}

// acc += the W elements of the lane's segment that node `node`'s row holds (span_load's).
template <int VEC, int NV>
__device__ __forceinline__ void span_add_stored(const scalar_t* X, i64 node, int H, int h, int r, int width, bool on,
                                                acc_t* acc) {
    acc_t stored[VEC * NV];
    span_load<VEC, NV>(X, node, H, h, r, width, on, stored);
#pragma unroll
    for (int i = 0; i < VEC * NV; ++i) acc[i] += stored[i];
}

// span_load into packed storage (zeros past the width and for lanes of no head): an edge's
// gathered rows wait in registers for the edge's turn, converted where used.
template <int VEC, int NV>
__device__ __forceinline__ void span_gather(const scalar_t* X, i64 node, int H, int h, int r, int width, bool on,
                                            Packed<VEC * NV>& x) {
    constexpr int W = VEC * NV;
    const scalar_t* p = X + (node * H + h) * width + r * W;
    x.clear();
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        if (on && r * W + v * VEC < width) load_packed<VEC>(p + v * VEC, x, v * VEC);
    }
}

__device__ __forceinline__ SoftmaxState shfl_xor_state(SoftmaxState s, int mask) {
    s.m = shfl_xor(s.m, mask);
    s.l = shfl_xor(s.l, mask);
    return s;
}

// Sum of x over the S lanes of each head (S a power of two), in every lane of the head.
__device__ __forceinline__ acc_t span_sum(acc_t x, int S) {
    for (int offset = S / 2; offset >= 1; offset /= 2) x += shfl_xor(x, offset);
    return x;
}

template <int W>
__device__ __forceinline__ acc_t segment_dot(const acc_t* a, const acc_t* b) {
    acc_t sum = 0;
#pragma unroll
    for (int i = 0; i < W; ++i) sum += a[i] * b[i];
    return sum;
}

// Stores the W = VEC * NV accumulators of a lane's segment at dst (whole rows, VEC elements a
// store, as span_load loads them: the width is a multiple of VEC) or at partial (split items,
// in the accumulation type), masked past the width.
template <int VEC, int NV>
__device__ __forceinline__ void span_store(const acc_t* acc, acc_t scale_by, bool on, int r, int width,
                                           scalar_t* dst, acc_t* partial) {
    constexpr int W = VEC * NV;
    if (!on) return;
    // float64 stores element by element: with the vector stores, ptxas for sm_80 (NVRTC 13)
    // crashes compiling the float64 attention kernels.
    if (sizeof(scalar_t) == 8) {
#pragma unroll
        for (int i = 0; i < W; ++i) {
            if (r * W + i >= width) break;
            if (partial != 0) partial[r * W + i] = acc[i];
            else store_scalar(dst + r * W + i, acc[i] * scale_by);
        }
        return;
    }
    if (partial != 0) {
#pragma unroll
        for (int i = 0; i < W; ++i) {
            if (r * W + i >= width) break;
            partial[r * W + i] = acc[i];
        }
        return;
    }
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        if (r * W + v * VEC < width) store_vec<VEC>(dst + r * W + v * VEC, acc + v * VEC, scale_by);
    }
}

// A warp's lanes in the head-span kernels: edge groups of group_lanes lanes (G of them), S
// lanes per head; lane (g, h, r) serves head h of group g at position r (on: h < H). A group
// is the lanes of every head (heads rounded up to a power of two), S per head; the G groups
// take an item's edges in turn. Every count is a power of two: shifts and masks, not
// divisions (this runs once per item, and items average a few edges on skewed graphs).
struct SpanLanes {
    int group_lanes, G, g, h, r;
    bool on;
};

__device__ __forceinline__ SpanLanes span_lanes(int H, int S) {
    const int lane = lane_id();
    const int s_bits = __ffs(S) - 1;
    const int head_bits = H > 1 ? 32 - __clz(H - 1) : 0;
    const int group_bits = s_bits + head_bits;
    SpanLanes lanes;
    lanes.group_lanes = 1 << group_bits;
    lanes.G = WARP >> group_bits;
    lanes.g = lane >> group_bits;
    lanes.h = (lane >> s_bits) & ((1 << head_bits) - 1);
    lanes.r = lane & (S - 1);
    lanes.on = lanes.h < H;
    return lanes;
}

// The score kinds of the head-span kernels: graph_attention (scale * <q, k>), gat_attention
// (leaky_relu(a_dst + a_src)) and gatv2_attention (sum_k att[h, k] * leaky_relu(x_dst[k] +
// x_src[k]), whose derivative is per element: att[h, k] * leaky_relu'(z[k])),
// attention_aggregate's given scores and spmm's given weights.
#define SCORE_DOT 0
#define SCORE_GAT 1
#define SCORE_GATV2 2
// attention_aggregate's forward: the scores are given, a (E, H) in edge order; no node row
// enters them (forward only).
#define SCORE_GIVEN 3
// spmm: the weights are given, a (E, H) in edge order, and summed as they are (no softmax;
// forward only).
#define SCORE_WEIGHTS 4

// One plan item (items[index]) of a head-span kernel. gatv2's row pass also adds each edge's
// ds * leaky_relu(z) to acc_att (the lane's W elements of its head's att gradient), across
// the warp's items (see attention_span).
template <int STAGE, int KIND, bool EDGE, int VEC, int NV>
__device__ __forceinline__ void span_item(i64 index, acc_t* acc_att, const i64* items, i64 num_items, i64 num_whole,
                                          int H, int S, int D, int F, const idx_t* indices, const scalar_t* a,
                                          const scalar_t* b, acc_t c, const scalar_t* v, const scalar_t* grad_out,
                                          const lse_t* lse, const scalar_t* fwd_out, acc_t* row_dot,
                                          scalar_t* out1, lse_t* lse_out, acc_t* partial1,
                                          SoftmaxState* partial_state, scalar_t* out2, acc_t* partial2,
                                          const scalar_t* edge, const i64* edge_perm, scalar_t* grad_edge,
                                          const scalar_t* att, acc_t* att_partial, int accumulate) {
    constexpr int W = VEC * NV;
    constexpr bool DOT = KIND == SCORE_DOT, V2 = KIND == SCORE_GATV2;
    constexpr bool GIVEN = KIND == SCORE_GIVEN || KIND == SCORE_WEIGHTS;  // each edge's score read in edge order
    constexpr bool SOFTMAX = KIND != SCORE_WEIGHTS;  // the forward's weights: a softmax of the scores
    constexpr bool ROWS = KIND != SCORE_GAT && !GIVEN;  // node rows of width D enter the score
    // gatv2 over the rows gathers x_src once, for the score and the message (xf); over the
    // sources it gathers x_dst (xd) and grad_out (xf).
    constexpr bool GATHER_D = DOT || (V2 && STAGE == SPAN_SOURCES);
    // Edge data over the rows: the edge's row joins k and v; float16 joins at the edge's turn
    // (in the data type the sum would round), the others as soon as the rows are loaded.
    constexpr bool JOIN = EDGE && DOT && STAGE != SPAN_SOURCES;
    constexpr bool JOIN_AT_USE = sizeof(scalar_t) != sizeof(acc_t);
    static_assert(!(V2 && EDGE), "gatv2 takes no edge data");
    static_assert(!GIVEN || (STAGE == SPAN_FORWARD && !EDGE), "given scores or weights: forward only, no edge data");
    // Edges in flight per group: two; four for gat in float16 where a lane gathers at most 16
    // bytes of a row per edge, so that its warps have as many bytes in flight as float32 ones
    // (held packed, four float16 rows take the registers of two float32 ones; the dot kernels,
    // which gather two rows per edge, would spill under their register caps). Measured on an
    // H200: four in float32 (where a lane's segment is short) made the backward's row pass 1.3x
    // slower on an R-MAT graph (more registers, fewer warps to hide each item's start).
    // The forward's online softmax: where LAZY, the running max moves (and the sums are
    // rescaled) only at an edge whose score passes it; otherwise every edge takes add_score's
    // update (two exps, every accumulator rescaled). Measured on an H200 (uniform 1M-row,
    // dense 100k-row and R-MAT graphs, against the update on every edge): the dot forward ran
    // 0.86-1.07x the time (above 1.01x only where the tree's own run-to-run spread was 7-9%),
    // gat in float16 0.82-1.00x; gat in float32, whose score costs little beside the divergent
    // branch, ran 1.095x on the uniform graph (H=8 F=16, rows of 8-24 edges, where the max
    // moves often) and 0.90x on the dense one; gatv2 (its score a leaky_relu dot per head)
    // 0.92-1.01x on the uniform and R-MAT graphs.
    constexpr bool LAZY = KIND == SCORE_GIVEN || DOT || V2 || (KIND == SCORE_GAT && sizeof(scalar_t) == 2);
    constexpr int SPAN_EDGES = KIND == SCORE_GAT && STAGE == SPAN_FORWARD && sizeof(scalar_t) == 2 && W * sizeof(scalar_t) <= 16 ? 4 : 2;
    const Item item = plan_item(items, index);
    const SpanLanes lanes = span_lanes(H, S);
    const int group_lanes = lanes.group_lanes, G = lanes.G, g = lanes.g, h = lanes.h, r = lanes.r;
    const bool on = lanes.on;
    const i64 row = item.row;
    const bool split = item.split >= 0;
    const i64 slot = index - num_whole;

    // The item's own rows: q[row] (forward, grad) or k[row] (sources), for the dot score;
    // grad_out[row] (grad) or v[row] (sources), for <grad_out[dst], v[src]>.
    // gatv2: x_dst[row] (rows) or x_src[row] (sources), and its head's att row.
    acc_t own_d[W], own_f[W], own_att[W];
    if (ROWS) span_load<VEC, NV>(STAGE == SPAN_SOURCES ? b : a, row, H, h, r, D, on, own_d);
    if (STAGE == SPAN_GRAD) span_load<VEC, NV>(grad_out, row, H, h, r, F, on, own_f);
    if (STAGE == SPAN_SOURCES) span_load<VEC, NV>(v, row, H, h, r, F, on, own_f);
    if (V2) span_load<VEC, NV>(att, 0, H, h, r, D, on, own_att);
    // gat: the row's own term of z (a_dst[row] over rows, a_src[row] over sources).
    const acc_t own_term =
        KIND == SCORE_GAT && on ? load_scalar((STAGE == SPAN_SOURCES ? b : a) + row * H + h) : (acc_t)0;
    const acc_t own_lse = STAGE == SPAN_GRAD && on ? lse[row * H + h] : (acc_t)0;
    // The row pass computes row_dot = <grad_out[row], out[row]> itself and stores it for the
    // source pass (every item of a split row stores the same value).
    acc_t own_row_dot = 0;
    if (STAGE == SPAN_GRAD) {
        acc_t own_out[W];
        span_load<VEC, NV>(fwd_out, row, H, h, r, F, on, own_out);
        own_row_dot = span_sum(segment_dot<W>(own_f, own_out), S);
        if (on && r == 0 && g == 0) row_dot[row * H + h] = own_row_dot;
    }
    // The gathered arrays: k or q (dot), v or grad_out, and gat's other term.
    const scalar_t* gather_d = STAGE == SPAN_SOURCES ? a : b;
    const scalar_t* gather_f = STAGE == SPAN_SOURCES ? grad_out : v;

    acc_t acc_d[W], acc_f[W];  // grad_q or grad_k; out or grad_v
#pragma unroll
    for (int i = 0; i < W; ++i) acc_d[i] = acc_f[i] = 0;
    acc_t acc_s = 0;  // gat: grad_a_dst or grad_a_src
    SoftmaxState state = empty_state();

    // One head's given scores cost little to read twice: with H == 1 a first pass over the
    // item's scores finds the max, so that each edge's weight is one exp and no accumulator
    // is ever rescaled (handing the edges to the LAZY update below after this pass, which
    // then never moves the max, ran 1.05-1.10x slower on the three graphs). Lane (g, r)
    // takes edges begin + g * S + r, + 32, ... (G * S == 32 with one head); the max reaches
    // every lane by an xor butterfly. With H heads a lane would read its head's scores
    // H-strided, H times the loads per lane: measured on an H200, H=8 F=16 ran 1.05-1.17x
    // slower that way on a uniform, a dense and an R-MAT graph, where H=1 F=64 ran 0.87x on
    // the dense graph and 0.99-1.01x on the others. The LAZY update serves H > 1.
    const bool given_max_first = KIND == SCORE_GIVEN && H == 1;
    acc_t given_shift = 0;
    if (given_max_first) {
        acc_t m = neg_inf();
        for (i64 e = item.begin + (i64)g * S + r; e < item.end; e += WARP) m = nan_max(m, load_scalar(a + e));
        for (int offset = 1; offset < WARP; offset *= 2) m = nan_max(m, shfl_xor(m, offset));
        state.m = m;
        given_shift = row_shift(m);
    }

    // Every lane runs every iteration and every shuffle; an edge slot past the item's end
    // (only ever in the last iteration, and per group) loads nothing and changes nothing.
    for (i64 e0 = item.begin; e0 < item.end; e0 += (i64)G * SPAN_EDGES) {
        bool valid[SPAN_EDGES];
        i64 cols[SPAN_EDGES], edge_ids[SPAN_EDGES];
        Packed<W> xd[SPAN_EDGES], xf[SPAN_EDGES];
        Packed<W> xe[SPAN_EDGES];  // EDGE && DOT: the edge's row
        acc_t terms[SPAN_EDGES], dst_lse[SPAN_EDGES], dst_row_dot[SPAN_EDGES];
        acc_t edge_term[SPAN_EDGES];  // EDGE && !DOT: the edge's score term
#pragma unroll
        for (int u = 0; u < SPAN_EDGES; ++u) {
            const i64 e = e0 + g + (i64)G * u;  // group g's u-th edge of this iteration
            valid[u] = e < item.end;
            cols[u] = valid[u] ? (i64)indices[e] : 0;
            // The edge's index in the caller's (CSR) order: over the sources, through the transpose's permutation.
            if (EDGE || GIVEN) edge_ids[u] = !valid[u] ? 0 : (STAGE == SPAN_SOURCES ? edge_perm[e] : e);
        }
#pragma unroll
        for (int u = 0; u < SPAN_EDGES; ++u) {
            const bool load = on && valid[u];
            if (GATHER_D) span_gather<VEC, NV>(gather_d, cols[u], H, h, r, D, load, xd[u]);
            span_gather<VEC, NV>(gather_f, cols[u], H, h, r, F, load, xf[u]);
            terms[u] = KIND == SCORE_GAT && load ? load_scalar((STAGE == SPAN_SOURCES ? a : b) + cols[u] * H + h)
                                                 : (acc_t)0;
            if (GIVEN) terms[u] = load ? load_scalar(a + edge_ids[u] * H + h) : (acc_t)0;  // the edge's score
            if (STAGE == SPAN_SOURCES) {  // the destination's row terms, loaded with its rows
                dst_lse[u] = load ? lse[cols[u] * H + h] : (acc_t)0;
                dst_row_dot[u] = load ? row_dot[cols[u] * H + h] : (acc_t)0;
            }
            if (EDGE && DOT) span_gather<VEC, NV>(edge, edge_ids[u], H, h, r, D, load, xe[u]);
            if (EDGE && !DOT) edge_term[u] = load ? load_scalar(edge + edge_ids[u] * H + h) : (acc_t)0;
            // Over the rows the edge's row joins the gathered k and v (k[src] + e, v[src] + e):
            // here where the data type holds the sum exactly (float32, float64), so that the
            // edge's row is not held on; float16 joins at the edge's turn (below).
            if (JOIN && !JOIN_AT_USE) {
#pragma unroll
                for (int i = 0; i < W; ++i) {
                    xd[u].put(i, xd[u][i] + xe[u][i]);
                    xf[u].put(i, xf[u][i] + xe[u][i]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < SPAN_EDGES; ++u) {
            // Edge u's gathered rows, converted once, at their turn (float16: joined with the
            // edge's row here).
            acc_t gd[W], gf[W], ge[W];
#pragma unroll
            for (int i = 0; i < W; ++i) {
                ge[i] = EDGE && DOT ? xe[u][i] : (acc_t)0;
                gd[i] = GATHER_D ? xd[u][i] : (acc_t)0;
                gf[i] = xf[u][i];
                if (JOIN && JOIN_AT_USE) {
                    gd[i] += ge[i];
                    gf[i] += ge[i];
                }
            }
            acc_t score, dscore;
            if (DOT) {
                // Over the sources the edge's row joins the item's own k[src] (and v[src] below).
                acc_t part = 0;
                if (EDGE && STAGE == SPAN_SOURCES) {
#pragma unroll
                    for (int i = 0; i < W; ++i) part += (own_d[i] + ge[i]) * gd[i];
                } else {
                    part = segment_dot<W>(own_d, gd);
                }
                score = c * span_sum(part, S);
                dscore = c;
            } else if (V2) {
                // z = x_dst + x_src: own row and x_src[col] (xf) over the rows, x_dst[col] (xd)
                // and own row over the sources; the derivative is per element (below).
                acc_t part = 0;
#pragma unroll
                for (int i = 0; i < W; ++i) part += own_att[i] * leaky(own_d[i] + (GATHER_D ? gd[i] : gf[i]), c);
                score = span_sum(part, S);
                dscore = 1;
            } else if (GIVEN) {
                score = terms[u];
                dscore = 1;
            } else {
                acc_t z = own_term + terms[u];
                if (EDGE) z += edge_term[u];
                score = leaky(z, c);
                dscore = leaky_grad(z, c);
            }
            if (STAGE == SPAN_FORWARD) {
                if (!valid[u]) continue;  // after this slot's last shuffle
                if (!SOFTMAX) {
#pragma unroll
                    for (int i = 0; i < W; ++i) acc_f[i] += score * gf[i];
                    continue;
                }
                if (given_max_first) {  // the max is the item's (above): no rescaling
                    const acc_t p = shifted_exp(score, given_shift);
                    state.l += p;
#pragma unroll
                    for (int i = 0; i < W; ++i) acc_f[i] += p * gf[i];
                    continue;
                }
                if (LAZY) {
                    // The running max moves only where a score passes it (or is NaN, which
                    // then stays), and only then are the sums carried over to it; most edges
                    // take one exp and no rescaling. The sums are those of the online update
                    // below, up to rounding.
                    if (!(score <= state.m)) {
                        const acc_t m = nan_max(state.m, score);
                        const acc_t factor = rescale(state.m, m);
                        state.l *= factor;
#pragma unroll
                        for (int i = 0; i < W; ++i) acc_f[i] *= factor;
                        state.m = m;
                    }
                    const acc_t p = shifted_exp(score, row_shift(state.m));
                    state.l += p;
#pragma unroll
                    for (int i = 0; i < W; ++i) acc_f[i] += p * gf[i];
                    continue;
                }
                SoftmaxState next = add_score(state, score);
                acc_t p = score_weight(score, next.m);
                acc_t factor = rescale(state.m, next.m);
#pragma unroll
                for (int i = 0; i < W; ++i) acc_f[i] = acc_f[i] * factor + p * gf[i];
                state = next;
            } else {
                const acc_t row_lse = STAGE == SPAN_GRAD ? own_lse : dst_lse[u];
                acc_t p = prob_from_lse(score, row_lse);
                acc_t part = 0;
                if (EDGE && DOT && STAGE == SPAN_SOURCES) {
#pragma unroll
                    for (int i = 0; i < W; ++i) part += (own_f[i] + ge[i]) * gf[i];
                } else {
                    part = segment_dot<W>(own_f, gf);
                }
                acc_t dp = span_sum(part, S);
                if (!valid[u]) continue;  // after this slot's last shuffle
                // An edge of a row without weight (lse -inf) adds nothing to any gradient, as a
                // row without edges: its q or k (the -inf that made its scores), grad_out or v
                // may be infinite, where its zero weight would add NaN.
                const bool weightless = row_lse == neg_inf();
                acc_t w1 = weightless ? (acc_t)0
                                      : dscore * (p * (dp - (STAGE == SPAN_GRAD ? own_row_dot : dst_row_dot[u])));
                if (EDGE && STAGE == SPAN_GRAD) {
                    // The edge's gradient, written once, in edge order: dot: w1 * q[row] +
                    // p * grad_out[row] (D = F); gat: w1.
                    if (DOT && on) {
                        scalar_t* dst = grad_edge + (edge_ids[u] * H + h) * D + r * W;
#pragma unroll
                        for (int i = 0; i < W; ++i) {
                            if (r * W + i >= D) break;
                            store_scalar(dst + i, weightless ? (acc_t)0 : w1 * own_d[i] + p * own_f[i]);
                        }
                    }
                    if (!DOT && on && r == 0) store_scalar(grad_edge + edge_ids[u] * H + h, w1);
                }
                if (weightless) continue;
                if (DOT) {
#pragma unroll
                    for (int i = 0; i < W; ++i) acc_d[i] += w1 * gd[i];
                } else if (V2) {
                    // grad of z: ds * att * leaky_relu'(z), the same for x_dst and x_src; the
                    // row pass also sums ds * leaky_relu(z) for att.
#pragma unroll
                    for (int i = 0; i < W; ++i) {
                        const acc_t z = own_d[i] + (GATHER_D ? gd[i] : gf[i]);
                        acc_d[i] += w1 * own_att[i] * leaky_grad(z, c);
                        if (STAGE == SPAN_GRAD) acc_att[i] += w1 * leaky(z, c);
                    }
                } else {
                    acc_s += w1;
                }
                if (STAGE == SPAN_SOURCES) {
#pragma unroll
                    for (int i = 0; i < W; ++i) acc_f[i] += p * gf[i];
                }
            }
        }
    }

    // The groups' results, combined by an xor butterfly over the groups (each merge is
    // symmetric, so every group ends with the same, order-fixed result); group 0 writes.
    for (int offset = group_lanes; offset < WARP; offset *= 2) {
        if (STAGE == SPAN_FORWARD && SOFTMAX) {
            SoftmaxState other = shfl_xor_state(state, offset);
            SoftmaxState merged = merge_states(state, other);
            acc_t mine = rescale(state.m, merged.m), theirs = rescale(other.m, merged.m);
#pragma unroll
            for (int i = 0; i < W; ++i) {
                acc_t their_acc = shfl_xor(acc_f[i], offset);
                acc_f[i] = (state.l == 0 ? (acc_t)0 : acc_f[i] * mine) + (other.l == 0 ? (acc_t)0 : their_acc * theirs);
            }
            state = merged;
        } else {
#pragma unroll
            for (int i = 0; i < W; ++i) {
                if (ROWS) acc_d[i] += shfl_xor(acc_d[i], offset);
                if (STAGE != SPAN_GRAD) acc_f[i] += shfl_xor(acc_f[i], offset);  // sources; spmm's forward
            }
            if (KIND == SCORE_GAT) acc_s += shfl_xor(acc_s, offset);
        }
    }
    if (g != 0) return;

    const int HD = H * D, HF = H * F;
    if (STAGE == SPAN_FORWARD) {
        acc_t inverse = !SOFTMAX ? (acc_t)1 : state.l == 0 ? (acc_t)0 : (acc_t)1 / state.l;
        span_store<VEC, NV>(acc_f, inverse, on, r, F, out1 + row * HF + h * F, split ? partial1 + slot * HF + h * F : 0);
        if (SOFTMAX && on && r == 0) {
            if (split) partial_state[slot * H + h] = state;
            else if (lse_out != 0) lse_out[row * H + h] = state_lse(state);
        }
        return;
    }
    if (V2 && STAGE == SPAN_SOURCES) {  // grad_x_src: the score's part and the message's
#pragma unroll
        for (int i = 0; i < W; ++i) acc_d[i] += acc_f[i];
    }
    // accumulate: a whole item adds its sums to what its row holds (the launches over column
    // blocks, one after the other: gpu/column_blocks.py), for dot and gat in float32 and
    // float64 only (compiled out elsewhere: float16 would round each block's sum).
    const bool add = (DOT || KIND == SCORE_GAT) && sizeof(scalar_t) >= 4 && accumulate && !split;
    if (ROWS) {
        if (add) span_add_stored<VEC, NV>(out1, row, H, h, r, D, on, acc_d);
        span_store<VEC, NV>(acc_d, 1, on, r, D, out1 + row * HD + h * D, split ? partial1 + slot * HD + h * D : 0);
    } else if (on && r == 0) {
        if (split) partial1[slot * H + h] = acc_s;
        else store_scalar(out1 + row * H + h, add ? acc_s + load_scalar(out1 + row * H + h) : acc_s);
    }
    if (STAGE == SPAN_SOURCES && !V2) {
        if (add) span_add_stored<VEC, NV>(out2, row, H, h, r, F, on, acc_f);
        span_store<VEC, NV>(acc_f, 1, on, r, F, out2 + row * HF + h * F, split ? partial2 + slot * HF + h * F : 0);
    }
}

#define SPAN_ARGS                                                                                               \
    const i64 *items, i64 num_items, i64 num_whole, int H, int S, int D, int F, const idx_t *indices,          \
        const scalar_t *a, const scalar_t *b, acc_t c, const scalar_t *v, const scalar_t *grad_out,            \
        const lse_t *lse, const scalar_t *fwd_out, acc_t *row_dot, scalar_t *out1, lse_t *lse_out,             \
        acc_t *partial1, SoftmaxState *partial_state, scalar_t *out2, acc_t *partial2, const scalar_t *edge,    \
        const i64 *edge_perm, scalar_t *grad_edge, const scalar_t *att, acc_t *att_partial, int accumulate
#define SPAN_PASS                                                                                                \
    items, num_items, num_whole, H, S, D, F, indices, a, b, c, v, grad_out, lse, fwd_out, row_dot, out1, lse_out,  \
        partial1, partial_state, out2, partial2, edge, edge_perm, grad_edge, att, att_partial, accumulate

// A warp per plan item; gatv2's row pass instead takes a fixed, strided set of items per warp
// (items warp, warp + num_warps, ...: the launcher starts at most a fixed number of warps) and
// writes the sum of its items' att terms, groups combined in a fixed order, to its own slot
// of att_partial (num_warps, H, D), which gatv2_reduce_att (gatv2.cu) adds up in order.
template <int STAGE, int KIND, bool EDGE, int VEC, int NV>
__device__ __forceinline__ void attention_span(SPAN_ARGS) {
    constexpr int W = VEC * NV;
    acc_t acc_att[W];
#pragma unroll
    for (int i = 0; i < W; ++i) acc_att[i] = 0;
    if (!(KIND == SCORE_GATV2 && STAGE == SPAN_GRAD)) {
        i64 index;
        if (warp_entry(0, num_items, index)) span_item<STAGE, KIND, EDGE, VEC, NV>(index, acc_att, SPAN_PASS);
        return;
    }
    const i64 warp = grid_warp(), num_warps = (i64)gridDim.x * BLOCK_WARPS;
    for (i64 index = warp; index < num_items; index += num_warps) {
        span_item<STAGE, KIND, EDGE, VEC, NV>(index, acc_att, SPAN_PASS);
    }
    const SpanLanes lanes = span_lanes(H, S);
    for (int offset = lanes.group_lanes; offset < WARP; offset *= 2) {
#pragma unroll
        for (int i = 0; i < W; ++i) acc_att[i] += shfl_xor(acc_att[i], offset);
    }
    if (lanes.g != 0 || !lanes.on) return;
    acc_t* slot = att_partial + (warp * H + lanes.h) * D + lanes.r * W;
#pragma unroll
    for (int i = 0; i < W; ++i) {
        if (lanes.r * W + i >= D) break;
        slot[i] = acc_att[i];
    }
}

// Blocks per multiprocessor that the compiler must fit (registers capped to match) for the dot and
// gat kernels: the forward 4 (32 warps), the dot score's backward passes in float16 3, the gat
// source pass in float16 4; others as many as their registers allow. Measured on an H200 (1M-node
// uniform and R-MAT graphs, against no bound, when gathered rows were held converted): the forward
// of float16 H = 8, F = 16 ran 0.73-0.89x the time, the float16 dot backward 0.73-0.77x; capping
// the float32 H = 4, D = F = 64 dot backward (96-110 registers, two blocks) to 3 or 4 blocks
// spilled and ran 1.09-1.48x slower. Held packed, the float16 span8x1 forward and grad fit their
// caps without spills (ptxas, sm_90). The float16 gat source pass (77 registers, three blocks,
// uncapped) spilled 16 bytes at four (4 since rows are stored 16 bytes at a time) and ran
// 0.96-0.98x the time on the three graphs; float32's (span4x2) at four spills more and ran
// 1.01-1.09x slower. The dot forward with eight elements per lane (width, VEC * NV: float32
// H = 4, D = F = 64) spilled 44 bytes at four (64 registers) and fits three without spills (80):
// 0.89-0.95x the time on the three graphs. With sixteen (float32 H = 8, D = F = 64) the dot
// forward spilled 580-640 bytes at four and fits two (127 registers): 0.39-0.48x the time in
// float32, 0.72-0.79x in float16; the float32 gat forward fits three (80, no spills): 0.75-0.86x;
// the float16 gat forward at three ran 0.996-1.021x (kept at four). The float32 gat source pass
// of width < 8 grew to 68 registers (three blocks) with the test for rows without weight: at
// four (64, no spills) its backward, H = 8, F = 16, ran 0.97x / 0.95x the uncapped time on the
// uniform and R-MAT graphs (H100).
__host__ __device__ constexpr int span_min_blocks(int stage, int kind, int width) {
    return kind != SCORE_DOT && kind != SCORE_GAT ? 1
           : stage == SPAN_FORWARD                ? (width < 8 ? 4 : kind == SCORE_GAT ? (width < 16 || sizeof(scalar_t) == 2 ? 4 : 3) : width < 16 ? 3 : 2)
           : kind == SCORE_GAT && stage == SPAN_SOURCES && (sizeof(scalar_t) == 2 || width < 8) ? 4
           : kind == SCORE_DOT && sizeof(scalar_t) == 2 ? 3
                                                  : 1;
}

#define SPAN_ENTRY_POINT(NAME, STAGE, KIND, EDGE, VEC, NV)                                                      \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS, span_min_blocks(STAGE, KIND, VEC * NV)) NAME(SPAN_ARGS) { \
        attention_span<STAGE, KIND, EDGE, VEC, NV>(SPAN_PASS);                                                  \
    }
// Every shape (VEC x NV) of one stage and kind, with edge data (EDGE, SUFFIX _edges) or not.
#define SPAN_SHAPE_ENTRY_POINTS(PREFIX, STAGE, KIND, EDGE, SUFFIX)        \
    SPAN_ENTRY_POINT(PREFIX##_span1x1##SUFFIX, STAGE, KIND, EDGE, 1, 1)   \
    SPAN_ENTRY_POINT(PREFIX##_span1x2##SUFFIX, STAGE, KIND, EDGE, 1, 2)   \
    SPAN_ENTRY_POINT(PREFIX##_span1x4##SUFFIX, STAGE, KIND, EDGE, 1, 4)   \
    SPAN_ENTRY_POINT(PREFIX##_span4x1##SUFFIX, STAGE, KIND, EDGE, 4, 1)   \
    SPAN_ENTRY_POINT(PREFIX##_span4x2##SUFFIX, STAGE, KIND, EDGE, 4, 2)   \
    SPAN_ENTRY_POINT(PREFIX##_span4x4##SUFFIX, STAGE, KIND, EDGE, 4, 4)   \
    SPAN_ENTRY_POINT(PREFIX##_span8x1##SUFFIX, STAGE, KIND, EDGE, 8, 1)   \
    SPAN_ENTRY_POINT(PREFIX##_span8x2##SUFFIX, STAGE, KIND, EDGE, 8, 2)
// Without and with edge data (_edges: edge_feat rows for dot, edge_score terms for gat).
#define SPAN_ENTRY_POINTS(PREFIX, STAGE, KIND)              \
    SPAN_SHAPE_ENTRY_POINTS(PREFIX, STAGE, KIND, false, )   \
    SPAN_SHAPE_ENTRY_POINTS(PREFIX, STAGE, KIND, true, _edges)
SPAN_ENTRY_POINTS(attention_dot_forward, SPAN_FORWARD, SCORE_DOT)
SPAN_ENTRY_POINTS(attention_dot_grad, SPAN_GRAD, SCORE_DOT)
SPAN_ENTRY_POINTS(attention_dot_sources, SPAN_SOURCES, SCORE_DOT)
SPAN_ENTRY_POINTS(attention_gat_forward, SPAN_FORWARD, SCORE_GAT)
SPAN_ENTRY_POINTS(attention_gat_grad, SPAN_GRAD, SCORE_GAT)
SPAN_ENTRY_POINTS(attention_gat_sources, SPAN_SOURCES, SCORE_GAT)
SPAN_SHAPE_ENTRY_POINTS(attention_gatv2_forward, SPAN_FORWARD, SCORE_GATV2, false, )
SPAN_SHAPE_ENTRY_POINTS(attention_gatv2_grad, SPAN_GRAD, SCORE_GATV2, false, )
SPAN_SHAPE_ENTRY_POINTS(attention_gatv2_sources, SPAN_SOURCES, SCORE_GATV2, false, )
SPAN_SHAPE_ENTRY_POINTS(attention_given_forward, SPAN_FORWARD, SCORE_GIVEN, false, )
SPAN_SHAPE_ENTRY_POINTS(attention_weights_forward, SPAN_FORWARD, SCORE_WEIGHTS, false, )
