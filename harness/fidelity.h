// Policy fidelity against the full cache (`kvbench fidelity`, issue 4 "Fidelity command"): how
// closely a KV policy at a budget reproduces the full-cache model on real prompts, even on a
// model too small to solve benchmarks.
//
// Protocol, per prompt: the full-cache greedy continuation C (the reference trace) is generated
// once; then, per policy and budget,
//   * teacher-forced: Engine::score(prompt, C) under the policy and under the full cache; at each
//     of the |C| positions compare the next-token distributions: KL(full ‖ policy) (nats), NLL of
//     the reference token (policy − full, nats/token), top-1 agreement (argmax equal);
//   * free-running: greedy generation of |C| tokens under the policy, compared token by token with
//     C: the common prefix (% of |C| until the first divergence) and the position-wise agreement
//     (% of the |C| positions with the same token);
//   * memory: the peak K+V bytes of the held tokens during that generation
//     (GenerationResult::kv_token_bytes_peak), the tokens evicted, and the K+V bytes the decode
//     attention read per step (GenerationResult::kv_read_bytes; below the peak for `quest`).
// The `oracle` policy (engine/policies/oracle.h) is run in its two-pass mode: pass 2 records the
// future attention of prompt + C with the full cache, then both runs above follow that trace.
// Every prompt is prefilled in one chunk (prefill_chunk = the longest prompt), so every policy
// compresses the prompt once at its end, as the seeds' harnesses do.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/model.h"
#include "engine/policies/resolved.h"
#include "harness/cli_checks.h"

namespace kvb::fidelity {

/// KL(softmax(full) ‖ softmax(policy)) in nats, computed in double with max-subtracted
/// log-sum-exp (exact 0 for identical rows). `full` and `policy` are logits [V] f32.
double kl_from_logits(const float* full, const float* policy, int V);
/// −log softmax(logits)[target] in nats (double). Throws kvb::Error when target ∉ [0, V).
double nll_from_logits(const float* logits, int V, int32_t target);
/// Index of the largest logit (the lowest index on ties, as greedy sampling picks).
int32_t argmax(const float* logits, int V);

/// Greedy agreement of a generated sequence with the reference: `prefix` tokens equal before the
/// first divergence; percentages are of ref.size() (a shorter `got` counts its missing positions
/// as disagreements; tokens of `got` beyond ref.size() are ignored). 100/100 for an empty ref.
struct Agreement {
  int64_t prefix = 0;
  double prefix_pct = 100.0, overall_pct = 100.0;
};
Agreement greedy_agreement(std::span<const int32_t> ref, std::span<const int32_t> got);

/// Teacher-forced comparison over the first `continuation.size()` rows of two logit matrices
/// [≥ n, V] f32 (row i predicts continuation[i]): sums over the n positions (divide by
/// `positions` for means). Throws kvb::Error when either matrix has fewer than n rows.
struct TeacherForced {
  int64_t positions = 0;
  double kl_sum = 0, nll_full_sum = 0, nll_policy_sum = 0;
  int64_t top1_agree = 0;
};
TeacherForced compare_teacher_forced(std::span<const float> full_logits, std::span<const float> policy_logits,
                                     std::span<const int32_t> continuation, int V);

/// One prompt's reference: the prompt and the full-cache greedy continuation with its
/// teacher-forced logits and its K+V byte peak.
struct Reference {
  std::vector<int32_t> prompt, continuation;
  std::vector<float> full_logits;  ///< [continuation.size() + 1, V]
  size_t kv_token_bytes_peak = 0;  ///< of the full-cache generation
  double kv_read_bytes_step = 0;   ///< K+V bytes its decode attention read per step (bytes)
};

/// Builds the references (pass 1): greedy full-cache generation of at most `max_new_tokens` per
/// prompt (stopping after an id in `stop_ids`), then its teacher-forced full-cache logits.
/// Throws kvb::Error on an empty prompt or one that leaves no room in the model's context.
std::vector<Reference> make_references(std::shared_ptr<const Model> model,
                                       const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                                       const std::vector<int32_t>& stop_ids);

/// The aggregated result of one (policy, budget) over all references. Means are pooled over all
/// teacher-forced positions (kl_mean, nll_delta, top1_pct) or averaged over prompts (agreement,
/// bytes). `error` is set (and the numbers are left 0) when the policy could not be built for
/// this budget.
struct Row {
  std::string policy;  ///< the spec as given
  int64_t budget = 0;
  nlohmann::json resolved;  ///< Policy::resolved_params()
  int64_t prompts = 0, positions = 0;
  double kl_mean = 0, nll_full = 0, nll_policy = 0, nll_delta = 0, top1_pct = 0;
  double prefix_pct = 0, overall_pct = 0;
  double kv_bytes_peak = 0, kv_bytes_ratio = 0;  ///< mean peak K+V bytes; ÷ the full cache's
  double evictions = 0;                          ///< mean tokens evicted per prompt (generation)
  /// Mean over prompts of the K+V bytes the decode attention read per step during the greedy
  /// generation (GenerationResult::kv_read_bytes / decode_steps), and its ratio to the full
  /// cache's. Equal to what is held for eviction policies; less for Quest-style read selection.
  double kv_read_step = 0, kv_read_ratio = 0;
  std::string error;
};

/// Runs one resolved policy at one budget against the references (the oracle in two-pass mode).
/// Row::policy is its canonical text (ResolvedPolicy::text). Errors while building it at
/// `budget` (budget too small) are returned in Row::error; errors while running propagate as
/// kvb::Error.
Row evaluate(std::shared_ptr<const Model> model, const std::vector<Reference>& refs, const ResolvedPolicy& policy,
             int64_t budget, const std::vector<int32_t>& stop_ids);

/// The `--policies` list parser shared with `kvbench run` (harness/cli_checks.h).
using cli::split_policy_list;

/// The rows as a markdown table (one line per row; errors in the last column).
std::string markdown_table(const std::vector<Row>& rows);
/// The rows as JSON (an array of objects with every field of Row).
nlohmann::json to_json(const std::vector<Row>& rows);

}  // namespace kvb::fidelity
