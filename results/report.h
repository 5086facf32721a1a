// `kvbench report`: a self-contained index.html (inline SVG, no scripts, no network), a
// Markdown summary and a CSV of every cell, from a results store.
//
// Per (model, task) the HTML has three charts — accuracy (pass@1) vs budget, vs realised KV
// bytes (mean per-sequence peak) and vs decode tok/s — plus, when any cell measured it (schema v3),
// accuracy vs KV bytes read per decode step (what read-selection policies such as Quest save);
// one line per policy spec, 95% Student-t
// error bars, the Pareto frontier ringed and joined by a dashed line, and the full cache as a
// dashed reference line with its CI band; and a table with each cell's paired-bootstrap 95% CI
// of the difference to the full cache (kBootstrapResamples resamples over examples, seed
// kBootstrapSeed).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "results/cells.h"
#include "results/store.h"

namespace kvb::results {

/// Options of write_report.
struct ReportOptions {
  std::string out_dir;           ///< created when missing
  std::vector<int64_t> run_ids;  ///< runs to include; empty = all
  CellOptions cells;             ///< reference policy, bootstrap resamples and seed
  std::string title = "kvbench report";
};

/// Paths of the written files.
struct ReportFiles {
  std::string html, markdown, csv;
};

/// Writes index.html, report.md and cells.csv into opt.out_dir, each through a temporary file
/// and a rename (write_output_file). Throws kvb::Error (exit 2) before writing anything when one
/// of them is the database read or a symbolic link (a write must not leave --out), kvb::Error
/// (exit 1) naming the file on I/O failure (disk full, EFBIG), and kvb::Error naming the
/// database when it holds no generations for the selected runs.
ReportFiles write_report(Store& store, const ReportOptions& opt);

/// Indices of the Pareto-optimal points among (x, y): y is better higher; x is better lower
/// when `x_lower_better`, else higher. A point is on the frontier when no other point is at
/// least as good in both and strictly better in one. Returned in increasing x.
std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& pts, bool x_lower_better);

/// Names to show for model ids (work_items.model_id is what the user passed to --model): an id
/// that is not a path — a built-in name such as `smollm2-135m-instruct` or a Hugging Face repo id
/// `owner/name` — is shown as it is; a path (absolute, starting with `.` or `~`, with more than
/// one `/`, or ending in `.gguf`) by its file or directory name, with as many parent folders as it
/// takes to tell the paths of `ids` apart (`a/model` and `b/model` stay `a/model`, `b/model`).
/// The full id stays in cells.csv and in the HTML's tooltips. Returns a name for every id.
std::map<std::string, std::string> display_model_names(const std::set<std::string>& ids);

/// cells.csv content: a header row then one row per cell (RFC 4180 quoting).
std::string cells_csv(const std::vector<Cell>& cells);

}  // namespace kvb::results
