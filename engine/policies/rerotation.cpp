// Key re-rotation after eviction: kvpress 0.5.5 KeyRerotationPress
// (kvpress/presses/key_rerotation_press.py) as the spec option `rerotate=true` (make_composed,
// scheduled.cpp). The policy keeps what it keeps without the option; the kept keys are then
// rotated from their cache index to their rank among the kept tokens, written through the
// policies' K/V write primitive. kvpress does it at its one prefill compression; kvbench at every
// keep-set of the policy's layer turns (`decode=false` is kvpress's protocol). Positions: kvpress's
// pipeline gives the question and the generated tokens their true positions (it continues at the
// context length), so kvbench leaves every cached position and every later position as it was.
#include "engine/policies/rerotation.h"

#include <cmath>
#include <vector>

#include "engine/policies/wrapped.h"
#include "engine/util/error.h"

namespace kvb::rerotation {

void rerotate_kept(LayerStep& step, int h, std::span<const int32_t> keep) {
  if (!step.rope_inv_freq) fail("rerotate=true: the backend gave the policy no RoPE frequencies");
  const int D = step.head_dim, half = D / 2;
  std::vector<int32_t> idx;
  std::vector<float> rows;
  for (size_t j = 0; j < keep.size(); ++j) {
    const int32_t delta = static_cast<int32_t>(j) - keep[j];
    if (delta == 0) continue;  // already at its rank
    const float* k = std::as_const(*step.cache).key(step.seq, step.layer, h, keep[j]);
    idx.push_back(keep[j]);
    const size_t at = rows.size();
    rows.resize(at + D);
    for (int i = 0; i < half; ++i) {
      const double a = static_cast<float>(static_cast<float>(delta) * step.rope_inv_freq[i]);  // f32, as kvpress
      const double c = std::cos(a), s = std::sin(a);
      rows[at + i] = static_cast<float>(k[i] * c - k[i + half] * s);
      rows[at + i + half] = static_cast<float>(k[i + half] * c + k[i] * s);
    }
  }
  if (!idx.empty()) step.write_keys(h, std::move(idx), std::move(rows));
}

namespace {

/// make_rerotating's wrapper.
class RerotatingPolicy : public WrappedPolicy {
 public:
  explicit RerotatingPolicy(std::unique_ptr<Policy> inner) : WrappedPolicy(std::move(inner)) {}
  nlohmann::json resolved_params() const override {
    nlohmann::json j = inner_->resolved_params();
    j["rerotate"] = true;
    return j;
  }
  PolicyNeeds needs() const override { return writing_needs(); }
  void on_layer_step(LayerStep& step) override {
    inner_->on_layer_step(step);
    for (const auto& [h, keep] : step.keeps) rerotate_kept(step, h, keep);
  }
};

}  // namespace

std::unique_ptr<Policy> make_rerotating(std::unique_ptr<Policy> inner) {
  return std::make_unique<RerotatingPolicy>(std::move(inner));
}

}  // namespace kvb::rerotation
