// Per-cell metrics computed in C++ from v_samples rows (the same definitions as the SQL views
// v_cells / v_pass_at_k / v_maj_at_k, plus the paired bootstrap against the full-cache cell,
// which SQL cannot do). A cell is (run, model, task, policy spec, budget).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "results/stats.h"
#include "results/store.h"

namespace kvb::results {

/// Identity of a cell. Ordered by run, model, task, policy label, budget.
struct CellKey {
  int64_t run_id = 0;
  std::string model_id, task, policy_label;
  int64_t budget = 0;
  auto operator<=>(const CellKey&) const = default;
};

/// Metrics of one cell. Accuracy metrics count graded samples only.
struct Cell {
  CellKey key;
  std::string policy;               ///< policy name (label without params)
  int n_samples = 0;                ///< stored generations
  int n_graded = 0;                 ///< generations with a score
  int n_ungraded = 0;               ///< graded as "cannot score" (left out of accuracy)
  int n_examples = 0;               ///< examples with at least one graded sample
  std::optional<MeanCI> pass1;      ///< mean of per-example mean scores, 95% Wilson CI over examples
  std::map<int, double> pass_at_k;  ///< k = 1, 2, 4, ... <= max samples (examples with n >= k)
  std::map<int, double> maj_at_k;   ///< same k grid
  /// decode_tok_s: per-sequence decode rate, Σ generated tokens / Σ decode_s (each sequence's
  /// seconds in the decode steps it took part in); prefill_tok_s: Σ prompt tokens / Σ prefill_s
  /// (per sequence, likewise); ttft_s_mean: mean time to first token (docs/results.md).
  double decode_tok_s = 0, prefill_tok_s = 0, ttft_s_mean = 0;
  /// Aggregate decode rate: Σ generated tokens / Σ decode_share_s (the decode steps' wall time);
  /// nullopt unless every sample measured its share (rows from before schema v4 did not).
  std::optional<double> decode_tok_s_agg;
  /// Mean steady KV footprint after compression (SampleRow::kv_bytes_steady); nullopt unless every
  /// sample measured it.
  std::optional<double> kv_bytes_steady_mean;
  /// Realised KV tokens per (layer, kv_head): the mean over samples of SampleRow::kv_tokens_mean,
  /// and the largest SampleRow::kv_tokens_peak; nullopt unless every sample measured them (rows
  /// from before schema v5 did not). A budget_kind=threshold cell's realised budget.
  std::optional<double> kv_tokens_mean;
  std::optional<int64_t> kv_tokens_peak;
  /// The run's `--memory` KV page pool in GiB (RunRow config `memory_gib`; CellOptions::run_memory_gib);
  /// nullopt for a run admitted by count. Cells with equal memory_gib ran under the same pool.
  std::optional<double> memory_gib;
  /// Mean over samples of SampleRow::decode_batch_mean (sequences decoding together); nullopt
  /// unless every sample recorded it.
  std::optional<double> decode_batch_mean;
  int64_t preemptions = 0;  ///< Σ SampleRow::preemptions over the cell's samples
  double kv_bytes_peak_mean = 0, kv_bytes_final_mean = 0;
  int64_t kv_bytes_peak_max = 0, device_peak_bytes = 0;
  /// Mean over the samples that measured it of the K+V bytes read per decode step
  /// (SampleRow::kv_bytes_read_step); nullopt when none did (rows from before schema v3).
  std::optional<double> kv_bytes_read_step_mean;
  double evictions_mean = 0, evicted_frac = 0, truncated_frac = 0;
  bool is_reference = false;  ///< this is the full-cache cell of its (run, model, task)
  /// Paired-bootstrap 95% CI of (this cell - reference cell) in score units, over examples,
  /// using samples paired by (example id, sample index); nullopt without a reference or pairs.
  std::optional<MeanCI> delta_vs_reference;
  int paired_examples = 0;
};

/// Options for compute_cells.
struct CellOptions {
  std::string reference_policy = "full";  ///< policy name of the reference (full cache) cells
  /// run_id -> the run's `--memory` in GiB (run_memory_gib); runs absent ran without a pool.
  std::map<int64_t, double> run_memory_gib;
  int resamples = kBootstrapResamples;
  uint64_t seed = kBootstrapSeed;
};

/// Per-example paired differences between two sets of samples: samples are matched by
/// `pair_key` (e.g. item key, or example id + sample index); for each example with at least one
/// matched, graded-in-both pair, the mean of (a.score - b.score) over its pairs. Returns the
/// per-example differences (ordered by example id) and, via `n_pairs`, the number of pairs.
std::vector<double> paired_example_diffs(const std::vector<const SampleRow*>& a, const std::vector<const SampleRow*>& b,
                                         bool match_by_item_key, int* n_pairs = nullptr);

/// run_id -> `memory_gib` of each run's stored config (`kvbench run --memory`), for the runs
/// that set a positive, finite one. A config_json that is not JSON is skipped.
std::map<int64_t, double> run_memory_gib(const std::vector<RunRow>& runs);

/// Groups `rows` into cells and computes every metric (see Cell). Deterministic.
std::vector<Cell> compute_cells(const std::vector<SampleRow>& rows, const CellOptions& opt = {});

}  // namespace kvb::results
