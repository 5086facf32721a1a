// `wgkv`: WG-KV — learned write (admission) gate + a local ring of recent tokens.
// Sources: "KV Admission: Learning What to Write" (arXiv 2512.17452): §3.2 (gate), §3.3/§4.2
// (admission g > τ, τ = 0.1), §4.1–§4.3 (dual cache: 256-token local window + per-head global
// cache, lazy promotion), App. K.1 (optional SnapKV eviction of the global cache);
// docs/policies.md, `wgkv` and Gate files (checkpoint tensors, ambiguities).
//   gate per (layer, kv_head), on the token's own keys:
//     x = [RMSNorm_pre(k before RoPE) ; RMSNorm_post(k after RoPE)] (eps 1e-6, per-layer weights
//     [D] shared by the heads), g = σ(W2_h · GELU_erf(W1_h · x + b1_h) + b2_h),
//     W1 [Hkv·I, 2D] (rows h·I … (h+1)·I − 1 are head h), b1 [Hkv·I], W2 [Hkv, I], b2 [Hkv];
//   a token is always visible while it is among the `window` = 256 newest; when it leaves the
//   window it stays (is "promoted" to the global cache) iff g > τ (the code's strict >), else it
//   is dropped for good. No sinks (the gate must learn to admit BOS).
// In kvbench's ragged cache the local ring and the global list of a head are one token list;
// "promotion" is simply not evicting. After each step a head keeps the W − 1 newest tokens plus
// the admitted ones, so decode query t (appended before it attends) sees exactly
// {t−W+1..t} ∪ {j ≤ t−W : g_j > τ}, the reference's visibility at every decode step.
// Deviation (needs engine support): the prompt is attended densely; the reference's
// vertical-slash prefill hides non-admitted tokens older than the band from prompt queries.
// With compress=prompt_end (default) the window/gate rule is applied once at the end of the
// prompt (gates are recorded for every chunk), so the cache after the prompt, and everything
// after it, does not depend on the prefill chunk; compress=chunked applies it after every chunk.
// Optional App. K.1 eviction: with a budget B > 0 the global tokens of all heads and layers are
// capped at layers·Hkv·(B − window) (B = average tokens per head including the local window, as
// the README's 4096 → 36·8·3840); when exceeded, every head evicts int(evict_ratio · its global
// length) global tokens with the lowest SnapKV score (last obs_window queries, softmax over global
// keys only, max over the group, mean over queries, max-pool kernel 5). The trigger is evaluated
// at layer 0 of a step over the cache as the previous step left it (the reference checks after
// the last layer of the step before: same decision one step later).
// Weights: `gates=` names a released WG-KV/checkpoints {model}-{λ}.pt as it is — a Hub id with
// the file (WG-KV/checkpoints/qwen3-4b-instruct-2507-0.16.pt), or a local .pt/.pth/.safetensors
// file or directory (GateWeights, docs/policies.md#gate-files); tensor names
// model.layers.{l}.self_attn.g_predictors.{pre_key_norm.weight, post_key_norm.weight,
// conv1.weight [Hkv·I, 2D, 1], conv1.bias, conv2.weight [Hkv, I, 1], conv2.bias}. The checkpoint
// stores no config (docs/policies.md, Gate files): the width I (g_expand) comes from the tensor shapes, W and
// τ from the defaults below; the layers the tensors cover must be the model's. `random_gates=SEED`
// makes RANDOM gates of the right shapes (norms 1, W ~ U(±1/sqrt(fan_in)), biases 0) for tests only.
#include <algorithm>
#include <cmath>
#include <map>
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

class WGKVPolicy : public ParamPolicy {
 public:
  WGKVPolicy(PolicyParams p, GateWeights weights) : ParamPolicy("wgkv", std::move(p)), weights_(std::move(weights)) {
    learned_ = learned_weights_choice(params_);
    params_.bind({{"gate_expand", &expand_},
                  {"window", &window_},
                  {"tau", &tau_},
                  {"evict_ratio", &evict_ratio_},
                  {"obs_window", &obs_window_},
                  {"kernel", &kernel_}});
    chunked_ = parse_compress(params_);
    budget_ = params_.budget();
    params_.check_min("window", window_, 1);
    if (evict_ratio_ <= 0 || evict_ratio_ > 1) params_.fail_param("evict_ratio", "must be in (0, 1]");
    params_.check_min("obs_window", obs_window_, 1);
    if (budget_ > 0 && budget_ <= window_)
      fail("policy 'wgkv': budget {} must exceed window = {} (it counts the local window)", budget_, window_);
    learned_.require();
  }
  PolicyNeeds needs() const override {
    return {.window_queries = budget_ > 0 ? obs_window_ : 0, .keys_pre_rope = true, .num_scalars = 1, .host_kv = true};
  }
  void on_sequence_end(SeqId seq) override { evicting_.erase(seq); }

  void on_layer_step(LayerStep& step) override {
    if (!step.keys_pre_rope) fail("policy 'wgkv': LayerStep::keys_pre_rope is not set");
    const Gate& g = gate(step);
    const int D = step.head_dim, Hk = step.num_kv_heads, n = step.n_new;
    // x[t, h] = [RMSNorm_pre(k before RoPE) ; RMSNorm_post(k after RoPE)], rows of tokens that
    // are still cached (a prefill chunk longer than the cache never happens: idx ≥ 0 always
    // holds right after the append, but stay safe).
    std::vector<float> x(static_cast<size_t>(n) * Hk * 2 * D, 0.f), z(static_cast<size_t>(n) * Hk);
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      for (int t = 0; t < n; ++t) {
        const int32_t idx = L - n + t;
        if (idx < 0) continue;
        float* xr = &x[(static_cast<size_t>(t) * Hk + h) * 2 * D];
        rms(step.keys_pre_rope + (static_cast<size_t>(t) * Hk + h) * D, g.pre.data(), D, xr);
        rms(step.cache->key(step.seq, step.layer, h, idx), g.post.data(), D, xr + D);
      }
    }
    const HeadMlp mlp{
        Hk,          2 * D,       g.I,        /*shared_hidden=*/false, HeadMlp::Act::kGeluErf, g.w1.data(),
        g.b1.data(), g.w2.data(), g.b2.data()};
    scoring::head_mlp(step, mlp, x.data(), n, -1, z.data());
    for (int h = 0; h < Hk; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      for (int t = 0; t < n; ++t) {
        const int32_t idx = L - n + t;
        if (idx < 0) continue;
        const float out = z[static_cast<size_t>(t) * Hk + h];
        step.cache->scalars(step.seq, step.layer, h, idx)[0] = 1.0f / (1.0f + std::exp(-out));
      }
    }
    // Prompt chunks before the end only record gates (compress=prompt_end): the prompt is
    // prefilled with the full cache and the window/gate rule is applied once at its end.
    if (!compress_point(step.prefill, step.prefill_last, chunked_)) return;
    // Over-budget check (App. K.1) at the first layer, over the cache as the last step left it.
    // With compress=prompt_end no prompt step evicts globally: the first check is at the first
    // decode step, over the cache as the end of the prompt left it (whatever the prefill chunk).
    if (budget_ > 0 && step.layer == 0 && step.prefill && !chunked_) {
      evicting_[step.seq] = false;
    } else if (budget_ > 0 && step.layer == 0) {
      int64_t global = 0;
      for (int l = 0; l < step.num_layers; ++l)
        for (int h = 0; h < step.num_kv_heads; ++h) global += global_count(step, l, h);
      evicting_[step.seq] = global > static_cast<int64_t>(step.num_layers) * step.num_kv_heads * (budget_ - window_);
    }
    const bool evict = budget_ > 0 && evicting_[step.seq];
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      std::vector<int32_t> keep;
      keep.reserve(L);
      for (int32_t i = 0; i < L; ++i)
        if (in_window(step, step.cache->position(step.seq, step.layer, h, i)) ||
            step.cache->scalars(step.seq, step.layer, h, i)[0] > tau_)
          keep.push_back(i);
      if (evict) keep = evict_global(step, h, keep);
      if (static_cast<int32_t>(keep.size()) != L) step.keep(h, std::move(keep));
    }
  }

 private:
  struct Gate {
    int I = 0;
    std::vector<float> pre, post, w1, b1, w2, b2;
  };

  /// Whether `pos` stays in the local window after this step: the newest W − 1 tokens, so that the
  /// next query (appended before it attends) sees exactly the W newest {t−W+1 .. t} plus the
  /// admitted tokens, as the reference, which promotes or drops token t−W before query t attends.
  bool in_window(const LayerStep& step, int64_t pos) const { return pos > step.seq_len - window_; }

  int64_t global_count(const LayerStep& step, int l, int h) const {
    int64_t n = 0;
    const int32_t L = step.cache->length(step.seq, l, h);
    for (int32_t i = 0; i < L; ++i)
      if (!in_window(step, step.cache->position(step.seq, l, h, i))) ++n;
    return n;
  }

  /// App. K.1: drop int(ratio · n_global) of the kept global tokens with the lowest score.
  std::vector<int32_t> evict_global(LayerStep& step, int h, const std::vector<int32_t>& keep) {
    std::vector<int32_t> glob;
    for (int32_t i : keep)
      if (!in_window(step, step.cache->position(step.seq, step.layer, h, i))) glob.push_back(i);
    const int64_t n_evict = static_cast<int64_t>(evict_ratio_ * static_cast<double>(glob.size()));
    if (n_evict <= 0) return keep;
    int w = 0;
    std::vector<float> lg = scoring::window_logits(step, h, &w);
    const int G = step.num_q_heads / step.num_kv_heads;
    const int32_t L = step.cache->length(step.seq, step.layer, h);
    std::vector<float> s(glob.size(), 0.f), row(glob.size()), best(glob.size());
    for (int r = 0; r < w; ++r) {
      std::fill(best.begin(), best.end(), 0.f);
      for (int g = 0; g < G; ++g) {
        for (size_t j = 0; j < glob.size(); ++j) row[j] = lg[(static_cast<size_t>(g) * w + r) * L + glob[j]];
        scoring::softmax_inplace(row);
        for (size_t j = 0; j < glob.size(); ++j) best[j] = std::max(best[j], row[j]);
      }
      for (size_t j = 0; j < glob.size(); ++j) s[j] += best[j] / static_cast<float>(w);
    }
    s = scoring::pool1d(s, kernel_, scoring::Pool::kMax);
    std::vector<int32_t> survive = scoring::top_k_indices(s, static_cast<int64_t>(glob.size()) - n_evict);
    std::vector<char> drop(L, 0);
    for (int32_t g : glob) drop[g] = 1;
    for (int32_t j : survive) drop[glob[j]] = 0;
    std::vector<int32_t> out;
    for (int32_t i : keep)
      if (!drop[i]) out.push_back(i);
    return out;
  }

  static void rms(const float* v, const float* w, int D, float* out) {
    double ss = 0;
    for (int d = 0; d < D; ++d) ss += static_cast<double>(v[d]) * v[d];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / D) + 1e-6f);
    for (int d = 0; d < D; ++d) out[d] = v[d] * inv * w[d];
  }

  const Gate& gate(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (gates_.empty()) {
      const int D = step.head_dim, Hk = step.num_kv_heads;
      auto pfx = [](int l) { return "model.layers." + std::to_string(l) + ".self_attn.g_predictors."; };
      if (learned_.random_seed >= 0 && !weights_.find(pfx(0) + "conv1.weight")) {
        weights_.path = learned_.random_name();
        const int64_t I = std::max<int64_t>(1, static_cast<int64_t>(expand_ * D));
        SeededDraws draw(learned_.random_seed);
        for (int l = 0; l < step.num_layers; ++l) {
          std::vector<float> w1(Hk * I * 2 * D), w2(Hk * I);
          for (auto& v : w1) v = draw.uniform(1.0 / std::sqrt(2.0 * D));
          for (auto& v : w2) v = draw.uniform(1.0 / std::sqrt(static_cast<double>(I)));
          weights_.add(pfx(l) + "pre_key_norm.weight", {D}, std::vector<float>(D, 1.f));
          weights_.add(pfx(l) + "post_key_norm.weight", {D}, std::vector<float>(D, 1.f));
          weights_.add(pfx(l) + "conv1.weight", {Hk * I, 2 * D, 1}, std::move(w1));
          weights_.add(pfx(l) + "conv1.bias", {Hk * I}, std::vector<float>(Hk * I, 0.f));
          weights_.add(pfx(l) + "conv2.weight", {Hk, I, 1}, std::move(w2));
          weights_.add(pfx(l) + "conv2.bias", {Hk}, std::vector<float>(Hk, 0.f));
        }
      }
      if (!learned_.path.empty()) weights_.check_model(step.num_layers, Hk, step.hidden_size, D);
      gates_.resize(step.num_layers);
      for (int l = 0; l < step.num_layers; ++l) {
        const std::string p = pfx(l);
        const GateTensor& c1 = weights_.layer_tensor(p + "conv1.weight", l, step.num_layers, "gates");
        if (c1.shape.empty() || c1.shape[0] % Hk != 0)
          fail_at(weights_.path, "tensor " + p + "conv1.weight", "first dimension is not a multiple of {} kv heads", Hk);
        const int64_t I = c1.shape[0] / Hk;
        Gate& g = gates_[l];
        g.I = static_cast<int>(I);
        g.pre = weights_.require(p + "pre_key_norm.weight", {D}).data;
        g.post = weights_.require(p + "post_key_norm.weight", {D}).data;
        g.w1 = weights_.require(p + "conv1.weight", {Hk * I, 2 * D}).data;
        g.b1 = weights_.require(p + "conv1.bias", {Hk * I}).data;
        g.w2 = weights_.require(p + "conv2.weight", {Hk, I}).data;
        g.b2 = weights_.require(p + "conv2.bias", {Hk}).data;
      }
    }
    return gates_.at(step.layer);
  }

  LearnedWeightsChoice learned_;
  int64_t window_ = 256, budget_ = 0;
  double expand_ = 1.5, evict_ratio_ = 0.1;
  float tau_ = 0.1f;
  bool chunked_ = false;
  int obs_window_ = 256, kernel_ = 5;
  GateWeights weights_;
  std::vector<Gate> gates_;
  std::map<SeqId, bool> evicting_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(wgkv) {
  return learned_policy_entry<WGKVPolicy>("wgkv", GateSource{"wgkv", "gates", "", false})
      .with_tests({.min_budget = 0, .params = "random_gates=1", .needs_weights = true});
}

}  // namespace kvb
