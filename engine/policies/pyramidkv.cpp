// `pyramidkv`: SnapKV scoring with layer-wise budgets that shrink linearly with depth.
// Sources: Cai et al., "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
// Funneling" (arXiv 2406.02069, §3.2); docs/policies.md (the KVCache-Factory /
// SCBench formula: C = budget, w = window, Ly = layers, β = 20: min = (C − w)/β,
// max = 2(C − w) − min; if max ≥ P − w then max = P − w and min = 2(C − w) − max;
// step = (max − min)/(Ly − 1); layer ℓ keeps max − ℓ·step selected tokens plus the w recent ones,
// so the layers average C); kvpress PyramidKVPress.get_layer_budget (the same shape with
// C = w + budget and the window counted INSIDE the layer total, falling back to the uniform
// budget when L ≥ max ≥ min ≥ w fails).
// KVCache-Factory's integer arithmetic is kept: min = (C − w) // β, step = (max − min) // (Ly − 1)
// (floor), and two uniform cases: a prompt shorter than C is not compressed, and a prompt with
// C ≤ P < 2(C − w) keeps C − w selected + w recent tokens in every layer.
// Choices: `layer_budget=factory` (default; the reference formula above) or `kvpress` (layer
// totals rounded half-to-even like Python's round()). Scoring defaults follow SCBench's PyramidKV
// (window 32, kernel 5, avg-pool) with the group mean of per-head probabilities. The reference is
// prefill-only; here the layer budgets are fixed ONCE from the prompt length P at the end of the
// prompt and the same per-layer budgets are enforced while decoding, every `buffer` tokens
// (decode=false restores prefill-only), so the layers' total stays that of a uniform policy.
// Page-aware (issue 33, `align`, default 16 = the KV page size): the per-layer budgets are then
// moved to the uniform budget plus a multiple of 16 tokens without raising their sum
// (pyramid_page_aligned), because a head's pages are ⌈tokens/16⌉ and unaligned per-layer budgets
// cost up to one extra page per (layer, kv head): 1.03–1.17× SnapKV's bytes on stories260K before.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/policies/registration.h"
#include "engine/policies/snapkv.h"

namespace kvb {

namespace {
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
}  // namespace

int64_t pyramid_layer_budget(int64_t C, int64_t w, int64_t P, int layer, int num_layers, double beta) {
  const int64_t cw = C - w;
  // KVCache-Factory PyramidKVCluster.update_kv: q_len < C leaves the prompt alone and
  // C <= q_len < 2(C - w) keeps C - w selected + w recent in every layer (uniform); both keep
  // the uniform budget C here (while decoding too).
  if (P < C || P < 2 * cw) return C;
  int64_t mn = static_cast<int64_t>(std::floor(static_cast<double>(cw) / beta));  // (C - w) // beta
  int64_t mx = 2 * cw - mn;
  if (mx >= P - w) {
    mx = P - w;
    mn = 2 * cw - mx;
  }
  const int64_t steps = num_layers > 1 ? floor_div(mx - mn, num_layers - 1) : 0;
  return std::max<int64_t>(mx - layer * steps, 0) + w;
}

int64_t pyramid_layer_budget_kvpress(int64_t B, int64_t window, int64_t P, int layer, int num_layers, double beta) {
  const double w = static_cast<double>(window), L = static_cast<double>(P);
  const double cap = w + static_cast<double>(B);  // max_capacity_prompt = w + kept
  double mn = (cap - w) / beta, mx = (cap - w) * 2 - mn;
  if (mx >= L - w) {
    mx = L - w;
    mn = (cap - w) * 2 - mx;
  }
  if (!(L >= mx && mx >= mn && mn >= w)) return std::max<int64_t>(1, B);
  const double st = num_layers > 1 ? (mx - mn) / (num_layers - 1) : 0.0;
  return static_cast<int64_t>(std::nearbyint(mx - layer * st));
}

std::vector<int64_t> pyramid_page_aligned(const std::vector<int64_t>& exact, int64_t B, int64_t align,
                                          int64_t min_budget) {
  if (align <= 1) return exact;
  std::vector<int64_t> out(exact.size());
  int64_t sum_d = 0;
  for (size_t l = 0; l < exact.size(); ++l) {
    int64_t d = floor_div(exact[l] - B, align);
    const int64_t floor_tokens = std::min(exact[l], min_budget);  // never below what the layer needs
    while (B + d * align < floor_tokens) ++d;
    out[l] = B + d * align;
    sum_d += d;
  }
  while (sum_d > 0) {
    size_t top = 0;
    for (size_t l = 1; l < out.size(); ++l)
      if (out[l] > out[top]) top = l;
    if (out[top] - align < std::min(exact[top], min_budget)) break;  // cannot lower further
    out[top] -= align;
    --sum_d;
  }
  return out;
}

namespace {

class PyramidKVPolicy : public SnapKVPolicy {
 public:
  explicit PyramidKVPolicy(PolicyParams p) : SnapKVPolicy("pyramidkv", std::move(p)) {
    beta_ = params_.get_double("beta");
    if (beta_ < 1) params_.fail_param("beta", "must be >= 1");
    params_.bind(
        {{"layer_budget", &kvpress_, one_of({"factory", "kvpress"}, "kvpress")}, {"align", &align_, at_least(1)}});
  }
  void on_sequence_end(SeqId seq) override { prompt_len_.erase(seq); }
  /// The budget is shared unevenly: the full cache (uneven_budget_footprint).
  KvFootprint kv_footprint(const FootprintQuery& q) const override { return uneven_budget_footprint(q, name()); }

 protected:
  /// The layer's budget from the prompt length P, fixed at the end of the prompt and kept while
  /// decoding (a prompt chunk with compress=chunked uses the tokens seen so far).
  int64_t layer_budget(const LayerStep& step, int64_t B, int32_t) const override {
    int64_t P = step.seq_len;
    if (step.prefill_last) {
      prompt_len_[step.seq] = P;
    } else if (!step.prefill) {
      auto it = prompt_len_.find(step.seq);
      if (it != prompt_len_.end()) P = it->second;
    }
    auto exact = [&](int layer) {
      return kvpress_ ? pyramid_layer_budget_kvpress(B, window_, P, layer, step.num_layers, beta_)
                      : pyramid_layer_budget(B, window_, P, layer, step.num_layers, beta_);
    };
    if (align_ <= 1) return exact(step.layer);
    std::vector<int64_t> all(static_cast<size_t>(step.num_layers));
    for (int l = 0; l < step.num_layers; ++l) all[static_cast<size_t>(l)] = exact(l);
    // Every layer keeps at least its window (+1 so that one scored token remains when possible).
    return pyramid_page_aligned(all, B, align_, window_ + 1)[static_cast<size_t>(step.layer)];
  }

 private:
  double beta_ = 20;
  bool kvpress_ = false;
  int64_t align_ = 16;
  mutable std::map<SeqId, int64_t> prompt_len_;
};

}  // namespace

KVB_POLICY(pyramidkv) { return policy_entry<PyramidKVPolicy>("pyramidkv").with_tests({.min_budget = 33}); }

}  // namespace kvb
