// `kvzap` against kvpress (NVIDIA/kvpress, commit 8bb29b9): the goldens of tools/gen_kvzap_goldens.py
// run kvpress's DMSPress(KVzapPress) with decoding on tests/fixtures/models/tiny-llama3 and
// tiny-qwen3 (an 816-token prompt, then teacher-forced decode tokens) with seeded KVzap scorers
// written by kvpress's KVzapModel.save_pretrained — the released checkpoints' format (config.json +
// model.safetensors; an MLP and the linear form) — and record the positions each (layer, kv head)
// still attends to after the prompt and every 16 decode steps. kvbench loads the same checkpoint
// directories, runs the prompt with prefill chunk 64 and whole, and must hold exactly those
// positions. Also: a checkpoint that does not fit the model is refused naming the tensor.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/support/model_goldens.h"
#include "tests/support/stories.h"
#include "tests/policies/harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
using Held = test::HeldPositions;
using test::held_per_step;

class KVzapGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(KVzapGoldens, KeptPositionsMatchKvpressDMSPressWithKVzap) {
  const json& g = test::model_golden("policies/kvzap_goldens.json", GetParam());
  auto m = Model::load_dir(test::fixture(g["model"].get<std::string>()));
  ASSERT_EQ(g["cases"].size(), 2u);
  std::set<std::string> forms;
  for (const auto& c : g["cases"]) {
    forms.insert(c["form"].get<std::string>());
    std::string spec = c["spec"];
    spec.replace(spec.find("{scorer}"), 8, test::fixture(c["scorer"].get<std::string>()));
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto forced = c["forced"].get<std::vector<int32_t>>();
    const int P = static_cast<int>(prompt.size());
    ASSERT_GE(P, 800);
    bool evicted_at_prompt = false, evicted_decoding = false;
    for (int chunk : {64, P}) {
      SCOPED_TRACE(c["name"].get<std::string>() + " (" + spec + "), prefill chunk " + std::to_string(chunk));
      const std::vector<Held> steps = held_per_step(m, spec, 0, chunk, prompt, forced);
      const int prefill_steps = (P + chunk - 1) / chunk;
      ASSERT_EQ(static_cast<int>(steps.size()), prefill_steps + static_cast<int>(forced.size()));
      size_t prev_total = 0;
      for (const auto& s : c["snapshots"]) {
        const int d = s["decode_step"];
        const Held want = s["keep"].get<Held>();
        const Held& got = steps[prefill_steps + d - 1];
        ASSERT_EQ(got, want) << "decode step " << d;
        size_t total = 0;
        for (const auto& l : want)
          for (const auto& h : l) total += h.size();
        const size_t full = want.size() * want[0].size() * static_cast<size_t>(P + d);
        if (d == 0) evicted_at_prompt |= total < full;
        if (d > 0) evicted_decoding |= total < prev_total + want.size() * want[0].size() * 16;
        prev_total = total;
      }
    }
    EXPECT_TRUE(evicted_at_prompt) << "the golden must evict at the end of the prompt";
    EXPECT_TRUE(evicted_decoding) << "the golden must evict while decoding";
  }
  EXPECT_EQ(forms, (std::set<std::string>{"mlp", "linear"}));
}

INSTANTIATE_TEST_SUITE_P(TinyModels, KVzapGoldens, test::golden_models(), test::model_test_name);

// tiny-llama3's scorer (hidden size 64, 2 kv heads) on stories260K (hidden size 64, 4 kv heads):
// the output layer does not fit, and the error names the file and the tensor.
TEST(KVzap, ACheckpointThatDoesNotFitTheModelIsRefused) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const std::string dir = test::fixture("policies/kvzap_mlp_tiny-llama3");
  Engine e(test::stories_model(), {}, make_policy(PolicySpec::parse("kvzap:scorer=" + dir, 0)));
  EXPECT_TRUE(test::contains_all(test::input_error_of([&] {
                                   e.score({1, 5, 6, 7}, {8});
                                 }),
                                 {"model.safetensors", "the scorers cover 2 decoder layers; this model has 5"}));
  EXPECT_TRUE(test::contains_all(test::input_error_of([] { make_policy(PolicySpec::parse("kvzap", 0)); }),
                                 {"scorer=", "random_scorer="}));
}

}  // namespace
}  // namespace kvb
