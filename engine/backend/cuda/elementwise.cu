// Elementwise and row kernels of the CUDA backend: embedding gather (optionally scaled, Gemma 2's
// √H), RMSNorm to bf16, RMSNorm added to the residual (Gemma 2's post-attention / post-MLP norms),
// bias add, Qwen3 q/k norm + RoPE, KV-pool append, SiLU·mul and GeLU-tanh·mul, logit soft-capping,
// f32→bf16 and a 16-byte copy (roofline).
//
// Shapes (T tokens of the step, H hidden, D head_dim, I intermediate): embed [V,H] bf16 → [T,H] f32;
// rmsnorm one block per row; qk_norm_rope one warp per (token, head) of q and k (D ≤ 1024, even);
// kv_append one thread per 8 elements (D % 8 == 0). All math in f32; bf16 only at storage.
#include <cuda_bf16.h>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

__device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ uint16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

__global__ void embed_k(const int32_t* tok, const uint16_t* table, float* x, int H, float scale) {
  const int t = blockIdx.x;
  const uint16_t* row = table + static_cast<int64_t>(tok[t]) * H;
  if (scale == 1.0f) {
    for (int i = threadIdx.x; i < H; i += blockDim.x) x[static_cast<int64_t>(t) * H + i] = bf(row[i]);
  } else {
    for (int i = threadIdx.x; i < H; i += blockDim.x) x[static_cast<int64_t>(t) * H + i] = bf(row[i]) * scale;
  }
}

__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) red[w] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) / 32;
  v = (threadIdx.x < nw) ? red[threadIdx.x] : 0.0f;
  if (w == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) red[0] = v;
  __syncthreads();
  return red[0];
}

__global__ void rmsnorm_k(const float* x, int64_t ldx, const float* w, uint16_t* y, int n, float eps) {
  __shared__ float red[32];
  const float* r = x + blockIdx.x * ldx;
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += r[i] * r[i];
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  uint16_t* o = y + static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = to_bf(w[i] * (r[i] * inv));
}

__global__ void rmsnorm_add_k(const float* y, const float* w, float* x, int n, float eps) {
  __shared__ float red[32];
  const float* r = y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += r[i] * r[i];
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  float* o = x + static_cast<int64_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] += w[i] * (r[i] * inv);
}

__global__ void add_bias_k(float* y, const float* b, int64_t total, int n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += b[i % n];
}

// One warp per (token, head) over q heads then k heads.
__global__ void qk_norm_rope_k(float* qkv, int T, int Hq, int Hkv, int D, const int32_t* pos, const float* qn,
                               const float* kn, float eps, const float* inv_freq, float mscale, float* k_pre,
                               float* q_pre) {
  const int64_t gw = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int heads = Hq + Hkv;
  if (gw >= static_cast<int64_t>(T) * heads) return;
  const int t = static_cast<int>(gw / heads), hh = static_cast<int>(gw % heads);
  const bool is_k = hh >= Hq;
  const int64_t stride = static_cast<int64_t>(Hq + 2 * Hkv) * D;
  float* v = qkv + t * stride + static_cast<int64_t>(hh) * D;  // k heads follow q heads
  const float* nw = is_k ? kn : qn;
  if (nw) {
    float ss = 0;
    for (int i = lane; i < D; i += 32) ss += v[i] * v[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    __syncwarp();
    for (int i = lane; i < D; i += 32) v[i] = nw[i] * (v[i] * inv);
    __syncwarp();
  }
  if (is_k && k_pre) {
    float* kp = k_pre + (static_cast<int64_t>(t) * Hkv + (hh - Hq)) * D;
    for (int i = lane; i < D; i += 32) kp[i] = v[i];
  }
  if (!is_k && q_pre) {
    float* qp = q_pre + (static_cast<int64_t>(t) * Hq + hh) * D;
    for (int i = lane; i < D; i += 32) qp[i] = v[i];
  }
  __syncwarp();  // k_pre / q_pre read v before RoPE rewrites other lanes' elements
  const int half = D / 2;
  const float p = static_cast<float>(pos[t]);
  for (int i = lane; i < half; i += 32) {
    const float ang = p * inv_freq[i];
    double sd, cd;
    sincos(static_cast<double>(ang), &sd, &cd);
    const float c = static_cast<float>(cd) * mscale, s = static_cast<float>(sd) * mscale;
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

__global__ void kv_append_k(const float* qkv, int T, int Hq, int Hkv, int D, const int64_t* dst, const int32_t* pos,
                            uint16_t* k_pool, uint16_t* v_pool, int32_t* pos_pool) {
  const int chunks = D / 8;
  const int64_t total = static_cast<int64_t>(T) * Hkv * chunks;
  const int64_t stride = static_cast<int64_t>(Hq + 2 * Hkv) * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % chunks);
    const int64_t th = i / chunks;  // t * Hkv + h
    const int t = static_cast<int>(th / Hkv), h = static_cast<int>(th % Hkv);
    const float* k = qkv + t * stride + static_cast<int64_t>(Hq + h) * D + c * 8;
    const float* v = k + static_cast<int64_t>(Hkv) * D;
    const int64_t slot = dst[th];
    alignas(16) uint16_t kb[8], vb[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      kb[j] = to_bf(k[j]);
      vb[j] = to_bf(v[j]);
    }
    *reinterpret_cast<uint4*>(k_pool + slot * D + c * 8) = *reinterpret_cast<const uint4*>(kb);
    *reinterpret_cast<uint4*>(v_pool + slot * D + c * 8) = *reinterpret_cast<const uint4*>(vb);
    if (c == 0) pos_pool[slot] = pos[t];
  }
}

__global__ void silu_mul_k(const float* gu, uint16_t* out, int64_t total, int I) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / I, j = i % I;
    const float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
    out[i] = to_bf(g / (1.0f + expf(-g)) * u);
  }
}

// torch's gelu(approximate="tanh") of the gate times the up projection, as the CPU backend
// (forward.cpp gated_activation): 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))·u in f32.
__global__ void gelu_tanh_mul_k(const float* gu, uint16_t* out, int64_t total, int I) {
  constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / I, j = i % I;
    const float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
    out[i] = to_bf(0.5f * g * (1.0f + tanhf(kBeta * (g + kKappa * g * g * g))) * u);
  }
}

__global__ void soft_cap_k(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = tanhf(x[i] / cap) * cap;
}

__global__ void to_bf16_k(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = to_bf(x[i]);
}

__global__ void copy16_k(const uint4* src, uint4* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

int grid_for(int64_t total, int threads) {
  const int64_t g = (total + threads - 1) / threads;
  return static_cast<int>(g < 1 ? 1 : (g > 65535 * 8 ? 65535 * 8 : g));
}

}  // namespace

void embed(const int32_t* tok, const uint16_t* table, float* x, int T, int H, cudaStream_t s, float scale) {
  if (T == 0) return;
  embed_k<<<T, 256, 0, s>>>(tok, table, x, H, scale);
  check_launch("embed");
}

void rmsnorm_bf16(const float* x, int64_t ldx, const float* w, uint16_t* y, int T, int n, float eps, cudaStream_t s) {
  if (T == 0) return;
  rmsnorm_k<<<T, 256, 0, s>>>(x, ldx, w, y, n, eps);
  check_launch("rmsnorm");
}

void rmsnorm_add(const float* y, const float* w, float* x, int T, int n, float eps, cudaStream_t s) {
  if (T == 0) return;
  rmsnorm_add_k<<<T, 256, 0, s>>>(y, w, x, n, eps);
  check_launch("rmsnorm_add");
}

void add_bias(float* y, const float* b, int T, int n, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(T) * n;
  if (total == 0) return;
  add_bias_k<<<grid_for(total, 256), 256, 0, s>>>(y, b, total, n);
  check_launch("add_bias");
}

void qk_norm_rope(float* qkv, int T, int Hq, int Hkv, int D, const int32_t* pos, const float* qn, const float* kn,
                  float eps, const float* inv_freq, float mscale, float* k_pre, cudaStream_t s, float* q_pre) {
  const int64_t warps = static_cast<int64_t>(T) * (Hq + Hkv);
  if (warps == 0) return;
  qk_norm_rope_k<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, s>>>(qkv, T, Hq, Hkv, D, pos, qn, kn, eps,
                                                                                 inv_freq, mscale, k_pre, q_pre);
  check_launch("qk_norm_rope");
}

void kv_append(const float* qkv, int T, int Hq, int Hkv, int D, const int64_t* dst, const int32_t* pos,
               uint16_t* k_pool, uint16_t* v_pool, int32_t* pos_pool, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(T) * Hkv * (D / 8);
  if (total == 0) return;
  kv_append_k<<<grid_for(total, 256), 256, 0, s>>>(qkv, T, Hq, Hkv, D, dst, pos, k_pool, v_pool, pos_pool);
  check_launch("kv_append");
}

void silu_mul(const float* gu, uint16_t* out, int T, int I, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(T) * I;
  if (total == 0) return;
  silu_mul_k<<<grid_for(total, 256), 256, 0, s>>>(gu, out, total, I);
  check_launch("silu_mul");
}

void gelu_tanh_mul(const float* gu, uint16_t* out, int T, int I, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(T) * I;
  if (total == 0) return;
  gelu_tanh_mul_k<<<grid_for(total, 256), 256, 0, s>>>(gu, out, total, I);
  check_launch("gelu_tanh_mul");
}

void soft_cap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n == 0 || !(cap > 0.0f)) return;
  soft_cap_k<<<grid_for(n, 256), 256, 0, s>>>(x, n, cap);
  check_launch("soft_cap");
}

void to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_k<<<grid_for(n, 256), 256, 0, s>>>(x, y, n);
  check_launch("to_bf16");
}

void copy16(const void* src, void* dst, size_t bytes, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(bytes / 16);
  if (n == 0) return;
  copy16_k<<<grid_for(n, 512), 512, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), n);
  check_launch("copy16");
}

}  // namespace kvb::cuda
