// `adakv`: one budget per layer, shared among its kv heads by score (Ada-SnapKV).
// Sources: Feng et al., "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation for
// Efficient LLM Inference" (arXiv 2407.11550, §3.2 Alg. 1: the layer keeps its B·H highest-scoring
// tokens over all heads together, so a head with concentrated attention gives its budget to a head
// with dispersed attention; a safeguard keeps a fraction α of each head's own budget);
// kvpress 0.5.5 AdaKVPress(SnapKVPress()) (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/adakv_press.py: per head n_safe = max(1, int(n_kept·α)) top tokens are
// forced in, then the bottom Hkv·(L − n_kept) scores of the layer are pruned; α = 0.2; the
// SnapKVPress scores pad the window with max + 1, so the window is kept and counts towards n_safe).
// Choices: the SnapKV scoring and defaults of kvpress's SnapKVPress (window 64, kernel 5, avg
// pooling, GQA mean); `budget` B is the AVERAGE per head: after a compression the layer holds
// Hkv·B tokens. kvpress only masks the pruned keys (every head keeps all L tokens in memory); kvbench
// keeps ragged pages per (layer, kv head), so the evicted tokens free real memory (docs/policies.md
// has the measurement). The layer is compressed when its total reaches Hkv·(B + buffer) (every
// `buffer` decode tokens) and at the end of the prompt when it exceeds Hkv·B; heads may hold
// different lengths. Ties go to the lower (head, index).
#include <algorithm>
#include <cmath>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/snapkv.h"

namespace kvb {
namespace {

class AdaKVPolicy : public SharedLayerBudget<SnapKVPolicy> {
 public:
  explicit AdaKVPolicy(PolicyParams p) : SharedLayerBudget("adakv", std::move(p)) {
    refuse_threshold("its per-layer budget is shared among the heads by score");
    params_.bind({{"alpha", &alpha_, within(0, 1)}});
  }

 protected:
  void compress_layer(LayerStep& step, int64_t B, const std::vector<int32_t>& len) override {
    const int H = step.num_kv_heads;
    // Per head: the window and the safeguard are kept; the rest competes across the layer's heads.
    const int64_t n_safe = alpha_ > 0 ? std::max<int64_t>(1, static_cast<int64_t>(std::floor(B * alpha_))) : 0;
    std::vector<std::vector<float>> older(H);
    std::vector<std::vector<char>> keep(H);
    int64_t kept = 0;
    for (int h = 0; h < H; ++h) {
      const int32_t L = len[h];
      keep[h].assign(L, 0);
      const int32_t w = std::min<int32_t>(window_, L);
      for (int32_t i = L - w; i < L; ++i) keep[h][i] = 1;
      kept += w;
      if (L - w <= 0) continue;
      std::vector<float> s(L, 0.f);
      score(step, h, L, s);  // the L − w older tokens' SnapKV scores
      older[h].assign(s.begin(), s.begin() + (L - w));
      const int64_t safe_older = std::max<int64_t>(0, n_safe - w);
      for (int32_t i : scoring::top_k_indices(older[h], std::min<int64_t>(safe_older, L - w))) {
        keep[h][i] = 1;
        ++kept;
      }
    }
    // The layer's remaining room goes to the best older tokens of any head (not yet kept).
    for (const auto& t : scoring::layer_top_k(older, std::max<int64_t>(0, B * H - kept), &keep))
      keep[t.head][t.idx] = 1;
    for (int h = 0; h < H; ++h) {
      std::vector<int32_t> ks = scoring::mask_indices(keep[h]);
      if (static_cast<int32_t>(ks.size()) < len[h]) step.keep(h, std::move(ks));
    }
  }

 private:
  double alpha_ = 0.2;
};

}  // namespace

KVB_POLICY(adakv) { return policy_entry<AdaKVPolicy>("adakv").with_tests({.min_budget = 65}); }

}  // namespace kvb
