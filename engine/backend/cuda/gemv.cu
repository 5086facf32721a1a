// Skinny bf16 matrix products for decode steps: y[t, o] = β·y[t, o] + Σ_k W[o, k]·x[t, k] for at
// most 8 activation rows t, streaming each weight row once at full memory bandwidth.
//
// A decode step reads every weight once and does 2·T flops per weight (T = batch ≤ 8 here), so it
// is bound by memory bandwidth; cuBLAS's bf16 GEMM kernels with one or a few columns leave a part
// of it unused. Here one warp owns one output row: each lane loads 16 bytes (8 bf16) of the row
// per step, four steps in flight before the first use (cache-streaming loads: the weights are
// read once per step and should not evict the activations from L1), multiplies them with the same
// 8 elements of each of the T activation rows (read through L1: they are shared by every warp), and
// the warp sums its lanes at the end. f32 accumulation, as cuBLAS's CUBLAS_COMPUTE_32F.
#include <cuda_bf16.h>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

__device__ __forceinline__ void bf8(const uint4& u, float* f) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
  f[4] = __uint_as_float(u.z << 16);
  f[5] = __uint_as_float(u.z & 0xffff0000u);
  f[6] = __uint_as_float(u.w << 16);
  f[7] = __uint_as_float(u.w & 0xffff0000u);
}

template <int NT>
__global__ void __launch_bounds__(kWarps * 32) gemv_k(const uint16_t* __restrict__ W, const uint16_t* __restrict__ x,
                                                      float* __restrict__ y, int T, int in, int out, float beta) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= out) return;
  const uint4* w = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(row) * in);
  const int chunks = in / 8;  // 16-byte pieces of a row
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      wv[u] = c < chunks ? __ldcs(w + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c >= chunks) break;
      float wf[8];
      bf8(wv[u], wf);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= T) break;
        float xf[8];
        bf8(__ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * in) + c), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= T) break;
    float v = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      float* yp = y + static_cast<int64_t>(t) * out + row;
      *yp = beta != 0.0f ? v + beta * *yp : v;
    }
  }
}

}  // namespace

bool gemv_supported(int T, int in) { return T >= 1 && T <= 8 && in > 0 && in % 8 == 0; }

void gemv_bf16(const uint16_t* W, const uint16_t* x, float* y, int T, int in, int out, float beta, cudaStream_t s) {
  if (!gemv_supported(T, in) || out <= 0) raise_error("CUDA gemv: needs 1 <= T <= 8 rows and in % 8 == 0");
  const unsigned blocks = static_cast<unsigned>((out + kWarps - 1) / kWarps);
  if (T == 1) gemv_k<1><<<blocks, kWarps * 32, 0, s>>>(W, x, y, T, in, out, beta);
  else if (T == 2) gemv_k<2><<<blocks, kWarps * 32, 0, s>>>(W, x, y, T, in, out, beta);
  else if (T <= 4) gemv_k<4><<<blocks, kWarps * 32, 0, s>>>(W, x, y, T, in, out, beta);
  else gemv_k<8><<<blocks, kWarps * 32, 0, s>>>(W, x, y, T, in, out, beta);
  check_launch("gemv");
}

}  // namespace kvb::cuda
