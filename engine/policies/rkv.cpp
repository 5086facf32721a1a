// `rkv`: R-KV — importance minus redundancy, decode-time.
// Sources: Cai et al., "R-KV: Redundancy-aware KV Cache Compression for Reasoning Models" (arXiv
// 2505.24133, §3); docs/policies.md, `rkv` (the code's exact scoring, the
// schedule, TRIM-KV's configuration). Per (layer, kv_head):
//   importance I: logits of the last w = 8 queries, max over the GQA group (pre-softmax), softmax
//     over the N − w older keys, mean over the w queries, max-pool kernel 7 (stride 1, pad 3);
//   redundancy R: key cosine matrix, diagonal zeroed; per row i the most recent k with cos > 0.5
//     is zeroed (R-KV's "last" retention); when no k qualifies R-KV zeroes column 0 of the row
//     (reproduced); column mean over the N rows, softmax over all N tokens, sliced to the older N − w;
//   score = λ·I − (1 − λ)·R with λ = 0.1; keep the top B − w older tokens + the w newest.
// Choices: λ = 0.1 (paper table, README, RKV-later, TRIM-KV's harness; 0.07 is the class default
// in RKV-0613, settable with lambda=0.07). Schedule: compress a head once it holds B + buffer
// tokens (buffer 128) and at the end of a prompt longer than B — RKV-later's "resident length ≥
// B + buffer" formalisation of the 128-step trigger (§3.2); the RKV-0613 trigger aligned to
// absolute length multiples of 128 is not modelled. Keys' norm eps 1e-8 (R-KV's torch version).
#include <algorithm>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class RKVPolicy : public ScheduledPolicy {
 public:
  explicit RKVPolicy(PolicyParams p) : ScheduledPolicy("rkv", std::move(p)) {
    params_.bind({{"lambda", &lambda_, within(0, 1)}, {"kernel", &kernel_, at_least(1)}, {"threshold", &threshold_}});
    params_.check_min("window", window_, 1);
  }
  PolicyNeeds needs() const override { return {.window_queries = window_, .host_kv = true}; }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    int w = 0;
    std::vector<float> imp =
        scoring::window_scores(step, h, {scoring::Gqa::kMaxLogits, scoring::Pool::kMax, kernel_}, &w);
    std::vector<float> red =
        scoring::key_redundancy_mean(*step.cache, step.seq, step.layer, h, threshold_, /*zero_first=*/true);
    scoring::softmax_inplace(red);
    for (size_t i = 0; i < imp.size(); ++i) scores[i] = static_cast<float>(lambda_ * imp[i] - (1.0 - lambda_) * red[i]);
  }

 private:
  double lambda_ = 0.1;
  int kernel_ = 7;
  float threshold_ = 0.5f;
};

}  // namespace

KVB_POLICY(rkv) { return policy_entry<RKVPolicy>("rkv").with_tests({.min_budget = 9}); }

}  // namespace kvb
