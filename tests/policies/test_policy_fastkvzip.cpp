// `fastkvzip` reads its gates from a file: gates written under the names and shapes the policy
// documents (module.{l}.*), drawn exactly as random_gates=SEED draws them, must give the keep-sets
// of random_gates=SEED; gates for another layer count are refused naming the file. (The kvpress
// golden, tests/kvpress, uses random_gates.)
#include <gtest/gtest.h>

#include <cmath>

#include "engine/policies/gate_weights.h"
#include "tests/policies/harness.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

/// The gates random_gates=`seed` draws for `layers` layers of `cfg` (fastkvzip.cpp, gate()).
GateWeights drawn_gates(const ModelConfig& cfg, int layers, int64_t seed) {
  const int64_t H = cfg.hidden_size, Hk = cfg.num_kv_heads, G = cfg.num_heads / cfg.num_kv_heads, O = 16, S = 16;
  GateWeights w;
  for (int l = 0; l < layers; ++l) {
    SeededDraws d(seed * 1000003 + l);
    auto draw = [&](const std::string& name, std::vector<int64_t> shape, double mean, double stdv) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = static_cast<float>(mean + d.normal(stdv));
      w.add("module." + std::to_string(l) + "." + name, std::move(shape), std::move(v));
    };
    const double proj = 1.0 / std::sqrt(static_cast<double>(H));
    draw("q_proj.weight", {Hk * G * O, H}, 0.0, proj);
    draw("q_proj.bias", {Hk * G * O}, 0.0, 0.1);
    draw("k_proj.weight", {Hk * O, H}, 0.0, proj);
    draw("q_norm.weight", {O}, 1.0, 0.1);
    draw("k_norm.weight", {O}, 1.0, 0.1);
    draw("k_base", {Hk, 1, S, O}, 0.0, 1.0);
    draw("b", {Hk, 1, G}, 0.0, 1.0);
  }
  return w;
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
