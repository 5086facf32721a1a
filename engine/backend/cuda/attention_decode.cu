// Paged attention for units of few query rows (decode: one token × the G query heads of a kv head),
// built for memory bandwidth. attention.cu's general kernel gives every block 16 query rows and
// stages 64-key tiles through shared memory; a decode unit fills 4 of those 16 rows (G = 4), and
// the block waits on each tile before it computes. Here the block streams keys straight from the
// pool into registers instead:
//
//   thread (tx, slot): tx < TX = D/8 owns dims [8·tx, 8·tx + 8) of every row (one 16-byte load of a
//   K row and one of a V row per key); slot < SLOTS = 128/TX walks keys kbeg + slot·U, + SLOTS·U, …
//   U = 4 keys at a time, all loads issued before the first use. A key's score per row is the TX
//   lanes' partial dot products summed with xor shuffles; each slot keeps its own online softmax
//   (running max m, sum l, 8-dim accumulator per row), and the SLOTS states are merged through
//   shared memory at the end (the same e^{m_s − M} merge as the split-KV combine).
//
// Output contract identical to attention.cu's attn_k (AttnArgs, kernels.h): unsplit units write
// normalised bf16 rows (and the log-sum-exp when asked), split units write (m, l, o) partials that
// attention.cu's combine pass merges. Keys are visible iff pos ≤ the row's position (exact for
// evicted, ragged heads). Scores and softmax in f32 from bf16(q)·scale and bf16 K/V, as attn_k;
// only the summation order differs (a tree over the 8-dim pieces instead of a serial loop).
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;

__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// Queries are read as bf16 (as attention_fi.cu's tensor-core prefill and cpu-bf16 read them).
__device__ __forceinline__ float rq(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }

__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  f[0] = bf_lo(u.x);
  f[1] = bf_hi(u.x);
  f[2] = bf_lo(u.y);
  f[3] = bf_hi(u.y);
  f[4] = bf_lo(u.z);
  f[5] = bf_hi(u.z);
  f[6] = bf_lo(u.w);
  f[7] = bf_hi(u.w);
}

// D: head dim (64 or 128); NR: row capacity (≥ the unit's rows).
template <int D, int NR>
__global__ void __launch_bounds__(kThreads) attn_dec_k(AttnArgs a) {
  constexpr int TX = D / 8;
  constexpr int SLOTS = kThreads / TX;
  __shared__ float sm_m[SLOTS][NR], sm_l[SLOTS][NR];
  __shared__ __align__(16) float sm_acc[SLOTS][NR][D];
  if (a.counts && static_cast<int>(blockIdx.x) >= a.counts[0]) return;  // graph grid: surplus block
  const AttnUnit u = a.units[blockIdx.x];
  const AttnItem it = a.items[u.item];
  const int tid = threadIdx.x, tx = tid % TX, slot = tid / TX;
  const int G = a.G;

  float q[NR][8], acc[NR][8], m[NR], l[NR];
  int qpos[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    qpos[r] = -1;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[r][i] = q[r][i] = 0.0f;
    if (r < u.nrows) {
      const int row = u.row0 + r;
      const int64_t t = it.tok0 + row / G;
      const int hq = u.head * G + row % G;
      const float4* src = reinterpret_cast<const float4*>(a.qkv + t * a.q_stride + static_cast<int64_t>(hq) * D + tx * 8);
      const float4 x = src[0], y = src[1];
      q[r][0] = rq(x.x) * a.scale;
      q[r][1] = rq(x.y) * a.scale;
      q[r][2] = rq(x.z) * a.scale;
      q[r][3] = rq(x.w) * a.scale;
      q[r][4] = rq(y.x) * a.scale;
      q[r][5] = rq(y.y) * a.scale;
      q[r][6] = rq(y.z) * a.scale;
      q[r][7] = rq(y.w) * a.scale;
      qpos[r] = it.start_pos + row / G;
    }
  }
  const int32_t* pt = a.pages + a.pt_off[u.item * a.Hkv + u.head];

  // The trip count is the same for every thread of the block (the xor shuffles need whole warps).
  for (int base = u.kbeg; base < u.kend; base += SLOTS * kUnroll) {
    const int k0 = base + slot * kUnroll;
    uint4 kr[kUnroll], vr[kUnroll];
    int pos[kUnroll];
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int key = k0 + i;
      if (key < u.kend) {
        const int64_t s = static_cast<int64_t>(pt[key / a.P]) * a.P + key % a.P;
        kr[i] = *reinterpret_cast<const uint4*>(a.k_pool + s * D + tx * 8);
        vr[i] = *reinterpret_cast<const uint4*>(a.v_pool + s * D + tx * 8);
        pos[i] = a.pos_pool[s];
      } else {
        kr[i] = vr[i] = make_uint4(0, 0, 0, 0);
        pos[i] = INT_MAX;
      }
    }
    float sc[kUnroll][NR];
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      float kf[8];
      unpack8(kr[i], kf);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(q[r][e], kf[e], d);
#pragma unroll
        for (int o = TX / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o, TX);
        sc[i][r] = pos[i] <= qpos[r] ? d : -INFINITY;
      }
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      float mx = m[r];
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) mx = fmaxf(mx, sc[i][r]);
      if (mx == -INFINITY) continue;  // nothing visible yet for this row
      const float corr = m[r] == -INFINITY ? 0.0f : __expf(m[r] - mx);
      l[r] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= corr;
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const float p = sc[i][r] == -INFINITY ? 0.0f : __expf(sc[i][r] - mx);
        l[r] += p;
        float vf[8];
        unpack8(vr[i], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(p, vf[e], acc[r][e]);
      }
      m[r] = mx;
    }
  }

  // Merge the SLOTS partial softmax states of each row.
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    if (tx == 0) {
      sm_m[slot][r] = m[r];
      sm_l[slot][r] = l[r];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sm_acc[slot][r][tx * 8 + e] = acc[r][e];
  }
  __syncthreads();
  for (int idx = tid; idx < u.nrows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float M = -INFINITY;
    for (int s = 0; s < SLOTS; ++s) M = fmaxf(M, sm_m[s][r]);
    float L = 0.0f, O = 0.0f;
    for (int s = 0; s < SLOTS; ++s) {
      const float ms = sm_m[s][r];
      const float w = (ms == -INFINITY || M == -INFINITY) ? 0.0f : __expf(ms - M);
      L += sm_l[s][r] * w;
      O += sm_acc[s][r][d] * w;
    }
    const int row = u.row0 + r;
    if (u.part < 0) {
      const int64_t t = it.tok0 + row / G;
      const int hq = u.head * G + row % G;
      a.out[(t * a.Hq + hq) * D + d] = to_bf(L > 0.0f ? O / L : 0.0f);
      if (a.lse && d == 0) a.lse[t * a.Hq + hq] = L > 0.0f ? M + logf(L) : -FLT_MAX;
    } else {
      const int64_t pi = static_cast<int64_t>(u.part) * kAttnRows + r;
      a.part_o[pi * D + d] = O;
      if (d == 0) {
        a.part_ml[pi * 2] = M;
        a.part_ml[pi * 2 + 1] = L;
      }
    }
  }
}

template <int D>
void launch_d(const AttnArgs& a, int rows, cudaStream_t s) {
  if (rows <= 1) attn_dec_k<D, 1><<<a.num_units, kThreads, 0, s>>>(a);
  else if (rows <= 2) attn_dec_k<D, 2><<<a.num_units, kThreads, 0, s>>>(a);
  else if (rows <= 4) attn_dec_k<D, 4><<<a.num_units, kThreads, 0, s>>>(a);
  else attn_dec_k<D, 8><<<a.num_units, kThreads, 0, s>>>(a);
}

}  // namespace

bool attention_decode_supported(int D, int max_rows) { return (D == 64 || D == 128) && max_rows >= 1 && max_rows <= 8; }

void attention_decode_units(const AttnArgs& a, int max_rows, cudaStream_t s) {
  if (!attention_decode_supported(a.D, max_rows)) raise_error("CUDA decode attention: unsupported head_dim or rows");
  if (a.num_units <= 0) return;
  if (a.D == 64) launch_d<64>(a, max_rows, s);
  else launch_d<128>(a, max_rows, s);
  check_launch("decode attention");
}

}  // namespace kvb::cuda
