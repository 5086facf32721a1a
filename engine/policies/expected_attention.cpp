// `expected_attention`: the attention future queries are expected to pay, from query statistics.
// Sources: Devoto et al., "Expected Attention: KV Cache Compression by Estimating Attention from
// Future Queries Distribution" (arXiv 2510.00636, §3: model the pre-RoPE queries as Gaussian
// N(μ, Σ), average the RoPE rotation R over the next n future positions, and score key k by the
// expected un-normalised attention E[exp(qᵀk/√d)] = exp(μ̄ᵀk/√d + kᵀΣ̄k/(2d)) with μ̄ = R̄μ,
// Σ̄ = R̄ΣR̄ᵀ, then weight by ‖v‖); kvpress 0.5.5 ExpectedAttentionPress (NVIDIA/kvpress, PyPI
// kvpress==0.5.5, kvpress/presses/expected_attention_press.py — the reference implementation):
//   * μ, Σ: mean and biased covariance (÷N) of the pre-RoPE queries (after Qwen3's q norm) of the
//     prompt's tokens from position n_sink on, per query head;
//   * R̄ = mean over positions q_len … q_len + n_future_positions − 1 of cos·I + sin·P (rotate-half
//     RoPE, cos/sin from the model's rotary embedding, attention scaling included);
//   * score of key n ≥ n_sink = softmax_n(μ̄ᵀk_n/√d + kᵀ_nΣ̄k_n/(2d)) per query head, mean over the
//     GQA group, times (score + ε)·‖v_n‖₂; the first n_sink tokens are always kept;
//   * defaults n_future_positions = 512, n_sink = 4, use_covariance, use_vnorm, ε = 0.
// Choices: the query statistics are running sums over every query from position `sinks` on (the
// prompt's, and while decoding also the generated tokens'), kept per (sequence, layer, query head)
// in f64 (Hq·D² values per layer), so the score does not depend on the prefill chunk: at the end of
// the prompt it equals kvpress's, which sees the whole prompt at once. The future positions start
// at the tokens seen so far (the prompt length at the prompt's end). Compression follows the
// kvbench schedule (every `buffer` = 128 decode tokens; `decode=false` is kvpress's prefill-only
// press). Needs the pre-RoPE queries (LayerStep::queries_pre_rope), which the CPU backend provides.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/policies/expected_attention.h"
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {

void ExpectedAttentionPolicy::score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) {
  const int D = step.head_dim, G = step.num_q_heads / step.num_kv_heads;
  const scoring::QueryMoments& m = moments_.at(step.seq, step.layer);
  if (m.n == 0) fail("policy 'expected_attention': no query after the {} sink tokens to estimate from", sinks_);
  const scoring::MeanRope rbar = scoring::mean_rope(step, step.seq_len, n_future_, name().c_str());
  auto rotate = [&](const double* x, double* y, int stride) { rbar.apply(x, y, stride); };
  const int32_t first = std::min<int32_t>(sinks_, L);
  const int32_t n = L - first;
  std::vector<double> acc(n, 0.0), logits(n), mu(D), mur(D), cov(static_cast<size_t>(D) * D),
      tmp(static_cast<size_t>(D) * D), kd(D), ck(D);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D)), nn = static_cast<double>(m.n);
  for (int g = 0; g < G; ++g) {
    const int hq = h * G + g;
    const double* s = &m.sum[static_cast<size_t>(hq) * D];
    const double* sq = &m.sq[static_cast<size_t>(hq) * D * D];
    for (int a = 0; a < D; ++a) mu[a] = s[a] / nn;
    rotate(mu.data(), mur.data(), 1);
    if (covariance_) {
      for (int a = 0; a < D; ++a)
        for (int b = 0; b <= a; ++b) {
          const double c = sq[a * D + b] / nn - mu[a] * mu[b];
          cov[a * D + b] = c;
          cov[b * D + a] = c;
        }
      for (int b = 0; b < D; ++b) rotate(&cov[b], &tmp[b], D);  // R̄·Σ (columns)
      for (int a = 0; a < D; ++a)
        rotate(&tmp[static_cast<size_t>(a) * D], &cov[static_cast<size_t>(a) * D], 1);  // (R̄Σ)·R̄ᵀ (rows)
    }
    double mx = -INFINITY;
    for (int32_t j = 0; j < n; ++j) {
      const float* k = step.cache->key(step.seq, step.layer, h, first + j);
      for (int a = 0; a < D; ++a) kd[a] = k[a];
      double v = 0;
      for (int a = 0; a < D; ++a) v += mur[a] * kd[a];
      v *= inv_sqrt_d;
      if (covariance_) {
        double quad = 0;
        for (int a = 0; a < D; ++a) {
          double r = 0;
          const double* row = &cov[static_cast<size_t>(a) * D];
          for (int b = 0; b < D; ++b) r += row[b] * kd[b];
          quad += kd[a] * r;
        }
        v += quad / D / 2.0;
      }
      logits[j] = v;
      mx = std::max(mx, v);
    }
    double z = 0;
    for (int32_t j = 0; j < n; ++j) z += (logits[j] = std::exp(logits[j] - mx));
    for (int32_t j = 0; j < n; ++j) acc[j] += logits[j] / z;
  }
  for (int32_t j = 0; j < n; ++j) {
    double sc = acc[j] / G;
    if (vnorm_) {
      const float* v = step.cache->value(step.seq, step.layer, h, first + j);
      double n2 = 0;
      for (int a = 0; a < D; ++a) n2 += static_cast<double>(v[a]) * v[a];
      sc = (sc + epsilon_) * std::sqrt(n2);
    }
    scores[first + j] = static_cast<float>(sc);
  }
}

KVB_POLICY(expected_attention) {
  return policy_entry<ExpectedAttentionPolicy>("expected_attention").with_tests({.min_budget = 5});
}

}  // namespace kvb
