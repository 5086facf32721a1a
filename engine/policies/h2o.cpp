// `h2o`: Heavy-Hitter Oracle — accumulated attention + a recent window.
// Source: Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large
// Language Models" (arXiv 2306.14048, §3.3 / Alg. 1: a token's score is the attention it has
// received, summed over every query since it entered the cache; keep the heavy hitters plus the
// most recent tokens, the budget split equally between the two); docs/policies.md, `h2o`
// (the R-KV-repo H2O used by TRIM-KV is non-standard and partly broken, "treat the exact
// rule as unknown… a faithful decode-time H2O would be cumulative attention plus a recent
// window"); ForesightKV's H2O baseline is cumulative attention with the recent L protected.
// Choices: the score is stored per token in the cache (scalar 0) and accumulates, at every
// forward step, LayerStep::attention_colsum (sum over the GQA group's query heads and the step's
// queries of the token's attention probability), prefill included — the original cumulative
// H2O. window = -1 (default) protects the newest budget/2 tokens (the paper's 50/50 split);
// buffer 128 puts it on the seeds' decode schedule, buffer=1 is the paper's per-step eviction.
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class H2OPolicy : public ScheduledPolicy {
 public:
  explicit H2OPolicy(PolicyParams p) : ScheduledPolicy("h2o", std::move(p)) {}
  PolicyNeeds needs() const override { return {.attention_colsum = true, .num_scalars = 1}; }

 protected:
  void observe(LayerStep& step) override { scoring::accumulate_attention(step, "h2o", 0); }

  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    for (int32_t i = 0; i < L; ++i) scores[i] = step.cache->scalars(step.seq, step.layer, h, i)[0];
  }
};

}  // namespace

KVB_POLICY(h2o) { return policy_entry<H2OPolicy>("h2o").with_tests({.min_budget = 1}); }

}  // namespace kvb
