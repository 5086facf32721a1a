// Statistics for kvbench results: unbiased pass@k, maj@k, Wilson and Student-t confidence intervals,
// a seeded paired bootstrap, and an exact sign test. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvb::results {

/// Unbiased pass@k of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
/// sec. 2.1, eq. 1) for one problem with n samples of which c are correct:
///   pass@k = 1 - C(n-c, k) / C(n, k),
/// computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) (the paper's numerically stable form).
/// Returns 1 when n - c < k. Throws kvb::Error unless 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int n, int c, int k);

/// One graded sample for maj@k: its normalised answer and whether it was graded correct.
struct Vote {
  std::string answer;
  bool correct = false;
};

/// maj@k for one problem: the plurality answer among the first k votes (in sample order) wins,
/// ties broken by the answer that appears first; returns true when any of the first k samples
/// carrying the winning answer was graded correct (equal normalised answers grade alike, so
/// "any" and "first" agree for answer-only graders). The empty answer ("no answer extracted")
/// is an ordinary vote. Throws kvb::Error unless 1 <= k <= votes.size().
bool maj_at_k(const std::vector<Vote>& votes, int k);

/// Quantile of Student's t distribution with `df` > 0 degrees of freedom at probability p in
/// (0, 1), via bisection on the CDF F(t) = 1 - I_{df/(df+t^2)}(df/2, 1/2)/2 (t >= 0) with the
/// regularised incomplete beta function evaluated by its continued fraction (modified Lentz).
/// Accurate to ~1e-10. Throws kvb::Error on out-of-range arguments.
double student_t_quantile(double p, double df);

/// A mean with a two-sided confidence interval.
struct MeanCI {
  double mean = 0;
  double lo = 0;  ///< lower bound (== mean when n < 2)
  double hi = 0;  ///< upper bound (== mean when n < 2)
  double sd = 0;  ///< sample standard deviation (n - 1 denominator), 0 when n < 2
  int n = 0;
};

/// Mean of `xs` with the Student-t interval mean +- t_{(1+level)/2, n-1} * sd / sqrt(n).
/// kvbench applies it to per-example mean scores (examples are the independent units; the
/// samples of one example are correlated). Throws kvb::Error when xs is empty.
MeanCI mean_ci_t(const std::vector<double>& xs, double level = 0.95);

/// Quantile of the standard normal distribution at p in (0, 1) (bisection on
/// Phi(x) = erfc(-x / sqrt 2) / 2, accurate to ~1e-15). Throws kvb::Error outside (0, 1).
double normal_quantile(double p);

/// Wilson score interval (Wilson 1927) for a proportion p in [0, 1] observed over n > 0 units,
/// with z = normal_quantile((1 + level) / 2):
///   centre = (p + z^2/(2n)) / (1 + z^2/n),  half = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/(4n^2)).
/// It never leaves [0, 1]. Same numbers as statsmodels' proportion_confint(p*n, n,
/// alpha=1-level, method="wilson") (tools/gen_stats_goldens.py); p*n need not be an integer.
/// Returns {lo, hi}. Throws kvb::Error when n < 1, p is outside [0, 1] or level outside (0, 1).
std::pair<double, double> wilson_interval(double p, double n, double level = 0.95);

/// pass@1 of a cell: the mean over examples of per-example mean scores (each in [0, 1]), with
/// the Wilson interval of that mean over n = number of examples (examples are the independent
/// units; the samples of one example are correlated). Values in [0, 1] with mean p have
/// variance <= p(1-p), so this is at least as wide as the normal interval on the per-example
/// means, and it stays inside [0, 1] where a Wald/Student-t interval does not (0.25 over 8
/// examples: Wilson [0.07, 0.59], not [-0.14, 0.64]). lo == hi == mean when n < 2; sd is the
/// sample standard deviation of the per-example means. Throws kvb::Error when xs is empty or a
/// value is outside [0, 1].
MeanCI pass1_wilson(const std::vector<double>& xs, double level = 0.95);

/// Default number of bootstrap resamples and seed used by reports and compare.
inline constexpr int kBootstrapResamples = 10000;
inline constexpr uint64_t kBootstrapSeed = 0x6b7662656e6368ULL;  // "kvbench"

/// Percentile bootstrap CI of the mean of paired differences `diffs` (one value per
/// independent unit, e.g. per example: candidate mean score - baseline mean score).
/// Resamples units with replacement `resamples` times using a splitmix64 generator seeded with
/// `seed` (portable: identical results on every platform), and returns the (1-level)/2 and
/// (1+level)/2 order statistics of the resampled means (Efron & Tibshirani 1993, ch. 13).
/// Throws kvb::Error when diffs is empty or resamples < 1.
MeanCI paired_bootstrap_ci(const std::vector<double>& diffs, int resamples = kBootstrapResamples,
                           uint64_t seed = kBootstrapSeed, double level = 0.95);

/// Exact two-sided sign test (binomial, p = 1/2): the probability, under "no difference", of a
/// split at least as uneven as `neg` : `pos` among neg + pos non-tied pairs:
/// min(1, 2 * P[X <= min(neg,pos)]), X ~ Binomial(neg+pos, 1/2). With one binary sample per
/// unit this is the exact McNemar test on the discordant pairs. Returns 1 when neg + pos == 0.
double sign_test_p(int neg, int pos);

}  // namespace kvb::results
