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

}  // namespace kvb
