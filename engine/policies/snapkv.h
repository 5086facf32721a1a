// kvb::SnapKVPolicy — SnapKV scoring on the shared schedule; PyramidKV derives from it.
// See snapkv.cpp for the sources and the choices among the published variants.
#pragma once

#include "engine/policies/params.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {

/// SnapKV: importance of the older tokens = attention of the `window` most recent queries
/// (reduced over the GQA group by `gqa`, averaged over the queries), pooled along tokens with
/// `kernel`/`pool`; the `window` most recent tokens are always kept.
class SnapKVPolicy : public ScheduledPolicy {
 public:
  /// `snapkv` itself (the registry entry's constructor).
  explicit SnapKVPolicy(PolicyParams p) : SnapKVPolicy("snapkv", std::move(p)) {}
  /// A policy built on SnapKV scoring under its own registry `name` (pyramidkv, adakv).
  SnapKVPolicy(std::string name, PolicyParams p);
  PolicyNeeds needs() const override;

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override;
  int kernel_ = 7;
  scoring::Pool pool_ = scoring::Pool::kMax;
  scoring::Gqa gqa_ = scoring::Gqa::kMaxLogits;
};

/// Parameters shared by snapkv and pyramidkv with the given defaults.
std::vector<PolicyParamInfo> snapkv_params(int64_t window, int64_t kernel, const std::string& pool,
                                           const std::string& gqa, int64_t buffer);

/// PyramidKV's total tokens for `layer` (selected + the w recent) by KVCache-Factory's rule, for
/// budget C (max_capacity_prompt), window w, prompt length P: C when P < C or P < 2(C − w)
/// (uniform), else max − layer·step + w with min = floor((C − w)/β), max = 2(C − w) − min
/// (clamped to P − w, then min = 2(C − w) − max) and step = floor((max − min)/(layers − 1)).
int64_t pyramid_layer_budget(int64_t C, int64_t w, int64_t P, int layer, int num_layers, double beta);
/// kvpress PyramidKVPress.get_layer_budget for `budget` kept tokens (window inside the total).
int64_t pyramid_layer_budget_kvpress(int64_t budget, int64_t window, int64_t P, int layer, int num_layers, double beta);

/// Page-aware layer budgets (issue 33): each exact budget `exact[l]` (tokens per head of layer l)
/// becomes B + align·d_l with d_l = floor((exact[l] − B)/align), never below `min_budget` (nor
/// below exact[l] when that is smaller); then, while Σ d_l > 0, the largest budget (the lowest
/// layer among equals) loses `align` tokens, as long as it stays ≥ min_budget. So every layer differs from the uniform
/// budget B by a multiple of `align` and the budgets sum to at most n·B (exactly as the exact
/// ones do when they sum to at most n·B). With a KV page size that divides `align`, a head of
/// layer l holding b_l + k tokens takes (b_l − B)/page + ⌈(B + k)/page⌉ pages, so the layers
/// together never hold more pages than a uniform budget B at the same k. align ≤ 1 returns
/// `exact`. Budgets above B are only ever lowered, those below B only lowered by the floor.
std::vector<int64_t> pyramid_page_aligned(const std::vector<int64_t>& exact, int64_t B, int64_t align,
                                          int64_t min_budget);

}  // namespace kvb
