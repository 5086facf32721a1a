// Grid expansion and sharding, independent of the engine: a `kvbench run` grid (models x policy
// specs x budgets x task examples x samples) becomes a flat list of WorkItems, each keyed by a
// SHA-256 content hash, and a deterministic slice of it is picked for this process
// (`--shard i/n`, Slurm or Open MPI ranks).
//
// The key covers everything that determines a generation: model id and revision, policy name and
// resolved parameters, budget, sampling parameters, the prompt (by its SHA-256), task, example id,
// sample index and seed. Two processes that expand the same grid get the same keys, so a rerun
// skips what is stored and shards merge without collisions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::results {

/// Budget value stored for policies that keep the whole cache (`full`): no budget applies.
inline constexpr int64_t kNoBudget = 0;

/// A model as the grid sees it: a display id (HF repo id or local path name) and the revision
/// that pins its weights (HF commit sha, or the weights' sha256 for local files).
struct ModelRef {
  std::string id;
  std::string revision;
};

/// One KV policy configuration. `params` are the fully resolved parameters (defaults filled in,
/// e.g. {"window": 32, "gates": "random"}), so two specs that behave the same hash the same.
/// `uses_budget` is false for the full cache: it is expanded once, with budget kNoBudget.
struct PolicySpec {
  std::string name;
  nlohmann::json params = nlohmann::json::object();
  bool uses_budget = true;
  /// The label to show and to group cells by, when the caller has a better one than the
  /// default (kvbench run: the name plus the parameters that differ from the policy's
  /// defaults, e.g. `trimkv:random_gates=0`). It must be unique per distinct `params`.
  std::string display;

  /// Display label and cell identity: `display` when set; else `name` when params are empty,
  /// else `name` + params as compact JSON with sorted keys, e.g. `snapkv{"window":32}`.
  std::string label() const;
};

/// Sampling parameters of a generation. temperature 0 means greedy; top_k 0 means disabled.
struct SamplingParams {
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  int max_new_tokens = 256;

  /// {"temperature":..,"top_p":..,"top_k":..,"max_new_tokens":..} (sorted keys).
  nlohmann::json to_json() const;
};

/// One benchmark example: task name, the example's stable id within the task, and the prompt
/// as the harness hands it to the engine (for chat tasks: the messages as compact JSON; the chat
/// template is covered by the model revision). Only the prompt's SHA-256 enters the key.
struct GridExample {
  std::string task;
  std::string example_id;
  std::string prompt;
};

/// A full grid. `seed` is the base seed; each sample's seed is derive_seed(seed, task, example,
/// sample index), independent of the model, policy and budget so that cells pair sample-for-
/// sample (same prompt, same seed) for paired tests against the full cache.
struct GridSpec {
  std::vector<ModelRef> models;
  std::vector<PolicySpec> policies;
  std::vector<int64_t> budgets;  ///< tokens kept per sequence; each > 0
  std::vector<GridExample> examples;
  int samples = 1;  ///< samples per example, >= 1
  SamplingParams sampling;
  uint64_t seed = 0;
};

/// One unit of work: a single sampled generation of one example under one model, policy spec
/// and budget. `key` is the 64-hex SHA-256 content key.
struct WorkItem {
  std::string key;
  std::string model_id;
  std::string model_revision;
  std::string policy;            ///< policy name, e.g. "snapkv"
  nlohmann::json policy_params;  ///< resolved parameters (object)
  std::string policy_label;      ///< PolicySpec::label()
  int64_t budget = kNoBudget;    ///< tokens; kNoBudget for the full cache
  std::string task;
  std::string example_id;
  std::string prompt_sha256;
  int sample_index = 0;
  uint64_t seed = 0;
  nlohmann::json sampling;  ///< SamplingParams::to_json()
};

/// Per-sample seed: the first 8 bytes (big-endian) of SHA-256 over
/// "kvbench-seed\0<base>\0<task>\0<example_id>\0<sample_index>", masked to 63 bits so it fits
/// SQLite's signed INTEGER.
uint64_t derive_seed(uint64_t base_seed, std::string_view task, std::string_view example_id, int sample_index);

/// The content key of a work item (all fields but `key` must be filled): SHA-256 of the compact,
/// key-sorted JSON {"v":1, "model", "revision", "policy", "params", "budget", "sampling",
/// "task", "example", "prompt_sha256", "sample", "seed"}.
std::string work_item_key(const WorkItem& item);

/// Expands `spec` in the order model, policy, budget, example, sample. Budget-free policies
/// (`uses_budget == false`) appear once per model with budget kNoBudget. The item count is
/// models * (budgeted policies * budgets + budget-free policies) * examples * samples.
/// Throws kvb::Error on an empty axis, samples < 1, a budget <= 0, or a duplicate policy label,
/// budget or (task, example id).
std::vector<WorkItem> expand_grid(const GridSpec& spec);

/// A process's slice of the grid: 0-based `index` in [0, count).
struct Shard {
  int index = 0;
  int count = 1;
};

/// Parses "i/n" (0-based i, 0 <= i < n, n >= 1). Throws kvb::Error naming `what` (e.g.
/// "--shard" or "SLURM_PROCID") on bad syntax or range.
Shard parse_shard(std::string_view text, std::string_view what = "--shard");

/// Environment lookup, injectable for tests; returns nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

/// The shard for this process: `cli` ("i/n") when given; otherwise SLURM_PROCID/SLURM_NTASKS
/// when both are set; otherwise OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE; otherwise 0/1.
/// Throws kvb::Error on malformed values (naming the variable).
Shard resolve_shard(const std::optional<std::string>& cli, const EnvLookup& env);

/// The items of `items` that belong to `shard`: sort the keys, and item with rank r (0-based
/// position in key order) goes to shard r mod count. Deterministic, independent of the input
/// order, and balanced to within one item. The result keeps the input order.
std::vector<WorkItem> select_shard(const std::vector<WorkItem>& items, Shard shard);

}  // namespace kvb::results
