// Suites: named lists of tasks with per-task sample counts, limits, generation caps and
// sampling parameters. Built-in suites (math, longproc, longctx, smoke) are YAML files under
// tasks/suites/ compiled into the binary; a user suite is a YAML file with the same schema:
//
//   name: my-suite
//   description: ...
//   sampling: {temperature: 0.6, top_p: 0.95}     # default for every task (optional)
//   budgets: [512, 1024]                           # KV budgets for `kvbench run` (optional)
//   tasks:
//     - task: gsm8k:template=rkv                   # task spec (name[:key=value,...])
//       samples: 8                                 # samples per example (default 1)
//       limit: 100                                 # first N examples (default all)
//       max_new_tokens: 4096                       # override the task's cap (optional)
//       sampling: {temperature: 0}                 # per-task override (optional)
//       models: [qwen2.5-coder-1.5b-instruct]      # this task's models (optional)
//       budgets: [128]                             # this task's KV budgets (optional)
//       policies: [full, 'snapkv:buffer=64']       # this task's policy specs (optional)
//
// A task's own models, budgets and policies replace, for that task only, what the run uses for
// the others (--model / --budgets / --policies, a config file's run section, the suite's
// budgets): "this task on this model", e.g. ci/nightly-suite.yaml's GSM8K cells on a real model
// beside smoke cells on the default one. A task without them runs on the run's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::tasks {

/// One entry of a suite.
struct SuiteTask {
  std::string spec;                                    ///< task spec, e.g. "gsm8k:template=rkv"
  int samples = 1;                                     ///< samples per example (≥ 1)
  size_t limit = 0;                                    ///< first N examples, 0 = all
  std::optional<int> max_new_tokens;                   ///< overrides the task's generation cap
  nlohmann::json sampling = nlohmann::json::object();  ///< merged suite + task sampling params
  std::vector<std::string> models;                     ///< this task's models; empty: the run's
  std::vector<long long> budgets;                      ///< this task's KV budgets; empty: the run's
  std::vector<std::string> policies;                   ///< this task's policy specs; empty: the run's
};

/// A parsed suite.
struct Suite {
  std::string name;
  std::string description;
  std::string origin;  ///< "builtin:<name>" or the file path
  std::vector<SuiteTask> tasks;
  std::vector<long long> budgets;  ///< empty when the suite does not fix budgets
};

/// Names of the built-in suites, sorted.
std::vector<std::string> builtin_suites();

/// YAML text of a built-in suite; throws kvb::Error for an unknown name.
std::string builtin_suite_text(const std::string& name);

/// Parses suite YAML text; `origin` names it in errors ("<origin>: tasks[2]: ..."). Every task
/// spec is checked with make_task (unknown tasks/options are errors).
Suite parse_suite(const std::string& yaml_text, const std::string& origin);

/// A built-in suite by name, or a user suite from a YAML file path (anything containing '/' or
/// ending in .yaml/.yml). Throws kvb::Error listing the built-in names when neither matches.
Suite load_suite(const std::string& name_or_path);

/// Prompt assets compiled into the binary (tasks/assets/<name>); throws kvb::Error if absent.
std::string embedded_asset(const std::string& name);

}  // namespace kvb::tasks
