#include "results/stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "engine/util/error.h"

namespace kvb::results {

double pass_at_k(int n, int c, int k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n)
    fail("pass@k: need 0 <= c <= n and 1 <= k <= n, got n={} c={} k={}", n, c, k);
  if (n - c < k) return 1.0;
  double prod = 1.0;
  for (int i = n - c + 1; i <= n; ++i) prod *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - prod;
}

bool maj_at_k(const std::vector<Vote>& votes, int k) {
  if (k < 1 || k > static_cast<int>(votes.size())) fail("maj@k: need 1 <= k <= {} samples, got k={}", votes.size(), k);
  struct Tally {
    int count = 0;
    int first = 0;
    bool correct = false;
  };
  std::map<std::string, Tally> tally;
  for (int i = 0; i < k; ++i) {
    auto [it, inserted] = tally.try_emplace(votes[i].answer);
    if (inserted) it->second.first = i;
    it->second.count++;
    it->second.correct |= votes[i].correct;
  }
  const Tally* best = nullptr;
  for (const auto& [ans, t] : tally)
    if (!best || t.count > best->count || (t.count == best->count && t.first < best->first)) best = &t;
  return best->correct;
}

// Continued fraction for the regularised incomplete beta function (modified Lentz's method).
static double betacf(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < eps) break;
  }
  return h;
}

static double inc_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  double lbt = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  double bt = std::exp(lbt);
  if (x < (a + 1) / (a + b + 2)) return bt * betacf(a, b, x) / a;
  return 1 - bt * betacf(b, a, 1 - x) / b;
}

static double student_t_cdf(double t, double df) {
  double x = df / (df + t * t);
  double tail = 0.5 * inc_beta(df / 2, 0.5, x);
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0)) fail("t quantile: need 0 < p < 1 and df > 0, got p={} df={}", p, df);
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) {
    hi *= 2;
    if (hi > 1e12) return hi;
  }
  for (int i = 0; i < 200 && hi - lo > 1e-12 * std::max(1.0, hi); ++i) {
    double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

namespace {
/// n, mean and sample standard deviation (n − 1 denominator, 0 when n < 2) of `xs`, with
/// lo = hi = mean. Throws kvb::Error prefixed `what` when xs is empty or level is not in (0, 1).
MeanCI describe(const std::vector<double>& xs, double level, const char* what) {
  if (xs.empty()) fail("{}: no values", what);
  if (!(level > 0 && level < 1)) fail("{}: level must be in (0,1), got {}", what, level);
  MeanCI r;
  r.n = static_cast<int>(xs.size());
  double sum = 0;
  for (double x : xs) sum += x;
  r.mean = sum / r.n;
  r.lo = r.hi = r.mean;
  if (r.n < 2) return r;
  double ss = 0;
  for (double x : xs) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / (r.n - 1));
  return r;
}
}  // namespace

MeanCI mean_ci_t(const std::vector<double>& xs, double level) {
  MeanCI r = describe(xs, level, "confidence interval");
  if (r.n < 2) return r;
  double half = student_t_quantile((1 + level) / 2, r.n - 1) * r.sd / std::sqrt(double(r.n));
  r.lo = r.mean - half;
  r.hi = r.mean + half;
  return r;
}

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) fail("normal quantile: p must be in (0,1), got {}", p);
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-16 * std::max(1.0, std::abs(lo)); ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

std::pair<double, double> wilson_interval(double p, double n, double level) {
  if (!(n >= 1)) fail("Wilson interval: n must be >= 1, got {}", n);
  if (!(p >= 0 && p <= 1)) fail("Wilson interval: proportion must be in [0,1], got {}", p);
  if (!(level > 0 && level < 1)) fail("Wilson interval: level must be in (0,1), got {}", level);
  const double z = normal_quantile((1 + level) / 2), z2 = z * z;
  const double denom = 1 + z2 / n;
  const double centre = (p + z2 / (2 * n)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

MeanCI pass1_wilson(const std::vector<double>& xs, double level) {
  if (xs.empty()) fail("confidence interval: no values");
  MeanCI r;
  r.n = static_cast<int>(xs.size());
  double sum = 0;
  for (double x : xs) {
    if (!(x >= 0 && x <= 1)) fail("pass@1 interval: per-example score {} is outside [0,1]", x);
    sum += x;
  }
  r.mean = std::clamp(sum / r.n, 0.0, 1.0);
  r.lo = r.hi = r.mean;
  if (r.n < 2) return r;
  double ss = 0;
  for (double x : xs) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / (r.n - 1));
  std::tie(r.lo, r.hi) = wilson_interval(r.mean, r.n, level);
  return r;
}

namespace {
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform integer in [0, n) by rejection (no modulo bias).
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = next();
    while (v >= limit);
    return v % n;
  }
};
}  // namespace

MeanCI paired_bootstrap_ci(const std::vector<double>& diffs, int resamples, uint64_t seed, double level) {
  if (diffs.empty()) fail("bootstrap: no paired values");
  if (resamples < 1) fail("bootstrap: resamples must be >= 1, got {}", resamples);
  MeanCI r = describe(diffs, level, "bootstrap");
  SplitMix64 rng{seed};
  std::vector<double> means(resamples);
  for (int b = 0; b < resamples; ++b) {
    double s = 0;
    for (int i = 0; i < r.n; ++i) s += diffs[rng.below(r.n)];
    means[b] = s / r.n;
  }
  std::sort(means.begin(), means.end());
  auto q = [&](double p) {
    // Order statistic at rank ceil(p * B) (1-based), clamped to [1, B].
    long idx = static_cast<long>(std::ceil(p * resamples)) - 1;
    idx = std::clamp(idx, 0L, static_cast<long>(resamples) - 1);
    return means[idx];
  };
  r.lo = q((1 - level) / 2);
  r.hi = q((1 + level) / 2);
  return r;
}

double sign_test_p(int neg, int pos) {
  if (neg < 0 || pos < 0) fail("sign test: negative counts {} {}", neg, pos);
  int n = neg + pos;
  if (n == 0) return 1.0;
  int m = std::min(neg, pos);
  // P[X <= m] for X ~ Bin(n, 1/2), summed in log space.
  double acc = 0;
  for (int i = 0; i <= m; ++i)
    acc += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2 * acc);
}

}  // namespace kvb::results
