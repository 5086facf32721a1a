#include "results/compare.h"

#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "results/report.h"

namespace kvb::results {

namespace {

using CellId = std::tuple<std::string, std::string, std::string, int64_t>;  // model, task, label, budget
using Samples = std::vector<const SampleRow*>;

/// Compares one candidate cell with one baseline cell whose samples are matched by item_key
/// (the caller rewrites item_key into a prompt-and-seed key for cells with changed parameters).
/// Returns false when no graded sample pairs up.
bool compare_cell(const Samples& b, const Samples& c, const CompareOptions& opt, CompareRow& row) {
  int pairs = 0;
  std::vector<double> diffs = paired_example_diffs(c, b, true, &pairs);
  if (pairs == 0) return false;
  row.shared_samples = pairs;
  row.examples = static_cast<int>(diffs.size());
  // Means over the shared pairs, per example then over examples (as pass@1).
  std::map<std::string, const SampleRow*> bmap;
  for (const auto* s : b)
    if (s->score) bmap[s->item_key] = s;
  std::map<std::string, std::array<double, 3>> ex;  // base sum, cand sum, count
  for (const auto* s : c) {
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
  row.regression = row.delta.mean < 0 && row.p_value < opt.alpha && -row.delta.mean * 100.0 >= opt.min_drop;
  return true;
}

/// item_key -> the key that pairs samples across policy parameters: model revision, task,
/// example id, prompt sha256, sample index, seed and sampling parameters (every work-item key
/// field except the policy's), for the generations of `run`.
std::map<std::string, std::string> prompt_seed_keys(Store& store, int64_t run) {
  std::map<std::string, std::string> out;
  for (const auto& r : store.query(
           fmt::format("SELECT w.item_key, w.model_revision, w.task, w.example_id, w.prompt_sha256, w.sample_index, "
                       "w.seed, w.sampling_json FROM work_items w JOIN generations g ON g.item_key = w.item_key "
                       "WHERE g.run_id = {}",
                       run)))
    out[r[0]] = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  return out;
}

std::string budget_text(int64_t b) { return b == kNoBudget ? "-" : std::to_string(b); }

/// Σ generated tokens / Σ decode_share_s of a cell's samples; nullopt when a sample lacks its
/// share (stored before schema v4) or the shares sum to 0.
std::optional<double> aggregate_tok_s(const Samples& s) {
  double tok = 0, sec = 0;
  for (const auto* r : s) {
    if (!r->decode_share_s) return std::nullopt;
    tok += static_cast<double>(r->generated_tokens);
    sec += *r->decode_share_s;
  }
  if (!(sec > 0)) return std::nullopt;
  return tok / sec;
}

}  // namespace

CompareResult compare_runs(Store& store, int64_t baseline, int64_t candidate, const CompareOptions& opt) {
  if (!(opt.alpha > 0 && opt.alpha < 1)) fail("compare: --alpha must be in (0, 1), got {}", opt.alpha);
  if (opt.min_drop < 0) fail("compare: --min-drop must be >= 0 points, got {}", opt.min_drop);
  if (opt.max_throughput_drop && !(*opt.max_throughput_drop > 0 && *opt.max_throughput_drop < 100))
    fail("compare: --max-throughput-drop must be in (0, 100) percent, got {}", *opt.max_throughput_drop);
  // Throughput is compared only between runs of one KV page pool (--memory).
  std::optional<double> memory;
  {
    const auto mem = run_memory_gib(store.runs());
    auto b = mem.find(baseline), c = mem.find(candidate);
    if (b != mem.end() && c != mem.end() && b->second == c->second) memory = b->second;
    // A gate that was asked for never passes by being skipped (issue 46, item 6).
    if (opt.max_throughput_drop && !memory) {
      auto gib = [&](decltype(b) it) {
        return it == mem.end() ? std::string("no --memory") : fmt::format("--memory {:g}", it->second);
      };
      fail(
          "compare: --max-throughput-drop: baseline run {} ({}) and candidate run {} ({}) do not share one --memory, "
          "and throughput is compared only at equal memory",
          baseline, gib(b), candidate, gib(c));
    }
  }
  auto throughput = [&](const Samples& b, const Samples& c, CompareRow& row) {
    if (!memory) return;
    row.memory_gib = memory;
    row.tok_s_baseline = aggregate_tok_s(b);
    row.tok_s_candidate = aggregate_tok_s(c);
    if (opt.max_throughput_drop && row.tok_s_baseline && row.tok_s_candidate)
      row.throughput_regression = *row.tok_s_candidate < *row.tok_s_baseline * (1.0 - *opt.max_throughput_drop / 100.0);
  };
  auto base_rows = store.samples({baseline});
  auto cand_rows = store.samples({candidate});
  std::map<CellId, Samples> bc, cc;
  for (const auto& s : base_rows) bc[{s.model_id, s.task, s.policy_label, s.budget}].push_back(&s);
  for (const auto& s : cand_rows) cc[{s.model_id, s.task, s.policy_label, s.budget}].push_back(&s);
  CompareResult res;
  std::set<CellId> b_done, c_done;
  std::map<CellId, CompareRow> rows;  // keyed by the candidate cell
  for (const auto& [k, b] : bc) {
    auto it = cc.find(k);
    if (it == cc.end()) continue;
    CompareRow row;
    std::tie(row.model_id, row.task, row.policy_label, row.budget) = k;
    if (!compare_cell(b, it->second, opt, row)) continue;
    throughput(b, it->second, row);
    b_done.insert(k);
    c_done.insert(k);
    rows[k] = std::move(row);
  }

  // Cells whose policy parameters changed: pair one-to-one by (model, task, policy name,
  // budget), samples by prompt and seed.
  using Group = std::tuple<std::string, std::string, std::string, int64_t>;  // model, task, policy, budget
  std::map<Group, std::vector<CellId>> b_open, c_open;
  for (const auto& [k, b] : bc)
    if (!b_done.count(k)) b_open[{std::get<0>(k), std::get<1>(k), b.front()->policy, std::get<3>(k)}].push_back(k);
  for (const auto& [k, c] : cc)
    if (!c_done.count(k)) c_open[{std::get<0>(k), std::get<1>(k), c.front()->policy, std::get<3>(k)}].push_back(k);
  std::map<std::string, std::string> b_keys, c_keys;
  std::deque<SampleRow> rekeyed;  // copies with item_key replaced (a deque keeps their addresses)
  for (const auto& [g, bk] : b_open) {
    auto it = c_open.find(g);
    if (bk.size() != 1 || it == c_open.end() || it->second.size() != 1) continue;
    if (b_keys.empty()) {
      b_keys = prompt_seed_keys(store, baseline);
      c_keys = prompt_seed_keys(store, candidate);
    }
    const CellId& ck = it->second.front();
    auto rekey = [&](const Samples& in, const std::map<std::string, std::string>& keys) {
      Samples out;
      for (const auto* s : in) {
        SampleRow& copy = rekeyed.emplace_back(*s);
        auto f = keys.find(s->item_key);
        if (f != keys.end()) copy.item_key = f->second;
        out.push_back(&copy);
      }
      return out;
    };
    Samples b = rekey(bc[bk.front()], b_keys), c = rekey(cc[ck], c_keys);
    CompareRow row;
    std::tie(row.model_id, row.task, row.policy_label, row.budget) = ck;
    row.baseline_label = std::get<2>(bk.front());
    if (!compare_cell(b, c, opt, row)) continue;
    throughput(b, c, row);
    b_done.insert(bk.front());
    c_done.insert(ck);
    rows[ck] = std::move(row);
  }

  for (auto& [k, row] : rows) {
    if (opt.max_throughput_drop && (!row.tok_s_baseline || !row.tok_s_candidate))
      fail(
          "compare: --max-throughput-drop: cell {} {} {} budget {} has no decode time stored ({} run; decode_share_s), "
          "so its throughput cannot be compared",
          row.model_id, row.task, row.policy_label, row.budget, row.tok_s_baseline ? "candidate" : "baseline");
    res.any_regression |= row.regression || row.throughput_regression;
    res.rows.push_back(std::move(row));
  }
  std::set<std::string> ids;
  for (const auto& [k, b] : bc) ids.insert(std::get<0>(k));
  for (const auto& [k, c] : cc) ids.insert(std::get<0>(k));
  const auto names = display_model_names(ids);
  auto skipped = [&](const char* side, const CellId& k) {
    const auto& [m, t, l, b] = k;
    return fmt::format("{}: {} {} {} @{}", side, names.at(m), t, l, budget_text(b));
  };
  for (const auto& [k, b] : bc)
    if (!b_done.count(k)) {
      res.baseline_only_cells++;
      res.skipped.push_back(skipped("baseline", k));
    }
  for (const auto& [k, c] : cc)
    if (!c_done.count(k)) {
      res.candidate_only_cells++;
      res.skipped.push_back(skipped("candidate", k));
    }
  if (res.rows.empty())
    fail(
        "{}: runs {} and {} share no graded work item (same model revision, policy, budget, "
        "sampling, prompts and seeds are needed)",
        store.path(), baseline, candidate);
  return res;
}

std::string format_compare_table(const CompareResult& r, const CompareOptions& opt) {
  std::set<std::string> ids;
  for (const auto& row : r.rows) ids.insert(row.model_id);
  const auto names = display_model_names(ids);
  size_t mw = 5, pw = 6;
  std::vector<std::string> labels;
  for (const auto& row : r.rows) {
    labels.push_back(row.baseline_label.empty() ? row.policy_label
                                                : row.policy_label + " (was " + row.baseline_label + ")");
    mw = std::max(mw, names.at(row.model_id).size());
    pw = std::max(pw, labels.back().size());
  }
  std::string out = fmt::format("{:<{}} {:<14} {:<{}} {:>7} {:>6} {:>8} {:>8} {:>8} {:>17} {:>5} {:>5} {:>8}  {}\n",
                                "model", mw, "task", "policy", pw, "budget", "n", "base%", "cand%", "delta",
                                "95% CI (boot)", "worse", "bettr", "p", "verdict");
  int reg = 0;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    std::string verdict = row.regression                                    ? "REGRESSION"
                          : (row.delta.mean > 0 && row.p_value < opt.alpha) ? "improved"
                                                                            : "ok";
    reg += row.regression;
    out += fmt::format("{:<{}} {:<14} {:<{}} {:>7} {:>6} {:>8.2f} {:>8.2f} {:>+8.2f} {:>17} {:>5} {:>5} {:>8.4f}  {}\n",
                       names.at(row.model_id), mw, row.task, labels[i], pw, budget_text(row.budget), row.shared_samples,
                       100 * row.baseline, 100 * row.candidate, 100 * row.delta.mean,
                       fmt::format("[{:+.2f}, {:+.2f}]", 100 * row.delta.lo, 100 * row.delta.hi), row.worse, row.better,
                       row.p_value, verdict);
  }
  out += fmt::format(
      "{} cells compared, {} regression(s) (exact sign test over examples, alpha {}, min drop {} "
      "points); {} baseline-only and {} candidate-only cells skipped\n",
      r.rows.size(), reg, opt.alpha, opt.min_drop, r.baseline_only_cells, r.candidate_only_cells);
  for (const auto& s : r.skipped) out += "  skipped " + s + "\n";
  // Throughput at equal memory, when both runs used the same --memory.
  bool any_tput = false;
  for (const auto& row : r.rows) any_tput |= row.tok_s_baseline && row.tok_s_candidate;
  if (!any_tput) return out;
  int slow = 0;
  out += fmt::format("aggregate decode tok/s at --memory {:g} GiB (both runs){}:\n", *r.rows.front().memory_gib,
                     opt.max_throughput_drop ? fmt::format(", flagged below -{:g} %", *opt.max_throughput_drop)
                                             : std::string(", not flagged (--max-throughput-drop)"));
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    if (!row.tok_s_baseline || !row.tok_s_candidate) continue;
    slow += row.throughput_regression;
    out += fmt::format("  {:<{}} {:<14} {:<{}} {:>7} {:>10.1f} {:>10.1f} {:>+8.1f} %  {}\n", names.at(row.model_id), mw,
                       row.task, labels[i], pw, budget_text(row.budget), *row.tok_s_baseline, *row.tok_s_candidate,
                       100.0 * (*row.tok_s_candidate / *row.tok_s_baseline - 1.0),
                       row.throughput_regression ? "SLOWER" : "ok");
  }
  out += fmt::format("{} throughput regression(s)\n", slow);
  return out;
}

}  // namespace kvb::results
