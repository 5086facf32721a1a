// kvb::CpuBackend — the f32 CPU forward pass over a paged, per-head KV cache.
//
// One forward() call runs a batch of sequences, each contributing n ≥ 1 new tokens (a prefill
// chunk, or one decode token), through every layer: GEMMs over all batch tokens at once
// (OpenBLAS sgemm), attention per (sequence, kv_head) over that head's own cached tokens with a
// causal mask by absolute position (so ragged, evicted heads are exact), then the policy hook
// for each (sequence, layer), then the MLP. OpenMP parallelises attention and elementwise work.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/policies/policy.h"

namespace kvb {

/// Per-sequence state the backend keeps for policies that read the last w queries
/// (PolicyNeeds::window_queries): a ring of post-RoPE queries per layer.
struct QueryHistory {
  int window = 0;                           ///< w
  std::vector<int> count;                   ///< [layer] queries stored (≤ w)
  std::vector<std::vector<float>> q;        ///< [layer] ring [w, Hq, D]
  std::vector<std::vector<int32_t>> pos;    ///< [layer] ring [w] absolute positions
  std::vector<int> head;                    ///< [layer] next ring slot
};

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
        std::memcpy(&out[(static_cast<size_t>(hq) * w + j) * D], &qh.q[layer][(static_cast<size_t>(slot) * Hq + hq) * D],
                    sizeof(float) * D);
    }
  }
  return w;
}

/// One sequence's share of a forward step.
struct ForwardItem {
  SeqId seq = 0;
  const int32_t* tokens = nullptr;  ///< [n] token ids
  int n = 0;
  int64_t start_pos = 0;            ///< absolute position of tokens[0]
  bool prefill = false;             ///< tokens are prompt tokens
  bool prefill_last = false;        ///< this chunk ends the prompt
  int64_t prompt_end = 0;           ///< prefill: absolute position where the prompt ends (LayerStep::prompt_end)
  bool want_logits = true;          ///< produce logits for the last token
  QueryHistory* history = nullptr;  ///< required when the policy needs window queries
};

/// Time split of the last forward() call, in seconds.
struct ForwardStats {
  double total_s = 0, policy_s = 0;
  int64_t evicted = 0;  ///< tokens evicted by policies in this call
};

/// The CPU backend. Holds reusable work buffers; not thread-safe (one forward at a time).
class CpuBackend {
 public:
  /// `bf16_points`: round to bf16 where the CUDA backend holds bf16 (the GEMM inputs: normed
  /// layer input, attention output, SiLU·up, final norm; and the cached K/V rows), accumulating
  /// in f32 as it does. The `cpu-bf16` verification backend: CUDA-vs-CPU checks compare keep-sets
  /// against it so that only accumulation order, not storage precision, separates the two.
  CpuBackend(const Model& model, KVCache& cache, bool bf16_points = false);

  /// Runs one step for `items`. Writes logits [k, V] f32 for the k items with want_logits, in
  /// item order, into `logits` (resized). `policy` may be null (full cache). Throws kvb::Error
  /// on invalid token ids or when the KV page pool is exhausted.
  void forward(std::span<ForwardItem> items, Policy* policy, std::vector<float>& logits,
               ForwardStats* stats = nullptr);

 private:
  const Model& m_;
  KVCache& cache_;
  bool bf16_points_ = false;
  std::vector<float> x_, xn_, q_, k_, v_, kpre_, qpre_, att_, tmp_, gate_, up_;
};

// matmul_nt (y = x·Wᵀ on weights as stored) lives in engine/kernels/matmul.h.
/// RMSNorm of each of the T rows of x[T, n] times weight[n], as transformers' LlamaRMSNorm.
void rms_norm(const float* x, const float* weight, float* y, int64_t T, int64_t n, float eps);
/// Applies rotate-half RoPE in place to vec[nheads, D] at `pos` (transformers' apply_rotary_pos_emb).
void apply_rope(float* vec, int nheads, int D, int64_t pos, const float* inv_freq, float mscale);

}  // namespace kvb
