// The backend primitives of LayerStep (policy.h: head_mlp, window_scores) that let one policy
// implementation drive both backends: the host fallback of scoring::head_mlp against an
// independent double-precision evaluation of the HeadMlp formula, and that the policies really
// route their learned MLPs and window scores through the hooks when a backend provides them (the
// CUDA backend does; its device results are checked against the CPU by kvb_cuda_check on a GPU).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "engine/policies/scoring.h"
#include "engine/util/error.h"
#include "tests/policies/harness.h"

namespace kvb {
namespace {

/// z[r, h] of HeadMlp in double, written from the formula in policy.h.
double ref_mlp(const HeadMlp& m, const float* x, int r, int h, bool single) {
  const int h1 = m.shared_hidden ? 0 : h;
  const int xh = (m.shared_hidden || single) ? 0 : h;
  const int xheads = (m.shared_hidden || single) ? 1 : m.heads;
  double z = m.b2[h];
  for (int k = 0; k < m.hidden; ++k) {
    double a = m.b1[h1 * m.hidden + k];
    for (int c = 0; c < m.in; ++c)
      a += static_cast<double>(m.w1[(static_cast<size_t>(h1) * m.hidden + k) * m.in + c]) *
           x[(static_cast<size_t>(r) * xheads + xh) * m.in + c];
    const double act =
        m.act == HeadMlp::Act::kSilu ? a / (1.0 + std::exp(-a)) : 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
    z += m.w2[static_cast<size_t>(h) * m.hidden + k] * act;
  }
  return z;
}

struct MlpData {
  std::vector<float> w1, b1, w2, b2;
  HeadMlp m;
  MlpData(int heads, int in, int hidden, bool shared, HeadMlp::Act act, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> n(0.f, 0.3f);
    const int h1 = shared ? 1 : heads;
    for (auto* v : {&w1, &b1, &w2, &b2}) v->clear();
    w1.resize(static_cast<size_t>(h1) * hidden * in);
    b1.resize(static_cast<size_t>(h1) * hidden);
    w2.resize(static_cast<size_t>(heads) * hidden);
    b2.resize(heads);
    for (auto* v : {&w1, &b1, &w2, &b2})
      for (float& f : *v) f = n(g);
    m = {heads, in, hidden, shared, act, w1.data(), b1.data(), w2.data(), b2.data()};
  }
};

TEST(HeadMlp, HostPathMatchesTheFormulaInEveryMode) {
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.f, 1.f);
  test::HandCache hc(1, 4, 2, 8, 0);
  const int rows = 3;
  for (bool shared : {true, false})
    for (auto act : {HeadMlp::Act::kSilu, HeadMlp::Act::kGeluErf}) {
      MlpData d(/*heads=*/2, /*in=*/10, /*hidden=*/7, shared, act, shared ? 1u : 2u);
      const int xheads = shared ? 1 : 2;
      std::vector<float> x(static_cast<size_t>(rows) * xheads * 10);
      for (float& f : x) f = n(g);
      LayerStep st = hc.step(0, rows, rows, true, true);
      std::vector<float> out(rows * 2);
      scoring::head_mlp(st, d.m, x.data(), rows, -1, out.data());
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < 2; ++h)
          EXPECT_NEAR(out[r * 2 + h], ref_mlp(d.m, x.data(), r, h, false), 1e-4) << shared << " r" << r << " h" << h;
      if (!shared) {  // one head over rows of its own inputs (ForesightKV scores one head at a time)
        std::vector<float> xs(static_cast<size_t>(rows) * 10), o1(rows);
        for (float& f : xs) f = n(g);
        scoring::head_mlp(st, d.m, xs.data(), rows, 1, o1.data());
        for (int r = 0; r < rows; ++r) EXPECT_NEAR(o1[r], ref_mlp(d.m, xs.data(), r, 1, true), 1e-4);
      }
    }
}

// At a learned gate's size (576 inputs, 40 hidden units: not a multiple of the 16-unit tiles, 70
// rows: the hidden tiles run on the OpenMP threads) every mode matches the formula, and a row's
// result has the same bits whether it is scored inside a 70-row prefill chunk or alone (decode),
// so a token's retention score does not depend on how the prompt was chunked.
TEST(HeadMlp, HostPathAtGateSizeMatchesTheFormulaAndRowBitsDoNotDependOnTheBatch) {
  std::mt19937 g(8);
  std::normal_distribution<float> n(0.f, 1.f);
  test::HandCache hc(1, 4, 2, 8, 0);
  const int rows = 70, in = 576, hidden = 40, heads = 3;
  for (int mode = 0; mode < 3; ++mode) {  // shared hidden, per head, one head
    const bool shared = mode == 0, single = mode == 2;
    SCOPED_TRACE(mode);
    MlpData d(heads, in, hidden, shared, HeadMlp::Act::kSilu, 10u + mode);
    const int xheads = (shared || single) ? 1 : heads, oheads = single ? 1 : heads, head = single ? 2 : -1;
    std::vector<float> x(static_cast<size_t>(rows) * xheads * in);
    for (float& f : x) f = n(g);
    LayerStep st = hc.step(0, rows, rows, true, true);
    std::vector<float> out(static_cast<size_t>(rows) * oheads);
    scoring::head_mlp(st, d.m, x.data(), rows, head, out.data());
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < oheads; ++h) {
        const double ref = ref_mlp(d.m, x.data(), r, single ? head : h, single);
        EXPECT_NEAR(out[r * oheads + h], ref, 1e-4 * std::max(1.0, std::abs(ref))) << "r" << r << " h" << h;
      }
    for (int r : {0, 17, 69}) {
      std::vector<float> one(oheads);
      scoring::head_mlp(st, d.m, x.data() + static_cast<size_t>(r) * xheads * in, 1, head, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), &out[static_cast<size_t>(r) * oheads], sizeof(float) * oheads)) << "row " << r;
    }
  }
}

// R-KV / G-KV key redundancy (scoring.h) at a length where the blocked, threaded path runs (200
// keys: 4 row blocks, the last partial; near-duplicate keys planted so the threshold edits bite)
// against the formula in double, and bit-identical with one OpenMP thread and with all.
TEST(KeyRedundancy, MatchesTheFormulaAndDoesNotDependOnTheThreadCount) {
  const int L = 200, D = 64;
  test::HandCache hc(1, 2, 1, D, 0);
  std::mt19937 g(21);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<std::vector<float>> keys(L, std::vector<float>(D));
  for (int i = 0; i < L; ++i) {
    for (float& f : keys[i]) f = n(g);
    if (i % 7 == 3) keys[i] = keys[i / 2], keys[i][0] += 0.05f;  // a near-duplicate of an older key
    hc.append(0, keys[i].data(), i);
  }
  for (bool zero_first : {true, false}) {
    const float thr = 0.5f;
    // The formula in double.
    std::vector<std::vector<double>> kn(L, std::vector<double>(D));
    for (int i = 0; i < L; ++i) {
      double n2 = 0;
      for (float v : keys[i]) n2 += double(v) * v;
      for (int d = 0; d < D; ++d) kn[i][d] = keys[i][d] / (std::sqrt(n2) + 1e-8);
    }
    std::vector<double> col(L, 0.0);
    for (int i = 0; i < L; ++i) {
      std::vector<double> row(L);
      for (int k = 0; k < L; ++k) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += kn[i][d] * kn[k][d];
        row[k] = dot;
      }
      row[i] = 0;
      int last = -1;
      for (int k = L - 1; k >= 0; --k)
        if (row[k] > thr) {
          last = k;
          break;
        }
      if (last >= 0) row[last] = 0;
      else if (zero_first) row[0] = 0;
      for (int k = 0; k < L; ++k) col[k] += row[k];
    }
    const std::vector<float> all = scoring::key_redundancy_mean(*hc.cache, hc.seq, 0, 0, thr, zero_first);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = scoring::key_redundancy_mean(*hc.cache, hc.seq, 0, 0, thr, zero_first);
    omp_set_num_threads(threads);
    ASSERT_EQ(all.size(), size_t(L));
    EXPECT_EQ(0, std::memcmp(all.data(), one.data(), sizeof(float) * L));
    for (int k = 0; k < L; ++k) EXPECT_NEAR(all[k], col[k] / L, 1e-5) << "key " << k;
  }
}

TEST(HeadMlp, NullInputReadsTheLayerInputAndIsCheckedAgainstTheStep) {
  test::HandCache hc(1, 4, 2, 8, 0);
  MlpData d(2, 6, 5, /*shared=*/true, HeadMlp::Act::kSilu, 3);
  std::vector<float> li(2 * 6);
  for (size_t i = 0; i < li.size(); ++i) li[i] = 0.1f * static_cast<float>(i) - 0.4f;
  LayerStep st = hc.step(0, 2, 2, true, true);
  st.hidden_size = 6;
  std::vector<float> out(4);
  EXPECT_THROW(scoring::head_mlp(st, d.m, nullptr, 2, -1, out.data()), Error);  // layer_input unset
  st.layer_input = li.data();
  scoring::head_mlp(st, d.m, nullptr, 2, -1, out.data());
  for (int r = 0; r < 2; ++r)
    for (int h = 0; h < 2; ++h) EXPECT_NEAR(out[r * 2 + h], ref_mlp(d.m, li.data(), r, h, false), 1e-4);
  EXPECT_THROW(scoring::head_mlp(st, d.m, nullptr, 3, -1, out.data()), Error);  // rows != n_new
  st.hidden_size = 7;
  EXPECT_THROW(scoring::head_mlp(st, d.m, nullptr, 2, -1, out.data()), Error);  // width != hidden
}

TEST(HeadMlp, TrimKVTakesItsRetentionGatesFromTheBackendPrimitive) {
  auto pol = make_policy(PolicySpec::parse("trimkv:random_gates=4,gate_hidden=8", 64));
  EXPECT_TRUE(pol->needs().layer_input_via_mlp);
  test::HandCache hc(1, 4, 2, 4, pol->needs().num_scalars);
  std::vector<float> k(8, 0.5f);
  hc.append(0, k.data(), 0);
  LayerStep st = hc.step(0, 1, 1, true, true);
  st.hidden_size = 16;  // no layer_input: only the primitive can produce the gates
  int calls = 0;
  st.head_mlp = [&](const HeadMlp& m, const float* x, int rows, int head, float* out) {
    ++calls;
    EXPECT_EQ(x, nullptr);
    EXPECT_EQ(rows, 1);
    EXPECT_EQ(head, -1);
    EXPECT_TRUE(m.shared_hidden);
    EXPECT_EQ(m.in, 16);
    EXPECT_EQ(m.hidden, 8);
    EXPECT_EQ(m.heads, 2);
    EXPECT_EQ(m.act, HeadMlp::Act::kSilu);
    for (int h = 0; h < 2; ++h) out[h] = 0.75f * (h + 1) - 1.0f;
  };
  pol->on_layer_step(st);
  EXPECT_EQ(calls, 1);
  for (int h = 0; h < 2; ++h) {
    const double z = 0.75 * (h + 1) - 1.0;
    EXPECT_NEAR(hc.cache->scalars(hc.seq, 0, h, 0)[0], -std::log1p(std::exp(-z)), 1e-6);  // log σ(z)
  }
}

TEST(WindowScores, SnapKVKeepsTheTopTokensOfTheBackendScores) {
  auto pol = make_policy(PolicySpec::parse("snapkv", 12));
  const int window = static_cast<int>(pol->needs().window_queries);
  ASSERT_GT(window, 0);
  test::HandCache hc(1, 4, 2, 4, pol->needs().num_scalars);
  const int L = 40;
  std::vector<float> k(8, 0.25f);
  for (int t = 0; t < L; ++t) hc.append(0, k.data(), t);
  LayerStep st = hc.step(0, L, L, true, true);
  const std::set<int> high = {3, 10, 17, 25};
  int calls = 0;
  st.window_scores = [&](int h, const WindowScoreSpec& sp, int* w_out) {
    ++calls;
    EXPECT_EQ(sp.gqa, scoring::Gqa::kMaxLogits);  // snapkv's documented defaults
    EXPECT_EQ(sp.pool, scoring::Pool::kMax);
    EXPECT_EQ(sp.kernel, 7);
    *w_out = window;
    std::vector<float> s(L - window);
    for (int i = 0; i < L - window; ++i) s[i] = high.count(i) ? 1.0f + 0.01f * h : 0.001f * i;
    return s;
  };
  pol->on_layer_step(st);
  EXPECT_EQ(calls, 2);
  hc.apply(st);
  for (int h = 0; h < 2; ++h) {
    std::set<int32_t> want(high.begin(), high.end());
    for (int t = L - window; t < L; ++t) want.insert(t);
    const auto got = hc.positions(0, h);
    EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), want) << "head " << h;
  }
}

TEST(WindowScores, HostFallbackIsImportanceThenPooling) {
  test::HandCache hc(1, 4, 2, 4, 0);
  const int L = 20, w = 4;
  std::mt19937 g(9);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int t = 0; t < L; ++t) {
    std::vector<float> k(8);
    for (float& f : k) f = n(g);
    hc.append(0, k.data(), t);
  }
  hc.qw = w;
  hc.queries.resize(4 * w * 4);
  for (float& f : hc.queries) f = n(g);
  for (auto gqa : {scoring::Gqa::kMaxLogits, scoring::Gqa::kMax, scoring::Gqa::kMean})
    for (auto pool : {scoring::Pool::kNone, scoring::Pool::kMax, scoring::Pool::kAvg}) {
      LayerStep st = hc.step(0, 1, L, false, false);
      int w1 = 0, w2 = 0;
      const auto want = scoring::pool1d(scoring::window_importance(st, 1, gqa, &w1), 5, pool);
      const auto got = scoring::window_scores(st, 1, {gqa, pool, 5}, &w2);
      EXPECT_EQ(w1, w2);
      ASSERT_EQ(got.size(), static_cast<size_t>(L - w));
      for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]);
    }
}

}  // namespace
}  // namespace kvb
