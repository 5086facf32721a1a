// `kvzip`: KVzip — query-agnostic eviction by context reconstruction. After a prompt the model is
// asked to repeat it: the engine runs scoring passes (PolicyNeeds::scoring_pass), each feeding a
// repeat instruction, the chat template's assistant header and one chunk of the context again; a
// cached token's score is the most attention any of those queries pays it. Then one cut over the
// whole cache (or one per layer) evicts the lowest-scored (layer, kv head, token) entries.
// Sources: Kim et al., "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction"
// (arXiv 2505.23416, §3.2-3.3); kvpress 0.5.5 KVzipPress (PyPI kvpress==0.5.5,
// kvpress/presses/kvzip_press.py: prepare, _compute_cross_attention, score_kvzip, compress_post);
// docs/policies.md, `kvzip`. What kvpress computes, in our words, for a prompt of P tokens whose
// first `prefix` tokens are the chat template's preamble (ScoringPrompts::prefix):
//   the context C = positions [prefix, P) is cut into chunks of `chunk_size`; chunk c = [s, e) is
//   reconstructed by a pass of the tokens R_c + suffix + ids[s, e), R_0 = the repeat prompt, R_c
//   (c > 0) = the "part of the previous context" prompt + the previous chunk's last 8 ids, placed at
//   positions P, P + 1, ...; at layer l, for query head (h, g) and pass query t (post-RoPE q_t),
//   softmax_t = softmax over the keys sinks [0, min(sinks, s)) ∪ chunk [s, e) ∪ pass [P, P + t]
//   of ⟨q_t, k⟩ / √D; score[l, h, i] = max over g and t of softmax_t[i], i ∈ [s, e). With
//   kvzip_plus_normalization, each probability is first divided by ‖x_t‖ (the pass token's
//   attention input) and multiplied by ‖W_o,(h,g) v_i‖₂ (the value through its query head's
//   columns of o_proj). Positions never reconstructed (the preamble) score 0; positions
//   [0, sinks) score max(all scores) + 1. The n = ⌊N · (1 − ratio)⌋ lowest of the N = layers ·
//   Hkv · P entries are evicted (layerwise=true: ⌊Hkv · P · (1 − ratio)⌋ of each layer's).
// Choices: logits are the engine's f32 GEMM (matmul_nt: one fixed reduction order per element),
// the softmax and the normalisations double, scores rounded to f32 (kvpress: f32 throughout).
// Equal scores at the cut keep the earlier (layer, head, token) (kvpress's topk leaves ties open).
// A pass runs as one step whatever --prefill-chunk, so the scores do not depend on it. Only a
// prompt whose every head still holds all its tokens is scored (the first prompt of a request, or
// a query-agnostic request's context); later prompts of the sequence are left as they are.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "engine/kernels/matmul.h"
#include "engine/policies/kvzip.h"
#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// kvpress's prev_postfix_size: ids of the previous chunk that a later chunk's prompt repeats.
constexpr int64_t kPrevPostfix = 8;
/// Pass tokens beyond the chunk that kv_footprint allows for (the prompts and the suffix).
constexpr int64_t kPromptAllowance = 128;

}  // namespace

KVzipPolicy::KVzipPolicy(std::string name, PolicyParams p) : ParamPolicy(std::move(name), std::move(p)) {
  params_.bind({{"ratio", &ratio_, within(0, 1)},
                {"layerwise", &layerwise_},
                {"sinks", &sinks_, at_least(0)},
                {"chunk_size", &chunk_, at_least(1)},
                {"plus_norm", &plus_norm_}});
  if (parse_compress(params_)) params_.fail_param("compress", "must be prompt_end: KVzip cuts a whole prompt");
}

PolicyNeeds KVzipPolicy::needs() const {
  return {
      .layer_input = plus_norm_, .queries_pre_rope = true, .host_kv = true, .out_proj = plus_norm_, .scoring_pass = true};
}

KvFootprint KVzipPolicy::kv_footprint(const FootprintQuery& q) const {
  const int64_t pass = std::min(q.context, chunk_) + kPromptAllowance, r = restored_rows();
  if (r > 0)
    return per_head_footprint(q, q.context + r + std::max(q.gen, pass), q.context + r + q.gen,
                              name_ + ": context + one reconstruction pass (chunk + prompts) at the peak; the " +
                                  std::to_string(r) + " restore rows kept");
  return per_head_footprint(q, q.context + std::max(q.gen, pass), q.context + q.gen,
                            "kvzip: context + one reconstruction pass (chunk + prompts) at the peak");
}

void KVzipPolicy::on_sequence_end(SeqId seq) {
  std::lock_guard<std::mutex> lock(mu_);
  seqs_.erase(seq);
}

std::vector<std::vector<int32_t>> KVzipPolicy::scoring_passes(const ScoringPassRequest& rq) {
  const int64_t P = rq.seq_len;
  if (ratio_ >= 1.0 || static_cast<int64_t>(rq.tokens.size()) != P || P == 0) return {};
  for (int l = 0; l < rq.num_layers; ++l)
    for (int h = 0; h < rq.num_kv_heads; ++h)
      if (rq.cache->length(rq.seq, l, h) != P) return {};  // already compressed: not a fresh prompt
  const ScoringPrompts& pr = *rq.prompts;
  Seq st;
  st.P = P;
  st.scores.assign(static_cast<size_t>(rq.num_layers) * rq.num_kv_heads * P, 0.0f);
  std::vector<std::vector<int32_t>> passes;
  const int64_t first = std::min(pr.prefix, P);
  for (int64_t s = first; s < P; s += chunk_) {
    const int64_t e = std::min(P, s + chunk_);
    std::vector<int32_t> ids = s == first ? pr.repeat : pr.repeat_part;
    if (s > first) {
      const int64_t from = std::max(s - chunk_, s - kPrevPostfix);
      ids.insert(ids.end(), rq.tokens.begin() + from, rq.tokens.begin() + s);
    }
    ids.insert(ids.end(), pr.suffix.begin(), pr.suffix.end());
    ids.insert(ids.end(), rq.tokens.begin() + s, rq.tokens.begin() + e);
    st.chunks.emplace_back(s, e);
    passes.push_back(std::move(ids));
  }
  std::lock_guard<std::mutex> lock(mu_);
  seqs_[rq.seq] = std::move(st);
  return passes;
}

void KVzipPolicy::on_layer_step(LayerStep& step) {
  if (step.scoring_pass < 0) return;
  if (!step.queries_pre_rope) fail("policy '{}': LayerStep::queries_pre_rope is not set", name_);
  if (!step.rope_inv_freq) fail("policy '{}': the backend did not pass the model's RoPE", name_);
  Seq* st = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = seqs_.find(step.seq);
    if (it == seqs_.end() || step.scoring_pass >= static_cast<int>(it->second.chunks.size()))
      fail("policy '{}': a scoring pass it did not ask for (sequence {})", name_, step.seq);
    st = &it->second;
  }
  // Plain variables, not a structured binding: the lambda below captures them (clang 14, which
  // builds the sanitizer and fuzz targets, cannot capture a binding).
  const int64_t s = st->chunks[static_cast<size_t>(step.scoring_pass)].first;
  const int64_t e = st->chunks[static_cast<size_t>(step.scoring_pass)].second;
  const int64_t P = st->P, n = step.n_new, ctx = e - s, sink = std::min<int64_t>(sinks_, s);
  if (step.seq_len != P + n)
    fail("policy '{}': scoring pass at position {} of a {}-token prompt", name_, step.seq_len - n, P);
  const int Hq = step.num_q_heads, Hk = step.num_kv_heads, D = step.head_dim, G = Hq / Hk, H = step.hidden_size;
  const int64_t NK = sink + ctx + n;  // keys: sinks, chunk, pass
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> inv_hnorm(static_cast<size_t>(n), 1.0);
  if (plus_norm_) {
    if (!step.layer_input) fail("policy '{}': LayerStep::layer_input is not set (plus_norm)", name_);
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int c = 0; c < H; ++c) ss += static_cast<double>(step.layer_input[t * H + c]) * step.layer_input[t * H + c];
      inv_hnorm[static_cast<size_t>(t)] = 1.0 / std::sqrt(ss);
    }
  }
  std::vector<float> keys(static_cast<size_t>(NK) * D), q(static_cast<size_t>(n) * D),
      logits(static_cast<size_t>(n) * NK), wo, vals, wov;
  for (int h = 0; h < Hk; ++h) {
    if (step.cache->length(step.seq, step.layer, h) != P + n)
      fail("policy '{}': layer {} kv head {} lost tokens during a scoring pass", name_, step.layer, h);
    auto index_of = [&](int64_t k) { return k < sink ? k : k < sink + ctx ? s + (k - sink) : P + (k - sink - ctx); };
    for (int64_t k = 0; k < NK; ++k) {
      const float* src = step.cache->key(step.seq, step.layer, h, static_cast<int32_t>(index_of(k)));
      std::copy(src, src + D, &keys[static_cast<size_t>(k) * D]);
    }
    const Mat km = Mat::of_f32(keys.data(), NK, D);
    float* out = &st->scores[(static_cast<size_t>(step.layer) * Hk + h) * P];
    std::vector<float> best(static_cast<size_t>(ctx), 0.0f);
    for (int g = 0; g < G; ++g) {
      const int hq = h * G + g;
      for (int64_t t = 0; t < n; ++t)
        scoring::rope_rotate(step.queries_pre_rope + (t * Hq + hq) * D, D, P + t, step.rope_inv_freq, step.rope_mscale,
                             &q[static_cast<size_t>(t) * D]);
      matmul_nt(q.data(), km, nullptr, logits.data(), n, D, NK);
      std::vector<double> vnorm;  // ‖W_o,hq · v_i‖₂ of the chunk's tokens (plus_norm)
      if (plus_norm_) {
        if (!step.out_proj_head) fail("policy '{}': LayerStep::out_proj_head is not set (plus_norm)", name_);
        wo.resize(static_cast<size_t>(H) * D);
        step.out_proj_head(hq, wo.data());
        vals.resize(static_cast<size_t>(ctx) * D);
        for (int64_t i = 0; i < ctx; ++i) {
          const float* v = step.cache->value(step.seq, step.layer, h, static_cast<int32_t>(s + i));
          std::copy(v, v + D, &vals[static_cast<size_t>(i) * D]);
        }
        wov.resize(static_cast<size_t>(ctx) * H);
        matmul_nt(vals.data(), Mat::of_f32(wo.data(), H, D), nullptr, wov.data(), ctx, D, H);
        vnorm.resize(static_cast<size_t>(ctx));
        for (int64_t i = 0; i < ctx; ++i) {
          double ss = 0;
          for (int c = 0; c < H; ++c) ss += static_cast<double>(wov[i * H + c]) * wov[i * H + c];
          vnorm[static_cast<size_t>(i)] = std::sqrt(ss);
        }
      }
      // Each query's row is one thread's whole (one summation order whatever the threads); the
      // max over queries is exact, so merging the threads' maxima in any order gives the same.
#pragma omp parallel
      {
        std::vector<double> row(static_cast<size_t>(NK));
        std::vector<float> mine(static_cast<size_t>(ctx), 0.0f);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n; ++t) {
          const int64_t seen = sink + ctx + t + 1;  // causal over the pass's own tokens
          const float* lg = &logits[static_cast<size_t>(t) * NK];
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t k = 0; k < seen; ++k) {
            row[k] = static_cast<double>(lg[k]) * scale;
            mx = std::max(mx, row[k]);
          }
          double sum = 0;
          for (int64_t k = 0; k < seen; ++k) sum += row[k] = std::exp(row[k] - mx);
          for (int64_t i = 0; i < ctx; ++i) {
            double p = row[sink + i] / sum;
            if (plus_norm_) p = p * inv_hnorm[static_cast<size_t>(t)] * vnorm[static_cast<size_t>(i)];
            mine[static_cast<size_t>(i)] = std::max(mine[static_cast<size_t>(i)], static_cast<float>(p));
          }
        }
#pragma omp critical(kvzip_best)
        for (int64_t i = 0; i < ctx; ++i)
          best[static_cast<size_t>(i)] = std::max(best[static_cast<size_t>(i)], mine[static_cast<size_t>(i)]);
      }
    }
    std::copy(best.begin(), best.end(), out + s);
  }
}

void KVzipPolicy::on_scoring_passes_end(StepEnd& se) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = seqs_.find(se.seq);
  if (it == seqs_.end()) return;
  Seq st = std::move(it->second);
  seqs_.erase(it);
  const int nl = se.num_layers, nh = se.num_kv_heads;
  const int64_t P = st.P;
  const int64_t tail = restored_rows();  // a restore pass's rows after the prompt: all kept
  if (se.seq_len != P + tail)
    fail("policy '{}': the cut of a {}-token prompt (+ {} restored rows) at position {}", name_, P, tail, se.seq_len);
  std::vector<float>& sc = st.scores;
  const float top = *std::max_element(sc.begin(), sc.end()) + 1.0f;
  for (size_t r = 0; r < sc.size(); r += static_cast<size_t>(P))
    for (int64_t i = 0; i < std::min<int64_t>(sinks_, P); ++i) sc[r + i] = top;
  const double pruned = pruned_fraction(P);  // kvpress compression_ratio
  const int groups = layerwise_ ? nl : 1;
  const size_t per = static_cast<size_t>(layerwise_ ? 1 : nl) * nh * P;
  for (int gi = 0; gi < groups; ++gi) {
    const std::span<const float> flat(sc.data() + gi * per, per);
    const auto N = static_cast<int64_t>(per);
    const auto n_pruned = static_cast<int64_t>(static_cast<double>(N) * pruned);
    std::vector<char> kept(per, 0);
    for (int32_t i : scoring::top_k_indices(flat, N - n_pruned)) kept[static_cast<size_t>(i)] = 1;
    for (size_t r = 0; r < per; r += static_cast<size_t>(P)) {
      const size_t head = gi * per + r;  // (layer · nh + h) · P
      const int l = static_cast<int>(head / (static_cast<size_t>(nh) * P)), h = static_cast<int>((head / P) % nh);
      std::vector<int32_t> keep = scoring::mask_indices(std::span<const char>(kept.data() + r, P));
      if (static_cast<int64_t>(keep.size()) == P) continue;
      for (int64_t i = P; i < P + tail; ++i) keep.push_back(static_cast<int32_t>(i));
      se.keep(l, h, std::move(keep));
    }
  }
}

KVB_POLICY(kvzip) { return policy_entry<KVzipPolicy>("kvzip").with_tests({.min_budget = 0, .params = "ratio=0.5"}); }

}  // namespace kvb
