// The plan of `kvbench run`: its options (RunArgs), and the steps that turn them into the grid
// of work items and the run row — the suite, budgets, policies (with their cell labels), model
// revisions (sha256 of the weights), the expanded grid and the run configuration — plus the
// end-of-run summary. Loading a suite's examples and the ungraded warning are shared with
// `kvbench grade`. docs/architecture.md#the-run-grid-and-resume.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/policies/resolved.h"
#include "harness/judge_grading.h"
#include "results/grid.h"
#include "results/store.h"
#include "tasks/suite.h"
#include "tasks/task.h"

namespace kvb::cli {

/// The examples of a suite's tasks, by suite task spec, and the bad records that were skipped.
struct LoadedTasks {
  std::vector<tasks::SuiteTask> suite_tasks;
  std::map<std::string, std::vector<tasks::Example>> examples;  ///< by SuiteTask::spec
  std::vector<std::string> skipped;                             ///< one line per skipped record
  /// The dataset files each task located, by SuiteTask::spec: (registry key, local path), in
  /// the order located (the run's input identity hashes them: harness/input_identity.h).
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> data_files;
};

/// Loads every example of `suite_tasks` from the data directories (datasets::DataLocator),
/// `cli_limit` (0: each task's own limit) examples per task; `on_bad` is "skip" or "fail"
/// (datasets::parse_on_bad). Throws kvb::Error for a bad spec, missing data or (on_bad=fail)
/// a malformed record.
LoadedTasks load_tasks(const std::vector<tasks::SuiteTask>& suite_tasks, const std::vector<std::string>& data_dirs,
                       size_t cli_limit, const std::string& on_bad);

/// The revision of a model: the sha256 (hex) of its weight file, or of the concatenated hex
/// digests of its safetensors shards; "" hashed for a directory without known weight files.
/// Each file is hashed once per process (hash_input_file, harness/input_identity.h).
/// Throws kvb::Error when a file cannot be read.
std::string weights_sha256(const std::string& spec);

/// This machine's host name, and its CPU model from /proc/cpuinfo ("cpu" when unknown).
std::string hostname();
std::string cpu_model();

/// The options of `kvbench run` (harness/cmd_run.cpp documents each flag).
struct RunArgs {
  std::string suite = "smoke";
  std::vector<std::string> tasks, models, data_dirs;
  std::string policies = "full,snapkv";  // the default run: full cache + one compressing policy
  std::string budgets;                   // empty: the suite's, else 64,128
  int samples = 0;                       // 0: the suite's
  std::optional<double> temperature, top_p;
  std::optional<int> top_k, max_new_tokens;
  double min_p = 0.0;
  uint64_t seed = 0;
  std::string backend = "cpu", db = "kvbench.db", run_name, on_bad = "fail";
  size_t limit = 0;
  bool query_agnostic = false;      // prefill and compress a task's shared context before its query
  std::string truncate = "middle";  // over-long prompts: middle (LongBench/HELMET) or none (stored as errors)
  std::string config, config_profile;
  std::optional<std::string> shard;
  int batch = 8, prefill_chunk = 512, write_every = 8;  // batch 0: no count limit (with --memory)
  /// --memory GIB: the KV page pool (EngineOptions::kv_pool_bytes); 0 = unbounded (count only).
  double memory_gib = 0;
  int64_t max_step_tokens = 0;        ///< --max-step-tokens (EngineOptions::max_step_tokens)
  std::string admission = "reserve";  ///< --admission reserve|optimistic (EngineOptions::admission)
  /// --weights: how weight matrices are held (parse_weights_option: stored, f32, bf16).
  std::string weights = "stored";
  bool bf16 = false;  // --bf16-weights, the old spelling of --weights bf16
  bool quiet = false;
  bool strict = false;  // exit 1 when any sample is left ungraded (failed judge request, grader error)
  JudgeArgs judge;
};

/// The suite of the run: the --task specs (each validated) or --suite (tasks::load_suite).
tasks::Suite resolve_suite(const RunArgs& a);

/// --budgets (parse_budget_list in cli_checks.h), else the suite's, else {64, 128}.
std::vector<int64_t> resolve_budgets(const RunArgs& a, const tasks::Suite& suite);

/// The run's policies: the spec texts as run (learned policies without weights get the released
/// weights known for `models`, else random ones: default_gates in run_support.h; the list split by split_policy_list), their grid entries (resolved parameters without the budget,
/// cell label ResolvedPolicy::label), each cell label's ResolvedPolicy (parsed once, built once by
/// the registry; it decides whether the policy takes a budget), and the notes saying which
/// weights are random (printed as warnings). `first_budget` resolves budget-relative defaults.
/// Throws kvb::Error for an empty list or a bad spec.
/// One policy of a run: the spec text as run (recorded with each generation) and its resolution.
struct RunPolicy {
  std::string text;
  ResolvedPolicy resolved;
};
struct RunPolicies {
  std::vector<std::string> texts;
  std::vector<results::PolicySpec> grid;
  std::map<std::string, RunPolicy> by_label;  ///< by cell label (results::PolicySpec::label)
  nlohmann::json notes = nlohmann::json::array();
  /// The grid entries of the suite tasks that name their own `policies`, by SuiteTask::spec
  /// (add_task_policies); a task not here runs `grid`.
  std::map<std::string, std::vector<results::PolicySpec>> task_grid;
};
RunPolicies resolve_policies(const std::string& list, int64_t first_budget, const std::vector<std::string>& models);

/// The models of the run's cells: each suite task's own `models`, else `run_models`, in order of
/// first appearance without repeats (a model no task runs on is not loaded).
std::vector<std::string> run_model_specs(const tasks::Suite& suite, const std::vector<std::string>& run_models);

/// Adds the policies of every suite task that names its own (SuiteTask::policies) to `p`: each
/// list resolved as resolve_policies does, with the task's first budget (else `run_budgets`'s)
/// and the task's models (else `run_models`), its grid entries put in p.task_grid under the
/// task's spec, and its specs, cells and notes merged into p's (a cell label already there keeps
/// its first resolution). Throws kvb::Error "<suite origin>: tasks[i]: policies: <why>" for a
/// bad spec.
void add_task_policies(RunPolicies& p, const tasks::Suite& suite, const std::vector<int64_t>& run_budgets,
                       const std::vector<std::string>& run_models);

/// An example of the grid and its generation cap (tokens).
struct ExampleRef {
  const tasks::Example* ex = nullptr;
  int max_new_tokens = 0;
};

/// The expanded grid: models with their revisions, work items, and what the run config records.
/// `by_example` points into the LoadedTasks it was expanded from.
struct RunGrid {
  /// Models as the cells name them: the --model spec, with "@f32" / "@bf16" appended when
  /// --weights is not the default `stored` (model_cell_id), so cells, work-item keys and report
  /// headings say which weights produced them.
  std::vector<results::ModelRef> models;
  std::map<std::string, std::string> spec_of;  ///< cell model id -> the --model spec to load
  std::vector<results::RunModel> run_models;
  std::vector<results::WorkItem> items;
  std::map<std::string, ExampleRef> by_example;               ///< task + "\n" + example id
  nlohmann::json sampling_record = nlohmann::json::object();  ///< task -> model -> {sampling, source}
  nlohmann::json gen_configs = nlohmann::json::object();      ///< model -> generation_config.json fields
};

/// The model id of the cells of `spec` run with `--weights weights`: `spec` for "stored", else
/// spec + "@" + weights (e.g. "smollm2-135m-instruct@f32").
std::string model_cell_id(const std::string& spec, const std::string& weights);

/// One grid expansion (results::expand_grid) per suite task and model: samples, caps and
/// sampling differ per task, sampling per model too when it comes from the model's
/// generation_config.json (resolve_sampling). A task runs on its own models, budgets and
/// policies when it names them (SuiteTask::models, budgets; policies.task_grid), else on
/// `run_models`, `budgets` and policies.grid; `model_specs` (run_model_specs) are all the models
/// loaded. Model revisions are weights_sha256. A query-agnostic run hashes its prompts
/// differently. Throws kvb::Error when no example is left.
RunGrid expand_run_grid(const RunArgs& a, const std::vector<std::string>& model_specs, const LoadedTasks& lt,
                        const RunPolicies& policies, const std::vector<int64_t>& budgets,
                        const std::vector<std::string>& run_models);

/// The run row: version, git sha, host, backend, device, the resolved configuration (what the
/// run key covers; docs/results.md#run-keys-and-resume), models and datasets (each with the
/// combined sha256 of its files), its run key, and the hashes of every file it reads
/// (RunInfo::inputs: model_inputs and dataset_inputs of harness/input_identity.h; a resume of a
/// run whose inputs changed is refused by Store::begin_run).
results::RunInfo run_info(const RunArgs& a, const tasks::Suite& suite, const LoadedTasks& lt,
                          const std::vector<std::string>& model_specs, const RunPolicies& policies,
                          const std::vector<int64_t>& budgets, const std::vector<std::string>& data_dirs,
                          const RunGrid& rg);

/// Prints the per-cell table of run `run_id` on stdout: pass@1 with its Wilson 95% interval,
/// decode tok/s per sequence and aggregate, prefill tok/s, TTFT, KV peak and steady bytes, and the
/// paired difference to the full cache (each column defined in a footer and docs/results.md).
void print_cells(results::Store& store, int64_t run_id);

/// The end-of-run line for samples left ungraded (failed judge requests, grader errors): they
/// count in no pass@1 until `kvbench grade --retry-failed` grades them. With `strict`, exits 1.
void warn_ungraded(size_t n_ungraded, size_t total, const std::string& reason, const std::string& db, bool strict);

}  // namespace kvb::cli
