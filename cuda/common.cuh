// Shared definitions for every kernel file. Each specialization is compiled from a small
// preamble of #defines followed by this header and one kernel file (see gpu/kernels.py):
//   CSR_DTYPE    0 = float32, 1 = float64, 2 = float16 (stored as its bits, computed in fp32)
//   CSR_IDX      the type of the graph's column indices (int or long long)
//   BLOCK_WARPS  warps per block of every kernel (the launchers' block size / WARP)
//   RUN_STAGE_BYTES, MAX_RUN_ROWS  the shared memory per warp and the rows per run of
//                softmax_runs (softmax.cu)
//   MAX_BLOCK_ROWS  the rows per pack of softmax_block_rows (softmax.cu)
//   CACHED  the elements per lane softmax.cu's kernels hold in registers for a whole row
// No system headers: NVRTC compiles these without the CUDA include directories.
#pragma once

#if !defined(CSR_DTYPE) || !defined(CSR_IDX) || !defined(BLOCK_WARPS) || !defined(RUN_STAGE_BYTES) || \
    !defined(MAX_RUN_ROWS) || !defined(MAX_BLOCK_ROWS) || !defined(CACHED)
#error "the preamble (gpu/kernels.py) must define each constant listed above"
#endif
#if MAX_BLOCK_ROWS < 1 || MAX_BLOCK_ROWS > BLOCK_WARPS * 32
#error "MAX_BLOCK_ROWS must be 1 to BLOCK_WARPS * 32 (a pack's rows are read by one thread each)"
#endif
#if BLOCK_WARPS < 1 || BLOCK_WARPS > 32
#error "BLOCK_WARPS must be 1 to 32 (a block holds at most 1024 threads)"
#endif

typedef long long i64;
typedef CSR_IDX idx_t;

#if CSR_DTYPE == 0
typedef float scalar_t;
typedef float acc_t;
__device__ __forceinline__ acc_t to_acc(scalar_t v) { return v; }
__device__ __forceinline__ void store_scalar(scalar_t* p, acc_t v) { *p = v; }
#elif CSR_DTYPE == 1
typedef double scalar_t;
typedef double acc_t;
__device__ __forceinline__ acc_t to_acc(scalar_t v) { return v; }
__device__ __forceinline__ void store_scalar(scalar_t* p, acc_t v) { *p = v; }
#elif CSR_DTYPE == 2
typedef unsigned short scalar_t;  // IEEE binary16 bits
typedef float acc_t;
__device__ __forceinline__ acc_t to_acc(scalar_t bits) {
    float value;
    asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
    return value;
}
__device__ __forceinline__ void store_scalar(scalar_t* p, acc_t v) {
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(v));
    *p = bits;
}
#else
#error "CSR_DTYPE must be 0 (float32), 1 (float64) or 2 (float16)"
#endif

// Loads through the read-only data cache: every kernel input is read-only for the launch
// (in-place updates read and write an element from the same thread only).
__device__ __forceinline__ acc_t load_scalar(const scalar_t* p) { return to_acc(__ldg(p)); }

// lse is float32 for float16 data, otherwise the data type: always acc_t.
typedef acc_t lse_t;

// Elements of either the data type or, for arrays a kernel keeps for another in the
// accumulation type (float16 data's dot products, summed in float32 and not rounded to
// float16 between the two), acc_t: the same type but for float16.
__device__ __forceinline__ acc_t load_any(const scalar_t* p) { return load_scalar(p); }
__device__ __forceinline__ void store_any(scalar_t* p, acc_t v) { store_scalar(p, v); }
#if CSR_DTYPE == 2
__device__ __forceinline__ acc_t load_any(const acc_t* p) { return __ldg(p); }
__device__ __forceinline__ void store_any(acc_t* p, acc_t v) { *p = v; }
#endif

#define WARP 32
#define FULL_MASK 0xffffffffu
#define BLOCK_THREADS (BLOCK_WARPS * WARP)  // threads per block of every kernel

__device__ __forceinline__ acc_t neg_inf() {
#if CSR_DTYPE == 1
    return __longlong_as_double(0xfff0000000000000ll);
#else
    return __int_as_float(0xff800000);
#endif
}

#if CSR_DTYPE == 1
__device__ __forceinline__ acc_t exp_acc(acc_t x) { return exp(x); }
#else
// One multiply and the hardware exp2: relative error about |x| * 6e-8, far inside the
// float32 tolerance for the arguments that carry weight (x = s - max <= 0). Results below
// 2^-126 flush to zero (ex2.approx.ftz, one instruction; exp2f wraps the same instruction in
// a range check and two multiplies to keep them): a weight that small against its row's
// largest (which weighs 1) changes no float32 sum, and its probability becomes exactly 0
// instead of a denormal.
__device__ __forceinline__ acc_t exp_acc(acc_t x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}
#endif
__device__ __forceinline__ acc_t log_acc(acc_t x) { return log(x); }

// Online-softmax state of one head: running max m and running sum l of exp(s - m).
// A state whose max is -inf holds no weight; merging keeps it exact and order-fixed.
struct SoftmaxState {
    acc_t m;
    acc_t l;
};

__device__ __forceinline__ SoftmaxState empty_state() {
    SoftmaxState state;
    state.m = neg_inf();
    state.l = 0;
    return state;
}

// Scale factor exp(m_old - m_new) that takes a sum relative to m_old to one relative to
// m_new; 0 when m_old is -inf (nothing to carry), 1 when both are -inf.
__device__ __forceinline__ acc_t rescale(acc_t m_old, acc_t m_new) {
    if (m_old == m_new) return 1;  // also both -inf (and keeps a NaN max from turning into 0)
    return exp_acc(m_old - m_new);
}

// The weight exp(score - m) of a score under the running max m (m >= score): 0 for a -inf
// score; NaN for a +inf score (m is then +inf too), which makes its row and head NaN as a
// softmax does (rescale(score, m) would give 1 there).
__device__ __forceinline__ acc_t score_weight(acc_t score, acc_t m) {
    return score == neg_inf() ? (acc_t)0 : exp_acc(score - m);
}

// exp(x - shift) of a score x in a row whose shift is 0 where the row's max is -inf, so that a
// -inf score weighs exp(-inf) = 0. float32 needs no test (ex2.approx of -inf is 0); float64
// keeps it: its exp is a long inline sequence, and without the test the staged kernels' groups
// of exps took more registers and spilled (ptxas, sm_90: softmax_runs_forward 46 -> 64
// registers with 16 bytes spilled, softmax_rows_forward 56 -> 74), and float64 edge_softmax
// ran 1.24x slower on an R-MAT graph (H200).
__device__ __forceinline__ acc_t shifted_exp(acc_t x, acc_t shift) {
#if CSR_DTYPE == 1
    return score_weight(x, shift);
#else
    return exp_acc(x - shift);
#endif
}

// The shift of a row (and head) whose max is m, for shifted_exp: m, or 0 where m is -inf, so
// that a -inf score (or an absent element) weighs exp(-inf) = 0, not exp(NaN). A NaN or +inf
// max stays, and makes the row NaN.
__device__ __forceinline__ acc_t row_shift(acc_t m) { return m == neg_inf() ? (acc_t)0 : m; }

// max that propagates NaN (fmax would drop it: a NaN score must poison its row). float32 on
// sm_80 and later: max.NaN, one instruction for the compare-and-select of the generic form.
__device__ __forceinline__ acc_t nan_max(acc_t a, acc_t b) {
#if CSR_DTYPE != 1 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float m;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
    return m;
#else
    return (a != a || b != b) ? a + b : (a > b ? a : b);
#endif
}

__device__ __forceinline__ SoftmaxState merge_states(SoftmaxState a, SoftmaxState b) {
    SoftmaxState merged;
    merged.m = nan_max(a.m, b.m);
    merged.l = a.l * rescale(a.m, merged.m) + b.l * rescale(b.m, merged.m);
    return merged;
}

__device__ __forceinline__ SoftmaxState add_score(SoftmaxState a, acc_t score) {
    SoftmaxState single;
    single.m = score;
    single.l = (score == neg_inf()) ? 0 : 1;
    return merge_states(a, single);
}

// Log-sum-exp of a row state: -inf when the row holds no weight (empty or all -inf).
__device__ __forceinline__ acc_t state_lse(SoftmaxState s) {
    if (s.l == 0) return neg_inf();
    if (s.m == -neg_inf()) return s.m - s.m;  // a +inf score: NaN, as its row's weights are
    return s.m + log_acc(s.l);
}

// leaky_relu(z) and its derivative: 1 for z > 0, the slope otherwise (also at exactly 0, as
// on the CPU).
__device__ __forceinline__ acc_t leaky(acc_t z, acc_t slope) { return z > 0 ? z : slope * z; }
__device__ __forceinline__ acc_t leaky_grad(acc_t z, acc_t slope) { return z > 0 ? (acc_t)1 : slope; }

// exp(score - lse) with rows of lse -inf at zero weight.
__device__ __forceinline__ acc_t prob_from_lse(acc_t score, acc_t lse) {
    if (lse == neg_inf()) return 0;
    return exp_acc(score - lse);
}

// The softmax weight of one score given its row's merged state. Computed from (m, l)
// rather than from lse = m + log(l): rounding lse to the data type would cost precision
// when the scores are large.
__device__ __forceinline__ acc_t prob_from_state(acc_t score, SoftmaxState s) {
    if (s.l == 0) return 0;
    if (s.m == -neg_inf()) return s.m - s.m;  // a +inf score: NaN for the whole row and head
    return exp_acc(score - s.m) / s.l;
}

// N elements of rows held in registers from their load to their use. float16 keeps them as
// loaded, two to a 32-bit word (half the registers of acc_t copies), and x[i] converts
// element i (i a constant once unrolled: a register read, at most a shift and a cvt); the
// other types hold acc_t values, as loaded.
#if CSR_DTYPE == 2
template <int N>
struct Packed {
    static constexpr int WORDS = (N + 1) / 2;
    unsigned int w[WORDS];
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int k = 0; k < WORDS; ++k) w[k] = 0;
    }
    __device__ __forceinline__ acc_t operator[](int i) const {
        return to_acc((unsigned short)(w[i / 2] >> (16 * (i % 2))));
    }
    // Stores value as element i, rounded to float16.
    __device__ __forceinline__ void put(int i, acc_t value) {
        unsigned short bits;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
        const int shift = 16 * (i % 2);
        w[i / 2] = (w[i / 2] & ~(0xffffu << shift)) | ((unsigned int)bits << shift);
    }
    __device__ __forceinline__ void set_word(int k, unsigned int bits) {
        if (k < WORDS) w[k] = bits;  // k is a constant: out of range only in branches never taken
    }
};
#else
template <int N>
struct Packed {
    acc_t v[N];
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = 0;
    }
    __device__ __forceinline__ acc_t operator[](int i) const { return v[i]; }
    __device__ __forceinline__ void put(int i, acc_t value) { v[i] = value; }
};
#endif

// VEC elements as the words of one load or store of 4, 8 or 16 bytes (or several of 16).
template <int VEC>
union VecBytes {
    static constexpr int BYTES = VEC * (int)sizeof(scalar_t);
    scalar_t s[VEC];
    int4 q4[BYTES >= 16 ? BYTES / 16 : 1];
    int2 q2[BYTES >= 8 ? BYTES / 8 : 1];
    int q1[BYTES >= 4 ? BYTES / 4 : 1];
};

// Loads VEC consecutive elements (VEC * sizeof(scalar_t) bytes, aligned by the launcher) into
// elements [at, at + VEC) of x (at a multiple of VEC; float16 with VEC = 1 fills half a word,
// which must be zero before).
template <int VEC, int N>
__device__ __forceinline__ void load_packed(const scalar_t* p, Packed<N>& x, int at) {
    constexpr int BYTES = VEC * (int)sizeof(scalar_t);
#if CSR_DTYPE == 2
    const int word = at / 2;
    if (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) {
            const int4 q = __ldg(reinterpret_cast<const int4*>(p) + i);
            x.set_word(word + 4 * i, q.x);
            x.set_word(word + 4 * i + 1, q.y);
            x.set_word(word + 4 * i + 2, q.z);
            x.set_word(word + 4 * i + 3, q.w);
        }
    } else if (BYTES == 8) {
        const int2 q = __ldg(reinterpret_cast<const int2*>(p));
        x.set_word(word, q.x);
        x.set_word(word + 1, q.y);
    } else if (BYTES == 4) {
        x.set_word(word, __ldg(reinterpret_cast<const int*>(p)));
    } else {  // VEC = 1: half a word
        x.set_word(word, x.w[word % Packed<N>::WORDS] | (unsigned int)__ldg(p) << (16 * (at % 2)));
    }
#else
    VecBytes<VEC> u;
    if (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) u.q4[i] = __ldg(reinterpret_cast<const int4*>(p) + i);
    } else if (BYTES == 8) {
        u.q2[0] = __ldg(reinterpret_cast<const int2*>(p));
    } else {
        u.q1[0] = __ldg(reinterpret_cast<const int*>(p));
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) x.put(at + i, u.s[i]);
#endif
}

// Loads VEC consecutive elements (as load_packed) and converts them.
template <int VEC>
__device__ __forceinline__ void load_vec(const scalar_t* p, acc_t* v) {
    Packed<VEC> x;
    x.clear();
    load_packed<VEC>(p, x, 0);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = x[i];
}

// Stores v[i] * scale_by, rounded to the data type as store_scalar rounds it, as VEC
// consecutive elements at p (VEC * sizeof(scalar_t) bytes, aligned by the launcher as for
// load_packed): one store of 4, 8 or 16 bytes, or several of 16, instead of VEC narrow ones
// (a warp's narrow stores to rows of a head each touch every sector of the rows).
template <int VEC>
__device__ __forceinline__ void store_vec(scalar_t* p, const acc_t* v, acc_t scale_by) {
    constexpr int BYTES = VEC * (int)sizeof(scalar_t);
#if CSR_DTYPE == 2
    if (VEC == 1) {
        store_scalar(p, v[0] * scale_by);
        return;
    }
    Packed<VEC> x;
    x.clear();
#pragma unroll
    for (int i = 0; i < VEC; ++i) x.put(i, v[i] * scale_by);
    // Word k of x; k is a constant, past the words only in the branches this VEC never takes.
    const auto word = [&](int k) { return (int)x.w[k % Packed<VEC>::WORDS]; };
    if (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) {
            reinterpret_cast<int4*>(p)[i] = make_int4(word(4 * i), word(4 * i + 1), word(4 * i + 2), word(4 * i + 3));
        }
    } else if (BYTES == 8) {
        *reinterpret_cast<int2*>(p) = make_int2(word(0), word(1));
    } else {
        *reinterpret_cast<int*>(p) = x.w[0];
    }
#else
    VecBytes<VEC> u;
#pragma unroll
    for (int i = 0; i < VEC; ++i) u.s[i] = v[i] * scale_by;
    if (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) reinterpret_cast<int4*>(p)[i] = u.q4[i];
    } else if (BYTES == 8) {
        *reinterpret_cast<int2*>(p) = u.q2[0];
    } else {
        *reinterpret_cast<int*>(p) = u.q1[0];
    }
#endif
}

// ---- Work of one warp (the prologue of every warp-per-item kernel) ----

__device__ __forceinline__ int lane_id() { return threadIdx.x % WARP; }

// Warps and threads of the grid in order: warp w of block b is warp b * BLOCK_WARPS + w.
__device__ __forceinline__ i64 grid_warp() { return (i64)blockIdx.x * BLOCK_WARPS + threadIdx.x / WARP; }
__device__ __forceinline__ i64 grid_thread() { return (i64)blockIdx.x * BLOCK_THREADS + threadIdx.x; }

// A work item of the per-graph plan: edges [begin, end) of one destination row, and
// the index of its split row (-1 when the item covers its whole row).
struct Item {
    i64 row;
    i64 begin;
    i64 end;
    i64 split;
};

// A row split over several items: its partial states are items [first, first + count) of
// the split items (indices from num_whole on).
struct SplitRow {
    i64 row;
    i64 first;
    i64 count;
};

// Warp grid_warp() takes entry first + grid_warp() of a work list of `count` entries, and
// has nothing to do past its end. The answer is the same for every lane of the warp, so a
// warp returns whole and the full-warp shuffles of the others stay valid.
__device__ __forceinline__ bool warp_entry(i64 first, i64 count, i64& index) {
    index = first + grid_warp();
    return index < count;
}

// Plan item items[index] (items holds (row, begin, end, split) rows); warp_item: this warp's,
// for entries [first, num_items) of the plan, false when the warp has none.
__device__ __forceinline__ Item plan_item(const i64* items, i64 index) {
    Item item;
    item.row = items[4 * index];
    item.begin = items[4 * index + 1];
    item.end = items[4 * index + 2];
    item.split = items[4 * index + 3];
    return item;
}

__device__ __forceinline__ bool warp_item(const i64* items, i64 first, i64 num_items, i64& index, Item& item) {
    if (!warp_entry(first, num_items, index)) return false;
    item = plan_item(items, index);
    return true;
}

// This warp's split row, split_rows[index] (split_rows holds (row, first, count) rows);
// false when the warp has none.
__device__ __forceinline__ bool warp_split_row(const i64* split_rows, i64 num_split, i64& index, SplitRow& split) {
    if (!warp_entry(0, num_split, index)) return false;
    split.row = split_rows[3 * index];
    split.first = split_rows[3 * index + 1];
    split.count = split_rows[3 * index + 2];
    return true;
}

// ---- Reductions across the lanes of a warp, by shuffles ----
//
// Layout: the warp holds G heads side by side, lane = k * G + h for head h < G and slot
// k < R = WARP / G; the WARP % G lanes from G * R on belong to no head (their values are
// never read). Every lane of the warp must call these (full-mask shuffles), with the same
// G. Each reduction runs in a fixed order, so results are identical run to run; Max keeps
// NaN (a NaN score poisons its row and head).

struct Max {
    __device__ __forceinline__ acc_t operator()(acc_t a, acc_t b) const { return nan_max(a, b); }
};
struct Sum {
    __device__ __forceinline__ acc_t operator()(acc_t a, acc_t b) const { return a + b; }
};
struct MergeStates {
    __device__ __forceinline__ SoftmaxState operator()(SoftmaxState a, SoftmaxState b) const {
        return merge_states(a, b);
    }
};

struct HeadLanes {
    int G;  // heads side by side
    int R;  // lanes per head, WARP / G
    int h;  // this lane's head, lane % G
    int k;  // this lane's slot in its head, lane / G (R or more: a lane of no head)
};

__device__ __forceinline__ HeadLanes head_lanes(int G) {
    HeadLanes lanes;
    int lane = lane_id();
    lanes.G = G;
    lanes.R = WARP / G;
    lanes.h = lane % G;
    lanes.k = lane / G;
    return lanes;
}

__device__ __forceinline__ acc_t shfl_down(acc_t x, int delta) { return __shfl_down_sync(FULL_MASK, x, delta); }
__device__ __forceinline__ SoftmaxState shfl_down(SoftmaxState s, int delta) {
    s.m = __shfl_down_sync(FULL_MASK, s.m, delta);
    s.l = __shfl_down_sync(FULL_MASK, s.l, delta);
    return s;
}
__device__ __forceinline__ acc_t shfl_from(acc_t x, int lane) { return __shfl_sync(FULL_MASK, x, lane); }
__device__ __forceinline__ SoftmaxState shfl_from(SoftmaxState s, int lane) {
    s.m = __shfl_sync(FULL_MASK, s.m, lane);
    s.l = __shfl_sync(FULL_MASK, s.l, lane);
    return s;
}
__device__ __forceinline__ acc_t shfl_xor(acc_t x, int mask) { return __shfl_xor_sync(FULL_MASK, x, mask); }

// op over the R lanes of each head, into its slot 0 (lane h); the other lanes end with
// partial results. A tree: after the step of offset o, slot k holds op over slots
// [k, min(k + 2o, R)), so any R works. x is T = acc_t or SoftmaxState, op one of the above.
template <class T, class Op>
__device__ __forceinline__ T head_reduce_to_leader(T x, Op op, HeadLanes lanes) {
    for (int offset = 1; offset < lanes.R; offset <<= 1) {
        T other = shfl_down(x, offset * lanes.G);
        if (lanes.k + offset < lanes.R) x = op(x, other);
    }
    return x;
}

// The same, then broadcast: every lane (a lane of no head too) gets its head's result.
template <class T, class Op>
__device__ __forceinline__ T head_reduce_to_all(T x, Op op, HeadLanes lanes) {
    return shfl_from(head_reduce_to_leader(x, op, lanes), lanes.h);
}

// op over the lanes of each head inside each aligned span of `span` lanes (G and span
// powers of two, G <= span <= WARP), by an xor butterfly: every lane ends with the result
// of its head in its span, without a broadcast. Partners compute op(a, b) and op(b, a):
// equal for Sum; for Max up to the sign of a zero or which NaN, neither of which changes
// a weight, so the lanes of a head agree.
template <class Op>
__device__ __forceinline__ acc_t span_allreduce(acc_t x, Op op, int G, int span) {
    for (int offset = span / 2; offset >= G; offset /= 2) x = op(x, shfl_xor(x, offset));
    return x;
}
