// GGUF models through the CPU forward: last-position logits within 1e-3 relative of
// transformers' forward on the same dequantised weights (goldens by tools/gen_gguf_goldens.py).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "engine/model/gguf.h"
#include "test_support.h"

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

}  // namespace
}  // namespace kvb
