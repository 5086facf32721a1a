// `morphkv`: recent window + the older tokens the window attends to most, evicted every step.
// Sources: Ghadia et al., "Dialogue Without Limits: Constant-Sized KV Caches for Extended Responses
// in LLMs" (ICML 2025, arXiv 2503.00979, §3: keep the R most recent tokens and the C older tokens
// with the highest attention from those R queries, fused over the window by sum or max; eviction at
// every decoding step keeps the cache constant); reference ghadiaravi13/MorphKV (README: LongBench
// `-ws 32 --morph_type sum_fused`, long-response LongGenBench `-ws 200 --morph_type max_fused`);
// docs/policies.md (G-KV's MorphKV baseline = "local score only": per-head softmax over all keys,
// max over the GQA group, mean over the window, no pooling, window 16, every 128 tokens).
// Choices: score of an older token = fusion over the `window` newest queries (sum or max) of its
// softmax attention (per query head over all cached keys, causal inside the window), reduced over
// the GQA group by `gqa` (max, as G-KV's restatement; the reference keeps the union of per-query-
// head selections, which gives kv heads unequal sizes and is not modelled); keep the top
// B − window plus the window. Defaults: window 32, fusion sum (the LongBench setting), buffer 1
// (the paper's per-step eviction). G-KV's setting: `window=16,buffer=128`.
#include <algorithm>
#include <cmath>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class MorphKVPolicy : public ScheduledPolicy {
 public:
  explicit MorphKVPolicy(PolicyParams p) : ScheduledPolicy("morphkv", std::move(p)) {
    params_.bind(
        {{"fusion", &max_fusion_, one_of({"sum", "max"}, "max")}, {"gqa", &max_gqa_, one_of({"max", "mean"}, "max")}});
    params_.check_min("window", window_, 1, "the recent window scores the older tokens");
  }
  PolicyNeeds needs() const override { return {.window_queries = window_}; }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const int G = step.num_q_heads / step.num_kv_heads;
    int w = 0;
    const std::vector<float> p = scoring::window_probs(step, h, &w);  // [G, w, L]
    for (int32_t i = 0; i < L; ++i) {
      float red = max_gqa_ ? -INFINITY : 0.f;
      for (int g = 0; g < G; ++g) {
        float f = max_fusion_ ? -INFINITY : 0.f;
        for (int r = 0; r < w; ++r) {
          const float v = p[(static_cast<size_t>(g) * w + r) * L + i];
          f = max_fusion_ ? std::max(f, v) : f + v;
        }
        red = max_gqa_ ? std::max(red, f) : red + f / G;
      }
      scores[i] = red;
    }
  }

 private:
  bool max_fusion_ = false, max_gqa_ = true;
};

}  // namespace

KVB_POLICY(morphkv) { return policy_entry<MorphKVPolicy>("morphkv").with_tests({.min_budget = 33}); }

}  // namespace kvb
