// `kvbench compare`: a paired test per cell between a baseline and a candidate run on the work
// items both runs generated (same model revision, policy spec, budget, sampling, prompt, sample
// index and seed).
//
// Test: per example, d = mean over its shared samples of (candidate score - baseline score).
// The regression test is the exact two-sided sign test on the examples with d != 0 (with one
// binary sample per example this is the exact McNemar test); a cell regresses when the mean
// difference is negative, p < alpha, and the drop is at least min_drop percentage points. A
// seeded paired bootstrap 95% CI of the mean difference (over examples) is shown for size.
//
// Cells are matched by (model, task, policy label, budget) and samples by work-item key. A cell
// whose policy parameters changed between the runs (an edited nightly config, or a default
// changed in the code) has a new label and shares no work item with its old self; when exactly
// one unmatched baseline cell and one unmatched candidate cell have the same model revision,
// task, policy name and budget, they are compared anyway, their samples paired by (model
// revision, task, example id, prompt sha256, sample index, seed, sampling parameters) — same
// prompt, same seed — and the row records the baseline's label (CompareRow::baseline_label).
// Other unmatched cells are listed as skipped.
//
// Throughput at equal memory: when both runs were made with the same `kvbench run --memory`
// (one KV page pool of that many GiB), each compared cell also carries both runs' aggregate
// decode rate (Σ generated tokens / Σ decode_share_s over the cell's samples: docs/results.md,
// decode_tok_s_agg). With CompareOptions::max_throughput_drop set, a cell whose candidate rate
// is more than that percentage below the baseline's is a throughput regression. Rates are wall
// time: compare runs made on the same machine, and allow for its noise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "results/cells.h"
#include "results/store.h"

namespace kvb::results {

/// Options of compare_runs.
struct CompareOptions {
  double alpha = 0.05;    ///< significance level of the two-sided sign test
  double min_drop = 0.0;  ///< minimum drop in percentage points (score x 100) to flag
  int resamples = kBootstrapResamples;
  uint64_t seed = kBootstrapSeed;
  /// Percent (0, 100): flag a cell run at equal --memory in both runs whose aggregate decode
  /// tok/s fell by more than this; nullopt: throughput is shown, never flagged.
  std::optional<double> max_throughput_drop;
};

/// One compared cell (run ids left out of the key: model, task, policy label, budget).
struct CompareRow {
  std::string model_id, task, policy_label;
  int64_t budget = 0;
  /// The baseline cell's policy label when it differs from `policy_label` (parameters changed
  /// between the runs; samples paired by prompt and seed instead of work-item key), else empty.
  std::string baseline_label;
  int shared_samples = 0;     ///< work items graded in both runs
  int examples = 0;           ///< examples with at least one shared sample
  double baseline = 0;        ///< mean score over the shared samples' examples (baseline)
  double candidate = 0;       ///< same for the candidate
  MeanCI delta;               ///< candidate - baseline, paired bootstrap CI (score units)
  int worse = 0, better = 0;  ///< examples with d < 0 / d > 0
  double p_value = 1;         ///< exact sign test
  bool regression = false;
  /// Both runs' --memory (GiB) when equal, and then each cell's aggregate decode tok/s (nullopt
  /// when the runs' memory differs or is unset, or a sample lacks its decode_share_s).
  std::optional<double> memory_gib, tok_s_baseline, tok_s_candidate;
  bool throughput_regression = false;  ///< see CompareOptions::max_throughput_drop
};

/// Result of compare_runs.
struct CompareResult {
  std::vector<CompareRow> rows;
  int baseline_only_cells = 0;  ///< cells of the baseline with no shared item in the candidate
  int candidate_only_cells = 0;
  /// The skipped cells, "baseline|candidate: model task policy_label @budget", in cell order.
  std::vector<std::string> skipped;
  bool any_regression = false;
};

/// Compares runs `baseline` and `candidate` of `store`, cell by cell (see the file comment for
/// how cells and samples are matched). Throws kvb::Error when no cell could be compared, or
/// for alpha outside (0, 1), a negative min_drop or a max_throughput_drop outside (0, 100).
CompareResult compare_runs(Store& store, int64_t baseline, int64_t candidate, const CompareOptions& opt = {});

/// A fixed-width text table of the result: one line per cell (model shown by display name, see
/// results/report.h display_model_names; a cell with changed parameters as "new (was old)"), a
/// summary line, then one line per skipped cell.
std::string format_compare_table(const CompareResult& r, const CompareOptions& opt);

}  // namespace kvb::results
