// `oracle`: ForesightKV's Golden Eviction (future attention), two-pass and teacher-forced.
// Source and every choice: see oracle.h (docs/policies.md).
#include "engine/policies/oracle.h"

#include <algorithm>

#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {

namespace {

/// The `future` parameter's values, in OracleFuture order.
const std::vector<std::string>& future_names() {
  static const std::vector<std::string> names = {"max", "sum", "mean"};
  return names;
}

const char* future_name(OracleFuture f) { return future_names().at(static_cast<size_t>(f)).c_str(); }

}  // namespace

std::shared_ptr<OracleScores> OracleScores::make(int num_layers, int num_kv_heads, int group, int64_t prompt_len,
                                                 int64_t trace_len, int64_t budget, int64_t block, OracleFuture future) {
  if (num_layers < 1 || num_kv_heads < 1 || group < 1)
    fail("oracle: bad model shape (layers {}, kv heads {}, group {})", num_layers, num_kv_heads, group);
  if (prompt_len < 1) fail("oracle: the trace needs a prompt of at least one token");
  if (trace_len < prompt_len) fail("oracle: trace of {} tokens is shorter than its prompt ({})", trace_len, prompt_len);
  if (budget < 1) fail("oracle: needs a token budget >= 1 (got {})", budget);
  if (block < 1) fail("oracle: block length (buffer) must be >= 1 (got {})", block);
  auto s = std::make_shared<OracleScores>();
  s->num_layers = num_layers;
  s->num_kv_heads = num_kv_heads;
  s->group = group;
  s->trace_len = trace_len;
  s->prompt_len = prompt_len;
  s->budget = budget;
  s->block = block;
  s->future = future;
  s->grid0 = prompt_len > budget ? prompt_len : budget + block;
  s->num_blocks = trace_len > s->grid0 ? (trace_len - s->grid0 + block - 1) / block : 0;
  s->bs.assign(static_cast<size_t>(num_layers) * num_kv_heads * s->num_blocks * trace_len, 0.0);
  return s;
}

int64_t OracleScores::first_future_block(int64_t s) const {
  if (s <= grid0) return 0;
  return (s - grid0 + block - 1) / block;
}

void OracleScores::finalize() {
  alpha.assign(bs.size(), 0.0);
  for (int l = 0; l < num_layers; ++l)
    for (int h = 0; h < num_kv_heads; ++h)
      for (int64_t j = num_blocks - 1; j >= 0; --j) {
        const double* b = &bs[row(l, h, j)];
        double* a = &alpha[row(l, h, j)];
        const double* next = j + 1 < num_blocks ? &alpha[row(l, h, j + 1)] : nullptr;
        for (int64_t k = 0; k < trace_len; ++k) {
          if (!next) {
            a[k] = b[k];
          } else if (future == OracleFuture::kMax) {
            a[k] = std::max(b[k], next[k]);
          } else if (future == OracleFuture::kSum) {
            a[k] = b[k] + next[k];
          } else {  // mean over the (num_blocks − j) future blocks
            const double n_next = static_cast<double>(num_blocks - j - 1);
            a[k] = (b[k] + next[k] * n_next) / (n_next + 1.0);
          }
        }
      }
  finalized = true;
}

double OracleScores::future_score(int layer, int h, int64_t key_pos, int64_t seq_len) const {
  if (!finalized) fail("oracle: future scores used before OracleScores::finalize()");
  if (layer < 0 || layer >= num_layers || h < 0 || h >= num_kv_heads)
    fail("oracle: layer {} / kv head {} outside the recorded {} x {}", layer, h, num_layers, num_kv_heads);
  if (key_pos < 0 || key_pos >= trace_len)
    fail("oracle: key position {} outside the recorded trace of {} tokens", key_pos, trace_len);
  const int64_t t = first_future_block(seq_len);
  if (t >= num_blocks) return 0.0;
  return alpha[row(layer, h, t) + key_pos];
}

PolicyNeeds OracleRecorder::needs() const {
  PolicyNeeds n;
  n.attention_colsum = true;
  return n;
}

void OracleRecorder::on_layer_step(LayerStep& step) {
  OracleScores& s = *scores_;
  if (step.n_new != 1)
    fail("oracle recording needs one query per step (prefill_chunk = 1), got a step of {} tokens", step.n_new);
  if (step.num_layers != s.num_layers || step.num_kv_heads != s.num_kv_heads ||
      step.num_q_heads != s.num_kv_heads * s.group)
    fail("oracle recording: model shape ({} layers, {} q / {} kv heads) differs from the score grid", step.num_layers,
         step.num_q_heads, step.num_kv_heads);
  const int64_t q = step.seq_len - 1;
  if (q >= s.trace_len) fail("oracle recording: position {} beyond the trace of {} tokens", q, s.trace_len);
  const int64_t j = s.block_of(q);
  if (j < 0) return;
  if (!step.attention_colsum) fail("oracle recording: the engine did not provide attention column sums");
  const double inv = 1.0 / (static_cast<double>(s.group) * static_cast<double>(s.block));
  for (int h = 0; h < step.num_kv_heads; ++h) {
    const std::vector<float>& cs = (*step.attention_colsum)[h];
    if (static_cast<int64_t>(cs.size()) != step.seq_len)
      fail("oracle recording needs the full cache: head {} of layer {} holds {} of {} tokens", h, step.layer, cs.size(),
           step.seq_len);
    double* b = &s.bs[s.row(step.layer, h, j)];
    for (int64_t k = 0; k <= q; ++k) b[k] += static_cast<double>(cs[k]) * inv;
  }
}

OraclePolicy::OraclePolicy(PolicyParams p) : ScheduledPolicy("oracle", std::move(p)) {
  if (ratio_kind_ || threshold_kind_) params_.fail_param("budget_kind", "the oracle supports only budget_kind=tokens");
  if (chunked_)
    params_.fail_param("compress",
                       "the oracle's query blocks assume compress=prompt_end (compressions at the end "
                       "of the prompt, then every buffer tokens)");
  future_ = static_cast<OracleFuture>(params_.get_choice_index("future", future_names()));
  if (window_ < 0) window_ = static_cast<int32_t>(std::min<int64_t>(buffer_, 1 << 30));
  if (budget_ > 0 && budget_ <= static_cast<int64_t>(sinks_) + window_)
    fail("policy 'oracle': budget {} must exceed sinks + window = {} (window defaults to buffer = L)", budget_,
         static_cast<int64_t>(sinks_) + window_);
}

nlohmann::json OraclePolicy::resolved_params() const {
  nlohmann::json j = params_.resolved();
  j["window"] = window_;  // -1 resolved to L
  return j;
}

void OraclePolicy::set_scores(std::shared_ptr<const OracleScores> scores) {
  if (scores) {
    if (!scores->finalized) fail("oracle: scores are not finalized");
    if (scores->budget != budget_ || scores->block != buffer_ || scores->future != future_)
      fail("oracle: scores recorded for budget {} / L {} / future={} but the policy has budget {} / L {} / future={}",
           scores->budget, scores->block, future_name(scores->future), budget_, buffer_, future_name(future_));
  }
  scores_ = std::move(scores);
}

void OraclePolicy::on_layer_step(LayerStep& step) {
  if (budget_ > 0) {
    if (!scores_)
      fail(
          "policy 'oracle' has no future-attention scores: it is a two-pass teacher-forced upper bound over a "
          "fixed trace (run it with `kvbench fidelity`, or record the trace with prepare_oracle)");
    if (step.seq_len > scores_->trace_len)
      fail("policy 'oracle': sequence reached {} tokens but the recorded trace has {}", step.seq_len, scores_->trace_len);
  }
  ScheduledPolicy::on_layer_step(step);
}

void OraclePolicy::score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) {
  const KVCache& kv = *step.cache;
  for (int32_t i = 0; i < L; ++i)
    scores[i] =
        static_cast<float>(scores_->future_score(step.layer, h, kv.position(step.seq, step.layer, h, i), step.seq_len));
}

KVB_POLICY(oracle) { return policy_entry<OraclePolicy>("oracle").with_tests({.min_budget = 129, .needs_trace = true}); }

}  // namespace kvb
