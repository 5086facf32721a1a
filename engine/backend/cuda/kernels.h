// kvb::cuda kernels — host-callable launchers of every CUDA kernel of the backend. This header
// needs only <cuda_runtime_api.h> types (cudaStream_t); bf16 buffers are passed as uint16_t bits
// (the same bits as kvb::f32_to_bf16_bits) so that host C++ code need not include cuda_bf16.h.
//
// Conventions: activations f32 row-major [T, ...] where T = tokens of the step; weights bf16
// row-major [out, in]; the KV pool holds slots (slot = page · P + i % P) of K and V rows [D] bf16
// and positions i32. Every launcher enqueues on `stream` and checks the launch (kvb::Error with
// the kernel name and CUDA's message); none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/backend/cuda/plan_types.h"

namespace kvb::cuda {

/// Throws kvb::Error("CUDA <what>: <cudaGetErrorString>") when `e` is not cudaSuccess.
void check(cudaError_t e, const char* what);
/// check(cudaGetLastError(), what) — call right after a launch.
void check_launch(const char* what);
/// Throws kvb::Error(msg) (lets .cu files raise without including fmt).
[[noreturn]] void raise_error(const char* msg);

/// x[t, :] = f32(table[tok[t], :]) · scale (an f32 product; scale = Model::embed_scale(), √H
/// rounded to f32 for Gemma 2, else 1, as Model::embed_row). tok [T] i32, table [V, H] bf16, x [T, H] f32.
void embed(const int32_t* tok, const uint16_t* table, float* x, int T, int H, cudaStream_t s, float scale = 1.0f);

/// y[t, :] = bf16(w ⊙ x[t, :] / sqrt(mean(x[t, :]²) + eps)) (transformers' LlamaRMSNorm, f32
/// math). x [T, n] f32 with row stride ldx, w [n] f32, y [T, n] bf16 (stride n).
void rmsnorm_bf16(const float* x, int64_t ldx, const float* w, uint16_t* y, int T, int n, float eps, cudaStream_t s);

/// x[t, :] += w ⊙ y[t, :] / sqrt(mean(y[t, :]²) + eps), all f32: Gemma 2's post-attention and
/// post-feedforward RMSNorm of a block output y [T, n] before the residual add into x [T, n] (the
/// CPU backend: rms_norm of the projection, then x += it). w [n] f32 (the (1 + w) fold included).
void rmsnorm_add(const float* y, const float* w, float* x, int T, int n, float eps, cudaStream_t s);

/// y[t, j] += b[j] for y [T, n] f32.
void add_bias(float* y, const float* b, int T, int n, cudaStream_t s);

/// In-place on the fused projection qkv [T, (Hq + 2·Hkv)·D] f32 (q | k | v per row): optional
/// per-head RMSNorm of q and k (qn, kn [D], Qwen3; null = none), then rotate-half RoPE of q and k at
/// pos[t] with cos/sin(pos·inv_freq[i]) · mscale (angles as f32 products, cos/sin in double, as the
/// CPU backend). k_pre (nullable) [T, Hkv, D] f32 receives k after the norm, before RoPE; q_pre
/// (nullable) [T, Hq, D] f32 the same for q (LayerStep::queries_pre_rope: LocRet, Expected Attention).
void qk_norm_rope(float* qkv, int T, int Hq, int Hkv, int D, const int32_t* pos, const float* qn, const float* kn,
                  float eps, const float* inv_freq, float mscale, float* k_pre, cudaStream_t s, float* q_pre = nullptr);

/// Appends the step's keys/values to the pool: for t < T, h < Hkv the K and V rows of token t,
/// head h (from qkv) go to slot dst[t·Hkv + h] as bf16, and pos_pool[slot] = pos[t]. D % 8 == 0.
void kv_append(const float* qkv, int T, int Hq, int Hkv, int D, const int64_t* dst, const int32_t* pos,
               uint16_t* k_pool, uint16_t* v_pool, int32_t* pos_pool, cudaStream_t s);

/// out[t, j] = bf16(silu(gu[t, j]) · gu[t, I + j]) for gu [T, 2I] f32 (gate | up), out [T, I].
void silu_mul(const float* gu, uint16_t* out, int T, int I, cudaStream_t s);

/// out[t, j] = bf16(gelu_tanh(gu[t, j]) · gu[t, I + j]), gelu_tanh(g) = g/2·(1 + tanh(√(2/π)(g +
/// 0.044715g³))) in f32 (torch's gelu(approximate="tanh"); Gemma 2's hidden_activation). Shapes as silu_mul.
void gelu_tanh_mul(const float* gu, uint16_t* out, int T, int I, cudaStream_t s);

/// In place x[i] = cap · tanh(x[i] / cap) for i < n (f32; Gemma 2's final_logit_softcapping on the
/// LM-head logits). Does nothing when cap ≤ 0.
void soft_cap(float* x, int64_t n, float cap, cudaStream_t s);

/// Per-item data of an attention launch (device copy of a host array).
struct AttnItem {
  int32_t tok0;       ///< row of the item's first token in the step's [T, ...] activations
  int32_t n;          ///< new tokens
  int32_t start_pos;  ///< absolute position of the first new token
  int32_t pad;
};

/// Arguments of the attention kernels (all pointers device memory).
struct AttnArgs {
  const float* qkv = nullptr;  ///< [T, (Hq + 2Hkv)·D]; q of token t, head hq at t·stride + hq·D
  int64_t q_stride = 0;
  int Hq = 0, Hkv = 0, D = 0, G = 0, P = 0;  ///< P: page size
  float scale = 0;
  /// Sliding window in tokens (0 = full causal): a row at position p sees keys at positions
  /// p − window + 1 … p (ModelConfig::window, the CPU's attention_floor).
  int32_t window = 0;
  /// Attention-logit soft-cap (0 = none): scaled scores s become softcap·tanh(s / softcap) before
  /// the mask and softmax (ModelConfig::attn_logit_softcap, Gemma 2).
  float softcap = 0;
  const AttnItem* items = nullptr;
  const AttnUnit* units = nullptr;
  int num_units = 0;
  const AttnGroup* groups = nullptr;
  int num_groups = 0;
  const int32_t* pt_off = nullptr;   ///< [items · Hkv] offsets into pages
  const int32_t* pages = nullptr;    ///< flattened page lists
  const uint16_t* k_pool = nullptr;  ///< [slots, D] bf16
  const uint16_t* v_pool = nullptr;
  const int32_t* pos_pool = nullptr;  ///< [slots]
  uint16_t* out = nullptr;            ///< [T, Hq·D] bf16 attention output (input of Wo)
  float* lse = nullptr;               ///< [T, Hq] log-sum-exp of each row's scores (nullable)
  float* part_o = nullptr;            ///< [num_parts, kAttnRows, D] unnormalised partial outputs
  float* part_ml = nullptr;           ///< [num_parts, kAttnRows, 2] running max and sum
  /// Most query rows of any unit of the launch (0: unknown). When it is at most 8 and the head
  /// dim is 64 or 128, attention() runs attention_decode.cu's register-streaming kernel for the
  /// units (decode steps) unless KVB_CUDA_DECODE_ATTN=tiled.
  int max_rows = 0;
  /// Device {units, groups} actually in use (nullable). Set by CUDA-graph launches, whose grids
  /// are sized to a capacity (num_units, num_groups = plan.h attention_bound) so that one capture
  /// serves every step: blocks at or past the device count exit at once.
  const int32_t* counts = nullptr;
};

/// Paged ragged causal attention of every unit (decode n = 1 and chunked prefill alike): each
/// block holds ≤ 16 query rows of one (item, kv head) and streams the head's keys in tiles of 64
/// through shared memory with an online softmax (flash attention); split units write partials,
/// merged by a second kernel. Requires D % 8 == 0 and D ≤ 256 (else kvb::Error).
void attention(const AttnArgs& a, cudaStream_t s);

/// Whether attention_decode_units serves head dim D with units of at most `max_rows` rows (D 64 or
/// 128, 1 ≤ max_rows ≤ 8).
bool attention_decode_supported(int D, int max_rows);

/// The units of `a` (not the split-KV combine) on the decode kernel of attention_decode.cu: each
/// block streams its key range from the pool into registers, 16 bytes per lane per K and V row,
/// four keys in flight per thread. Same outputs as attention()'s unit pass. Throws kvb::Error when
/// !attention_decode_supported(a.D, max_rows) or on a launch failure.
void attention_decode_units(const AttnArgs& a, int max_rows, cudaStream_t s);

/// Whether gemv_bf16 serves T activation rows of width `in` (1 ≤ T ≤ 8, in % 8 == 0).
bool gemv_supported(int T, int in);

/// Decode-step matrix product y[t, o] = β·y[t, o] + Σ_k W[o, k]·x[t, k] (f32 accumulation) for
/// W [out, in] bf16 row-major, x [T, in] bf16, y [T, out] f32, T ≤ 8: one warp per output row
/// streaming the row once (gemv.cu). The same contract as the backend's cuBLAS gemm(). Throws
/// kvb::Error when !gemv_supported(T, in) or on a launch failure.
void gemv_bf16(const uint16_t* W, const uint16_t* x, float* y, int T, int in, int out, float beta, cudaStream_t s);

/// Window attention for policies: probs[r, t] = softmax_t(cap(q[r]·K[t]·scale)) over the L keys
/// of one head (pages), with keys whose position > qpos[r] — or, with window > 0, ≤ qpos[r] −
/// window — masked to probability 0; cap(s) = softcap·tanh(s / softcap) when softcap > 0, else s
/// (the CPU backend's policy_block window attention). q [R, D] f32, qpos [R], probs [R, L] f32.
void window_attention(const float* q, const int32_t* qpos, int R, const int32_t* pages, int L, int P, int D,
                      float scale, int32_t window, float softcap, const uint16_t* k_pool, const int32_t* pos_pool,
                      float* probs, cudaStream_t s);

/// The scaled logits of window_attention before the softmax: logits[r, t] = cap(q[r]·K[t]·scale),
/// −inf where masked (window, softcap as window_attention; the CUDA backend passes 0, 0 for R-KV's
/// max-logits reduction, as the host scoring::window_logits the CPU backend uses there).
/// Shapes as window_attention.
void window_logits(const float* q, const int32_t* qpos, int R, const int32_t* pages, int L, int P, int D, float scale,
                   int32_t window, float softcap, const uint16_t* k_pool, const int32_t* pos_pool, float* logits,
                   cudaStream_t s);

/// R-KV's GQA reduction before the softmax: out[j, i] = max_g x[(g·w + j)·L + i] for j < w, i < n
/// (the n = L − w older keys). x [G·w, L] f32 logits, out [w, n] f32.
void gqa_max_rows(const float* x, int G, int w, int L, int n, float* out, cudaStream_t s);

/// In-place softmax of each of the R rows of x [R, n] f32 (max-subtracted; a row that is all −inf
/// becomes all 0, as scoring::softmax_inplace).
void softmax_rows(float* x, int R, int n, cudaStream_t s);

/// Observation-window importance (scoring::window_importance): out[i] = (1/w) Σ_{j<w} red_g
/// x[(g·w + j)·ld + i] for i < n, red = max over g (mode 0) or sum over g divided by G (mode 1).
/// x [G·w, ld] f32, out [n] f32.
void window_col_reduce(const float* x, int64_t ld, int G, int w, int n, int mode, float* out, cudaStream_t s);

/// scoring::pool1d on the device: stride 1, padding kernel/2, output length n; type 1 = max
/// (padding never wins), 2 = avg (zero padding, divide by kernel). x, out [n] f32 (distinct).
void pool1d(const float* x, int n, int kernel, int type, float* out, cudaStream_t s);

/// y[i] = f32(x[i]) for n bf16 values.
void bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s);

/// Second layer of a policy's head-wise MLP (policy.h HeadMlp) after the SGEMM of the first:
/// out[r, j] = b2[h] + Σ_k w2[h, k] · act(hid[r, h1, k] + b1[hb, k]) with h = head_sel ≥ 0 ?
/// head_sel : j (j < out_heads = head_sel ≥ 0 ? 1 : heads), h1 = (shared or head_sel ≥ 0) ? 0 : h
/// (hid [rows, hid_heads, hidden] f32), hb = shared ? 0 : h. act 0 = SiLU, 1 = GELU (erf).
void mlp_out(const float* hid, int rows, int hid_heads, int heads, int hidden, const float* b1, const float* w2,
             const float* b2, bool shared, int head_sel, int act, float* out, cudaStream_t s);

/// H2O column sums: colsum[off[b·Hkv+h] + t] = Σ over the item's rows (token i, group g) with
/// pos[t] ≤ qpos_i of exp(q·k_t·scale − lse_row). Uses a.qkv, a.lse, page tables and pools of `a`;
/// len[b·Hkv + h] the head lengths (device), off the output offsets (device), max_len the largest.
void attention_colsum(const AttnArgs& a, int num_items, const int32_t* len, const int64_t* off, int max_len,
                      float* colsum, cudaStream_t s);

/// Device compaction: for i < n, copies K, V (rows of D bf16) and position of slot src[i] to slot
/// dst[i], through scratch buffers (gather all, then scatter all: overlapping pairs are safe).
/// scratch_kv [2·n·D] bf16, scratch_pos [n].
void compact_pairs(const int64_t* src, const int64_t* dst, int n, int D, uint16_t* k_pool, uint16_t* v_pool,
                   int32_t* pos_pool, uint16_t* scratch_kv, int32_t* scratch_pos, cudaStream_t s);

/// Device sampling of rows of logits [R, V] f32. temperature[r] ≤ 0: argmax (lowest id on ties);
/// otherwise softmax(logits / temperature) restricted to the smallest top-p nucleus (threshold
/// found by bisection on the probability value), then a draw with the uniform u[r] ∈ [0, 1) over
/// the kept tokens in id order. out [R] i32.
void sample(const float* logits, int R, int V, const float* temperature, const float* top_p, const float* u,
            int32_t* out, cudaStream_t s);

/// Applies page-table writes: table[pairs[2i]] = pairs[2i + 1] for i < n (pairs [2n] i64 from
/// plan.h PageTableStore::sync; table [entries] i32 device page tables).
void set_entries(const int64_t* pairs, int n, int32_t* table, cudaStream_t s);

/// Device-to-device copy of `bytes` (multiple of 16) with 16-byte loads/stores; used to measure
/// the HBM bandwidth roofline.
void copy16(const void* src, void* dst, size_t bytes, cudaStream_t s);

/// f32 → bf16 conversion of n values (x [n] f32 → y [n] bf16 bits).
void to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s);

}  // namespace kvb::cuda
