// `qfilter`: Q-Filters — one learned direction per (layer, kv head); a cached key's score is minus
// its projection on that direction.
// Sources: Godey et al., "Q-Filters: Leveraging QK Geometry for Efficient KV Cache Compression"
// (arXiv 2503.02812, §3: the queries and keys of a head share a dominant direction whose sign
// makes ⟨q, k⟩ large when ⟨f, k⟩ is small, so −⟨f, k⟩ estimates the attention a key will get;
// the filters f are computed offline per model); kvpress 0.5.5 QFilterPress (NVIDIA/kvpress, PyPI
// kvpress==0.5.5, kvpress/presses/qfilter_press.py): the filters are the tensor `q_filters`
// [num_layers, num_kv_heads, head_dim] of the Hub repository nthngdy/<model>_qfilt (a
// PyTorchModelHubMixin save: model.safetensors), and score(k_i) = −Σ_d f[layer, h, d]·k_i[d] on the
// cached (post-RoPE) keys, no sinks and no window, top n_kept kept.
// Weights: `filters=` a Hub id (nthngdy/Llama-3.1-8B-Instruct_qfilt), a directory holding
// model.safetensors, or a .safetensors / .pt file with the tensor `q_filters`, loaded by the
// learned-policy loader (GateWeights, registration.h learned_policy_entry); its first dimension
// must equal the model's layer count. `random_filters=SEED`: RANDOM N(0, 1) filters (tests only;
// kvpress's QFilters initialises with torch.randn the same way).
// Choices: the dot product is a double sum rounded to f32 (kvpress: an f32 sum). Decode: the
// kvbench schedule (buffer 128; `decode=false` is kvpress's prefill-only press).
#include <mutex>

#include "engine/policies/gate_weights.h"
#include "engine/policies/catalog.h"
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class QFilterPolicy : public ScheduledPolicy {
 public:
  QFilterPolicy(PolicyParams p, GateWeights w) : ScheduledPolicy("qfilter", std::move(p)), weights_(std::move(w)) {
    learned_ = learned_weights_choice(params_);
    learned_.require();
  }
  PolicyNeeds needs() const override { return {.host_kv = true}; }  // the score reads the cached keys

 protected:
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    const float* f = filters(step) + (static_cast<size_t>(step.layer) * step.num_kv_heads + h) * step.head_dim;
    for (int32_t i = 0; i < L; ++i) {
      const float* k = step.cache->key(step.seq, step.layer, h, i);
      double dot = 0.0;
      for (int d = 0; d < step.head_dim; ++d) dot += static_cast<double>(f[d]) * k[d];
      scores[i] = static_cast<float>(-dot);
    }
  }
  bool token_local() const override { return true; }

 private:
  /// The filters [num_layers, num_kv_heads, head_dim] (f32), checked against the model or drawn
  /// on first use; throws kvb::Error naming the file and the tensor `q_filters` when absent or of
  /// another shape (filters made for another model).
  const float* filters(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!data_.empty()) return data_.data();
    const std::vector<int64_t> shape = {step.num_layers, step.num_kv_heads, step.head_dim};
    if (learned_.path.empty()) {
      SeededDraws d(learned_.random_seed);
      data_.resize(static_cast<size_t>(step.num_layers) * step.num_kv_heads * step.head_dim);
      for (float& x : data_) x = d.normal(1.0);
    } else {
      data_ = weights_.require("q_filters", shape).data;
    }
    return data_.data();
  }

  LearnedWeightsChoice learned_;
  GateWeights weights_;
  std::vector<float> data_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(qfilter) {
  return learned_policy_entry<QFilterPolicy>("qfilter",
                                             GateSource{"qfilter", "filters", "model.safetensors", /*config=*/false})
      .with_tests({.min_budget = 1, .params = "random_filters=1", .needs_weights = true});
}

}  // namespace kvb
