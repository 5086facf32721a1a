// LocRet (engine/policies/locret.cpp) end to end on the tiny random-weight models: the goldens of
// tools/gen_locret_goldens.py restate LocRet's retaining-head score and chunked-prefill keep rule
// in float64 (prompt of 240 tokens, chunk_size 48, stabilizers 12, local_len 20, budget 40) and
// record the positions every (layer, kv head) holds after the prompt. kvbench must keep exactly
// those positions whatever --prefill-chunk is, with the heads read from each released layout
// (safetensors in a save_pretrained directory, a sharded index, the README's torch .bin).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/policy.h"
#include "tests/policies/harness.h"
#include "tests/support/model_goldens.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const json& golden(const std::string& model) { return test::model_golden("policies/locret_goldens.json", model); }

std::string spec_of(const json& g, const std::string& heads) {
  const auto& p = g["params"];
  return "locret:heads=" + heads + ",chunk_size=" + std::to_string(p["chunk_size"].get<int>()) +
         ",stabilizers=" + std::to_string(p["stabilizers"].get<int>()) +
         ",local_len=" + std::to_string(p["local_len"].get<int>());
}

using Kept = std::vector<std::vector<std::vector<int32_t>>>;  // [layer][head] positions

/// Positions held by every (layer, kv head) after the last step of Engine::score(prompt, forced).
Kept kept_after(std::shared_ptr<const Model> m, const std::string& spec, int64_t budget, int chunk,
                const std::vector<int32_t>& prompt, const std::vector<int32_t>& forced = {}) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  Engine e(m, eo, make_policy(PolicySpec::parse(spec, budget)));
  Kept kept;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    kept.assign(kv.config().num_layers, std::vector<std::vector<int32_t>>(kv.config().num_kv_heads));
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int h = 0; h < kv.config().num_kv_heads; ++h)
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) kept[l][h].push_back(kv.position(s, l, h, i));
  };
  e.score(prompt, forced);
  return kept;
}

/// A save_pretrained-style sharded copy of the fixture heads in a fresh directory: the heads in
/// one shard, and an index that also names a base-model tensor in a shard that does not exist
/// (only the shards holding retaining heads may be read).
std::string sharded_copy(const std::string& heads_dir, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("kvb_locret_sharded_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  GateWeights w = GateWeights::load(heads_dir + "/model.safetensors", GateSource{"locret", "heads", "", false});
  save_gate_weights(w, (dir / "model-00001-of-00002.safetensors").string());
  json idx = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const auto& [name, t] : w.tensors) idx["weight_map"][name] = "model-00001-of-00002.safetensors";
  idx["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << idx.dump();
  fs::copy_file(heads_dir + "/config.json", dir / "config.json");
  return dir.string();
}

class LocretGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(LocretGoldens, KeepSetsMatchTheFloat64RestatementForEveryChunkingAndLayout) {
  const json& g = golden(GetParam());
  auto m = Model::load_dir(test::fixture(GetParam()));
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const int L = static_cast<int>(prompt.size());
  const int64_t budget = g["budget"];
  const int chunk = g["params"]["chunk_size"];
  ASSERT_GT(L - g["params"]["local_len"].get<int>(), 3 * chunk) << "the prompt must span several policy chunks";
  const Kept want = g["keep"].get<Kept>();
  ASSERT_EQ(static_cast<int>(want.size()), m->config().num_layers);
  const std::string dir = test::fixture(g["heads"].get<std::string>());
  const std::string tag = GetParam().substr(GetParam().find('/') + 1);
  for (const std::string& heads : {dir, dir + "/retaining_heads.bin", sharded_copy(dir, tag)}) {
    for (int engine_chunk : {7, chunk, 64, L}) {
      SCOPED_TRACE("heads " + heads + ", prefill chunk " + std::to_string(engine_chunk));
      const Kept got = kept_after(m, spec_of(g, heads), budget, engine_chunk, prompt);
      ASSERT_EQ(got.size(), want.size());
      for (size_t l = 0; l < want.size(); ++l)
        for (size_t h = 0; h < want[l].size(); ++h) {
          EXPECT_EQ(static_cast<int64_t>(want[l][h].size()), budget + g["params"]["local_len"].get<int>());
          EXPECT_EQ(got[l][h], want[l][h]) << "layer " << l << " kv head " << h;
        }
    }
  }
}

TEST_P(LocretGoldens, DecodingNeverEvicts) {
  const json& g = golden(GetParam());
  auto m = Model::load_dir(test::fixture(GetParam()));
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const std::vector<int32_t> forced = {5, 9, 17, 33, 65, 129};
  const Kept got =
      kept_after(m, spec_of(g, test::fixture(g["heads"].get<std::string>())), g["budget"], 64, prompt, forced);
  const Kept want = g["keep"].get<Kept>();
  for (size_t l = 0; l < want.size(); ++l)
    for (size_t h = 0; h < want[l].size(); ++h) {
      std::vector<int32_t> grown = want[l][h];
      for (size_t i = 0; i < forced.size(); ++i) grown.push_back(static_cast<int32_t>(prompt.size() + i));
      EXPECT_EQ(got[l][h], grown) << "layer " << l << " kv head " << h;
    }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, LocretGoldens, test::golden_models(), test::model_test_name);

// Without weights: PolicyRegistry.NeedsWeightsIsTrueExactlyWhenThePolicyRefusesToRunWithoutThem.
TEST(Locret, BudgetAndCompressAreRequiredAsThePaperSetsThem) {
  EXPECT_TRUE(test::contains_all(test::policy_error("locret:random_heads=1", 0), {"budget"}));
  EXPECT_TRUE(test::contains_all(test::policy_error("locret:random_heads=1,compress=prompt_end", 64), {"'compress'"}));
}

TEST(Locret, HeadsOfTheWrongShapeAreOneClearError) {
  const json& g = golden("models/tiny-llama3");
  auto m = Model::load_dir(test::fixture("models/tiny-llama3"));
  const std::string path = (fs::temp_directory_path() / "kvb_locret_bad_heads.safetensors").string();
  GateWeights w = GateWeights::load(test::fixture(g["heads"].get<std::string>()) + "/model.safetensors",
                                    GateSource{"locret", "heads", "", false});
  GateTensor& fc1 = w.tensors.at("model.layers.1.self_attn.fc1.weight");
  fc1.shape[1] -= 24;  // one query head too few: [I, (Hq + 2 Hkv) D] with Hq = 3
  fc1.data.resize(static_cast<size_t>(fc1.shape[0] * fc1.shape[1]));
  save_gate_weights(w, path);
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const std::string e = test::input_error_of([&] { kept_after(m, spec_of(g, path), 40, 64, prompt); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.1.self_attn.fc1.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 168]"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 192]"), std::string::npos) << e;
}

TEST(Locret, CheckpointForAnotherModelIsRefusedByItsConfig) {
  const json& g = golden("models/tiny-llama3");
  auto m = Model::load_dir(test::fixture("models/tiny-llama3"));
  const fs::path dir = fs::temp_directory_path() / "kvb_locret_other_model";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string src = test::fixture(g["heads"].get<std::string>());
  fs::copy_file(src + "/model.safetensors", dir / "model.safetensors");
  json cfg = parse_json_file(src + "/config.json");
  cfg["num_hidden_layers"] = 32;
  std::ofstream(dir / "config.json") << cfg.dump();
  const auto prompt = g["prompt"].get<std::vector<int32_t>>();
  const std::string e = test::input_error_of([&] { kept_after(m, spec_of(g, dir.string()), 40, 64, prompt); });
  EXPECT_NE(e.find("num_hidden_layers"), std::string::npos) << e;
}

}  // namespace
}  // namespace kvb
