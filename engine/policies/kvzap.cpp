// `kvzap`: KVzap — a learned per-layer scorer over the attention input predicts each token's
// importance per kv head; tokens older than a sliding window whose score is below a threshold are
// evicted, at the end of the prompt and while decoding (DMS-style threshold eviction).
// Sources: Jegou et al., "KVzap" (arXiv 2601.07891); kvpress 0.5.5 (PyPI; read at NVIDIA/kvpress
// commit 8bb29b9c3078452a86d692f29123fa6c793e2b05): kvpress/presses/kvzap_press.py (KVzapModel,
// KVzapPress.score), kvpress/presses/dms_press.py (DMSPress.forward_hook), kvzap/README.md (usage:
// DMSPress(KVzapPress("mlp"), threshold=-4), decoding=True for thinking models);
// docs/policies.md, `kvzap`.
//   score s[t, h] = MLP_l(x_t)[h], x_t = the attention block's input of token t (after the input
//     RMSNorm), MLP_l = Linear(H, hidden) → GELU(erf) → Linear(hidden, Hkv) (`mlp`), or
//     Linear(H, Hkv) (`linear`: a checkpoint without hidden_dim);
//   a token is judged once it is `window` tokens old (position < tokens seen − window): kept iff
//     s ≥ threshold. No budget: the cache size follows the content.
// Weights: `scorer=` a KVzapModel checkpoint (save_pretrained: config.json {input_dim,
// output_dim, hidden_dim, n_modules} + model.safetensors with layers.{l}.0.weight/bias and
// layers.{l}.2.weight/bias, or layers.{l}.weight/bias), a directory or a Hub id
// (nvidia/KVzap-mlp-Qwen3-8B); `random_scorer=SEED`: RANDOM weights of nn.Linear's init range
// (tests only).
#include <algorithm>
#include <cmath>
#include <mutex>

#include "engine/policies/gate_weights.h"
#include "engine/policies/catalog.h"
#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

class KVzapPolicy : public ParamPolicy {
 public:
  KVzapPolicy(PolicyParams p, GateWeights w) : ParamPolicy("kvzap", std::move(p)), weights_(std::move(w)) {
    learned_ = learned_weights_choice(params_);
    params_.bind(
        {{"hidden", &hidden_}, {"threshold", &threshold_}, {"window", &window_, within(0, 1 << 30)}, {"decode", &decode_}});
    chunked_ = parse_compress(params_);
    learned_.require();
    if (hidden_ < 0) params_.fail_param("hidden", "must be >= 0 (0 = the linear scorer)");
    // A checkpoint's form follows its tensors (layers.0.0.weight: the MLP; config.json's
    // hidden_dim is null for the linear one); a random scorer's follows `hidden`.
    mlp_ = learned_.path.empty() ? hidden_ > 0 : weights_.find("layers.0.0.weight") != nullptr;
  }

  PolicyNeeds needs() const override { return {.layer_input = true, .num_scalars = 1, .layer_input_via_mlp = mlp_}; }

  void on_layer_step(LayerStep& step) override {
    const Scorer& sc = scorer(step);
    const int Hk = step.num_kv_heads;
    std::vector<float> z(static_cast<size_t>(step.n_new) * Hk);
    if (mlp_) {
      const HeadMlp mlp{
          Hk,           step.hidden_size, sc.hidden,   /*shared_hidden=*/true, HeadMlp::Act::kGeluErf, sc.w1.data(),
          sc.b1.data(), sc.w2.data(),     sc.b2.data()};
      scoring::head_mlp(step, mlp, nullptr, step.n_new, -1, z.data());
    } else {
      if (!step.layer_input) fail("policy 'kvzap': LayerStep::layer_input is not set");
      const int H = step.hidden_size;
      for (int t = 0; t < step.n_new; ++t)
        for (int h = 0; h < Hk; ++h) {
          const float* x = step.layer_input + static_cast<size_t>(t) * H;
          const float* w = sc.w2.data() + static_cast<size_t>(h) * H;
          float acc = 0;
          for (int c = 0; c < H; ++c) acc += w[c] * x[c];
          z[static_cast<size_t>(t) * Hk + h] = acc + sc.b2[h];
        }
    }
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      for (int t = 0; t < step.n_new; ++t) {
        const int32_t idx = L - step.n_new + t;
        if (idx >= 0) step.cache->scalars(step.seq, step.layer, h, idx)[0] = z[static_cast<size_t>(t) * Hk + h];
      }
    }
    if (!compress_point(step.prefill, step.prefill_last, chunked_)) return;
    if (!step.prefill && !decode_) return;
    const int64_t judged_below = step.seq_len - window_;  // positions older than the window
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      std::vector<int32_t> keep;
      keep.reserve(static_cast<size_t>(L));
      for (int32_t i = 0; i < L; ++i) {
        const float s = step.cache->scalars(step.seq, step.layer, h, i)[0];
        if (step.cache->position(step.seq, step.layer, h, i) >= judged_below || !(s < threshold_)) keep.push_back(i);
      }
      if (static_cast<int32_t>(keep.size()) < L) step.keep(h, std::move(keep));
    }
  }

 private:
  struct Scorer {
    int hidden = 0;
    std::vector<float> w1, b1, w2,
        b2;  ///< mlp: w1 [hidden, H], b1 [hidden], w2 [Hkv, hidden], b2 [Hkv]; linear: w2 [Hkv, H], b2
  };

  /// The scorer of step.layer, read from the checkpoint or drawn on first use (throws kvb::Error
  /// naming the file and tensor when the checkpoint does not fit this model).
  const Scorer& scorer(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (scorers_.empty()) {
      // A scorer per decoder layer: one made for another layer count is refused before use, as
      // dms and trimkv refuse theirs (issue 46, item 7).
      if (!learned_.path.empty()) weights_.require_layers("layers.", ".", step.num_layers, "scorers", "a scorer");
      scorers_.resize(static_cast<size_t>(step.num_layers));
    }
    Scorer& s = scorers_.at(static_cast<size_t>(step.layer));
    if (!s.b2.empty()) return s;
    const int64_t H = step.hidden_size, Hk = step.num_kv_heads;
    if (learned_.path.empty()) {
      // nn.Linear's default init range U(±1/sqrt(fan_in)), one SeededDraws stream per layer.
      SeededDraws d(learned_.layer_seed(step.layer));
      auto fill = [&](std::vector<float>& v, size_t n, int64_t fan_in) {
        v.resize(n);
        for (float& x : v) x = d.uniform(1.0 / std::sqrt(static_cast<double>(fan_in)));
      };
      if (mlp_) {
        s.hidden = static_cast<int>(hidden_);
        fill(s.w1, static_cast<size_t>(hidden_ * H), H);
        fill(s.b1, static_cast<size_t>(hidden_), H);
        fill(s.w2, static_cast<size_t>(Hk * hidden_), hidden_);
        fill(s.b2, static_cast<size_t>(Hk), hidden_);
      } else {
        fill(s.w2, static_cast<size_t>(Hk * H), H);
        fill(s.b2, static_cast<size_t>(Hk), H);
      }
      return s;
    }
    const std::string pfx = "layers." + std::to_string(step.layer) + ".";
    if (mlp_) {
      const GateTensor* w1 = weights_.find(pfx + "0.weight");
      const int64_t hid = w1 && !w1->shape.empty() ? w1->shape[0] : 1;  // absent: require() names it
      s.hidden = static_cast<int>(hid);
      s.w1 = weights_.require(pfx + "0.weight", {hid, H}).data;
      s.b1 = weights_.require(pfx + "0.bias", {hid}).data;
      s.w2 = weights_.require(pfx + "2.weight", {Hk, hid}).data;
      s.b2 = weights_.require(pfx + "2.bias", {Hk}).data;
    } else {
      s.w2 = weights_.require(pfx + "weight", {Hk, H}).data;
      s.b2 = weights_.require(pfx + "bias", {Hk}).data;
    }
    return s;
  }

  LearnedWeightsChoice learned_;
  int64_t hidden_ = 16, window_ = 128;
  float threshold_ = -4.0f;
  bool decode_ = true, chunked_ = false, mlp_ = true;
  GateWeights weights_;
  std::vector<Scorer> scorers_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(kvzap) {
  return learned_policy_entry<KVzapPolicy>("kvzap", GateSource{"kvzap", "scorer", "model.safetensors", /*config=*/true})
      .with_tests({.min_budget = 0, .params = "random_scorer=1", .needs_weights = true});
}

}  // namespace kvb
