// `lagkv`: lag-relative scoring — each partition of the cache is judged against the partition
// that follows it.
// Sources: Liang et al., "LagKV: Lag-Relative Information of the KV Cache Tells Which Tokens Are
// Important" (arXiv 2504.04704, §3: the sequence after the sink tokens is cut into partitions of
// `lag` tokens; the keys and values of partition p are min-max normalised per channel by the
// channel range of partition p + 1, the standard deviation over the channels of each normalised
// row is its information, a softmax over the partition turns it into a score, and the key and
// value scores are averaged); kvpress 0.5.5 LagKVPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/lagkv_press.py: n_sink 4, lag_size 128, cross_scoring false: the averaged score
// is replaced by its rank inside the partition divided by lag_size, so every scored partition
// contributes equally; the sinks and the last partition with the remainder, lag_size + (L −
// n_sink) mod lag_size tokens, score 1 and are always kept; a head of fewer than n_sink +
// 2 · lag_size tokens scores (i − n_sink) / (L − n_sink), keeping the newest; ScorerPress keeps
// the top n_kept per kv head).
// Choices: n_sink is the schedule's `sinks` (default 4) and is protected as in every scheduled
// policy; `lag` is lag_size; `cross=true` keeps the raw averaged score (kvpress cross_scoring).
// Arithmetic: the normalised rows' standard deviation (unbiased, as torch.std) and the softmax are
// in double, the scores stored as f32. Rank ties across partitions (one per partition and rank)
// go to the lower index (torch.topk's order is unspecified). Decode: the kvbench schedule (buffer
// 128; `decode=false` is kvpress's prefill-only press), partitions counted from the oldest cached
// token.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class LagKVPolicy : public ScheduledPolicy {
 public:
  explicit LagKVPolicy(PolicyParams p) : ScheduledPolicy("lagkv", std::move(p)) {
    params_.bind({{"lag", &lag_, within(1, 1 << 20)}, {"cross", &cross_}});
  }
  PolicyNeeds needs() const override { return {.host_kv = true}; }  // scores read the cached keys and values

 protected:
  /// kvpress LagKVPress.score of head h: sinks and the tail at 1, each scored partition's tokens at
  /// their rank / lag (or the raw key/value mean with cross=true); a short head counts up to 1.
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const int32_t n_sink = std::min(sinks_, L);
    std::fill(scores.begin(), scores.begin() + L, 1.0f);
    if (L < sinks_ + 2 * lag_) {
      for (int32_t i = n_sink; i < L; ++i) scores[i] = static_cast<float>(i - n_sink) / static_cast<float>(L - n_sink);
      return;
    }
    const int32_t parts = (L - n_sink) / lag_;  // the last one (with the remainder) is only a reference
    const KVCache& c = *step.cache;
    const auto key = [&](int32_t i) { return c.key(step.seq, step.layer, h, i); };
    const auto value = [&](int32_t i) { return c.value(step.seq, step.layer, h, i); };
    std::vector<double> ks, vs;
    std::vector<int32_t> order(lag_);
    for (int32_t p = 0; p + 1 < parts; ++p) {
      const int32_t first = n_sink + p * lag_;
      ks = scoring::lag_relative_info(key, step.head_dim, first, lag_);
      vs = scoring::lag_relative_info(value, step.head_dim, first, lag_);
      for (int32_t t = 0; t < lag_; ++t) ks[t] = (ks[t] + vs[t]) / 2;
      if (cross_) {
        for (int32_t t = 0; t < lag_; ++t) scores[first + t] = static_cast<float>(ks[t]);
        continue;
      }
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ks[a] < ks[b]; });
      for (int32_t r = 0; r < lag_; ++r) scores[first + order[r]] = static_cast<float>(r) / static_cast<float>(lag_);
    }
  }

 private:
  int32_t lag_ = 128;
  bool cross_ = false;
};

}  // namespace

KVB_POLICY(lagkv) { return policy_entry<LagKVPolicy>("lagkv").with_tests({.min_budget = 5}); }

}  // namespace kvb
