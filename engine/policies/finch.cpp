// `finch`: the question's attention over the context, each query row weighted by its position,
// the question kept, the kept keys re-rotated.
// Sources: Corallo & Papotti, "FINCH: Prompt-guided Key-Value Cache Compression for Large Language
// Models" (TACL 2024, §3); kvpress 0.5.5 FinchPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/finch_press.py): the prompt is `context + delimiter + question`, the delimiter
// token is dropped from the embeddings and sets window_size = the question's length; the score of
// a context token is the softmax attention (over every key, causal) of the window's queries,
// query row r multiplied by k_len − w + r (normalize_scores), averaged over the w queries and then
// over the GQA group; the window scores the layer's largest score + 1 and so is kept; the top
// int((1 − r) · k_len) are kept (chunk_length: each chunk of chunk_length positions keeps its own
// int((1 − r) · n), at least 1); the kept keys are re-rotated to their ranks (rerotate_keys).
// Choices: kvbench has no delimiter token: `window` is the question's token count, given in the
// spec (as kvcompose's), and the question is the last `window` prompt tokens; the window is
// protected rather than scored max + 1, which keeps the same tokens whenever the budget holds the
// window (kvpress asserts chunk_length > window / (1 − r) for the chunked form). chunk_length is
// the shared option press_chunk=N with budget_kind=ratio,ratio=1 − r (ChunkPress's per-chunk
// rule, scheduled.h chunk_select); rerotate_keys=true re-rotates as rerotate=true does
// (rerotation.h), so the two are not combined. The scores are double sums of the f32 attention.
// kvpress compresses once after the prompt (decode=false); with decode=true the same score runs
// on the budget/buffer schedule with the last `window` queries.
#include <algorithm>
#include <limits>

#include "engine/policies/registration.h"
#include "engine/policies/rerotation.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class FinchPolicy : public ScheduledPolicy {
 public:
  explicit FinchPolicy(PolicyParams p) : ScheduledPolicy("finch", std::move(p)) {
    params_.check_min("window", window_, 1, "the question's tokens");
    normalize_ = params_.get_bool("normalize");
    rerotate_ = params_.get_bool("rerotate_keys");
  }
  PolicyNeeds needs() const override {
    PolicyNeeds n{.window_queries = window_};
    n.host_kv = n.writes_kv = rerotate_;
    return n;
  }
  void on_layer_step(LayerStep& step) override {
    ScheduledPolicy::on_layer_step(step);
    if (rerotate_)
      for (const auto& [h, keep] : step.keeps) rerotation::rerotate_kept(step, h, keep);
  }

 protected:
  /// The L − w context tokens: Σ_g Σ_r a[g, r, i] · (L − w + r) / (w · G) (without normalize, the
  /// factor is 1), a the window attention of kv head h (scoring::window_probs); the window's
  /// entries are left as they are (protected).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    int w = 0;
    const std::vector<float> a = scoring::window_probs(step, h, &w);
    const int G = step.num_q_heads / step.num_kv_heads;
    const int32_t n = L - w;
    for (int32_t i = 0; i < n; ++i) {
      double s = 0;
      for (int g = 0; g < G; ++g)
        for (int r = 0; r < w; ++r) {
          const double f = normalize_ ? static_cast<double>(n + r) : 1.0;
          s += a[(static_cast<size_t>(g) * w + r) * L + i] * f;
        }
      scores[i] = static_cast<float>(s / (static_cast<double>(w) * G));
    }
  }

 private:
  bool normalize_ = true, rerotate_ = true;
};

}  // namespace

KVB_POLICY(finch) { return policy_entry<FinchPolicy>("finch").with_tests({.min_budget = 9, .params = "window=8"}); }

}  // namespace kvb
