// LazyEviction (engine/policies/lazyeviction.cpp) against the goldens of
// tools/gen_lazyeviction_goldens.py: a line-for-line Python port of the authors' reference
// (WeianMao/triattention @ e7a0eb18, LazyEviction/model/kv_utils.py and temp_cacheobs.py) driving
// transformers' Llama on tests/fixtures/models/tiny-llama3 (4 query heads over 2 kv heads), a
// teacher-forced decode. After every decode step, every (layer, query head)'s kept positions and
// its `last` / `mri` clocks are equal, and the logits agree (each query head reads only its own
// set); the kv head's cache is the union of its group's sets. Tie rule in both: higher score,
// then the newer token.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/lazyeviction.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/model_goldens.h"
#include "tests/policies/harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
using Entry = LazyEvictionPolicy::Entry;
/// After one decode step: [layer][tracked head] -> entries.
using Snapshot = std::vector<std::vector<std::vector<Entry>>>;

struct LeRun {
  std::vector<Snapshot> steps;  // one per decode step
  std::vector<float> logits;
  int64_t max_head_tokens = 0;
};

const json& golden() {
  static const json g = parse_json_file(test::fixture("policies/lazyeviction_goldens.json"));
  return g;
}

LeRun run(const std::string& spec, int64_t budget, int chunk) {
  const json& g = golden();
  auto m = Model::load_dir(test::fixture(g["model"].get<std::string>()));
  const int Hq = static_cast<int>(m->config().num_heads), Hkv = static_cast<int>(m->config().num_kv_heads);
  auto owned = make_policy(PolicySpec::parse(spec, budget));
  auto* pol = dynamic_cast<LazyEvictionPolicy*>(owned.get());
  EXPECT_NE(pol, nullptr);
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  Engine e(m, eo, std::move(owned));
  LeRun r;
  const bool expand = spec.find("gqa=max") == std::string::npos;
  const int T = expand ? Hq : Hkv, G = expand ? Hq / Hkv : 1;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    if (pol->tracked(s, 0, 0).empty()) return;  // a prompt step
    Snapshot snap(kv.config().num_layers);
    for (int l = 0; l < kv.config().num_layers; ++l) {
      for (int k = 0; k < T; ++k) snap[l].push_back(pol->tracked(s, l, k));
      for (int h = 0; h < Hkv; ++h) {  // the cache holds exactly the union of the group's sets
        std::set<int32_t> uni;
        for (int g2 = 0; g2 < G; ++g2)
          for (const Entry& x : snap[l][h * G + g2]) uni.insert(x.pos);
        std::vector<int32_t> held;
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) held.push_back(kv.position(s, l, h, i));
        EXPECT_EQ(held, std::vector<int32_t>(uni.begin(), uni.end())) << "layer " << l << " kv head " << h;
        r.max_head_tokens = std::max<int64_t>(r.max_head_tokens, kv.length(s, l, h));
      }
    }
    r.steps.push_back(std::move(snap));
  };
  r.logits = e.score(g["prompt"].get<std::vector<int32_t>>(), g["forced"].get<std::vector<int32_t>>());
  return r;
}

/// Number of decode steps at which some (layer, head) differs from the golden.
int mismatches(const LeRun& r) {
  const json& steps = golden()["steps"];
  if (r.steps.size() != steps.size()) return 1 << 20;
  int bad = 0;
  for (size_t t = 0; t < steps.size(); ++t) {
    bool same = true;
    for (size_t l = 0; l < steps[t].size(); ++l) {
      if (r.steps[t][l].size() != steps[t][l].size()) {  // gqa=max tracks kv heads, not query heads
        same = false;
        continue;
      }
      for (size_t h = 0; h < steps[t][l].size(); ++h) {
        const auto& want = steps[t][l][h];
        const auto& got = r.steps[t][l][h];
        std::vector<int32_t> pos;
        std::vector<int64_t> last, mri;
        for (const Entry& x : got) pos.push_back(x.pos), last.push_back(x.last), mri.push_back(x.mri);
        same &= pos == want[0].get<std::vector<int32_t>>() && last == want[1].get<std::vector<int64_t>>() &&
                mri == want[2].get<std::vector<int64_t>>();
      }
    }
    bad += !same;
  }
  return bad;
}

TEST(LazyEvictionGoldens, KeepSetsAndClocksEqualThePortedReferenceAtEveryDecodeStep) {
  const json& g = golden();
  for (int chunk : {64, 7}) {  // one prompt step, or several: the tracking starts at the first decode step
    SCOPED_TRACE(chunk);
    const LeRun r = run(g["spec"], g["budget"], chunk);
    EXPECT_EQ(mismatches(r), 0);
    const auto want = g["logits"];
    const size_t V = want[0].size();
    ASSERT_EQ(r.logits.size(), want.size() * V);
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); ++i)
      for (size_t v = 0; v < V; ++v)
        worst = std::max(worst, std::abs(static_cast<double>(r.logits[i * V + v]) - want[i][v].get<double>()));
    EXPECT_LT(worst, 1e-4) << "each query head attends over its own set only";
    // Per query head at most max(prompt, C) + W; the kv head union holds more.
    const int64_t C = std::max(g["budget"].get<int64_t>(), static_cast<int64_t>(g["prompt"].size())), W = 4;
    for (const auto& snap : r.steps)
      for (const auto& layer : snap)
        for (const auto& head : layer) EXPECT_LE(static_cast<int64_t>(head.size()), C + W);
    EXPECT_GT(r.max_head_tokens, C + W) << "query heads of a group keep different tokens";
  }
}

TEST(LazyEvictionGoldens, AChangedParameterFailsTheGolden) {
  const json& g = golden();
  const std::string spec = g["spec"];
  EXPECT_GT(mismatches(run(spec + ",gqa=max", g["budget"], 64)), 0);
  EXPECT_GT(mismatches(run("lazyeviction:buffer=4,alpha=0.05", g["budget"], 64)), 0);
  EXPECT_GT(mismatches(run("lazyeviction:buffer=5,alpha=0.04", g["budget"], 64)), 0);
  EXPECT_GT(mismatches(run(spec, int64_t{g["budget"]} + 1, 64)), 0);
}

TEST(LazyEvictionGoldens, PerKvHeadAdaptationKeepsOneSetOfAtMostBudgetPlusWindow) {
  const json& g = golden();
  const LeRun r = run(std::string(g["spec"]) + ",gqa=max", g["budget"], 64);
  ASSERT_EQ(r.steps.size(), g["steps"].size());
  EXPECT_LE(r.max_head_tokens, static_cast<int64_t>(g["prompt"].size()) + 4);  // max(prompt, C) + W
  EXPECT_EQ(r.steps.back().back().back().size(), static_cast<size_t>(g["budget"]) + 0)
      << "the last step (32) evicts down to C";
}

TEST(LazyEviction, ImportanceScoreValues) {
  EXPECT_NEAR(LazyEvictionPolicy::importance(0, 1), 2.0 / (1.0 + std::exp(1.0)) + 1.0, 1e-4);  // 1.5379
  EXPECT_NEAR(LazyEvictionPolicy::importance(0, 1), 1.5379, 1e-4);
  EXPECT_NEAR(LazyEvictionPolicy::importance(0, 2), 1.0758, 1e-4);
  EXPECT_NEAR(LazyEvictionPolicy::importance(5, 10), 0.3651, 1e-4);
  EXPECT_LT(LazyEvictionPolicy::importance(1, 0), 1e-12);  // never hit, a step old: about 0, evicted first
  EXPECT_EQ(LazyEvictionPolicy::importance(1 << 30, 0), 0.0);
}

TEST(LazyEviction, BudgetBelowTheWindowIsAnError) {
  EXPECT_TRUE(test::contains_all(test::policy_error("lazyeviction:buffer=8", 7), {"budget 7 is below buffer 8"}));
  EXPECT_NO_THROW(make_policy(PolicySpec::parse("lazyeviction:buffer=8", 8)));
  EXPECT_THROW(make_policy(PolicySpec::parse("lazyeviction:gqa=mean", 200)), Error);
}

}  // namespace
}  // namespace kvb
