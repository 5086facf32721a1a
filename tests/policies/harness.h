// Test helpers: a hand-built KVCache + LayerStep for one sequence, as the engine would fill them.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/policies/policy.h"

namespace kvb::test {

/// ../shared/models/stories260K-hf, the real tiny model the engine-level policy tests run on.
inline const std::string kStoriesDir = std::string(KVB_SHARED_DIR) + "/models/stories260K-hf";

/// stories260K loaded once per test binary (f32 weights). Throws kvb::Error when it is absent:
/// callers check KVB_REQUIRE_SHARED first.
inline std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load_dir(kStoriesDir);
  return m;
}

/// One sequence in a cache with `layers` layers of `hkv` heads of dim `d`; queries are held
/// here and served through LayerStep::window_queries (oldest first, [Hq, w, D]).
struct HandCache {
  HandCache(int layers, int hq, int hkv, int d, int scalars)
      : hq(hq), hkv(hkv), d(d), layers(layers) {
    KVCacheConfig c;
    c.num_layers = layers;
    c.num_kv_heads = hkv;
    c.head_dim = d;
    c.page_size = 4;
    c.num_scalars = scalars;
    cache = std::make_unique<KVCache>(c);
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

}  // namespace kvb::test
