// A policy file registers itself: `KVB_POLICY(mypolicy) { return policy_entry<MyPolicy>("mypolicy"); }`
// defines its registry entry (PolicyInfo) from its class and its entry in the policy catalog
// (catalog.h: description, parameter table, learned-weights naming), and the build lists every
// such line (docs/policies.md#adding-a-policy). The entry's `params` table is the single source of
// the defaults: `kvbench policies` prints it and the factory merges the user's spec over the same
// table (kvb::PolicyParams), so the two cannot drift apart.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/policies/catalog.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/params.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb {

/// Starts the definition of a policy file's registry entry, inside `namespace kvb`:
/// `KVB_POLICY(mypolicy) { return policy_entry<MyPolicy>("mypolicy"); }` defines
/// `PolicyInfo kvb_policy_entry_mypolicy()`. `id` is the policy's registered name (PolicyInfo::name;
/// the registry refuses an entry whose name differs). The line must start the line (column 0): the
/// build lists every engine/policies/*.cpp line that does (cmake/gen_registry_list.cmake writes
/// policy_entries.inc) and registry.cpp calls each listed function, which also keeps every policy's
/// object file in the static-library link. A new policy therefore edits no list (its description
/// and parameter table are its entry in the policy catalog, catalog.h).
#define KVB_POLICY(id) PolicyInfo kvb_policy_entry_##id()

/// The registry entry of policy class `T`, which is constructed as `T(PolicyParams)`.
/// `description` is the one line `kvbench policies` prints (what the policy keeps, with its
/// source); `learned` is set for a policy that needs weights the factory does not load itself
/// (LearnedWeightsInfo; its two parameters are put first in the table, weights_params). The
/// factory throws what PolicyParams' constructor throws ("policy '<name>': unknown parameter ...",
/// a negative budget) and then what T's constructor throws.
template <class T>
PolicyInfo policy_entry(std::string name, std::string description, std::vector<PolicyParamInfo> params,
                        std::optional<LearnedWeightsInfo> learned = std::nullopt) {
  if (learned) params = weights_params(name, *learned, std::move(params));
  PolicyInfo info{std::move(name), std::move(description), std::move(params), std::move(learned), nullptr, {}};
  info.make = [declared = info.params](const PolicySpec& spec) -> std::unique_ptr<Policy> {
    return std::make_unique<T>(PolicyParams(spec, declared));
  };
  return info;
}

/// Adjusts a learned policy's spec from its loaded checkpoint (TRIM-KV: defaults from the
/// checkpoint's config.json) before the parameters are resolved; throws kvb::Error naming the
/// checkpoint file and field it refuses.
using CheckpointSpecFn = PolicySpec (*)(PolicySpec spec, const GateWeights& weights);

/// The registry entry of a policy with learned weights, constructed as `T(PolicyParams,
/// GateWeights)`; the two parameters of `learned` are put first in `params` (weights_params).
/// The factory first checks the spec's keys against `params` (an unknown key is reported before
/// any file is read), then, when the parameter `learned.file_param` is set and
/// not empty, reads the weights with GateWeights::load(value, source) (a file, directory or Hub
/// id; throws kvb::Error naming the file and tensor), applies `adjust` when given, and builds T;
/// without that parameter T gets empty GateWeights (and decides itself: random test weights or
/// an error naming the parameter).
template <class T>
PolicyInfo learned_policy_entry(std::string name, std::string description, std::vector<PolicyParamInfo> params,
                                LearnedWeightsInfo learned, GateSource source, CheckpointSpecFn adjust = nullptr) {
  const std::string file_param = learned.file_param;
  params = weights_params(name, learned, std::move(params));
  PolicyInfo info{std::move(name), std::move(description), std::move(params), std::move(learned), nullptr, {}};
  info.make = [declared = info.params, file_param, source = std::move(source),
               adjust](const PolicySpec& spec) -> std::unique_ptr<Policy> {
    (void)PolicyParams(spec, declared);  // unknown keys are reported before any file is read
    const auto it = spec.params.find(file_param);
    if (it == spec.params.end() || it->second.empty())
      return std::make_unique<T>(PolicyParams(spec, declared), GateWeights{});
    GateWeights w = GateWeights::load(it->second, source);
    const PolicySpec s = adjust ? adjust(spec, w) : spec;
    return std::make_unique<T>(PolicyParams(s, declared), std::move(w));
  };
  return info;
}

/// The registry entry of policy class `T` described by `name`'s entry in the policy catalog
/// (policy_catalog_entry, catalog.h: its description, parameter table and, for a policy whose
/// weights the factory does not load itself, LearnedWeightsInfo). Throws kvb::Error when the
/// catalog has no entry `name`; the factory throws as policy_entry's above.
template <class T>
PolicyInfo policy_entry(const std::string& name) {
  const PolicyCatalogEntry& c = policy_catalog_entry(name);
  return policy_entry<T>(name, c.description, c.params, c.learned);
}

/// learned_policy_entry<T> of `name`'s catalog entry (policy_catalog_entry, catalog.h), whose
/// "learned" field names the weights. Throws kvb::Error when the catalog has no entry `name` or
/// the entry no "learned" field; the factory throws as learned_policy_entry's above.
template <class T>
PolicyInfo learned_policy_entry(const std::string& name, GateSource source, CheckpointSpecFn adjust = nullptr) {
  const PolicyCatalogEntry& c = policy_catalog_entry(name);
  if (!c.learned) fail("policy catalog: entry '{}' has no 'learned' field (its weights' naming)", name);
  return learned_policy_entry<T>(name, c.description, c.params, *c.learned, std::move(source), adjust);
}

}  // namespace kvb
