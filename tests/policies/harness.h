// Test helpers: a hand-built KVCache + LayerStep for one sequence, as the engine would fill them;
// the input error a policy spec is refused with; a checkpoint with one tensor cut out.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policies.h"
#include "engine/policies/policy.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb::test {

/// stories260K loaded once per test binary (tests/support/stories.h; check KVB_REQUIRE_STORIES first).
inline std::shared_ptr<Model> stories() { return stories_model(); }

/// One sequence in a cache with `layers` layers of `hkv` heads of dim `d`; queries are held
/// here and served through LayerStep::window_queries (oldest first, [Hq, w, D]).
struct HandCache {
  HandCache(int layers, int hq, int hkv, int d, int scalars) : hq(hq), hkv(hkv), d(d), layers(layers) {
    cache = std::make_unique<KVCache>(KVCacheConfig(layers, hkv, d, /*page_size=*/4, scalars));
    seq = cache->add_sequence();
  }
  /// Appends token `pos` with keys [Hkv, D] to every head of `layer`.
  void append(int layer, const float* keys_hd, int32_t pos) {
    for (int h = 0; h < hkv; ++h) cache->append(seq, layer, h, keys_hd + h * d, keys_hd + h * d, pos);
  }
  /// A LayerStep for `layer` after a step that appended n_new tokens, seq_len tokens seen.
  LayerStep step(int layer, int n_new, int64_t seq_len, bool prefill, bool prefill_last) {
    LayerStep s;
    s.cache = cache.get();
    s.seq = seq;
    s.layer = layer;
    s.num_layers = layers;
    s.num_q_heads = hq;
    s.num_kv_heads = hkv;
    s.head_dim = d;
    s.n_new = n_new;
    s.seq_len = seq_len;
    s.prefill = prefill;
    s.prefill_last = prefill_last;
    if (!queries.empty()) {
      s.window_queries = [this](int* w) {
        *w = qw;
        return queries.data();
      };
    }
    return s;
  }
  /// Applies the keep-sets a policy requested.
  void apply(LayerStep& s) {
    for (auto& [h, keep] : s.keeps) cache->compact(seq, s.layer, h, keep);
    s.keeps.clear();
  }
  /// One decode step of layer 0 without signals: appends token `pos` with keys [Hkv, D], runs
  /// the policy's layer hook and applies its keep-sets.
  void decode_step(Policy& pol, const float* keys_hd, int32_t pos) {
    append(0, keys_hd, pos);
    LayerStep st = step(0, 1, pos + 1, false, false);
    pol.on_layer_step(st);
    apply(st);
  }
  std::vector<int32_t> positions(int layer, int h) const {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < cache->length(seq, layer, h); ++i) p.push_back(cache->position(seq, layer, h, i));
    return p;
  }

  int hq, hkv, d, layers;
  std::unique_ptr<KVCache> cache;
  SeqId seq = 0;
  std::vector<float> queries;  ///< [Hq, qw, D]
  int qw = 0;
};

/// The message of the input error (exit code 2) building policy `spec` at `budget` throws
/// (input_error_of over make_policy); records a test failure when it builds.
inline std::string policy_error(const std::string& spec, int64_t budget) {
  return input_error_of([&] { make_policy(PolicySpec::parse(spec, budget)); });
}

/// `w` without its tensor `name`, saved (save_gate_weights) as cut.safetensors in a fresh
/// temp_dir(`tag`): a checkpoint that lacks one tensor, for the error naming it. Returns the
/// file's path; its directory is the caller's to remove. Throws what save_gate_weights throws.
inline std::string save_without(GateWeights w, const std::string& name, const std::string& tag) {
  w.tensors.erase(name);
  const std::string cut = (temp_dir(tag) / "cut.safetensors").string();
  save_gate_weights(w, cut);
  return cut;
}

/// Positions held by each (layer, kv head) of one sequence: [layer][kv head] -> positions, in cache order.
using HeldPositions = std::vector<std::vector<std::vector<int32_t>>>;

/// The positions every (layer, kv head) holds after every step of a teacher-forced run of
/// `model` under policy `spec` at `budget`: the prompt prefilled in chunks of `chunk` tokens,
/// then each of `forced` fed as a decode token (Engine::score). One entry per engine step.
/// `logits`, when given, receives Engine::score's logits [forced.size() + 1, V] f32.
/// Throws kvb::Error for a bad spec.
inline std::vector<HeldPositions> held_per_step(std::shared_ptr<const Model> model, const std::string& spec,
                                                int64_t budget, int chunk, const std::vector<int32_t>& prompt,
                                                const std::vector<int32_t>& forced, std::vector<float>* logits = nullptr) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  Engine e(std::move(model), eo, make_policy(PolicySpec::parse(spec, budget)));
  std::vector<HeldPositions> steps;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    HeldPositions h(kv.config().num_layers, std::vector<std::vector<int32_t>>(kv.config().num_kv_heads));
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int k = 0; k < kv.config().num_kv_heads; ++k)
        for (int32_t i = 0; i < kv.length(s, l, k); ++i) h[l][k].push_back(kv.position(s, l, k, i));
    steps.push_back(std::move(h));
  };
  std::vector<float> out = e.score(prompt, forced);
  if (logits) *logits = std::move(out);
  return steps;
}

}  // namespace kvb::test
