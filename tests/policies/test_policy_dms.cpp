// `dms` against NVIDIA's reference code (Model-Optimizer experimental/dms, commit a2fbac7ba): the
// goldens of tools/gen_dms_goldens.py run transformers' Qwen3 on tests/fixtures/models/tiny-qwen3
// with every attention block driven by the reference's prepare_attention_input (decision logits
// from the residual stream) and dms_attn_eval_mode over its DMSCache (prefill: the whole 816-token
// prompt in one FlexAttention call with the delayed-eviction mask; decode: its paged cache), with
// seeded decision weights saved by torch in the checkpoint's tensor names, then teacher-force 64
// decode tokens. kvbench must give the same logits after the prompt and after every decode token,
// and after EVERY step (each prompt token, each decode token) hold exactly the tokens the next
// query may read by the reference's decisions — at any --prefill-chunk. Also: a DMS checkpoint
// directory loads as a model and as the policy's weights (its config.json's window), and what is
// refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/policies/harness.h"
#include "tests/support/model_goldens.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Held = test::HeldPositions;

std::string with_alpha(std::string spec, const std::string& alpha) {
  const auto at = spec.find("{alpha}");
  if (at != std::string::npos) spec.replace(at, 7, alpha);
  return spec;
}

/// What the reference lets the query at `next` read of one (layer, kv head) after position
/// `last` was processed: every j <= last except a token marked by token j + 1 (already seen) that
/// is more than `window` behind `next`.
std::vector<int32_t> readable(const std::string& marks, int64_t last, int64_t next, int64_t window) {
  std::vector<int32_t> out;
  for (int64_t j = 0; j <= last; ++j)
    if (!(j + 1 <= last && marks[static_cast<size_t>(j)] == '1' && next - j > window))
      out.push_back(static_cast<int32_t>(j));
  return out;
}

struct DmsRun {
  std::vector<Held> steps;
  std::vector<float> logits;  // [forced + 1, V]
};

DmsRun run(std::shared_ptr<const Model> m, const std::string& spec, int chunk, const std::vector<int32_t>& prompt,
           const std::vector<int32_t>& forced) {
  DmsRun r;
  r.steps = test::held_per_step(std::move(m), spec, 0, chunk, prompt, forced, &r.logits);
  return r;
}

const json& golden() { return test::model_golden("policies/dms_goldens.json", "models/tiny-qwen3"); }

TEST(DmsGoldens, LogitsAndReadableTokensMatchTheReferenceAfterEveryStep) {
  const json& g = golden();
  auto m = Model::load_dir(test::fixture(g["model"].get<std::string>()));
  const std::string spec = with_alpha(g["spec"], test::fixture(g["alpha"].get<std::string>()));
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const auto forced = g["forced"].get<std::vector<int32_t>>();
  const auto marks = g["marks"].get<std::vector<std::vector<std::string>>>();
  const auto ref_logits = g["logits"].get<std::vector<std::vector<float>>>();
  const int64_t P = static_cast<int64_t>(prompt.size()), F = static_cast<int64_t>(forced.size());
  ASSERT_GE(P, 800) << "the fidelity prompt must be at least 800 tokens";
  const int64_t window = PolicySpec::parse(spec, 0).params.count("window")
                             ? std::stoll(PolicySpec::parse(spec, 0).params.at("window"))
                             : 512;
  // The test's own rule reproduces the readable sets the generator stored.
  for (const auto& [step, held] : g["held"].items()) {
    const int64_t last = P - 1 + std::stoll(step);
    for (size_t l = 0; l < marks.size(); ++l)
      for (size_t h = 0; h < marks[l].size(); ++h)
        ASSERT_EQ(readable(marks[l][h], last, last + 1, window), held[l][h].get<std::vector<int32_t>>())
            << "step " << step << " layer " << l << " kv head " << h;
  }
  int64_t evicted_somewhere = 0;
  for (int chunk : {64, static_cast<int>(P)}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    const DmsRun r = run(m, spec, chunk, prompt, forced);
    ASSERT_EQ(static_cast<int64_t>(r.steps.size()), P + F) << "one prefill step per prompt token, then decode";
    for (int64_t s = 0; s < P + F; ++s)
      for (size_t l = 0; l < marks.size(); ++l)
        for (size_t h = 0; h < marks[l].size(); ++h) {
          const std::vector<int32_t> want = readable(marks[l][h], s, s + 1, window);
          ASSERT_EQ(r.steps[s][l][h], want) << "after position " << s << " layer " << l << " kv head " << h;
          evicted_somewhere += s == P + F - 1 ? s + 1 - static_cast<int64_t>(want.size()) : 0;
        }
    const size_t V = ref_logits[0].size();
    ASSERT_EQ(r.logits.size(), ref_logits.size() * V);
    double worst = 0, scale = 0;
    for (size_t t = 0; t < ref_logits.size(); ++t)
      for (size_t v = 0; v < V; ++v) {
        worst = std::max(worst, static_cast<double>(std::fabs(r.logits[t * V + v] - ref_logits[t][v])));
        scale = std::max(scale, static_cast<double>(std::fabs(ref_logits[t][v])));
      }
    EXPECT_LT(worst, 1e-4 * scale + 1e-5) << "largest |logit difference| " << worst << " of max |logit| " << scale;
  }
  EXPECT_GT(evicted_somewhere, 0) << "the golden must evict";
}

// A DMS checkpoint directory (config.json with dms_separate_alpha and dms_window_size, the
// dms_proj_alpha tensors inside model.safetensors) loads as its base model — the DMS tensors are
// left to the policy — and `dms:alpha=DIR` reads them from it with the config's window: the same
// tokens held as with the golden's file and an explicit window.
TEST(Dms, ACheckpointDirectoryIsTheModelAndTheWeights) {
  const json& g = golden();
  const std::string base = test::fixture(g["model"].get<std::string>());
  const auto dir = test::temp_dir("dms_ckpt");
  GateSource all;
  all.policy = "test";
  GateWeights w = GateWeights::load(base + "/model.safetensors", all);
  const GateWeights alpha = GateWeights::load(test::fixture(g["alpha"].get<std::string>()), all);
  for (const auto& [name, t] : alpha.tensors) w.add(name, t.shape, t.data);
  save_gate_weights(w, (dir / "model.safetensors").string());
  json cfg = json::parse(std::ifstream(base + "/config.json"));
  cfg["dms_separate_alpha"] = true;
  cfg["dms_window_size"] = 48;
  cfg["dms_alpha_scale"] = 100.0;
  cfg["dms_initial_alpha_offset"] = 5.0;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  auto m = Model::load_dir(dir.string());
  std::vector<int32_t> prompt, forced;
  for (int i = 0; i < 120; ++i) prompt.push_back(3 + (i * 37) % 250);
  for (int i = 0; i < 20; ++i) forced.push_back(3 + (i * 53) % 250);
  const DmsRun from_dir = run(m, "dms:alpha=" + dir.string(), 16, prompt, forced);
  const DmsRun from_file =
      run(m, "dms:window=48,alpha=" + test::fixture(g["alpha"].get<std::string>()), 16, prompt, forced);
  EXPECT_EQ(from_dir.steps, from_file.steps);
  EXPECT_EQ(from_dir.logits, from_file.logits);
  EXPECT_LT(from_dir.steps.back()[0][0].size(), prompt.size() + forced.size()) << "window 48 evicts";

  // A checkpoint whose decision borrows a query channel is refused as a model and as weights.
  cfg["dms_separate_alpha"] = false;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  EXPECT_TRUE(test::contains_all(test::input_error_of([&] { Model::load_dir(dir.string()); }),
                                 {"config.json", "dms_separate_alpha"}));
  EXPECT_TRUE(
      test::contains_all(test::input_error_of([&] { make_policy(PolicySpec::parse("dms:alpha=" + dir.string(), 0)); }),
                         {"config.json", "dms_separate_alpha"}));
  fs::remove_all(dir);
}

TEST(Dms, RefusesMissingWeightsAndNamesAMissingTensor) {
  EXPECT_TRUE(test::contains_all(test::input_error_of([] { make_policy(PolicySpec::parse("dms", 0)); }),
                                 {"alpha=", "random_alpha"}));
  EXPECT_TRUE(test::contains_all(
      test::input_error_of([] { make_policy(PolicySpec::parse("dms:random_alpha=1,per=token", 0)); }), {"'per'"}));
  EXPECT_TRUE(test::contains_all(
      test::input_error_of([] { make_policy(PolicySpec::parse("dms:random_alpha=1,window=0", 0)); }), {"'window'"}));
  // Layer 1's projection removed: the first step of layer 1 names the file and the tensor.
  GateSource all;
  all.policy = "test";
  const std::string cut = test::save_without(GateWeights::load(test::fixture(golden()["alpha"].get<std::string>()), all),
                                             "model.layers.1.self_attn.dms_proj_alpha.weight", "dms_cut");
  auto m = Model::load_dir(test::fixture("models/tiny-qwen3"));
  Engine e(m, {}, make_policy(PolicySpec::parse("dms:alpha=" + cut, 0)));
  EXPECT_TRUE(test::contains_all(test::input_error_of([&] {
                                   e.score({5, 6, 7}, {8});
                                 }),
                                 {"cut.safetensors", "model.layers.1.self_attn.dms_proj_alpha.weight"}));
  fs::remove_all(fs::path(cut).parent_path());
}

// per=layer: every head of a layer follows head 0's decision, so all heads hold the same tokens.
TEST(Dms, PerLayerDecisionsHoldTheSameTokensInEveryHead) {
  auto m = Model::load_dir(test::fixture("models/tiny-qwen3"));
  std::vector<int32_t> prompt;
  for (int i = 0; i < 90; ++i) prompt.push_back(3 + (i * 41) % 250);
  const DmsRun r = run(m, "dms:random_alpha=3,window=8,per=layer", 32, prompt, {4, 5, 6});
  const Held& last = r.steps.back();
  for (const auto& layer : last) EXPECT_EQ(layer[0], layer[1]);
  EXPECT_LT(last[0][0].size(), prompt.size()) << "random decisions evict";
  const DmsRun per_head = run(m, "dms:random_alpha=3,window=8", 32, prompt, {4, 5, 6});
  EXPECT_NE(per_head.steps.back()[0][0], per_head.steps.back()[0][1]) << "heads decide apart by default";
}

}  // namespace
}  // namespace kvb
