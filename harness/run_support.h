// Pieces of `kvbench run` that are testable without the CLI: the nightly/config file reader,
// LongBench/HELMET-style middle truncation of over-long prompts, the default-gates rule for
// learned-gate policies, and the rendering of multi-turn (SCBench) follow-up turns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/policies/policy.h"

namespace kvb::cli {

/// The `run` settings of a config file such as ci/nightly.yaml. Every field is optional; a
/// field that is set fills the corresponding `kvbench run` option unless that option was given
/// on the command line. Paths (data_dir, db, models) are used as written, i.e. relative to the
/// working directory of `kvbench run` (ci/README.md runs from the repository root).
struct RunConfigFile {
  std::string path;  ///< the file read (for messages)
  std::optional<std::string> suite, db, backend;
  std::vector<std::string> data_dirs;  ///< `data_dir` (string) or `data_dirs` (list)
  std::vector<std::string> models;
  std::vector<std::string> policies;  ///< one policy spec per entry
  std::vector<int64_t> budgets;
  std::optional<int> samples, max_new_tokens, top_k;
  std::optional<size_t> limit;
  std::optional<double> temperature, top_p, min_p;
  std::optional<double> memory;  ///< `memory`: the KV page pool in GiB (kvbench run --memory)
  std::optional<uint64_t> seed;
  std::optional<double> alpha, min_drop_points;  ///< `thresholds` (for `kvbench compare`)
  /// `thresholds.max_throughput_drop_pct` (kvbench compare --max-throughput-drop).
  std::optional<double> max_throughput_drop_pct;
};

/// Reads `path` (YAML): top-level `suite`, `data_dir`/`data_dirs`, `db`, a `run` mapping (suite,
/// models, policies, budgets, samples, limit, temperature, top_p, top_k, min_p, max_new_tokens,
/// seed, backend; its `suite` wins over the top-level one) and `thresholds` (alpha,
/// min_drop_points, max_throughput_drop_pct). With `profile` (e.g. "gpu_run") the keys
/// of that top-level mapping override those of `run` (as ci/nightly.yaml's gpu_run does). Other
/// top-level mappings are profiles, checked as run sections whether selected or not; `report`
/// may hold only `out` (a string). Throws kvb::Error naming the file and the key for a missing
/// file, an unknown top-level scalar key, an unknown key inside run/thresholds/report/a profile,
/// a wrong type, an integer outside its field's range (budgets, samples, top_k, max_new_tokens
/// in [1 or 0, 2^31-1]; seed in [0, 2^64-1]: never truncated), a non-finite number, top_p or
/// min_p outside [0, 1], a negative temperature, an empty models/policies/budgets/data_dirs list
/// or empty string (they would silently mean "the default"), or an unknown profile. (Defined in
/// harness/run_config.cpp.)
RunConfigFile load_run_config(const std::string& path, const std::string& profile = "");

/// Middle truncation of a prompt that is too long, at the token level as LongBench
/// (pred.py: `half = int(max_length/2); tokens[:half] + tokens[-half:]`) and HELMET do: when
/// `ids.size() > limit`, keeps the first floor(limit/2) and the last floor(limit/2) ids (so the
/// chat template's leading and trailing special tokens and the question at the end survive);
/// otherwise returns `ids` unchanged. `limit` must be >= 2 (kvb::Error otherwise).
std::vector<int32_t> truncate_middle(const std::vector<int32_t>& ids, size_t limit);

/// The one rule for learned policies without weights, applied to `spec`, the parsed form of
/// `policy_text` (it gets the same parameter the returned text gains) (every policy whose registry entry has
/// PolicyInfo::learned: trimkv, wgkv `gates=` / `random_gates=`; foresightkv `scorer=` /
/// `random_scorer=`), for a run over `models` (what --model names): a spec that names weights
/// or random weights comes back unchanged; otherwise, when the released-checkpoint registry
/// (engine/policies/checkpoints.h) knows the same checkpoint for every model, the spec gets
/// `gates=<that checkpoint>` and `*picked` says which; when it knows none, the spec gets the
/// random key set to 0 (`random_gates=0`) and `*note` a line saying the weights are random
/// (`kvbench run` prints both and records them in the run's config as policy_notes; every work
/// item's policy_label and policy_params_json carry the parameter). Other specs come back
/// unchanged with both strings cleared. Throws kvb::Error when the
/// models need different checkpoints (or only some have one): run them separately or name the
/// weights.
std::string default_gates(PolicySpec& spec, const std::string& policy_text, const std::vector<std::string>& models,
                          std::string* note, std::string* picked);

}  // namespace kvb::cli
