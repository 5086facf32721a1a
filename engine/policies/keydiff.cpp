// `keydiff`: keeps the most distinctive keys.
// Source: Park et al., "KeyDiff: Key Similarity-Based KV Cache Eviction" (arXiv 2504.15364, §3:
// score s_i = −cos(k_i, μ) with the anchor μ = mean of the L2-normalised keys of the head);
// kvpress KeyDiffPress.score (anchor = F.normalize(keys).mean over tokens, including the
// window); docs/policies.md
// Choices (the decode-time schedule of KeyDiff in TRIM-KV is unpublished, §5.6 "inferred"):
// R-KV-style schedule, buffer 128, the 8 most recent tokens protected, no sinks. The anchor is
// computed over all L cached keys of the head (as kvpress), protected ones included.
#include <cmath>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"

namespace kvb {
namespace {

class KeyDiffPolicy : public ScheduledPolicy {
 public:
  explicit KeyDiffPolicy(PolicyParams p) : ScheduledPolicy("keydiff", std::move(p)) {}
  PolicyNeeds needs() const override { return {.host_kv = true}; }  // key diversity is computed from the cached keys

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const int D = step.head_dim;
    std::vector<double> mu(D, 0.0);
    std::vector<float> norm(L);
    for (int32_t i = 0; i < L; ++i) {
      const float* k = step.cache->key(step.seq, step.layer, h, i);
      double n2 = 0;
      for (int d = 0; d < D; ++d) n2 += static_cast<double>(k[d]) * k[d];
      norm[i] = static_cast<float>(std::sqrt(n2));
      const double inv = 1.0 / std::max(static_cast<double>(norm[i]), 1e-12);  // F.normalize eps
      for (int d = 0; d < D; ++d) mu[d] += k[d] * inv;
    }
    double mu_n2 = 0;
    for (int d = 0; d < D; ++d) {
      mu[d] /= L;
      mu_n2 += mu[d] * mu[d];
    }
    const double mu_norm = std::sqrt(mu_n2);
    for (int32_t i = 0; i < L; ++i) {
      const float* k = step.cache->key(step.seq, step.layer, h, i);
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += k[d] * mu[d];
      // torch.cosine_similarity: x·y / max(‖x‖·‖y‖, eps), eps = 1e-8
      scores[i] = static_cast<float>(-dot / std::max(static_cast<double>(norm[i]) * mu_norm, 1e-8));
    }
  }
};

}  // namespace

KVB_POLICY(keydiff) {
  return policy_entry<KeyDiffPolicy>(
             "keydiff", "-cos(key, mean normalised key): keep distinctive keys (KeyDiff §3; kvpress KeyDiffPress)",
             schedule_params(/*buffer=*/128, /*window=*/8, /*sinks=*/0))
      .with_tests({.min_budget = 9});
}

}  // namespace kvb
