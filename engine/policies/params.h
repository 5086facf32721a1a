// kvb::PolicyParams — typed access to a policy's `key=value` parameters with the defaults declared
// in its registry entry (PolicyInfo::params), so that the defaults `kvbench policies` prints and
// the defaults a policy uses are the same strings. Every resolved value is recorded for
// Policy::resolved_params() (written into every result row).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/policies/policy.h"

namespace kvb {

/// Parameters of one policy instance: the user's spec merged over the declared defaults.
/// `base` with the help text of the entries named in `help` replaced and `extra` appended: the
/// table of a policy built on a shared one (schedule_params, snapkv_params), in that order.
/// Throws kvb::Error when a key of `help` is not in `base` (a programming error).
std::vector<PolicyParamInfo> extend_params(std::vector<PolicyParamInfo> base,
                                           const std::vector<std::pair<std::string, std::string>>& help,
                                           std::vector<PolicyParamInfo> extra = {});

/// The table of learned policy `policy`: the two parameters of its weights, then `rest`.
/// `w.file_param` (default empty; help "<w.what>: <w.where>; required unless <w.random_param>",
/// plus "(kvbench run picks the released <w.what> of a known model)" when known_checkpoints()
/// lists `policy`) and `w.random_param` (default -1: the seed of RANDOM test weights, which are
/// not `w.paper`'s). The registry entry (registration.h) calls it, so every learned policy's table
/// words them alike. Throws nothing.
std::vector<PolicyParamInfo> weights_params(const std::string& policy, const LearnedWeightsInfo& w,
                                            std::vector<PolicyParamInfo> rest);

class PolicyParams {
 public:
  /// Validates that every key in `spec.params` is declared in `declared`; throws kvb::Error
  /// "policy '<name>': unknown parameter '<k>' (known: a, b, c)" otherwise.
  PolicyParams(const PolicySpec& spec, const std::vector<PolicyParamInfo>& declared);

  /// The value of `key` (user's or default) parsed as the given type. Throws kvb::Error
  /// "policy '<name>': parameter '<key>': expected <type>, got '<text>'" on bad values, and on
  /// keys that are not declared (a programming error, reported the same way).
  int64_t get_int(const std::string& key);
  double get_double(const std::string& key);
  bool get_bool(const std::string& key);  ///< true/false/1/0/yes/no/on/off
  std::string get_string(const std::string& key);
  /// get_string restricted to `choices`; throws naming the key and the allowed values.
  std::string get_choice(const std::string& key, const std::vector<std::string>& choices);
  /// get_choice returning the position of the value in `choices` (for enums listed in order).
  size_t get_choice_index(const std::string& key, const std::vector<std::string>& choices);

  /// get_double(key) that must lie in [lo, hi]; throws kvb::Error "policy '<name>': parameter
  /// '<key>': must be in [lo, hi]" otherwise (bounds printed as fmt prints them: 0, 1, 0.5).
  double get_double_in(const std::string& key, double lo, double hi);
  /// get_int(key) that must lie in [lo, hi]; throws "...: must be in [lo, hi]" otherwise.
  int64_t get_int_in(const std::string& key, int64_t lo, int64_t hi);
  /// get_int(key) that must be >= lo; throws as check_min otherwise.
  int64_t get_int_min(const std::string& key, int64_t lo, const std::string& why = "");
  /// Checks a resolved value: throws kvb::Error "policy '<name>': parameter '<key>': must be >=
  /// <lo>", followed by " (<why>)" when `why` is not empty, when v < lo.
  void check_min(const std::string& key, int64_t v, int64_t lo, const std::string& why = "") const;

  /// True when the user's spec sets `key` (whatever the value); false for a declared default.
  bool given(const std::string& key) const { return user_.count(key) != 0; }
  /// True when the policy's table declares `key`.
  bool declares(const std::string& key) const {
    for (const auto& p : declared_)
      if (p.key == key) return true;
    return false;
  }

  /// Throws kvb::Error "policy '<name>': parameter '<key>': <msg>".
  [[noreturn]] void fail_param(const std::string& key, const std::string& msg) const;

  /// Every parameter read so far with its resolved typed value, plus "budget".
  const nlohmann::json& resolved() const { return resolved_; }
  /// The budget from the spec (tokens per (layer, kv_head); 0 = none). Reading it marks the
  /// policy as one that takes a budget (budget_read, ParamPolicy::uses_budget).
  int64_t budget() const {
    budget_read_ = true;
    return budget_;
  }
  /// True once budget() was called: the policy read its budget.
  bool budget_read() const { return budget_read_; }
  const std::string& policy_name() const { return name_; }

 private:
  std::string raw(const std::string& key) const;
  std::string name_;
  int64_t budget_ = 0;
  mutable bool budget_read_ = false;
  std::vector<PolicyParamInfo> declared_;
  std::map<std::string, std::string> user_;
  nlohmann::json resolved_ = nlohmann::json::object();
};

/// Base of a policy that reads its parameters through PolicyParams: name() is its registry name
/// and resolved_params() every value it read (PolicyParams::resolved(), "budget" included).
class ParamPolicy : public Policy {
 public:
  ParamPolicy(std::string name, PolicyParams p) : name_(std::move(name)), params_(std::move(p)) {}
  std::string name() const override { return name_; }
  nlohmann::json resolved_params() const override { return params_.resolved(); }
  /// True when the policy read its budget while it was built (PolicyParams::budget_read).
  bool uses_budget() const override { return params_.budget_read(); }

 protected:
  std::string name_;
  PolicyParams params_;
};

}  // namespace kvb
