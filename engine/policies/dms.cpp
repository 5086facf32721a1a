// `dms`: Dynamic Memory Sparsification — a learned per-layer projection of the residual stream
// decides, for every new token and kv head, whether the PREVIOUS token of that head is to be
// evicted; the decision is delayed: a marked token stays visible to the next `window` queries and
// is evicted after them. No budget: the cache size follows the decisions.
// Sources: Łańcucki et al., "Inference-Time Hyper-Scaling with KV Cache Compression" (arXiv
// 2506.05345, NeurIPS 2025), §3 (delayed eviction, the decision from a borrowed or separate
// neuron); NVIDIA Model-Optimizer, experimental/dms at commit a2fbac7ba:
// dms/core.py prepare_attention_input (the decision logits), dms/attention_prefill.py
// dms_prefill_flex (eviction info of token i produced by token i + 1; a marked key visible to a
// query iff query − key < dms_window_size + 1, the cache's window), dms/cache.py (the decode
// cache keeps the last window + 1 tokens contiguous and drops marked tokens leaving it),
// models/qwen3/configuration_qwen3_dms.py (defaults); docs/policies.md, `dms`.
//   logit[t, h] = scale · (W_h · RMSNorm_alpha(r_t) + b_h) − offset, r_t = the residual stream
//     entering the layer (before its input RMSNorm), RMSNorm_alpha with its own weight and the
//     model's epsilon (dms_proj_alpha_norm, dms_proj_alpha); per=layer uses head 0's logit for
//     every head (dms_alpha_per);
//   decision[t, h] = logit[t, h] > 0 marks token t − 1 of head h;
//   a marked token j is read by queries q with q − j ≤ window and evicted before query j + window + 1.
// Exactness: a prompt is prefilled one token per step (PolicyNeeds::prefill_chunk = 1) and the
// tokens a query may no longer read are evicted after every step, so every query reads exactly
// the reference's visible set at any --prefill-chunk (the reference masks inside a prefill chunk
// with FlexAttention instead; prefill costs a decode step per prompt token here).
// Weights: `alpha=` a DMS checkpoint trained with dms_separate_alpha (its
// model.layers.{l}.self_attn.dms_proj_alpha{,_norm} tensors; a directory, a Hub id or a
// .safetensors file; its config.json's dms_window_size, dms_alpha_scale,
// dms_initial_alpha_offset and dms_alpha_per become the defaults); `random_alpha=SEED`: RANDOM
// weights of nn.Linear's init range and a unit norm weight (tests only).
#include <algorithm>
#include <cmath>
#include <mutex>

#include "engine/policies/gate_weights.h"
#include "engine/policies/catalog.h"
#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// The DMS tensors of a checkpoint: model.layers.{l}.self_attn.dms_proj_alpha{,_norm}.*.
bool is_alpha_tensor(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.find(".self_attn.dms_proj_alpha") != std::string::npos;
}

/// The checkpoint's config.json settings become the defaults of the parameters the user did not
/// set; a checkpoint that borrows a query channel (dms_separate_alpha false) is refused.
PolicySpec with_dms_config(PolicySpec spec, const GateWeights& w) {
  const nlohmann::json& c = w.config;
  if (c.contains("dms_separate_alpha") && c["dms_separate_alpha"] != true)
    fail_at(w.config_path, "dms_separate_alpha",
            "{} is not supported: kvbench reads the decision from a separate dms_proj_alpha projection",
            c["dms_separate_alpha"].dump());
  auto number = [&](const char* key, const char* param) {
    if (!c.contains(key) || spec.params.count(param)) return;
    if (!c[key].is_number()) fail_at(w.config_path, key, "expected a number, got {}", c[key].dump());
    spec.params[param] = c[key].dump();
  };
  number("dms_window_size", "window");
  number("dms_alpha_scale", "scale");
  number("dms_initial_alpha_offset", "offset");
  if (c.contains("dms_alpha_per") && !spec.params.count("per")) {
    if (!c["dms_alpha_per"].is_string())
      fail_at(w.config_path, "dms_alpha_per", "expected \"head\" or \"layer\", got {}", c["dms_alpha_per"].dump());
    spec.params["per"] = c["dms_alpha_per"].get<std::string>();
  }
  return spec;
}

class DmsPolicy : public ParamPolicy {
 public:
  DmsPolicy(PolicyParams p, GateWeights w) : ParamPolicy("dms", std::move(p)), weights_(std::move(w)) {
    learned_ = learned_weights_choice(params_);
    params_.bind({{"window", &window_, within(1, 1 << 30)},
                  {"scale", &scale_, within(-1e6, 1e6)},
                  {"offset", &offset_, within(-1e6, 1e6)},
                  {"per", &per_layer_, one_of({"head", "layer"}, "layer")}});
    if (params_.get_choice("compress", {"chunked", "prompt_end"}) != "chunked")
      params_.fail_param("compress",
                         "DMS evicts within the prompt, as its reference's prefill mask does (a model trained with DMS "
                         "never read a whole prompt uncompressed); prompt_end is not supported");
    learned_.require();
  }

  PolicyNeeds needs() const override { return {.layer_residual = true, .num_scalars = 1, .prefill_chunk = 1}; }

  void on_layer_step(LayerStep& step) override {
    if (!step.layer_residual) fail("policy 'dms': LayerStep::layer_residual is not set");
    const Alpha& a = alpha(step);
    const int Hk = step.num_kv_heads, H = step.hidden_size;
    std::vector<float> xn(static_cast<size_t>(H));
    for (int t = 0; t < step.n_new; ++t) {
      // RMSNorm in f32 with a double sum, as the model's own norm (transformers' Qwen3RMSNorm
      // computes the mean of squares in f32; the decision's margin dwarfs the difference).
      const float* r = step.layer_residual + static_cast<size_t>(t) * H;
      double ss = 0;
      for (int c = 0; c < H; ++c) ss += static_cast<double>(r[c]) * r[c];
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / H) + step.rms_norm_eps);
      for (int c = 0; c < H; ++c) xn[c] = a.norm[c] * (r[c] * inv);
      const int64_t pos = step.seq_len - step.n_new + t;  // this token; its decision marks pos − 1
      if (pos == 0) continue;
      bool head0 = false;
      for (int h = 0; h < Hk; ++h) {
        bool evict;
        if (per_layer_ && h > 0) {
          evict = head0;
        } else {
          const float* w = a.w.data() + static_cast<size_t>(h) * H;
          float z = a.b.empty() ? 0.0f : a.b[h];
          for (int c = 0; c < H; ++c) z += w[c] * xn[c];
          evict = z * scale_ - offset_ > 0;
          if (h == 0) head0 = evict;
        }
        if (!evict) continue;
        const int32_t L = step.cache->length(step.seq, step.layer, h);
        for (int32_t i = L - 1; i >= 0; --i)  // pos − 1 is among the newest tokens (window ≥ 1)
          if (step.cache->position(step.seq, step.layer, h, i) == pos - 1) {
            step.cache->scalars(step.seq, step.layer, h, i)[0] = 1.0f;
            break;
          }
      }
    }
    // The next query (position seq_len) no longer reads marked tokens more than `window` behind it.
    const int64_t readable_from = step.seq_len - window_;
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      std::vector<int32_t> keep;
      keep.reserve(static_cast<size_t>(L));
      for (int32_t i = 0; i < L; ++i)
        if (step.cache->position(step.seq, step.layer, h, i) >= readable_from ||
            step.cache->scalars(step.seq, step.layer, h, i)[0] == 0.0f)
          keep.push_back(i);
      if (static_cast<int32_t>(keep.size()) < L) step.keep(h, std::move(keep));
    }
  }

 private:
  struct Alpha {
    std::vector<float> norm;  ///< [H] the decision RMSNorm's weight
    std::vector<float> w;     ///< [Hkv, H] the decision projection
    std::vector<float> b;     ///< [Hkv] its bias (empty: none)
  };

  /// The decision weights of step.layer, read from the checkpoint or drawn on first use (throws
  /// kvb::Error naming the file and tensor when the checkpoint does not fit this model).
  const Alpha& alpha(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (layers_.empty()) {
      if (!learned_.path.empty())
        weights_.check_model(step.num_layers, step.num_kv_heads, step.hidden_size, step.head_dim);
      layers_.resize(static_cast<size_t>(step.num_layers));
    }
    Alpha& a = layers_.at(static_cast<size_t>(step.layer));
    if (!a.norm.empty()) return a;
    const int64_t H = step.hidden_size, Hk = step.num_kv_heads;
    if (learned_.path.empty()) {
      // nn.Linear's default init range U(±1/sqrt(H)); the norm weight 1 (Qwen3RMSNorm's init).
      SeededDraws d(learned_.layer_seed(step.layer));
      a.norm.assign(static_cast<size_t>(H), 1.0f);
      a.w.resize(static_cast<size_t>(Hk * H));
      for (float& x : a.w) x = d.uniform(1.0 / std::sqrt(static_cast<double>(H)));
      return a;
    }
    const std::string pfx = "model.layers." + std::to_string(step.layer) + ".self_attn.";
    for (const char* t : {"dms_proj_alpha_norm.weight", "dms_proj_alpha.weight"})  // a missing layer is named
      (void)weights_.layer_tensor(pfx + t, step.layer, step.num_layers, "DMS decision weights");
    a.norm = weights_.require(pfx + "dms_proj_alpha_norm.weight", {H}).data;
    a.w = weights_.require(pfx + "dms_proj_alpha.weight", {Hk, H}).data;
    if (weights_.find(pfx + "dms_proj_alpha.bias")) a.b = weights_.require(pfx + "dms_proj_alpha.bias", {Hk}).data;
    return a;
  }

  LearnedWeightsChoice learned_;
  int64_t window_ = 512;
  float scale_ = 100.0f, offset_ = 5.0f;
  bool per_layer_ = false;
  GateWeights weights_;
  std::vector<Alpha> layers_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(dms) {
  return learned_policy_entry<DmsPolicy>(
             "dms",
             GateSource{"dms", "alpha", "model.safetensors", /*config=*/true, is_alpha_tensor, /*model_shards=*/true},
             with_dms_config)
      .with_tests({.min_budget = 0, .params = "random_alpha=1,window=16", .needs_weights = true});
}

}  // namespace kvb
