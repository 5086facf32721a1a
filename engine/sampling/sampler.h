// Token sampling: greedy, temperature, top-k, top-p, min-p — applied in transformers' order
// (temperature → top-k → top-p → min-p), then a draw from the renormalised distribution.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvb {

/// Sampling parameters of one request. temperature == 0 means greedy (argmax, lowest id on ties).
struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;       ///< 0 = off
  float top_p = 1.0f;  ///< 1 = off
  float min_p = 0.0f;  ///< 0 = off; keep tokens with p ≥ min_p · p_max
  bool greedy() const { return temperature <= 0.0f; }
};

/// A small, fast, portable PRNG (xoshiro256**, seeded through splitmix64) so that a sample
/// regenerates identically on any machine from its seed.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  /// Uniform double in [0, 1).
  double uniform();

 private:
  uint64_t s_[4];
};

/// Derives a sample's seed from (run seed, example id, sample index) — stable across runs.
uint64_t derive_seed(uint64_t run_seed, const std::string& example_id, uint64_t sample_index);

/// Picks the next token from logits [V] f32. `scratch` is reused between calls.
/// Throws kvb::Error when parameters are invalid (top_p ∉ (0,1], min_p ∉ [0,1], top_k < 0).
int32_t sample_token(const float* logits, int V, const SamplingParams& p, Rng& rng,
                     std::vector<std::pair<float, int32_t>>& scratch);

/// Index of the largest value (first one on ties, as torch.argmax).
int32_t argmax(const float* x, int n);

}  // namespace kvb
