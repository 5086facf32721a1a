// `criticalkv` and `criticaladakv`: SnapKV scores reweighted by how much each value moves the
// layer's output, ‖W_o·v‖₁, in two stages.
// Sources: Feng et al., "Identify Critical KV Cache in LLM Inference from an Output Perturbation
// Perspective" (CriticalKV, arXiv 2502.03805); kvpress 0.5.5 CriticalKVPress and CriticalAdaKVPress
// (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/criticalkv_press.py), each wrapping
// SnapKVPress (window 64, kernel 5):
//   s = the inner press's score of the L tokens of a kv head (SnapKVPress: the window's tokens at
//       the layer's largest score + 1);
//   stage 1: the top int((1 − r) · L · first_stage_ratio) tokens by s (at least 1) are kept;
//   stage 2: s' = (s + ε) · n with n_i = mean over the GQA group of ‖W_o[:, head] · v_i‖₁
//       (scoring::value_out_l1), the stage-1 tokens forced to the top;
//   CriticalKVPress keeps each head's top int((1 − r) · L) by s'. CriticalAdaKVPress first shares
//   the layer's Hkv · n_kept tokens among its heads as AdaKVPress does (each head's top
//   max(1, int(n_kept · α)) forced, then the layer's top Hkv · n_kept scores counted per head: the
//   head budgets b_h), then runs the two stages per head with stage 1 = int(b_h ·
//   first_stage_ratio) and keeps each head's top b_h by s'.
// Choices: the inner press is kvpress's SnapKVPress only (the `snapkv` scoring with its window,
// kernel, pool and gqa parameters; kvpress's examples wrap it); `budget` is kvpress's n_kept
// (criticaladakv: the average per kv head of a layer, as adakv); budget_kind=ratio gives
// floor(ratio · L) and a first stage of floor(ratio · L · first_stage_ratio), kvpress's own
// product. The window is scored, not protected: its tokens win stage 1 by their score, as in
// kvpress. kvpress compresses once after the prompt (decode=false); with decode=true the same
// selection runs on the budget/buffer schedule. kvpress's CriticalAdaKVPress masks the pruned
// tokens and keeps every head whole; kvbench evicts them (ragged heads, as adakv). Ties: equal
// scores go to the lower index (head, index for the budget sharing).
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/snapkv.h"

namespace kvb {
namespace {

constexpr float kForced = std::numeric_limits<float>::max();  // kvpress: torch.finfo(float32).max

/// The two-stage selection both presses share, on one layer step.
class CriticalBase : public SnapKVPolicy {
 public:
  CriticalBase(std::string name, PolicyParams p) : SnapKVPolicy(std::move(name), std::move(p)) {
    refuse_threshold("its second stage keeps a count, not a score threshold");
    params_.bind({{"epsilon", &epsilon_, at_least(0)}, {"first_stage_ratio", &first_, within(0, 1)}});
  }
  PolicyNeeds needs() const override {
    PolicyNeeds n = SnapKVPolicy::needs();
    n.host_kv = n.out_proj = true;  // the cached values through KVCache::value, and W_o
    return n;
  }
  void on_sequence_end(SeqId seq) override {
    if (std::get<0>(key_) == seq) key_ = {-1, -1, -1};
  }

 protected:
  /// The inner press's scores of every kv head of the step's layer (SnapKVPress: the L_h − w older
  /// tokens' window scores, the w window tokens at the layer's largest older score + 1), computed
  /// once per (sequence, layer, step).
  const std::vector<std::vector<float>>& base_scores(LayerStep& step) {
    const auto key = std::make_tuple(step.seq, step.layer, step.seq_len);
    if (key == key_) return base_;
    base_.assign(step.num_kv_heads, {});
    float top = -std::numeric_limits<float>::infinity();
    std::vector<int> w(step.num_kv_heads, 0);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      base_[h] = scoring::window_scores(step, h, {gqa_, pool_, kernel_}, &w[h]);
      for (float v : base_[h]) top = std::max(top, v);
    }
    for (int h = 0; h < step.num_kv_heads; ++h) base_[h].resize(scoring::head_length(step, h), top + 1.0f);
    key_ = key;
    return base_;
  }
  /// Stage 1 and 2 of head h on its base scores `s`: the top `first` of s forced, the others
  /// (s + ε) · ‖W_o·v‖₁. Returns s' (L_h values, f32 as kvpress).
  std::vector<float> two_stage(const LayerStep& step, int h, std::vector<float> s, int64_t first) const {
    const std::vector<int32_t> forced = scoring::top_k_indices(s, first);
    const std::vector<float> n = scoring::value_out_l1(step, h, name().c_str());
    for (size_t i = 0; i < s.size(); ++i) s[i] = (s[i] + static_cast<float>(epsilon_)) * n[i];
    for (int32_t i : forced) s[i] = kForced;
    return s;
  }

  double epsilon_ = 1e-4, first_ = 0.5;

 private:
  std::tuple<SeqId, int, int64_t> key_{-1, -1, -1};
  std::vector<std::vector<float>> base_;
};

/// kvpress CriticalKVPress(SnapKVPress): per head, the two stages and the top n_kept by s'.
class CriticalKVPolicy : public CriticalBase {
 public:
  explicit CriticalKVPolicy(PolicyParams p) : CriticalBase("criticalkv", std::move(p)) {}

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const int64_t B = budget_now(step);
    // kvpress: int((1 − r) · k_len · first_stage_ratio), at least 1 when first_stage_ratio > 0.
    auto first = static_cast<int64_t>(ratio_kind_ ? std::floor(ratio_at(step) * L * first_)
                                                  : std::floor(static_cast<double>(B) * first_));
    if (first_ > 0) first = std::max<int64_t>(1, first);
    const std::vector<float> s = two_stage(step, h, base_scores(step)[h], first);
    std::copy(s.begin(), s.end(), scores.begin());
  }
  /// The top B by s' (stage-1 tokens first); nothing else is protected (kvpress ScorerPress).
  std::vector<int32_t> select(const std::vector<float>& scores, int32_t L, int64_t B) override {
    return scoring::top_k_indices(std::span<const float>(scores.data(), L), std::min<int64_t>(B, L));
  }
};

/// kvpress CriticalAdaKVPress(SnapKVPress): AdaKV's per-head budgets, then the two stages per head.
class CriticalAdaKVPolicy : public SharedLayerBudget<CriticalBase> {
 public:
  explicit CriticalAdaKVPolicy(PolicyParams p) : SharedLayerBudget("criticaladakv", std::move(p)) {
    params_.bind({{"alpha", &alpha_, within(0, 1)}});
  }

 protected:
  void compress_layer(LayerStep& step, int64_t B, const std::vector<int32_t>& len) override {
    const int H = step.num_kv_heads;
    std::vector<std::vector<float>> s = base_scores(step);
    // AdaKV's safeguard: each head's top n_safe forced.
    int64_t n_safe = static_cast<int64_t>(static_cast<double>(B) * alpha_);
    if (alpha_ > 0) n_safe = std::max<int64_t>(1, n_safe);
    for (int h = 0; h < H; ++h)
      for (int32_t i : scoring::top_k_indices(s[h], std::min<int64_t>(n_safe, len[h]))) s[h][i] = kForced;
    // Head budgets: the layer's top H · B scores, counted per head (ties to the lower head, index).
    std::vector<int64_t> budget(H, 0);
    for (const auto& t : scoring::layer_top_k(s, B * H)) ++budget[t.head];
    for (int h = 0; h < H; ++h) {
      const int64_t first = static_cast<int64_t>(static_cast<double>(budget[h]) * first_);
      const std::vector<float> s2 = two_stage(step, h, s[h], first);
      std::vector<int32_t> keep = scoring::top_k_indices(s2, budget[h]);
      if (static_cast<int32_t>(keep.size()) < len[h]) step.keep(h, std::move(keep));
    }
  }
  void score(LayerStep&, int, int32_t, std::vector<float>&) override {}  // compress_layer decides

 private:
  double alpha_ = 0.2;
};

}  // namespace

KVB_POLICY(criticalkv) {
  return policy_entry<CriticalKVPolicy>("criticalkv").with_tests({.min_budget = 9, .params = "window=8"});
}

KVB_POLICY(criticaladakv) {
  return policy_entry<CriticalAdaKVPolicy>("criticaladakv").with_tests({.min_budget = 9, .params = "window=8"});
}

}  // namespace kvb
