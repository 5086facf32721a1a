// `cap`: CAPKV — a token's value is weighed by how well its key aligns with the queries seen so far
// and by how much new direction its value adds to the other tokens' values (a ridge leverage).
// Sources: the CAPKV paper (arXiv 2604.25975; score s_i = w_i · u_iᵀ A⁻¹ u_i with
// A = I + Σ_j w_j u_j u_jᵀ and w_i = exp(τ⟨k_i, μ_q⟩), μ_q a historical-query anchor and u_i an
// output direction); kvpress 0.5.5 CapPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/cap_press.py), whose choices kvbench follows, in our words:
//   * μ_q per query head: the mean of the pre-RoPE queries of the tokens from position n_sink on,
//     rotated by RoPE's rotation averaged over the n_future_positions = 512 positions after the
//     prompt (Expected Attention's R̄, scoring::mean_rope);
//   * the statistic is the cosine ⟨k̂_i, μ̂_q⟩ of the L2-normalised post-RoPE key and anchor
//     (eps 1e-12), clamped to [−1, 1]; w_i = exp(τ·stat_i − max_j τ·stat_j), τ = 5;
//   * u_i = v_i (the raw value); A = I + Σ_j (w_j + ε) v_j v_jᵀ over the non-sink tokens of the
//     head, ε = 1e-6; s_i = w_i · v_iᵀ A⁻¹ v_i per query head, averaged over the GQA group;
//   * the n_sink = 4 first tokens are kept (kvpress pads them with the largest score + 1) and are
//     left out of A, of the statistic and of the query mean.
// Choices: everything is computed in double, A⁻¹v by a Cholesky factorisation (kvpress: f32,
// torch.linalg.solve). The query sums run over every query from position `sinks` on (prompt and
// generated tokens, as `expected_attention`), so the score does not depend on the prefill chunk,
// and the future positions start at the tokens seen so far. Decode: the kvbench schedule (buffer
// 128; `decode=false` is kvpress's prefill-only press). Needs the pre-RoPE queries
// (LayerStep::queries_pre_rope), which the CPU backend provides.
#include <algorithm>
#include <cmath>

#include "engine/policies/expected_attention.h"
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// In-place Cholesky factor of the symmetric positive definite D×D matrix a (row-major; the lower
/// triangle is read and becomes L with a = L·Lᵀ). Throws kvb::Error naming `policy` when a is not
/// positive definite.
void cholesky(std::vector<double>& a, int D, const char* policy) {
  for (int j = 0; j < D; ++j) {
    double d = a[static_cast<size_t>(j) * D + j];
    for (int k = 0; k < j; ++k) d -= a[static_cast<size_t>(j) * D + k] * a[static_cast<size_t>(j) * D + k];
    if (!(d > 0.0)) fail("policy '{}': the capacity matrix is not positive definite", policy);
    const double l = std::sqrt(d);
    a[static_cast<size_t>(j) * D + j] = l;
    for (int i = j + 1; i < D; ++i) {
      double s = a[static_cast<size_t>(i) * D + j];
      for (int k = 0; k < j; ++k) s -= a[static_cast<size_t>(i) * D + k] * a[static_cast<size_t>(j) * D + k];
      a[static_cast<size_t>(i) * D + j] = s / l;
    }
  }
}

class CapPolicy : public ScheduledPolicy {
 public:
  explicit CapPolicy(PolicyParams p) : ScheduledPolicy("cap", std::move(p)) {
    params_.bind({{"tau", &tau_}, {"n_future", &n_future_, within(1, 1 << 24)}, {"epsilon", &epsilon_, within(0, 1e30)}});
  }
  // Keys and values are read from the cache.
  PolicyNeeds needs() const override { return {.queries_pre_rope = true, .host_kv = true}; }
  void on_sequence_end(SeqId seq) override { moments_.erase(seq); }

 protected:
  void observe(LayerStep& step) override { moments_.add(step, sinks_, /*second=*/false, "cap"); }

  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const int D = step.head_dim, G = step.num_q_heads / step.num_kv_heads;
    const scoring::QueryMoments& m = moments_.at(step.seq, step.layer);
    if (m.n == 0) fail("policy 'cap': no query after the {} sink tokens to build the anchor from", sinks_);
    const int32_t first = std::min<int32_t>(sinks_, L), n = L - first;
    if (n <= 0) return;
    const scoring::MeanRope rbar = scoring::mean_rope(step, step.seq_len, n_future_, "cap");
    // The normalised keys and the values of the non-sink tokens.
    std::vector<double> kn(static_cast<size_t>(n) * D), v(static_cast<size_t>(n) * D);
    for (int32_t j = 0; j < n; ++j) {
      const float* k = step.cache->key(step.seq, step.layer, h, first + j);
      const float* vv = step.cache->value(step.seq, step.layer, h, first + j);
      double n2 = 0.0;
      for (int a = 0; a < D; ++a) n2 += static_cast<double>(k[a]) * k[a];
      const double inv = 1.0 / std::max(std::sqrt(n2), 1e-12);
      for (int a = 0; a < D; ++a) {
        kn[static_cast<size_t>(j) * D + a] = k[a] * inv;
        v[static_cast<size_t>(j) * D + a] = vv[a];
      }
    }
    std::vector<double> acc(n, 0.0), w(n), mu(D), anchor(D), A(static_cast<size_t>(D) * D), y(D);
    for (int g = 0; g < G; ++g) {
      const double* s = &m.sum[static_cast<size_t>(h * G + g) * D];
      for (int a = 0; a < D; ++a) mu[a] = s[a] / static_cast<double>(m.n);
      rbar.apply(mu.data(), anchor.data(), 1);
      double an = 0.0;
      for (int a = 0; a < D; ++a) an += anchor[a] * anchor[a];
      an = 1.0 / std::max(std::sqrt(an), 1e-12);
      double top = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        double c = 0.0;
        for (int a = 0; a < D; ++a) c += anchor[a] * an * kn[static_cast<size_t>(j) * D + a];
        w[j] = tau_ * std::clamp(c, -1.0, 1.0);
        top = std::max(top, w[j]);
      }
      for (int32_t j = 0; j < n; ++j) w[j] = std::exp(w[j] - top);
      // A = I + Σ (w_j + ε) v_j v_jᵀ (lower triangle), then its Cholesky factor.
      std::fill(A.begin(), A.end(), 0.0);
      for (int a = 0; a < D; ++a) A[static_cast<size_t>(a) * D + a] = 1.0;
      for (int32_t j = 0; j < n; ++j) {
        const double* vj = &v[static_cast<size_t>(j) * D];
        const double c = w[j] + epsilon_;
        for (int a = 0; a < D; ++a)
          for (int b = 0; b <= a; ++b) A[static_cast<size_t>(a) * D + b] += c * vj[a] * vj[b];
      }
      cholesky(A, D, "cap");
      // v_jᵀ A⁻¹ v_j = ‖L⁻¹ v_j‖² (forward substitution).
      for (int32_t j = 0; j < n; ++j) {
        const double* vj = &v[static_cast<size_t>(j) * D];
        double lev = 0.0;
        for (int a = 0; a < D; ++a) {
          double t = vj[a];
          for (int b = 0; b < a; ++b) t -= A[static_cast<size_t>(a) * D + b] * y[b];
          y[a] = t / A[static_cast<size_t>(a) * D + a];
          lev += y[a] * y[a];
        }
        acc[j] += w[j] * lev;
      }
    }
    for (int32_t j = 0; j < n; ++j) scores[first + j] = static_cast<float>(acc[j] / G);
  }

 private:
  double tau_ = 5.0, epsilon_ = 1e-6;
  int64_t n_future_ = 512;
  SeqQueryMoments moments_;
};

}  // namespace

KVB_POLICY(cap) { return policy_entry<CapPolicy>("cap").with_tests({.min_budget = 5}); }

}  // namespace kvb
