// `keydiff`: keeps the most distinctive keys.
// Source: Park et al., "KeyDiff: Key Similarity-Based KV Cache Eviction" (arXiv 2504.15364, §3:
// score s_i = −cos(k_i, μ) with the anchor μ = mean of the L2-normalised keys of the head);
// kvpress KeyDiffPress.score (anchor = F.normalize(keys).mean over tokens, including the
// window); docs/policies.md
// Choices (the decode-time schedule of KeyDiff in TRIM-KV is unpublished, §5.6 "inferred"):
// R-KV-style schedule, buffer 128, the 8 most recent tokens protected, no sinks. The anchor is
// computed over all L cached keys of the head (as kvpress), protected ones included.
#include <algorithm>
#include <cmath>
#include <span>

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
    std::vector<int32_t> all(L);
    for (int32_t i = 0; i < L; ++i) all[i] = i;
    scores_over(step, h, all, scores);
  }
  /// The anchor is the mean normalised key of the subset (kvpress scores the gathered keys).
  bool score_subset(LayerStep& step, int h, std::span<const int32_t> subset, std::vector<float>& out) override {
    out.assign(subset.size(), 0.f);
    scores_over(step, h, subset, out);
    return true;
  }

 private:
  /// scores[j] = −cos(key of cache token idx[j], mean over idx of the normalised keys).
  static void scores_over(LayerStep& step, int h, std::span<const int32_t> idx, std::vector<float>& scores) {
    const int D = step.head_dim;
    const size_t L = idx.size();
    std::vector<double> mu(D, 0.0);
    std::vector<float> norm(L);
    for (size_t i = 0; i < L; ++i) {
      const float* k = step.cache->key(step.seq, step.layer, h, idx[i]);
      double n2 = 0;
      for (int d = 0; d < D; ++d) n2 += static_cast<double>(k[d]) * k[d];
      norm[i] = static_cast<float>(std::sqrt(n2));
      const double inv = 1.0 / std::max(static_cast<double>(norm[i]), 1e-12);  // F.normalize eps
      for (int d = 0; d < D; ++d) mu[d] += k[d] * inv;
    }
    double mu_n2 = 0;
    for (int d = 0; d < D; ++d) {
      mu[d] /= static_cast<double>(L);
      mu_n2 += mu[d] * mu[d];
    }
    const double mu_norm = std::sqrt(mu_n2);
    for (size_t i = 0; i < L; ++i) {
      const float* k = step.cache->key(step.seq, step.layer, h, idx[i]);
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += k[d] * mu[d];
      // torch.cosine_similarity: x·y / max(‖x‖·‖y‖, eps), eps = 1e-8
      scores[i] = static_cast<float>(-dot / std::max(static_cast<double>(norm[i]) * mu_norm, 1e-8));
    }
  }
};

}  // namespace

KVB_POLICY(keydiff) { return policy_entry<KeyDiffPolicy>("keydiff").with_tests({.min_budget = 9}); }

}  // namespace kvb
