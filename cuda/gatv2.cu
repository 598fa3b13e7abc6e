// Fused GATv2 attention (gatv2_attention), forward and backward: the row kernels, for the
// shapes the head-span kernels of attention.cu do not take (more than 32 heads, wide heads),
// and gatv2_reduce_att, which both use. For an edge e from source
// s to destination d and a head h, with z = x_dst[d, h, :] + x_src[s, h, :]:
//   score[e, h] = sum_k att[h, k] * leaky_relu(z[k])
//   out[d, h]   = sum over the row's edges of softmax_row(score)[e, h] * x_src[s, h, :]
// Scores are computed where they are used and never stored; nothing per edge is allocated.
//
// Mapping (every row kernel): one warp per plan item (edges [begin, end) of one row; split
// rows as in gpu/plan.py), G heads side by side (the HeadLanes layout of common.cuh: lane
// k * G + h serves head h0 + h of the current head group, R = WARP / G lanes per head; the
// launcher picks G so that R >= D where it can). Lane (k, h) owns features k + R * t (t <
// GATV2_NACC) of a tile of R * GATV2_NACC features of its head. Per edge, the lanes of a head
// load their slices of x_dst[d, h], x_src[s, h] and att[h], add their terms of the score and
// reduce them by an xor butterfly inside the head's lanes (span_allreduce: every lane gets
// the same sum, in a fixed order); the x_src values of the lane's own tile, loaded for the
// score, are the ones the message accumulates, so when D fits one tile (D <= R * GATV2_NACC,
// always for D <= 128) each x_src row is gathered once for both. Longer heads are computed
// tile by tile, each tile recomputing the score over all of D in the same order.
//
//   gatv2_forward   online softmax per head: running (max, sum) and accumulators rescaled
//                   when the max grows; whole rows write out and lse, split rows write
//                   unnormalized partials that aggregate_merge_softmax merges in item order.
//   gatv2_grad_dst  over the rows of the graph: with p = exp(score - lse[d]) and
//                   ds = p * (<grad_out[d, h], x_src[s, h]> - row_dot[d, h]),
//                   grad_x_dst[d, h, k] = sum_e ds * att[h, k] * leaky_relu'(z[k]) (split rows:
//                   partials merged by aggregate_merge_sum), and each warp adds
//                   ds * leaky_relu(z[k]) over all its items (a fixed, strided set of plan
//                   items) into its own slot of att_partial (num_slots, H, D).
//   gatv2_grad_src  over the rows of the transposed graph (a row is a source, a column a
//                   destination): grad_x_src[s, h, k] = sum_e p * grad_out[d, h, k]
//                   + ds * att[h, k] * leaky_relu'(z[k]).
//   Both backward passes skip the edges of destination rows without weight (lse -inf).
//   gatv2_reduce_att  grad_att[j] = sum of att_partial[:, j] over the slots in a fixed order:
//                   one warp per element j, lane l summing slots l, l + WARP, ..., then a tree.
// No atomics and no shared memory: every sum runs in a fixed order, so results are bitwise
// reproducible. Bound: the dependent gathers (index, then the node rows of each edge).
#define GATV2_NACC 4

#define GATV2_FORWARD 0
#define GATV2_GRAD_DST 1
#define GATV2_GRAD_SRC 2


struct GatV2Args {
    const i64* items;
    i64 num_items;
    i64 num_whole;
    int H;
    int D;
    int G;
    const idx_t* indices;
    const scalar_t* x_dst;
    const scalar_t* x_src;
    const scalar_t* att;
    acc_t slope;
    const scalar_t* grad_out;   // backward only
    const lse_t* lse;           // backward only
    const acc_t* row_dot;       // backward only
    scalar_t* out;              // out, grad_x_dst or grad_x_src
    lse_t* lse_out;             // forward only, may be null
    acc_t* partial_acc;         // split items' accumulators, null without split rows
    SoftmaxState* partial_state;  // forward only
    acc_t* att_partial;         // gatv2_grad_dst only
};

template <int MODE>
__device__ __forceinline__ void gatv2_rows(const GatV2Args& a) {
    const HeadLanes lanes = head_lanes(a.G);
    const int R = lanes.R;
    const int tile_width = R * GATV2_NACC;
    const int num_tiles = a.D > 0 ? (a.D + tile_width - 1) / tile_width : 1;  // one for the lse when D = 0
    const i64 HD = (i64)a.H * a.D;
    const i64 warp = grid_warp();
    const i64 num_warps = (i64)gridDim.x * BLOCK_WARPS;
    for (int h0 = 0; h0 < a.H; h0 += a.G) {
        const int head = h0 + lanes.h;
        const bool head_ok = head < a.H;
        for (int tile = 0; tile < num_tiles; ++tile) {
            const int my_d = tile * tile_width + lanes.k;  // feature t of this lane: my_d + R * t
            acc_t att_sum[GATV2_NACC];
#pragma unroll
            for (int t = 0; t < GATV2_NACC; ++t) att_sum[t] = 0;
            // The warp's items: warp, warp + num_warps, ... (the forward and gatv2_grad_src
            // launch a warp per item; gatv2_grad_dst fewer, each summing its items' att terms).
            for (i64 index = warp; index < a.num_items; index += num_warps) {
                const i64 row = a.items[4 * index], begin = a.items[4 * index + 1];
                const i64 end = a.items[4 * index + 2], split = a.items[4 * index + 3];
                acc_t acc[GATV2_NACC];
#pragma unroll
                for (int t = 0; t < GATV2_NACC; ++t) acc[t] = 0;
                SoftmaxState state = empty_state();
                for (i64 e = begin; e < end; ++e) {
                    const i64 col = a.indices[e];
                    const i64 dst = MODE == GATV2_GRAD_SRC ? col : row;
                    const i64 src = MODE == GATV2_GRAD_SRC ? row : col;
                    // This tile's z, x_src, att and grad_out values of the lane's features.
                    acc_t z[GATV2_NACC], xs[GATV2_NACC], at[GATV2_NACC], go[GATV2_NACC];
#pragma unroll
                    for (int t = 0; t < GATV2_NACC; ++t) z[t] = xs[t] = at[t] = go[t] = 0;
                    acc_t score_part = 0, dp_part = 0;
                    if (head_ok) {
                        const scalar_t* dst_row = a.x_dst + (dst * a.H + head) * a.D;
                        const scalar_t* src_row = a.x_src + (src * a.H + head) * a.D;
                        const scalar_t* att_row = a.att + (i64)head * a.D;
                        const scalar_t* grad_row = MODE == GATV2_FORWARD ? 0 : a.grad_out + (dst * a.H + head) * a.D;
                        for (int c = 0; c < num_tiles; ++c) {
#pragma unroll
                            for (int t = 0; t < GATV2_NACC; ++t) {
                                const int d = c * tile_width + lanes.k + R * t;
                                if (d >= a.D) continue;
                                const acc_t x = load_scalar(src_row + d);
                                const acc_t zd = load_scalar(dst_row + d) + x;
                                const acc_t w = load_scalar(att_row + d);
                                score_part += w * leaky(zd, a.slope);
                                acc_t g = 0;
                                if (MODE != GATV2_FORWARD) {
                                    g = load_scalar(grad_row + d);
                                    dp_part += g * x;
                                }
                                if (c == tile) {
                                    z[t] = zd;
                                    xs[t] = x;
                                    at[t] = w;
                                    go[t] = g;
                                }
                            }
                        }
                    }
                    const acc_t score = span_allreduce(score_part, Sum(), a.G, WARP);
                    if (MODE == GATV2_FORWARD) {
                        const acc_t new_max = nan_max(state.m, score);
                        const acc_t factor = rescale(state.m, new_max);
                        const acc_t p = score_weight(score, new_max);
                        state.l = state.l * factor + p;
                        state.m = new_max;
#pragma unroll
                        for (int t = 0; t < GATV2_NACC; ++t) acc[t] = acc[t] * factor + p * xs[t];
                    } else {
                        const acc_t dp = span_allreduce(dp_part, Sum(), a.G, WARP);
                        acc_t p = 0, ds = 0;
                        if (head_ok) {
                            const acc_t row_lse = a.lse[dst * a.H + head];
                            // A row without weight adds nothing, as a row without edges: its
                            // leaky_relu(z) is -inf (or att infinite), its grad_out may be
                            // infinite, and its zero weight would add NaN. (This edge's
                            // shuffles are done: the lane may leave it.)
                            if (row_lse == neg_inf()) continue;
                            p = prob_from_lse(score, row_lse);
                            ds = p * (dp - a.row_dot[dst * a.H + head]);
                        }
#pragma unroll
                        for (int t = 0; t < GATV2_NACC; ++t) {
                            const acc_t dz = ds * at[t] * leaky_grad(z[t], a.slope);
                            if (MODE == GATV2_GRAD_DST) {
                                acc[t] += dz;
                                att_sum[t] += ds * leaky(z[t], a.slope);
                            } else {
                                acc[t] += p * go[t] + dz;
                            }
                        }
                    }
                }
                if (!head_ok) continue;
                const i64 slot = index - a.num_whole;
#pragma unroll
                for (int t = 0; t < GATV2_NACC; ++t) {
                    const int d = my_d + R * t;
                    if (d >= a.D) continue;
                    const i64 j = (i64)head * a.D + d;
                    if (split >= 0) {
                        a.partial_acc[slot * HD + j] = acc[t];
                    } else if (MODE == GATV2_FORWARD) {
                        store_scalar(a.out + row * HD + j, state.l == 0 ? (acc_t)0 : acc[t] / state.l);
                    } else {
                        store_scalar(a.out + row * HD + j, acc[t]);
                    }
                }
                if (MODE == GATV2_FORWARD && tile == 0 && lanes.k == 0) {  // the head's state, once
                    if (split >= 0) a.partial_state[slot * a.H + head] = state;
                    else if (a.lse_out != 0) a.lse_out[row * a.H + head] = state_lse(state);
                }
            }
            if (MODE == GATV2_GRAD_DST && head_ok) {
#pragma unroll
                for (int t = 0; t < GATV2_NACC; ++t) {
                    const int d = my_d + R * t;
                    if (d < a.D) a.att_partial[warp * HD + (i64)head * a.D + d] = att_sum[t];
                }
            }
        }
    }
}

#define GATV2_ROWS_PARAMS                                                                                    \
    const i64 *items, i64 num_items, i64 num_whole, int H, int D, int G, const idx_t *indices,              \
        const scalar_t *x_dst, const scalar_t *x_src, const scalar_t *att, acc_t slope

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    gatv2_forward(GATV2_ROWS_PARAMS, scalar_t* out, lse_t* lse_out, acc_t* partial_acc,
                  SoftmaxState* partial_state) {
    GatV2Args a = {items, num_items, num_whole, H,   D,       G,           indices,       x_dst, x_src, att,
                   slope, 0,         0,         0,   out,     lse_out,     partial_acc,   partial_state, 0};
    gatv2_rows<GATV2_FORWARD>(a);
}

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    gatv2_grad_dst(GATV2_ROWS_PARAMS, const scalar_t* grad_out, const lse_t* lse, const acc_t* row_dot,
                   scalar_t* grad, acc_t* partial_acc, acc_t* att_partial) {
    GatV2Args a = {items, num_items, num_whole, H,    D, G,           indices, x_dst,      x_src, att,
                   slope, grad_out,  lse,       row_dot, grad, 0, partial_acc, 0,       att_partial};
    gatv2_rows<GATV2_GRAD_DST>(a);
}

extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    gatv2_grad_src(GATV2_ROWS_PARAMS, const scalar_t* grad_out, const lse_t* lse, const acc_t* row_dot,
                   scalar_t* grad, acc_t* partial_acc) {
    GatV2Args a = {items, num_items, num_whole, H,    D, G,           indices, x_dst, x_src, att,
                   slope, grad_out,  lse,       row_dot, grad, 0, partial_acc, 0,       0};
    gatv2_rows<GATV2_GRAD_SRC>(a);
}

// grad_att[j] = sum over slots of att_partial[slot, j], j < HD: one warp per j, lane l adding
// slots l, l + WARP, ... in order, then a fixed tree across the lanes. Bound: memory.
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    gatv2_reduce_att(i64 num_slots, int HD, const acc_t* att_partial, scalar_t* grad_att) {
    i64 j;
    if (!warp_entry(0, HD, j)) return;
    acc_t sum = 0;
    for (i64 slot = lane_id(); slot < num_slots; slot += WARP) sum += att_partial[slot * HD + j];
    sum = head_reduce_to_leader(sum, Sum(), head_lanes(1));
    if (lane_id() == 0) store_scalar(grad_att + j, sum);
}
