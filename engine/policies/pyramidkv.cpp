// `pyramidkv`: SnapKV scoring with layer-wise budgets that shrink linearly with depth.
// Sources: Cai et al., "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
// Funneling" (arXiv 2406.02069, §3.2); seed-trimkv-and-baselines.md §5.7 (the KVCache-Factory /
// SCBench formula: C = budget, w = window, Ly = layers, β = 20: min = (C − w)/β,
// max = 2(C − w) − min; if max ≥ L − w then max = L − w and min = 2(C − w) − max;
// step = (max − min)/(Ly − 1); layer ℓ keeps max − ℓ·step selected tokens plus the w recent ones,
// so the layers average C); kvpress PyramidKVPress.get_layer_budget (the same shape with
// C = w + budget and the window counted INSIDE the layer total, falling back to the uniform
// budget when L ≥ max ≥ min ≥ w fails).
// Choices: `layer_budget=factory` (default; the reference formula above, layer totals average the
// budget) or `kvpress`; layer totals are rounded half-to-even like Python's round(). Scoring
// defaults follow SCBench's PyramidKV (window 32, kernel 5, avg-pool) with the group mean of
// per-head probabilities. The reference is prefill-only; here the layer budgets are also enforced
// during decoding every `buffer` tokens (decode=false restores prefill-only), with L the current
// head length in place of the prompt length.
#include <cmath>

#include "engine/policies/policies.h"
#include "engine/policies/snapkv.h"

namespace kvb {
namespace {

std::vector<PolicyParamInfo> params() {
  auto p = snapkv_params(32, 5, "avg", "mean", 128);
  p.push_back({"beta", "20", "pyramid steepness beta (min layer budget = (budget - window) / beta)"});
  p.push_back({"layer_budget", "factory",
               "factory: KVCache-Factory/SCBench formula (window on top of the pyramid); kvpress: PyramidKVPress"});
  return p;
}

class PyramidKVPolicy : public SnapKVPolicy {
 public:
  explicit PyramidKVPolicy(PolicyParams p) : SnapKVPolicy("pyramidkv", std::move(p)) {
    beta_ = params_.get_double("beta");
    if (beta_ < 1) params_.fail_param("beta", "must be >= 1");
    kvpress_ = params_.get_choice("layer_budget", {"factory", "kvpress"}) == "kvpress";
  }

 protected:
  int64_t layer_budget(const LayerStep& step, int64_t B, int32_t L) const override {
    const double w = window_;
    const int nl = step.num_layers;
    if (kvpress_) {
      const double cap = w + static_cast<double>(B);  // max_capacity_prompt = w + kept
      double mn = (cap - w) / beta_, mx = (cap - w) * 2 - mn;
      if (mx >= L - w) {
        mx = L - w;
        mn = (cap - w) * 2 - mx;
      }
      if (!(L >= mx && mx >= mn && mn >= w)) return std::max<int64_t>(1, B);
      const double st = nl > 1 ? (mx - mn) / (nl - 1) : 0.0;
      return static_cast<int64_t>(std::nearbyint(mx - step.layer * st));
    }
    const double C = static_cast<double>(B);
    double mn = (C - w) / beta_, mx = 2 * (C - w) - mn;
    if (mx >= L - w) {
      mx = L - w;
      mn = 2 * (C - w) - mx;
    }
    const double st = nl > 1 ? (mx - mn) / (nl - 1) : 0.0;
    const int64_t sel = static_cast<int64_t>(std::nearbyint(mx - step.layer * st));
    return std::max<int64_t>(sel, 0) + window_;
  }

 private:
  double beta_ = 20;
  bool kvpress_ = false;
};

}  // namespace

PolicyInfo pyramidkv_policy_info() {
  PolicyInfo info;
  info.name = "pyramidkv";
  info.description = "SnapKV scoring with pyramid layer budgets (PyramidKV §3.2, beta = 20)";
  info.params = params();
  info.make = [](const PolicySpec& spec) -> std::unique_ptr<Policy> {
    return std::make_unique<PyramidKVPolicy>(PolicyParams(spec, params()));
  };
  return info;
}

}  // namespace kvb
