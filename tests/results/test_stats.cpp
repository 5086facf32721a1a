// Statistics (results/stats.h) against closed forms, published tables and known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "results/stats.h"

using namespace kvb::results;

// Exact binomial coefficient by the multiplicative formula in long double (independent of the
// product form used by pass_at_k).
static long double binom(int n, int k) {
  if (k < 0 || k > n) return 0;
  long double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

TEST(PassAtK, HandCases) {
  EXPECT_NEAR(pass_at_k(5, 2, 2), 0.7, 1e-12);   // 1 - C(3,2)/C(5,2) = 1 - 3/10
  EXPECT_NEAR(pass_at_k(10, 3, 1), 0.3, 1e-12);  // pass@1 = c/n
  EXPECT_NEAR(pass_at_k(4, 1, 2), 0.5, 1e-12);   // 1 - C(3,2)/C(4,2) = 1 - 3/6
  EXPECT_EQ(pass_at_k(10, 0, 3), 0.0);
  EXPECT_EQ(pass_at_k(4, 3, 2), 1.0);  // n - c < k
  EXPECT_NEAR(pass_at_k(8, 8, 8), 1.0, 1e-12);
  EXPECT_THROW(pass_at_k(3, 4, 1), kvb::Error);
  EXPECT_THROW(pass_at_k(3, 1, 4), kvb::Error);
}

TEST(PassAtK, ClosedFormGrid) {
  for (int n = 1; n <= 40; ++n)
    for (int c = 0; c <= n; ++c)
      for (int k = 1; k <= n; ++k) {
        double expect = static_cast<double>(1.0L - binom(n - c, k) / binom(n, k));
        ASSERT_NEAR(pass_at_k(n, c, k), expect, 1e-9) << n << " " << c << " " << k;
      }
}

TEST(MajAtK, HandCases) {
  std::vector<Vote> v = {{"3", false}, {"4", true}, {"4", true}, {"3", false}, {"3", false}};
  EXPECT_FALSE(maj_at_k(v, 1));  // only "3"
  EXPECT_FALSE(maj_at_k(v, 2));  // tie 3:4 -> first seen "3"
  EXPECT_TRUE(maj_at_k(v, 3));   // "4" x2
  EXPECT_FALSE(maj_at_k(v, 4));  // tie 2:2 -> "3"
  EXPECT_FALSE(maj_at_k(v, 5));  // "3" x3
  EXPECT_THROW(maj_at_k(v, 6), kvb::Error);
}

TEST(StudentT, MatchesPublishedTable) {
  // Two-sided 95% critical values t_{0.975, df} (standard statistical tables).
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.3027, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 5), 2.5706, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.2281, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0423, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.995, 10), 3.1693, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 1e6), 1.95996, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.2281, 1e-4);
}

TEST(MeanCI, KnownAnswer) {
  // {1,...,5}: mean 3, sd sqrt(2.5), t_{.975,4} = 2.7764 -> half width 2.7764 * 1.5811/sqrt 5.
  auto ci = mean_ci_t({1, 2, 3, 4, 5});
  EXPECT_NEAR(ci.mean, 3.0, 1e-12);
  EXPECT_NEAR(ci.sd, std::sqrt(2.5), 1e-12);
  EXPECT_NEAR(ci.lo, 3 - 2.7764 * std::sqrt(2.5) / std::sqrt(5.0), 1e-3);
  EXPECT_NEAR(ci.hi, 3 + 2.7764 * std::sqrt(2.5) / std::sqrt(5.0), 1e-3);
  auto one = mean_ci_t({0.5});
  EXPECT_EQ(one.lo, 0.5);
  EXPECT_EQ(one.hi, 0.5);
  EXPECT_THROW(mean_ci_t({}), kvb::Error);
}

TEST(MeanCI, CoverageOnSyntheticData) {
  // Known mean 0.3 (Bernoulli). A 95% interval over n = 50 should cover it ~95% of the time.
  std::mt19937_64 rng(7);
  std::bernoulli_distribution b(0.3);
  int cover = 0;
  const int reps = 2000;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> xs(50);
    for (auto& x : xs) x = b(rng);
    auto ci = mean_ci_t(xs);
    cover += ci.lo <= 0.3 && 0.3 <= ci.hi;
  }
  EXPECT_GT(cover, reps * 0.92);
  EXPECT_LT(cover, reps * 0.98);
}

TEST(Bootstrap, DegenerateAndDeterministic) {
  auto c = paired_bootstrap_ci({-0.25, -0.25, -0.25}, 500, 1);
  EXPECT_DOUBLE_EQ(c.mean, -0.25);
  EXPECT_DOUBLE_EQ(c.lo, -0.25);
  EXPECT_DOUBLE_EQ(c.hi, -0.25);
  std::vector<double> d = {0.1, -0.3, 0.5, 0.0, 1.0, -1.0, 0.2};
  auto a1 = paired_bootstrap_ci(d, 2000, 99), a2 = paired_bootstrap_ci(d, 2000, 99);
  EXPECT_EQ(a1.lo, a2.lo);
  EXPECT_EQ(a1.hi, a2.hi);
  EXPECT_LE(a1.lo, a1.mean);
  EXPECT_GE(a1.hi, a1.mean);
  EXPECT_THROW(paired_bootstrap_ci({}, 10, 1), kvb::Error);
}

TEST(Bootstrap, MatchesNormalTheoryForLargeN) {
  // For n = 2000 draws of N(0.05, 0.4^2) the bootstrap percentile CI of the mean approaches
  // mean +- 1.96 * s / sqrt(n).
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd(0.05, 0.4);
  std::vector<double> d(2000);
  for (auto& x : d) x = nd(rng);
  auto ci = paired_bootstrap_ci(d, 4000, 5);
  double half = 1.959964 * ci.sd / std::sqrt(2000.0);
  EXPECT_NEAR(ci.lo, ci.mean - half, 0.1 * half);
  EXPECT_NEAR(ci.hi, ci.mean + half, 0.1 * half);
}

TEST(Bootstrap, CoverageOnSyntheticPairs) {
  // Paired scores: candidate correct with p 0.6, baseline with p 0.7, independent -> true mean
  // difference -0.1. The 95% bootstrap CI over 80 examples should cover it ~95% of the time.
  std::mt19937_64 rng(11);
  std::bernoulli_distribution cb(0.6), bb(0.7);
  int cover = 0;
  const int reps = 300;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> d(80);
    for (auto& x : d) x = double(cb(rng)) - double(bb(rng));
    auto ci = paired_bootstrap_ci(d, 1000, 1000 + r);
    cover += ci.lo <= -0.1 && -0.1 <= ci.hi;
  }
  EXPECT_GT(cover, reps * 0.90);
  EXPECT_LT(cover, reps * 0.99);
}

TEST(SignTest, ExactBinomial) {
  EXPECT_DOUBLE_EQ(sign_test_p(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(6, 0), 2.0 / 64);                 // 2 * (1/2)^6
  EXPECT_NEAR(sign_test_p(1, 9), 2.0 * (1 + 10) / 1024, 1e-12);  // 2 * (C(10,0)+C(10,1))/2^10
  EXPECT_DOUBLE_EQ(sign_test_p(5, 5), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(5, 0), 2.0 / 32);
}

// ---- pass@1 interval: Wilson score over examples (issue 17) ----

TEST(Wilson, NormalQuantileKnownValues) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(normal_quantile(0.95), 1.6448536269514722, 1e-12);
  EXPECT_NEAR(normal_quantile(0.995), 2.5758293035489004, 1e-12);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-14);
  EXPECT_NEAR(normal_quantile(0.025), -1.959963984540054, 1e-12);
  EXPECT_THROW(normal_quantile(0.0), kvb::Error);
  EXPECT_THROW(normal_quantile(1.0), kvb::Error);
}

// Goldens from statsmodels' proportion_confint(p*n, n, alpha, method="wilson")
// (tools/gen_stats_goldens.py -> tests/fixtures/results/wilson_goldens.json).
TEST(Wilson, MatchesStatsmodelsGoldens) {
  const auto g =
      nlohmann::json::parse(kvb::read_file(std::string(KVB_SOURCE_DIR) + "/tests/fixtures/results/wilson_goldens.json"));
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const auto scores = c["scores"].get<std::vector<double>>();
    const double level = c["level"].get<double>();
    SCOPED_TRACE("n=" + std::to_string(scores.size()) + " p=" + c["p"].dump() + " level=" + std::to_string(level));
    const auto [lo, hi] = wilson_interval(c["p"].get<double>(), c["n"].get<double>(), level);
    EXPECT_NEAR(lo, c["lo"].get<double>(), 1e-12);
    EXPECT_NEAR(hi, c["hi"].get<double>(), 1e-12);
    const MeanCI m = pass1_wilson(scores, level);
    EXPECT_NEAR(m.mean, c["p"].get<double>(), 1e-12);
    EXPECT_EQ(m.n, static_cast<int>(scores.size()));
    EXPECT_NEAR(m.lo, c["lo"].get<double>(), 1e-12);
    EXPECT_NEAR(m.hi, c["hi"].get<double>(), 1e-12);
    EXPECT_GE(m.lo, 0.0);
    EXPECT_LE(m.hi, 1.0);
    EXPECT_LE(m.lo, m.mean);
    EXPECT_GE(m.hi, m.mean);
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(Wilson, IssueCaseStaysInsideUnitInterval) {
  // 2 of 8 examples correct: the Student-t interval was [-0.14, 0.64].
  const std::vector<double> xs = {1, 0, 0, 0, 0, 0, 1, 0};
  const MeanCI t = mean_ci_t(xs);
  EXPECT_LT(t.lo, 0.0);
  const MeanCI w = pass1_wilson(xs);
  EXPECT_DOUBLE_EQ(w.mean, 0.25);
  EXPECT_NEAR(w.lo, 0.071479, 1e-6);
  EXPECT_NEAR(w.hi, 0.590725, 1e-6);
  // All wrong / all right: the interval touches the bound and is not degenerate.
  const MeanCI z = pass1_wilson(std::vector<double>(10, 0.0));
  EXPECT_EQ(z.lo, 0.0);
  EXPECT_NEAR(z.hi, 0.27753, 1e-5);
  const MeanCI o = pass1_wilson(std::vector<double>(10, 1.0));
  EXPECT_NEAR(o.lo, 0.72247, 1e-5);
  EXPECT_EQ(o.hi, 1.0);
}

TEST(Wilson, NeverLeavesUnitIntervalOnRandomCells) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 40), samples = 1 + static_cast<int>(rng() % 8);
    const double p = std::uniform_real_distribution<double>(0, 1)(rng);
    std::vector<double> xs;
    for (int i = 0; i < n; ++i) {
      int c = 0;
      for (int s = 0; s < samples; ++s) c += std::uniform_real_distribution<double>(0, 1)(rng) < p;
      xs.push_back(double(c) / samples);
    }
    const MeanCI w = pass1_wilson(xs);
    ASSERT_GE(w.lo, 0.0);
    ASSERT_LE(w.hi, 1.0);
    ASSERT_LE(w.lo, w.mean + 1e-15);
    ASSERT_GE(w.hi, w.mean - 1e-15);
  }
}

TEST(Wilson, EdgeCasesAndErrors) {
  const MeanCI one = pass1_wilson({0.5});
  EXPECT_EQ(one.lo, 0.5);
  EXPECT_EQ(one.hi, 0.5);
  EXPECT_THROW(pass1_wilson({}), kvb::Error);
  EXPECT_THROW(pass1_wilson({0.5, 1.5}), kvb::Error);
  EXPECT_THROW(pass1_wilson({-0.1, 0.5}), kvb::Error);
  EXPECT_THROW(wilson_interval(0.5, 0), kvb::Error);
  EXPECT_THROW(wilson_interval(0.5, 10, 1.0), kvb::Error);
}
