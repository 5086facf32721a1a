// Behaviour of the training-free baselines added for issue 20 (tova, knorm, expected_attention,
// adakv, duoattention, morphkv, cake) inside the real engine on stories260K and on hand-built
// caches: what each keeps besides the golden keep-sets (tests/policies/test_policy_goldens.cpp,
// test_policy_model_goldens.cpp), and how bad input is reported.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

const std::string& kDir = test::kStoriesDir;
using test::stories;

GenerationRequest request(int new_tokens) {
  GenerationRequest r;
  r.prompt = {1, 403, 407, 261, 378, 287, 398, 268, 395, 264, 327, 279, 259, 407, 261, 391, 288, 300, 425, 46};
  r.max_new_tokens = new_tokens;
  return r;
}

using test::error_of;

/// Runs `spec` at `budget` for `steps` decode tokens, calling `check` after every step.
void run(const std::string& spec, int64_t budget, int steps, const std::function<void(const KVCache&, SeqId)>& check) {
  Engine e(stories(), {}, make_policy(PolicySpec::parse(spec, budget)));
  e.on_step = check;
  auto res = e.generate({request(steps)}, nullptr);
  ASSERT_EQ(static_cast<int>(res[0].tokens.size()), steps);
}

#define REQUIRE_STORIES() KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors")

TEST(Baselines, TovaKeepsOneSetPerLayer) {
  REQUIRE_STORIES();
  int compressed = 0;
  run("tova", 24, 60, [&](const KVCache& kv, SeqId s) {
    for (int l = 0; l < kv.config().num_layers; ++l) {
      ASSERT_LE(kv.length(s, l, 0), 25);
      for (int h = 1; h < kv.config().num_kv_heads; ++h) {
        ASSERT_EQ(kv.length(s, l, h), kv.length(s, l, 0));
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) ASSERT_EQ(kv.position(s, l, h, i), kv.position(s, l, 0, i));
      }
    }
    compressed += kv.length(s, 0, 0) == 24;
  });
  EXPECT_GT(compressed, 50) << "buffer=1 evicts on every step once past the budget";
}

TEST(Baselines, AdaKVSharesTheLayerBudgetAndFreesRealMemory) {
  REQUIRE_STORIES();
  const int B = 32, buffer = 16;
  bool ragged = false;
  size_t bytes_peak = 0;
  Engine e(stories(), {}, make_policy(PolicySpec::parse("adakv:window=8,buffer=16", B)));
  int64_t full_tokens = 0;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    const int H = kv.config().num_kv_heads;
    for (int l = 0; l < kv.config().num_layers; ++l) {
      int64_t total = 0;
      for (int h = 0; h < H; ++h) {
        total += kv.length(s, l, h);
        ragged |= kv.length(s, l, h) != kv.length(s, l, 0);
      }
      ASSERT_LT(total, static_cast<int64_t>(H) * (B + buffer)) << "layer " << l;
    }
    ++full_tokens;
    bytes_peak = std::max(bytes_peak, kv.bytes(s));
  };
  auto res = e.generate({request(200)}, nullptr);
  EXPECT_TRUE(ragged) << "AdaKV gives the heads of a layer different lengths";
  // kvpress masks AdaKV's pruned keys: every head keeps all 220 tokens. kvbench frees them.
  const auto& c = stories()->config();
  const size_t masked_bytes = static_cast<size_t>(c.num_layers) * c.num_kv_heads * 220 * 2 * c.head_dim * sizeof(float);
  EXPECT_LT(res[0].kv_token_bytes_peak, masked_bytes / 3);
}

TEST(Baselines, DuoAttentionStreamingHeadsRollRetrievalHeadsKeepAll) {
  REQUIRE_STORIES();
  const auto& c = stories()->config();
  const int n_heads = static_cast<int>(c.num_layers * c.num_kv_heads);
  for (double sparsity : {0.25, 0.5}) {
    SCOPED_TRACE(sparsity);
    int step = 0;
    run("duoattention:random_pattern=3,sinks=4,recent=12,sparsity=" + std::to_string(sparsity), 0, 40,
        [&](const KVCache& kv, SeqId s) {
          ++step;
          const int32_t seen = 20 + step - 1;
          int streaming = 0;
          for (int l = 0; l < kv.config().num_layers; ++l)
            for (int h = 0; h < kv.config().num_kv_heads; ++h) {
              const int32_t L = kv.length(s, l, h);
              if (L == seen) continue;  // a retrieval head
              ++streaming;
              ASSERT_EQ(L, 16);
              for (int32_t i = 0; i < 4; ++i) ASSERT_EQ(kv.position(s, l, h, i), i);
              ASSERT_EQ(kv.position(s, l, h, 15), seen - 1);
            }
          ASSERT_EQ(streaming, static_cast<int>(std::llround(n_heads * sparsity)));
        });
  }
}

TEST(Baselines, DuoAttentionPatternErrorsNameTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "kvb_duo_pattern_test";
  fs::create_directories(dir);
  std::string e = error_of([] { make_policy(PolicySpec::parse("duoattention", 0)); });
  EXPECT_TRUE(test::contains_all(e, {"pattern=PATH", "full_attention_heads.tsv", "random_pattern=SEED"})) << e;
  e = error_of([] { make_policy(PolicySpec::parse("duoattention:pattern=/nonexistent/duo", 0)); });
  EXPECT_NE(e.find("not found"), std::string::npos) << e;
  std::ofstream(dir / "full_attention_heads.tsv") << "0.5\t0.25\n0.75\tabc\n";
  std::ofstream(dir / "config.json") << R"({"sink_size": 4, "recent_size": 16})";
  e = error_of([&] { make_policy(PolicySpec::parse("duoattention:pattern=" + dir.string(), 0)); });
  EXPECT_NE(e.find("full_attention_heads.tsv: line 2: 'abc' is not a number"), std::string::npos) << e;
  std::ofstream(dir / "full_attention_heads.tsv") << "0.5\t0.25\n0.75\n";
  e = error_of([&] { make_policy(PolicySpec::parse("duoattention:pattern=" + dir.string(), 0)); });
  EXPECT_NE(e.find("line 2: 1 values, the first row has 2"), std::string::npos) << e;
  std::ofstream(dir / "config.json") << R"({"sink_size": -4, "recent_size": 16})";
  std::ofstream(dir / "full_attention_heads.tsv") << "0.5\t0.25\n";
  e = error_of([&] { make_policy(PolicySpec::parse("duoattention:pattern=" + dir.string(), 0)); });
  EXPECT_NE(e.find("config.json: sink_size: expected a non-negative integer"), std::string::npos) << e;
  // A valid file of the wrong shape fails at the first step, naming both shapes.
  std::ofstream(dir / "config.json") << R"({"sink_size": 4, "recent_size": 16})";
  auto pol = make_policy(PolicySpec::parse("duoattention:pattern=" + dir.string(), 0));
  EXPECT_EQ(pol->resolved_params()["sinks"], 4);
  EXPECT_EQ(pol->resolved_params()["recent"], 16);
  test::HandCache hc(2, 4, 2, 4, 0);
  LayerStep st = hc.step(0, 0, 0, true, true);
  e = error_of([&] { pol->on_layer_step(st); });
  EXPECT_NE(e.find("1 layers x 2 kv heads, the model 2 x 2"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(Baselines, ExpectedAttentionNeedsPreRopeQueries) {
  auto pol = make_policy(PolicySpec::parse("expected_attention", 16));
  test::HandCache hc(1, 4, 2, 4, 0);
  std::vector<float> k(8, 0.5f);
  for (int i = 0; i < 20; ++i) hc.append(0, k.data(), i);
  LayerStep st = hc.step(0, 20, 20, true, true);
  const std::string e = error_of([&] { pol->on_layer_step(st); });
  EXPECT_NE(e.find("queries_pre_rope"), std::string::npos) << e;
  EXPECT_NE(e.find("CPU backend"), std::string::npos) << e;
}

TEST(Baselines, CakeKeepsItsLayerBudgetsWhileDecoding) {
  REQUIRE_STORIES();
  const int B = 40, w = 8, buffer = 16;
  const auto& c = stories()->config();
  std::vector<int32_t> after_prompt;
  int step = 0;
  // A 20-token prompt is under the budget: the first compression (and allocation) is at 56 tokens.
  run("cake:window=8,buffer=16", B, 150, [&](const KVCache& kv, SeqId s) {
    ++step;
    int64_t total = 0;
    std::vector<int32_t> len;
    for (int l = 0; l < kv.config().num_layers; ++l) {
      for (int h = 1; h < kv.config().num_kv_heads; ++h) ASSERT_EQ(kv.length(s, l, h), kv.length(s, l, 0));
      len.push_back(kv.length(s, l, 0));
      total += len.back();
    }
    if (20 + step - 1 < B + buffer) {
      ASSERT_EQ(total, static_cast<int64_t>(c.num_layers) * (20 + step - 1));
    } else if (after_prompt.empty()) {
      after_prompt = len;  // the allocation: the layers share (B - w) x layers selected tokens
      EXPECT_EQ(total, static_cast<int64_t>(c.num_layers) * B);
      EXPECT_NE(*std::min_element(len.begin(), len.end()), *std::max_element(len.begin(), len.end()));
    } else {
      for (size_t l = 0; l < len.size(); ++l) {
        ASSERT_GE(len[l], after_prompt[l]) << "layer " << l;
        ASSERT_LT(len[l], after_prompt[l] + buffer) << "layer " << l;
      }
    }
  });
  EXPECT_FALSE(after_prompt.empty());
  (void)w;
}

}  // namespace
}  // namespace kvb
