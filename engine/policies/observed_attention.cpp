// `observed_attention`: the attention a token has received, averaged over the queries that could
// see it.
// Sources: kvpress 0.5.5 ObservedAttentionPress.score (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/observed_attention_press.py: the eager attention matrix of the whole prompt,
// summed over the queries, divided per key by the number of causal queries that attend to it
// (L − j for key j of an L-token prompt), averaged over the GQA group; top n_kept per kv head, no
// window, no sinks); the accumulated-attention idea of H2O (Zhang et al., arXiv 2306.14048, §3.3),
// here normalised by the number of queries so that old tokens are not favoured for their age.
// Choices: the column sums are accumulated in a per-token cache scalar at every step
// (scoring::accumulate_attention, as `h2o`), so a chunked prefill gives the same sums as kvpress's
// one eager pass; the divisor is (tokens seen − position), which equals kvpress's L − j at the end
// of the prompt and counts the decode queries too; the group mean divides by G. Defaults: kvpress's
// scoring (no window, no sinks) on the kvbench decode schedule (buffer 128, as `knorm`);
// `decode=false` is kvpress's prefill-only press.
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class ObservedAttentionPolicy : public ScheduledPolicy {
 public:
  explicit ObservedAttentionPolicy(PolicyParams p) : ScheduledPolicy("observed_attention", std::move(p)) {}
  PolicyNeeds needs() const override { return {.attention_colsum = true, .num_scalars = 1}; }

 protected:
  void observe(LayerStep& step) override { scoring::accumulate_attention(step, "observed_attention", 0); }

  /// Score of token i = accumulated attention / (G · (seq_len − position(i))).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const float G = static_cast<float>(step.num_q_heads / step.num_kv_heads);
    for (int32_t i = 0; i < L; ++i) {
      const float seen = static_cast<float>(step.seq_len - step.cache->position(step.seq, step.layer, h, i));
      scores[i] = step.cache->scalars(step.seq, step.layer, h, i)[0] / seen / G;
    }
  }
};

}  // namespace

KVB_POLICY(observed_attention) {
  return policy_entry<ObservedAttentionPolicy>("observed_attention").with_tests({.min_budget = 1});
}

}  // namespace kvb
