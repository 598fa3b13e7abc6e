// Per-edge dot products: out[e, h] = scale * <A[row(e), h, :], B[col(e), h, :]>.
//
// Mapping: one thread per (edge, head), looping over the D features VEC at a time (16-byte
// loads where D and alignment allow, chosen by the launcher); the threads of a warp cover
// consecutive (edge, head) pairs, whose feature rows are contiguous for one edge, so the
// loads of a warp fall in the same few cache lines. row_of_edge gives each edge's row.
// No shared memory. Bound: memory (the gathers of A and B rows).

template <int VEC, class Out>
__device__ __forceinline__ void sddmm_dot(i64 num_edges, int H, int D, const idx_t* row_of_edge,
                                          const idx_t* indices, const scalar_t* A, const scalar_t* B, acc_t scale,
                                          Out* out) {
    i64 pair = grid_thread();
    if (pair >= num_edges * H) return;
    i64 e = pair / H;
    int head = (int)(pair - e * H);
    const scalar_t* a = A + ((i64)row_of_edge[e] * H + head) * D;
    const scalar_t* b = B + ((i64)indices[e] * H + head) * D;
    acc_t sum = 0;
#pragma unroll 4
    for (int d = 0; d < D; d += VEC) {
        acc_t x[VEC], y[VEC];
        load_vec<VEC>(a + d, x);
        load_vec<VEC>(b + d, y);
#pragma unroll
        for (int v = 0; v < VEC; ++v) sum += x[v] * y[v];
    }
    store_any(out + pair, sum * scale);
}

// sddmm_dot_acc_*: out in the accumulation type (attention_aggregate_backward's dot
// products, which its softmax gradient reads: float16 data's stay in float32).
#define SDDMM_DOT_ENTRY_POINT(VEC)                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                          \
        sddmm_dot_v##VEC(i64 num_edges, int H, int D, const idx_t* row_of_edge, const idx_t* indices,   \
                         const scalar_t* A, const scalar_t* B, acc_t scale, scalar_t* out) {             \
        sddmm_dot<VEC>(num_edges, H, D, row_of_edge, indices, A, B, scale, out);                        \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)                                          \
        sddmm_dot_acc_v##VEC(i64 num_edges, int H, int D, const idx_t* row_of_edge, const idx_t* indices, \
                             const scalar_t* A, const scalar_t* B, acc_t scale, acc_t* out) {            \
        sddmm_dot<VEC>(num_edges, H, D, row_of_edge, indices, A, B, scale, out);                        \
    }

SDDMM_DOT_ENTRY_POINT(1)
SDDMM_DOT_ENTRY_POINT(2)
SDDMM_DOT_ENTRY_POINT(4)

// "add" scores: out[e, h] = A[row(e), h] + B[col(e), h] (GAT's a_dst + a_src). One thread
// per (edge, head); consecutive threads write consecutive outputs. No shared memory.
// Bound: memory (the gathers of A and B, the write of out).
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    sddmm_add(i64 num_edges, int H, const idx_t* row_of_edge, const idx_t* indices, const scalar_t* A,
              const scalar_t* B, scalar_t* out) {
    i64 pair = grid_thread();
    if (pair >= num_edges * H) return;
    i64 e = pair / H;
    int head = (int)(pair - e * H);
    store_scalar(out + pair,
                 load_scalar(A + (i64)row_of_edge[e] * H + head) + load_scalar(B + (i64)indices[e] * H + head));
}

// Edge arrays moved into another edge order: out[e, h] = a[order[e], h] (edge_softmax by
// source gathers into the transpose's order and back). One thread per (edge, head); values
// are copied as they are. No shared memory. Bound: memory (one gather, one write).
extern "C" __global__ void __launch_bounds__(BLOCK_THREADS)
    gather_edges(i64 num_edges, int H, const idx_t* order, const scalar_t* a, scalar_t* out) {
    i64 pair = grid_thread();
    if (pair >= num_edges * H) return;
    i64 e = pair / H;
    int head = (int)(pair - e * H);
    out[pair] = a[(i64)order[e] * H + head];
}
