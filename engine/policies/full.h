// `full`: keeps every token (the full-cache reference every other policy is compared with).
#pragma once

#include "engine/policies/policy.h"

namespace kvb {

/// The full-cache policy: never evicts. Takes no parameters; a budget is ignored.
class FullPolicy : public Policy {
 public:
  std::string name() const override { return "full"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override { return {.layer_hook = false}; }
  void on_layer_step(LayerStep&) override {}
};

/// Test policy (not in the registry): after the prompt, evicts the given token indices from the
/// given (layer, kv_head)s, so tests can build ragged heads with known contents.
class EvictIndicesPolicy : public Policy {
 public:
  /// evict[(layer, head)] = indices (into the head's cache at the end of the prompt) to drop.
  explicit EvictIndicesPolicy(std::map<std::pair<int, int>, std::vector<int32_t>> evict) : evict_(std::move(evict)) {}
  std::string name() const override { return "evict_indices"; }
  nlohmann::json resolved_params() const override { return nlohmann::json::object(); }
  PolicyNeeds needs() const override { return {}; }
  void on_layer_step(LayerStep& step) override;

 private:
  std::map<std::pair<int, int>, std::vector<int32_t>> evict_;
};

}  // namespace kvb
