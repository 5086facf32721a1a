// The `oracle` policy (Golden eviction, seed-foresightkv.md §1.4 / §5.3):
//  * its pass-2 recording (block scores bs and future scores α of every (layer, kv_head, key))
//    equals a float64 recomputation from transformers' own attention probabilities on the tiny
//    random-weight models (tests/fixtures/policies/oracle_goldens.json, tools/gen_oracle_goldens.py),
//    and the keep-sets the engine applies equal the schedule those α imply;
//  * on stories260K (greedy), at the same budget and block length, the oracle follows the
//    full-cache continuation at least as long, and with a teacher-forced NLL no worse, than snapkv;
//  * misuse (no recorded trace, ratio budgets, mismatched scores) gives one clear kvb::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/oracle.h"
#include "engine/oracle_passes.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

const std::string kFixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures";
const std::string kStories = std::string(KVB_TEST_DATA_DIR) + "/models/stories260K-hf";

const nlohmann::json& goldens() {
  static nlohmann::json j = nlohmann::json::parse(read_file(kFixtures + "/policies/oracle_goldens.json"));
  return j;
}

std::unique_ptr<OraclePolicy> oracle(const std::string& spec, int64_t budget) {
  auto p = make_policy(PolicySpec::parse(spec, budget));
  return std::unique_ptr<OraclePolicy>(dynamic_cast<OraclePolicy*>(p.release()));
}

using ::kvb::test::error_has;

TEST(OracleGoldens, RecordedScoresEqualFloat64RecomputationFromTransformersAttention) {
  for (const auto& c : goldens()["oracle"]) {
    const std::string name = c["model"];
    const int64_t P = c["prompt_len"], B = c["budget"], L = c["block"];
    const std::string future = c["future"];
    SCOPED_TRACE(name + " P=" + std::to_string(P) + " B=" + std::to_string(B) + " L=" + std::to_string(L) + " " + future);
    auto model = Model::load_dir(kFixtures + "/models/" + name);
    const std::vector<int32_t> trace = c["trace"];
    const std::vector<int32_t> prompt(trace.begin(), trace.begin() + P), cont(trace.begin() + P, trace.end());
    auto pol = oracle("oracle:buffer=" + std::to_string(L) + ",future=" + future, B);
    auto s = prepare_oracle(model, *pol, prompt, cont);
    ASSERT_EQ(s->grid0, c["grid0"].get<int64_t>());
    ASSERT_EQ(s->num_blocks, c["num_blocks"].get<int64_t>());
    ASSERT_EQ(s->group, c["group"].get<int>());
    const std::vector<double> bs = c["bs"], alpha = c["alpha"];
    ASSERT_EQ(s->bs.size(), bs.size());
    ASSERT_EQ(s->alpha.size(), alpha.size());
    for (size_t i = 0; i < bs.size(); ++i) {
      ASSERT_NEAR(s->bs[i], bs[i], 2e-6 + 1e-5 * std::abs(bs[i])) << "bs[" << i << "]";
      ASSERT_NEAR(s->alpha[i], alpha[i], 2e-6 + 1e-5 * std::abs(alpha[i])) << "alpha[" << i << "]";
    }
    // Non-trivial: some key carries real future attention.
    EXPECT_GT(*std::max_element(alpha.begin(), alpha.end()), 0.05);

    // The real run: teacher-forced under the oracle; after every step, the positions each head
    // holds must equal the schedule computed from the float64 α.
    std::map<std::pair<int64_t, std::pair<int, int>>, std::vector<int32_t>> held;  // (s, (l, h)) -> positions
    Engine e(model, {}, std::move(pol));
    int64_t seq_len = P;
    bool first = true;
    e.on_step = [&](const KVCache& kv, SeqId sq) {
      if (!first) ++seq_len;
      first = false;
      for (int l = 0; l < kv.config().num_layers; ++l)
        for (int h = 0; h < kv.config().num_kv_heads; ++h) {
          std::vector<int32_t> p;
          for (int32_t i = 0; i < kv.length(sq, l, h); ++i) p.push_back(kv.position(sq, l, h, i));
          held[{seq_len, {l, h}}] = p;
        }
    };
    GenerationResult stats;
    e.score(prompt, cont, &stats);
    ASSERT_EQ(seq_len, static_cast<int64_t>(trace.size()));
    size_t checked = 0;
    for (const auto& snap : c["compressions"]) {
      const int64_t sl = snap["seq_len"];
      const int l = snap["layer"], h = snap["head"];
      const std::vector<int32_t> want = snap["positions"];
      EXPECT_EQ(held.at({sl, {l, h}}), want) << "layer " << l << " head " << h << " after " << sl << " tokens";
      ++checked;
    }
    EXPECT_GT(checked, 20u);
    EXPECT_GT(stats.evictions, 0);
  }
}

TEST(OraclePolicyErrors, MisuseGivesOneClearError) {
  // No recorded trace.
  auto model = Model::load_dir(kFixtures + "/models/tiny-llama3");
  Engine e(model, {}, make_policy(PolicySpec::parse("oracle:buffer=4", 8)));
  std::vector<int32_t> prompt{1, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  EXPECT_TRUE(error_has([&] { e.score(prompt, {3, 4}); }, {"two-pass"}));
  // Ratio budgets are not supported; budget must exceed the protected window (= L by default).
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("oracle:budget_kind=ratio", 64)); }, {"'budget_kind'"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("oracle:buffer=16", 16)); }, {"must exceed"}));
  EXPECT_TRUE(error_has([] { make_policy(PolicySpec::parse("oracle:future=median", 64)); }, {"'future'"}));
  // Scores recorded for another grid are refused.
  auto a = oracle("oracle:buffer=4", 8);
  prepare_oracle(model, *a, prompt, {3, 4, 5});
  auto b = oracle("oracle:buffer=2", 8);
  EXPECT_TRUE(error_has([&] { b->set_scores(a->scores()); }, {"recorded for budget 8 / L 4"}));
  // A sequence longer than the recorded trace.
  Engine e2(model, {}, std::move(a));
  EXPECT_TRUE(error_has([&] { e2.score(prompt, {3, 4, 5, 6, 7}); }, {"recorded trace has 13"}));
  // The resolved window is L.
  EXPECT_EQ(make_policy(PolicySpec::parse("oracle:buffer=16", 64))->resolved_params()["window"].get<int>(), 16);
}

double continuation_nll(const std::vector<float>& logits, const std::vector<int32_t>& cont, int V) {
  double nll = 0;
  for (size_t i = 0; i < cont.size(); ++i) {
    const float* z = &logits[i * V];
    double mx = -INFINITY;
    for (int v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
    double se = 0;
    for (int v = 0; v < V; ++v) se += std::exp(z[v] - mx);
    nll += -(z[cont[i]] - mx - std::log(se));
  }
  return nll;
}

TEST(OracleStories, FollowsFullCacheAtLeastAsWellAsSnapKV) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  std::shared_ptr<const Model> model = Model::load_dir(kStories);
  auto tk = tok::Tokenizer::from_dir(kStories);
  const int V = static_cast<int>(model->config().vocab_size);
  const int64_t B = 32;
  const int n_new = 120;
  const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily. She loved to play outside",
      "Tom had a big red ball. One day he went to the park with his mom",
      "The sun was shining and the birds were singing. A small dog",
      "Sara and Ben were best friends. They liked to build castles in the sand",
  };
  double nll_oracle = 0, nll_snap = 0, nll_full = 0;
  int64_t agree_oracle = 0, agree_snap = 0;
  for (const auto& text : prompts) {
    const std::vector<int32_t> prompt = tk.encode(text);
    const std::vector<int32_t> cont = oracle_full_continuation(model, prompt, n_new);
    ASSERT_EQ(cont.size(), static_cast<size_t>(n_new));
    auto prefix = [&](std::unique_ptr<Policy> p) {
      Engine e(model, {}, std::move(p));
      GenerationRequest r;
      r.prompt = prompt;
      r.max_new_tokens = n_new;
      const auto got = e.generate({r}, nullptr)[0].tokens;
      int64_t k = 0;
      while (k < static_cast<int64_t>(got.size()) && got[k] == cont[k]) ++k;
      return k;
    };
    auto nll = [&](std::unique_ptr<Policy> p) {
      Engine e(model, {}, std::move(p));
      return continuation_nll(e.score(prompt, cont), cont, V);
    };
    auto o1 = oracle("oracle:buffer=16", B);
    prepare_oracle(model, *o1, prompt, cont);
    auto o2 = oracle("oracle:buffer=16", B);
    o2->set_scores(o1->scores());
    agree_oracle += prefix(std::move(o1));
    nll_oracle += nll(std::move(o2));
    agree_snap += prefix(make_policy(PolicySpec::parse("snapkv:buffer=16", B)));
    nll_snap += nll(make_policy(PolicySpec::parse("snapkv:buffer=16", B)));
    nll_full += nll(nullptr);
  }
  const double n = static_cast<double>(prompts.size() * n_new);
  std::printf("mean NLL full %.4f oracle %.4f snapkv %.4f; greedy prefix agreement oracle %lld snapkv %lld of %d\n",
              nll_full / n, nll_oracle / n, nll_snap / n, static_cast<long long>(agree_oracle),
              static_cast<long long>(agree_snap), static_cast<int>(n));
  EXPECT_LE(nll_oracle, nll_snap);
  EXPECT_GE(agree_oracle, agree_snap);
  EXPECT_GT(nll_snap, nll_full);  // the comparison is not vacuous: snapkv does lose something
}

}  // namespace
}  // namespace kvb
