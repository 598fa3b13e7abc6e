"""The simplest GPU kernels for edge softmax, attention aggregation and spmm: the baseline
every benchmark keeps beside the library, float32 only.

- edge softmax: one thread per (row, head) walks its row three times (max, sum, write),
  with stride H; blocks of (H, 4) threads.
- attention aggregation: one block per destination row with one thread per (feature,
  head); the row's softmax weights in shared memory sized by the largest degree (known on
  the host), then each thread loops over the row's edges. It cannot run once the largest
  row needs more than 48 KiB of shared memory (about 12k edges per head): ``None`` then.
- spmm: one block per destination row, one thread per (feature, head), looping over edges.
"""

import functools

import numpy as np

from cupy_csrattn import backend

_SOURCE = r"""
#define INFINITY __int_as_float(0x7f800000)

extern "C" __global__ void simple_softmax(const long long* indptr, const float* s, float* p, int N, int H) {
    int row = blockIdx.x * blockDim.y + threadIdx.y, h = threadIdx.x;
    if (row >= N) return;
    long long begin = indptr[row], end = indptr[row + 1];
    float m = -INFINITY, sum = 0.f;
    for (long long e = begin; e < end; ++e) m = fmaxf(m, s[e * H + h]);
    for (long long e = begin; e < end; ++e) sum += expf(s[e * H + h] - m);
    for (long long e = begin; e < end; ++e) p[e * H + h] = m == -INFINITY ? 0.f : expf(s[e * H + h] - m) / sum;
}

extern "C" __global__ void simple_aggregate(const long long* indptr, const long long* indices, const float* s,
                                            const float* v, float* out, int H, int F) {
    extern __shared__ float shared[];  // H * blockDim.x reduction slots, then the row's weights
    float* red = shared;
    float* w = shared + H * F;
    int row = blockIdx.x, f = threadIdx.x, h = threadIdx.y, t = h * F + f;
    long long begin = indptr[row], degree = indptr[row + 1] - begin;
    float m = -INFINITY;
    for (long long i = f; i < degree; i += F) m = fmaxf(m, s[(begin + i) * H + h]);
    red[t] = m;
    __syncthreads();
    m = -INFINITY;
    for (int j = 0; j < F; ++j) m = fmaxf(m, red[h * F + j]);
    __syncthreads();
    float sum = 0.f;
    for (long long i = f; i < degree; i += F) {
        float x = m == -INFINITY ? 0.f : expf(s[(begin + i) * H + h] - m);
        w[i * H + h] = x;
        sum += x;
    }
    red[t] = sum;
    __syncthreads();
    sum = 0.f;
    for (int j = 0; j < F; ++j) sum += red[h * F + j];
    float acc = 0.f;
    for (long long i = 0; i < degree; ++i) acc += w[i * H + h] * v[(indices[begin + i] * H + h) * F + f];
    out[((long long)row * H + h) * F + f] = sum > 0.f ? acc / sum : 0.f;
}

extern "C" __global__ void simple_spmm(const long long* indptr, const long long* indices, const float* w,
                                       const float* v, float* out, int H, int F) {
    int row = blockIdx.x, f = threadIdx.x, h = threadIdx.y;
    float acc = 0.f;
    for (long long e = indptr[row]; e < indptr[row + 1]; ++e) acc += w[e * H + h] * v[(indices[e] * H + h) * F + f];
    out[((long long)row * H + h) * F + f] = acc;
}
"""

MAX_SHARED_BYTES = 48 * 1024


@functools.lru_cache(maxsize=None)
def _module(device_id):
    return backend.cupy.RawModule(code=_SOURCE)


def _kernel(name):
    return _module(backend.cupy.cuda.runtime.getDevice()).get_function(name)


class SimpleKernels:
    """The simple kernels on one GPU graph (int64 structure arrays, largest degree known)."""

    def __init__(self, graph):
        cupy = backend.cupy
        self.indptr = cupy.asarray(graph.indptr, dtype=np.int64)
        self.indices = cupy.asarray(graph.indices, dtype=np.int64)
        self.num_dst = graph.num_dst
        self.max_degree = int(cupy.diff(self.indptr).max()) if graph.num_dst else 0  # host sync, once

    def softmax(self, scores):
        """(E, H) float32 probabilities."""
        H = scores.shape[1]
        out = backend.cupy.empty_like(scores)
        grid = ((self.num_dst + 3) // 4,)
        _kernel("simple_softmax")(grid, (H, 4), (self.indptr, scores, out, np.int32(self.num_dst), np.int32(H)))
        return out

    def aggregate_shared_bytes(self, H, F):
        return 4 * H * (F + self.max_degree)

    def aggregate(self, scores, values):
        """(N, H, F) softmax-weighted sums, or None when the largest row does not fit in shared memory."""
        H, F = values.shape[1], values.shape[2]
        shared = self.aggregate_shared_bytes(H, F)
        if shared > MAX_SHARED_BYTES or H * F > 1024:
            return None
        out = backend.cupy.empty((self.num_dst, H, F), np.float32)
        args = (self.indptr, self.indices, scores, values, out, np.int32(H), np.int32(F))
        _kernel("simple_aggregate")((self.num_dst,), (F, H), args, shared_mem=shared)
        return out

    def spmm(self, weights, values):
        """(N, H, F) weighted sums, or None when a block cannot hold H * F threads."""
        H, F = values.shape[1], values.shape[2]
        if H * F > 1024:
            return None
        out = backend.cupy.empty((self.num_dst, H, F), np.float32)
        args = (self.indptr, self.indices, weights, values, out, np.int32(H), np.int32(F))
        _kernel("simple_spmm")((self.num_dst,), (F, H), args)
        return out
