// Shared definitions for every kernel file. Each specialization is compiled from a small
// preamble of #defines followed by this header and one kernel file (see _kernels.py):
//   CSR_DTYPE   0 = float32, 1 = float64, 2 = float16 (stored as its bits, computed in fp32)
//   CSR_IDX     the type of the graph's column indices (int or long long)
// No system headers: NVRTC compiles these without the CUDA include directories.
#pragma once

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
#endif

// Loads through the read-only data cache: every kernel input is read-only for the launch
// (in-place updates read and write an element from the same thread only).
__device__ __forceinline__ acc_t load_scalar(const scalar_t* p) { return to_acc(__ldg(p)); }

// lse is float32 for float16 data, otherwise the data type: always acc_t.
typedef acc_t lse_t;

#define WARP 32
#define FULL_MASK 0xffffffffu

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
// float32 tolerance for the arguments that carry weight (x = s - max <= 0).
__device__ __forceinline__ acc_t exp_acc(acc_t x) { return exp2f(x * 1.4426950408889634f); }
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

// max that propagates NaN (fmax would drop it: a NaN score must poison its row).
__device__ __forceinline__ acc_t nan_max(acc_t a, acc_t b) {
    return (a != a || b != b) ? a + b : (a > b ? a : b);
}

__device__ __forceinline__ SoftmaxState merge_states(SoftmaxState a, SoftmaxState b) {
    // fmax would drop a NaN: a NaN score must poison its row, so compare explicitly.
    acc_t m = (a.m != a.m || b.m != b.m) ? a.m + b.m : (a.m > b.m ? a.m : b.m);
    SoftmaxState merged;
    merged.m = m;
    merged.l = a.l * rescale(a.m, m) + b.l * rescale(b.m, m);
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

// Loads VEC consecutive elements (VEC * sizeof(scalar_t) bytes, aligned by the launcher).
template <int VEC>
__device__ __forceinline__ void load_vec(const scalar_t* p, acc_t* v) {
    constexpr int BYTES = VEC * (int)sizeof(scalar_t);
    union {
        scalar_t s[VEC];
        unsigned char b[BYTES];
        int4 q4[BYTES >= 16 ? BYTES / 16 : 1];
        int2 q2[BYTES >= 8 ? BYTES / 8 : 1];
        int q1[BYTES >= 4 ? BYTES / 4 : 1];
    } u;
    if (BYTES % 16 == 0) {
#pragma unroll
        for (int i = 0; i < BYTES / 16; ++i) u.q4[i] = __ldg(reinterpret_cast<const int4*>(p) + i);
    } else if (BYTES == 8) {
        u.q2[0] = __ldg(reinterpret_cast<const int2*>(p));
    } else if (BYTES == 4) {
        u.q1[0] = __ldg(reinterpret_cast<const int*>(p));
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) u.s[i] = __ldg(p + i);
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_acc(u.s[i]);
}

// A work item of the per-graph plan: edges [begin, end) of one destination row, and
// the index of its split row (-1 when the item covers its whole row).
struct Item {
    i64 row;
    i64 begin;
    i64 end;
    i64 split;
};

__device__ __forceinline__ Item load_item(const i64* items, i64 index) {
    Item item;
    item.row = items[4 * index];
    item.begin = items[4 * index + 1];
    item.end = items[4 * index + 2];
    item.split = items[4 * index + 3];
    return item;
}
