#include "results/compare.h"

#include <array>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/util/error.h"

namespace kvb::results {

CompareResult compare_runs(Store& store, int64_t baseline, int64_t candidate,
                           const CompareOptions& opt) {
  if (!(opt.alpha > 0 && opt.alpha < 1)) fail("compare: --alpha must be in (0, 1), got {}", opt.alpha);
  if (opt.min_drop < 0) fail("compare: --min-drop must be >= 0 points, got {}", opt.min_drop);
  auto base_rows = store.samples({baseline});
  auto cand_rows = store.samples({candidate});
  using K = std::tuple<std::string, std::string, std::string, int64_t>;
  std::map<K, std::vector<const SampleRow*>> bc, cc;
  for (const auto& s : base_rows) bc[{s.model_id, s.task, s.policy_label, s.budget}].push_back(&s);
  for (const auto& s : cand_rows) cc[{s.model_id, s.task, s.policy_label, s.budget}].push_back(&s);
  CompareResult res;
  for (const auto& [k, b] : bc) {
    auto it = cc.find(k);
    int pairs = 0;
    std::vector<double> diffs;
    if (it != cc.end()) diffs = paired_example_diffs(it->second, b, true, &pairs);
    if (pairs == 0) {
      res.baseline_only_cells++;
      continue;
    }
    CompareRow row;
    std::tie(row.model_id, row.task, row.policy_label, row.budget) = k;
    row.shared_samples = pairs;
    row.examples = static_cast<int>(diffs.size());
    // Means over the shared pairs, per example then over examples (as pass@1).
    std::map<std::string, const SampleRow*> bmap;
    for (const auto* s : b)
      if (s->score) bmap[s->item_key] = s;
    std::map<std::string, std::array<double, 3>> ex;  // base sum, cand sum, count
    for (const auto* s : it->second) {
      if (!s->score) continue;
      auto m = bmap.find(s->item_key);
      if (m == bmap.end()) continue;
      auto& e = ex[s->example_id];
      e[0] += *m->second->score;
      e[1] += *s->score;
      e[2] += 1;
    }
    for (const auto& [id, e] : ex) {
      row.baseline += e[0] / e[2];
      row.candidate += e[1] / e[2];
    }
    row.baseline /= ex.size();
    row.candidate /= ex.size();
    row.delta = paired_bootstrap_ci(diffs, opt.resamples, opt.seed);
    for (double d : diffs) {
      if (d < -1e-12) row.worse++;
      else if (d > 1e-12) row.better++;
    }
    row.p_value = sign_test_p(row.worse, row.better);
    row.regression = row.delta.mean < 0 && row.p_value < opt.alpha &&
                     -row.delta.mean * 100.0 >= opt.min_drop;
    res.any_regression |= row.regression;
    res.rows.push_back(std::move(row));
  }
  for (const auto& [k, c] : cc) {
    auto it = bc.find(k);
    int pairs = 0;
    if (it != bc.end()) paired_example_diffs(c, it->second, true, &pairs);
    if (pairs == 0) res.candidate_only_cells++;
  }
  if (res.rows.empty())
    fail("{}: runs {} and {} share no graded work item (same model revision, policy, budget, "
         "sampling, prompts and seeds are needed)",
         store.path(), baseline, candidate);
  return res;
}

std::string format_compare_table(const CompareResult& r, const CompareOptions& opt) {
  std::string out = fmt::format("{:<28} {:<14} {:<22} {:>7} {:>6} {:>8} {:>8} {:>8} {:>17} {:>5} {:>5} {:>8}  {}\n",
                                "model", "task", "policy", "budget", "n", "base%", "cand%",
                                "delta", "95% CI (boot)", "worse", "bettr", "p", "verdict");
  int reg = 0;
  for (const auto& row : r.rows) {
    std::string budget = row.budget == kNoBudget ? "-" : std::to_string(row.budget);
    std::string verdict = row.regression ? "REGRESSION"
                          : (row.delta.mean > 0 && row.p_value < opt.alpha) ? "improved"
                                                                             : "ok";
    reg += row.regression;
    out += fmt::format(
        "{:<28} {:<14} {:<22} {:>7} {:>6} {:>8.2f} {:>8.2f} {:>+8.2f} {:>17} {:>5} {:>5} {:>8.4f}  {}\n",
        row.model_id.substr(0, 28), row.task.substr(0, 14), row.policy_label.substr(0, 22), budget,
        row.shared_samples, 100 * row.baseline, 100 * row.candidate, 100 * row.delta.mean,
        fmt::format("[{:+.2f}, {:+.2f}]", 100 * row.delta.lo, 100 * row.delta.hi), row.worse,
        row.better, row.p_value, verdict);
  }
  out += fmt::format(
      "{} cells compared, {} regression(s) (exact sign test over examples, alpha {}, min drop {} "
      "points); {} baseline-only and {} candidate-only cells skipped\n",
      r.rows.size(), reg, opt.alpha, opt.min_drop, r.baseline_only_cells, r.candidate_only_cells);
  return out;
}

}  // namespace kvb::results
