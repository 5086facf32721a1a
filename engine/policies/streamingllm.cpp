// `streamingllm`: attention sinks + the most recent tokens.
// Source: Xiao et al., "Efficient Streaming Language Models with Attention Sinks" (arXiv
// 2309.17453, §3.2: keep 4 initial "sink" tokens plus a rolling window of recent tokens);
// docs/policies.md (R-KV's version used as the TRIM-KV baseline: first_tokens =
// 4 sinks + the most recent B − 4, applied on the 128-token schedule); kvpress StreamingLLMPress
// (n_sink = 4; keeps the first n_sink and the last n_kept − n_sink tokens).
// Choices: after a compression a head holds `sinks` first tokens + the last (budget − sinks);
// buffer defaults to 128 (the seeds' decode schedule, §5.4); buffer=1 is the original paper's
// per-step rolling window. Positions are not re-indexed (keys stay rotated at their original
// positions, as in R-KV and kvpress; the paper's in-cache re-positioning is not modelled).
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"

namespace kvb {
namespace {

class StreamingLLMPolicy : public ScheduledPolicy {
 public:
  explicit StreamingLLMPolicy(PolicyParams p) : ScheduledPolicy("streamingllm", std::move(p)) {
    refuse_threshold("it keeps tokens by position and scores none");
  }
  PolicyNeeds needs() const override { return {}; }

 protected:
  void score(LayerStep&, int, int32_t, std::vector<float>&) override {}
  std::vector<int32_t> select(const std::vector<float>&, int32_t L, int64_t B) override {
    std::vector<int32_t> keep;
    const int32_t s = std::min<int32_t>(sinks_, L);
    for (int32_t i = 0; i < s; ++i) keep.push_back(i);
    const int64_t recent = std::max<int64_t>(B - s, 0);
    for (int64_t i = std::max<int64_t>(L - recent, s); i < L; ++i) keep.push_back(static_cast<int32_t>(i));
    return keep;
  }
};

}  // namespace

KVB_POLICY(streamingllm) { return policy_entry<StreamingLLMPolicy>("streamingllm").with_tests({.min_budget = 5}); }

}  // namespace kvb
