// `fastkvzip`: Fast KVzip — a small trained gate per layer reads the attention input of each token
// and predicts its KVzip importance per kv head; at the end of the prompt the lowest-scored
// (layer, kv head, token) entries of the whole cache are evicted, one global cut over all layers.
// Sources: Kim, Han, Yun, "Fast KVzip" (arXiv 2601.17668); kvpress 0.5.5 FastKVzipPress (PyPI
// kvpress==0.5.5, kvpress/presses/fastkvzip_press.py: FastKVzipGate.forward, _score_fast,
// compress_post); docs/policies.md, `fastkvzip`. What kvpress computes, in our words, for layer l,
// kv head h, token t with attention input x_t [H] (after the input RMSNorm), O the gate width, G
// the query groups, S the sink keys:
//   q[g] = rmsnorm(Wq x_t + bq)[h, g] ∈ R^O (RMSNorm over O, eps 1e-6, weight q_norm), k =
//   rmsnorm(Wk x_t)[h] ∈ R^O (k_norm); logit[g] = ⟨k, q[g]⟩/√O + b[h, g]; base[s, g] = ⟨k_base[h, s],
//   q[g]⟩/√O; score = mean_g 1 / (1 + Σ_s exp(base[s, g] − logit[g])) ∈ (0, 1) — token-local.
//   The first `sinks` positions and the last w of the prompt score 1 (w = max(1, ⌊P·window_ratio⌋)
//   for a prompt of P < 32000 tokens, else `window`); the n = ⌊N·(1 − ratio)⌋ lowest of all N
//   scores of the cache (every layer and kv head; layerwise=true: ⌊N_l·(1 − ratio)⌋ of each layer's
//   N_l) are evicted. kvpress masks them (masked_key_indices); kvbench evicts them.
// Weights: `gates=` a .safetensors or .pt file (or a directory holding exactly one, or a Hub id
// with the file's path) whose tensors are named module.{l}.<name> for each layer l: q_proj.weight
// [Hkv·G·O, H], q_proj.bias [Hkv·G·O], k_proj.weight [Hkv·O, H], q_norm.weight [O], k_norm.weight
// [O], k_base [Hkv, 1, S, O], b [Hkv, 1, G] — the published Jang-Hyun/Fast-KVzip
// <model>/q<G>_dim16_sink16.pt holds the same per-layer state dicts as a list under "module",
// which the restricted unpickler does not read (docs/policies.md, `fastkvzip`: convert it first).
// `random_gates=SEED`: RANDOM gates (O = S = 16, G = Hq/Hkv; tests only; docs/policies.md gives
// their law, which tools/gen_kvpress_smollm2_goldens.py seeded_gates redraws for the golden). Throws kvb::Error naming
// the file and tensor when the gates do not fit the model (another layer count, hidden size or
// kv head count).
// Choices: the gate is computed in double and rounded to f32 (kvpress: the model's dtype). Equal
// scores at the cut: the earlier (layer, head, token) is kept (kvpress's topk leaves ties open).
// Prompt only, as kvpress: decode steps score their tokens (for a later prompt's cut) but evict
// nothing.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "engine/policies/catalog.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/params.h"
#include "engine/policies/policies.h"
#include "engine/policies/registration.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// kvpress's context length from which the protected window is `window` tokens, not a ratio.
constexpr int64_t kLongContext = 32000;

class FastKVzipPolicy : public ParamPolicy {
 public:
  FastKVzipPolicy(PolicyParams p, GateWeights w) : ParamPolicy("fastkvzip", std::move(p)), weights_(std::move(w)) {
    const LearnedWeightsChoice learned = learned_weights_choice("fastkvzip", params_);
    path_ = learned.path;
    random_seed_ = learned.random_seed;
    ratio_ = params_.get_double_in("ratio", 0.0, 1.0);
    layerwise_ = params_.get_bool("layerwise");
    sinks_ = params_.get_int_in("sinks", 0, int64_t{1} << 30);
    window_ = params_.get_int_in("window", 1, int64_t{1} << 30);
    window_ratio_ = params_.get_double_in("window_ratio", 0.0, 1.0);
    if (parse_compress(params_)) params_.fail_param("compress", "must be prompt_end: Fast KVzip cuts a whole prompt");
    learned.require();
  }
  PolicyNeeds needs() const override { return {.layer_input = true}; }
  void on_sequence_end(SeqId seq) override {
    std::lock_guard<std::mutex> lock(mu_);
    scores_.erase(seq);
  }

  /// Scores this step's new tokens with layer `step.layer`'s gate (kept by absolute position).
  void on_layer_step(LayerStep& step) override {
    if (!step.layer_input) fail("policy 'fastkvzip': LayerStep::layer_input is not set");
    const Gate& g = gate(step);
    const int Hk = step.num_kv_heads, H = step.hidden_size, O = g.out, G = g.groups, S = g.sinks;
    const int64_t first = step.seq_len - step.n_new;
    std::lock_guard<std::mutex> lock(mu_);
    auto& layers = scores_[step.seq];
    if (layers.empty()) layers.resize(static_cast<size_t>(step.num_layers) * Hk);
    std::vector<double> q(static_cast<size_t>(Hk) * G * O), k(static_cast<size_t>(Hk) * O);
    for (int t = 0; t < step.n_new; ++t) {
      const float* x = step.layer_input + static_cast<size_t>(t) * H;
      project(g.wq.data(), g.bq.data(), x, H, q);
      project(g.wk.data(), nullptr, x, H, k);
      for (size_t r = 0; r < q.size(); r += O) rms_norm(q.data() + r, g.q_norm.data(), O);
      for (size_t r = 0; r < k.size(); r += O) rms_norm(k.data() + r, g.k_norm.data(), O);
      for (int h = 0; h < Hk; ++h) {
        const double* kh = k.data() + static_cast<size_t>(h) * O;
        double mean = 0.0;
        for (int gi = 0; gi < G; ++gi) {
          const double* qg = q.data() + (static_cast<size_t>(h) * G + gi) * O;
          const double logit = dot(kh, qg, O) / std::sqrt(double(O)) + g.b[static_cast<size_t>(h) * G + gi];
          double sum = 0.0;
          for (int s = 0; s < S; ++s) {
            const float* kb = g.k_base.data() + (static_cast<size_t>(h) * S + s) * O;
            double base = 0.0;
            for (int d = 0; d < O; ++d) base += kb[d] * qg[d];
            sum += std::exp(base / std::sqrt(double(O)) - logit);
          }
          mean += 1.0 / (1.0 + sum);
        }
        std::vector<float>& v = layers[static_cast<size_t>(step.layer) * Hk + h];
        if (static_cast<int64_t>(v.size()) < first + step.n_new) v.resize(static_cast<size_t>(first + step.n_new));
        v[static_cast<size_t>(first + t)] = static_cast<float>(mean / G);
      }
    }
  }

  /// After the prompt's last layer: one cut over every (layer, kv head, token) of the cache.
  void on_step_end(StepEnd& se) override {
    if (!se.prefill_last || ratio_ >= 1.0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = scores_.find(se.seq);
    if (it == scores_.end()) return;
    const std::vector<std::vector<float>>& by_pos = it->second;
    const int nl = se.num_layers, nh = se.num_kv_heads;
    const int64_t P = se.seq_len;
    const int64_t w =
        P < kLongContext ? std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(P) * window_ratio_)) : window_;
    const double pruned_fraction = 1.0 - ratio_;  // kvpress compression_ratio
    // The scores of every cached token, [layer][head] in cache order, protected ones at 1.
    std::vector<std::vector<float>> s(static_cast<size_t>(nl) * nh);
    for (int l = 0; l < nl; ++l)
      for (int h = 0; h < nh; ++h) {
        const std::vector<float>& src = by_pos.at(static_cast<size_t>(l) * nh + h);
        auto& dst = s[static_cast<size_t>(l) * nh + h];
        const int32_t L = se.cache->length(se.seq, l, h);
        dst.resize(static_cast<size_t>(L));
        for (int32_t i = 0; i < L; ++i) {
          const int64_t pos = se.cache->position(se.seq, l, h, i);
          dst[i] = pos < sinks_ || pos >= P - w ? 1.0f : src.at(static_cast<size_t>(pos));
        }
      }
    // Evicted: the n lowest of each group (all layers, or one layer), earlier entries kept on ties.
    const int groups = layerwise_ ? nl : 1, per = layerwise_ ? 1 : nl;
    for (int gi = 0; gi < groups; ++gi) {
      std::vector<float> flat;
      for (int l = gi * per; l < (gi + 1) * per; ++l)
        for (int h = 0; h < nh; ++h) {
          const auto& v = s[static_cast<size_t>(l) * nh + h];
          flat.insert(flat.end(), v.begin(), v.end());
        }
      const auto N = static_cast<int64_t>(flat.size());
      const auto n_pruned = static_cast<int64_t>(static_cast<double>(N) * pruned_fraction);
      std::vector<bool> kept(flat.size(), false);
      for (int32_t i : scoring::top_k_indices(flat, N - n_pruned)) kept[static_cast<size_t>(i)] = true;
      size_t at = 0;
      for (int l = gi * per; l < (gi + 1) * per; ++l)
        for (int h = 0; h < nh; ++h) {
          const auto L = static_cast<int32_t>(s[static_cast<size_t>(l) * nh + h].size());
          std::vector<int32_t> keep;
          for (int32_t i = 0; i < L; ++i)
            if (kept[at + static_cast<size_t>(i)]) keep.push_back(i);
          at += static_cast<size_t>(L);
          if (static_cast<int32_t>(keep.size()) < L) se.keep(l, h, std::move(keep));
        }
    }
  }

 private:
  /// One layer's gate (see the file comment), f32.
  struct Gate {
    int out = 16, groups = 1, sinks = 16;
    std::vector<float> wq, bq, wk, q_norm, k_norm, k_base, b;
  };

  static double dot(const double* a, const double* b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
  }
  /// out[r] = Σ_c w[r, c] x[c] (+ bias[r]), w [out.size(), H].
  static void project(const float* w, const float* bias, const float* x, int H, std::vector<double>& out) {
    for (size_t r = 0; r < out.size(); ++r) {
      const float* row = w + r * static_cast<size_t>(H);
      double acc = bias ? bias[r] : 0.0;
      for (int c = 0; c < H; ++c) acc += static_cast<double>(row[c]) * x[c];
      out[r] = acc;
    }
  }
  /// Qwen3RMSNorm over n values: v · rsqrt(mean(v²) + 1e-6) · weight.
  static void rms_norm(double* v, const float* weight, int n) {
    double ms = 0.0;
    for (int i = 0; i < n; ++i) ms += v[i] * v[i];
    const double inv = 1.0 / std::sqrt(ms / n + 1e-6);
    for (int i = 0; i < n; ++i) v[i] = v[i] * inv * weight[i];
  }

  /// The gate of step.layer, read from the checkpoint or drawn on first use; throws kvb::Error
  /// naming the file and tensor when the checkpoint does not fit this model.
  const Gate& gate(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (gates_.empty()) {
      if (!path_.empty()) weights_.require_layers("module.", ".", step.num_layers, "gates", "gates");
      gates_.resize(static_cast<size_t>(step.num_layers));
    }
    Gate& g = gates_.at(static_cast<size_t>(step.layer));
    if (!g.b.empty()) return g;
    const int64_t H = step.hidden_size, Hk = step.num_kv_heads;
    if (path_.empty() && weights_.tensors.empty())  // random_gates: drawn once, then read as a file's
      weights_ = fastkvzip_random_gates(H, step.num_q_heads, Hk, step.num_layers, random_seed_);
    const std::string pfx = "module." + std::to_string(step.layer) + ".";
    auto dim = [&](const std::string& name, size_t i) -> int64_t {
      const GateTensor* t = weights_.find(pfx + name);
      return t && t->shape.size() > i ? t->shape[i] : 1;  // absent or malformed: require() names it
    };
    const int64_t O = dim("q_norm.weight", 0),
                  G = std::max<int64_t>(1, dim("q_proj.weight", 0) / std::max<int64_t>(1, Hk * O)), S = dim("k_base", 2);
    g.out = static_cast<int>(O);
    g.groups = static_cast<int>(G);
    g.sinks = static_cast<int>(S);
    g.q_norm = weights_.require(pfx + "q_norm.weight", {O}).data;
    g.k_norm = weights_.require(pfx + "k_norm.weight", {O}).data;
    g.wq = weights_.require(pfx + "q_proj.weight", {Hk * G * O, H}).data;
    g.bq = weights_.require(pfx + "q_proj.bias", {Hk * G * O}).data;
    g.wk = weights_.require(pfx + "k_proj.weight", {Hk * O, H}).data;
    g.k_base = weights_.require(pfx + "k_base", {Hk, 1, S, O}).data;
    g.b = weights_.require(pfx + "b", {Hk, 1, G}).data;
    return g;
  }

  std::string path_;
  int64_t random_seed_ = -1, sinks_ = 4, window_ = 4096;
  double ratio_ = 1.0, window_ratio_ = 0.02;
  bool layerwise_ = false;
  GateWeights weights_;
  std::vector<Gate> gates_;
  /// [seq] → [layer · Hkv + head] → score by absolute position.
  std::map<SeqId, std::vector<std::vector<float>>> scores_;
  std::mutex mu_;
};

}  // namespace

GateWeights fastkvzip_random_gates(int64_t H, int64_t Hq, int64_t Hkv, int layers, int64_t seed) {
  const int64_t G = std::max<int64_t>(1, Hq / Hkv), O = 16, S = 16;
  GateWeights w;
  for (int l = 0; l < layers; ++l) {
    SeededDraws d(seed * 1000003 + l);
    auto draw = [&](const std::string& name, std::vector<int64_t> shape, double mean, double stdv) {
      int64_t n = 1;
      for (int64_t x : shape) n *= x;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = static_cast<float>(mean + d.normal(stdv));
      w.add("module." + std::to_string(l) + "." + name, std::move(shape), std::move(v));
    };
    const double proj = 1.0 / std::sqrt(static_cast<double>(H));
    draw("q_proj.weight", {Hkv * G * O, H}, 0.0, proj);
    draw("q_proj.bias", {Hkv * G * O}, 0.0, 0.1);
    draw("k_proj.weight", {Hkv * O, H}, 0.0, proj);
    draw("q_norm.weight", {O}, 1.0, 0.1);
    draw("k_norm.weight", {O}, 1.0, 0.1);
    draw("k_base", {Hkv, 1, S, O}, 0.0, 1.0);
    draw("b", {Hkv, 1, G}, 0.0, 1.0);
  }
  w.path = "random_gates=" + std::to_string(seed);
  return w;
}

KVB_POLICY(fastkvzip) {
  return learned_policy_entry<FastKVzipPolicy>("fastkvzip", GateSource{"fastkvzip", "gates", "", /*config=*/false})
      .with_tests({.min_budget = 0, .params = "ratio=0.5,random_gates=1", .needs_weights = true});
}

}  // namespace kvb
