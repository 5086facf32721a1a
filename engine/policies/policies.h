// Helpers of individual policy files that tests call directly. (The registry entries are not
// declared here: each policy file defines its own with KVB_POLICY, engine/policies/registration.h.)
#pragma once

#include "engine/policies/policy.h"

namespace kvb {

/// CAKE's layer-budget adjustment (cake.cpp; antgroup/cakekv cake/utils.py adjust_budgets): the
/// float budgets truncated to integers, each capped at `seq_len` with the excess spread evenly over
/// the layers below it, then the difference to `total` spread the same way (remainders to the first
/// layers; a deficit taken only from layers above 1). Returns one budget per layer.
std::vector<int64_t> cake_adjust_budgets(const std::vector<double>& budgets, int64_t total, int64_t seq_len);

}  // namespace kvb
