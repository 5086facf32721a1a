// `locret`: LocRet — trained retaining heads score each token once, when it is computed; the prompt
// is prefilled in chunks under a bounded cache that keeps the top-scoring tokens plus stabilizers.
// Sources: Huang et al., "Locret: Enhancing Eviction in Long-Context LLM Inference with Trained
// Retaining Heads on Consumer-Grade Devices" (arXiv 2410.01805, §3.2 retaining heads, §3.3 chunked
// prefill with stabilizers); reference code github.com/huangyuxiang03/Locret at commit bbd27bc
// (locret/inference/infer.py `generate`, locret/models/{llama,phi3}/modeling_*.py attention
// `fc1`/`fc2`, locret/inference/utils.py head loading); docs/policies.md#locret.
//   retaining head of layer l (no biases; φ = the base model's hidden_act, SiLU for Llama/Phi-3):
//     s[t, η] = (W2 · φ(W1 · [q_t; k_t; v_t]))[η],  W1 [I, (Hq + 2·Hkv)·D], W2 [Hkv, I], I = 1024,
//   over the concatenated query, key and value projections of token t BEFORE RoPE (Phi-3's
//   qkv_proj output; Llama's q/k/v_proj); one score per kv head, computed when the token is.
//   protocol (infer.py generate): with P prompt tokens and tail T = local_len, the first P − T
//   tokens are prefilled in chunks [i, min(i + chunk_size, P − T)), i = 0, chunk_size, …; after
//   each chunk every (layer, kv head) keeps its min(budget, L) highest-scoring cached tokens (in
//   temporal order), where the last `stabilizers` cached tokens score +∞ unless the chunk is the
//   last one; the last T prompt tokens are then prefilled without eviction, and decoding never
//   evicts (the cache grows from budget + T).
// Defaults are generate()'s: budget 6000 (given with --budget), chunk_size 3072, stabilizers
// 2500, local_len 100 — TRIM-KV's LongBench setting (docs/policies.md).
// `compress` is declared for uniformity with the other policies; only `chunked` is LocRet.
// Engine independence: the chunking is the policy's (PolicyNeeds::prefill_chunk/prefill_tail):
// the engine ends prefill steps at these boundaries whatever --prefill-chunk is, and the policy
// evicts only there, so the kept tokens do not depend on --prefill-chunk.
// Deliberate difference: the reference stores keys before RoPE and re-rotates the compressed
// cache with positions 0 … L−1 at every forward (a StreamingLLM-style position shift); kvbench
// keeps each token's original position, as for every other policy (docs/policies.md#locret).
// Weights: `heads=` names the released checkpoint — a Hub id (hyx21/Locret-phi-3-mini-128K: a
// full model saved with save_pretrained, read through model.safetensors.index.json, only the
// shards holding the heads), a directory, or a .bin/.pth/.pt/.safetensors file (the README's
// retaining-head state dict); tensor names model.layers.{l}.self_attn.fc1.weight and
// model.layers.{l}.self_attn.fc2.weight. Without weights the policy refuses to run;
// `random_heads=SEED` generates RANDOM heads (W ~ N(0, 0.02²)) for tests only — not LocRet.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "engine/policies/gate_weights.h"
#include "engine/policies/catalog.h"
#include "engine/policies/params.h"
#include "engine/policies/registration.h"
#include "engine/policies/scoring.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

std::string layer_prefix(int l) { return "model.layers." + std::to_string(l) + ".self_attn."; }

/// Retaining-head tensors of a checkpoint: model.layers.{l}.self_attn.fc1/fc2.weight.
bool is_head_tensor(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.find(".self_attn.fc") != std::string::npos;
}

class LocretPolicy : public ParamPolicy {
 public:
  LocretPolicy(PolicyParams p, GateWeights weights)
      : ParamPolicy("locret", std::move(p)), weights_(std::move(weights)) {
    budget_ = params_.budget();
    params_.bind({{"chunk_size", &chunk_}, {"stabilizers", &stab_}, {"local_len", &local_}});
    learned_ = learned_weights_choice(params_);
    params_.bind({{"head_hidden", &hidden_}});
    if (budget_ <= 0) fail("policy 'locret': needs a budget (--budget; the paper's setting is 6000)");
    if (chunk_ < 1 || chunk_ > (int64_t{1} << 30)) params_.fail_param("chunk_size", "must be in [1, 2^30]");
    if (stab_ < 0 || stab_ > (int64_t{1} << 30)) params_.fail_param("stabilizers", "must be in [0, 2^30]");
    if (params_.get_choice("compress", {"chunked", "prompt_end"}) != "chunked")
      params_.fail_param("compress",
                         "LocRet compresses after each of its prompt chunks (chunk_size); prompt_end is not "
                         "its protocol");
    if (local_ < 0 || local_ > (int64_t{1} << 30)) params_.fail_param("local_len", "must be in [0, 2^30]");
    if (hidden_ < 1 || hidden_ > 65536) params_.fail_param("head_hidden", "must be in [1, 65536]");
    learned_.require();
  }

  // host_kv: the values of the new tokens are read from the cache.
  PolicyNeeds needs() const override {
    return {.keys_pre_rope = true,
            .queries_pre_rope = true,
            .num_scalars = 1,
            .host_kv = true,
            .prefill_chunk = static_cast<int>(chunk_),
            .prefill_tail = static_cast<int>(local_)};
  }

  void on_layer_step(LayerStep& step) override {
    if (!step.prefill) return;  // decoding never evicts (infer.py: plain forwards after the prefill)
    if (step.prompt_end <= 0) fail("policy 'locret': the engine gave no prompt end for a prefill step");
    (void)head(step);  // checks the heads against the model at the first step, even if nothing is evicted
    const int64_t end = step.seq_len, start = end - step.n_new;
    const int64_t tail_start = step.prompt_end - local_;
    if (end > tail_start) {  // the tail (and a prompt no longer than local_len) is never evicted
      if (start < tail_start && tail_start > 0) boundary_error(start, end, tail_start);
      return;
    }
    const int64_t next = (start / chunk_ + 1) * chunk_;  // first chunk boundary after `start`
    if (next < end) boundary_error(start, end, next);
    score_new_tokens(step);
    if (end % chunk_ != 0 && end != tail_start) return;  // inside a chunk
    const bool stabilize = end < tail_start;             // not the last chunk
    for (int h = 0; h < step.num_kv_heads; ++h) {
      const int32_t L = step.cache->length(step.seq, step.layer, h);
      if (L > budget_)
        step.keep(h, keep_set(step, h, L, stabilize ? static_cast<int32_t>(std::min<int64_t>(stab_, L)) : 0));
    }
  }

  /// The `budget` tokens head h keeps out of its L: the last n_stab (stabilizers, +∞ in the
  /// reference) first, then by score; ties to the earlier token. When the stabilizers alone exceed
  /// the budget the reference's top-k among equal +∞ values is unspecified; here their own scores
  /// rank them. Returns increasing indices.
  std::vector<int32_t> keep_set(const LayerStep& step, int h, int32_t L, int32_t n_stab) const {
    std::vector<float> s(L);
    for (int32_t i = 0; i < L; ++i) s[i] = step.cache->scalars(step.seq, step.layer, h, i)[0];
    std::vector<int32_t> order(L);
    for (int32_t i = 0; i < L; ++i) order[i] = i;
    const int32_t first_stab = L - n_stab;
    const auto k = static_cast<std::ptrdiff_t>(budget_);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const bool sa = a >= first_stab, sb = b >= first_stab;
      if (sa != sb) return sa;
      if (s[a] != s[b]) return s[a] > s[b];
      return a < b;
    });
    order.resize(budget_);
    std::sort(order.begin(), order.end());
    return order;
  }

 private:
  struct Head {
    int I = 0;
    std::vector<float> w1, w2;
  };

  [[noreturn]] void boundary_error(int64_t start, int64_t end, int64_t boundary) const {
    fail(
        "policy 'locret': prefill step [{}, {}) crosses its chunk boundary {} (the caller must split prompts at "
        "PolicyNeeds::prefill_chunk/prefill_tail, as Engine does)",
        start, end, boundary);
  }

  /// s[t, η] of this step's new tokens into the cache scalars of layer step.layer.
  void score_new_tokens(LayerStep& step) {
    if (!step.queries_pre_rope || !step.keys_pre_rope)
      fail("policy 'locret': this backend does not provide queries and keys before RoPE (use --backend cpu)");
    const Head& g = head(step);
    const int Hq = step.num_q_heads, Hk = step.num_kv_heads, D = step.head_dim;
    const int in = (Hq + 2 * Hk) * D;
    std::vector<float> x(static_cast<size_t>(step.n_new) * in);
    for (int t = 0; t < step.n_new; ++t) {
      float* row = &x[static_cast<size_t>(t) * in];
      std::copy_n(step.queries_pre_rope + static_cast<size_t>(t) * Hq * D, Hq * D, row);
      std::copy_n(step.keys_pre_rope + static_cast<size_t>(t) * Hk * D, Hk * D, row + Hq * D);
      for (int h = 0; h < Hk; ++h) {
        const int32_t idx = step.cache->length(step.seq, step.layer, h) - step.n_new + t;
        std::copy_n(step.cache->value(step.seq, step.layer, h, idx), D, row + (Hq + Hk + h) * D);
      }
    }
    zeros_.assign(std::max<size_t>(g.I, Hk), 0.0f);  // the heads have no biases
    const HeadMlp mlp{
        Hk,          in,           g.I, /*shared_hidden=*/true, HeadMlp::Act::kSilu, g.w1.data(), zeros_.data(),
        g.w2.data(), zeros_.data()};
    std::vector<float> z(static_cast<size_t>(step.n_new) * Hk);
    scoring::head_mlp(step, mlp, x.data(), step.n_new, -1, z.data());
    for (int t = 0; t < step.n_new; ++t)
      for (int h = 0; h < Hk; ++h) {
        const int32_t idx = step.cache->length(step.seq, step.layer, h) - step.n_new + t;
        step.cache->scalars(step.seq, step.layer, h, idx)[0] = z[static_cast<size_t>(t) * Hk + h];
      }
  }

  const Head& head(const LayerStep& step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (heads_.empty()) {
      if (!weights_.find(layer_prefix(0) + "fc1.weight") && learned_.random_seed >= 0) make_random(step);
      if (!learned_.path.empty()) {
        if (const auto& c = weights_.config; c.contains("hidden_act") && c["hidden_act"] != "silu")
          fail_at(weights_.config_path, "hidden_act", "{} is not supported (the retaining heads use SiLU)",
                  c["hidden_act"].dump());
        weights_.check_model(step.num_layers, step.num_kv_heads, step.hidden_size, step.head_dim);
      }
      const int64_t in = static_cast<int64_t>(step.num_q_heads + 2 * step.num_kv_heads) * step.head_dim;
      heads_.resize(step.num_layers);
      for (int l = 0; l < step.num_layers; ++l) {
        const std::string p = layer_prefix(l);
        const GateTensor& w1 = weights_.layer_tensor(p + "fc1.weight", l, step.num_layers, "retaining heads");
        if (w1.shape.size() != 2 || w1.shape[0] < 1)
          fail_at(weights_.path, "tensor " + p + "fc1.weight", "expected 2 dimensions [I, (Hq + 2 Hkv) D]");
        const int64_t I = w1.shape[0];
        Head& g = heads_[l];
        g.I = static_cast<int>(I);
        g.w1 = weights_.require(p + "fc1.weight", {I, in}).data;
        g.w2 = weights_.require(p + "fc2.weight", {step.num_kv_heads, I}).data;
      }
    }
    return heads_.at(step.layer);
  }

  void make_random(const LayerStep& step) {
    weights_.path = learned_.random_name();
    SeededDraws draw(learned_.random_seed);
    const int64_t in = static_cast<int64_t>(step.num_q_heads + 2 * step.num_kv_heads) * step.head_dim;
    for (int l = 0; l < step.num_layers; ++l) {
      std::vector<float> w1(static_cast<size_t>(hidden_ * in)), w2(static_cast<size_t>(step.num_kv_heads * hidden_));
      for (auto& v : w1) v = draw.normal(0.02);
      for (auto& v : w2) v = draw.normal(0.02);
      weights_.add(layer_prefix(l) + "fc1.weight", {hidden_, in}, std::move(w1));
      weights_.add(layer_prefix(l) + "fc2.weight", {step.num_kv_heads, hidden_}, std::move(w2));
    }
  }

  int64_t budget_ = 0, chunk_ = 3072, stab_ = 2500, local_ = 100, hidden_ = 1024;
  LearnedWeightsChoice learned_;
  GateWeights weights_;
  std::vector<Head> heads_;
  std::vector<float> zeros_;
  std::mutex mu_;
};

}  // namespace

KVB_POLICY(locret) {
  return learned_policy_entry<LocretPolicy>(
             "locret", GateSource{"locret", "heads", "model.safetensors", true, is_head_tensor, /*model_shards=*/true})
      .with_tests({.min_budget = 1,
                   .params = "random_heads=1,chunk_size=16,stabilizers=8,local_len=4",
                   .needs_weights = true,
                   .decode_evicts = false});
}

}  // namespace kvb
