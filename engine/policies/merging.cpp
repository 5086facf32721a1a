// Merge-on-evict: kvpress 0.5.5 MergingPress (kvpress/presses/merging_press.py) as the spec
// option `merge=true,merge_threshold=t,merge_fraction=f` (make_composed, scheduled.cpp). The
// inner policy decides which tokens stay, exactly as without the option; before its keep-set is
// applied, each evicted token's value is blended into the survivor whose key is the most
// cosine-similar (keys stay as they are, so RoPE positions are untouched). kvpress merges at its
// one prefill compression; kvbench merges at every keep-set the policy requests in its layer turn
// (decode-time compressions included; `decode=false` is kvpress's protocol).
#include "engine/policies/merging.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/policies/wrapped.h"

namespace kvb::merging {
namespace {

constexpr double kEps = 1e-6;  // kvpress's _EPS

/// torch.quantile(x, q) with linear interpolation (x may hold −∞): sorted ascending, position
/// q · (n − 1), interpolated as torch.lerp does (start + w·(end − start) for w < 0.5, else
/// end − (end − start)·(1 − w)), so −∞ neighbours give −∞ or NaN exactly as torch.
double quantile(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  const double w = pos - static_cast<double>(lo), a = x[lo], b = x[hi];
  if (lo == hi) return a;
  return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1.0 - w);
}

/// ‖x‖₂ of a [D] row, in double.
double norm(const float* x, int D) {
  double s = 0;
  for (int d = 0; d < D; ++d) s += static_cast<double>(x[d]) * x[d];
  return std::sqrt(s);
}

}  // namespace

void merge_evicted(LayerStep& step, int h, std::span<const int32_t> keep, double threshold, double fraction) {
  const KVCache& c = *step.cache;
  const int D = step.head_dim;
  const int32_t L = c.length(step.seq, step.layer, h);
  const size_t nk = keep.size();
  if (nk == 0 || nk == static_cast<size_t>(L)) return;
  std::vector<char> kept(L, 0);
  for (int32_t i : keep) kept[i] = 1;
  // Unit keys of the survivors, [nk, D] in double.
  std::vector<double> ku(nk * D);
  for (size_t j = 0; j < nk; ++j) {
    const float* k = c.key(step.seq, step.layer, h, keep[j]);
    const double n = std::max(norm(k, D), kEps);
    for (int d = 0; d < D; ++d) ku[j * D + d] = k[d] / n;
  }
  std::vector<int32_t> ev;
  std::vector<double> sim;
  std::vector<size_t> target;
  for (int32_t e = 0; e < L; ++e) {
    if (kept[e]) continue;
    const float* k = c.key(step.seq, step.layer, h, e);
    const double n = std::max(norm(k, D), kEps);
    double best = -std::numeric_limits<double>::infinity();
    size_t arg = 0;
    for (size_t j = 0; j < nk; ++j) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += k[d] * ku[j * D + d];
      s /= n;
      if (s > best) best = s, arg = j;
    }
    ev.push_back(e);
    sim.push_back(best);
    target.push_back(arg);
  }
  std::vector<char> ok(ev.size());
  bool any = false;
  for (size_t i = 0; i < ev.size(); ++i) any |= (ok[i] = sim[i] >= threshold);
  if (fraction < 1.0 && any) {
    std::vector<double> gated(ev.size());
    for (size_t i = 0; i < ev.size(); ++i) gated[i] = ok[i] ? sim[i] : -std::numeric_limits<double>::infinity();
    const double q = quantile(gated, 1.0 - fraction);
    for (size_t i = 0; i < ev.size(); ++i) ok[i] = ok[i] && sim[i] >= q;  // false against NaN, as torch
  }
  std::vector<double> acc(nk * D, 0.0), wsum(nk, 0.0), tnorm(nk, -1.0);
  for (size_t i = 0; i < ev.size(); ++i) {
    if (!ok[i]) continue;
    const size_t t = target[i];
    const float* ve = c.value(step.seq, step.layer, h, ev[i]);
    if (tnorm[t] < 0) tnorm[t] = norm(c.value(step.seq, step.layer, h, keep[t]), D);
    const double en = norm(ve, D);
    const double w = std::max(sim[i], 0.0) * en / (en + tnorm[t] + kEps);
    for (int d = 0; d < D; ++d) acc[t * D + d] += w * ve[d];
    wsum[t] += w;
  }
  std::vector<int32_t> idx;
  std::vector<float> rows;
  for (size_t j = 0; j < nk; ++j) {
    if (!(wsum[j] > 0)) continue;
    const float* v = c.value(step.seq, step.layer, h, keep[j]);
    idx.push_back(keep[j]);
    for (int d = 0; d < D; ++d) rows.push_back(static_cast<float>((v[d] + acc[j * D + d]) / (1.0 + wsum[j])));
  }
  if (!idx.empty()) step.write_values(h, std::move(idx), std::move(rows));
}

namespace {

/// make_merging's wrapper.
class MergingPolicy : public WrappedPolicy {
 public:
  MergingPolicy(std::unique_ptr<Policy> inner, double threshold, double fraction)
      : WrappedPolicy(std::move(inner)), threshold_(threshold), fraction_(fraction) {}
  nlohmann::json resolved_params() const override {
    nlohmann::json j = inner_->resolved_params();
    j["merge"] = true;
    j["merge_threshold"] = threshold_;
    j["merge_fraction"] = fraction_;
    return j;
  }
  PolicyNeeds needs() const override { return writing_needs(); }
  void on_layer_step(LayerStep& step) override {
    inner_->on_layer_step(step);
    for (const auto& [h, keep] : step.keeps) merge_evicted(step, h, keep, threshold_, fraction_);
  }

 private:
  double threshold_, fraction_;
};

}  // namespace

std::unique_ptr<Policy> make_merging(std::unique_ptr<Policy> inner, double threshold, double fraction) {
  return std::make_unique<MergingPolicy>(std::move(inner), threshold, fraction);
}

}  // namespace kvb::merging
