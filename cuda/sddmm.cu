// Per-edge dot products: out[e, h] = scale * <A[row(e), h, :], B[col(e), h, :]>.
//
// Mapping: one thread per (edge, head), looping over the D features; the threads of a warp
// cover consecutive (edge, head) pairs, whose feature rows are contiguous for one edge, so
// the loads of a warp fall in the same few cache lines. row_of_edge gives each edge's row.
// Bound: memory (the gathers of A and B rows).

#define BLOCK 256

extern "C" __global__ void __launch_bounds__(BLOCK)
    sddmm_dot(i64 num_edges, int H, int D, const idx_t* row_of_edge, const idx_t* indices,
              const scalar_t* A, const scalar_t* B, acc_t scale, scalar_t* out) {
    i64 pair = (i64)blockIdx.x * BLOCK + threadIdx.x;
    if (pair >= num_edges * H) return;
    i64 e = pair / H;
    int head = (int)(pair - e * H);
    const scalar_t* a = A + ((i64)row_of_edge[e] * H + head) * D;
    const scalar_t* b = B + ((i64)indices[e] * H + head) * D;
    acc_t sum = 0;
    for (int d = 0; d < D; ++d) sum += load_scalar(a + d) * load_scalar(b + d);
    store_scalar(out + pair, sum * scale);
}
