// `gkv`: G-KV — decode-time eviction with a decayed global (historical) attention score.
// Sources: Liao et al., "G-KV: Decoding-Time KV Cache Eviction with Global Attention" (arXiv
// 2512.00504): §3 Eq. 1–2 (local score), §5 Eq. 3–5 (global score), App. D (normalised R-KV
// redundancy, F′ = λ·F − (1 − λ)·R′); docs/policies.md, `gkv` (the code's exact order
// of operations, ambiguities). Per (layer, kv_head), at a compression with L cached tokens:
//   S  = attention of the last w = 16 queries: softmax per query head over all L keys (causal
//        inside the window), max over the GQA group, mean over the w queries, first L − w kept;
//   Ŝ  = S / max S (max-normalisation; `normalize=false` is the code's --disable_norm);
//   F  = max(α·F_prev, Ŝ) (form=max, Eq. 3, default), α·F_prev + (1 − α)·Ŝ (mean, Eq. 4) or
//        α·F_prev + Ŝ (sum, Eq. 5) for tokens that kept a score at the previous compression, Ŝ
//        for the others (the previous window and the tokens added since); α = 0.8;
//   R′ = exp(c_j − max_{k<L−w} c_k), c_j = (1/L) Σ_n cos(k_j, k_n) with the diagonal and each key's
//        most recent > 0.5 near-duplicate excluded (the code's rule, not the paper's wording);
//   keep the top L' = B − w by λ·F − (1 − λ)·R′ (F alone when redundancy=false) + the w newest;
//   store F (not the combined score) for the kept older tokens; the window keeps no history.
// Choices: λ = 0.5 (every released script; App. D's best values are 0.7 for Qwen-7B and 0.9 for
// Llama-8B: lambda=0.7); redundancy on (the released G-KV recipe); no pooling, no sinks (by
// design). Schedule: every `buffer` = s = 128 tokens via the shared "length ≥ B + buffer" rule and
// at the end of a prompt longer than B (the code counts forward calls from the prefill; the
// peak B + s is the same). F lives in cache scalar 0, its validity flag in scalar 1.
#include <algorithm>
#include <cmath>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class GKVPolicy : public ScheduledPolicy {
 public:
  explicit GKVPolicy(PolicyParams p) : ScheduledPolicy("gkv", std::move(p)) {
    params_.bind({{"alpha", &alpha_, within(0, 1)},
                  {"form", &form_, one_of({"max", "mean", "sum"})},
                  {"normalize", &normalize_},
                  {"redundancy", &redundancy_},
                  {"lambda", &lambda_, within(0, 1)},
                  {"threshold", &threshold_}});
    params_.check_min("window", window_, 1);
  }
  PolicyNeeds needs() const override { return {.window_queries = window_, .num_scalars = 2, .host_kv = true}; }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    older_ = 0;
    int w = 0;
    std::vector<float> s = scoring::window_scores(step, h, {scoring::Gqa::kMax, scoring::Pool::kNone, 1}, &w);
    const int32_t n = static_cast<int32_t>(s.size());
    if (n == 0) return;
    if (normalize_) {
      float mx = *std::max_element(s.begin(), s.end());
      if (mx > 0)
        for (float& v : s) v /= mx;
    }
    global_.assign(L, 0.f);
    for (int32_t j = 0; j < n; ++j) {
      const float* sc = step.cache->scalars(step.seq, step.layer, h, j);
      float f = s[j];
      if (alpha_ > 0 && sc[1] != 0.f) {
        const float prev = static_cast<float>(alpha_) * sc[0];
        if (form_ == "max") f = std::max(prev, s[j]);
        else if (form_ == "mean") f = prev + static_cast<float>(1 - alpha_) * s[j];
        else f = prev + s[j];
      }
      global_[j] = f;
      scores[j] = f;
    }
    if (redundancy_) {
      std::vector<float> c =
          scoring::key_redundancy_mean(*step.cache, step.seq, step.layer, h, threshold_, /*zero_first=*/false);
      const float cmax = *std::max_element(c.begin(), c.begin() + n);
      for (int32_t j = 0; j < n; ++j)
        scores[j] = static_cast<float>(lambda_ * global_[j] - (1 - lambda_) * std::exp(c[j] - cmax));
    }
    older_ = n;
  }
  void kept(LayerStep& step, int h, const std::vector<int32_t>& keep, const std::vector<float>&) override {
    for (int32_t i : keep) {
      float* sc = step.cache->scalars(step.seq, step.layer, h, i);
      if (i < older_) {
        sc[0] = global_[i];
        sc[1] = 1.f;
      } else {
        sc[0] = 0.f;
        sc[1] = 0.f;
      }
    }
  }

 private:
  double alpha_ = 0.8, lambda_ = 0.5;
  std::string form_ = "max";
  bool normalize_ = true, redundancy_ = true;
  float threshold_ = 0.5f;
  std::vector<float> global_;  // F of the head being compressed (scratch)
  int32_t older_ = 0;
};

}  // namespace

KVB_POLICY(gkv) { return policy_entry<GKVPolicy>("gkv").with_tests({.min_budget = 17}); }

}  // namespace kvb
