// The run-config reader of `kvbench run --config` (harness/run_support.h load_run_config): kept
// apart from the rest of run_support.cpp so that it depends on the YAML reader only (the
// fuzz_suite_config target links it without the engine).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "datasets/records.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/run_support.h"

namespace kvb::cli {

namespace {

std::string type_name(const nlohmann::json& v) { return v.type_name(); }

std::string get_string(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) fail("{}: expected a string, got {}", where, type_name(v));
  return v.get<std::string>();
}

double get_number(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number()) fail("{}: expected a number, got {}", where, type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail("{}: must be a finite number, got {}", where, x);
  return x;
}

/// A number in [lo, hi] (both finite).
double get_number_in(const nlohmann::json& v, const std::string& where, double lo, double hi) {
  const double x = get_number(v, where);
  if (x < lo || x > hi) fail("{}: must be in [{}, {}], got {}", where, lo, hi, v.dump());
  return x;
}

/// An integer in [min_value, max_value]; a value outside (also one too large for 64 bits, which
/// YAML gives as a float or string) is an error naming it, never a wrapped or truncated value.
int64_t get_int(const nlohmann::json& v, const std::string& where, int64_t min_value, int64_t max_value = INT_MAX) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max_value))
    fail("{}: must be <= {}, got {}", where, max_value, v.dump());
  if (!v.is_number_integer()) fail("{}: expected an integer, got {}", where, v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < min_value) fail("{}: must be >= {}, got {}", where, min_value, x);
  if (x > max_value) fail("{}: must be <= {}, got {}", where, max_value, x);
  return x;
}

/// A non-empty list of strings (or one string); an empty list would silently mean "the default".
std::vector<std::string> get_nonempty_strings(const nlohmann::json& v, const std::string& where);

/// A string or a list of strings (a single scalar is a one-element list).
std::vector<std::string> get_strings(const nlohmann::json& v, const std::string& where) {
  std::vector<std::string> out;
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) fail("{}: expected a list of strings, got {}", where, type_name(v));
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(get_string(v[i], where + "[" + std::to_string(i) + "]"));
    if (out.back().empty()) fail("{}[{}]: empty string", where, i);
  }
  return out;
}

std::vector<std::string> get_nonempty_strings(const nlohmann::json& v, const std::string& where) {
  std::vector<std::string> out = get_strings(v, where);
  if (out.empty()) fail("{}: empty list (leave the key out for the default)", where);
  return out;
}

void apply_run_section(RunConfigFile& c, const nlohmann::json& run, const std::string& where) {
  if (!run.is_object()) fail("{}: expected a mapping, got {}", where, type_name(run));
  for (const auto& [k, v] : run.items()) {
    const std::string w = where + "." + k;
    if (k == "models") c.models = get_nonempty_strings(v, w);
    else if (k == "policies") c.policies = get_nonempty_strings(v, w);
    else if (k == "budgets") {
      c.budgets.clear();
      if (!v.is_array()) fail("{}: expected a list of integers, got {}", w, type_name(v));
      if (v.empty()) fail("{}: empty list (leave the key out for the default)", w);
      for (size_t i = 0; i < v.size(); ++i) c.budgets.push_back(get_int(v[i], w + "[" + std::to_string(i) + "]", 1));
    } else if (k == "samples") c.samples = static_cast<int>(get_int(v, w, 1));
    else if (k == "limit") c.limit = static_cast<size_t>(get_int(v, w, 0, INT64_MAX));
    else if (k == "temperature") c.temperature = get_number_in(v, w, 0, std::numeric_limits<double>::max());
    else if (k == "top_p") c.top_p = get_number_in(v, w, 0, 1);
    else if (k == "top_k") c.top_k = static_cast<int>(get_int(v, w, 0));
    else if (k == "min_p") c.min_p = get_number_in(v, w, 0, 1);
    else if (k == "memory") {
      c.memory = get_number_in(v, w, 0, 1048576);
      if (*c.memory <= 0) fail("{}: must be > 0 GiB, got {}", w, v.dump());
    } else if (k == "max_new_tokens") c.max_new_tokens = static_cast<int>(get_int(v, w, 1));
    else if (k == "seed") {
      // Seeds are 64-bit unsigned (as --seed); a larger YAML integer arrives as a float or string.
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        fail("{}: expected an integer in [0, 2^64-1], got {}", w, v.dump());
      c.seed = v.get<uint64_t>();
    } else if (k == "backend") c.backend = get_string(v, w);
    else if (k == "suite") c.suite = get_string(v, w);
    else
      fail(
          "{}: unknown key (known: suite, models, policies, budgets, samples, limit, temperature, top_p, "
          "top_k, min_p, max_new_tokens, seed, backend, memory)",
          w);
  }
}

}  // namespace

RunConfigFile load_run_config(const std::string& path, const std::string& profile) {
  if (!file_exists(path)) fail("--config {}: no such file", path);
  const nlohmann::json doc = datasets::load_yaml_file(path);
  if (!doc.is_object()) fail("{}: expected a mapping at the top level", path);
  RunConfigFile c;
  c.path = path;
  // Top-level keys: the known scalars/sections, and any mapping (a profile such as gpu_run, or
  // a section another tool reads such as report). A scalar with another name is a typo.
  static const std::set<std::string> kTop = {"suite", "db", "data_dir", "data_dirs", "run", "thresholds"};
  for (const auto& [k, v] : doc.items()) {
    if (!kTop.count(k) && !v.is_object())
      fail(
          "{}: {}: unknown top-level key (known: suite, data_dir, data_dirs, db, run, thresholds, and mappings "
          "such as gpu_run or report)",
          path, k);
    if (k == "report") {
      // `kvbench report` is run by the CI scripts with these values: its keys are checked too.
      for (const auto& [rk, rv] : v.items()) {
        if (rk != "out") fail("{}: report.{}: unknown key (known: out)", path, rk);
        get_string(rv, path + ": report.out");
      }
    } else if (!kTop.count(k)) {
      // Any other mapping is a profile (--config-profile): checked as a run section whether or
      // not it is selected, so a typo inside it is found before the night it is used.
      RunConfigFile scratch;
      apply_run_section(scratch, v, path + ": " + k);
    }
  }
  if (doc.contains("suite")) c.suite = get_string(doc["suite"], path + ": suite");
  if (doc.contains("db")) c.db = get_string(doc["db"], path + ": db");
  if (doc.contains("data_dir") && doc.contains("data_dirs"))
    fail("{}: data_dir: give data_dir or data_dirs, not both", path);
  if (doc.contains("data_dir")) c.data_dirs = get_nonempty_strings(doc["data_dir"], path + ": data_dir");
  if (doc.contains("data_dirs")) c.data_dirs = get_nonempty_strings(doc["data_dirs"], path + ": data_dirs");
  if (doc.contains("run")) apply_run_section(c, doc["run"], path + ": run");
  if (!profile.empty()) {
    if (!doc.contains(profile))
      fail("{}: no section '{}' (--config-profile names a top-level mapping such as gpu_run)", path, profile);
    apply_run_section(c, doc[profile], path + ": " + profile);
  }
  if (doc.contains("thresholds")) {
    const auto& t = doc["thresholds"];
    if (!t.is_object()) fail("{}: thresholds: expected a mapping", path);
    for (const auto& [k, v] : t.items()) {
      if (k == "alpha") c.alpha = get_number(v, path + ": thresholds.alpha");
      else if (k == "min_drop_points") c.min_drop_points = get_number(v, path + ": thresholds.min_drop_points");
      else if (k == "max_throughput_drop_pct")
        c.max_throughput_drop_pct = get_number(v, path + ": thresholds.max_throughput_drop_pct");
      else fail("{}: thresholds.{}: unknown key (known: alpha, min_drop_points, max_throughput_drop_pct)", path, k);
    }
  }
  return c;
}

}  // namespace kvb::cli
