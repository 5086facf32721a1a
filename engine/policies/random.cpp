// `random`: keeps a uniformly random subset (a floor for every other policy).
// Source: kvpress RandomPress (scores = uniform random numbers, keep the top n_kept); docs/policies.md,
// `random`. Choices: the score of a token is a SplitMix64 hash of (seed, layer,
// kv_head, token position, tokens seen) mapped to [0, 1), so the same seed gives the same
// keep-sets in every run and on every backend (kvpress draws from torch's generator, so its
// keep-sets cannot be reproduced bit for bit). Schedule defaults as the decode-time baselines
// (buffer 128, no window, no sinks).
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class RandomPolicy : public ScheduledPolicy {
 public:
  explicit RandomPolicy(PolicyParams p) : ScheduledPolicy("random", std::move(p)) { params_.bind({{"seed", &seed_}}); }
  PolicyNeeds needs() const override { return {}; }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    for (int32_t i = 0; i < L; ++i) {
      const int32_t pos = step.cache->position(step.seq, step.layer, h, i);
      scores[i] =
          static_cast<float>(scoring::hash_uniform({seed_, static_cast<uint64_t>(step.layer), static_cast<uint64_t>(h),
                                                    static_cast<uint64_t>(pos), static_cast<uint64_t>(step.seq_len)}));
    }
  }

 private:
  uint64_t seed_ = 0;
};

}  // namespace

KVB_POLICY(random) { return policy_entry<RandomPolicy>("random").with_tests({.min_budget = 1}); }

}  // namespace kvb
