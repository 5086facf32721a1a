// The policy catalog: every registered policy's metadata — its one-line description, its parameter
// table (keys, defaults, help) and how its learned weights are named — in one data file,
// engine/policies/catalog.json, which the build embeds (cmake/gen_policy_catalog.cmake). A policy
// file's registry entry names only its class, its weights' source and its test information
// (registration.h: policy_entry<T>("name")); `kvbench policies` prints the table the catalog
// builds, and the factory merges the user's spec over the same table (kvb::PolicyParams), so the
// defaults have one source. tests/policies/test_policy_registry.cpp checks that the catalog and the
// registry name the same policies.
//
// An entry of catalog.json, keyed by the policy's registered name:
//   "description": the line `kvbench policies` prints (what the policy keeps, with its source);
//   "schedule": {"buffer", "window", "sinks"[, "decode", "global_kind", "threshold_key"]}: the table
//       starts with schedule_params(...) of those arguments (scheduled.h; omitted ones default as there);
//   "snapkv": {"window", "kernel", "pool", "gqa", "buffer"}: it starts with snapkv_params(...) (snapkv.h);
//   "help": {key: text}: the help of those shared entries replaced (extend_params, params.h);
//   "params": the policy's own entries after them, each [key, default, help], or "compress" for the
//       shared compress_param() entry;
//   "learned": {"file_param", "random_param", "what", "paper", "where"}: LearnedWeightsInfo.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/policy.h"

namespace kvb {

/// One policy's catalog entry, its table built (the learned weights' two parameters not yet put
/// first: the registry entry does that, weights_params in params.h).
struct PolicyCatalogEntry {
  std::string description;
  std::vector<PolicyParamInfo> params;
  std::optional<LearnedWeightsInfo> learned;
};

/// The catalog entry of policy `name`, parsed and built once. Throws kvb::Error "policy catalog:
/// no entry '<name>'" when the catalog has none, and naming the entry and field when one is
/// malformed (an unknown field, a wrong type, a help text for a key the shared table lacks).
const PolicyCatalogEntry& policy_catalog_entry(const std::string& name);

/// The learned weights a policy was given through its catalog `learned` parameters
/// (LearnedWeightsInfo: file_param, random_param).
struct LearnedWeightsChoice {
  std::string policy;        ///< the policy's registry name
  LearnedWeightsInfo info;   ///< its catalog `learned` entry
  std::string path;          ///< file_param's value: a Hub id, a directory or a file; "" = not given
  int64_t random_seed = -1;  ///< random_param's value: the seed of RANDOM test weights; < 0 = not given
  /// Throws kvb::Error "policy '<policy>': no <what> for this model: pass <file_param>=PATH (<where>;
  /// `kvbench policies --checkpoints` lists the released ones), or <random_param>=SEED for RANDOM
  /// test <what>" when neither is given.
  void require() const;
  /// "<random_param>=<random_seed>": what random test weights are called where a loaded file's
  /// path would stand (GateWeights::path).
  std::string random_name() const { return info.random_param + "=" + std::to_string(random_seed); }
  /// The seed of layer `layer`'s random test weights, for a policy that draws them layer by layer.
  int64_t layer_seed(int layer) const { return random_seed * 1000003 + layer; }
};

/// Reads policy `name`'s two learned-weights parameters from `params` (marking them read). The
/// policy calls require() where it checks its parameters, so that its errors keep their order.
/// Throws kvb::Error when `name` has no catalog entry or no `learned` group, and what
/// PolicyParams throws for a parameter of the wrong type.
LearnedWeightsChoice learned_weights_choice(const std::string& name, PolicyParams& params);
/// learned_weights_choice of the policy `params` belong to (PolicyParams::policy_name): a learned
/// policy keeps the choice as a member, `learned_ = learned_weights_choice(params_);`, and reads
/// learned_.path and learned_.random_seed where it loads or draws its weights.
LearnedWeightsChoice learned_weights_choice(PolicyParams& params);

/// The names of every catalog entry, sorted. Throws what policy_catalog_entry throws for a
/// malformed entry.
std::vector<std::string> policy_catalog_names();

}  // namespace kvb
