// Sampling: determinism per seed and the distributions of temperature / top-k / top-p / min-p
// against their closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampling/sampler.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

std::vector<double> softmax(const std::vector<float>& x, float temp) {
  std::vector<double> p(x.size());
  double mx = -1e30, s = 0;
  for (float v : x) mx = std::max(mx, double(v) / temp);
  for (size_t i = 0; i < x.size(); ++i) s += (p[i] = std::exp(double(x[i]) / temp - mx));
  for (auto& v : p) v /= s;
  return p;
}

std::vector<double> empirical(const std::vector<float>& logits, const SamplingParams& sp, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::pair<float, int32_t>> scratch;
  std::vector<double> f(logits.size(), 0);
  for (int i = 0; i < n; ++i) f[sample_token(logits.data(), logits.size(), sp, rng, scratch)] += 1.0 / n;
  return f;
}

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};

TEST(Sampling, GreedyIsArgmaxFirstOnTies) {
  std::vector<float> x = {0.1f, 3.0f, 3.0f, -2.0f};
  Rng rng(1);
  std::vector<std::pair<float, int32_t>> s;
  EXPECT_EQ(sample_token(x.data(), 4, {}, rng, s), 1);
}

TEST(Sampling, TemperatureMatchesSoftmax) {
  SamplingParams sp;
  sp.temperature = 0.7f;
  auto f = empirical(kLogits, sp, 200000, 11);
  auto p = softmax(kLogits, 0.7f);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], 0.005) << i;
}

TEST(Sampling, TopKTopPMinPRenormalise) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 3;  // keeps ids 0, 5, 1
  auto f = empirical(kLogits, sp, 100000, 5);
  auto p = softmax({2.0f, 1.0f, 1.5f}, 1.0f);
  EXPECT_NEAR(f[0], p[0], 0.006);
  EXPECT_NEAR(f[1], p[1], 0.006);
  EXPECT_NEAR(f[5], p[2], 0.006);
  EXPECT_EQ(f[2] + f[3] + f[4], 0.0);

  SamplingParams tp;
  tp.temperature = 1.0f;
  auto full = softmax(kLogits, 1.0f);                       // sorted: 0 (.38), 5 (.23), 1 (.14), ...
  tp.top_p = static_cast<float>(full[0] + full[5] - 1e-3);  // needs ids 0 and 5
  auto g = empirical(kLogits, tp, 100000, 6);
  EXPECT_NEAR(g[0], full[0] / (full[0] + full[5]), 0.006);
  EXPECT_NEAR(g[5], full[5] / (full[0] + full[5]), 0.006);
  EXPECT_EQ(g[1] + g[2] + g[3] + g[4], 0.0);

  SamplingParams mp;
  mp.temperature = 1.0f;
  mp.min_p = 0.5f;  // keep p >= 0.5 * p_max: ids 0 (1.0), 5 (e^-0.5 = .61); not 1 (e^-1 = .37)
  auto h = empirical(kLogits, mp, 100000, 7);
  EXPECT_NEAR(h[0], full[0] / (full[0] + full[5]), 0.006);
  EXPECT_EQ(h[1] + h[2] + h[3] + h[4], 0.0);
}

TEST(Sampling, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  auto draw = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<std::pair<float, int32_t>> s;
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(sample_token(kLogits.data(), 6, sp, rng, s));
    return out;
  };
  EXPECT_EQ(draw(derive_seed(1, "gsm8k/17", 3)), draw(derive_seed(1, "gsm8k/17", 3)));
  EXPECT_NE(draw(derive_seed(1, "gsm8k/17", 3)), draw(derive_seed(1, "gsm8k/17", 4)));
  EXPECT_NE(derive_seed(1, "a", 0), derive_seed(1, "b", 0));
}

TEST(Sampling, InvalidParametersAreErrors) {
  Rng rng(1);
  std::vector<std::pair<float, int32_t>> s;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.0f;
  EXPECT_THROW(sample_token(kLogits.data(), 6, sp, rng, s), Error);
  sp.top_p = 1.0f;
  sp.top_k = -1;
  EXPECT_THROW(sample_token(kLogits.data(), 6, sp, rng, s), Error);
}

}  // namespace
}  // namespace kvb
