#include "results/cells.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

namespace kvb::results {

std::vector<double> paired_example_diffs(const std::vector<const SampleRow*>& a, const std::vector<const SampleRow*>& b,
                                         bool match_by_item_key, int* n_pairs) {
  auto key = [&](const SampleRow* s) {
    return match_by_item_key ? s->item_key : s->example_id + '\x1f' + std::to_string(s->sample_index);
  };
  std::map<std::string, const SampleRow*> bmap;
  for (const auto* s : b)
    if (s->score) bmap.emplace(key(s), s);
  std::map<std::string, std::pair<double, int>> per_example;  // sum, count
  int pairs = 0;
  for (const auto* s : a) {
    if (!s->score) continue;
    auto it = bmap.find(key(s));
    if (it == bmap.end()) continue;
    auto& pe = per_example[s->example_id];
    pe.first += *s->score - *it->second->score;
    pe.second += 1;
    ++pairs;
  }
  if (n_pairs) *n_pairs = pairs;
  std::vector<double> out;
  for (const auto& [ex, sc] : per_example) out.push_back(sc.first / sc.second);
  return out;
}

std::map<int64_t, double> run_memory_gib(const std::vector<RunRow>& runs) {
  std::map<int64_t, double> out;
  for (const auto& r : runs) {
    const auto j = nlohmann::json::parse(r.config_json, nullptr, false);
    if (!j.is_object()) continue;
    auto it = j.find("memory_gib");
    if (it == j.end() || !it->is_number()) continue;
    const double g = it->get<double>();
    if (std::isfinite(g) && g > 0) out[r.run_id] = g;
  }
  return out;
}

std::vector<Cell> compute_cells(const std::vector<SampleRow>& rows, const CellOptions& opt) {
  std::map<CellKey, std::vector<const SampleRow*>> groups;
  for (const auto& r : rows) groups[CellKey{r.run_id, r.model_id, r.task, r.policy_label, r.budget}].push_back(&r);

  // Reference cells per (run, model, task): the first cell (lowest budget) of reference_policy.
  std::map<std::tuple<int64_t, std::string, std::string>, const std::vector<const SampleRow*>*> ref;
  std::map<std::tuple<int64_t, std::string, std::string>, CellKey> ref_key;
  for (const auto& [k, g] : groups) {
    if (g.front()->policy != opt.reference_policy) continue;
    auto rk = std::make_tuple(k.run_id, k.model_id, k.task);
    if (!ref.count(rk)) {
      ref[rk] = &g;
      ref_key[rk] = k;
    }
  }

  std::vector<Cell> out;
  for (const auto& [k, g] : groups) {
    Cell c;
    c.key = k;
    c.policy = g.front()->policy;
    c.n_samples = static_cast<int>(g.size());
    // Per-example graded samples, in sample order (rows arrive sorted; sort again to be safe).
    std::map<std::string, std::vector<const SampleRow*>> ex;
    double gen_tok = 0, dec_s = 0, pr_tok = 0, pr_s = 0, ttft = 0, kvp = 0, kvf = 0, ev = 0, evf = 0, trunc = 0, rd = 0,
           share = 0, steady = 0, tok_mean = 0;
    int n_rd = 0, n_share = 0, n_steady = 0, n_tok = 0, n_batch = 0;
    double batch = 0;
    int64_t tok_peak = 0;
    for (const auto* s : g) {
      if (s->score) {
        ++c.n_graded;
        ex[s->example_id].push_back(s);
      }
      gen_tok += s->generated_tokens;
      dec_s += s->decode_s;
      pr_tok += s->prompt_tokens;
      pr_s += s->prefill_s;
      ttft += s->ttft_s;
      kvp += static_cast<double>(s->kv_bytes_peak);
      kvf += static_cast<double>(s->kv_bytes_final);
      ev += static_cast<double>(s->evictions);
      evf += s->evictions > 0;
      trunc += s->finish_reason == "length";
      if (s->kv_bytes_read_step) {
        rd += *s->kv_bytes_read_step;
        ++n_rd;
      }
      if (s->decode_share_s) {
        share += *s->decode_share_s;
        ++n_share;
      }
      if (s->kv_bytes_steady) {
        steady += static_cast<double>(*s->kv_bytes_steady);
        ++n_steady;
      }
      if (s->kv_tokens_mean && s->kv_tokens_peak) {
        tok_mean += *s->kv_tokens_mean;
        tok_peak = std::max(tok_peak, *s->kv_tokens_peak);
        ++n_tok;
      }
      if (s->decode_batch_mean) {
        batch += *s->decode_batch_mean;
        ++n_batch;
      }
      c.preemptions += s->preemptions;
      c.kv_bytes_peak_max = std::max(c.kv_bytes_peak_max, s->kv_bytes_peak);
      c.device_peak_bytes = std::max(c.device_peak_bytes, s->device_peak_bytes);
    }
    double n = c.n_samples;
    c.decode_tok_s = dec_s > 0 ? gen_tok / dec_s : 0;
    c.prefill_tok_s = pr_s > 0 ? pr_tok / pr_s : 0;
    c.ttft_s_mean = ttft / n;
    c.kv_bytes_peak_mean = kvp / n;
    c.kv_bytes_final_mean = kvf / n;
    c.evictions_mean = ev / n;
    c.evicted_frac = evf / n;
    c.truncated_frac = trunc / n;
    if (n_rd > 0) c.kv_bytes_read_step_mean = rd / n_rd;
    if (n_share == c.n_samples && share > 0) c.decode_tok_s_agg = gen_tok / share;
    if (n_steady == c.n_samples) c.kv_bytes_steady_mean = steady / n_steady;
    if (n_batch == c.n_samples) c.decode_batch_mean = batch / n_batch;
    if (auto m = opt.run_memory_gib.find(k.run_id); m != opt.run_memory_gib.end()) c.memory_gib = m->second;
    if (n_tok == c.n_samples) {
      c.kv_tokens_mean = tok_mean / n_tok;
      c.kv_tokens_peak = tok_peak;
    }
    c.n_ungraded = c.n_samples - c.n_graded;
    c.n_examples = static_cast<int>(ex.size());
    if (!ex.empty()) {
      std::vector<double> means;
      int max_n = 0;
      for (auto& [id, ss] : ex) {
        std::sort(ss.begin(), ss.end(), [](auto* x, auto* y) { return x->sample_index < y->sample_index; });
        double sum = 0;
        for (const auto* s : ss) sum += *s->score;
        means.push_back(sum / ss.size());
        max_n = std::max(max_n, static_cast<int>(ss.size()));
      }
      c.pass1 = pass1_wilson(means);
      for (int k = 1; k <= max_n; k *= 2) {
        double pk = 0, mk = 0;
        int m = 0;
        for (const auto& [id, ss] : ex) {
          int ni = static_cast<int>(ss.size());
          if (ni < k) continue;
          int ci = 0;
          std::vector<Vote> votes;
          for (const auto* s : ss) {
            bool correct = *s->score >= 1.0 - 1e-9;
            ci += correct;
            votes.push_back({s->pred_norm, correct});
          }
          pk += pass_at_k(ni, ci, k);
          mk += maj_at_k(votes, k);
          ++m;
        }
        c.pass_at_k[k] = pk / m;
        c.maj_at_k[k] = mk / m;
      }
    }
    auto rk = std::make_tuple(k.run_id, k.model_id, k.task);
    if (auto it = ref.find(rk); it != ref.end()) {
      c.is_reference = ref_key[rk] == k;
      if (!c.is_reference) {
        int pairs = 0;
        auto diffs = paired_example_diffs(g, *it->second, false, &pairs);
        c.paired_examples = static_cast<int>(diffs.size());
        if (!diffs.empty()) c.delta_vs_reference = paired_bootstrap_ci(diffs, opt.resamples, opt.seed);
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kvb::results
