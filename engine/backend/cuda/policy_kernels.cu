// Kernels that serve the host-side policies: window attention (SnapKV / R-KV / G-KV observation
// window), H2O attention column sums, and the device half of keep-set compaction.
//
// window_attention_k: one block (256 threads) per query row r of [R = G·w rows]; the query is
//   staged in shared memory, each thread scores keys t ≡ tid (mod 256) of the head (page list),
//   masking keys after the row's position (and, with window > 0, keys at positions ≤ qpos − window:
//   the layer's sliding window), soft-capping scores to cap·tanh(s / cap) when softcap > 0 (Gemma 2;
//   the CPU's policy_block order: scale, cap, mask), then block max / sum reductions and normalisation.
//   Output [R, L] f32 is written completely (masked keys get 0). D ≤ 1024.
//   With do_softmax = false it stops after writing the scaled, masked (−inf) logits.
// colsum_k: one thread per cached key t of one (item, kv head) (grid.y); loops over the item's
//   n·G query rows with the rows' log-sum-exp from the attention kernel: Σ exp(q·k·scale − lse).
//   O(n·G·D) per key — fine for decode (n = 1) and prefill chunks; only H2O asks for it. The
//   attention kernel's window and soft-cap (AttnArgs::window, softcap) apply as there.
// set_entries_k: one thread per (index, page id) write of the device-resident page tables.
// move_rows_k: 16-byte copies of K/V rows (D % 8 == 0) between pool slots and a scratch buffer,
//   gathering (<true>) then scattering (<false>); the scatter runs after the gather completes
//   (stream order) so overlapping pairs are safe.
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "engine/backend/cuda/block_reduce.cuh"
#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

namespace {

__device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__global__ void window_attention_k(const float* q, const int32_t* qpos, const int32_t* pages, int L, int P, int D,
                                   float scale, int32_t window, float softcap, const uint16_t* k_pool,
                                   const int32_t* pos_pool, float* probs, bool do_softmax) {
  extern __shared__ float qs[];
  __shared__ float red[32];
  const int r = blockIdx.x;
  for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = q[static_cast<int64_t>(r) * D + d];
  __syncthreads();
  const int32_t qp = qpos[r];
  const int32_t qlo = window > 0 ? qp - window + 1 : INT_MIN;
  float* out = probs + static_cast<int64_t>(r) * L;
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < L; t += blockDim.x) {
    const int64_t slot = static_cast<int64_t>(pages[t / P]) * P + t % P;
    float s = -INFINITY;
    const int32_t kp = pos_pool[slot];
    if (kp <= qp && kp >= qlo) {
      const uint16_t* k = k_pool + slot * D;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += qs[d] * bf(k[d]);
      s = acc * scale;
      if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
    }
    out[t] = s;
    mx = fmaxf(mx, s);
  }
  if (!do_softmax) return;  // uniform over the block: scaled logits only
  mx = block_reduce(mx, red, true);
  float sum = 0.0f;
  for (int t = threadIdx.x; t < L; t += blockDim.x) {
    const float e = (out[t] == -INFINITY || mx == -INFINITY) ? 0.0f : expf(out[t] - mx);
    out[t] = e;
    sum += e;
  }
  sum = block_reduce(sum, red, false);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int t = threadIdx.x; t < L; t += blockDim.x) out[t] *= inv;
}

__global__ void colsum_k(AttnArgs a, const int32_t* len, const int64_t* off, float* colsum) {
  const int bh = blockIdx.y;
  const int b = bh / a.Hkv, h = bh % a.Hkv;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= len[bh]) return;
  const AttnItem it = a.items[b];
  const int32_t* pt = a.pages + a.pt_off[bh];
  const int64_t slot = static_cast<int64_t>(pt[t / a.P]) * a.P + t % a.P;
  const int32_t kpos = a.pos_pool[slot];
  const uint16_t* k = a.k_pool + slot * a.D;
  float sum = 0.0f;
  for (int i = 0; i < it.n; ++i) {
    if (kpos > it.start_pos + i) continue;
    if (a.window > 0 && kpos < it.start_pos + i - a.window + 1) continue;
    const int64_t tok = it.tok0 + i;
    for (int g = 0; g < a.G; ++g) {
      const int hq = h * a.G + g;
      const float* q = a.qkv + tok * a.q_stride + static_cast<int64_t>(hq) * a.D;
      float acc = 0.0f;
      // bf16-rounded queries, as the attention kernels that produced lse read them
      for (int d = 0; d < a.D; ++d) acc += __bfloat162float(__float2bfloat16_rn(q[d])) * bf(k[d]);
      float sc = acc * a.scale;
      if (a.softcap > 0.0f) sc = tanhf(sc / a.softcap) * a.softcap;
      sum += expf(sc - a.lse[tok * a.Hq + hq]);
    }
  }
  colsum[off[bh] + t] = sum;
}

/// Moves K/V rows and positions between pool slots and the compaction scratch buffer (K rows
/// [n, D] then V rows [n, D] bf16, positions [n]): row p <-> slot slots[p]; pool → scratch when
/// kGather, scratch → pool otherwise. One thread per 16-byte chunk (D % 8 == 0).
template <bool kGather>
__global__ void move_rows_k(const int64_t* slots, int n, int D, uint16_t* k_pool, uint16_t* v_pool, int32_t* pos_pool,
                            uint16_t* skv, int32_t* spos) {
  const int chunks = D / 8;
  const int64_t total = static_cast<int64_t>(n) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / chunks;
    const int c = static_cast<int>(i % chunks);
    const int64_t sl = slots[p];
    uint4* pk = reinterpret_cast<uint4*>(k_pool + sl * D) + c;
    uint4* pv = reinterpret_cast<uint4*>(v_pool + sl * D) + c;
    uint4* sk = reinterpret_cast<uint4*>(skv) + p * chunks + c;
    uint4* sv = reinterpret_cast<uint4*>(skv) + (n + p) * chunks + c;
    if (kGather) {
      *sk = *pk;
      *sv = *pv;
      if (c == 0) spos[p] = pos_pool[sl];
    } else {
      *pk = *sk;
      *pv = *sv;
      if (c == 0) pos_pool[sl] = spos[p];
    }
  }
}

__global__ void set_entries_k(const int64_t* pairs, int n, int32_t* table) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) table[pairs[2 * static_cast<int64_t>(i)]] = static_cast<int32_t>(pairs[2 * static_cast<int64_t>(i) + 1]);
}

int grid_for(int64_t total, int threads) {
  const int64_t g = (total + threads - 1) / threads;
  return static_cast<int>(g < 1 ? 1 : (g > 65535 * 8 ? 65535 * 8 : g));
}

// window_attention (softmax = true: probabilities) and window_logits (false: scaled logits): one
// block of 256 threads per query row, the row's query in shared memory. `too_wide` is the error
// for D > 1024, `name` the launch check's.
void launch_window(const float* q, const int32_t* qpos, int R, const int32_t* pages, int L, int P, int D, float scale,
                   int32_t window, float softcap, const uint16_t* k_pool, const int32_t* pos_pool, float* out,
                   bool softmax, const char* too_wide, const char* name, cudaStream_t s) {
  if (R == 0 || L == 0) return;
  if (D > 1024) raise_error(too_wide);
  window_attention_k<<<R, 256, D * sizeof(float), s>>>(q, qpos, pages, L, P, D, scale, window, softcap, k_pool,
                                                       pos_pool, out, softmax);
  check_launch(name);
}

}  // namespace

void window_attention(const float* q, const int32_t* qpos, int R, const int32_t* pages, int L, int P, int D,
                      float scale, int32_t window, float softcap, const uint16_t* k_pool, const int32_t* pos_pool,
                      float* probs, cudaStream_t s) {
  launch_window(q, qpos, R, pages, L, P, D, scale, window, softcap, k_pool, pos_pool, probs, true,
                "CUDA window attention: head_dim above 1024", "window_attention", s);
}

void window_logits(const float* q, const int32_t* qpos, int R, const int32_t* pages, int L, int P, int D, float scale,
                   int32_t window, float softcap, const uint16_t* k_pool, const int32_t* pos_pool, float* logits,
                   cudaStream_t s) {
  launch_window(q, qpos, R, pages, L, P, D, scale, window, softcap, k_pool, pos_pool, logits, false,
                "CUDA window logits: head_dim above 1024", "window_logits", s);
}

void attention_colsum(const AttnArgs& a, int num_items, const int32_t* len, const int64_t* off, int max_len,
                      float* colsum, cudaStream_t s) {
  if (num_items == 0 || max_len == 0) return;
  const dim3 grid((max_len + 127) / 128, num_items * a.Hkv);
  colsum_k<<<grid, 128, 0, s>>>(a, len, off, colsum);
  check_launch("attention_colsum");
}

void set_entries(const int64_t* pairs, int n, int32_t* table, cudaStream_t s) {
  if (n <= 0) return;
  set_entries_k<<<(n + 255) / 256, 256, 0, s>>>(pairs, n, table);
  check_launch("page table writes");
}

void compact_pairs(const int64_t* src, const int64_t* dst, int n, int D, uint16_t* k_pool, uint16_t* v_pool,
                   int32_t* pos_pool, uint16_t* scratch_kv, int32_t* scratch_pos, cudaStream_t s) {
  if (n == 0) return;
  const int64_t total = static_cast<int64_t>(n) * (D / 8);
  move_rows_k<true><<<grid_for(total, 256), 256, 0, s>>>(src, n, D, k_pool, v_pool, pos_pool, scratch_kv, scratch_pos);
  check_launch("compact gather");
  move_rows_k<false><<<grid_for(total, 256), 256, 0, s>>>(dst, n, D, k_pool, v_pool, pos_pool, scratch_kv, scratch_pos);
  check_launch("compact scatter");
}

}  // namespace kvb::cuda
