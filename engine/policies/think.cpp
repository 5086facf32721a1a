// `think`: ThinK's key-channel pruning — at the end of each prompt, every kv head zeroes the key
// channels that matter least to the queries of the observation window; no token is evicted.
// Sources: Xu et al., "ThinK: Thinner Key Cache by Query-Driven Pruning" (arXiv 2407.21018, §3.2:
// per head, channel d scores ‖Q_w[:, d]‖² · ‖K[:, d]‖² for the window queries Q_w, and the lowest
// channels are pruned); kvpress 0.5.5 ThinKPress (NVIDIA/kvpress, PyPI kvpress==0.5.5,
// kvpress/presses/think_press.py: mean over the last window_size post-RoPE queries of q² per query
// head, averaged over the GQA group, times the mean over all cached keys of k², the
// int(head_dim · key_channel_compression_ratio) lowest channels set to 0 in every cached key,
// prefill only; window_size 32).
// Choices: `ratio` is the KEPT fraction of key channels (kvbench's convention for ratios; kvpress's
// key_channel_compression_ratio is 1 − ratio); kvpress zeroes the channels rather than dropping
// them, so the cache holds as many bytes (as kvpress, the memory accounting is unchanged). Keys of
// later tokens (decoding, a later turn's prompt before its end) are not pruned, as in kvpress,
// whose presses compress only while prefilling. kvpress's default pairing with a sequence press,
// ComposedPress([SnapKVPress, ThinKPress]), is the spec option `then=think,then_ratio=f` of the
// scheduled policies (scheduled.cpp, make_composed).
#include "engine/policies/think.h"

#include <algorithm>
#include <numeric>

#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb::think {

int pruned_channels(int D, double kept) { return static_cast<int>(static_cast<double>(D) * (1.0 - kept)); }

std::vector<int> channels_to_prune(LayerStep& step, int h, std::span<const int32_t> rows, int window, int n_pruned) {
  const int D = step.head_dim, Hq = step.num_q_heads, G = Hq / step.num_kv_heads;
  if (n_pruned <= 0 || rows.empty()) return {};
  int w = 0;
  const float* q = step.window_queries(&w);  // [Hq, w, D], oldest first
  const int n = std::min(window, w);
  if (n <= 0) return {};
  std::vector<double> qn(D, 0.0), kn(D, 0.0);
  for (int g = 0; g < G; ++g)
    for (int r = w - n; r < w; ++r) {
      const float* x = q + (static_cast<size_t>(h * G + g) * w + r) * D;
      for (int d = 0; d < D; ++d) qn[d] += static_cast<double>(x[d]) * x[d];
    }
  for (int32_t i : rows) {
    const float* k = std::as_const(*step.cache).key(step.seq, step.layer, h, i);
    for (int d = 0; d < D; ++d) kn[d] += static_cast<double>(k[d]) * k[d];
  }
  std::vector<double> s(D);
  for (int d = 0; d < D; ++d)
    s[d] = (qn[d] / (static_cast<double>(G) * n)) * (kn[d] / static_cast<double>(rows.size()));
  std::vector<int> order(D);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] < s[b]; });
  order.resize(std::min(n_pruned, D));
  std::sort(order.begin(), order.end());
  return order;
}

void prune_keys(LayerStep& step, int h, std::span<const int32_t> rows, int window, int n_pruned) {
  const std::vector<int> ch = channels_to_prune(step, h, rows, window, n_pruned);
  if (ch.empty()) return;
  const int D = step.head_dim;
  std::vector<float> out(rows.size() * static_cast<size_t>(D));
  for (size_t j = 0; j < rows.size(); ++j) {
    const float* k = std::as_const(*step.cache).key(step.seq, step.layer, h, rows[j]);
    float* o = out.data() + j * D;
    std::copy_n(k, D, o);
    for (int d : ch) o[d] = 0.0f;
  }
  step.write_keys(h, std::vector<int32_t>(rows.begin(), rows.end()), std::move(out));
}

}  // namespace kvb::think

namespace kvb {
namespace {

class ThinkPolicy : public ParamPolicy {
 public:
  /// Reads `ratio` (the kept channel fraction, in [0, 1]) and `window` (≥ 1); throws kvb::Error
  /// naming the parameter otherwise.
  explicit ThinkPolicy(PolicyParams p) : ParamPolicy("think", std::move(p)) {
    params_.bind({{"ratio", &kept_, within(0, 1)}, {"window", &window_, within(1, 1 << 20)}});
  }
  PolicyNeeds needs() const override {
    return {.window_queries = window_, .host_kv = true, .writes_kv = true};  // the cached keys are read and rewritten
  }
  void on_layer_step(LayerStep& step) override {
    if (!step.prefill_last) return;  // kvpress compresses once, when the prompt has been prefilled
    const int n_pruned = think::pruned_channels(step.head_dim, kept_);
    for (int h = 0; h < step.num_kv_heads; ++h) {
      std::vector<int32_t> rows(step.cache->length(step.seq, step.layer, h));
      std::iota(rows.begin(), rows.end(), 0);
      think::prune_keys(step, h, rows, window_, n_pruned);
    }
  }

 private:
  double kept_ = 0;  ///< kept fraction of key channels
  int window_ = 0;   ///< window queries that score the channels
};

}  // namespace

KVB_POLICY(think) { return policy_entry<ThinkPolicy>("think").with_tests({.min_budget = 0, .evicts = false}); }

}  // namespace kvb
