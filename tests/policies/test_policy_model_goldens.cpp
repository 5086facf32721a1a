// End-to-end keep-sets vs kvpress 0.5.5 on a real (tiny, random-weight) model: the goldens of
// tools/gen_policy_model_goldens.py run kvpress's StreamingLLM, SnapKV, KeyDiff, PyramidKV, TOVA,
// Knorm, ExpectedAttention, AdaKV(SnapKV) and DuoAttention (given pattern) presses on tests/fixtures/models/tiny-llama3 (llama3 RoPE) and tiny-qwen3 (q/k RMSNorm, yarn
// RoPE) with transformers (f32, eager) over a 200-token prompt (more than three prefill chunks),
// compress once at the end of the prompt, and record the kept positions of every (layer, kv head).
// kvbench runs the same prompt with prefill chunk 64 and with the whole prompt at once
// (compress=prompt_end) and must keep exactly the same positions.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "tests/support/model_goldens.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;

/// Positions held by every (layer, kv head), [layer][head], after the prompt.
std::vector<std::vector<std::vector<int32_t>>> kept_after_prompt(std::shared_ptr<const Model> m,
                                                                 const std::string& spec, int64_t budget, int chunk,
                                                                 const std::vector<int32_t>& prompt, int* steps) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  Engine e(m, eo, make_policy(PolicySpec::parse(spec, budget)));
  std::vector<std::vector<std::vector<int32_t>>> kept;
  *steps = 0;
  e.on_step = [&](const KVCache& kv, SeqId s) {  // the last call is the end of the prompt
    ++*steps;
    kept.assign(kv.config().num_layers, std::vector<std::vector<int32_t>>(kv.config().num_kv_heads));
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int h = 0; h < kv.config().num_kv_heads; ++h)
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) kept[l][h].push_back(kv.position(s, l, h, i));
  };
  e.score(prompt, {});
  return kept;
}

class PolicyModelGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyModelGoldens, KeepSetsMatchKvpressForEveryChunking) {
  const json& g = test::model_golden("policies/policy_model_goldens.json", GetParam());
  auto m = Model::load_dir(test::fixture(g["model"].get<std::string>()));
  const auto& cases = g["cases"];
  ASSERT_GE(cases.size(), 8u);
  std::set<std::string> presses;
  size_t heads_checked = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    std::string spec = c["spec"];
    if (const auto at = spec.find("{duo_pattern}"); at != std::string::npos)  // the generator's given pattern
      spec.replace(at, 13, test::fixture("policies/duo_pattern_tiny"));
    const int64_t budget = c["budget"];
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();  // each case's own drawn prompt
    const int L = static_cast<int>(prompt.size());
    ASSERT_GE(L, 3 * 64) << "the prompt must span at least three prefill chunks";
    presses.insert(c["press"].get<std::string>());
    const auto want = c["keep"].get<std::vector<std::vector<std::vector<int32_t>>>>();  // [layer][head]
    ASSERT_EQ(static_cast<int>(want.size()), m->config().num_layers) << name;
    for (int chunk : {64, L}) {
      SCOPED_TRACE(name + " (" + spec + ", budget " + std::to_string(budget) + "), prefill chunk " +
                   std::to_string(chunk));
      int steps = 0;
      const auto got = kept_after_prompt(m, spec, budget, chunk, prompt, &steps);
      EXPECT_EQ(steps, (L + chunk - 1) / chunk);
      ASSERT_EQ(got.size(), want.size());
      bool compressed = false;  // AdaKV and DuoAttention may leave some heads whole, never all
      for (size_t l = 0; l < want.size(); ++l) {
        ASSERT_EQ(got[l].size(), want[l].size());
        for (size_t h = 0; h < want[l].size(); ++h) {
          compressed |= static_cast<int>(want[l][h].size()) < L;
          EXPECT_EQ(got[l][h], want[l][h]) << "layer " << l << " kv head " << h;
          ++heads_checked;
        }
      }
      EXPECT_TRUE(compressed) << "the golden must compress";
    }
  }
  EXPECT_EQ(presses,
            (std::set<std::string>{"StreamingLLMPress", "SnapKVPress", "KeyDiffPress", "PyramidKVPress", "TOVAPress",
                                   "KnormPress", "ExpectedAttentionPress", "AdaKVPress", "DuoAttentionPress"}));
  EXPECT_EQ(heads_checked, cases.size() * 2 * m->config().num_layers * m->config().num_kv_heads);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PolicyModelGoldens, test::golden_models(), test::model_test_name);

}  // namespace
}  // namespace kvb
