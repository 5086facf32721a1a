// Policy fidelity metrics and the per-(policy, budget) evaluation (see fidelity.h).
#include "harness/fidelity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/policies/oracle.h"
#include "engine/oracle_passes.h"
#include "engine/util/error.h"

namespace kvb::fidelity {

namespace {

/// log Σ exp(x) in double, max-subtracted.
double log_sum_exp(const float* x, int V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(x[v]));
  double s = 0;
  for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - mx);
  return mx + std::log(s);
}

}  // namespace

double kl_from_logits(const float* full, const float* policy, int V) {
  const double lf = log_sum_exp(full, V), lp = log_sum_exp(policy, V);
  double kl = 0;
  for (int v = 0; v < V; ++v) {
    const double a = static_cast<double>(full[v]) - lf;  // log p_full
    const double b = static_cast<double>(policy[v]) - lp;
    const double p = std::exp(a);
    if (p > 0) kl += p * (a - b);
  }
  return std::max(0.0, kl);  // rounding can give −1e-17
}

double nll_from_logits(const float* logits, int V, int32_t target) {
  if (target < 0 || target >= V) fail("fidelity: token id {} outside the vocabulary of {}", target, V);
  return log_sum_exp(logits, V) - static_cast<double>(logits[target]);
}

int32_t argmax(const float* logits, int V) {
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  return best;
}

Agreement greedy_agreement(std::span<const int32_t> ref, std::span<const int32_t> got) {
  Agreement a;
  if (ref.empty()) return a;
  while (a.prefix < static_cast<int64_t>(std::min(ref.size(), got.size())) && ref[a.prefix] == got[a.prefix])
    ++a.prefix;
  int64_t same = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) same += ref[i] == got[i];
  a.prefix_pct = 100.0 * static_cast<double>(a.prefix) / static_cast<double>(ref.size());
  a.overall_pct = 100.0 * static_cast<double>(same) / static_cast<double>(ref.size());
  return a;
}

TeacherForced compare_teacher_forced(std::span<const float> full_logits, std::span<const float> policy_logits,
                                     std::span<const int32_t> continuation, int V) {
  const size_t n = continuation.size();
  if (full_logits.size() < n * V || policy_logits.size() < n * V)
    fail("fidelity: logits hold {} / {} rows of {} for {} positions", full_logits.size() / V, policy_logits.size() / V,
         V, n);
  TeacherForced t;
  t.positions = static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    const float* f = full_logits.data() + i * V;
    const float* p = policy_logits.data() + i * V;
    t.kl_sum += kl_from_logits(f, p, V);
    t.nll_full_sum += nll_from_logits(f, V, continuation[i]);
    t.nll_policy_sum += nll_from_logits(p, V, continuation[i]);
    t.top1_agree += argmax(f, V) == argmax(p, V);
  }
  return t;
}

namespace {

EngineOptions engine_options(const std::vector<Reference>& refs) {
  EngineOptions eo;
  eo.max_batch = 1;
  size_t longest = 1;
  for (const auto& r : refs) longest = std::max(longest, r.prompt.size());
  eo.prefill_chunk = static_cast<int>(longest);
  return eo;
}

/// K+V bytes one generation's decode attention read per step (0 without decode steps).
double read_per_step(const GenerationResult& g) {
  return g.decode_steps > 0 ? static_cast<double>(g.kv_read_bytes) / static_cast<double>(g.decode_steps) : 0.0;
}

}  // namespace

std::vector<Reference> make_references(std::shared_ptr<const Model> model,
                                       const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                                       const std::vector<int32_t>& stop_ids) {
  if (max_new_tokens < 1) fail("fidelity: --max-new-tokens must be >= 1, got {}", max_new_tokens);
  const int64_t ctx = model->config().max_position_embeddings;
  std::vector<Reference> refs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) fail("fidelity: prompt {} encodes to no tokens", i + 1);
    if (static_cast<int64_t>(prompts[i].size()) + 1 >= ctx)
      fail("fidelity: prompt {} has {} tokens, the model's context is {}", i + 1, prompts[i].size(), ctx);
    refs[i].prompt = prompts[i];
  }
  const EngineOptions eo = engine_options(refs);
  for (auto& r : refs) {
    Engine e(model, eo, nullptr);
    GenerationRequest q;
    q.prompt = r.prompt;
    q.max_new_tokens =
        static_cast<int>(std::min<int64_t>(max_new_tokens, ctx - 1 - static_cast<int64_t>(r.prompt.size())));
    q.stop_ids = stop_ids;
    GenerationResult g = e.generate({q}, nullptr)[0];
    r.continuation = std::move(g.tokens);
    r.kv_token_bytes_peak = g.kv_token_bytes_peak;
    r.kv_read_bytes_step = read_per_step(g);
    Engine s(model, eo, nullptr);
    r.full_logits = s.score(r.prompt, r.continuation);
  }
  return refs;
}

Row evaluate(std::shared_ptr<const Model> model, const std::vector<Reference>& refs, const ResolvedPolicy& policy,
             int64_t budget, const std::vector<int32_t>& stop_ids) {
  Row row;
  row.policy = policy.text();
  row.budget = budget;
  try {
    row.resolved = policy.build_at(budget)->resolved_params();
  } catch (const Error& e) {
    row.error = e.what();
    return row;
  }
  const int V = static_cast<int>(model->config().vocab_size);
  const EngineOptions eo = engine_options(refs);
  TeacherForced tf;
  double full_bytes = 0, full_read = 0;
  for (const auto& r : refs) {
    // Two instances: one per engine (an engine owns its policy).
    std::unique_ptr<Policy> gen_policy = policy.build_at(budget), tf_policy = policy.build_at(budget);
    if (auto* o = dynamic_cast<OraclePolicy*>(gen_policy.get())) {
      if (o->budget() > 0) {
        prepare_oracle(model, *o, r.prompt, r.continuation);
        dynamic_cast<OraclePolicy&>(*tf_policy).set_scores(o->scores());
      }
    }
    Engine g(model, eo, std::move(gen_policy));
    GenerationRequest q;
    q.prompt = r.prompt;
    q.max_new_tokens = static_cast<int>(std::max<size_t>(r.continuation.size(), 1));
    q.stop_ids = stop_ids;
    GenerationResult res = g.generate({q}, nullptr)[0];
    const Agreement a = greedy_agreement(r.continuation, res.tokens);
    row.prefix_pct += a.prefix_pct;
    row.overall_pct += a.overall_pct;
    row.kv_bytes_peak += static_cast<double>(res.kv_token_bytes_peak);
    full_bytes += static_cast<double>(r.kv_token_bytes_peak);
    row.evictions += static_cast<double>(res.evictions);
    row.kv_read_step += read_per_step(res);
    full_read += r.kv_read_bytes_step;
    Engine s(model, eo, std::move(tf_policy));
    const std::vector<float> logits = s.score(r.prompt, r.continuation);
    const TeacherForced t = compare_teacher_forced(r.full_logits, logits, r.continuation, V);
    tf.positions += t.positions;
    tf.kl_sum += t.kl_sum;
    tf.nll_full_sum += t.nll_full_sum;
    tf.nll_policy_sum += t.nll_policy_sum;
    tf.top1_agree += t.top1_agree;
  }
  const double np = std::max<double>(1.0, static_cast<double>(refs.size()));
  const double nt = std::max<double>(1.0, static_cast<double>(tf.positions));
  row.prompts = static_cast<int64_t>(refs.size());
  row.positions = tf.positions;
  row.kl_mean = tf.kl_sum / nt;
  row.nll_full = tf.nll_full_sum / nt;
  row.nll_policy = tf.nll_policy_sum / nt;
  row.nll_delta = row.nll_policy - row.nll_full;
  row.top1_pct = 100.0 * static_cast<double>(tf.top1_agree) / nt;
  row.prefix_pct /= np;
  row.overall_pct /= np;
  row.kv_bytes_ratio = full_bytes > 0 ? row.kv_bytes_peak / full_bytes : 0;
  row.kv_bytes_peak /= np;
  row.kv_read_ratio = full_read > 0 ? row.kv_read_step / full_read : 0;
  row.kv_read_step /= np;
  row.evictions /= np;
  return row;
}

std::string markdown_table(const std::vector<Row>& rows) {
  std::string s =
      "| policy | budget | greedy prefix % | greedy overall % | top-1 % | mean KL (nats) | ΔNLL (nats/tok) | "
      "KV peak (KiB) | KV / full | read/step (KiB) | read / full | evicted | note |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : rows) {
    const std::string budget = r.budget > 0 ? std::to_string(r.budget) : "-";
    if (!r.error.empty()) {
      s += fmt::format("| {} | {} | | | | | | | | | | | {} |\n", r.policy, budget, r.error);
      continue;
    }
    s += fmt::format(
        "| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.4f} | {:+.4f} | {:.1f} | {:.2f} | {:.1f} | {:.2f} | {:.0f} | |\n",
        r.policy, budget, r.prefix_pct, r.overall_pct, r.top1_pct, r.kl_mean, r.nll_delta, r.kv_bytes_peak / 1024.0,
        r.kv_bytes_ratio, r.kv_read_step / 1024.0, r.kv_read_ratio, r.evictions);
  }
  return s;
}

nlohmann::json to_json(const std::vector<Row>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"policy", r.policy},
                        {"budget", r.budget},
                        {"resolved_params", r.resolved},
                        {"prompts", r.prompts},
                        {"positions", r.positions},
                        {"kl_mean", r.kl_mean},
                        {"nll_full", r.nll_full},
                        {"nll_policy", r.nll_policy},
                        {"nll_delta", r.nll_delta},
                        {"top1_pct", r.top1_pct},
                        {"greedy_prefix_pct", r.prefix_pct},
                        {"greedy_overall_pct", r.overall_pct},
                        {"kv_bytes_peak", r.kv_bytes_peak},
                        {"kv_bytes_ratio", r.kv_bytes_ratio},
                        {"kv_read_bytes_step", r.kv_read_step},
                        {"kv_read_ratio", r.kv_read_ratio},
                        {"evictions", r.evictions}};
    if (!r.error.empty()) j["error"] = r.error;
    a.push_back(j);
  }
  return a;
}

}  // namespace kvb::fidelity
