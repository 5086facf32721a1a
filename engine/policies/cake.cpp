// `cake`: layer budgets from each layer's attention dispersion and shift, plus a shift-aware score.
// Sources: Qin et al., "CAKE: Cascading and Adaptive KV Cache Eviction with Layer Preferences"
// (ICLR 2025, arXiv 2503.12491): §3.2 the layer preference P_ℓ = H_ℓ^{1/τ1} · V_ℓ^{1/τ2} from the
// attention A of the last w (window) queries over the older keys — spatial dispersion H_ℓ = the
// entropy −Σ A log A and temporal shift V_ℓ = Σ_keys Var_queries(A), both summed over the layer's
// heads; budgets B_ℓ = P_ℓ / Σ P · B_total; §3.3 the eviction indicator I = Mean_w(A) + γ·Var_w(A)
// (over the window queries) per older token. Reference code antgroup/cakekv (read in the fork
// qtris123/cakekv @ e6adc5e, cake/model/modify_llama.py and cake/utils.py): entropy with
// log(A + 1e-10), unbiased variance (torch.var), indicator avg-pooled with kernel 5 and averaged
// over the GQA group, `adjust_budgets` (integer budgets truncated, capped at L − w, the excess and
// the remainder spread evenly over the first layers), total (B − w)·layers selected tokens; the
// window kept; τ1 = 1.6, τ2 = 0.6, γ = 200, window 32 (the TRIM-KV
// harness's CAKE defaults; G-KV uses the shift score as a baseline; docs/policies.md, `cake`).
// Choices: budget B is the per-layer average including the window (the reference's cache_size):
// the layers together keep what a uniform policy keeps. The budgets are allocated ONCE, at the
// first compression (the end of the prompt when it exceeds B, else the first decode step at which
// a layer reaches B + buffer), from that step's preference scores, and kept afterwards; the layers
// are compressed together in the step-end hook (the reference's non-cascading mode; the paper
// shows cascading ends in the same allocation). Later compressions of layer ℓ happen when it
// reaches B_ℓ + buffer tokens and use the same indicator. The reference compresses a prompt only
// when it exceeds B + w; here as every kvbench policy, when it exceeds B. Defaults buffer 128 (the
// seeds' decode schedule; the reference evicts every decode step, `buffer=1`).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {

/// CAKE's `adjust_budgets` (cake/utils.py): truncates the float layer budgets to integers, caps
/// each at `seq_len` and spreads the excess, then the difference to `total`, evenly over the
/// layers that can take it (the remainder to the first ones). Returns one budget per layer.
std::vector<int64_t> cake_adjust_budgets(const std::vector<double>& budgets, int64_t total, int64_t seq_len) {
  const size_t n = budgets.size();
  std::vector<int64_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<int64_t>(budgets[i]);  // np.array(dtype=int): toward zero
  int64_t excess = 0;
  for (auto& v : b) {
    excess += std::max<int64_t>(v - seq_len, 0);
    v = std::min(v, seq_len);
  }
  auto spread = [&](int64_t amount, bool add, auto valid) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < n; ++i)
      if (valid(b[i])) idx.push_back(i);
    if (idx.empty()) return;
    const int64_t per = amount / static_cast<int64_t>(idx.size()), rem = amount % static_cast<int64_t>(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) {
      const int64_t d = per + (static_cast<int64_t>(k) < rem ? 1 : 0);
      b[idx[k]] += add ? d : -d;
    }
  };
  if (excess > 0) spread(excess, true, [&](int64_t v) { return v < seq_len; });
  const int64_t diff = total - std::accumulate(b.begin(), b.end(), int64_t{0});
  if (diff > 0) spread(diff, true, [&](int64_t v) { return v < seq_len; });
  if (diff < 0) spread(-diff, false, [&](int64_t v) { return v > 1; });
  return b;
}

namespace {

class CakePolicy : public ScheduledPolicy {
 public:
  explicit CakePolicy(PolicyParams p) : ScheduledPolicy("cake", std::move(p)) {
    refuse_threshold("CAKE allocates budgets across layers");
    params_.bind({{"kernel", &kernel_, at_least(1)},
                  {"tau1", &tau1_},
                  {"tau2", &tau2_},
                  {"gamma", &gamma_}});  // finite: PolicyParams refuses NaN and inf
    if (!(tau1_ > 0)) params_.fail_param("tau1", "must be > 0");
    if (!(tau2_ > 0)) params_.fail_param("tau2", "must be > 0");
    params_.check_min("window", window_, 1, "the observation window");
  }
  PolicyNeeds needs() const override { return {.window_queries = window_}; }
  void on_sequence_end(SeqId seq) override { state_.erase(seq); }
  /// The budget is shared unevenly: the full cache (uneven_budget_footprint).
  KvFootprint kv_footprint(const FootprintQuery& q) const override { return uneven_budget_footprint(q, name()); }

  void on_layer_step(LayerStep& step) override {
    const int64_t B = budget_now(step);
    if (B <= 0) return;
    State& s = state_[step.seq];
    if (s.pending.empty()) s.pending.resize(step.num_layers);
    const int32_t L = step.cache->length(step.seq, step.layer, 0);
    const bool allocated = !s.selected.empty();
    const int64_t layer_total = allocated ? s.selected[step.layer] + window_ : B;
    if (!due(step, L, layer_total)) return;
    Pending& pd = s.pending[step.layer];
    pd = indicator(step);
    pd.length = L;
    if (allocated)
      compress_layer(pd, s.selected[step.layer], [&](int h, std::vector<int32_t> k) { step.keep(h, std::move(k)); });
  }

  void on_step_end(StepEnd& se) override {
    auto it = state_.find(se.seq);
    if (it == state_.end() || !it->second.selected.empty()) return;
    State& s = it->second;
    if (s.pending.empty()) return;
    for (const Pending& pd : s.pending)
      if (pd.length == 0) {  // not every layer was due: no allocation yet
        for (Pending& p : s.pending) p = {};
        return;
      }
    // Allocate the layer budgets once (§3.2; cake_cache.py CakeprefillKVCache.__call__).
    const int n = se.num_layers;
    const int64_t L = s.pending[0].length, w = std::min<int64_t>(window_, L);
    const int64_t B =
        ratio_kind_ ? std::max<int64_t>(static_cast<int64_t>(std::floor(ratio_ * se.seq_len)), sinks_ + window_ + 1)
                    : budget_;
    const int64_t total = (B - window_) * n;
    double sum = 0;
    for (const Pending& pd : s.pending) sum += pd.pref;
    std::vector<double> raw(n);
    for (int l = 0; l < n; ++l)
      raw[l] = (sum > 0 && std::isfinite(sum)) ? s.pending[l].pref / sum * static_cast<double>(total)
                                               : static_cast<double>(B - window_);
    s.selected = cake_adjust_budgets(raw, total, L - w);
    // adjust_budgets can leave a layer above L − w (its second spread ignores the cap); the
    // reference clamps when it evicts and keeps the clamped value as the layer's decode budget.
    for (int64_t& b : s.selected) b = std::min(b, L - w);
    for (int l = 0; l < n; ++l)
      compress_layer(s.pending[l], s.selected[l], [&](int h, std::vector<int32_t> k) { se.keep(l, h, std::move(k)); });
    for (Pending& p : s.pending) p = {};
  }

  /// The per-layer selected-token budgets of `seq` (empty before the allocation), for tests.
  std::vector<int64_t> layer_budgets(SeqId seq) const {
    auto it = state_.find(seq);
    return it == state_.end() ? std::vector<int64_t>{} : it->second.selected;
  }

 protected:
  void score(LayerStep&, int, int32_t, std::vector<float>&) override {}

 private:
  /// One layer's indicator per kv head (older tokens only) and its preference score.
  struct Pending {
    std::vector<std::vector<float>> hh;  ///< [Hkv][L − w]
    double pref = 0;
    int32_t length = 0;
    int32_t w = 0;
  };
  struct State {
    std::vector<int64_t> selected;  ///< selected (non-window) tokens per layer, once allocated
    std::vector<Pending> pending;
  };

  /// Mean + γ·var over the window queries, avg-pooled, GQA mean (cake modify_llama.py), and the
  /// layer's preference entropy^(1/τ1) · shift^(1/τ2) over all its query heads.
  Pending indicator(LayerStep& step) {
    Pending out;
    const int G = step.num_q_heads / step.num_kv_heads;
    double entropy = 0, shift = 0;
    out.hh.resize(step.num_kv_heads);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      int w = 0;
      const std::vector<float> p = scoring::window_probs(step, h, &w);  // [G, w, L]
      out.w = w;
      const int32_t n = L - w;
      std::vector<double> acc(std::max(n, 0), 0.0);
      for (int g = 0; g < G; ++g)
        for (int32_t i = 0; i < n; ++i) {
          double m = 0, m2 = 0;
          for (int r = 0; r < w; ++r) {
            const double a = p[(static_cast<size_t>(g) * w + r) * L + i];
            m += a;
            entropy -= a * std::log(a + 1e-10);
          }
          m /= w;
          for (int r = 0; r < w; ++r) {
            const double d = p[(static_cast<size_t>(g) * w + r) * L + i] - m;
            m2 += d * d;
          }
          const double var = w > 1 ? m2 / (w - 1) : NAN;  // torch.var (unbiased): NaN for one query
          shift += var;
          acc[i] += m + gamma_ * (w > 1 ? var : 0.0);
        }
      std::vector<float> hh(std::max(n, 0));
      for (int32_t i = 0; i < n; ++i) hh[i] = static_cast<float>(acc[i] / G);
      out.hh[h] = scoring::pool1d(hh, kernel_, scoring::Pool::kAvg);
    }
    out.pref = std::pow(entropy, 1.0 / tau1_) * std::pow(shift, 1.0 / tau2_);
    if (!std::isfinite(out.pref)) out.pref = 0;
    return out;
  }

  /// Keeps the top `selected` indicator tokens of every head of the layer plus the window.
  template <class Keep>
  static void compress_layer(const Pending& pd, int64_t selected, Keep keep) {
    for (int h = 0; h < static_cast<int>(pd.hh.size()); ++h) {
      const int32_t n = static_cast<int32_t>(pd.hh[h].size()), L = n + pd.w;
      if (selected >= n) continue;
      std::vector<int32_t> ks = scoring::top_k_indices(pd.hh[h], std::max<int64_t>(selected, 0));
      for (int32_t i = n; i < L; ++i) ks.push_back(i);
      keep(h, std::move(ks));
    }
  }

  int kernel_ = 5;
  double tau1_ = 1.6, tau2_ = 0.6, gamma_ = 200;
  std::map<SeqId, State> state_;
};

}  // namespace

KVB_POLICY(cake) { return policy_entry<CakePolicy>("cake").with_tests({.min_budget = 33}); }

}  // namespace kvb
