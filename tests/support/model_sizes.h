// Test helper: a small random-weight model shape derived from a named one (model_shape), so a test
// states only the sizes it needs and keeps the architecture (norms, RoPE, q/k norm, tying) of the
// model it imitates. Header-only; tests/CMakeLists.txt puts tests/ on each test's include path.
#pragma once

#include <cstdint>
#include <tuple>

#include "engine/model/config.h"

namespace kvb::test {

/// The sizes of a test model; every field must be set (> 0) by the caller.
struct ModelSizes {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
};

/// `base` (e.g. model_shape("qwen3-0.6b")) with the vocabulary, widths, layer and head counts of
/// `s`; every other field (architecture, RoPE, norms, tying) is kept.
inline ModelConfig resized(ModelConfig base, const ModelSizes& s) {
  std::tie(base.vocab_size, base.hidden_size, base.intermediate_size, base.num_layers, base.num_heads, base.num_kv_heads,
           base.head_dim) = std::tie(s.vocab, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim);
  return base;
}

}  // namespace kvb::test
