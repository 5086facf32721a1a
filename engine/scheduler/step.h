// The hand-off between the scheduler and a backend: what one forward step carries
// (ForwardItem), what it reports back (ForwardStats), and the per-sequence query ring a backend
// keeps for policies that read recent queries (QueryHistory). Backend-neutral: the CPU and CUDA
// backends, the scheduler (engine/scheduler/scheduler.h) and the engine all read these types.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv/kv_cache.h"

namespace kvb {

struct LoraAdapter;  // engine/policies/lora.h

/// Per-sequence state the backend keeps for policies that read the last w queries
/// (PolicyNeeds::window_queries): a ring of post-RoPE queries per layer.
struct QueryHistory {
  int window = 0;                         ///< w, in queries (tokens)
  std::vector<int> count;                 ///< [layer] queries stored (≤ w)
  std::vector<std::vector<float>> q;      ///< [layer] ring [w, Hq, D] f32
  std::vector<std::vector<int32_t>> pos;  ///< [layer] ring [w] absolute positions
  std::vector<int> head;                  ///< [layer] next ring slot
};

/// One sequence's share of a forward step: `n` new tokens starting at absolute position
/// `start_pos` (a prompt chunk, or one decode token).
struct ForwardItem {
  SeqId seq = 0;                    ///< the sequence in the KV cache
  const int32_t* tokens = nullptr;  ///< [n] token ids
  int n = 0;                        ///< tokens in this step (≥ 1)
  int64_t start_pos = 0;            ///< absolute position of tokens[0]
  bool prefill = false;             ///< tokens are prompt tokens
  bool prefill_last = false;        ///< this chunk ends the prompt
  int64_t prompt_end = 0;           ///< prefill: absolute position where the prompt ends (LayerStep::prompt_end)
  bool want_logits = true;          ///< produce logits for the last token
  QueryHistory* history = nullptr;  ///< required when the policy needs window queries
  int scoring_pass = -1;            ///< ≥ 0: a policy's scoring pass (LayerStep::scoring_pass); −1 otherwise
  /// [n, hidden_size] f32 input rows used instead of `tokens` (a restore pass, RestorePass); null:
  /// the rows are the embeddings of `tokens`.
  const float* embeddings = nullptr;
  /// LoRA deltas on this item's projections (RestorePass::lora; every item of a step must name the
  /// same adapter); null: none.
  const LoraAdapter* lora = nullptr;
};

/// Time split of the last forward() call, in seconds.
struct ForwardStats {
  double total_s = 0;   ///< wall seconds of the whole call
  double policy_s = 0;  ///< wall seconds spent in policy code
  int64_t evicted = 0;  ///< tokens evicted by policies in this call
  /// Per item, in item order: the K/V token rows the attention of a decode item (one new token,
  /// not prefill) read, summed over layers and kv heads (a kv head's rows count once however many
  /// of its query heads read them); 0 for prefill items. A dense head reads its whole cache; a
  /// read-selection policy (Quest) only the tokens it selected. Bytes: × KVCache::kv_bytes_per_token.
  std::vector<int64_t> kv_read_tokens;
};

}  // namespace kvb
