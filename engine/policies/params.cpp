#include "engine/policies/params.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <type_traits>

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
  check(key, v, within(lo, hi));
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

void PolicyParams::check(const std::string& key, double v, const ParamCheck& c) const {
  if (c.kind == ParamCheck::kWithin && (v < c.lo || v > c.hi))
    fail_param(key, fmt::format("must be in [{}, {}]", c.lo, c.hi));
  if (c.kind == ParamCheck::kAtLeast && v < c.lo)
    fail_param(key, fmt::format("must be >= {}", c.lo) + (c.why.empty() ? "" : " (" + c.why + ")"));
}

void PolicyParams::check(const std::string& key, int64_t v, const ParamCheck& c) const {
  const auto lo = static_cast<int64_t>(c.lo), hi = static_cast<int64_t>(c.hi);
  if (c.kind == ParamCheck::kWithin && (v < lo || v > hi)) fail_param(key, fmt::format("must be in [{}, {}]", lo, hi));
  if (c.kind == ParamCheck::kAtLeast) check_min(key, v, lo, c.why);
}

void PolicyParams::bind(const std::vector<ParamBinding>& table) {
  for (const ParamBinding& b : table) {
    const ParamCheck& c = b.check;
    std::visit(
        [&](auto* dst) {
          using T = std::remove_pointer_t<decltype(dst)>;
          constexpr bool is_number = !std::is_same_v<T, bool> && !std::is_same_v<T, std::string>;
          if (c.kind == ParamCheck::kOneOf) {
            if constexpr (std::is_floating_point_v<T>) fail_param(b.key, "one_of on a floating-point member");
            else if constexpr (std::is_same_v<T, bool>) *dst = get_choice(b.key, c.choices) == c.on;
            else if constexpr (std::is_same_v<T, std::string>) *dst = get_choice(b.key, c.choices);
            else *dst = static_cast<T>(get_choice_index(b.key, c.choices));
            return;
          }
          if (c.kind != ParamCheck::kNone && !is_number) fail_param(b.key, "a range check on a non-number member");
          if constexpr (std::is_same_v<T, bool>) {
            *dst = get_bool(b.key);
          } else if constexpr (std::is_same_v<T, std::string>) {
            *dst = get_string(b.key);
          } else if constexpr (std::is_floating_point_v<T>) {
            const double v = get_double(b.key);
            check(b.key, v, c);
            *dst = static_cast<T>(v);
          } else {
            const int64_t v = get_int(b.key);
            check(b.key, v, c);
            *dst = static_cast<T>(v);
          }
        },
        b.target);
  }
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
