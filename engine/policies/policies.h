// Helpers of individual policy files that tests call directly. (The registry entries are not
// declared here: each policy file defines its own with KVB_POLICY, engine/policies/registration.h.)
#pragma once

#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"

namespace kvb {

/// CAKE's layer-budget adjustment (cake.cpp; antgroup/cakekv cake/utils.py adjust_budgets): the
/// float budgets truncated to integers, each capped at `seq_len` with the excess spread evenly over
/// the layers below it, then the difference to `total` spread the same way (remainders to the first
/// layers; a deficit taken only from layers above 1). Returns one budget per layer.
std::vector<int64_t> cake_adjust_budgets(const std::vector<double>& budgets, int64_t total, int64_t seq_len);

/// The RANDOM Fast KVzip gates of `fastkvzip:random_gates=seed` (fastkvzip.cpp) for the first
/// `layers` layers of a model with hidden size H, Hq query and Hkv kv heads, named and shaped as a
/// gates file (module.{l}.q_proj.weight [Hkv·G·16, H], ...; G = Hq / Hkv, 16 sink keys): per layer
/// one SeededDraws(seed · 1000003 + l) stream, in order q_proj.weight N(0, 1/H), q_proj.bias
/// N(0, 0.01), k_proj.weight N(0, 1/H), q_norm.weight and k_norm.weight 1 + N(0, 0.01), k_base and
/// b N(0, 1). Throws nothing.
GateWeights fastkvzip_random_gates(int64_t H, int64_t Hq, int64_t Hkv, int layers, int64_t seed);

}  // namespace kvb
