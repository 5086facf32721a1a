// The two passes of the `oracle` policy (engine/policies/oracle.h; docs/policies.md), driven through the
// real engine. Header-only because it needs kvb::Engine, which links after the policy library.
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/policies/oracle.h"
#include "engine/util/error.h"

namespace kvb {

/// Pass 1: the full-cache greedy continuation of `prompt` (at most `max_new_tokens`, stopping
/// after an id in `stop_ids`, which is included). Throws kvb::Error like Engine::generate.
inline std::vector<int32_t> oracle_full_continuation(std::shared_ptr<const Model> model,
                                                     const std::vector<int32_t>& prompt, int max_new_tokens,
                                                     const std::vector<int32_t>& stop_ids = {}) {
  EngineOptions eo;
  eo.max_batch = 1;
  Engine e(std::move(model), eo, nullptr);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_new_tokens = max_new_tokens;
  r.stop_ids = stop_ids;
  return e.generate({r}, nullptr)[0].tokens;
}

/// Pass 2: a teacher-forced full-cache forward over prompt + continuation, one query per step
/// (prefill_chunk = 1), recording the block scores and future scores for the policy's budget,
/// block length L (= its buffer) and `future` reduction; installs them with
/// OraclePolicy::set_scores and returns them. The policy then follows this trace: generation of
/// at most continuation.size() tokens after `prompt`, or Engine::score(prompt, continuation).
/// Throws kvb::Error when the policy has no token budget or the trace exceeds the model context.
inline std::shared_ptr<const OracleScores> prepare_oracle(std::shared_ptr<const Model> model, OraclePolicy& policy,
                                                          const std::vector<int32_t>& prompt,
                                                          const std::vector<int32_t>& continuation) {
  const ModelConfig& c = model->config();
  if (policy.budget() <= 0) fail("oracle: needs a token budget (--budget) to record the future attention");
  const int64_t T = static_cast<int64_t>(prompt.size() + continuation.size());
  if (T > c.max_position_embeddings)
    fail("oracle: trace of {} tokens exceeds the model's context of {}", T, c.max_position_embeddings);
  auto scores = OracleScores::make(static_cast<int>(c.num_layers), static_cast<int>(c.num_kv_heads),
                                   static_cast<int>(c.num_heads / c.num_kv_heads), static_cast<int64_t>(prompt.size()),
                                   T, policy.budget(), policy.block(), policy.future());
  EngineOptions eo;
  eo.prefill_chunk = 1;
  eo.max_batch = 1;
  Engine e(std::move(model), eo, std::make_unique<OracleRecorder>(scores));
  e.score(prompt, continuation);
  scores->finalize();
  policy.set_scores(scores);
  return scores;
}

}  // namespace kvb
