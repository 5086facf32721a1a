#include "tasks/suite.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "datasets/records.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tasks/embedded_files.h"
#include "tasks/task.h"

namespace kvb::tasks {

namespace {

const embedded::File* find_embedded(const std::string& name) {
  for (const auto* f = embedded::files; f->name; ++f)
    if (name == f->name) return f;
  return nullptr;
}

}  // namespace

std::vector<std::string> builtin_suites() {
  std::vector<std::string> out;
  for (const auto* f = embedded::files; f->name; ++f) {
    std::string n = f->name;
    if (n.rfind("suites/", 0) == 0 && n.size() > 12) out.push_back(n.substr(7, n.size() - 12));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string builtin_suite_text(const std::string& name) {
  const auto* f = find_embedded("suites/" + name + ".yaml");
  if (!f) {
    std::string names;
    for (const auto& n : builtin_suites()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown suite '{}' (built-in: {}; or give a YAML file path)", name, names);
  }
  return std::string(f->data, f->size);
}

std::string embedded_asset(const std::string& name) {
  const auto* f = find_embedded("assets/" + name);
  if (!f) fail("embedded asset '{}' is missing from this build", name);
  return std::string(f->data, f->size);
}

namespace {
/// Checks a suite's `sampling` mapping (its own or a task's): temperature a finite number >= 0,
/// top_p in (0, 1], top_k an integer >= 0; any other key is a typo.
void check_sampling(const nlohmann::json& s, const std::string& where) {
  if (!s.is_object()) fail("{}: sampling: expected a mapping", where);
  for (const auto& [k, v] : s.items()) {
    const bool num = v.is_number() && std::isfinite(v.get<double>());
    if (k == "temperature") {
      if (!num || v.get<double>() < 0)
        fail("{}: sampling.temperature: expected a finite number >= 0, got {}", where, v.dump());
    } else if (k == "top_p") {
      if (!num || !(v.get<double>() > 0 && v.get<double>() <= 1))
        fail("{}: sampling.top_p: expected a number in (0, 1], got {}", where, v.dump());
    } else if (k == "top_k") {
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > INT_MAX)
        fail("{}: sampling.top_k: expected an integer >= 0, got {}", where, v.dump());
    } else {
      fail("{}: sampling.{}: unknown key (temperature, top_p, top_k)", where, k);
    }
  }
}
/// A non-empty list of integers in [1, INT_MAX] (a suite's or a task's `budgets`).
std::vector<long long> get_budgets(const nlohmann::json& v, const std::string& where) {
  if (!v.is_array()) fail("{}: budgets: expected a list of integers", where);
  if (v.empty()) fail("{}: budgets: expected at least one budget (leave the key out for the default)", where);
  std::vector<long long> out;
  for (const auto& b : v) {
    if (!b.is_number_integer() || b.get<long long>() <= 0 || b.get<long long>() > INT_MAX)
      fail("{}: budgets: expected integers in [1, {}], got {}", where, INT_MAX, b.dump());
    out.push_back(b.get<long long>());
  }
  return out;
}

/// A task's `models` or `policies`: a non-empty list of non-empty strings (an empty list would
/// silently mean "the run's").
std::vector<std::string> get_names(const nlohmann::json& v, const std::string& where, const char* key) {
  if (!v.is_array()) fail("{}: {}: expected a list of strings, got {}", where, key, v.dump());
  if (v.empty()) fail("{}: {}: empty list (leave the key out for the run's)", where, key);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty())
      fail("{}: {}[{}]: expected a non-empty string, got {}", where, key, i, v[i].dump());
    out.push_back(v[i].get<std::string>());
  }
  return out;
}
}  // namespace

Suite parse_suite(const std::string& text, const std::string& origin) {
  nlohmann::json y = datasets::parse_yaml(text, origin);
  if (!y.is_object()) fail("{}: a suite is a YAML mapping with a 'tasks' list", origin);
  // A misspelt or misplaced key (`budget: [8]`, a task's `limit: 1` at the top) would otherwise
  // be dropped and the full default grid run: every key must be one of these.
  for (const auto& [k, v] : y.items()) {
    (void)v;
    if (k != "name" && k != "description" && k != "sampling" && k != "budgets" && k != "tasks")
      fail(
          "{}: {}: unknown key (name, description, sampling, budgets, tasks; a task's samples, "
          "limit, max_new_tokens, models, budgets, policies go under its tasks entry)",
          origin, k);
  }
  Suite s;
  s.origin = origin;
  for (const char* k : {"name", "description"}) {
    if (!y.contains(k)) continue;
    if (!y[k].is_string()) fail("{}: {}: expected a string, got {}", origin, k, y[k].dump());
    (std::string(k) == "name" ? s.name : s.description) = y[k].get<std::string>();
  }
  nlohmann::json base = y.value("sampling", nlohmann::json::object());
  check_sampling(base, origin);
  if (y.contains("budgets")) s.budgets = get_budgets(y["budgets"], origin);
  if (!y.contains("tasks") || !y["tasks"].is_array() || y["tasks"].empty())
    fail("{}: tasks: expected a non-empty list", origin);
  for (size_t i = 0; i < y["tasks"].size(); ++i) {
    const auto& t = y["tasks"][i];
    std::string where = fmt::format("{}: tasks[{}]", origin, i);
    SuiteTask st;
    if (t.is_string()) {
      st.spec = t.get<std::string>();
    } else if (t.is_object() && t.contains("task") && t["task"].is_string()) {
      st.spec = t["task"].get<std::string>();
      for (const auto& [k, v] : t.items()) {
        if (k == "task") continue;
        if (k == "samples") {
          if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > INT_MAX)
            fail("{}: samples: expected an integer ≥ 1", where);
          st.samples = v.get<int>();
        } else if (k == "limit") {
          if (!v.is_number_integer() || v.get<long long>() < 0) fail("{}: limit: expected an integer ≥ 0", where);
          st.limit = v.get<size_t>();
        } else if (k == "max_new_tokens") {
          if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > INT_MAX)
            fail("{}: max_new_tokens: expected an integer ≥ 1", where);
          st.max_new_tokens = v.get<int>();
        } else if (k == "sampling") {
          check_sampling(v, where);
        } else if (k == "models") {
          st.models = get_names(v, where, "models");
        } else if (k == "policies") {
          st.policies = get_names(v, where, "policies");
        } else if (k == "budgets") {
          st.budgets = get_budgets(v, where);
        } else {
          fail("{}: unknown key '{}' (task, samples, limit, max_new_tokens, sampling, models, budgets, policies)",
               where, k);
        }
      }
    } else {
      fail("{}: expected a task name or a mapping with 'task'", where);
    }
    st.sampling = base;
    if (t.is_object() && t.contains("sampling")) st.sampling.update(t["sampling"]);
    try {
      make_task(st.spec);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
    s.tasks.push_back(std::move(st));
  }
  return s;
}

Suite load_suite(const std::string& name_or_path) {
  const std::string& n = name_or_path;
  bool is_path = n.find('/') != std::string::npos || (n.size() > 5 && n.substr(n.size() - 5) == ".yaml") ||
                 (n.size() > 4 && n.substr(n.size() - 4) == ".yml");
  if (is_path) return parse_suite(read_file(n, InputKind::kYaml), n);
  return parse_suite(builtin_suite_text(n), "builtin:" + n);
}

}  // namespace kvb::tasks
