// Paged ragged causal attention (decode and chunked prefill in one kernel) and its split-KV
// combine pass.
//
// Work: one block (128 threads = 4 warps) per AttnUnit (plan.h): ≤ 16 query rows of one
// (item, kv head) — row r is new token r / G of the item, query head head·G + r % G — against the
// key range [kbeg, kend) of that head's page list. Warp w owns rows w, w+4, w+8, w+12.
// Keys/values stream through shared memory in tiles of 64 (16-byte global loads; K rows padded to
// an odd number of 4-byte words so the per-lane score loop is bank-conflict free), positions
// alongside for the causal mask (key visible iff its absolute position ≤ the row's position: exact
// for evicted, ragged heads; with AttnArgs::window > 0 also pos > qpos − window, the sliding window
// of Mistral / Gemma 2's local layers, and tiles wholly before every row's window are skipped
// without loading). Scores are q·k·scale, soft-capped to cap·tanh(s / cap) when AttnArgs::softcap
// > 0 (Gemma 2), as the CPU kernel (engine/kernels/attention_impl.inc). Each lane scores keys
// lane and lane+32 of the tile, the warp keeps an online softmax (running max m, sum l, f32 accumulator of D/32 dims per lane), and P·V reads V
// rows with consecutive lanes on consecutive elements. Unsplit units normalise and write bf16
// output (and the row's log-sum-exp when asked, for H2O column sums); split units write (m, l, o)
// partials that combine_k merges (flash-decoding). With AttnArgs::counts set (CUDA-graph launches),
// the grids are capacities and blocks past the device-side counts return before any work.
//
// Limits: D % 8 == 0 and D ≤ 256 (DPL = ⌈D/32⌉ ∈ {1, 2, 4, 8} registers per row per lane);
// shared memory 64·D + 256·(D/2 + 1) + 128·D + 256 bytes (41.5 KB at D = 128, 80.5 KB at 256).
// Scores on CUDA cores in f32 from bf16-rounded queries (the same operands as attention_fi.cu's
// tensor-core prefill, which serves head dims 64 and 128; see engine/backend/cuda/NOTES.md).
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>
#include <cstdlib>
#include <string>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerWarp = kAttnRows / 4;

__device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// Queries are read as bf16, as attention_fi.cu's tensor-core kernel reads them (and cpu-bf16).
__device__ __forceinline__ float bf16_round(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

size_t smem_bytes(int D) {
  return static_cast<size_t>(kAttnRows) * D * 4 + static_cast<size_t>(kAttnTile) * (D / 2 + 1) * 4 +
         static_cast<size_t>(kAttnTile) * D * 2 + kAttnTile * 4;
}

// Writes one finished row (normalised) to out/lse.
template <int DPL>
__device__ void write_row(const AttnArgs& a, const AttnItem& it, int head, int row, const float* acc, float m, float l,
                          int lane) {
  const int i = row / a.G, g = row % a.G;
  const int64_t t = it.tok0 + i;
  const int hq = head * a.G + g;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  uint16_t* o = a.out + (t * a.Hq + hq) * a.D;
#pragma unroll
  for (int c = 0; c < DPL; ++c) {
    const int d = lane + 32 * c;
    if (d < a.D) o[d] = to_bf(acc[c] * inv);
  }
  if (a.lse && lane == 0) a.lse[t * a.Hq + hq] = l > 0.0f ? m + logf(l) : -FLT_MAX;
}

// Stores row r of unit u once its keys are done: the normalised row (write_row) when the unit is
// its row's whole chunk, else the unnormalised partial output and its (max, sum) for combine_k.
// D = a.D (passed in: attn_k holds it in a register).
template <int DPL>
__device__ __forceinline__ void finish_row(const AttnArgs& a, const AttnItem& it, const AttnUnit& u, int r, int D,
                                           const float* acc, float m, float l, int lane) {
  if (u.part < 0) {
    write_row<DPL>(a, it, u.head, u.row0 + r, acc, m, l, lane);
  } else {
    float* po = a.part_o + (static_cast<int64_t>(u.part) * kAttnRows + r) * D;
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      const int d = lane + 32 * c;
      if (d < D) po[d] = acc[c];
    }
    if (lane == 0) {
      a.part_ml[(static_cast<int64_t>(u.part) * kAttnRows + r) * 2] = m;
      a.part_ml[(static_cast<int64_t>(u.part) * kAttnRows + r) * 2 + 1] = l;
    }
  }
}

template <int DPL>
__global__ void __launch_bounds__(kThreads) attn_k(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = a.D, G = a.G;
  const int KSw = D / 2 + 1;                                            // odd: conflict-free column reads across rows
  if (a.counts && static_cast<int>(blockIdx.x) >= a.counts[0]) return;  // graph grid: surplus block
  const AttnUnit u = a.units[blockIdx.x];
  const AttnItem it = a.items[u.item];
  float* q_s = reinterpret_cast<float*>(smem);
  uint32_t* k_s = reinterpret_cast<uint32_t*>(q_s + kAttnRows * D);
  uint16_t* v_s = reinterpret_cast<uint16_t*>(k_s + kAttnTile * KSw);
  int32_t* pos_s = reinterpret_cast<int32_t*>(v_s + kAttnTile * D);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  for (int idx = tid; idx < kAttnRows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float v = 0.0f;
    if (r < u.nrows) {
      const int row = u.row0 + r;
      const int64_t t = it.tok0 + row / G;
      const int hq = u.head * G + row % G;
      v = bf16_round(a.qkv[t * a.q_stride + static_cast<int64_t>(hq) * D + d]) * a.scale;
    }
    q_s[idx] = v;
  }
  int qpos[kRowsPerWarp];
  bool valid[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DPL];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + 4 * k;
    valid[k] = r < u.nrows;
    qpos[k] = valid[k] ? it.start_pos + (u.row0 + r) / G : -1;
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[k][c] = 0.0f;
  }
  const int maxq = it.start_pos + (u.row0 + u.nrows - 1) / G;
  // Sliding window: a row sees keys at positions ≥ its qpos − window + 1; the block's lowest floor
  // is its first row's.
  const int minlo = a.window > 0 ? it.start_pos + u.row0 / G - a.window + 1 : INT_MIN;
  const int32_t* pt = a.pages + a.pt_off[u.item * a.Hkv + u.head];
  const int chunks = D / 8;
  const float cap = a.softcap;

  for (int kt = u.kbeg; kt < u.kend; kt += kAttnTile) {
    const int nk = min(kAttnTile, u.kend - kt);
    if (a.window > 0) {  // positions increase along a head: a tile ending before every row's window is skipped
      const int last = kt + nk - 1;
      if (a.pos_pool[static_cast<int64_t>(pt[last / a.P]) * a.P + last % a.P] < minlo) continue;
    }
    __syncthreads();  // the previous tile is consumed (and q_s is complete on the first pass)
    for (int idx = tid; idx < nk * chunks; idx += kThreads) {
      const int j = idx / chunks, c = idx % chunks;
      const int key = kt + j;
      const int64_t slot = static_cast<int64_t>(pt[key / a.P]) * a.P + key % a.P;
      const uint4 kv = *reinterpret_cast<const uint4*>(a.k_pool + slot * D + c * 8);
      const uint4 vv = *reinterpret_cast<const uint4*>(a.v_pool + slot * D + c * 8);
      uint32_t* kr = k_s + j * KSw + c * 4;
      kr[0] = kv.x;
      kr[1] = kv.y;
      kr[2] = kv.z;
      kr[3] = kv.w;
      *reinterpret_cast<uint4*>(v_s + j * D + c * 8) = vv;
      if (c == 0) pos_s[j] = a.pos_pool[slot];
    }
    __syncthreads();
    if (pos_s[0] > maxq) break;  // positions increase along a head: nothing visible beyond

    float s[kRowsPerWarp][2];
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) s[k][0] = s[k][1] = 0.0f;
    const int j0 = lane, j1 = lane + 32;
    const uint32_t* k0 = k_s + min(j0, nk - 1) * KSw;
    const uint32_t* k1 = k_s + min(j1, nk - 1) * KSw;
    for (int w = 0; w < D / 2; ++w) {
      const uint32_t a0 = k0[w], a1 = k1[w];
      const float x0 = bf_lo(a0), y0 = bf_hi(a0), x1 = bf_lo(a1), y1 = bf_hi(a1);
#pragma unroll
      for (int k = 0; k < kRowsPerWarp; ++k) {
        const float2 q = reinterpret_cast<const float2*>(q_s + (warp + 4 * k) * D)[w];
        s[k][0] += q.x * x0 + q.y * y0;
        s[k][1] += q.x * x1 + q.y * y1;
      }
    }
    float p[kRowsPerWarp][2];
    const int pos0 = j0 < nk ? pos_s[j0] : INT_MAX, pos1 = j1 < nk ? pos_s[j1] : INT_MAX;
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      float c0 = s[k][0], c1 = s[k][1];
      if (cap > 0.0f) {  // transformers' Gemma 2: divide, tanh, multiply (f32)
        c0 = tanhf(c0 / cap) * cap;
        c1 = tanhf(c1 / cap) * cap;
      }
      const int qlo = a.window > 0 ? qpos[k] - a.window + 1 : INT_MIN;  // the row's window floor
      const float s0 = pos0 <= qpos[k] && pos0 >= qlo ? c0 : -INFINITY;
      const float s1 = pos1 <= qpos[k] && pos1 >= qlo ? c1 : -INFINITY;
      const float mn = fmaxf(m[k], warp_max(fmaxf(s0, s1)));
      if (mn == -INFINITY) {
        p[k][0] = p[k][1] = 0.0f;
        continue;
      }
      const float corr = m[k] == -INFINITY ? 0.0f : expf(m[k] - mn);
      p[k][0] = s0 == -INFINITY ? 0.0f : expf(s0 - mn);
      p[k][1] = s1 == -INFINITY ? 0.0f : expf(s1 - mn);
      l[k] = l[k] * corr + warp_sum(p[k][0] + p[k][1]);
#pragma unroll
      for (int c = 0; c < DPL; ++c) acc[k][c] *= corr;
      m[k] = mn;
    }
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      for (int jl = 0; jl < 32; ++jl) {
        const int j = jj * 32 + jl;
        if (j >= nk) break;
        float vv[DPL];
#pragma unroll
        for (int c = 0; c < DPL; ++c) {
          const int d = lane + 32 * c;
          vv[c] = d < D ? bf(v_s[j * D + d]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k) {
          const float pj = __shfl_sync(0xffffffffu, p[k][jj], jl);
#pragma unroll
          for (int c = 0; c < DPL; ++c) acc[k][c] += pj * vv[c];
        }
      }
    }
  }

#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    if (!valid[k]) continue;
    finish_row<DPL>(a, it, u, warp + 4 * k, D, acc[k], m[k], l[k], lane);
  }
}

// Merges the partials of one split chunk: o = Σ_s e^{m_s − M} o_s / Σ_s e^{m_s − M} l_s.
template <int DPL>
__global__ void __launch_bounds__(kThreads) combine_k(AttnArgs a) {
  if (a.counts && static_cast<int>(blockIdx.x) >= a.counts[1]) return;  // graph grid: surplus block
  const AttnGroup gr = a.groups[blockIdx.x];
  const AttnUnit u = a.units[gr.first];
  const AttnItem it = a.items[u.item];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < u.nrows; r += 4) {
    float M = -INFINITY;
    for (int s = 0; s < gr.count; ++s) {
      const int64_t pi = static_cast<int64_t>(a.units[gr.first + s].part) * kAttnRows + r;
      M = fmaxf(M, a.part_ml[pi * 2]);
    }
    float L = 0.0f, acc[DPL];
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[c] = 0.0f;
    for (int s = 0; s < gr.count; ++s) {
      const int64_t pi = static_cast<int64_t>(a.units[gr.first + s].part) * kAttnRows + r;
      const float ms = a.part_ml[pi * 2];
      const float w = (ms == -INFINITY || M == -INFINITY) ? 0.0f : expf(ms - M);
      L += a.part_ml[pi * 2 + 1] * w;
      const float* po = a.part_o + pi * a.D;
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < a.D) acc[c] += w * po[d];
      }
    }
    write_row<DPL>(a, it, u.head, u.row0 + r, acc, M, L, lane);
  }
}

// Which kernel runs decode-shaped units (AttnArgs::max_rows ≤ 8): attention_decode.cu's by
// default, attn_k with KVB_CUDA_DECODE_ATTN=tiled (read once).
bool decode_kernel_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KVB_CUDA_DECODE_ATTN");
    return !(e && std::string(e) == "tiled");
  }();
  return on;
}

template <int DPL>
void launch(const AttnArgs& a, cudaStream_t s) {
  const size_t smem = smem_bytes(a.D);
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attn_k<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "attention: raise shared memory limit");
  if (a.max_rows > 0 && a.window == 0 && a.softcap == 0.0f && decode_kernel_enabled() &&
      attention_decode_supported(a.D, a.max_rows)) {  // windows and soft-caps: attn_k
    attention_decode_units(a, a.max_rows, s);
  } else if (a.num_units > 0) {
    attn_k<DPL><<<a.num_units, kThreads, smem, s>>>(a);
    check_launch("attention");
  }
  if (a.num_groups > 0) {
    combine_k<DPL><<<a.num_groups, kThreads, 0, s>>>(a);
    check_launch("attention combine");
  }
}

}  // namespace

void attention(const AttnArgs& a, cudaStream_t s) {
  if (a.D % 8 != 0 || a.D > 256 || a.D <= 0)
    raise_error("CUDA attention: head_dim must be a positive multiple of 8, at most 256");
  if (a.D <= 32) launch<1>(a, s);
  else if (a.D <= 64) launch<2>(a, s);
  else if (a.D <= 128) launch<4>(a, s);
  else launch<8>(a, s);
}

}  // namespace kvb::cuda
