// `fastkvzip` reads its gates from a file: gates written under the names and shapes the policy
// documents (module.{l}.*), drawn exactly as random_gates=SEED draws them, must give the keep-sets
// of random_gates=SEED; gates for another layer count are refused naming the file. (The kvpress
// golden, tests/kvpress, uses random_gates.)
#include <gtest/gtest.h>

#include "engine/policies/gate_weights.h"
#include "engine/policies/policies.h"
#include "tests/policies/harness.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

/// The gates random_gates=`seed` draws for the first `layers` layers of `cfg`.
GateWeights drawn_gates(const ModelConfig& cfg, int layers, int64_t seed) {
  return fastkvzip_random_gates(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, layers, seed);
}

TEST(FastKVzip, GatesFromAFileEqualTheSameRandomGates) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  auto m = test::stories_model();
  const ModelConfig& cfg = m->config();
  const std::string file = (test::temp_dir("fastkvzip") / "gates.safetensors").string();
  save_gate_weights(drawn_gates(cfg, static_cast<int>(cfg.num_layers), 3), file);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 96; ++i) prompt.push_back(1 + (i * 37) % 400);
  const auto from_file = test::held_per_step(m, "fastkvzip:ratio=0.5,gates=" + file, 0, 32, prompt, {7, 8});
  const auto drawn = test::held_per_step(m, "fastkvzip:ratio=0.5,random_gates=3", 0, 32, prompt, {7, 8});
  EXPECT_EQ(from_file, drawn);
  size_t kept = 0, full = 0;
  for (const auto& l : from_file.back())
    for (const auto& h : l) kept += h.size(), full += prompt.size() + 2;
  EXPECT_LT(kept, full) << "the prompt's end must evict";
}

TEST(FastKVzip, GatesForAnotherLayerCountAreRefused) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  auto m = test::stories_model();
  const std::string file = (test::temp_dir("fastkvzip") / "gates.safetensors").string();
  save_gate_weights(drawn_gates(m->config(), 2, 1), file);
  EXPECT_TRUE(test::contains_all(test::input_error_of([&] {
                                   test::held_per_step(m, "fastkvzip:ratio=0.5,gates=" + file, 0, 8, {1, 5, 6, 7}, {8});
                                 }),
                                 {"gates.safetensors", "the gates cover 2 decoder layers; this model has"}));
}

}  // namespace
}  // namespace kvb
