// budget_kind=threshold (issue 41, docs/policies.md "Threshold budgets"): the keep-sets against
// kvpress 0.5.5's DMSPress around KnormPress (tests/fixtures/policies/threshold_goldens.json,
// tools/gen_threshold_goldens.py: prompts of 820–1000 tokens, then decoded tokens one by one), the
// rule on hand-built keys against an expectation written out here, and the parameter errors.
#include <cmath>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using ::kvb::test::error_has;

const nlohmann::json& goldens() {
  static nlohmann::json j = [] {
    std::ifstream in(test::fixture("policies/threshold_goldens.json"));
    EXPECT_TRUE(in.good()) << "missing tests/fixtures/policies/threshold_goldens.json";
    nlohmann::json r;
    if (in.good()) in >> r;
    return r;
  }();
  return j;
}

std::vector<std::vector<int32_t>> positions(const test::HandCache& hc, int hkv) {
  std::vector<std::vector<int32_t>> out;
  for (int h = 0; h < hkv; ++h) out.push_back(hc.positions(0, h));
  return out;
}

// kvbench's knorm with budget_kind=threshold keeps, after the prompt and after each decode step,
// exactly the tokens kvpress's DMSPress(KnormPress) leaves unmasked.
TEST(ThresholdBudget, KeepSetsEqualKvpressDMSPress) {
  const auto& cases = goldens()["cases"];
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int hkv = c["num_kv_heads"], d = c["head_dim"], L = c["prompt_len"], N = c["total_len"];
    ASSERT_GE(L, 800);
    const auto keys = c["keys"].get<std::vector<float>>();  // [Hkv, N, D]
    ASSERT_EQ(keys.size(), static_cast<size_t>(hkv) * N * d);
    auto token = [&](int i) {
      std::vector<float> t(static_cast<size_t>(hkv) * d);
      for (int h = 0; h < hkv; ++h)
        for (int e = 0; e < d; ++e) t[h * d + e] = keys[(static_cast<size_t>(h) * N + i) * d + e];
      return t;
    };
    auto pol = make_policy(PolicySpec::parse(c["spec"].get<std::string>(), 0));
    test::HandCache hc(1, hkv, hkv, d, pol->needs().num_scalars);
    for (int i = 0; i < L; ++i) hc.append(0, token(i).data(), i);
    LayerStep st = hc.step(0, L, L, true, true);
    pol->on_layer_step(st);
    hc.apply(st);
    EXPECT_EQ(positions(hc, hkv), c["keep_prefill"].get<std::vector<std::vector<int32_t>>>());
    size_t next = 0;
    const auto& checkpoints = c["checkpoints"];
    for (int t = L; t < N; ++t) {
      hc.decode_step(*pol, token(t).data(), t);
      if (next < checkpoints.size() && checkpoints[next]["length"].get<int>() == t + 1) {
        EXPECT_EQ(positions(hc, hkv), checkpoints[next]["keep"].get<std::vector<std::vector<int32_t>>>())
            << "after " << t + 1 << " tokens";
        ++next;
      }
    }
    EXPECT_EQ(next, checkpoints.size());
    // The golden evicts something at the prompt end, so the test cannot pass by keeping all.
    size_t kept = 0;
    for (const auto& k : c["keep_prefill"]) kept += k.size();
    EXPECT_LT(kept, static_cast<size_t>(hkv) * L);
  }
}

// The rule on keys of known norms: sinks and the `window` newest are kept whatever their score;
// the rest is kept iff -||k|| >= threshold; buffer = 3 compresses at decode positions divisible by 3.
TEST(ThresholdBudget, KeepsSinksWindowAndScoresAtOrAboveTheThreshold) {
  const int d = 2, L = 40, window = 5, sinks = 2;
  auto norm_of = [](int pos) { return 1.0 + (pos * 7 % 11) * 0.25; };  // 1 .. 3.5
  auto key = [&](int pos) { return std::vector<float>{static_cast<float>(norm_of(pos)), 0.f}; };
  const double thr = -2.0;  // keep norms <= 2
  auto pol =
      make_policy(PolicySpec::parse("knorm:budget_kind=threshold,threshold=-2,window=5,sinks=2,buffer=3,decode=true", 0));
  test::HandCache hc(1, 1, 1, d, 0);
  for (int i = 0; i < L; ++i) hc.append(0, key(i).data(), i);
  LayerStep st = hc.step(0, L, L, true, true);
  pol->on_layer_step(st);
  hc.apply(st);
  std::set<int> evicted;
  auto expect = [&](int len) {
    std::vector<int32_t> want;
    for (int p = 0; p < len; ++p)
      if (!evicted.count(p)) want.push_back(p);
    return want;
  };
  auto judge = [&](int len) {  // what one compression at length `len` evicts
    for (int p = sinks; p < len - window; ++p)
      if (-norm_of(p) < thr) evicted.insert(p);
  };
  judge(L);
  EXPECT_EQ(hc.positions(0, 0), expect(L));
  EXPECT_LT(hc.positions(0, 0).size(), static_cast<size_t>(L));
  for (int t = L; t < L + 30; ++t) {
    hc.decode_step(*pol, key(t).data(), t);
    if ((t + 1) % 3 == 0) judge(t + 1);
    ASSERT_EQ(hc.positions(0, 0), expect(t + 1)) << "t=" << t;
  }
}

// decode=false: only the prompt end compresses; decoded tokens are never evicted.
TEST(ThresholdBudget, DecodeFalseCompressesOnlyAtThePromptEnd) {
  auto pol =
      make_policy(PolicySpec::parse("knorm:budget_kind=threshold,threshold=-1.5,window=4,buffer=1,decode=false", 0));
  test::HandCache hc(1, 1, 1, 2, 0);
  const std::vector<float> big = {3.f, 0.f}, small = {1.f, 0.f};
  for (int i = 0; i < 20; ++i) hc.append(0, (i % 2 ? big : small).data(), i);
  LayerStep st = hc.step(0, 20, 20, true, true);
  pol->on_layer_step(st);
  hc.apply(st);
  EXPECT_EQ(hc.cache->length(hc.seq, 0, 0), 8 + 4);  // the 8 small keys of 0..15 and the window 16..19
  for (int t = 20; t < 40; ++t) hc.decode_step(*pol, big.data(), t);
  EXPECT_EQ(hc.cache->length(hc.seq, 0, 0), 12 + 20);
}

// Every scoring policy accepts the threshold kind without a budget (or refuses it naming
// budget_kind when its keep rule is not "score, keep the top"); the refusers are the five below.
TEST(ThresholdBudget, EveryScheduledPolicyBuildsOrRefusesByName) {
  std::set<std::string> built, refused;
  for (const auto& info : policy_registry()) {
    bool has_kind = false, score_key = false;
    for (const auto& p : info.params) {
      has_kind |= p.key == "budget_kind";
      score_key |= p.key == "score_threshold";
    }
    if (!has_kind) continue;
    std::string extra = std::string("budget_kind=threshold,") + (score_key ? "score_threshold" : "threshold") + "=0.5";
    if (info.tests.params.find("window=") == std::string::npos) extra += ",window=4";
    std::string err;
    try {
      make_policy(info.test_spec(0, extra));
    } catch (const Error& e) {
      err = e.what();
    }
    if (err.empty()) {
      built.insert(info.name);
      auto j = make_policy(info.test_spec(0, extra))->resolved_params();
      EXPECT_DOUBLE_EQ(j[score_key ? "score_threshold" : "threshold"].get<double>(), 0.5) << info.name;
    } else {
      EXPECT_NE(err.find("'budget_kind'"), std::string::npos) << info.name << ": " << err;
      refused.insert(info.name);
    }
  }
  EXPECT_EQ(refused, (std::set<std::string>{"adakv", "cake", "chunkkv", "criticaladakv", "criticalkv",
                                            "entropy_chunkkv", "lukv", "oracle", "streamingllm"}));
  for (const char* n : {"snapkv", "knorm", "h2o", "rkv", "gkv", "tova", "keydiff", "trimkv", "expected_attention"})
    EXPECT_TRUE(built.count(n)) << n;
}

TEST(ThresholdBudget, BadSpecsNameTheParameter) {
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("snapkv:budget_kind=threshold", 0)); },
                        {"'threshold'", "required"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("snapkv:budget_kind=threshold,threshold=abc", 0)); },
                        {"'threshold'"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("snapkv:budget_kind=threshold,threshold=inf", 0)); },
                        {"'threshold'", "finite"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("snapkv:threshold=0.1", 64)); },
                        {"'threshold'", "budget_kind=threshold"}));
  EXPECT_TRUE(
      error_has([] { make_policy(PolicySpec::parse("h2o:budget_kind=threshold,threshold=0.1", 0)); }, {"'window'"}));
  // R-KV's own `threshold` is its redundancy cosine; the eviction threshold is score_threshold.
  EXPECT_NO_THROW(make_policy(PolicySpec::parse("rkv:threshold=0.3", 64)));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("rkv:budget_kind=threshold", 0)); },
                        {"'score_threshold'", "required"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("streamingllm:budget_kind=threshold,threshold=1", 0)); },
                        {"'budget_kind'", "threshold"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("snapkv:budget_kind=percent", 64)); },
                        {"'budget_kind'", "threshold"}));
}

}  // namespace
}  // namespace kvb
