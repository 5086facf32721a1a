#include "engine/policies/resolved.h"

#include <cstdlib>
#include <map>

namespace kvb {

ResolvedPolicy ResolvedPolicy::resolve(const std::string& text, int64_t budget) {
  return ResolvedPolicy(PolicySpec::parse(text, budget));
}

ResolvedPolicy::ResolvedPolicy(PolicySpec spec) : spec_(std::move(spec)) {
  std::shared_ptr<const Policy> p = make_policy(spec_);
  uses_budget_ = p->uses_budget();
  params_ = p->resolved_params();
  params_.erase("budget");  // a grid's budget column carries it
  built_ = std::move(p);
}

std::unique_ptr<Policy> ResolvedPolicy::build_at(int64_t b) const {
  PolicySpec s = spec_;
  s.budget = b;
  return make_policy(s);
}

ResolvedPolicy ResolvedPolicy::at_budget(int64_t b) const {
  PolicySpec s = spec_;
  s.budget = b;
  return ResolvedPolicy(std::move(s));
}

std::vector<int64_t> ResolvedPolicy::budgets_of(const std::vector<int64_t>& budgets) const {
  return uses_budget_ ? budgets : std::vector<int64_t>{0};
}

std::string ResolvedPolicy::label() const { return policy_label(spec_.name, params_); }

std::string policy_label(const std::string& name, const nlohmann::json& params) {
  std::map<std::string, std::string> defaults;
  for (const auto& info : policy_registry())
    if (info.name == name)
      for (const auto& p : info.params) defaults[p.key] = p.default_value;
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    char* ea = nullptr;
    char* eb = nullptr;
    const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
    return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;  // "8" == "8.0"
  };
  std::string out = name;
  bool first = true;
  for (const auto& [k, v] : params.items()) {  // nlohmann::json objects iterate in sorted key order
    auto d = defaults.find(k);
    if (d != defaults.end() && same(text(v), d->second)) continue;
    out += (first ? ":" : ",") + k + "=" + text(v);
    first = false;
  }
  return out;
}

}  // namespace kvb
