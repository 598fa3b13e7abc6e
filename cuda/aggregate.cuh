// Weighted neighbour aggregation, shared by aggregate.cu and attention.cu:
// out[row, j] = sum over the row's edges e of w(e, head(j)) * X[col(e), j], with j over the
// H * F features of a node row.
//
// The weight source is a functor W, called as w(e, row, col, head), with W::KIND:
//   WEIGHTS         the call is the weight itself
//   SOFTMAX_TWO_PASS the call is a score that depends on e only (cheap to read twice); the
//                   weights are its softmax over the row: a first pass finds each head's max,
//                   so each weight is one exp
//   SOFTMAX_ONLINE  the call is a score computed from row and col (a dot product or a sum of
//                   node terms); one pass, with a running max per head and the accumulators
//                   rescaled when it grows (flash-attention style), so no score is computed twice
//   WEIGHTS_OR_NONE the call, w(e, row, col, head, none), is the weight, and sets none where the
//                   edge adds nothing at all: the backward passes' edges of a forward row
//                   without weight (its lse -inf), whose X rows (grad_out, q or k) may be
//                   infinite, where the zero weight would add NaN
//
// Mapping: one warp per work item (edges [begin, end) of one row); lanes cover the row's
// H * F features, so every gather of X[col] is coalesced. For H <= 32 the batched path
// (VEC-element loads, VEC chosen by the launcher from F and alignment) computes each
// (edge, head) weight once in one lane and shares it by shuffle; for more heads the wide
// path gives each lane single features and keeps an online softmax state (m, l) next to
// each accumulator. Items that cover a whole row write the output directly; split rows
// write unnormalized partial accumulators and states, merged in item order by
// aggregate_merge (deterministic, no atomics). No shared memory: per-head reductions are
// shuffles (common.cuh). Bound: memory (the gather of X dominates).
#define NACC 4
#define TILE (WARP * NACC)
#define BATCH_ACC 2  // vectors per lane per tile in the batched path (more spills registers)

#define WEIGHTS 0
#define SOFTMAX_TWO_PASS 1
#define SOFTMAX_ONLINE 2
#define WEIGHTS_OR_NONE 3

// Whether the weights of a kind are the softmax of its calls over the row (then normalized, and
// the row's lse written).
__device__ constexpr bool softmax_kind(int kind) { return kind == SOFTMAX_TWO_PASS || kind == SOFTMAX_ONLINE; }

// The weight call of a functor W: none is set only by the WEIGHTS_OR_NONE kind's.
template <int KIND>
struct KindTag {};
template <class W, int KIND>
__device__ __forceinline__ acc_t edge_weight(const W& w, i64 e, i64 row, i64 col, int head, bool&, KindTag<KIND>) {
    return w(e, row, col, head);
}
template <class W>
__device__ __forceinline__ acc_t edge_weight(const W& w, i64 e, i64 row, i64 col, int head, bool& none,
                                             KindTag<WEIGHTS_OR_NONE>) {
    return w(e, row, col, head, none);
}

// Batched path, H <= 32: a batch of B = 32 / H edges at a time; lane k * H + h loads edge
// k's index and computes its weight for head h once (the HeadLanes layout of common.cuh,
// G = H), then every lane takes them by shuffle while gathering its VEC-wide slices of the
// H * F features of each edge, BATCH_ACC vectors per lane per tile of the features.
template <class W, int VEC>
__device__ __forceinline__ void aggregate_rows_batched(const i64* items, i64 num_items, i64 num_whole, int H, int F,
                                                       const idx_t* indices, const W& w, const scalar_t* X,
                                                       scalar_t* out, lse_t* lse_out, acc_t* partial_acc,
                                                       SoftmaxState* partial_state) {
    i64 index;
    Item item;
    if (!warp_item(items, 0, num_items, index, item)) return;
    const int lane = lane_id();
    const int HF = H * F;
    const HeadLanes lanes = head_lanes(H);
    const int B = lanes.R;  // edges per batch
    const bool weight_lane = lane < B * H;
    const int my_head = lanes.h, my_edge = lanes.k;

    // Two-pass softmax: the max of each head over the item's edges (all lanes of a head agree).
    acc_t head_max = 0;
    if (W::KIND == SOFTMAX_TWO_PASS) {
        acc_t m = neg_inf();
        bool none = false;  // unused: set by WEIGHTS_OR_NONE functors only
        if (weight_lane) {
            for (i64 e = item.begin + my_edge; e < item.end; e += B) {
                m = nan_max(m, edge_weight(w, e, item.row, 0, my_head, none, KindTag<W::KIND>()));
            }
        }
        head_max = head_reduce_to_all(m, Max(), lanes);
    }

    // At least one tile: with no features the softmax modes still owe the row's lse.
    for (int tile = 0; tile < HF || (tile == 0 && softmax_kind(W::KIND)); tile += WARP * VEC * BATCH_ACC) {
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
        acc_t weight_sum = 0;          // per weight lane: sum of its (edge, head) weights
        acc_t running_max = neg_inf();  // online softmax: max so far of head my_head
        for (i64 e0 = item.begin; e0 < item.end; e0 += B) {
            int batch = (int)min((i64)B, item.end - e0);
            bool active = weight_lane && my_edge < batch;
            i64 my_col = 0;
            acc_t my_weight = 0;
            bool my_none = false;
            if (active) {
                my_col = indices[e0 + my_edge];
                my_weight = edge_weight(w, e0 + my_edge, item.row, my_col, my_head, my_none, KindTag<W::KIND>());
            }
            // WEIGHTS_OR_NONE: the weight lanes whose edge adds nothing, one ballot per batch
            // (bit k * H + h: edge k, head h); 0 for the other kinds.
            const unsigned int none_lanes = W::KIND == WEIGHTS_OR_NONE ? __ballot_sync(FULL_MASK, my_none) : 0u;
            if (W::KIND == SOFTMAX_TWO_PASS) {
                my_weight = active ? score_weight(my_weight, head_max) : (acc_t)0;
            } else if (W::KIND == SOFTMAX_ONLINE) {
                acc_t score = active ? my_weight : neg_inf();
                acc_t new_max = nan_max(running_max, head_reduce_to_all(score, Max(), lanes));
                acc_t factor = rescale(running_max, new_max);
                running_max = new_max;
                my_weight = score_weight(score, new_max);
                weight_sum *= factor;
#pragma unroll
                for (int t = 0; t < BATCH_ACC; ++t) {
                    acc_t f = __shfl_sync(FULL_MASK, factor, head[t]);
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[t][v] *= f;
                }
            }
            weight_sum += my_weight;
            // The batch's gathers; with check_none, none of the (edge, head) pairs in none_lanes.
            const auto gather = [&](bool check_none) {
#pragma unroll 4
                for (int k = 0; k < batch; ++k) {
                    i64 col = __shfl_sync(FULL_MASK, my_col, k * H);
                    const scalar_t* x_row = X + col * HF + tile + lane * VEC;
#pragma unroll
                    for (int t = 0; t < BATCH_ACC; ++t) {
                        acc_t weight = __shfl_sync(FULL_MASK, my_weight, k * H + head[t]);
                        if (!valid[t]) continue;
                        if (check_none && (none_lanes >> (k * H + head[t]) & 1u)) continue;
                        acc_t x[VEC];
                        load_vec<VEC>(x_row + WARP * VEC * t, x);
#pragma unroll
                        for (int v = 0; v < VEC; ++v) acc[t][v] += weight * x[v];
                    }
                }
            };
            // none_lanes is the warp's (a ballot) and almost always 0: the test per gather only
            // where it is not, so that the common loop carries no test and no extra register.
            if (W::KIND == WEIGHTS_OR_NONE && none_lanes != 0) {
                gather(true);
            } else {
                gather(false);
            }
        }
        acc_t row_sum = 0;
        if (softmax_kind(W::KIND)) {
            // Each head's weight sum, merged over its lanes in a fixed order, in lane h.
            row_sum = head_reduce_to_leader(weight_sum, Sum(), lanes);
            acc_t row_max = W::KIND == SOFTMAX_ONLINE ? running_max : head_max;
            if (lane < H && tile == 0) {  // the row (or chunk) state of head `lane`, once
                SoftmaxState state;
                state.m = row_max;
                state.l = row_sum;
                if (item.split >= 0) partial_state[(index - num_whole) * H + lane] = state;
                else if (lse_out != 0) lse_out[item.row * H + lane] = state_lse(state);
            }
        }
#pragma unroll
        for (int t = 0; t < BATCH_ACC; ++t) {
            // Every lane shuffles (head[t] is 0 when !valid[t]): head h's sum is in lane h.
            acc_t head_sum = softmax_kind(W::KIND) ? shfl_from(row_sum, head[t]) : (acc_t)1;
            if (!valid[t]) continue;
            int j = tile + (lane + WARP * t) * VEC;
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
                acc_t value = acc[t][v];
                if (item.split >= 0) {
                    partial_acc[(index - num_whole) * HF + j + v] = value;
                } else if (softmax_kind(W::KIND)) {
                    store_scalar(out + item.row * HF + j + v, head_sum == 0 ? (acc_t)0 : value / head_sum);
                } else {
                    store_scalar(out + item.row * HF + j + v, value);
                }
            }
        }
        // Reconverges the warp before the next tile (measured on an H200: without it, the
        // weights kernels ran 10-20% slower).
        __syncwarp();
    }
}

// Wide path, any H: tiles of WARP * NACC features; lane l owns features l + WARP * t
// (t < NACC) of a tile and computes their heads' weights itself, each edge's weight once
// per feature (no sharing across lanes, so no shuffles).
template <class W>
__device__ __forceinline__ void aggregate_rows_wide(const i64* items, i64 num_items, i64 num_whole, int H, int F,
                                                    const idx_t* indices, const W& w, const scalar_t* X,
                                                    scalar_t* out, lse_t* lse_out, acc_t* partial_acc,
                                                    SoftmaxState* partial_state) {
    i64 index;
    Item item;
    if (!warp_item(items, 0, num_items, index, item)) return;
    const int lane = lane_id();
    const i64 HF = (i64)H * F;
    // With no features, softmax modes run the heads as if F were 1, for the lse only.
    const int state_f = F > 0 ? F : 1;
    const i64 lanes_needed = softmax_kind(W::KIND) && F == 0 ? (i64)H : HF;
    for (i64 tile = 0; tile < lanes_needed; tile += TILE) {
        acc_t acc[NACC];
        SoftmaxState state[NACC];
        int head[NACC];
        bool valid[NACC];
#pragma unroll
        for (int t = 0; t < NACC; ++t) {
            i64 j = tile + lane + WARP * t;
            valid[t] = j < lanes_needed;
            head[t] = valid[t] ? (int)(j / state_f) : 0;
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
                bool none = false;
                acc_t weight = edge_weight(w, e, item.row, col, head[t], none, KindTag<W::KIND>());
                acc_t x = F > 0 ? load_scalar(x_row + WARP * t) : (acc_t)0;
                if (softmax_kind(W::KIND)) {
                    SoftmaxState next = add_score(state[t], weight);
                    acc_t p = score_weight(weight, next.m);
                    acc[t] = acc[t] * rescale(state[t].m, next.m) + p * x;
                    state[t] = next;
                } else if (!none) {
                    acc[t] += weight * x;
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NACC; ++t) {
            if (!valid[t]) continue;
            i64 j = tile + lane + WARP * t;
            bool head_leader = (j % state_f) == 0;
            bool has_feature = F > 0;
            if (item.split >= 0) {
                i64 slot = index - num_whole;
                if (has_feature) partial_acc[slot * HF + j] = acc[t];
                if (softmax_kind(W::KIND) && head_leader) partial_state[slot * H + head[t]] = state[t];
            } else if (softmax_kind(W::KIND)) {
                if (has_feature) {
                    store_scalar(out + item.row * HF + j, state[t].l == 0 ? (acc_t)0 : acc[t] / state[t].l);
                }
                if (lse_out != 0 && head_leader) lse_out[item.row * H + head[t]] = state_lse(state[t]);
            } else {
                store_scalar(out + item.row * HF + j, acc[t]);
            }
        }
    }
}

// Partial (part, other) of the next item (or warp) merged into (acc, state): a plain sum, or
// a softmax's, whose sums are relative to their states' maxima.
template <bool SOFTMAX>
__device__ __forceinline__ void merge_partial(acc_t& acc, SoftmaxState& state, acc_t part, SoftmaxState other) {
    if (!SOFTMAX) {
        acc += part;
        return;
    }
    SoftmaxState next = merge_states(state, other);
    acc = acc * rescale(state.m, next.m) + (other.l == 0 ? (acc_t)0 : part * rescale(other.m, next.m));
    state = next;
}

// One block per split row. Warp w merges the w-th of BLOCK_WARPS equal runs of the row's items, in
// item order, then warp 0 merges the warps' results in warp order (through shared memory) and
// writes: a hub row has a hundred items and more, whose merge one warp waits out load by load (with
// one warp per row, the forward's merge on an R-MAT graph whose longest row has 141 items ran at 8%
// achieved occupancy and 48 GB/s: 209 us, H = 4, F = 64, H200). Lane l takes features l, l + WARP,
// ... MERGE_SLOTS at a time, each partial read once (SOFTMAX also rescales by the items' states).
// The lane holding a head's first feature writes its lse; with no features (F = 0), thread j < H
// merges head j's states for it. Bound: memory latency (the partials).
template <bool SOFTMAX>
__device__ __forceinline__ void aggregate_merge(const i64* split_rows, i64 num_split, int H, int F,
                                                const acc_t* partial_acc, const SoftmaxState* partial_state,
                                                scalar_t* out, lse_t* lse_out) {
    constexpr int MERGE_SLOTS = 8, SPAN = WARP * MERGE_SLOTS;
    __shared__ acc_t warp_acc[BLOCK_WARPS][SPAN];
    __shared__ SoftmaxState warp_state[SOFTMAX ? BLOCK_WARPS : 1][SOFTMAX ? SPAN : 1];
    const i64 index = blockIdx.x;
    if (index >= num_split) return;  // the whole block
    const int lane = lane_id(), warp = (int)(threadIdx.x / WARP);
    const i64 row = split_rows[3 * index], first = split_rows[3 * index + 1], count = split_rows[3 * index + 2];
    const i64 HF = (i64)H * F;
    if (SOFTMAX && lse_out != 0 && HF == 0) {
        for (int head = threadIdx.x; head < H; head += BLOCK_THREADS) {
            SoftmaxState state = empty_state();
            for (i64 c = 0; c < count; ++c) state = merge_states(state, partial_state[(first + c) * H + head]);
            lse_out[row * H + head] = state_lse(state);
        }
        return;
    }
    // This warp's run of items: [begin, end).
    const i64 begin = first + count * warp / BLOCK_WARPS, end = first + count * (warp + 1) / BLOCK_WARPS;
    for (i64 base = lane; base < HF + lane; base += SPAN) {
        acc_t acc[MERGE_SLOTS];
        SoftmaxState state[MERGE_SLOTS];
        int head[MERGE_SLOTS];
#pragma unroll
        for (int t = 0; t < MERGE_SLOTS; ++t) {
            acc[t] = 0;
            state[t] = empty_state();
            head[t] = (int)((base + t * WARP) / F);
        }
#pragma unroll 2
        for (i64 c = begin; c < end; ++c) {
            // Every slot's loads first, then the merges: MERGE_SLOTS loads in flight.
            acc_t part[MERGE_SLOTS];
            SoftmaxState other[MERGE_SLOTS];
#pragma unroll
            for (int t = 0; t < MERGE_SLOTS; ++t) {
                const i64 j = base + t * WARP;
                if (j < HF) {
                    part[t] = partial_acc[c * HF + j];
                    if (SOFTMAX) other[t] = partial_state[c * H + head[t]];
                }
            }
#pragma unroll
            for (int t = 0; t < MERGE_SLOTS; ++t) {
                if (base + t * WARP < HF) merge_partial<SOFTMAX>(acc[t], state[t], part[t], other[t]);
            }
        }
        if (warp != 0) {
#pragma unroll
            for (int t = 0; t < MERGE_SLOTS; ++t) {
                warp_acc[warp][t * WARP + lane] = acc[t];
                if (SOFTMAX) warp_state[warp][t * WARP + lane] = state[t];
            }
        }
        __syncthreads();
        if (warp == 0) {
            for (int w = 1; w < BLOCK_WARPS; ++w) {
#pragma unroll
                for (int t = 0; t < MERGE_SLOTS; ++t) {
                    const acc_t part = warp_acc[w][t * WARP + lane];
                    const SoftmaxState other = SOFTMAX ? warp_state[w][t * WARP + lane] : empty_state();
                    if (base + t * WARP < HF) merge_partial<SOFTMAX>(acc[t], state[t], part, other);
                }
            }
#pragma unroll
            for (int t = 0; t < MERGE_SLOTS; ++t) {
                const i64 j = base + t * WARP;
                if (j >= HF) continue;
                store_scalar(out + row * HF + j,
                             SOFTMAX && state[t].l == 0 ? (acc_t)0 : (SOFTMAX ? acc[t] / state[t].l : acc[t]));
                if (SOFTMAX && lse_out != 0 && j % F == 0) lse_out[row * H + head[t]] = state_lse(state[t]);
            }
        }
        __syncthreads();  // warp 0 has read the shared results before the next round writes them
    }
}

// The four row kernels of one weight functor: batched with 1-, 2- and 4-element vectors,
// and wide. WARGS (the kernel's trailing parameters, each after a comma, so empty for a
// functor without any) and MAKE_W (the functor built from them) are passed as the names of
// macros, so that their commas survive.
#define AGGREGATE_ROWS_ARGS                                                                                      \
    const i64 *items, i64 num_items, i64 num_whole, int H, int F, const idx_t *indices, const scalar_t *X,      \
        scalar_t *out, lse_t *lse_out, acc_t *partial_acc, SoftmaxState *partial_state
#define AGGREGATE_ROWS_PASS(w) \
    items, num_items, num_whole, H, F, indices, w, X, out, lse_out, partial_acc, partial_state

#define AGGREGATE_ROWS_ENTRY_POINTS(PREFIX, WARGS, MAKE_W)                                                          \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                                     \
        PREFIX##_v1(AGGREGATE_ROWS_ARGS WARGS) {                                                                    \
        aggregate_rows_batched<decltype(MAKE_W), 1>(AGGREGATE_ROWS_PASS(MAKE_W));                                   \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                                     \
        PREFIX##_v2(AGGREGATE_ROWS_ARGS WARGS) {                                                                    \
        aggregate_rows_batched<decltype(MAKE_W), 2>(AGGREGATE_ROWS_PASS(MAKE_W));                                   \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                                     \
        PREFIX##_v4(AGGREGATE_ROWS_ARGS WARGS) {                                                                    \
        aggregate_rows_batched<decltype(MAKE_W), 4>(AGGREGATE_ROWS_PASS(MAKE_W));                                   \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                                     \
        PREFIX##_wide(AGGREGATE_ROWS_ARGS WARGS) {                                                                  \
        aggregate_rows_wide<decltype(MAKE_W)>(AGGREGATE_ROWS_PASS(MAKE_W));                                         \
    }
