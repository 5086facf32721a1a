// Policy behaviour on hand-built caches: parameters and errors, schedules (budget + buffer),
// H2O accumulation, G-KV history, TRIM-KV global budget, random determinism. Expected keep-sets
// are computed here from the papers' rules, independently of the policy code.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "engine/policies/gate_weights.h"
#include "engine/policies/params.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using ::kvb::test::error_has;
using ::kvb::test::error_of;

TEST(PolicyParams, EveryPolicyBuildsWithDefaultsAndReportsThem) {
  for (const auto& info : policy_registry()) {
    const PolicySpec s = info.test_spec(info.test_budget(64));  // registry metadata, no names
    auto p = make_policy(s);
    ASSERT_TRUE(p) << info.name;
    EXPECT_EQ(p->name(), info.name);
    auto j = p->resolved_params();
    // The eviction threshold is read only under budget_kind=threshold, so the resolved parameters
    // (and the work-item keys hashed from them) of the other kinds are what they were before it.
    // (kvzap's own `threshold` is its eviction rule itself: it has no budget_kind.)
    bool score_key = false, has_kind = false;
    for (const auto& prm : info.params) {
      score_key |= prm.key == "score_threshold";
      has_kind |= prm.key == "budget_kind";
    }
    const std::string evict_key = score_key ? "score_threshold" : "threshold";
    for (const auto& prm : info.params) {
      if (has_kind && prm.key == evict_key && j.value("budget_kind", "") != "threshold") {
        EXPECT_FALSE(j.contains(prm.key)) << info.name;
        continue;
      }
      EXPECT_TRUE(j.contains(prm.key)) << info.name << "." << prm.key;
    }
  }
}

TEST(PolicyParams, UnknownAndBadValuesNameTheParameter) {
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("rkv:lamda=0.2", 64)); }).find("unknown parameter 'lamda'"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("rkv:lambda=abc", 64)); }).find("'lambda'"), std::string::npos);
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("snapkv:pool=median", 64)); }).find("'pool'"), std::string::npos);
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("rkv:buffer=0", 64)); }).find("'buffer'"), std::string::npos);
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("snapkv", 8)); }).find("budget 8 must exceed"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_policy(PolicySpec::parse("nosuch", 8)); }).find("unknown policy 'nosuch'"),
            std::string::npos);
  auto j = make_policy(PolicySpec::parse("rkv:lambda=0.07", 256))->resolved_params();
  EXPECT_DOUBLE_EQ(j["lambda"].get<double>(), 0.07);
  EXPECT_EQ(j["window"].get<int64_t>(), 8);
  EXPECT_EQ(j["buffer"].get<int64_t>(), 128);
  EXPECT_EQ(j["budget"].get<int64_t>(), 256);
}

// PolicyParams::bind: each row read as its getter would (the member's type picks the parse), the
// same messages (integer bounds printed as integers, double ones as fmt prints them), rows in order.
TEST(PolicyParams, BindReadsEachRowAsItsGetterWould) {
  const std::vector<PolicyParamInfo> table = {{"n", "7", ""}, {"x", "0.5", ""},    {"f", "true", ""}, {"s", "max", ""},
                                              {"k", "2", ""}, {"name", "abc", ""}, {"seed", "9", ""}};
  const auto bound = [&](const std::string& spec) {
    PolicyParams p(PolicySpec::parse("bindtest" + spec, 0), table);
    int32_t n = 0, k = 0;
    double x = 0;
    bool f = false, is_max = false;
    std::string name;
    uint64_t seed = 0;
    size_t s_index = 9;
    p.bind({{"n", &n, within(1, 1 << 20)},
            {"x", &x, within(0, 1)},
            {"f", &f},
            {"s", &is_max, one_of({"mean", "max"}, "max")},
            {"s", &s_index, one_of({"mean", "max"})},
            {"k", &k, at_least(2, "why not")},
            {"name", &name},
            {"seed", &seed}});
    return std::make_tuple(p.resolved(), n, is_max, s_index, name, seed, x, f);
  };
  const auto [j, n, is_max, s_index, name, seed, x, f] = bound("");
  EXPECT_EQ(n, 7);
  EXPECT_EQ(j["n"].get<int64_t>(), 7);
  EXPECT_DOUBLE_EQ(j["x"].get<double>(), 0.5);
  EXPECT_EQ(j["s"].get<std::string>(), "max");
  EXPECT_TRUE(is_max);
  EXPECT_EQ(s_index, 1u);
  EXPECT_EQ(name, "abc");
  EXPECT_EQ(seed, 9u);
  EXPECT_DOUBLE_EQ(x, 0.5);
  EXPECT_TRUE(f);
  const auto error_is = [&](const std::string& spec, const std::string& want) {
    EXPECT_EQ(error_of([&] { bound(spec); }), want) << spec;
  };
  error_is(":n=0", "policy 'bindtest': parameter 'n': must be in [1, 1048576]");
  error_is(":n=x", "policy 'bindtest': parameter 'n': expected an integer, got 'x'");
  error_is(":x=1.5", "policy 'bindtest': parameter 'x': must be in [0, 1]");
  error_is(":f=maybe", "policy 'bindtest': parameter 'f': expected true/false, got 'maybe'");
  error_is(":s=sum", "policy 'bindtest': parameter 's': expected one of mean, max, got 'sum'");
  error_is(":k=1", "policy 'bindtest': parameter 'k': must be >= 2 (why not)");
  error_is(":n=0,x=2", "policy 'bindtest': parameter 'n': must be in [1, 1048576]");  // the first row first
  PolicyParams p(PolicySpec::parse("bindtest", 0), table);
  bool b = false;
  EXPECT_TRUE(error_has([&] { p.bind({{"f", &b, within(0, 1)}}); }, {"parameter 'f'", "non-number"}));
}

TEST(PolicyParams, LearnedPolicyWithoutWeightsNamesTheMissingFile) {
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("trimkv", 64)); }, {"gates="}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("foresightkv", 256)); }, {"scorer="}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("wgkv", 0)); }, {"gates="}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("trimkv:gates=/nonexistent/g.safetensors", 64)); },
                        {"/nonexistent/g.safetensors", "not found"}));
}

TEST(GateWeights, CorruptFilesAreReportedWithTheFileName) {
  const std::string path = (std::filesystem::temp_directory_path() / "kvb_bad_gate.safetensors").string();
  {
    std::ofstream o(path, std::ios::binary);
    uint64_t n = 1000;
    o.write(reinterpret_cast<const char*>(&n), 8);
    o << "{}";
  }
  std::string e = error_of([&] { GateWeights::load(path, GateSource{"trimkv", "gates", "", false}); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  {
    std::ofstream o(path, std::ios::binary);
    std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    uint64_t n = h.size();
    o.write(reinterpret_cast<const char*>(&n), 8);
    o << h << "abcd";  // 4 bytes of data, header says 16
  }
  e = error_of([&] { GateWeights::load(path, GateSource{"trimkv", "gates", "", false}); });
  EXPECT_NE(e.find("tensor a"), std::string::npos) << e;
  std::filesystem::remove(path);
}

/// Decode loop with keys that do not matter: checks the budget/buffer schedule of StreamingLLM
/// (sinks + most recent) token by token against the rule written out here.
TEST(PolicySchedule, StreamingLLMKeepsSinksAndRecentOnTheBufferSchedule) {
  const int B = 10, buffer = 4, sinks = 4;
  auto pol = make_policy(PolicySpec::parse("streamingllm:buffer=4", B));
  test::HandCache hc(2, 2, 1, 4, 0);
  std::vector<float> k(4, 1.f);
  for (int t = 0; t < 60; ++t) {
    for (int l = 0; l < 2; ++l) {
      hc.append(l, k.data(), t);
      LayerStep st = hc.step(l, 1, t + 1, false, false);
      const int32_t before = hc.cache->length(hc.seq, l, 0);
      pol->on_layer_step(st);
      hc.apply(st);
      const int32_t after = hc.cache->length(hc.seq, l, 0);
      if (before >= B + buffer) {
        ASSERT_EQ(after, B) << "t=" << t;
        std::vector<int32_t> want;
        for (int i = 0; i < sinks; ++i) want.push_back(i);
        for (int i = t - (B - sinks) + 1; i <= t; ++i) want.push_back(i);
        EXPECT_EQ(hc.positions(l, 0), want) << "t=" << t;
      } else {
        EXPECT_EQ(after, before);
      }
      EXPECT_LE(after, B + buffer - 1);
    }
  }
}

TEST(PolicySchedule, RatioBudgetFollowsTheContext) {
  auto pol = make_policy(PolicySpec::parse("streamingllm:budget_kind=ratio,ratio=0.5,buffer=1", 0));
  test::HandCache hc(1, 1, 1, 4, 0);
  std::vector<float> k(4, 1.f);
  for (int t = 0; t < 40; ++t) {
    hc.decode_step(*pol, k.data(), t);
    const int32_t budget_now = std::max<int32_t>((t + 1) / 2, 4 + 1);  // floor(0.5 · seen), ≥ sinks + 1
    EXPECT_LE(hc.cache->length(hc.seq, 0, 0), budget_now) << "t=" << t;
  }
  EXPECT_EQ(hc.cache->length(hc.seq, 0, 0), 20);
}

/// H2O: scores accumulate the column sums of every step; the keep-set is the newest B/2 plus the
/// B/2 older tokens with the largest accumulated attention (Zhang et al. 2023, Alg. 1).
TEST(PolicyH2O, AccumulatesAttentionAndKeepsHeavyHittersPlusRecent) {
  const int B = 8;
  auto pol = make_policy(PolicySpec::parse("h2o:buffer=1", B));
  ASSERT_TRUE(pol->needs().attention_colsum);
  test::HandCache hc(1, 2, 2, 4, pol->needs().num_scalars);
  std::vector<float> k(8, 0.5f);
  std::vector<std::vector<double>> acc(2);  // independent accumulation, by position
  uint64_t rng = 7;
  auto rnd = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((rng >> 33) % 1000) / 1000.f;
  };
  for (int t = 0; t < 30; ++t) {
    hc.append(0, k.data(), t);
    std::vector<std::vector<float>> cs(2);
    for (int h = 0; h < 2; ++h) {
      const int32_t L = hc.cache->length(hc.seq, 0, h);
      cs[h].resize(L);
      for (int32_t i = 0; i < L; ++i) {
        cs[h][i] = rnd();
        const int32_t pos = hc.cache->position(hc.seq, 0, h, i);
        if (static_cast<int32_t>(acc[h].size()) <= pos) acc[h].resize(pos + 1, 0.0);
        acc[h][pos] += cs[h][i];
      }
    }
    LayerStep st = hc.step(0, 1, t + 1, false, false);
    st.attention_colsum = &cs;
    std::vector<std::vector<int32_t>> before(2);
    for (int h = 0; h < 2; ++h) before[h] = hc.positions(0, h);
    pol->on_layer_step(st);
    hc.apply(st);
    for (int h = 0; h < 2; ++h) {
      const auto& pos = before[h];
      std::vector<int32_t> want = pos;
      if (static_cast<int>(pos.size()) > B) {
        const int recent = B / 2;
        std::vector<int32_t> older(pos.begin(), pos.end() - recent);
        std::stable_sort(older.begin(), older.end(), [&](int32_t a, int32_t b) { return acc[h][a] > acc[h][b]; });
        older.resize(B - recent);
        want.assign(older.begin(), older.end());
        want.insert(want.end(), pos.end() - recent, pos.end());
        std::sort(want.begin(), want.end());
      }
      EXPECT_EQ(hc.positions(0, h), want) << "t=" << t << " h=" << h;
    }
  }
}

TEST(PolicyRandom, SameSeedSameKeepSetsDifferentSeedDifferent) {
  auto run = [](const std::string& spec) {
    auto pol = make_policy(PolicySpec::parse(spec, 16));
    test::HandCache hc(1, 1, 1, 4, 0);
    std::vector<float> k(4, 1.f);
    for (int t = 0; t < 100; ++t) hc.decode_step(*pol, k.data(), t);
    return hc.positions(0, 0);
  };
  auto a = run("random:seed=3,buffer=8"), b = run("random:seed=3,buffer=8"), c = run("random:seed=4,buffer=8");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_LE(a.size(), 16u + 8u);
}

/// G-KV history: a token whose stored global score is large survives through max(α·F, Ŝ)
/// (Eq. 3) even when its current attention is the lowest; with alpha=0 it is evicted.
TEST(PolicyGKV, StoredGlobalScoreDecaysAndProtects) {
  for (double alpha : {0.8, 0.0}) {
    auto pol = make_policy(PolicySpec::parse("gkv:buffer=1,window=2,redundancy=false,alpha=" + std::to_string(alpha), 4));
    test::HandCache hc(1, 1, 1, 2, pol->needs().num_scalars);
    // Keys along x; the two window queries look along y, except token 0 whose key is -y (lowest).
    const float keys[6][2] = {{0, -3}, {1, 1}, {1, 2}, {1, 3}, {1, 0}, {1, 0}};
    for (int t = 0; t < 6; ++t) hc.append(0, keys[t], t);
    hc.queries = {0, 1, 0, 1};  // [Hq=1, w=2, D=2]
    hc.qw = 2;
    // Token 0 carries a stored global score of 1.0 from a previous compression.
    hc.cache->scalars(hc.seq, 0, 0, 0)[0] = 1.0f;
    hc.cache->scalars(hc.seq, 0, 0, 0)[1] = 1.0f;
    LayerStep st = hc.step(0, 1, 6, false, false);
    pol->on_layer_step(st);
    hc.apply(st);
    auto pos = hc.positions(0, 0);
    ASSERT_EQ(pos.size(), 4u);
    // Ŝ of tokens 1..3 rises with y; token 3 has Ŝ = 1, token 2 the next. With alpha 0.8 token 0
    // scores 0.8 > Ŝ(2) only if Ŝ(2) < 0.8 — compute Ŝ here to decide.
    auto sm = [](std::vector<double> v) {
      double m = *std::max_element(v.begin(), v.end()), s = 0;
      for (auto& x : v) s += (x = std::exp(x - m));
      for (auto& x : v) x /= s;
      return v;
    };
    const double sc = 1.0 / std::sqrt(2.0);
    std::vector<double> lg(6);
    for (int i = 0; i < 6; ++i) lg[i] = keys[i][1] * sc;
    auto p = sm(lg);  // both window queries are equal and see all 6 tokens (positions <= 4, 5)
    std::vector<double> p4(lg.begin(), lg.begin() + 5);
    auto q4 = sm(p4);  // query at position 4 does not see token 5
    std::vector<double> S(4);
    for (int i = 0; i < 4; ++i) S[i] = (p[i] + q4[i]) / 2;
    const double mx = *std::max_element(S.begin(), S.end());
    std::vector<double> F(4);
    for (int i = 0; i < 4; ++i) F[i] = S[i] / mx;
    F[0] = std::max(alpha * 1.0, F[0]);
    std::vector<int> order = {0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return F[a] > F[b]; });
    std::vector<int32_t> want = {order[0], order[1], 4, 5};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(pos, want) << "alpha=" << alpha;
    EXPECT_EQ(alpha > 0, std::find(pos.begin(), pos.end(), 0) != pos.end()) << "alpha=" << alpha;
  }
}

/// TRIM-KV global budget (DynamicBudgetTrimKVCache "global"): all heads and layers share
/// layers·Hkv·M tokens; the global top by (N + 1 − p)·log β survives.
TEST(PolicyTrimKV, GlobalBudgetKeepsGlobalTopScores) {
  auto pol = make_policy(PolicySpec::parse("trimkv:budget_kind=global,buffer=1,random_gates=1", 3));
  test::HandCache hc(2, 2, 2, 2, pol->needs().num_scalars);
  std::vector<float> k(4, 0.f);
  const int L = 6;
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < L; ++t) hc.append(l, k.data(), t);
  std::vector<std::pair<float, std::tuple<int, int, int>>> all;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < L; ++i) {
        const float lb = -0.01f * static_cast<float>(1 + ((l * 7 + h * 3 + i * 5) % 11));
        hc.cache->scalars(hc.seq, l, h, i)[0] = lb;
        all.push_back({(L + 1 - i) * lb, {l, h, i}});
      }
  std::stable_sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::set<std::tuple<int, int, int>> want;
  for (int i = 0; i < 2 * 2 * 3; ++i) want.insert(all[i].second);
  StepEnd se;
  se.cache = hc.cache.get();
  se.seq = hc.seq;
  se.num_layers = 2;
  se.num_kv_heads = 2;
  se.n_new = 1;
  se.seq_len = L;
  pol->on_step_end(se);
  std::set<std::tuple<int, int, int>> got;
  std::set<std::pair<int, int>> touched;
  for (auto& kp : se.keeps) {
    touched.insert({kp.layer, kp.head});
    for (int32_t i : kp.indices) got.insert({kp.layer, kp.head, i});
  }
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      if (!touched.count({l, h}))
        for (int i = 0; i < L; ++i) got.insert({l, h, i});
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kvb
