// `simlayerkv`: "lazy" layers keep only their first and most recent tokens, the other layers keep
// everything.
// Sources: Zhang et al., "SimLayerKV: A Simple Framework for Layer-Level KV Cache Reduction"
// (arXiv 2410.13846, §3: a layer is lazy when its last queries put nearly all their attention on
// the initial and recent tokens; a lazy layer's cache is cut to those tokens); kvpress 0.5.5
// SimLayerKVPress (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/simlayerkv_press.py, with
// SnapKVPress.compute_window_attention: the n_last = 1 last post-RoPE queries of every query head
// attend, scaled by 1/√D, causal, f32 softmax over the whole cache; the probabilities of the
// L − n_last older keys are averaged over heads and queries; the layer is lazy when their sum over
// the first n_initial = 4 and the last n_recent = 1024 of those keys exceeds lazy_threshold
// (default 1.0: never); a lazy layer keeps its first n_initial tokens and its last n_recent − n_last;
// a prompt of at most n_initial + n_recent + n_last tokens is left whole; prefill only).
// Choices: the lazy test and the cut run once, at the end of each prompt, on every kv head of the
// layer (kvpress's layer-wide decision); there is no token budget (the keep rule is the layer's
// laziness); `compress=chunked` is refused (kvpress judges the whole prompt) and decode steps never
// evict. The attention is scoring::window_probs (the engine's window attention when it provides
// it), summed in double.
#include <algorithm>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

class SimLayerKVPolicy : public ParamPolicy {
 public:
  explicit SimLayerKVPolicy(PolicyParams p) : ParamPolicy("simlayerkv", std::move(p)) {
    params_.bind({{"lazy_threshold", &threshold_, within(0, 1)},
                  {"n_last", &n_last_, within(1, 1 << 20)},
                  {"n_recent", &n_recent_, within(1, 1 << 30)},
                  {"n_initial", &n_initial_, within(0, 1 << 30)}});
    if (parse_compress(params_)) params_.fail_param("compress", "must be prompt_end: SimLayerKV judges a whole prompt");
    if (n_recent_ < n_last_) params_.fail_param("n_recent", "must be >= n_last (the last n_last queries are recent)");
  }
  PolicyNeeds needs() const override { return {.window_queries = n_last_}; }

  /// At the end of a prompt: a lazy layer (attention share of the initial and recent tokens above
  /// lazy_threshold) keeps its first n_initial and last n_recent − n_last tokens in every kv head.
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill_last || threshold_ >= 1.0) return;
    const int32_t L = scoring::head_length(step, 0);
    if (L <= n_initial_ + n_recent_ + n_last_) return;
    double share = 0;
    int w = 0;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const std::vector<float> p = scoring::window_probs(step, h, &w);
      const int32_t Lh = scoring::head_length(step, h), older = Lh - w;
      const int G = step.num_q_heads / step.num_kv_heads;
      for (int row = 0; row < G * w; ++row) {
        const float* pr = p.data() + static_cast<size_t>(row) * Lh;
        for (int32_t i = 0; i < std::min(n_initial_, older); ++i) share += pr[i];
        for (int32_t i = std::max(0, older - n_recent_); i < older; ++i) share += pr[i];
      }
    }
    share /= static_cast<double>(step.num_q_heads) * w;
    if (share <= threshold_) return;
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t Lh = scoring::head_length(step, h);
      std::vector<int32_t> keep;
      for (int32_t i = 0; i < n_initial_; ++i) keep.push_back(i);
      for (int32_t i = Lh - (n_recent_ - n_last_); i < Lh; ++i) keep.push_back(i);
      step.keep(h, std::move(keep));
    }
  }

 private:
  double threshold_ = 1.0;
  int32_t n_last_ = 1, n_recent_ = 1024, n_initial_ = 4;
};

}  // namespace

KVB_POLICY(simlayerkv) {
  return policy_entry<SimLayerKVPolicy>("simlayerkv").with_tests({.min_budget = 0, .decode_evicts = false});
}

}  // namespace kvb
