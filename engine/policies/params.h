// kvb::PolicyParams — typed access to a policy's `key=value` parameters with the defaults declared
// in its registry entry (PolicyInfo::params), so that the defaults `kvbench policies` prints and
// the defaults a policy uses are the same strings. Every resolved value is recorded for
// Policy::resolved_params() (written into every result row). A policy's constructor reads its
// parameters as one binding table, PolicyParams::bind (ParamBinding rows: key, member, check).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <string>
#include <variant>
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

/// The check a bound parameter must pass (ParamBinding): none, a range (within), a lower bound
/// (at_least) or a list of allowed strings (one_of). Bounds are doubles holding the integers of an
/// integer parameter exactly; the messages print them as the parameter's type (1048576, 0.5).
struct ParamCheck {
  enum Kind { kNone, kWithin, kAtLeast, kOneOf } kind = kNone;
  double lo = 0, hi = 0;
  std::string why;                   ///< kAtLeast: appended as " (<why>)" when not empty
  std::vector<std::string> choices;  ///< kOneOf
  std::string on;                    ///< kOneOf into a bool: the choice that sets it
};
/// [lo, hi]: "must be in [lo, hi]" (as PolicyParams::get_int_in / get_double_in).
inline ParamCheck within(double lo, double hi) { return {ParamCheck::kWithin, lo, hi, {}, {}, {}}; }
/// >= lo: "must be >= lo[ (why)]" (as PolicyParams::check_min).
inline ParamCheck at_least(double lo, std::string why = {}) {
  return {ParamCheck::kAtLeast, lo, 0, std::move(why), {}, {}};
}
/// One of `choices` (as PolicyParams::get_choice): a std::string member gets the value, an integer
/// member its position in `choices`, a bool member whether it is `on`.
inline ParamCheck one_of(std::vector<std::string> choices, std::string on = {}) {
  return {ParamCheck::kOneOf, 0, 0, {}, std::move(choices), std::move(on)};
}

/// One row of a policy's parameter binding table (PolicyParams::bind): the key, the member its
/// value goes to (the member's type picks the parse: bool → get_bool, integers → get_int narrowed
/// to the member, float/double → get_double, std::string → get_string; with one_of: get_choice)
/// and its check.
struct ParamBinding {
  using Target = std::variant<bool*, int32_t*, int64_t*, uint64_t*, float*, double*, std::string*>;
  std::string key;
  Target target;
  ParamCheck check = {};
};

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

  /// Reads every row of `table` in order into its member, as the get_* above would (the same
  /// resolved() record, the same errors in the same order): a policy constructor's parameters as
  /// one table, e.g. `params_.bind({{"ratio", &ratio_, within(0, 1)}, {"vnorm", &vnorm_}});`.
  /// Throws kvb::Error as the get_* and check_min do; a check its member's type cannot take (a
  /// range on a bool or string, one_of on a number) is reported as a programming error.
  void bind(const std::vector<ParamBinding>& table);

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
  /// Throws as get_double_in / check_min when `v` fails `c` (a kWithin or kAtLeast check).
  void check(const std::string& key, double v, const ParamCheck& c) const;
  void check(const std::string& key, int64_t v, const ParamCheck& c) const;
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
