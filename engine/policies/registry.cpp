// Policy spec parsing and the policy registry (docs/architecture.md, Policies and the policy driver).
#include <algorithm>

#include "engine/policies/full.h"
#include "engine/policies/policies.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb {

PolicySpec PolicySpec::parse(const std::string& text, int64_t budget) {
  PolicySpec s;
  s.budget = budget;
  auto colon = text.find(':');
  s.name = text.substr(0, colon);
  if (s.name.empty()) fail("policy spec '{}': empty policy name", text);
  if (colon == std::string::npos) return s;
  std::string rest = text.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string kv = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (kv.empty() && !rest.empty()) fail("policy spec '{}': empty parameter (a stray comma?)", text);
    if (!kv.empty()) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        fail("policy spec '{}': expected key=value, got '{}'", text, kv);
      std::string key = kv.substr(0, eq);
      if (s.params.count(key)) fail("policy spec '{}': parameter '{}' given twice", text, key);
      s.params[key] = kv.substr(eq + 1);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
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
