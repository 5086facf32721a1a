// `knorm`: keeps the keys with the smallest L2 norm.
// Sources: Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression"
// (arXiv 2406.11430, §3–§4: a low key norm goes with a high attention score, so the cache keeps
// the tokens whose keys have the lowest L2 norm); kvpress 0.5.5 KnormPress.score (NVIDIA/kvpress,
// PyPI kvpress==0.5.5, kvpress/presses/knorm_press.py: score = −‖k‖₂ per kv head, accumulated in at
// least f32, every token scored — no window, no sinks — top n_kept kept per head).
// Choices: no window and no sinks (kvpress); the kvbench decode schedule (every `buffer` = 128
// tokens, as `keydiff`); `decode=false` is exactly kvpress's prefill-only KnormPress. Each kv head
// is scored on its own keys, so there is no GQA reduction and no query is needed.
#include <cmath>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class KnormPolicy : public ScheduledPolicy {
 public:
  explicit KnormPolicy(PolicyParams p) : ScheduledPolicy("knorm", std::move(p)) {}
  PolicyNeeds needs() const override { return {.host_kv = true}; }  // the score is the norm of the cached keys

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const std::vector<double> n2 = scoring::row_sq_norms(*step.cache, step.seq, step.layer, h, /*values=*/false);
    for (int32_t i = 0; i < L; ++i) scores[i] = static_cast<float>(-std::sqrt(n2[i]));
  }
  bool token_local() const override { return true; }
};

}  // namespace

KVB_POLICY(knorm) { return policy_entry<KnormPolicy>("knorm").with_tests({.min_budget = 1}); }

}  // namespace kvb
