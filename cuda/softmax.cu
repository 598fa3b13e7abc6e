// Row-wise softmax over the edges of each destination row, per head, and its backward.
//
// Modes (template MODE, one extern "C" entry point each):
//   0 SOFTMAX        out = exp(s - m_row) / l_row
//   1 LSE            lse_out[row] = log sum exp(s) (no edge output)
//   2 GRAD_PROBS     out = p * (g - sum_row p*g), p given
//   3 GRAD_SCORES    out = p * (g - sum_row p*g), p = exp(s - lse_in[row])
//
// Mapping: short rows (see softmax_groups) share a warp; otherwise one warp per work item (edges [begin, end) of one row; see Item). A row's
// (E_row, H) slice is contiguous, so lanes take (edge, head) pairs: for a group of
// G = min(32, H) heads, lane l works on head l % G of edges begin + l / G + k * (32 / G),
// giving coalesced loads for every H. Per-lane partial states of the same head are merged
// in a fixed order through shared memory (8 warps x 32 states), so results are
// deterministic. Items covering a whole row finish in one launch (the second pass rereads
// the row from L1/L2); rows split over several items write partial states, merged by
// softmax_merge_* (one warp per split row) and applied by softmax_write_*.
// Bound: memory; each (E, H) input is read from DRAM once.

#define BLOCK_WARPS 8
#define CACHED 8  // elements per lane held in registers for whole rows

template <int MODE>
struct RowReduce {
    // Modes 0/1 keep an online-softmax state; modes 2/3 keep sum(p * g) in .l.
    static __device__ __forceinline__ SoftmaxState empty() {
        SoftmaxState s = empty_state();
        if (MODE >= 2) s.m = 0;
        return s;
    }
    static __device__ __forceinline__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
        if (MODE <= 1) return merge_states(a, b);
        a.l += b.l;
        return a;
    }
};

template <int MODE>
__device__ __forceinline__ acc_t edge_prob(const scalar_t* a, const lse_t* lse_in, i64 row, int H, int head, i64 pos) {
    acc_t value = load_scalar(a + pos);
    if (MODE == 3) return prob_from_lse(value, lse_in[row * H + head]);
    return value;
}

// Merges the per-lane states of each head into lane (head - head0) of shared memory and
// returns the merged state of this lane's head to every lane.
template <int MODE>
__device__ __forceinline__ SoftmaxState warp_merge(SoftmaxState mine, SoftmaxState* buf, int lane, int G, int R) {
    buf[lane] = mine;
    __syncwarp();
    if (lane < G) {
        SoftmaxState merged = buf[lane];
        for (int r = 1; r < R; ++r) merged = RowReduce<MODE>::merge(merged, buf[lane + r * G]);
        buf[lane] = merged;
    }
    __syncwarp();
    SoftmaxState result = buf[lane % G];
    __syncwarp();
    return result;
}


// Max (OP 0, NaN-propagating) or sum (OP 1) of each head's per-lane values, merged in a
// fixed order through shared memory and returned to every lane of the head.
template <int OP>
__device__ __forceinline__ acc_t head_reduce(acc_t mine, acc_t* buf, int lane, int G, int R) {
    buf[lane] = mine;
    __syncwarp();
    if (lane < G) {
        acc_t merged = buf[lane];
        for (int r = 1; r < R; ++r) merged = OP == 0 ? nan_max(merged, buf[lane + r * G]) : merged + buf[lane + r * G];
        buf[lane] = merged;
    }
    __syncwarp();
    acc_t result = buf[lane % G];
    __syncwarp();
    return result;
}

template <int MODE>
__device__ __forceinline__ void write_edges(const scalar_t* a, const scalar_t* g, const lse_t* lse_in,
                                            scalar_t* out, i64 row, i64 begin, i64 end, int H, int head,
                                            int lane_edge, int R, bool active, SoftmaxState row_state) {
    if (!active) return;
    for (i64 e = begin + lane_edge; e < end; e += R) {
        i64 pos = e * H + head;
        if (MODE == 0) {
            store_scalar(out + pos, prob_from_state(load_scalar(a + pos), row_state));
        } else {
            acc_t p = edge_prob<MODE>(a, lse_in, row, H, head, pos);
            store_scalar(out + pos, p * (load_scalar(g + pos) - row_state.l));
        }
    }
}

template <int MODE>
__device__ __forceinline__ void softmax_rows(const i64* items, i64 num_items, i64 num_whole, int H,
                                             const scalar_t* a, const scalar_t* g, const lse_t* lse_in,
                                             scalar_t* out, lse_t* lse_out, SoftmaxState* partial) {
    __shared__ SoftmaxState shared[BLOCK_WARPS][WARP];
    __shared__ acc_t head_buf[BLOCK_WARPS][WARP];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_items) return;
    Item item = load_item(items, index);
    for (int head0 = 0; head0 < H; head0 += WARP) {
        int G = min(WARP, H - head0), R = WARP / G;
        bool active = lane < G * R;
        int head = head0 + lane % G, lane_edge = lane / G;
        SoftmaxState state = RowReduce<MODE>::empty();
        // Rows of up to CACHED elements per lane keep them in registers: all loads are
        // issued before the first use, and the write pass reads no memory again.
        i64 per_lane = (item.end - item.begin + R - 1) / R;
        if (item.split < 0 && per_lane <= CACHED) {
            // 32-bit positions inside the row and one 64-bit base: the address arithmetic
            // is a large part of this kernel's instructions.
            const int count = (int)(item.end - item.begin), step = R * H;
            const i64 base = (item.begin + lane_edge) * H + head;
            acc_t cached_a[CACHED], cached_g[CACHED];
#pragma unroll
            for (int k = 0; k < CACHED; ++k) {
                bool here = active && lane_edge + k * R < count;
                cached_a[k] = here ? load_scalar(a + base + k * step) : neg_inf();  // absent: no weight
                cached_g[k] = (MODE >= 2 && here) ? load_scalar(g + base + k * step) : (acc_t)0;
            }
            SoftmaxState row_state;
            if (MODE <= 1) {
                // Max first, then one exp per element: fewer instructions than an online
                // update, which matters at this size (the kernel is otherwise issue-bound).
                acc_t m = neg_inf();
#pragma unroll
                for (int k = 0; k < CACHED; ++k) m = nan_max(m, cached_a[k]);
                row_state.m = head_reduce<0>(m, head_buf[warp], lane, G, R);
                acc_t shift = row_state.m == neg_inf() ? (acc_t)0 : row_state.m;
                acc_t l = 0;
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    cached_a[k] = cached_a[k] == neg_inf() ? (acc_t)0 : exp_acc(cached_a[k] - shift);
                    l += cached_a[k];
                }
                row_state.l = head_reduce<1>(l, head_buf[warp], lane, G, R);
            } else {
                acc_t lse_row = MODE == 3 && active ? lse_in[item.row * H + head] : (acc_t)0;
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    if (!(active && lane_edge + k * R < count)) continue;
                    acc_t p = MODE == 3 ? prob_from_lse(cached_a[k], lse_row) : cached_a[k];
                    cached_a[k] = p;
                    state.l += p * cached_g[k];
                }
                row_state.m = 0;
                row_state.l = head_reduce<1>(state.l, head_buf[warp], lane, G, R);
            }
            if (MODE == 1) {
                if (lane < G) lse_out[item.row * H + head] = state_lse(row_state);
            } else {
                // Mode 0: cached_a holds exp(s - m); a NaN or +inf max makes l, and so inv, NaN.
                acc_t inv = row_state.l == 0 ? (acc_t)0 : (acc_t)1 / row_state.l;
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    if (!(active && lane_edge + k * R < count)) continue;
                    acc_t value = MODE == 0 ? cached_a[k] * inv : cached_a[k] * (cached_g[k] - row_state.l);
                    store_scalar(out + base + k * step, value);
                }
            }
            continue;
        }
        if (active) {
#pragma unroll 4
            for (i64 e = item.begin + lane_edge; e < item.end; e += R) {
                i64 pos = e * H + head;
                if (MODE <= 1) {
                    state = add_score(state, load_scalar(a + pos));
                } else {
                    state.l += edge_prob<MODE>(a, lse_in, item.row, H, head, pos) * load_scalar(g + pos);
                }
            }
        }
        SoftmaxState row_state = warp_merge<MODE>(state, shared[warp], lane, G, R);
        if (item.split >= 0) {
            if (lane < G) partial[(index - num_whole) * H + head] = row_state;
        } else if (MODE == 1) {
            if (lane < G) lse_out[item.row * H + head] = state_lse(row_state);
        } else {
            write_edges<MODE>(a, g, lse_in, out, item.row, item.begin, item.end, H, head, lane_edge, R, active,
                              row_state);
        }
    }
}

// One warp per split row: merges the row's partial states (in item order) into row_states
// (or, in mode 1, into lse_out). split_rows holds (row, first partial, count) triples.
template <int MODE>
__device__ __forceinline__ void softmax_merge(const i64* split_rows, i64 num_split, int H,
                                              const SoftmaxState* partial, SoftmaxState* row_states,
                                              lse_t* lse_out) {
    __shared__ SoftmaxState shared[BLOCK_WARPS][WARP];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_split) return;
    i64 row = split_rows[3 * index], first = split_rows[3 * index + 1], count = split_rows[3 * index + 2];
    for (int head0 = 0; head0 < H; head0 += WARP) {
        int G = min(WARP, H - head0), R = WARP / G;
        int head = head0 + lane % G;
        SoftmaxState state = RowReduce<MODE>::empty();
        if (lane < G * R) {
            for (i64 c = lane / G; c < count; c += R) state = RowReduce<MODE>::merge(state, partial[(first + c) * H + head]);
        }
        SoftmaxState row_state = warp_merge<MODE>(state, shared[warp], lane, G, R);
        if (lane < G) {
            if (MODE == 1) lse_out[row * H + head] = state_lse(row_state);
            else row_states[index * H + head] = row_state;
        }
    }
}

// One warp per split item: applies its row's merged state to the item's edges.
template <int MODE>
__device__ __forceinline__ void softmax_write(const i64* items, i64 num_items, i64 num_whole, int H,
                                              const scalar_t* a, const scalar_t* g, const lse_t* lse_in,
                                              scalar_t* out, const SoftmaxState* row_states) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 index = num_whole + (i64)blockIdx.x * BLOCK_WARPS + warp;
    if (index >= num_items) return;
    Item item = load_item(items, index);
    for (int head0 = 0; head0 < H; head0 += WARP) {
        int G = min(WARP, H - head0), R = WARP / G;
        int head = head0 + lane % G;
        write_edges<MODE>(a, g, lse_in, out, item.row, item.begin, item.end, H, head, lane / G, R, lane < G * R,
                          row_states[item.split * H + head]);
    }
}


// Short rows (H a power of two, degree * H <= 32): a group of S lanes per row (S a power of
// two, degree * H <= S), one element per lane, states merged by an xor butterfly inside the
// group (max, then sum of exp). Both lanes of a pair compute op(a, b) and op(b, a), which
// are equal in IEEE arithmetic, so every lane of a head ends with the same, run-to-run
// identical, value.
template <int MODE>
__device__ __forceinline__ void softmax_groups(const i64* rows, i64 num_rows, int S, int H, const i64* indptr,
                                               const scalar_t* a, const scalar_t* g, const lse_t* lse_in,
                                               scalar_t* out, lse_t* lse_out) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    i64 group = ((i64)blockIdx.x * BLOCK_WARPS + warp) * (WARP / S) + lane / S;
    bool has_row = group < num_rows;  // every lane stays for the shuffles
    i64 row = has_row ? rows[group] : 0;
    i64 begin = has_row ? indptr[row] : 0, end = has_row ? indptr[row + 1] : 0;
    int in_group = lane % S, head = in_group % H;
    i64 e = begin + in_group / H;
    bool active = e < end;
    i64 pos = e * H + head;
    acc_t value = active ? load_scalar(a + pos) : neg_inf();
    acc_t grad = (MODE >= 2 && active) ? load_scalar(g + pos) : (acc_t)0;
    SoftmaxState state;
    if (MODE <= 1) {
        // The group's max, then one exp per element and the group's sum.
        acc_t m = value;
        for (int offset = S / 2; offset >= H; offset /= 2) m = nan_max(m, __shfl_xor_sync(FULL_MASK, m, offset));
        acc_t shift = m == neg_inf() ? (acc_t)0 : m;
        value = value == neg_inf() ? (acc_t)0 : exp_acc(value - shift);
        acc_t l = value;
        for (int offset = S / 2; offset >= H; offset /= 2) l += __shfl_xor_sync(FULL_MASK, l, offset);
        state.m = m;
        state.l = l;
    } else {
        if (MODE == 3 && active) value = prob_from_lse(value, lse_in[row * H + head]);
        acc_t l = active ? value * grad : (acc_t)0;
        for (int offset = S / 2; offset >= H; offset /= 2) l += __shfl_xor_sync(FULL_MASK, l, offset);
        state.m = 0;
        state.l = l;
    }
    if (MODE == 1) {
        if (has_row && in_group < H) lse_out[row * H + head] = state_lse(state);
    } else if (active) {
        // Mode 0: value holds exp(s - m); a NaN or +inf max makes l NaN.
        store_scalar(out + pos, MODE == 0 ? (state.l == 0 ? (acc_t)0 : value * ((acc_t)1 / state.l))
                                          : value * (grad - state.l));
    }
}

#define SOFTMAX_ENTRY_POINTS(MODE, NAME)                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                         \
        softmax_rows_##NAME(const i64* items, i64 num_items, i64 num_whole, int H, const scalar_t* a,         \
                            const scalar_t* g, const lse_t* lse_in, scalar_t* out, lse_t* lse_out,           \
                            SoftmaxState* partial) {                                                          \
        softmax_rows<MODE>(items, num_items, num_whole, H, a, g, lse_in, out, lse_out, partial);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                         \
        softmax_merge_##NAME(const i64* split_rows, i64 num_split, int H, const SoftmaxState* partial,       \
                             SoftmaxState* row_states, lse_t* lse_out) {                                      \
        softmax_merge<MODE>(split_rows, num_split, H, partial, row_states, lse_out);                         \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                         \
        softmax_write_##NAME(const i64* items, i64 num_items, i64 num_whole, int H, const scalar_t* a,        \
                             const scalar_t* g, const lse_t* lse_in, scalar_t* out,                           \
                             const SoftmaxState* row_states) {                                                \
        softmax_write<MODE>(items, num_items, num_whole, H, a, g, lse_in, out, row_states);                  \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_WARPS * WARP)                                         \
        softmax_groups_##NAME(const i64* rows, i64 num_rows, int S, int H, const i64* indptr, const scalar_t* a, \
                              const scalar_t* g, const lse_t* lse_in, scalar_t* out, lse_t* lse_out) {         \
        softmax_groups<MODE>(rows, num_rows, S, H, indptr, a, g, lse_in, out, lse_out);                       \
    }

SOFTMAX_ENTRY_POINTS(0, forward)
SOFTMAX_ENTRY_POINTS(1, lse)
SOFTMAX_ENTRY_POINTS(2, grad_probs)
SOFTMAX_ENTRY_POINTS(3, grad_scores)
