// kvb::CpuBackend — the f32 CPU forward pass over a paged, per-head KV cache.
//
// One forward() call runs a batch of sequences, each contributing n ≥ 1 new tokens (a prefill
// chunk, or one decode token), through every layer: GEMMs over all batch tokens at once
// (matmul_nt: kvbench's own kernels, one reduction order per output element), attention per (sequence, kv_head) over that head's own cached tokens with a
// causal mask by absolute position (so ragged, evicted heads are exact; sliding-window layers
// also mask keys older than the window), then the policy hook for each (sequence, layer), then
// the MLP. Each layer is attention_block then mlp_block. OpenMP parallelises attention and elementwise work.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/kernels/attention.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/architecture.h"
#include "engine/model/model.h"
#include "engine/policies/policy.h"
#include "engine/scheduler/step.h"

namespace kvb {

/// The stored window queries of `layer` in LayerStep::window_queries order: out [Hq, w, D] f32,
/// oldest query first (out is filled only when empty, so a step's lambda can call this on every
/// request and copy once). Returns w, the queries stored (≤ qh.window).
inline int gather_window_queries(const QueryHistory& qh, int layer, int Hq, int D, std::vector<float>& out) {
  const int w = qh.count[layer];
  if (out.empty() && w > 0) {
    out.resize(static_cast<size_t>(Hq) * w * D);
    for (int j = 0; j < w; ++j) {
      const int slot = (qh.head[layer] - w + j + qh.window) % qh.window;
      for (int hq = 0; hq < Hq; ++hq)
        std::memcpy(&out[(static_cast<size_t>(hq) * w + j) * D],
                    &qh.q[layer][(static_cast<size_t>(slot) * Hq + hq) * D], sizeof(float) * D);
    }
  }
  return w;
}

/// The CPU backend. Holds reusable work buffers; not thread-safe (one forward at a time).
class CpuBackend {
 public:
  /// `bf16_points`: round to bf16 where the CUDA backend holds bf16 (the GEMM inputs: normed
  /// layer input, attention output, SiLU·up, final norm; the cached K/V rows; the queries as the
  /// attention kernels read them), accumulating
  /// in f32 as it does. The `cpu-bf16` verification backend: CUDA-vs-CPU checks compare keep-sets
  /// against it so that only accumulation order, not storage precision, separates the two.
  CpuBackend(const Model& model, KVCache& cache, bool bf16_points = false);

  /// Runs one step for `items`. Writes logits [k, V] f32 for the k items with want_logits, in
  /// item order, into `logits` (resized). `policy` may be null (full cache). Throws kvb::Error
  /// on invalid token ids or when the KV page pool is exhausted.
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits, ForwardStats* stats = nullptr);

 private:
  struct Step;
  /// One layer's attention block over the step's rows: RMSNorm → Q/K/V (+bias) → q/k norm →
  /// RoPE → append K/V to the cache → softmax attention per (item, kv head) over the cache
  /// (causal by absolute position, within the layer's sliding window, scores soft-capped when
  /// the config says so) → policy_block → Wo (→ post-attention norm), added to the residual x_.
  void attention_block(Step& s, int l);
  /// The policy's layer hook for each item (policy_driver::run_layer), then compaction.
  void policy_block(Step& s, int l);
  /// One layer's MLP block: RMSNorm → gate/up → act(gate)·up → down (→ post-MLP norm), added to
  /// the residual x_.
  void mlp_block(Step& s, int l);

  const Model& m_;
  KVCache& cache_;
  bool bf16_points_ = false;
  Activation activation_;  ///< the MLP activation of the model's architecture
  /// Work buffers of one forward() call. q_ and att_ also hold the MLP's gate and up products
  /// (mlp_block runs after a layer's attention block is done with them).
  std::vector<float> x_, xn_, q_, k_, v_, kpre_, qpre_, att_, tmp_;
  std::vector<AttentionTask> attn_tasks_;  ///< this layer's (item, kv head) attention tasks
};

/// Softmax attention of one query q [D] f32 over the tokens of kv head (seq, layer, h) that lie
/// in `spans` (sorted, disjoint [begin, end) ranges of token indices, within [0, length)) and have
/// position ≤ qpos: out [D] = Σ_t p_t · v_t with p = softmax over those tokens of scale · q·k_t
/// (f32, online softmax: paged_attention with one query head and these ranges). The read path
/// of read-selection policies (ReadStep::spans, Quest), for tests. Writes zeros when no token
/// qualifies.
void attend_spans(const KVCache& cache, SeqId seq, int layer, int h, const float* q, int32_t qpos, int D, float scale,
                  std::span<const std::pair<int32_t, int32_t>> spans, float* out);

// matmul_nt (y = x·Wᵀ on weights as stored) lives in engine/kernels/matmul.h.
/// RMSNorm of each of the T rows of x[T, n] times weight[n], as transformers' LlamaRMSNorm.
void rms_norm(const float* x, const float* weight, float* y, int64_t T, int64_t n, float eps);
/// Rows per MLP piece at most: a prefill chunk's MLP runs in mlp_pieces(T) pieces of rows
/// [T·i/p, T·(i+1)/p), so the gate/up buffers (2 × rows × intermediate_size f32) hold 128 rows,
/// not the chunk (a 4096-token chunk of an 8B model would otherwise take 470 MB there).
inline constexpr int64_t kMlpPieceRows = 128;
/// Pieces of a T-row MLP: 1 up to kMlpPieceRows rows, else ⌈T / kMlpPieceRows⌉. matmul_nt gives
/// every output element one reduction order whatever the row count (matmul.h), so the result
/// does not depend on the split.
int64_t mlp_pieces(int64_t T);
/// The lowest key position a query at `qpos` attends to under a sliding window of `window` tokens
/// (qpos − window + 1, transformers' sliding_window_overlay `kv_idx > q_idx − window`);
/// INT32_MIN when window is 0 (full causal attention).
int32_t attention_floor(int32_t qpos, int32_t window);
/// Applies rotate-half RoPE in place to vec[nheads, D] at `pos` (transformers' apply_rotary_pos_emb).
void apply_rope(float* vec, int nheads, int D, int64_t pos, const float* inv_freq, float mscale);

}  // namespace kvb
