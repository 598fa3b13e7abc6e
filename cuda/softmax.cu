// Row-wise softmax over the edges of each destination row, per head, and its backward.
//
// Modes (template MODE, one set of extern "C" entry points each):
//   SOFTMAX_FORWARD      out = exp(s - m_row) / l_row
//   SOFTMAX_LSE          lse_out[row] = log sum exp(s) (no edge output)
//   SOFTMAX_GRAD_PROBS   out = p * (g - sum_row p*g), p given (a zero p adds nothing: grad_term)
//   SOFTMAX_GRAD_SCORES  out = p * (g - sum_row p*g), p = exp(s - lse_in[row]) (0 in rows of lse -inf)
//
// Kernels: softmax_runs_* (runs of consecutive short rows, staged in shared memory),
// softmax_block_rows_* (one block per pack of wider rows, staged), softmax_groups_* (short rows,
// several per warp), softmax_rows_* (one warp per plan item),
// and for rows split over several items softmax_merge_* (their partial states) and
// softmax_write_* (the edges of each split item). A row's (E_row, H) slice is
// contiguous, so lanes take (edge, head) pairs, giving coalesced loads for every H; each
// head's per-lane states are reduced by shuffles in a fixed order (common.cuh), so results
// are deterministic. Only the staged kernels (softmax_runs, each warp its own slice;
// softmax_block_rows) use shared memory. Bound: memory; each (E, H) input is read from
// DRAM once (whole rows longer than registers hold reread it from L1/L2 in the second pass).

#define SOFTMAX_FORWARD 0
#define SOFTMAX_LSE 1
#define SOFTMAX_GRAD_PROBS 2
#define SOFTMAX_GRAD_SCORES 3

// Forward and lse keep an online-softmax state (m, l) per head: a max, then a sum of exp.
__device__ constexpr bool softmax_keeps_max(int mode) { return mode == SOFTMAX_FORWARD || mode == SOFTMAX_LSE; }
// The gradient modes read g, and keep sum_row p * g in l (m stays 0).
__device__ constexpr bool softmax_reads_grad(int mode) {
    return mode == SOFTMAX_GRAD_PROBS || mode == SOFTMAX_GRAD_SCORES;
}
// The probabilities are recomputed from the scores and the forward's lse.
__device__ constexpr bool softmax_probs_from_lse(int mode) { return mode == SOFTMAX_GRAD_SCORES; }

// The type of g: the data type (grad_probs: the caller's gradient), or the accumulation type
// for grad_scores (attention_aggregate_backward's dot products, from sddmm_dot_acc). The
// staged kernels stage g as the data type: grad_scores of float16 data does not take them
// (gpu/softmax.py).
template <int MODE>
struct GradOf {
    typedef scalar_t type;
};
template <>
struct GradOf<SOFTMAX_GRAD_SCORES> {
    typedef acc_t type;
};
template <int MODE>
using grad_t = typename GradOf<MODE>::type;

// The gradient modes' term p * g of an edge in its row's sum, and its gradient p * (g - sum).
// grad_probs: a probability of exactly 0 adds nothing, whatever g holds (0 * inf would be
// NaN), so a row of zero weights (all its scores -inf) has zero gradient. grad_scores: a row
// without weight (weightless_row: lse -inf) has zero gradients, whatever its dot products hold
// (its values or grad_out may be infinite; its sum is then never used). Rows with weight
// keep IEEE arithmetic. A compare and a select on values in registers; grad_term selects g, not
// the product, so that the caller's sum keeps its fused multiply-add.
template <int MODE>
__device__ __forceinline__ acc_t grad_term(acc_t p, acc_t g) {
    return p * (MODE == SOFTMAX_GRAD_PROBS && p == 0 ? (acc_t)0 : g);
}
template <int MODE>
__device__ __forceinline__ acc_t score_grad(acc_t p, acc_t g, acc_t row_sum, bool weightless_row) {
    const bool adds_nothing = MODE == SOFTMAX_GRAD_PROBS ? p == 0 : weightless_row;
    return adds_nothing ? (acc_t)0 : p * (g - row_sum);
}

// CACHED (the preamble): elements per lane held in registers for whole rows.
// The widest step between a lane's cached elements (R * H) whose positions k * step, k < CACHED, fit in an int.
#define MAX_CACHED_STEP (0x7fffffff / (CACHED - 1))

// The per-head state of each mode, as a SoftmaxState (see softmax_keeps_max).
template <int MODE>
struct RowReduce {
    static __device__ __forceinline__ SoftmaxState empty() {
        SoftmaxState s = empty_state();
        if (softmax_reads_grad(MODE)) s.m = 0;
        return s;
    }
    static __device__ __forceinline__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
        if (softmax_keeps_max(MODE)) return merge_states(a, b);
        a.l += b.l;
        return a;
    }
    // The states of each head's lanes merged into its slot 0 (see head_reduce_to_leader);
    // the gradient modes shuffle l alone.
    static __device__ __forceinline__ SoftmaxState to_leader(SoftmaxState s, HeadLanes lanes) {
        if (softmax_keeps_max(MODE)) return head_reduce_to_leader(s, MergeStates(), lanes);
        s.l = head_reduce_to_leader(s.l, Sum(), lanes);
        return s;
    }
    // The same, returned to every lane of the head.
    static __device__ __forceinline__ SoftmaxState to_all(SoftmaxState s, HeadLanes lanes) {
        s = to_leader(s, lanes);
        if (softmax_keeps_max(MODE)) return shfl_from(s, lanes.h);
        s.l = shfl_from(s.l, lanes.h);
        return s;
    }
};

// Writes the outputs of one (row, head)'s edges begin + lane_edge, + R, ... (< end) from the
// row's merged state, BATCH edges at a time: a batch's loads all issue before its first store,
// so that they are in flight together. Each position is read and written by this lane alone,
// so an in-place call (out = a) reads every input before it is overwritten; each output is
// computed as one edge at a time would.
template <int MODE, int BATCH>
__device__ __forceinline__ void write_edges(const scalar_t* a, const grad_t<MODE>* g, const lse_t* lse_in,
                                            scalar_t* out, i64 row, i64 begin, i64 end, int H, int head,
                                            int lane_edge, int R, bool active, SoftmaxState row_state) {
    if (!active) return;
    const acc_t lse_row = softmax_probs_from_lse(MODE) ? lse_in[row * H + head] : (acc_t)0;
    const bool weightless_row = lse_row == neg_inf();  // grad_scores
    const auto result = [&](acc_t x, acc_t grad) -> acc_t {
        if (MODE == SOFTMAX_FORWARD) return prob_from_state(x, row_state);
        const acc_t p = softmax_probs_from_lse(MODE) ? prob_from_lse(x, lse_row) : x;
        return score_grad<MODE>(p, grad, row_state.l, weightless_row);
    };
    // The gradient of an edge that adds something, without score_grad's test.
    const auto weighed_result = [&](acc_t x, acc_t grad) -> acc_t {
        if (MODE == SOFTMAX_FORWARD) return prob_from_state(x, row_state);
        const acc_t p = softmax_probs_from_lse(MODE) ? prob_from_lse(x, lse_row) : x;
        return p * (grad - row_state.l);
    };
    i64 e = begin + lane_edge;
    for (; e + (BATCH - 1) * R < end; e += BATCH * R) {
        acc_t x[BATCH], grad[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; ++k) {
            const i64 pos = (e + k * R) * H + head;
            x[k] = load_scalar(a + pos);
            grad[k] = softmax_reads_grad(MODE) ? load_any(g + pos) : (acc_t)0;
        }
        // Whether an edge of the batch adds nothing (a zero p; a row without weight): only
        // then the test per edge. With it in every batch, ptxas (sm_90) sank the batch's loads
        // between its stores, one edge in flight at a time (R-MAT: 1.56x / 1.91x the time in
        // float32 / float16, ncu, H200).
        bool adds_nothing = MODE == SOFTMAX_GRAD_SCORES && weightless_row;
        if (MODE == SOFTMAX_GRAD_PROBS) {
#pragma unroll
            for (int k = 0; k < BATCH; ++k) adds_nothing |= x[k] == 0;
        }
        if (adds_nothing) {
#pragma unroll
            for (int k = 0; k < BATCH; ++k) store_scalar(out + (e + k * R) * H + head, result(x[k], grad[k]));
        } else {
#pragma unroll
            for (int k = 0; k < BATCH; ++k) {
                store_scalar(out + (e + k * R) * H + head, weighed_result(x[k], grad[k]));
            }
        }
    }
    for (; e < end; e += R) {
        const i64 pos = e * H + head;
        const acc_t grad = softmax_reads_grad(MODE) ? load_any(g + pos) : (acc_t)0;
        store_scalar(out + pos, result(load_scalar(a + pos), grad));
    }
}

// The edges per lane in flight of the loops over long rows (softmax_rows' split items and
// unstaged rows, softmax_write) are counts for 4-byte data: float16's forward and lse take twice
// as many, so that a warp has as many bytes in flight (these loops wait on them). The gradient
// modes read two arrays, and would spill (float16 softmax_write_grad_probs 47 -> 80 registers,
// 12 bytes spilled; ptxas, sm_90).
__device__ constexpr int batch_scale(int mode) { return sizeof(scalar_t) == 2 && softmax_keeps_max(mode) ? 2 : 1; }

// One warp per plan item (edges [begin, end) of one row; see Item), heads in passes of
// G = min(32, H - head0): lane k * G + h works on head head0 + h of edges begin + k + j * R,
// R = 32 / G (the HeadLanes layout). Items covering a whole row finish here; split items
// write their partial states to partial (merged by softmax_merge, applied by
// softmax_write). Bound: memory; rows of up to CACHED elements per lane stay in registers
// between the reduction and the write (one read, one write); longer ones are read in batches
// of up to CACHED elements per lane (times batch_scale), each batch in flight together.
// The warps take the split items first: each walks a thousand edges and more, a chain of
// loads that, taken last (their place in the plan), was the launch's tail, every other warp
// done; taken first, the whole rows fill in around them.
template <int MODE>
__device__ __forceinline__ void softmax_rows(const i64* items, i64 num_items, i64 num_whole, int H,
                                             const scalar_t* a, const grad_t<MODE>* g, const lse_t* lse_in,
                                             scalar_t* out, lse_t* lse_out, SoftmaxState* partial) {
    const i64 warp = grid_warp(), num_split_items = num_items - num_whole;
    if (warp >= num_items) return;
    const i64 index = warp < num_split_items ? num_whole + warp : warp - num_split_items;
    const Item item = plan_item(items, index);
    for (int head0 = 0; head0 < H; head0 += WARP) {
        const HeadLanes lanes = head_lanes(min(WARP, H - head0));
        const int R = lanes.R;
        bool active = lanes.k < R;
        int head = head0 + lanes.h, lane_edge = lanes.k;
        SoftmaxState state = RowReduce<MODE>::empty();
        // Rows of up to CACHED elements per lane keep them in registers: all loads are
        // issued before the first use, and the write pass reads no memory again.
        i64 per_lane = (item.end - item.begin + R - 1) / R;
        if (item.split < 0 && per_lane <= CACHED && (i64)R * H <= MAX_CACHED_STEP) {
            // 32-bit positions inside the row and one 64-bit base: the address arithmetic
            // is a large part of this kernel's instructions (the positions k * step fit in
            // an int by MAX_CACHED_STEP; wider steps, millions of heads, take the loop below).
            const int count = (int)(item.end - item.begin), step = R * H;
            const i64 base = (item.begin + lane_edge) * H + head;
            acc_t cached_a[CACHED], cached_g[CACHED];
#pragma unroll
            for (int k = 0; k < CACHED; ++k) {
                bool here = active && lane_edge + k * R < count;
                cached_a[k] = here ? load_scalar(a + base + k * step) : neg_inf();  // absent: no weight
                cached_g[k] = (softmax_reads_grad(MODE) && here) ? load_any(g + base + k * step) : (acc_t)0;
            }
            SoftmaxState row_state;
            bool weightless_row = false;  // grad_scores: lse -inf
            if (softmax_keeps_max(MODE)) {
                // Max first, then one exp per element: fewer instructions than an online
                // update, which matters at this size (the kernel is otherwise issue-bound).
                acc_t m = neg_inf();
#pragma unroll
                for (int k = 0; k < CACHED; ++k) m = nan_max(m, cached_a[k]);
                row_state.m = head_reduce_to_all(m, Max(), lanes);
                const acc_t shift = row_shift(row_state.m);
                acc_t l = 0;
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    cached_a[k] = shifted_exp(cached_a[k], shift);
                    l += cached_a[k];
                }
                row_state.l = head_reduce_to_all(l, Sum(), lanes);
            } else {
                acc_t lse_row = softmax_probs_from_lse(MODE) && active ? lse_in[item.row * H + head] : (acc_t)0;
                weightless_row = lse_row == neg_inf();
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    if (!(active && lane_edge + k * R < count)) continue;
                    acc_t p = softmax_probs_from_lse(MODE) ? prob_from_lse(cached_a[k], lse_row) : cached_a[k];
                    cached_a[k] = p;
                    state.l += grad_term<MODE>(p, cached_g[k]);
                }
                row_state.m = 0;
                row_state.l = head_reduce_to_all(state.l, Sum(), lanes);
            }
            if (MODE == SOFTMAX_LSE) {
                if (lanes.k == 0) lse_out[item.row * H + head] = state_lse(row_state);
            } else {
                // Forward: cached_a holds exp(s - m); a NaN or +inf max makes l, and so inv, NaN.
                acc_t inv = row_state.l == 0 ? (acc_t)0 : (acc_t)1 / row_state.l;
#pragma unroll
                for (int k = 0; k < CACHED; ++k) {
                    if (!(active && lane_edge + k * R < count)) continue;
                    acc_t value = MODE == SOFTMAX_FORWARD
                                      ? cached_a[k] * inv
                                      : score_grad<MODE>(cached_a[k], cached_g[k], row_state.l, weightless_row);
                    store_scalar(out + base + k * step, value);
                }
            }
            continue;
        }
        if (active) {
            // Edges per lane in flight: CACHED for the forward, within float32's cap of six
            // blocks per SM (ROWS_BOUNDS_forward); half that for the other modes, whose
            // registers would otherwise grow (float32 lse 40 -> 48, grad_scores 48 -> 64;
            // float16 grad_probs 48 -> 58; ptxas, sm_90).
            constexpr int BATCH_EDGES = (MODE == SOFTMAX_FORWARD ? CACHED : CACHED / 2) * batch_scale(MODE);
            const acc_t lse_row = softmax_probs_from_lse(MODE) ? lse_in[item.row * H + head] : (acc_t)0;
            for (i64 e0 = item.begin + lane_edge; e0 < item.end; e0 += (i64)BATCH_EDGES * R) {
                acc_t x[BATCH_EDGES], grad[BATCH_EDGES];
#pragma unroll
                for (int k = 0; k < BATCH_EDGES; ++k) {
                    const i64 e = e0 + (i64)k * R;
                    const bool here = e < item.end;
                    x[k] = here ? load_scalar(a + e * H + head) : neg_inf();  // absent: no weight
                    grad[k] = softmax_reads_grad(MODE) && here ? load_any(g + e * H + head) : (acc_t)0;
                }
                if (softmax_keeps_max(MODE)) {
                    // The step's max first, then one exp per element (add_score takes two).
                    acc_t m = state.m;
#pragma unroll
                    for (int k = 0; k < BATCH_EDGES; ++k) m = nan_max(m, x[k]);
                    const acc_t shift = row_shift(m);
                    acc_t l = state.l * rescale(state.m, m);
#pragma unroll
                    for (int k = 0; k < BATCH_EDGES; ++k) l += shifted_exp(x[k], shift);
                    state.m = m;
                    state.l = l;
                } else {
#pragma unroll
                    for (int k = 0; k < BATCH_EDGES; ++k) {
                        if (e0 + (i64)k * R >= item.end) break;
                        const acc_t p = softmax_probs_from_lse(MODE) ? prob_from_lse(x[k], lse_row) : x[k];
                        state.l += grad_term<MODE>(p, grad[k]);
                    }
                }
            }
        }
        if (item.split >= 0) {
            SoftmaxState chunk_state = RowReduce<MODE>::to_leader(state, lanes);
            if (lanes.k == 0) partial[(index - num_whole) * H + head] = chunk_state;
        } else if (MODE == SOFTMAX_LSE) {
            SoftmaxState row_state = RowReduce<MODE>::to_leader(state, lanes);
            if (lanes.k == 0) lse_out[item.row * H + head] = state_lse(row_state);
        } else {
            SoftmaxState row_state = RowReduce<MODE>::to_all(state, lanes);
            write_edges<MODE, 1>(a, g, lse_in, out, item.row, item.begin, item.end, H, head, lane_edge, R, active,
                                 row_state);
        }
    }
}

// One warp per split row, heads in passes as in softmax_rows: lane k * G + h merges the
// row's partial states k, k + R, ... of its head, then the lanes' states are merged (in
// item order within a lane, by the fixed shuffle tree across lanes) into row_states, or,
// for the lse, into lse_out. Bound: latency (a few states per row).
template <int MODE>
__device__ __forceinline__ void softmax_merge(const i64* split_rows, i64 num_split, int H,
                                              const SoftmaxState* partial, SoftmaxState* row_states,
                                              lse_t* lse_out) {
    i64 index;
    SplitRow split;
    if (!warp_split_row(split_rows, num_split, index, split)) return;
    for (int head0 = 0; head0 < H; head0 += WARP) {
        const HeadLanes lanes = head_lanes(min(WARP, H - head0));
        int head = head0 + lanes.h;
        SoftmaxState state = RowReduce<MODE>::empty();
        if (lanes.k < lanes.R) {
            for (i64 c = lanes.k; c < split.count; c += lanes.R) {
                state = RowReduce<MODE>::merge(state, partial[(split.first + c) * H + head]);
            }
        }
        SoftmaxState row_state = RowReduce<MODE>::to_leader(state, lanes);
        if (lanes.k == 0) {
            if (MODE == SOFTMAX_LSE) lse_out[split.row * H + head] = state_lse(row_state);
            else row_states[index * H + head] = row_state;
        }
    }
}

// Edges per batch (of 4-byte data: batch_scale) of the split rows' write pass: a lane walks up
// to WHOLE_ROW_EDGES / R edges of its item, and loading one edge at a time its loop waited on
// each load (softmax_write_forward moved 1.5 TB/s on an R-MAT graph, H200). softmax_rows writes
// its unstaged whole rows one edge at a time: a batch there costs registers (float32
// softmax_rows_forward 40 -> 44-48, five blocks per SM instead of six).
constexpr int SPLIT_WRITE_BATCH = 8;

// One warp per split item, lanes as in softmax_rows: applies its row's merged state to the
// item's edges. Bound: memory (rereads the item's inputs once, writes its outputs).
template <int MODE>
__device__ __forceinline__ void softmax_write(const i64* items, i64 num_items, i64 num_whole, int H,
                                              const scalar_t* a, const grad_t<MODE>* g, const lse_t* lse_in,
                                              scalar_t* out, const SoftmaxState* row_states) {
    // The split items in reverse plan order: softmax_rows, launched just before (softmax_merge
    // between them reads only the partial states), read them in plan order, so the last it
    // read are the likeliest to be in L2 still; taking those first rereads them from there.
    const i64 index = num_items - 1 - grid_warp();
    if (index < num_whole) return;
    const Item item = plan_item(items, index);
    for (int head0 = 0; head0 < H; head0 += WARP) {
        const HeadLanes lanes = head_lanes(min(WARP, H - head0));
        int head = head0 + lanes.h;
        write_edges<MODE, SPLIT_WRITE_BATCH * batch_scale(MODE)>(a, g, lse_in, out, item.row, item.begin, item.end,
                                                                 H, head, lanes.k, lanes.R, lanes.k < lanes.R,
                                                                 row_states[item.split * H + head]);
    }
}

// Short rows (H a power of two): a group of S lanes per row (S a power of two, H <= S <= 32),
// 32 / S rows per warp, each lane holding K elements of its row (K <= CACHED, degree * H <=
// K * S): element j * S + i of the row's (E_row, H) slice goes to lane i of the group, for
// j < K, so a lane's elements are all of one head (S is a multiple of H) and the group's loads
// are coalesced. Several rows to a warp put more of them in flight than a warp per row
// (softmax_rows), whose loads wait on its item. States are merged in each lane (in j order),
// then by an xor butterfly inside the group (max, then sum of exp; span_allreduce), so every
// lane of a head ends with the same, run-to-run identical, value. Bound: memory (one read and
// one write per element).
template <int MODE>
__device__ __forceinline__ void softmax_groups(const i64* rows, i64 num_rows, int S, int K, int H, const i64* indptr,
                                               const scalar_t* a, const grad_t<MODE>* g, const lse_t* lse_in,
                                               scalar_t* out, lse_t* lse_out) {
    const int lane = lane_id();
    i64 group = grid_warp() * (WARP / S) + lane / S;
    bool has_row = group < num_rows;  // every lane stays for the shuffles
    i64 row = has_row ? rows[group] : 0;
    i64 begin = has_row ? indptr[row] : 0, end = has_row ? indptr[row + 1] : 0;
    const int in_group = lane % S, head = in_group % H;
    // 32-bit positions inside the row (at most K * S <= CACHED * 32 elements) from one base.
    const int count = (int)(end - begin) * H;
    const i64 base = begin * H + in_group;
    acc_t value[CACHED], grad[CACHED];
#pragma unroll
    for (int j = 0; j < CACHED; ++j) {
        const bool here = j < K && j * S + in_group < count;
        value[j] = here ? load_scalar(a + base + j * S) : neg_inf();  // absent: no weight
        grad[j] = (softmax_reads_grad(MODE) && here) ? load_any(g + base + j * S) : (acc_t)0;
    }
    SoftmaxState state;
    bool weightless_row = false;  // grad_scores: lse -inf
    if (softmax_keeps_max(MODE)) {
        // The group's max, then one exp per element and the group's sum.
        acc_t m = neg_inf();
#pragma unroll
        for (int j = 0; j < CACHED; ++j) m = nan_max(m, value[j]);
        m = span_allreduce(m, Max(), H, S);
        const acc_t shift = row_shift(m);
        acc_t l = 0;
#pragma unroll
        for (int j = 0; j < CACHED; ++j) {
            value[j] = shifted_exp(value[j], shift);
            l += value[j];
        }
        state.m = m;
        state.l = span_allreduce(l, Sum(), H, S);
    } else {
        acc_t lse_row = 0;
        if (softmax_probs_from_lse(MODE) && in_group < count) {
            lse_row = lse_in[row * H + head];
            weightless_row = lse_row == neg_inf();
        }
        acc_t l = 0;
#pragma unroll
        for (int j = 0; j < CACHED; ++j) {
            if (!(j < K && j * S + in_group < count)) continue;
            const acc_t p = softmax_probs_from_lse(MODE) ? prob_from_lse(value[j], lse_row) : value[j];
            value[j] = p;
            l += grad_term<MODE>(p, grad[j]);
        }
        state.m = 0;
        state.l = span_allreduce(l, Sum(), H, S);
    }
    if (MODE == SOFTMAX_LSE) {
        if (has_row && in_group < H) lse_out[row * H + head] = state_lse(state);
        return;
    }
    // Forward: value holds exp(s - m); a NaN or +inf max makes l NaN.
    const acc_t inv = state.l == 0 ? (acc_t)0 : (acc_t)1 / state.l;
#pragma unroll
    for (int j = 0; j < CACHED; ++j) {
        if (!(j < K && j * S + in_group < count)) continue;
        store_scalar(out + base + j * S, MODE == SOFTMAX_FORWARD ? value[j] * inv
                                                                 : score_grad<MODE>(value[j], grad[j], state.l, weightless_row));
    }
}

// Runs of R consecutive rows (run r: rows [r * R, r * R + R), the plan's choice of R; see
// gpu/plan.py), one warp per run: the run's edges are one contiguous (E_run, H) slice, which
// the warp copies into its shared-memory stage (16-byte loads, run_chunk_batch of them per
// lane in flight; the elements before the first 16-byte boundary and after the last one singly),
// then works on its (row, head) pairs over the stage, L lanes per pair (L = 32 / P for
// P = min(32, pairs) rounded up to a power of two; the lanes of a pair walk its elements
// strided and combine by an xor butterfly, in a fixed order, so deterministic), and copies
// the stage back out the same way. No item list; the only dependent loads before the data
// are the run's index (none when every run is taken) and its indptr entries. runs holds the
// runs taken (whose edges fit the stage), or is null when that is every run. Outputs may
// alias inputs: a warp reads its run whole before it writes any of it, and touches no
// other run's elements. Bound: memory (one read and one write per element).
// 16-byte chunks per lane in flight for each staged array. The forward and lse modes (one
// array) take 2: with 8 softmax_runs_forward used 62 registers, four blocks per SM instead of
// six, and ran 1.14x slower on a uniform graph of degree 16 at H = 8 (H200). The gradient
// modes (two arrays) take 4 each (48 registers): with 1 each they ran 1.19x slower on rows
// of 500 edges.
__host__ __device__ constexpr int run_chunk_batch(int arrays) { return arrays == 1 ? 2 : 4; }

// Elements per 32-bit stage word: float16 stages two heads of one edge in a word where H is
// even, so that its passes load, convert and store them together (half the shared accesses).
constexpr int STAGE_PACK = sizeof(scalar_t) == 2 ? 2 : 1;

// The stage slot of a run's element i: one slot of padding (STAGE_PACK elements, a 32-bit
// word for float16) after every 32 of them, so that lanes walking rows of equal length
// (offsets a multiple of 32 such units apart) hit different banks; the elements of a word
// stay together. i is never negative: the unsigned division is a shift.
__host__ __device__ constexpr int run_slot(int i) {
    return i + (int)((unsigned)i / (WARP * STAGE_PACK)) * STAGE_PACK;
}

// The split of `count` elements from p into 16-byte chunks: `lead` elements before the
// first 16-byte boundary (or all of them), then `chunks` whole chunks, then the rest.
struct ChunkSplit {
    int lead;
    int chunks;
};
__device__ __forceinline__ ChunkSplit chunk_split(const void* p, int count) {
    constexpr int PER_CHUNK = 16 / (int)sizeof(scalar_t);
    ChunkSplit split;
    int misalign = (int)(reinterpret_cast<unsigned long long>(p) & 15);
    split.lead = min(count, misalign ? (16 - misalign) / (int)sizeof(scalar_t) : 0);
    split.chunks = (count - split.lead) / PER_CHUNK;
    return split;
}

union StageChunk {
    int4 q;
    scalar_t s[16 / sizeof(scalar_t)];
    unsigned int w[4];
};

// Whether a run whose chunks start `lead` elements in stages them a word at a time (the
// elements of each word then share a chunk word): float16 with an even lead.
__device__ __forceinline__ bool stage_by_words(int lead) { return STAGE_PACK == 2 && lead % 2 == 0; }

// The 32-bit stage word whose first element is element i (i a multiple of STAGE_PACK).
__device__ __forceinline__ unsigned int* stage_word(scalar_t* stage, int i) {
    return reinterpret_cast<unsigned int*>(stage + run_slot(i));
}
__device__ __forceinline__ const unsigned int* stage_word(const scalar_t* stage, int i) {
    return reinterpret_cast<const unsigned int*>(stage + run_slot(i));
}

// Copies `count` elements of src (global) to the stage slots run_slot(at .. at + count) (`at`
// even), thread t of the T that share the stage (a warp's lanes, or a block's threads)
// taking chunks t, t + T, ...
template <int BATCH>
__device__ __forceinline__ void stage_in(const scalar_t* src, int count, scalar_t* stage, int at, int t, int T) {
    constexpr int PER_CHUNK = 16 / (int)sizeof(scalar_t);
    const ChunkSplit split = chunk_split(src, count);
    const int tail = split.lead + split.chunks * PER_CHUNK;
    const bool by_words = stage_by_words(split.lead);  // at is even: at + lead has lead's parity
    // The single elements of both ends (fewer than PER_CHUNK <= 8 each), issued with the chunks.
    scalar_t lone_lead = 0, lone_tail = 0;
    if (t < split.lead) lone_lead = __ldg(src + t);
    if (tail + t < count) lone_tail = __ldg(src + tail + t);
    const int4* chunks = reinterpret_cast<const int4*>(src + split.lead);
    for (int c0 = 0; c0 < split.chunks; c0 += T * BATCH) {
        StageChunk v[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; ++k) {
            int c = c0 + k * T + t;
            if (c < split.chunks) v[k].q = __ldg(chunks + c);
        }
#pragma unroll
        for (int k = 0; k < BATCH; ++k) {
            int c = c0 + k * T + t;
            if (c < split.chunks) {
                const int i0 = at + split.lead + c * PER_CHUNK;
                if (by_words) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) *stage_word(stage, i0 + q * STAGE_PACK) = v[k].w[q];
                } else {
#pragma unroll
                    for (int q = 0; q < PER_CHUNK; ++q) stage[run_slot(i0 + q)] = v[k].s[q];
                }
            }
        }
    }
    if (t < split.lead) stage[run_slot(at + t)] = lone_lead;
    if (tail + t < count) stage[run_slot(at + tail + t)] = lone_tail;
}

// Asynchronous copies global -> shared (cp.async, sm_80 and later) of ASYNC_BYTES each: one
// float32, two float16 (one stage word), one float64.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define STAGE_ASYNC 1
#else
#define STAGE_ASYNC 0
#endif
constexpr int ASYNC_BYTES = sizeof(scalar_t) > 4 ? (int)sizeof(scalar_t) : 4;
constexpr int ASYNC_ELEMENTS = ASYNC_BYTES / (int)sizeof(scalar_t);

// Copies `count` elements of src (global, ASYNC_BYTES-aligned) to the stage slots
// run_slot(at .. at + count) (`at` even: a float16 unit never straddles a padding slot)
// with cp.async, thread t of the T that share the stage taking units (ASYNC_ELEMENTS
// elements) t, t + T, ...: a warp's copy reads 32 consecutive units, and every unit of the
// stage is in flight at once, held in no register. Readers wait for them with stage_wait,
// then synchronize the T threads. T is a multiple of WARP (a warp, or a block).
__device__ __forceinline__ void stage_in_async(const scalar_t* src, int count, scalar_t* stage, int at, int t,
                                               int T) {
#if STAGE_ASYNC
    const int units = count / ASYNC_ELEMENTS;
    // T units are a whole number of padding periods (WARP * STAGE_PACK elements), so every step
    // moves a thread's slot by run_slot(T * ASYNC_ELEMENTS): one add a unit where run_slot of
    // each took three instructions, in kernels bound by instruction issue (float16).
    unsigned int to = (unsigned int)__cvta_generic_to_shared(stage + run_slot(at + t * ASYNC_ELEMENTS));
    const unsigned int to_step = (unsigned int)(run_slot(T * ASYNC_ELEMENTS) * sizeof(scalar_t));
    const scalar_t* from = src + t * ASYNC_ELEMENTS;
    for (int u = t; u < units; u += T, to += to_step, from += T * ASYNC_ELEMENTS) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(to), "l"(from), "n"(ASYNC_BYTES)
                     : "memory");
    }
    // float16: an odd count leaves one element, copied through a register.
    if (ASYNC_ELEMENTS > 1 && count % ASYNC_ELEMENTS != 0 && t == 0)
        stage[run_slot(at + count - 1)] = __ldg(src + count - 1);
#endif
}

// Waits for this thread's stage_in_async copies.
__device__ __forceinline__ void stage_wait() {
#if STAGE_ASYNC
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Stages `count` elements of src: asynchronously (stage_in_async) where the architecture and
// src's alignment allow it, else through registers (stage_in). The caller calls stage_wait,
// then synchronizes its threads, before reading the stage.
template <int BATCH>
__device__ __forceinline__ void stage_load(const scalar_t* src, int count, scalar_t* stage, int at, int t, int T) {
    // An element is aligned to its own size, so float32 and float64 always copy asynchronously
    // (and their kernels hold no registers for the other path); float16 needs an even offset.
    constexpr bool ALIGNED = sizeof(scalar_t) >= ASYNC_BYTES;
    if (STAGE_ASYNC && (ALIGNED || reinterpret_cast<unsigned long long>(src) % ASYNC_BYTES == 0)) {
        stage_in_async(src, count, stage, at, t, T);
    } else {
        stage_in<BATCH>(src, count, stage, at, t, T);
    }
}

// Copies the stage slots run_slot(at .. at + count) (`at` even) to `count` elements of dst
// (global), threads as in stage_in (T a multiple of WARP).
__device__ __forceinline__ void stage_out(const scalar_t* stage, int at, int count, scalar_t* dst, int t, int T) {
    constexpr int PER_CHUNK = 16 / (int)sizeof(scalar_t);
    const ChunkSplit split = chunk_split(dst, count);
    const int tail = split.lead + split.chunks * PER_CHUNK;
    if (t < split.lead) dst[t] = stage[run_slot(at + t)];
    if (tail + t < count) dst[tail + t] = stage[run_slot(at + tail + t)];
    int4* chunks = reinterpret_cast<int4*>(dst + split.lead);
    // T chunks are a whole number of padding periods (T is a multiple of WARP), so each of a
    // thread's chunks has its words (or elements) at the first one's slots plus
    // run_slot(T * PER_CHUNK): a move of each address, not a run_slot of each.
    const int i0 = at + split.lead + t * PER_CHUNK;
    const int moved = run_slot(T * PER_CHUNK);
    if (stage_by_words(split.lead)) {
        const unsigned int* from[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) from[q] = stage_word(stage, i0 + q * STAGE_PACK);
        for (int c = t; c < split.chunks; c += T) {
            StageChunk v;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                v.w[q] = *from[q];
                from[q] += moved / STAGE_PACK;
            }
            chunks[c] = v.q;
        }
    } else if (STAGE_PACK == 1) {
        const scalar_t* from[PER_CHUNK];
#pragma unroll
        for (int q = 0; q < PER_CHUNK; ++q) from[q] = stage + run_slot(i0 + q);
        for (int c = t; c < split.chunks; c += T) {
            StageChunk v;
#pragma unroll
            for (int q = 0; q < PER_CHUNK; ++q) {
                v.s[q] = *from[q];
                from[q] += moved;
            }
            chunks[c] = v.q;
        }
    } else {  // float16 at an odd offset: eight addresses to hold would cost its kernels registers
        for (int c = t; c < split.chunks; c += T) {
            StageChunk v;
            const int i = i0 + (c - t) * PER_CHUNK;
#pragma unroll
            for (int q = 0; q < PER_CHUNK; ++q) v.s[q] = stage[run_slot(i + q)];
            chunks[c] = v.q;
        }
    }
}

// op over the L consecutive threads of each work item (L a power of two, the same for the
// whole warp or block), for each of its V heads: an xor butterfly within a warp, then, for
// L > 32 (block kernels only), over the item's L / 32 warps in warp order through `spill`
// (BLOCK_WARPS * V values; the V heads share one round of it). Every thread of an item ends
// with the same values, whatever the scheduling.
template <bool BLOCK, int V, class Op>
__device__ __forceinline__ void item_allreduce(acc_t (&x)[V], Op op, int L, acc_t* spill) {
#pragma unroll
    for (int h = 0; h < V; ++h) x[h] = span_allreduce(x[h], op, 1, min(L, WARP));
    if (BLOCK && L > WARP) {
        const int warp = threadIdx.x / WARP, per = L / WARP, first = warp / per * per;
        if (lane_id() == 0) {
#pragma unroll
            for (int h = 0; h < V; ++h) spill[warp * V + h] = x[h];
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < V; ++h) {
            x[h] = spill[first * V + h];
            for (int w = first + 1; w < first + per; ++w) x[h] = op(x[h], spill[w * V + h]);
        }
        __syncthreads();  // spill is written again by the next reduction
    }
}

// Elements i = begin, begin + step, ... (< end) of one lane's share of the stage, GROUP at a
// time while GROUP remain, then one at a time: load(i) for each element of a group before
// use(i, loaded) for any, in element order, so that a group's stage loads issue together
// while every accumulation keeps the order of a plain loop (the same results).
template <int GROUP, class Load, class Use>
__device__ __forceinline__ void for_stage_elements(int begin, int end, int step, Load load, Use use) {
    using Loaded = decltype(load(0));
    int i = begin;
    for (; i + (GROUP - 1) * step < end; i += GROUP * step) {
        Loaded loaded[GROUP];
#pragma unroll
        for (int k = 0; k < GROUP; ++k) loaded[k] = load(i + k * step);
#pragma unroll
        for (int k = 0; k < GROUP; ++k) use(i + k * step, loaded[k]);
    }
    for (; i < end; i += step) use(i, load(i));
}

// Elements of a lane's share loaded together by the passes over the stage.
constexpr int STAGE_GROUP = 4;

// V consecutive heads of one edge, as acc_t.
template <int V>
struct StageHeads {
    acc_t v[V];
};

// The passes over the stage walk units of V elements (one edge's V heads): unit u is element u
// (V = 1), or, for V = STAGE_PACK = 2, the 32-bit word u (elements 2u and 2u + 1), which is
// stage word u + u / WARP (run_slot(2u) / 2): one shift-add, where run_slot of the element
// index took three instructions in passes that float16 leaves bound by instruction issue.
__device__ __forceinline__ int stage_unit_word(int u) { return u + (int)((unsigned)u / WARP); }

// Unit u of the stage.
template <int V>
__device__ __forceinline__ StageHeads<V> stage_heads(const scalar_t* stage, int u) {
    StageHeads<V> x;
    if (V == 1) {
        x.v[0] = to_acc(stage[run_slot(u)]);
    } else {
        const unsigned int word = reinterpret_cast<const unsigned int*>(stage)[stage_unit_word(u)];
#pragma unroll
        for (int h = 0; h < V; ++h) x.v[h] = to_acc((scalar_t)(word >> (16 * h)));
    }
    return x;
}

// Stores x, rounded to the data type, as unit u of the stage.
template <int V>
__device__ __forceinline__ void store_stage_heads(scalar_t* stage, int u, const StageHeads<V>& x) {
    if (V == 1) {
        store_scalar(stage + run_slot(u), x.v[0]);
    } else {
        scalar_t bits[V];
#pragma unroll
        for (int h = 0; h < V; ++h) store_scalar(bits + h, x.v[h]);
        unsigned int word = 0;
#pragma unroll
        for (int h = 0; h < V; ++h) word |= (unsigned int)bits[h] << (16 * h);
        reinterpret_cast<unsigned int*>(stage)[stage_unit_word(u)] = word;
    }
}

#if CSR_DTYPE == 2
// The NaN-propagating max of two pairs of float16 values (32-bit words), pair by pair: a NaN
// where either is one, else the larger (as nan_max of the values, to the bits).
__device__ __forceinline__ unsigned int nan_max_pairs(unsigned int a, unsigned int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int m;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
    return m;
#else
    unsigned int m = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const scalar_t x = (scalar_t)(a >> (16 * h)), y = (scalar_t)(b >> (16 * h));
        const acc_t vx = to_acc(x), vy = to_acc(y);
        m |= (unsigned int)(vx != vx ? x : vy != vy ? y : vx >= vy ? x : y) << (16 * h);
    }
    return m;
#endif
}
#endif

// m: the NaN-propagating max of each of the V heads over the units begin, begin + step, ...
// (< end) of the stage, -inf where there are none. float16 pairs take it on the packed halves
// (nan_max_pairs): one max.NaN.f16x2 a pair where converting each half first took four
// instructions, and the same maxima (a half converts to acc_t exactly, in order).
template <int V>
__device__ __forceinline__ void stage_max(const scalar_t* stage, int begin, int end, int step, acc_t (&m)[V]) {
#if CSR_DTYPE == 2
    if (V == 2) {
        const unsigned int* words = reinterpret_cast<const unsigned int*>(stage);
        unsigned int pair = 0xfc00fc00u;  // (-inf, -inf)
        for_stage_elements<STAGE_GROUP>(
            begin, end, step, [&](int u) { return words[stage_unit_word(u)]; },
            [&](int, unsigned int word) { pair = nan_max_pairs(pair, word); });
#pragma unroll
        for (int h = 0; h < V; ++h) m[h] = to_acc((scalar_t)(pair >> (16 * h)));
    } else
#endif
    {
#pragma unroll
        for (int h = 0; h < V; ++h) m[h] = neg_inf();
        for_stage_elements<STAGE_GROUP>(
            begin, end, step, [&](int u) { return stage_heads<V>(stage, u); },
            [&](int, const StageHeads<V>& s) {
#pragma unroll
                for (int h = 0; h < V; ++h) m[h] = nan_max(m[h], s.v[h]);
            });
    }
}

// The score and gradient heads of one edge, for the gradient modes.
template <int V>
struct StageGradHeads {
    StageHeads<V> a, g;
};

// The rows of a warp's run: row r is row0 + r, its elements at stage offsets[r] .. offsets[r + 1].
struct RunRows {
    const int* offsets;
    i64 row0;
    __device__ __forceinline__ int begin(int r) const { return offsets[r]; }
    __device__ __forceinline__ int end(int r) const { return offsets[r + 1]; }
    __device__ __forceinline__ i64 row(int r) const { return row0 + r; }
};

// The rows of a block's pack: row r is ids[r], its elements at stage begins[r] .. ends[r].
struct PackRows {
    const int* begins;
    const int* ends;
    const i64* ids;
    __device__ __forceinline__ int begin(int r) const { return begins[r]; }
    __device__ __forceinline__ int end(int r) const { return ends[r]; }
    __device__ __forceinline__ i64 row(int r) const { return ids[r]; }
};

// The softmax of staged rows: `rows` rows, row r (rows_at.row(r)) with its elements in stage
// slots run_slot(rows_at.begin(r) .. rows_at.end(r)) ((edge, head) in order), worked on by T threads
// (thread t; a warp, or with BLOCK a block). Each work item is a row and V consecutive heads
// (V divides H), L threads per item (L = T / P for P = min(T, items) rounded up to a power of
// two), each walking the item's edges strided by L and combining each head by
// item_allreduce (max, sum, write, as in softmax_rows' register path). Outputs are written
// back into the stage (lse modes: lse_out).
template <int MODE, bool BLOCK, int V, class Rows>
__device__ __forceinline__ void stage_softmax_heads(scalar_t* stage_a, const scalar_t* stage_g, const Rows& rows_at,
                                                    int rows, int H, int t, int T, const lse_t* lse_in,
                                                    lse_t* lse_out, acc_t* spill) {
    // Where the data type is the accumulation type, the forward keeps exp(s - m) in the stage
    // exactly and does not compute it twice.
    constexpr bool KEEP_EXP = sizeof(scalar_t) == sizeof(acc_t);
    const int groups = H / V;  // head groups per row
    const int items = rows * groups;
    int L = T;  // threads per item
    while (L > 1 && T / L < items) L >>= 1;
    const int sub = t & (L - 1);
    // An item's row is item / groups: a shift where groups is a power of two (H is, most
    // often), where the division took 26 instructions of the item's setup (SASS, sm_90).
    const int groups_shift = (groups & (groups - 1)) == 0 ? __ffs(groups) - 1 : -1;
    for (int item0 = 0; item0 < items; item0 += T / L) {  // the same trips for every thread
        const int item = item0 + t / L;
        const bool valid = item < items;
        const int r = valid ? (groups_shift >= 0 ? item >> groups_shift : item / groups) : 0;
        const int head = valid ? (item - r * groups) * V : 0;
        // The item's units (stage_heads; a row's elements start at an even offset, and V = 2
        // only where H is even).
        const int begin = valid ? (rows_at.begin(r) + head + sub * H) / V : 0, end = valid ? rows_at.end(r) / V : 0;
        const int step = L * H / V;
        const i64 row = rows_at.row(r);
        if (softmax_keeps_max(MODE)) {
            const auto staged = [&](int u) { return stage_heads<V>(stage_a, u); };
            acc_t m[V], shift[V], l[V];
#pragma unroll
            for (int h = 0; h < V; ++h) l[h] = 0;
            stage_max<V>(stage_a, begin, end, step, m);
            item_allreduce<BLOCK>(m, Max(), L, spill);
#pragma unroll
            for (int h = 0; h < V; ++h) shift[h] = row_shift(m[h]);
            for_stage_elements<STAGE_GROUP>(begin, end, step, staged, [&](int i, const StageHeads<V>& s) {
                StageHeads<V> e;
#pragma unroll
                for (int h = 0; h < V; ++h) {
                    e.v[h] = shifted_exp(s.v[h], shift[h]);
                    l[h] += e.v[h];
                }
                if (MODE == SOFTMAX_FORWARD && KEEP_EXP) store_stage_heads<V>(stage_a, i, e);
            });
            item_allreduce<BLOCK>(l, Sum(), L, spill);
            if (MODE == SOFTMAX_LSE) {
#pragma unroll
                for (int h = 0; h < V; ++h) {
                    SoftmaxState state;
                    state.m = m[h];
                    state.l = l[h];
                    if (valid && sub == 0) lse_out[row * H + head + h] = state_lse(state);
                }
            } else {
                // A NaN or +inf max makes l, and so inv, NaN.
                acc_t inv[V];
#pragma unroll
                for (int h = 0; h < V; ++h) inv[h] = l[h] == 0 ? (acc_t)0 : (acc_t)1 / l[h];
                for_stage_elements<STAGE_GROUP>(begin, end, step, staged, [&](int i, const StageHeads<V>& s) {
                    StageHeads<V> p;
#pragma unroll
                    for (int h = 0; h < V; ++h) {
                        acc_t e = KEEP_EXP ? s.v[h] : shifted_exp(s.v[h], shift[h]);
                        p.v[h] = e * inv[h];
                    }
                    store_stage_heads<V>(stage_a, i, p);
                });
            }
        } else {
            acc_t lse_row[V], l[V];
#pragma unroll
            for (int h = 0; h < V; ++h) {
                lse_row[h] = softmax_probs_from_lse(MODE) && valid ? lse_in[row * H + head + h] : (acc_t)0;
                l[h] = 0;
            }
            const auto staged = [&](int i) {
                StageGradHeads<V> x;
                x.a = stage_heads<V>(stage_a, i);
                x.g = stage_heads<V>(stage_g, i);
#pragma unroll
                for (int h = 0; h < V; ++h) {
                    if (softmax_probs_from_lse(MODE)) x.a.v[h] = prob_from_lse(x.a.v[h], lse_row[h]);
                }
                return x;
            };
            for_stage_elements<STAGE_GROUP>(begin, end, step, staged, [&](int, const StageGradHeads<V>& x) {
#pragma unroll
                for (int h = 0; h < V; ++h) l[h] += grad_term<MODE>(x.a.v[h], x.g.v[h]);
            });
            item_allreduce<BLOCK>(l, Sum(), L, spill);
            for_stage_elements<STAGE_GROUP>(begin, end, step, staged, [&](int i, const StageGradHeads<V>& x) {
                StageHeads<V> out;
#pragma unroll
                for (int h = 0; h < V; ++h) {
                    out.v[h] = score_grad<MODE>(x.a.v[h], x.g.v[h], l[h], lse_row[h] == neg_inf());
                }
                store_stage_heads<V>(stage_a, i, out);
            });
        }
    }
}

// stage_softmax_heads with two heads per item where the stage packs them (float16, H even),
// unless that leaves a block fewer items than warps: an item spanning warps reduces through
// shared memory at two barriers a reduction, which one warp per item does not need.
template <int MODE, bool BLOCK, class Rows>
__device__ __forceinline__ void stage_softmax(scalar_t* stage_a, const scalar_t* stage_g, const Rows& rows_at,
                                              int rows, int H, int t, int T, const lse_t* lse_in, lse_t* lse_out,
                                              acc_t* spill) {
    if (STAGE_PACK > 1 && H % STAGE_PACK == 0 && !(BLOCK && rows * (H / STAGE_PACK) * WARP < T)) {
        stage_softmax_heads<MODE, BLOCK, STAGE_PACK>(stage_a, stage_g, rows_at, rows, H, t, T, lse_in, lse_out, spill);
    } else {
        stage_softmax_heads<MODE, BLOCK, 1>(stage_a, stage_g, rows_at, rows, H, t, T, lse_in, lse_out, spill);
    }
}

template <int MODE>
__device__ __forceinline__ void softmax_runs(const i64* runs, i64 num_runs, int R, i64 num_rows, int H,
                                             const i64* indptr, const scalar_t* a, const scalar_t* g,
                                             const lse_t* lse_in, scalar_t* out, lse_t* lse_out) {
    constexpr int ARRAYS = softmax_reads_grad(MODE) ? 2 : 1;
    constexpr int CAPACITY = RUN_STAGE_BYTES / (ARRAYS * (int)sizeof(scalar_t));
    __shared__ __align__(16) scalar_t stage[BLOCK_WARPS][ARRAYS][run_slot(CAPACITY)];
    __shared__ int offsets[BLOCK_WARPS][MAX_RUN_ROWS + 1];
    const i64 index = grid_warp();
    if (index >= num_runs) return;
    const int lane = lane_id(), warp = threadIdx.x / WARP;
    const i64 row0 = (runs ? runs[index] : index) * R;
    const int rows = (int)min((i64)R, num_rows - row0);
    const i64 first = indptr[row0];
    for (int r = lane; r <= rows; r += WARP) offsets[warp][r] = (int)(indptr[row0 + r] - first) * H;
    __syncwarp();
    const int width = offsets[warp][rows];
    scalar_t* stage_a = stage[warp][0];
    scalar_t* stage_g = stage[warp][ARRAYS - 1];
    const i64 base = first * H;
    stage_load<run_chunk_batch(ARRAYS)>(a + base, width, stage_a, 0, lane, WARP);
    if (softmax_reads_grad(MODE)) stage_load<run_chunk_batch(ARRAYS)>(g + base, width, stage_g, 0, lane, WARP);
    stage_wait();
    __syncwarp();
    const RunRows rows_at{offsets[warp], row0};
    stage_softmax<MODE, false>(stage_a, stage_g, rows_at, rows, H, lane, WARP, lse_in, lse_out, nullptr);
    if (MODE == SOFTMAX_LSE) return;
    __syncwarp();
    stage_out(stage_a, 0, width, out + base, lane, WARP);
}

// One block per pack of whole rows (rows wider than a warp's stage whose edges fit the
// block's, BLOCK_WARPS times as large): pack b is rows[packs[b] .. packs[b + 1]] (at most
// MAX_BLOCK_ROWS), row j's (E_row, H) slice staged at stage_offsets[j] (even; the plan packs
// rows whose slices fit the stage together). The block stages every row of its pack with
// 16-byte copies, works on them with stage_softmax (a head's threads spanning warps combine
// through shared memory, in warp order) and copies them back. A block of one narrow row
// would keep most of its stage, and so of the SM's bytes in flight, idle.
// Bound: memory (one read and one write per element).
template <int MODE>
__device__ __forceinline__ void softmax_block_rows(const i64* rows, const int* stage_offsets, const i64* packs,
                                                   i64 num_packs, int H, const i64* indptr, const scalar_t* a,
                                                   const scalar_t* g, const lse_t* lse_in, scalar_t* out,
                                                   lse_t* lse_out) {
    constexpr int ARRAYS = softmax_reads_grad(MODE) ? 2 : 1;
    constexpr int CAPACITY = BLOCK_WARPS * RUN_STAGE_BYTES / (ARRAYS * (int)sizeof(scalar_t));
    __shared__ __align__(16) scalar_t stage[ARRAYS][run_slot(CAPACITY)];
    __shared__ int begins[MAX_BLOCK_ROWS], ends[MAX_BLOCK_ROWS];
    __shared__ i64 ids[MAX_BLOCK_ROWS], firsts[MAX_BLOCK_ROWS];
    __shared__ acc_t spill[BLOCK_WARPS * STAGE_PACK];
    if ((i64)blockIdx.x >= num_packs) return;  // the whole block
    const i64 pack = packs[blockIdx.x];
    const int rows_in_pack = (int)(packs[blockIdx.x + 1] - pack);
    if ((int)threadIdx.x < rows_in_pack) {
        const i64 row = rows[pack + threadIdx.x];
        const i64 first = indptr[row];
        const int begin = stage_offsets[pack + threadIdx.x];
        ids[threadIdx.x] = row;
        firsts[threadIdx.x] = first;
        begins[threadIdx.x] = begin;
        ends[threadIdx.x] = begin + (int)(indptr[row + 1] - first) * H;
    }
    __syncthreads();
    for (int r = 0; r < rows_in_pack; ++r) {
        const i64 base = firsts[r] * H;
        const int at = begins[r], width = ends[r] - at;
        stage_load<run_chunk_batch(ARRAYS)>(a + base, width, stage[0], at, threadIdx.x, BLOCK_THREADS);
        if (softmax_reads_grad(MODE))
            stage_load<run_chunk_batch(ARRAYS)>(g + base, width, stage[ARRAYS - 1], at, threadIdx.x, BLOCK_THREADS);
    }
    stage_wait();
    __syncthreads();
    const PackRows rows_at{begins, ends, ids};
    stage_softmax<MODE, true>(stage[0], stage[ARRAYS - 1], rows_at, rows_in_pack, H, threadIdx.x, BLOCK_THREADS,
                              lse_in, lse_out, spill);
    if (MODE == SOFTMAX_LSE) return;
    __syncthreads();
    for (int r = 0; r < rows_in_pack; ++r)
        stage_out(stage[0], begins[r], ends[r] - begins[r], out + firsts[r] * H, threadIdx.x, BLOCK_THREADS);
}

// Blocks per SM the staged kernels (softmax_runs, softmax_block_rows) are compiled for: their
// stage (BLOCK_WARPS * RUN_STAGE_BYTES, padded, and the rows' offsets) lets six blocks share an SM's
// 228 KB of shared memory (H100, H200). float32 fits six in registers too (40 per thread, no
// spills; 48 and so five blocks uncapped); float16 and float64 would spill (ptxas, sm_90).
// (A minimum of one block is not the same to ptxas as none: it changes float16's registers.)
#if CSR_DTYPE == 0
#define STAGE_LAUNCH_BOUNDS __launch_bounds__(BLOCK_THREADS, 6)
#else
#define STAGE_LAUNCH_BOUNDS __launch_bounds__(BLOCK_THREADS)
#endif

// softmax_rows, per mode: float32's forward holds six blocks per SM in 40 registers without
// spills (48, and five blocks, uncapped); capped, the other modes spill, and a minimum of one
// block raises their registers (ptxas, sm_90).
#if CSR_DTYPE == 0
#define ROWS_BOUNDS_forward __launch_bounds__(BLOCK_THREADS, 6)
#else
#define ROWS_BOUNDS_forward __launch_bounds__(BLOCK_THREADS)
#endif
#define ROWS_BOUNDS_lse __launch_bounds__(BLOCK_THREADS)
#define ROWS_BOUNDS_grad_probs __launch_bounds__(BLOCK_THREADS)
#define ROWS_BOUNDS_grad_scores __launch_bounds__(BLOCK_THREADS)

#define SOFTMAX_ENTRY_POINTS(MODE, NAME, G)                                                                     \
    extern "C" __global__ void ROWS_BOUNDS_##NAME                                                             \
        softmax_rows_##NAME(const i64* items, i64 num_items, i64 num_whole, int H, const scalar_t* a,         \
                            const G* g, const lse_t* lse_in, scalar_t* out, lse_t* lse_out,                 \
                            SoftmaxState* partial) {                                                          \
        softmax_rows<MODE>(items, num_items, num_whole, H, a, g, lse_in, out, lse_out, partial);             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                               \
        softmax_merge_##NAME(const i64* split_rows, i64 num_split, int H, const SoftmaxState* partial,       \
                             SoftmaxState* row_states, lse_t* lse_out) {                                      \
        softmax_merge<MODE>(split_rows, num_split, H, partial, row_states, lse_out);                         \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                               \
        softmax_write_##NAME(const i64* items, i64 num_items, i64 num_whole, int H, const scalar_t* a,        \
                             const G* g, const lse_t* lse_in, scalar_t* out,                                 \
                             const SoftmaxState* row_states) {                                                \
        softmax_write<MODE>(items, num_items, num_whole, H, a, g, lse_in, out, row_states);                  \
    }                                                                                                         \
    extern "C" __global__ void STAGE_LAUNCH_BOUNDS                                                            \
        softmax_runs_##NAME(const i64* runs, i64 num_runs, int R, i64 num_rows, int H, const i64* indptr,     \
                            const scalar_t* a, const scalar_t* g, const lse_t* lse_in, scalar_t* out,        \
                            lse_t* lse_out) {                                                                 \
        softmax_runs<MODE>(runs, num_runs, R, num_rows, H, indptr, a, g, lse_in, out, lse_out);              \
    }                                                                                                         \
    extern "C" __global__ void STAGE_LAUNCH_BOUNDS                                                            \
        softmax_block_rows_##NAME(const i64* rows, const int* stage_offsets, const i64* packs, i64 num_packs, \
                                  int H, const i64* indptr, const scalar_t* a, const scalar_t* g,            \
                                  const lse_t* lse_in, scalar_t* out, lse_t* lse_out) {                      \
        softmax_block_rows<MODE>(rows, stage_offsets, packs, num_packs, H, indptr, a, g, lse_in, out, lse_out); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                               \
        softmax_groups_##NAME(const i64* rows, i64 num_rows, int S, int K, int H, const i64* indptr,          \
                              const scalar_t* a, const G* g, const lse_t* lse_in, scalar_t* out, lse_t* lse_out) { \
        softmax_groups<MODE>(rows, num_rows, S, K, H, indptr, a, g, lse_in, out, lse_out);                    \
    }

// G: the type of g in the unstaged kernels (grad_t of the mode; the staged ones take scalar_t).
SOFTMAX_ENTRY_POINTS(SOFTMAX_FORWARD, forward, scalar_t)
SOFTMAX_ENTRY_POINTS(SOFTMAX_LSE, lse, scalar_t)
SOFTMAX_ENTRY_POINTS(SOFTMAX_GRAD_PROBS, grad_probs, scalar_t)
SOFTMAX_ENTRY_POINTS(SOFTMAX_GRAD_SCORES, grad_scores, acc_t)
