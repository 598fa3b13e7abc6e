// Weighted neighbour aggregation: out[row, j] = sum over the row's edges e of
// w(e, head(j)) * X[col(e), j], with j over the H * F features of a node row.
//
// Weight modes (template WMODE, one extern "C" entry point each):
//   0 ONES        w = 1                                         (spmm, weights=None)
//   1 GIVEN       w = weights[e, h]                             (spmm)
//   2 GIVEN_PERM  w = weights[perm[e], h]                       (spmm backward on the transpose)
//   3 SOFTMAX     w = softmax over the row of scores[e, h], online (attention_aggregate)
//   4 PROB_PERM   w = exp(scores[perm[e], h] - lse[col(e), h])  (attention backward on the transpose)
//
// Mapping: one warp per work item (edges [begin, end) of one row); lanes cover the row's
// H * F features, so every gather of X[col] is coalesced. For H <= 32 the batched path
// (aggregate_batched_v{1,2,4}_*: VEC-element loads, VEC chosen by the launcher from F and
// alignment) computes each (edge, head) weight once in one lane and shares it by shuffle;
// for more heads, aggregate_rows_* gives each lane single features and keeps an online
// softmax state (m, l) next to each accumulator. Items that cover a whole row write the output directly; split rows write
// unnormalized partial accumulators and states, merged in item order by aggregate_merge_*
// (deterministic, no atomics). Bound: memory (the gather of X dominates).

#define BLOCK_WARPS 8
#define NACC 4
#define TILE (WARP * NACC)
#define BATCH_ACC 2  // vectors per lane per tile in the batched path (more spills registers)

template <int WMODE>
__device__ __forceinline__ acc_t edge_weight(const scalar_t* weights, const i64* perm, const lse_t* lse, i64 e,
                                             i64 col, int H, int head) {
    if (WMODE == 0) return 1;
    if (WMODE == 1) return load_scalar(weights + e * H + head);
    i64 source = perm[e] * H + head;
    if (WMODE == 2) return load_scalar(weights + source);
    if (WMODE == 3) return load_scalar(weights + e * H + head);  // a score
    return prob_from_lse(load_scalar(weights + source), lse[col * H + head]);
}

// Weight of (edge e, head h) for the batched path; the softmax mode returns exp(s - m).
template <int WMODE>
__device__ __forceinline__ acc_t batch_weight(const scalar_t* weights, const i64* perm, const lse_t* lse, i64 e,
                                              i64 col, int H, int head, acc_t row_max) {
    if (WMODE == 3) {
        acc_t score = load_scalar(weights + e * H + head);
        return score == neg_inf() ? (acc_t)0 : exp_acc(score - row_max);
    }
    return edge_weight<WMODE>(weights, perm, lse, e, col, H, head);
}

// Batched path, H <= 32: a batch of B = 32 / H edges at a time; lane k * H + h loads edge
// k's index and computes its weight for head h once, then every lane takes them by shuffle
// while gathering its VEC-wide slices of the H * F features of each edge. In softmax mode a
// first pass over the row's scores finds each head's max, so each weight is one exp.
template <int WMODE, int VEC>
__device__ __forceinline__ void aggregate_rows_batched(const i64* items, i64 num_items, i64 num_whole, int H, int F,
                                                       const idx_t* indices, const scalar_t* weights,
                                                       const i64* perm, const lse_t* lse_in, const scalar_t* X,
                                                       scalar_t* out, lse_t* lse_out, acc_t* partial_acc,
                                                       SoftmaxState* partial_state) {
    __shared__ acc_t shared[BLOCK_WARPS][WARP];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_items) return;
    Item item = load_item(items, index);
    const int HF = H * F;
    const int B = WARP / H;  // edges per batch
    const bool weight_lane = lane < B * H;
    const int my_head = lane % H, my_edge = lane / H;
    acc_t* buf = shared[warp];

    // Softmax mode: the max of each head over the item's edges (all lanes of a head agree).
    acc_t head_max = 0;
    if (WMODE == 3) {
        acc_t m = neg_inf();
        if (weight_lane) {
            for (i64 e = item.begin + my_edge; e < item.end; e += B) {
                acc_t score = load_scalar(weights + e * H + my_head);
                m = (score != score || m != m) ? score + m : (score > m ? score : m);
            }
        }
        buf[lane] = m;
        __syncwarp();
        if (lane < H) {
            for (int k = 1; k < B; ++k) {
                acc_t other = buf[lane + k * H];
                m = (other != other || m != m) ? other + m : (other > m ? other : m);
            }
            buf[lane] = m;
        }
        __syncwarp();
        head_max = buf[my_head];
        __syncwarp();
    }

    for (int tile = 0; tile < HF; tile += WARP * VEC * BATCH_ACC) {
        acc_t acc[BATCH_ACC][VEC];
        int head[BATCH_ACC];
        bool valid[BATCH_ACC];
#pragma unroll
        for (int t = 0; t < BATCH_ACC; ++t) {
            int j = tile + (lane + WARP * t) * VEC;
            valid[t] = j < HF;
            head[t] = valid[t] ? j / F : 0;
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[t][v] = 0;
        }
        acc_t weight_sum = 0;  // per weight lane: sum of its (edge, head) weights
        for (i64 e0 = item.begin; e0 < item.end; e0 += B) {
            int batch = (int)min((i64)B, item.end - e0);
            i64 my_col = 0;
            acc_t my_weight = 0;
            if (weight_lane && my_edge < batch) {
                i64 e = e0 + my_edge;
                my_col = indices[e];
                my_weight = batch_weight<WMODE>(weights, perm, lse_in, e, my_col, H, my_head, head_max);
                weight_sum += my_weight;
            }
#pragma unroll 4
            for (int k = 0; k < batch; ++k) {
                i64 col = __shfl_sync(FULL_MASK, my_col, k * H);
                const scalar_t* x_row = X + col * HF + tile + lane * VEC;
#pragma unroll
                for (int t = 0; t < BATCH_ACC; ++t) {
                    acc_t w = __shfl_sync(FULL_MASK, my_weight, k * H + head[t]);
                    if (!valid[t]) continue;
                    acc_t x[VEC];
                    load_vec<VEC>(x_row + WARP * VEC * t, x);
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[t][v] += w * x[v];
                }
            }
        }
        // Each head's weight sum, merged over its lanes in a fixed order.
        if (WMODE == 3) {
            buf[lane] = weight_sum;
            __syncwarp();
            if (lane < H) {
                for (int k = 1; k < B; ++k) weight_sum += buf[lane + k * H];
                buf[lane] = weight_sum;
                if (tile == 0) {  // the row (or chunk) state of head `lane`, once
                    SoftmaxState state;
                    state.m = head_max;
                    state.l = weight_sum;
                    if (item.split >= 0) partial_state[(index - num_whole) * H + lane] = state;
                    else if (lse_out != 0) lse_out[item.row * H + lane] = state_lse(state);
                }
            }
            __syncwarp();
        }
#pragma unroll
        for (int t = 0; t < BATCH_ACC; ++t) {
            if (!valid[t]) continue;
            int j = tile + (lane + WARP * t) * VEC;
            acc_t head_sum = WMODE == 3 ? buf[head[t]] : (acc_t)1;
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
                acc_t value = acc[t][v];
                if (item.split >= 0) {
                    partial_acc[(index - num_whole) * HF + j + v] = value;
                } else if (WMODE == 3) {
                    store_scalar(out + item.row * HF + j + v, head_sum == 0 ? (acc_t)0 : value / head_sum);
                } else {
                    store_scalar(out + item.row * HF + j + v, value);
                }
            }
        }
        __syncwarp();  // buf is rewritten by the next tile
    }
}

template <int WMODE>
__device__ __forceinline__ void aggregate_rows_wide(const i64* items, i64 num_items, i64 num_whole, int H, int F,
                                               const idx_t* indices, const scalar_t* weights, const i64* perm,
                                               const lse_t* lse_in, const scalar_t* X, scalar_t* out,
                                               lse_t* lse_out, acc_t* partial_acc, SoftmaxState* partial_state) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_items) return;
    Item item = load_item(items, index);
    const i64 HF = (i64)H * F;
    for (i64 tile = 0; tile < HF; tile += TILE) {
        acc_t acc[NACC];
        SoftmaxState state[NACC];
        int head[NACC];
        bool valid[NACC];
#pragma unroll
        for (int t = 0; t < NACC; ++t) {
            i64 j = tile + lane + WARP * t;
            valid[t] = j < HF;
            head[t] = valid[t] ? (int)(j / F) : 0;
            acc[t] = 0;
            state[t] = empty_state();
        }
#pragma unroll 2
        for (i64 e = item.begin; e < item.end; ++e) {
            i64 col = indices[e];
            const scalar_t* x_row = X + col * HF + tile + lane;
#pragma unroll
            for (int t = 0; t < NACC; ++t) {
                if (!valid[t]) continue;
                acc_t w = edge_weight<WMODE>(weights, perm, lse_in, e, col, H, head[t]);
                acc_t x = load_scalar(x_row + WARP * t);
                if (WMODE == 3) {
                    SoftmaxState next = add_score(state[t], w);
                    acc_t p = (w == neg_inf()) ? (acc_t)0 : rescale(w, next.m);
                    acc[t] = acc[t] * rescale(state[t].m, next.m) + p * x;
                    state[t] = next;
                } else {
                    acc[t] += w * x;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NACC; ++t) {
            if (!valid[t]) continue;
            i64 j = tile + lane + WARP * t;
            bool head_leader = (j % F) == 0;
            if (item.split >= 0) {
                i64 slot = index - num_whole;
                partial_acc[slot * HF + j] = acc[t];
                if (WMODE == 3 && head_leader) partial_state[slot * H + head[t]] = state[t];
            } else if (WMODE == 3) {
                store_scalar(out + item.row * HF + j, state[t].l == 0 ? (acc_t)0 : acc[t] / state[t].l);
                if (lse_out != 0 && head_leader) lse_out[item.row * H + head[t]] = state_lse(state[t]);
            } else {
                store_scalar(out + item.row * HF + j, acc[t]);
            }
        }
    }
}

// One warp per split row: merges its items' partials in item order.
template <int WMODE>
__device__ __forceinline__ void aggregate_merge(const i64* split_rows, i64 num_split, int H, int F,
                                                const acc_t* partial_acc, const SoftmaxState* partial_state,
                                                scalar_t* out, lse_t* lse_out) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_split) return;
    i64 row = split_rows[3 * index], first = split_rows[3 * index + 1], count = split_rows[3 * index + 2];
    const i64 HF = (i64)H * F;
    for (i64 j = lane; j < HF; j += WARP) {
        int head = (int)(j / F);
        acc_t acc = 0;
        SoftmaxState state = empty_state();
        for (i64 c = 0; c < count; ++c) {
            acc_t part = partial_acc[(first + c) * HF + j];
            if (WMODE == 3) {
                SoftmaxState other = partial_state[(first + c) * H + head];
                SoftmaxState next = merge_states(state, other);
                acc = acc * rescale(state.m, next.m) + (other.l == 0 ? (acc_t)0 : part * rescale(other.m, next.m));
                state = next;
            } else {
                acc += part;
            }
        }
        if (WMODE == 3) {
            store_scalar(out + row * HF + j, state.l == 0 ? (acc_t)0 : acc / state.l);
            if (lse_out != 0 && j % F == 0) lse_out[row * H + head] = state_lse(state);
        } else {
            store_scalar(out + row * HF + j, acc);
        }
    }
}

#define AGGREGATE_ARGS                                                                                       \
    const i64 *items, i64 num_items, i64 num_whole, int H, int F, const idx_t *indices, const scalar_t *weights, \
        const i64 *perm, const lse_t *lse_in, const scalar_t *X, scalar_t *out, lse_t *lse_out, acc_t *partial_acc, \
        SoftmaxState *partial_state
#define AGGREGATE_PASS \
    items, num_items, num_whole, H, F, indices, weights, perm, lse_in, X, out, lse_out, partial_acc, partial_state

#define AGGREGATE_ENTRY_POINTS(WMODE, NAME)                                                                   \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP) aggregate_rows_##NAME(AGGREGATE_ARGS) {  \
        aggregate_rows_wide<WMODE>(AGGREGATE_PASS);                                                          \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                        \
        aggregate_batched_v1_##NAME(AGGREGATE_ARGS) {                                                        \
        aggregate_rows_batched<WMODE, 1>(AGGREGATE_PASS);                                                    \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                        \
        aggregate_batched_v2_##NAME(AGGREGATE_ARGS) {                                                        \
        aggregate_rows_batched<WMODE, 2>(AGGREGATE_PASS);                                                    \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                        \
        aggregate_batched_v4_##NAME(AGGREGATE_ARGS) {                                                        \
        aggregate_rows_batched<WMODE, 4>(AGGREGATE_PASS);                                                    \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                        \
        aggregate_merge_##NAME(const i64* split_rows, i64 num_split, int H, int F, const acc_t* partial_acc, \
                               const SoftmaxState* partial_state, scalar_t* out, lse_t* lse_out) {          \
        aggregate_merge<WMODE>(split_rows, num_split, H, F, partial_acc, partial_state, out, lse_out);      \
    }

AGGREGATE_ENTRY_POINTS(0, ones)
AGGREGATE_ENTRY_POINTS(1, weights)
AGGREGATE_ENTRY_POINTS(2, weights_perm)
AGGREGATE_ENTRY_POINTS(3, softmax)
AGGREGATE_ENTRY_POINTS(4, probs_perm)
