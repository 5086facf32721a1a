// `cur`: CurDKV's approximate leverage scores of keys and values — the squared row norms, made
// local to fixed windows and multiplied.
// Sources: Sengupta et al., "Value-Guided KV Compression for LLMs via Approximated CUR
// Decomposition" (CurDKV, arXiv 2509.15038, §3: a row's leverage score approximated by its squared
// norm, the key and value scores combined); kvpress 0.5.5 CURPress (NVIDIA/kvpress, PyPI
// kvpress==0.5.5, kvpress/presses/cur_press.py: k² = ‖k_i‖², v² = ‖v_i‖² per kv head; with
// use_local_approximation (default) each is divided by its sum over the aligned window of
// local_window_size = 16 tokens it falls in (the last window zero-padded); leverage_type
// kv_product (default) multiplies them (key, value, kv_avg: k², v², their mean); the result is
// divided by its sum over the head; the first num_sinks = 4 tokens score 1; ScorerPress keeps the
// top n_kept per kv head).
// Choices: num_sinks is the schedule's `sinks` (default 4, protected); `local_window` is
// local_window_size (0 = no local approximation); `leverage` names the combination. kvpress's
// use_random_leverage (a torch.randn projection of keys and values) is not offered: its sketch is
// torch's random stream, which kvbench does not reproduce. Arithmetic in double, scores stored as
// f32. Decode: the kvbench schedule (buffer 128; `decode=false` is kvpress's prefill-only press),
// windows aligned to the oldest cached token.
#include <algorithm>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {
namespace {

/// Divides each aligned window of `w` entries of x by its sum (w ≤ 0: unchanged).
void local_normalise(std::vector<double>& x, int32_t w) {
  if (w <= 0) return;
  for (size_t lo = 0; lo < x.size(); lo += w) {
    const size_t hi = std::min(x.size(), lo + static_cast<size_t>(w));
    double s = 0;
    for (size_t i = lo; i < hi; ++i) s += x[i];
    for (size_t i = lo; i < hi; ++i) x[i] /= s;
  }
}

class CurPolicy : public ScheduledPolicy {
 public:
  explicit CurPolicy(PolicyParams p) : ScheduledPolicy("cur", std::move(p)) {
    params_.bind({{"leverage", &leverage_, one_of({"key", "value", "kv_avg", "kv_product"})},
                  {"local_window", &local_, within(0, 1 << 20)}});
  }
  PolicyNeeds needs() const override { return {.host_kv = true}; }  // scores read the cached keys and values

 protected:
  /// kvpress CURPress.score of head h (the sinks' 1.0 is left to the schedule's protection).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    std::vector<double> k2 = scoring::row_sq_norms(*step.cache, step.seq, step.layer, h, /*values=*/false);
    std::vector<double> v2 = scoring::row_sq_norms(*step.cache, step.seq, step.layer, h, /*values=*/true);
    local_normalise(k2, local_);
    local_normalise(v2, local_);
    double total = 0;
    for (int32_t i = 0; i < L; ++i) {
      const double s = leverage_ == 0   ? k2[i]
                       : leverage_ == 1 ? v2[i]
                       : leverage_ == 2 ? (k2[i] + v2[i]) / 2
                                        : k2[i] * v2[i];
      total += (k2[i] = s);
    }
    for (int32_t i = 0; i < L; ++i) scores[i] = static_cast<float>(k2[i] / total);
  }

 private:
  int leverage_ = 3;  ///< index into key, value, kv_avg, kv_product
  int32_t local_ = 16;
};

}  // namespace

KVB_POLICY(cur) { return policy_entry<CurPolicy>("cur").with_tests({.min_budget = 5}); }

}  // namespace kvb
