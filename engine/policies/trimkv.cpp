// `trimkv`: TRIM-KV — learned retention gates, score (t − i)·log β, top-M per (layer, kv_head).
// Sources: Bui et al., "Cache What Lasts: Token Retention for Memory-Bounded KV Cache in LLMs"
// (arXiv 2512.03324, §3 Eq. 2–3 and Algorithm 1); docs/policies.md, `trimkv`
// (gate, TrimKVCache inference eviction, released weights, recommended defaults).
//   gate (one per layer, on the attention block's input x = the residual stream after the input
//   RMSNorm, [H]): log β = logsigmoid(W2 · φ(W1·x + b1) + b), W1 [I, H], b1 [I], W2 [Hkv, I] (no
//   bias), b [Hkv]; φ = SiLU (the base model's hidden_act); I = 512 in the released gates;
//   score of cached token j of head η after N tokens were seen: (N + 1 − p_j) · log β_j (fp32;
//   T-HEAD TrimKVCache.compress uses seen_tokens + 1 − position);
//   a layer is compressed when its length reaches M + buffer, to exactly M = budget per head
//   (top-M, kept in temporal order); no sinks, no forced window.
// Choices: buffer 128 (the released config and the R-KV-comparable schedule, §6 item 2);
// buffer=1 is the paper's Algorithm 1. A prompt longer than M is compressed at its end (T-HEAD
// compresses after the prefill forward only once it reaches M + buffer; prefill_last here follows
// the shared schedule, which differs only for prompts of M+1 … M+buffer−1 tokens).
// budget_kind=global is the DynamicBudgetTrimKVCache "global" strategy: when the tokens of all
// heads and layers reach layers·Hkv·(M + buffer), keep the global top layers·Hkv·M (ragged heads).
// Weights: `gates=` names the released ngocbh/TrimKV-* checkpoint as it is — a Hub id
// (ngocbh/TrimKV-Qwen3-4B-Math: trimkv_weights.pth + config.json), a directory holding those
// files, or a .pth/.pt/.safetensors file (GateWeights, docs/policies.md#gate-files); tensor names
// model.layers.{l}.self_attn.retention_gate.{linear1.weight [I, H], linear1.bias [I],
// linear2.weight [Hkv, I], bias [Hkv]}. The checkpoint's config.json fills the defaults the user
// did not give: buffer = buffer_size and, without a budget, budget = memory_size (the training
// M); retention_gate must be "rg" and hidden_act "silu"; num_hidden_layers, num_key_value_heads,
// hidden_size and head_dim must match the model. Without weights the policy refuses to run;
// `random_gates=SEED` generates RANDOM gates of the right shapes (W ~ N(0, 0.02²), b1 = 0,
// b = gate_bias) for tests only — they are not TRIM-KV.
#include <algorithm>
#include <cmath>
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

/// The policy spec with the defaults the checkpoint's config.json gives (TRIM-KV's config
/// fields, docs/policies.md): buffer = buffer_size unless given, budget =
/// memory_size when the spec has none. Refuses gate types and activations other than the
/// released "rg" gates' ("silu").
PolicySpec with_checkpoint_config(PolicySpec spec, const GateWeights& w) {
  const nlohmann::json& c = w.config;
  if (c.contains("retention_gate") && c["retention_gate"] != "rg")
    fail_at(w.config_path, "retention_gate", "gate type {} is not supported (the released TRIM-KV gates are \"rg\")",
            c["retention_gate"].dump());
  if (c.contains("hidden_act") && c["hidden_act"] != "silu")
    fail_at(w.config_path, "hidden_act", "{} is not supported (the gate's activation is SiLU)", c["hidden_act"].dump());
  auto positive = [&](const char* key) -> int64_t {
    if (!c.contains(key)) return 0;
    if (!c[key].is_number() || c[key].get<double>() < 1 || c[key].get<double>() > 1e9)
      fail_at(w.config_path, key, "expected a positive number, got {}", c[key].dump());
    return static_cast<int64_t>(c[key].get<double>());  // memory_size is written as a float (512.0)
  };
  if (const int64_t b = positive("buffer_size"); b > 0 && !spec.params.count("buffer"))
    spec.params["buffer"] = std::to_string(b);
  if (const int64_t m = positive("memory_size"); m > 0 && spec.budget == 0) spec.budget = m;
  return spec;
}

float log_sigmoid(float v) { return v >= 0 ? -std::log1p(std::exp(-v)) : v - std::log1p(std::exp(v)); }

std::string layer_prefix(int l) { return "model.layers." + std::to_string(l) + ".self_attn.retention_gate."; }

class TrimKVPolicy : public ScheduledPolicy {
 public:
  TrimKVPolicy(PolicyParams p, GateWeights weights)
      : ScheduledPolicy("trimkv", std::move(p), /*global_kind=*/true), weights_(std::move(weights)) {
    learned_ = learned_weights_choice(params_);
    params_.bind({{"gate_hidden", &hidden_}, {"gate_bias", &bias_}});
    learned_.require();
    params_.check_min("gate_hidden", hidden_, 1);
  }
  PolicyNeeds needs() const override { return {.layer_input = true, .num_scalars = 1, .layer_input_via_mlp = true}; }

  void on_step_end(StepEnd& s) override {
    if (!global_kind_ || budget_ <= 0) return;
    int64_t total = 0;
    for (int l = 0; l < s.num_layers; ++l)
      for (int h = 0; h < s.num_kv_heads; ++h) total += s.cache->length(s.seq, l, h);
    const int64_t heads = static_cast<int64_t>(s.num_layers) * s.num_kv_heads;
    const int64_t keep_total = heads * budget_;
    // Same protocol as the per-head schedule: the end of the prompt, then every `buffer` tokens per
    // head on average; prompt chunks before the end only with compress=chunked.
    if (!compress_point(s.prefill, s.prefill_last, chunked_)) return;
    const bool go =
        total > keep_total && (s.prefill_last || ((decode_ || s.prefill) && total >= heads * (budget_ + buffer_)));
    if (!go) return;
    std::vector<float> all;
    all.reserve(total);
    for (int l = 0; l < s.num_layers; ++l)
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const int32_t L = s.cache->length(s.seq, l, h);
        for (int32_t i = 0; i < L; ++i) all.push_back(retention_score(*s.cache, s.seq, l, h, i, s.seq_len));
      }
    std::vector<int32_t> top = scoring::top_k_indices(all, keep_total);  // flat indices, sorted
    size_t t = 0;
    int64_t base = 0;
    for (int l = 0; l < s.num_layers; ++l)
      for (int h = 0; h < s.num_kv_heads; ++h) {
        const int32_t L = s.cache->length(s.seq, l, h);
        std::vector<int32_t> keep;
        while (t < top.size() && top[t] < base + L) keep.push_back(static_cast<int32_t>(top[t++] - base));
        if (static_cast<int32_t>(keep.size()) != L) s.keep(l, h, std::move(keep));
        base += L;
      }
  }

 protected:
  static float retention_score(const KVCache& c, SeqId seq, int l, int h, int32_t i, int64_t seen) {
    const float log_beta = const_cast<KVCache&>(c).scalars(seq, l, h, i)[0];
    return static_cast<float>(seen + 1 - c.position(seq, l, h, i)) * log_beta;
  }

  void observe(LayerStep& step) override {
    if (!step.layer_input && !step.head_mlp) fail("policy 'trimkv': LayerStep::layer_input is not set");
    const Gate& g = gate(step);
    const int Hk = step.num_kv_heads;
    // φ = SiLU, the base model's hidden_act; one hidden layer shared by the heads.
    const HeadMlp mlp{
        Hk,          step.hidden_size, g.I,       /*shared_hidden=*/true, HeadMlp::Act::kSilu, g.w1.data(),
        g.b1.data(), g.w2.data(),      g.b.data()};
    std::vector<float> z(static_cast<size_t>(step.n_new) * Hk);
    scoring::head_mlp(step, mlp, nullptr, step.n_new, -1, z.data());
    for (int t = 0; t < step.n_new; ++t) {
      for (int h = 0; h < Hk; ++h) {
        const int32_t L = step.cache->length(step.seq, step.layer, h);
        const int32_t idx = L - step.n_new + t;
        if (idx >= 0)
          step.cache->scalars(step.seq, step.layer, h, idx)[0] = log_sigmoid(z[static_cast<size_t>(t) * Hk + h]);
      }
    }
  }

  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override {
    for (int32_t i = 0; i < L; ++i) scores[i] = retention_score(*step.cache, step.seq, step.layer, h, i, step.seq_len);
  }

 private:
  struct Gate {
    int I = 0;
    std::vector<float> w1, b1, w2, b;
  };

  const Gate& gate(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (gates_.empty()) {
      if (!weights_.find(layer_prefix(0) + "linear1.weight") && learned_.random_seed >= 0) make_random(step);
      if (!learned_.path.empty())
        weights_.check_model(step.num_layers, step.num_kv_heads, step.hidden_size, step.head_dim);
      gates_.resize(step.num_layers);
      for (int l = 0; l < step.num_layers; ++l) {
        const std::string p = layer_prefix(l);
        const GateTensor& w1t = weights_.layer_tensor(p + "linear1.weight", l, step.num_layers, "gates");
        if (w1t.shape.size() != 2) fail_at(weights_.path, "tensor " + p + "linear1.weight", "expected 2 dimensions");
        const int64_t I = w1t.shape[0];
        if (const auto& c = weights_.config;
            c.contains("retention_gate_intermediate_size") && c["retention_gate_intermediate_size"] != I)
          fail_at(weights_.config_path, "retention_gate_intermediate_size", "{} but the gate tensors are {} wide",
                  c["retention_gate_intermediate_size"].dump(), I);
        Gate& g = gates_[l];
        g.I = static_cast<int>(I);
        g.w1 = weights_.require(p + "linear1.weight", {I, step.hidden_size}).data;
        g.b1 = weights_.require(p + "linear1.bias", {I}).data;
        g.w2 = weights_.require(p + "linear2.weight", {step.num_kv_heads, I}).data;
        g.b = weights_.require(p + "bias", {step.num_kv_heads}).data;
      }
    }
    return gates_.at(step.layer);
  }

  void make_random(const LayerStep& step) {
    weights_.path = learned_.random_name();
    SeededDraws draw(learned_.random_seed);
    for (int l = 0; l < step.num_layers; ++l) {
      const std::string p = layer_prefix(l);
      std::vector<float> w1(static_cast<size_t>(hidden_) * step.hidden_size),
          w2(static_cast<size_t>(step.num_kv_heads) * hidden_);
      for (auto& v : w1) v = draw.normal(0.02f);  // the f32 0.02 of the original generator, widened
      for (auto& v : w2) v = draw.normal(0.02f);
      weights_.add(p + "linear1.weight", {hidden_, step.hidden_size}, std::move(w1));
      weights_.add(p + "linear1.bias", {hidden_}, std::vector<float>(hidden_, 0.f));
      weights_.add(p + "linear2.weight", {step.num_kv_heads, hidden_}, std::move(w2));
      weights_.add(p + "bias", {step.num_kv_heads}, std::vector<float>(step.num_kv_heads, bias_));
    }
  }

  LearnedWeightsChoice learned_;
  int64_t hidden_ = 512;
  float bias_ = 8.0f;
  GateWeights weights_;
  std::vector<Gate> gates_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(trimkv) {
  return learned_policy_entry<TrimKVPolicy>("trimkv", GateSource{"trimkv", "gates", "trimkv_weights.pth", true},
                                            with_checkpoint_config)
      .with_tests({.min_budget = 1, .params = "random_gates=1", .needs_weights = true});
}

}  // namespace kvb
