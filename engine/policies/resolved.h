// kvb::ResolvedPolicy — a policy spec resolved once: parsed from its text, built at a budget by
// the registry (validating every parameter), and asked what the grid and the memory planner need
// (docs/architecture.md#resolved-policies). `run`, `fidelity`, `bench`, `generate` and the CUDA
// check take one of these instead of re-parsing spec text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/policies/policy.h"

namespace kvb {

/// One policy spec, parsed once and built once at its budget.
/// Everything it answers comes from the built policy (Policy::uses_budget, resolved_params,
/// kv_footprint), never from the policy's name or its registry test metadata.
class ResolvedPolicy {
 public:
  /// Parses `text` ("name[:k=v,...]", PolicySpec::parse) and builds it at `budget` (tokens per
  /// (layer, kv_head); 0 = none). Throws kvb::Error naming the spec or parameter on bad syntax,
  /// an unknown policy or parameter, or a budget the policy refuses.
  static ResolvedPolicy resolve(const std::string& text, int64_t budget = 0);
  /// Builds `spec` at spec.budget (the errors of resolve()).
  explicit ResolvedPolicy(PolicySpec spec);

  /// The parsed spec (name, parameters as written, budget).
  const PolicySpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  int64_t budget() const { return spec_.budget; }
  /// The spec as text, "name:k=v,..." with keys sorted (PolicySpec::to_string; no budget).
  std::string text() const { return spec_.to_string(); }
  /// True when the built policy's behaviour depends on its budget (Policy::uses_budget): a grid
  /// runs one cell per budget for it, else one cell.
  bool uses_budget() const { return uses_budget_; }
  /// Every resolved parameter (defaults filled in), without "budget".
  const nlohmann::json& params() const { return params_; }
  /// The cell label: the name, then the resolved parameters that differ from the registry's
  /// defaults as sorted key=value pairs ("snapkv", "rkv:lambda=0.2,window=16"; policy_label).
  std::string label() const;
  /// The budgets a sweep over `budgets` runs this policy at: `budgets` when it uses a budget,
  /// else the single budget 0 (one cell; ratio and threshold budgets take none).
  std::vector<int64_t> budgets_of(const std::vector<int64_t>& budgets) const;
  /// The same spec at budget `b` (built again: the errors of resolve()).
  ResolvedPolicy at_budget(int64_t b) const;
  /// A fresh instance of the policy at this budget, for either backend (both drive the same
  /// Policy through engine/backend/policy_driver.h).
  std::unique_ptr<Policy> build() const { return build_at(spec_.budget); }
  /// A fresh instance at budget `b` (one cell of a sweep; the errors of resolve()).
  std::unique_ptr<Policy> build_at(int64_t b) const;
  /// The instance built at resolution, to ask (needs, kv_footprint), never to run: an engine
  /// takes build().
  const Policy& built() const { return *built_; }
  /// The built policy's projection of one sequence's pages (Policy::kv_footprint).
  KvFootprint kv_footprint(const FootprintQuery& q) const { return built_->kv_footprint(q); }

 private:
  PolicySpec spec_;
  std::shared_ptr<const Policy> built_;  ///< built once; asked, never run
  bool uses_budget_ = false;
  nlohmann::json params_;
};

/// The label of policy `name` with resolved parameters `params` (ResolvedPolicy::label): "8" and
/// "8.0" count as equal defaults. Unique per distinct resolved parameters within one build.
std::string policy_label(const std::string& name, const nlohmann::json& params);

}  // namespace kvb
