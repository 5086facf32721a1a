// `oracle`: ForesightKV's Golden Eviction (future attention) as a two-pass, teacher-forced policy —
// the upper bound every learned policy is compared with.
//
// Source: ForesightKV (arXiv 2602.03203) §3.2, Eq. 3–5 (App. A), and the 0-indexed code of
// RUCAIBox/ForesightKV supervised_training/train.py::reduce_attention_scores /
// collect_eviction_schedule; see docs/policies.md#oracle--foresightkvs-golden-eviction.
//
// Two passes over a fixed token trace w = prompt + continuation (T tokens, prompt P tokens):
//   pass 1  the continuation: generated with the full cache (kvbench fidelity: the full-cache
//           greedy continuation) or given by the caller;
//   pass 2  a teacher-forced full-cache forward over the whole trace, one query per step, that
//           records for every (layer, kv_head h', key k) the block scores
//               bs[h', k, j] = (1 / (G·L)) · Σ_{h ∈ group(h')} Σ_{q ∈ Q_j} A^h[q, k]
//           (average over the block's L queries — divided by L even for a partial last block —
//           and over the G query heads of the group; A is the softmax attention of the
//           UNCOMPRESSED model), and the future scores
//               α[h', k, t] = max_{j ≥ t} bs[h', k, j]      (Eq. 5; `future=max`)
//   then    the real run (generation or teacher-forced scoring) with OraclePolicy: at each
//           compression, per (layer, kv_head), keep the `window` most recent tokens (default L,
//           the golden's protected R_t), `sinks` first tokens (default 0: the golden has none)
//           and the top-(B − window − sinks) of the rest by α at that step; the L lowest-α are
//           evicted.
//
// Query blocks. The engine compresses a head when its length reaches B + L (every L tokens:
// ScheduledPolicy with buffer = L), and once at the end of a prompt longer than B. So the
// compression points are s_m = g0 + m·L with g0 = P when P > B, else g0 = B + L, and the blocks
// are Q_j = [g0 + j·L, min(g0 + (j+1)·L, T)). For P ≤ B this is exactly the note's
// Q_j = [B + (j+1)L, …) and C_0 = {0 … B−1}. At a compression with s tokens seen, t is the first
// block starting at or after s (t = ⌈(s − g0)/L⌉); with no block left every α is 0 (ties keep the
// lower position).
//
// Ambiguities, as parameters (defaults = the note's spec):
//   future=max   Eq. 5's suffix max over future blocks; `sum` / `mean` over the future blocks are
//                the note's "Golden-sum" variant (§5.3, a check against the App. A bound).
//   window=-1    the protected recent tokens; −1 = L (= buffer), as the golden protects R_t.
//   sinks=0      the golden protects no sinks (§5.4 item 21).
//   tie-break    lower position kept (scoring::select_keep; the code's torch.topk is unspecified).
// Fixed by the note, not parameters: average pooling over the block's queries and over the GQA
// group (§1.4 "both poolings are average pooling"; §5.4 item 14), attention from the full cache.
// Budget kinds: tokens only (the block grid needs a fixed B); compress=chunked is refused (the
// grid assumes compressions at the end of the prompt); decode=false evicts only at the end
// of the prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/scheduled.h"

namespace kvb {

/// How the future blocks' scores are reduced into α (parameter `future`).
enum class OracleFuture { kMax, kSum, kMean };

/// The recorded future-attention scores of one trace (pass 2), for one (B, L) grid.
/// Shapes: bs and alpha are [num_layers, num_kv_heads, num_blocks, trace_len] f64, row-major;
/// entry k of block j is 0 for keys k after every query of the block (causal).
struct OracleScores {
  int num_layers = 0, num_kv_heads = 0, group = 0;  ///< G = query heads per kv head
  int64_t trace_len = 0;                            ///< T = prompt + continuation tokens
  int64_t prompt_len = 0;                           ///< P
  int64_t budget = 0;                               ///< B (tokens per (layer, kv_head))
  int64_t block = 0;                                ///< L (= the policy's buffer)
  int64_t grid0 = 0;                                ///< g0: start of block 0 (P when P > B, else B + L)
  int64_t num_blocks = 0;                           ///< ⌈(T − g0) / L⌉, 0 when T ≤ g0
  OracleFuture future = OracleFuture::kMax;
  std::vector<double> bs;     ///< block scores (Eq. 3–4)
  std::vector<double> alpha;  ///< future scores (Eq. 5 or the sum/mean variant); set by finalize()
  bool finalized = false;

  /// Allocates an empty grid for a trace of `trace_len` tokens whose first `prompt_len` are the
  /// prompt. Throws kvb::Error when prompt_len < 1, trace_len < prompt_len, budget < 1 or block < 1.
  static std::shared_ptr<OracleScores> make(int num_layers, int num_kv_heads, int group, int64_t prompt_len,
                                            int64_t trace_len, int64_t budget, int64_t block, OracleFuture future);
  /// Index of block j's row of (layer, kv_head h) in bs / alpha.
  size_t row(int layer, int h, int64_t j) const {
    return ((static_cast<size_t>(layer) * num_kv_heads + h) * num_blocks + j) * trace_len;
  }
  /// The block containing query position q, or −1 when q < g0 (before the first compression).
  int64_t block_of(int64_t q) const { return q < grid0 ? -1 : (q - grid0) / block; }
  /// The first block starting at or after s (t = ⌈(s − g0)/L⌉, 0 when s ≤ g0).
  int64_t first_future_block(int64_t s) const;
  /// Computes alpha from bs: for each t, the max / sum / mean of bs over blocks j ≥ t.
  void finalize();
  /// α of the key at absolute position `key_pos` for a compression after `seq_len` tokens were
  /// seen (0 when no block starts at or after seq_len). Requires finalize(); throws kvb::Error on
  /// out-of-range positions.
  double future_score(int layer, int h, int64_t key_pos, int64_t seq_len) const;
};

/// Pass-2 recorder: a full-cache policy (never evicts) that adds each step's attention
/// (PolicyNeeds::attention_colsum: per kv head, the sum over the group's G query heads of each
/// key's softmax probability) divided by G·L into the block of that step's query. It needs one
/// query per step (run the engine with EngineOptions::prefill_chunk = 1 and teacher-force the
/// continuation) and the full cache; throws kvb::Error otherwise.
class OracleRecorder : public Policy {
 public:
  explicit OracleRecorder(std::shared_ptr<OracleScores> scores) : scores_(std::move(scores)) {}
  std::string name() const override { return "oracle_recorder"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override;
  void on_layer_step(LayerStep& step) override;

 private:
  std::shared_ptr<OracleScores> scores_;
};

/// The oracle policy (real run). Without scores (set_scores) its first layer step throws
/// kvb::Error explaining the two-pass mode.
class OraclePolicy : public ScheduledPolicy {
 public:
  explicit OraclePolicy(PolicyParams p);
  PolicyNeeds needs() const override { return {}; }
  nlohmann::json resolved_params() const override;
  void on_layer_step(LayerStep& step) override;

  /// Installs the recorded scores of the trace the next sequence will follow. Throws kvb::Error
  /// when they were recorded for another budget, block length or future reduction, or are not
  /// finalized.
  void set_scores(std::shared_ptr<const OracleScores> scores);
  const std::shared_ptr<const OracleScores>& scores() const { return scores_; }
  int64_t budget() const { return budget_; }
  int64_t block() const { return buffer_; }
  OracleFuture future() const { return future_; }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override;

 private:
  OracleFuture future_ = OracleFuture::kMax;
  std::shared_ptr<const OracleScores> scores_;
};

}  // namespace kvb
