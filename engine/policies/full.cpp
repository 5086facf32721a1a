#include "engine/policies/full.h"

#include <algorithm>

#include "engine/policies/registration.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {

KVB_POLICY(full) {
  PolicyInfo info;
  info.name = "full";
  info.description = policy_catalog_entry("full").description;
  info.make = [](const PolicySpec& spec) -> std::unique_ptr<Policy> {
    if (!spec.params.empty())
      fail("policy 'full': unknown parameter '{}' (full takes none)", spec.params.begin()->first);
    return std::make_unique<FullPolicy>();
  };
  info.tests = {.min_budget = 0, .evicts = false};
  return info;
}

void EvictIndicesPolicy::on_layer_step(LayerStep& step) {
  if (!step.prefill_last) return;
  for (int h = 0; h < step.num_kv_heads; ++h) {
    auto it = evict_.find({step.layer, h});
    if (it == evict_.end()) continue;
    const int32_t len = step.cache->length(step.seq, step.layer, h);
    std::vector<char> drop(len, 0);
    for (int32_t i : it->second) {
      if (i < 0 || i >= len) fail("EvictIndicesPolicy: index {} out of range [0, {})", i, len);
      drop[i] = 1;
    }
    step.keep(h, scoring::mask_indices(drop, /*set=*/false));
  }
}

}  // namespace kvb
