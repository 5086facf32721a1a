// Device primitives behind LayerStep::window_scores and LayerStep::head_mlp (policy.h): the
// GQA reduction, row softmax, observation-window mean and 1-D pooling of SnapKV-family scores,
// and the second layer of the learned policies' head-wise MLPs. Each mirrors a host function of
// engine/policies/scoring.cpp (named at the launcher in kernels.h) in f32; only summation order
// differs, so scores agree to f32 rounding.
//
// gqa_max_rows_k: one thread per (j, i); window_col_reduce_k: one thread per older key i, loops
//   over the w window rows in order (as the host) and the G heads; softmax_rows_k: one block of
//   256 threads per row with warp-shuffle reductions; pool1d_k: one thread per output;
//   mlp_out_k: one warp per (row, head), lanes stride the hidden units, shuffle-sum.
#include <cuda_bf16.h>

#include <cfloat>

#include "engine/backend/cuda/block_reduce.cuh"
#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

__global__ void gqa_max_rows_k(const float* x, int G, int w, int L, int n, float* out) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(w) * n) return;
  const int j = static_cast<int>(idx / n), i = static_cast<int>(idx % n);
  float m = -INFINITY;
  for (int g = 0; g < G; ++g) m = fmaxf(m, x[(static_cast<int64_t>(g) * w + j) * L + i]);
  out[idx] = m;
}

__global__ void softmax_rows_k(float* x, int n) {
  __shared__ float red[32];
  float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, row[i]);
  mx = block_reduce(mx, red, true);
  if (mx == -INFINITY) {  // fully masked row: all zero (scoring::softmax_inplace)
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(row[i] - mx);
    row[i] = e;
    sum += e;
  }
  sum = block_reduce(sum, red, false);
  const float inv = 1.0f / sum;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] *= inv;
}

__global__ void window_col_reduce_k(const float* x, int64_t ld, int G, int w, int n, int mode, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc_all = 0.0f;
  for (int j = 0; j < w; ++j) {
    float acc = mode == 0 ? -INFINITY : 0.0f;
    for (int g = 0; g < G; ++g) {
      const float v = x[(static_cast<int64_t>(g) * w + j) * ld + i];
      acc = mode == 0 ? fmaxf(acc, v) : acc + v;
    }
    acc_all += mode == 0 ? acc : acc / G;
  }
  out[i] = acc_all / static_cast<float>(w);
}

__global__ void pool1d_k(const float* x, int n, int kernel, int type, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int pad = kernel / 2;
  const int lo = max(i - pad, 0), hi = min(i - pad + kernel, n);
  if (type == 1) {
    float m = -INFINITY;
    for (int j = lo; j < hi; ++j) m = fmaxf(m, x[j]);
    out[i] = m;
  } else {
    double s = 0;
    for (int j = lo; j < hi; ++j) s += x[j];
    out[i] = static_cast<float>(s / kernel);
  }
}

__global__ void bf16_to_f32_k(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

__device__ __forceinline__ float act_f(int act, float v) {
  if (act == 0) return v / (1.0f + expf(-v));
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void mlp_out_k(const float* hid, int rows, int hid_heads, int heads, int hidden, const float* b1,
                          const float* w2, const float* b2, bool shared, int head_sel, int act, float* out) {
  const int out_heads = head_sel >= 0 ? 1 : heads;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<int64_t>(rows) * out_heads) return;  // uniform per warp
  const int r = static_cast<int>(warp / out_heads), j = static_cast<int>(warp % out_heads);
  const int h = head_sel >= 0 ? head_sel : j;
  const int h1 = (shared || head_sel >= 0) ? 0 : h;
  const int hb = shared ? 0 : h;
  const float* hr = hid + (static_cast<int64_t>(r) * hid_heads + h1) * hidden;
  const float* bb = b1 + static_cast<int64_t>(hb) * hidden;
  const float* ww = w2 + static_cast<int64_t>(h) * hidden;
  float acc = 0.0f;
  for (int k = lane; k < hidden; k += 32) acc += ww[k] * act_f(act, hr[k] + bb[k]);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[warp] = b2[h] + acc;
}

int blocks(int64_t total, int threads) {
  const int64_t g = (total + threads - 1) / threads;
  return static_cast<int>(g < 1 ? 1 : (g > 2147483647LL ? 2147483647LL : g));
}

}  // namespace

void gqa_max_rows(const float* x, int G, int w, int L, int n, float* out, cudaStream_t s) {
  if (w <= 0 || n <= 0) return;
  gqa_max_rows_k<<<blocks(static_cast<int64_t>(w) * n, 256), 256, 0, s>>>(x, G, w, L, n, out);
  check_launch("gqa_max_rows");
}

void softmax_rows(float* x, int R, int n, cudaStream_t s) {
  if (R <= 0 || n <= 0) return;
  softmax_rows_k<<<R, 256, 0, s>>>(x, n);
  check_launch("softmax_rows");
}

void window_col_reduce(const float* x, int64_t ld, int G, int w, int n, int mode, float* out, cudaStream_t s) {
  if (n <= 0 || w <= 0) return;
  window_col_reduce_k<<<blocks(n, 256), 256, 0, s>>>(x, ld, G, w, n, mode, out);
  check_launch("window_col_reduce");
}

void pool1d(const float* x, int n, int kernel, int type, float* out, cudaStream_t s) {
  if (n <= 0) return;
  pool1d_k<<<blocks(n, 256), 256, 0, s>>>(x, n, kernel, type, out);
  check_launch("pool1d");
}

void bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t g = (n + 255) / 256;
  bf16_to_f32_k<<<static_cast<int>(g > 65535 * 8 ? 65535 * 8 : g), 256, 0, s>>>(x, y, n);
  check_launch("bf16_to_f32");
}

void mlp_out(const float* hid, int rows, int hid_heads, int heads, int hidden, const float* b1, const float* w2,
             const float* b2, bool shared, int head_sel, int act, float* out, cudaStream_t s) {
  const int64_t warps = static_cast<int64_t>(rows) * (head_sel >= 0 ? 1 : heads);
  if (warps <= 0) return;
  mlp_out_k<<<blocks(warps * 32, 256), 256, 0, s>>>(hid, rows, hid_heads, heads, hidden, b1, w2, b2, shared, head_sel,
                                                    act, out);
  check_launch("mlp_out");
}

}  // namespace kvb::cuda
