#include "engine/policies/params.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "engine/policies/checkpoints.h"
#include "engine/util/error.h"

namespace kvb {

PolicyParams::PolicyParams(const PolicySpec& spec, const std::vector<PolicyParamInfo>& declared)
    : name_(spec.name), budget_(spec.budget), declared_(declared), user_(spec.params) {
  if (spec.budget < 0) fail("policy '{}': budget must be >= 0, got {}", name_, spec.budget);
  for (const auto& kv : user_) {
    const std::string& k = kv.first;  // a named reference, not a structured binding: clang < 16
                                      // (the fuzz build) cannot capture those in a lambda
    bool found = std::any_of(declared_.begin(), declared_.end(), [&](const PolicyParamInfo& p) { return p.key == k; });
    if (!found) {
      std::string known;
      for (const auto& p : declared_) known += (known.empty() ? "" : ", ") + p.key;
      fail("policy '{}': unknown parameter '{}' (known: {})", name_, k, known.empty() ? "none" : known);
    }
  }
  resolved_["budget"] = budget_;
}

std::vector<PolicyParamInfo> extend_params(std::vector<PolicyParamInfo> base,
                                           const std::vector<std::pair<std::string, std::string>>& help,
                                           std::vector<PolicyParamInfo> extra) {
  for (const auto& h : help) {
    const std::string& key = h.first;
    auto it = std::find_if(base.begin(), base.end(), [&](const PolicyParamInfo& e) { return e.key == key; });
    if (it == base.end()) fail("extend_params: no parameter '{}' to describe", key);
    it->help = h.second;
  }
  base.insert(base.end(), std::make_move_iterator(extra.begin()), std::make_move_iterator(extra.end()));
  return base;
}

std::vector<PolicyParamInfo> weights_params(const std::string& policy, const LearnedWeightsInfo& w,
                                            std::vector<PolicyParamInfo> rest) {
  std::string file_help = w.what + ": " + w.where + "; required unless " + w.random_param;
  const auto& known = known_checkpoints();
  if (std::any_of(known.begin(), known.end(), [&](const KnownCheckpoint& c) { return c.policy == policy; }))
    file_help += " (kvbench run picks the released " + w.what + " of a known model)";
  std::vector<PolicyParamInfo> out{
      {w.file_param, "", std::move(file_help)},
      {w.random_param, "-1", "seed of RANDOM test " + w.what + " (not " + w.paper + "; -1 = off)"}};
  out.insert(out.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  return out;
}

double PolicyParams::get_double_in(const std::string& key, double lo, double hi) {
  const double v = get_double(key);
  if (v < lo || v > hi) fail_param(key, fmt::format("must be in [{}, {}]", lo, hi));
  return v;
}

int64_t PolicyParams::get_int_in(const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = get_int(key);
  if (v < lo || v > hi) fail_param(key, fmt::format("must be in [{}, {}]", lo, hi));
  return v;
}

int64_t PolicyParams::get_int_min(const std::string& key, int64_t lo, const std::string& why) {
  const int64_t v = get_int(key);
  check_min(key, v, lo, why);
  return v;
}

void PolicyParams::check_min(const std::string& key, int64_t v, int64_t lo, const std::string& why) const {
  if (v < lo) fail_param(key, fmt::format("must be >= {}", lo) + (why.empty() ? "" : " (" + why + ")"));
}

void PolicyParams::fail_param(const std::string& key, const std::string& msg) const {
  fail("policy '{}': parameter '{}': {}", name_, key, msg);
}

std::string PolicyParams::raw(const std::string& key) const {
  auto it = user_.find(key);
  if (it != user_.end()) return it->second;
  for (const auto& p : declared_)
    if (p.key == key) return p.default_value;
  fail_param(key, "not declared by the policy");
}

int64_t PolicyParams::get_int(const std::string& key) {
  std::string s = raw(key);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0) fail_param(key, "expected an integer, got '" + s + "'");
  resolved_[key] = static_cast<int64_t>(v);
  return v;
}

double PolicyParams::get_double(const std::string& key) {
  std::string s = raw(key);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0) fail_param(key, "expected a number, got '" + s + "'");
  // NaN and ±inf are never a meaningful setting (and would be stored as JSON null).
  if (!std::isfinite(v)) fail_param(key, "expected a finite number, got '" + s + "'");
  resolved_[key] = v;
  return v;
}

bool PolicyParams::get_bool(const std::string& key) {
  std::string s = raw(key);
  bool v;
  if (s == "true" || s == "1" || s == "yes" || s == "on") v = true;
  else if (s == "false" || s == "0" || s == "no" || s == "off") v = false;
  else fail_param(key, "expected true/false, got '" + s + "'");
  resolved_[key] = v;
  return v;
}

std::string PolicyParams::get_string(const std::string& key) {
  std::string s = raw(key);
  resolved_[key] = s;
  return s;
}

std::string PolicyParams::get_choice(const std::string& key, const std::vector<std::string>& choices) {
  return choices[get_choice_index(key, choices)];
}

size_t PolicyParams::get_choice_index(const std::string& key, const std::vector<std::string>& choices) {
  std::string s = raw(key);
  const auto it = std::find(choices.begin(), choices.end(), s);
  if (it == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    fail_param(key, "expected one of " + list + ", got '" + s + "'");
  }
  resolved_[key] = s;
  return static_cast<size_t>(it - choices.begin());
}

}  // namespace kvb
