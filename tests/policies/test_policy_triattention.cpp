// `triattention` against the authors' code (WeianMao/triattention, commit c3744ee): the goldens of
// tools/gen_triattention_goldens.py run the reference's apply_triattention_patch on
// tests/fixtures/models/tiny-llama3 (llama3 RoPE) and tiny-qwen3 (q/k norm, yarn RoPE with
// attention scaling) with seeded calibration statistics in the reference's .pt format, over an
// 816-token prompt and teacher-forced decode tokens, and record the positions each kv head keeps
// after every decode-time compression. kvbench reads the same statistics converted to
// safetensors (tools/convert_triattention_stats.py), runs the prompt with prefill chunk 64 and
// whole, and must keep exactly the same positions in every layer at every one of those steps and
// evict nothing in between. Also: the stats file's errors, the seeded random statistics, and
// what the policy refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/support/model_goldens.h"
#include "tests/policies/harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
using Held = test::HeldPositions;
using test::held_per_step;

std::string with_stats(std::string spec, const std::string& stats) {
  const auto at = spec.find("{stats}");
  if (at != std::string::npos) spec.replace(at, 7, stats);
  return spec;
}

class TriAttentionGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(TriAttentionGoldens, KeepSetsMatchTheReferenceAtEveryDecodeCompression) {
  const json& g = test::model_golden("policies/triattention_goldens.json", GetParam());
  auto m = Model::load_dir(test::fixture(g["model"].get<std::string>()));
  const std::string stats = test::fixture(g["stats"].get<std::string>());
  ASSERT_EQ(g["cases"].size(), 2u);
  int compressions = 0;
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"];
    const std::string spec = with_stats(c["spec"], stats);
    const int64_t budget = c["budget"];
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto forced = c["forced"].get<std::vector<int32_t>>();
    const int P = static_cast<int>(prompt.size());
    ASSERT_GE(P, 800) << "the fidelity prompt must be at least 800 tokens";
    std::map<int, std::vector<std::vector<int32_t>>> want;  // decode step -> [kv head] positions
    for (const auto& s : c["snapshots"]) want[s["decode_step"]] = s["keep"].get<std::vector<std::vector<int32_t>>>();
    ASSERT_GE(want.size(), 3u) << name << ": the golden must compress several times while decoding";
    for (int chunk : {64, P}) {
      SCOPED_TRACE(name + " (" + spec + ", budget " + std::to_string(budget) + "), prefill chunk " +
                   std::to_string(chunk));
      const std::vector<Held> steps = held_per_step(m, spec, budget, chunk, prompt, forced);
      const int prefill_steps = (P + chunk - 1) / chunk;
      ASSERT_EQ(static_cast<int>(steps.size()), prefill_steps + static_cast<int>(forced.size()));
      for (int d = 1; d <= static_cast<int>(forced.size()); ++d) {
        const Held& now = steps[prefill_steps + d - 1];
        const Held& before = steps[prefill_steps + d - 2];
        const auto it = want.find(d);
        for (size_t l = 0; l < now.size(); ++l)
          for (size_t h = 0; h < now[l].size(); ++h) {
            if (it != want.end()) {
              ASSERT_EQ(now[l][h], it->second[h]) << "decode step " << d << " layer " << l << " kv head " << h;
            } else {  // no compression: the previous step's tokens plus the new one
              std::vector<int32_t> grown = before[l][h];
              grown.push_back(static_cast<int32_t>(P + d - 1));
              ASSERT_EQ(now[l][h], grown) << "decode step " << d << " layer " << l << " kv head " << h;
            }
          }
        compressions += it != want.end();
      }
    }
  }
  EXPECT_GE(compressions, 2 * 2 * 3);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TriAttentionGoldens, test::golden_models(), test::model_test_name);

// The stats file must cover every (layer, query head) with head_dim / 2 values per field: the
// error names the file and the tensor. tiny-llama3's statistics (head_dim 24) on tiny-qwen3
// (head_dim 32) are refused at the first step; a file without a head is refused too.
TEST(TriAttention, StatsFileErrorsNameTheFileAndTensor) {
  const std::string llama_stats = test::fixture("policies/triattention_stats_tiny-llama3.safetensors");
  auto qwen = Model::load_dir(test::fixture("models/tiny-qwen3"));
  const std::vector<int32_t> prompt(40, 5);
  {
    Engine e(qwen, {}, make_policy(PolicySpec::parse("triattention:stats=" + llama_stats, 16)));
    EXPECT_TRUE(test::contains_all(test::input_error_of([&] {
                                     e.score(prompt, {6, 7});
                                   }),
                                   {"triattention_stats_tiny-llama3.safetensors", "layer00_head00.q_mean_real"}));
  }
  GateSource src;
  src.policy = "triattention";
  src.param = "stats";
  const std::string cut =
      test::save_without(GateWeights::load(llama_stats, src), "layer01_head03.q_abs_mean", "triattention_stats");
  auto llama = Model::load_dir(test::fixture("models/tiny-llama3"));
  Engine e(llama, {}, make_policy(PolicySpec::parse("triattention:stats=" + cut, 16)));
  EXPECT_TRUE(test::contains_all(test::input_error_of([&] {
                                   e.score(prompt, {6, 7});
                                 }),
                                 {"cut.safetensors", "layer01_head03.q_abs_mean"}));
  EXPECT_TRUE(test::contains_all(
      test::input_error_of([] { make_policy(PolicySpec::parse("triattention:stats=/nonexistent/x.safetensors", 16)); }),
      {"/nonexistent/x.safetensors"}));
}

// stats=random is a deterministic function of its seed, and a different seed scores differently.
TEST(TriAttention, RandomStatsFollowTheSeed) {
  auto m = Model::load_dir(test::fixture("models/tiny-qwen3"));
  std::vector<int32_t> prompt, forced;
  for (int i = 0; i < 60; ++i) prompt.push_back(3 + (i * 37) % 200);
  for (int i = 0; i < 40; ++i) forced.push_back(3 + (i * 53) % 200);
  auto last = [&](const std::string& spec) { return held_per_step(m, spec, 24, 64, prompt, forced).back(); };
  const Held a = last("triattention:stats=random,seed=1,buffer=8,prompt=compress");
  EXPECT_EQ(a, last("triattention:stats=random,seed=1,buffer=8,prompt=compress"));
  EXPECT_NE(a, last("triattention:stats=random,seed=2,buffer=8,prompt=compress"));
  // Cut to 24 at the first decode step (61 tokens), then whenever 8 more arrive: 39 = 4 x 8 + 7.
  EXPECT_EQ(a[0][0].size(), 31u);
}

TEST(TriAttention, RefusesChunkedCompressionAndAMissingBudget) {
  EXPECT_TRUE(test::contains_all(
      test::input_error_of([] { make_policy(PolicySpec::parse("triattention:compress=chunked", 64)); }), {"'compress'"}));
  EXPECT_TRUE(test::contains_all(test::input_error_of([] { make_policy(PolicySpec::parse("triattention", 0)); }),
                                 {"--budget"}));
  EXPECT_TRUE(test::contains_all(
      test::input_error_of([] { make_policy(PolicySpec::parse("triattention:select=per_layer", 64)); }), {"'select'"}));
}

}  // namespace
}  // namespace kvb
