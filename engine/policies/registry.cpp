// Policy spec parsing and the policy registry, which lists every policy file's KVB_POLICY entry
// (docs/architecture.md, Policies and the policy driver; docs/policies.md#adding-a-policy).
#include <algorithm>
#include <utility>

#include "engine/policies/policy.h"
#include "engine/policies/scheduled.h"
#include "engine/util/error.h"
#include "engine/util/spec.h"

namespace kvb {

PolicySpec PolicySpec::parse(const std::string& text, int64_t budget) {
  NamedSpec n = parse_named_spec(text, "policy spec");
  PolicySpec s;
  s.name = std::move(n.name);
  s.params = std::move(n.params);
  s.budget = budget;
  return s;
}

std::string PolicySpec::to_string() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : params) {  // std::map: sorted keys
    out += sep;
    out += k + "=" + v;
    sep = ',';
  }
  return out;
}

PolicySpec PolicyInfo::test_spec(int64_t budget, const std::string& extra) const {
  std::string params = tests.params;
  if (!extra.empty()) params += (params.empty() ? "" : ",") + extra;
  return PolicySpec::parse(params.empty() ? name : name + ":" + params, budget);
}

// Every policy file's entry (KVB_POLICY in engine/policies/*.cpp), listed by the build.
#define KVB_POLICY_ENTRY(id) PolicyInfo kvb_policy_entry_##id();
#include "engine/policies/policy_entries.inc"
#undef KVB_POLICY_ENTRY

const std::vector<PolicyInfo>& policy_registry() {
  static const std::vector<PolicyInfo> reg = [] {
    std::vector<std::pair<std::string, PolicyInfo>> listed = {
#define KVB_POLICY_ENTRY(id) {#id, kvb_policy_entry_##id()},
#include "engine/policies/policy_entries.inc"
#undef KVB_POLICY_ENTRY
    };
    std::vector<PolicyInfo> r;
    for (auto& [id, info] : listed) {
      if (info.name != id) fail("policy registry: KVB_POLICY({}) registers a policy named '{}'", id, info.name);
      r.push_back(std::move(info));
    }
    std::sort(r.begin(), r.end(), [](const PolicyInfo& a, const PolicyInfo& b) { return a.name < b.name; });
    for (size_t i = 1; i < r.size(); ++i)
      if (r[i].name == r[i - 1].name) fail("policy registry: policy '{}' is registered twice", r[i].name);
    return r;
  }();
  return reg;
}

namespace {
std::unique_ptr<Policy> make_single(const PolicySpec& spec) {
  for (const auto& info : policy_registry())
    if (info.name == spec.name) return info.make(spec);
  std::string known;
  for (const auto& info : policy_registry()) known += (known.empty() ? "" : ", ") + info.name;
  fail("unknown policy '{}' (known: {})", spec.name, known);
}
}  // namespace

std::unique_ptr<Policy> make_policy(const PolicySpec& spec) { return make_composed(spec, make_single); }

}  // namespace kvb
