// `tova`: Token Omission Via Attention — the attention of the newest query, averaged over heads.
// Sources: Oren et al., "Transformers are Multi-State RNNs" (arXiv 2401.06104, §3.3: when the
// cache exceeds its budget, drop the token with the lowest attention score from the current query,
// the score averaged over the layer's heads, so every head of a layer keeps the same tokens;
// reference cache schwartz-lab-NLP/TOVA src/tova_cache.py); kvpress 0.5.5 TOVAPress.score
// (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/tova_press.py: softmax attention of the
// last query over all keys but itself, `attn.mean(1)` over ALL query heads of the layer, repeated
// for every kv head; the last token padded with max + 1 so it is always kept).
// Choices: the score is the last query's softmax attention (over all of a head's cached keys,
// the newest included) averaged over every query head of the layer — the kv heads of a layer share
// one keep-set, so they keep equal lengths and the same positions. `window=1` protects the newest
// token (kvpress's max + 1 pad). `buffer=1` is the paper's per-step eviction (the default, as the
// TOVA reference cache); `decode=false` is kvpress's prefill-only TOVAPress; `buffer=128` puts it
// on the seeds' decode schedule.
#include "engine/policies/layer_score_cache.h"
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class TovaPolicy : public ScheduledPolicy {
 public:
  explicit TovaPolicy(PolicyParams p) : ScheduledPolicy("tova", std::move(p)) {}
  PolicyNeeds needs() const override { return {.window_queries = 1}; }  // the newest query only
  void on_sequence_end(SeqId seq) override { layer_scores_.forget(seq); }

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    // Mean over every query head of the layer of the newest query's attention.
    layer_scores_.score(step, L, "tova", "TOVA", scores, [&](std::vector<float>& row) {
      const int G = step.num_q_heads / step.num_kv_heads;
      for (int hk = 0; hk < step.num_kv_heads; ++hk) {
        int w = 0;
        const std::vector<float> p = scoring::window_probs(step, hk, &w);  // [G, w, L]
        if (w < 1) fail("policy 'tova': no query to score with");
        for (int g = 0; g < G; ++g) {
          const float* q = p.data() + (static_cast<size_t>(g) * w + (w - 1)) * L;
          for (int32_t i = 0; i < L; ++i) row[i] += q[i];
        }
      }
      for (float& v : row) v /= static_cast<float>(step.num_q_heads);
    });
  }

 private:
  LayerScoreCache layer_scores_;
};

}  // namespace

KVB_POLICY(tova) { return policy_entry<TovaPolicy>("tova").with_tests({.min_budget = 2}); }

}  // namespace kvb
