// Policy spec parsing and the policy registry (docs/architecture.md, Policies and the policy driver).
#include <algorithm>

#include "engine/policies/full.h"
#include "engine/policies/policies.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "engine/util/spec.h"

namespace kvb {

// Entries of the issue-41 policies, declared here rather than in policies.h so that adding one
// touches only its file and this list (the registry is moving to self-registration, issue 41).
PolicyInfo triattention_policy_info();  ///< triattention.cpp
PolicyInfo kvzap_policy_info();         ///< kvzap.cpp

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

const std::vector<PolicyInfo>& policy_registry() {
  static const std::vector<PolicyInfo> reg = [] {
    std::vector<PolicyInfo> r;
    r.push_back(full_policy_info());
    r.push_back(streamingllm_policy_info());
    r.push_back(h2o_policy_info());
    r.push_back(snapkv_policy_info());
    r.push_back(pyramidkv_policy_info());
    r.push_back(rkv_policy_info());
    r.push_back(keydiff_policy_info());
    r.push_back(gkv_policy_info());
    r.push_back(trimkv_policy_info());
    r.push_back(wgkv_policy_info());
    r.push_back(foresightkv_policy_info());
    r.push_back(oracle_policy_info());
    r.push_back(random_policy_info());
    r.push_back(tova_policy_info());
    r.push_back(knorm_policy_info());
    r.push_back(expected_attention_policy_info());
    r.push_back(adakv_policy_info());
    r.push_back(duoattention_policy_info());
    r.push_back(morphkv_policy_info());
    r.push_back(cake_policy_info());
    r.push_back(quest_policy_info());
    r.push_back(locret_policy_info());
    r.push_back(seerattn_r_policy_info());
    r.push_back(triattention_policy_info());
    r.push_back(kvzap_policy_info());
    return r;
  }();
  return reg;
}

std::unique_ptr<Policy> make_policy(const PolicySpec& spec) {
  for (const auto& info : policy_registry())
    if (info.name == spec.name) return info.make(spec);
  std::string known;
  for (const auto& info : policy_registry()) known += (known.empty() ? "" : ", ") + info.name;
  fail("unknown policy '{}' (known: {})", spec.name, known);
}

}  // namespace kvb
