// GGUF metadata that changes the model and that kvbench does not implement is refused naming the
// key, never ignored (issue 38): `<arch>.expert_count` > 0 (mixture of experts) and
// `<arch>.rope.dimension_count` other than the head size (partial RoPE). Files are written byte
// by byte from the format description (ggml docs/gguf.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace {

/// A GGUF v3 file: the given u32 metadata, general.architecture "llama", one F32 tensor "t" [8].
std::string gguf_with(const std::vector<std::pair<std::string, uint32_t>>& u32_keys) {
  std::string b = "GGUF";
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto u64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto str = [&](const std::string& s) {
    u64(s.size());
    b += s;
  };
  u32(3);
  u64(1);                    // tensors
  u64(u32_keys.size() + 1);  // key/values
  str("general.architecture");
  u32(8);  // STRING
  str("llama");
  for (const auto& [k, v] : u32_keys) {
    str(k);
    u32(4);  // UINT32
    u32(v);
  }
  str("t");
  u32(1);
  u64(8);
  u32(0);  // F32
  u64(0);
  while (b.size() % 32) b.push_back('\0');
  b.append(32, '\0');
  return b;
}

std::vector<std::pair<std::string, uint32_t>> llama_keys() {
  return {{"llama.block_count", 1},          {"llama.embedding_length", 64},    {"llama.feed_forward_length", 128},
          {"llama.attention.head_count", 8}, {"llama.attention.key_length", 8}, {"llama.vocab_size", 32},
          {"llama.context_length", 64}};
}

std::string config_error(const std::vector<std::pair<std::string, uint32_t>>& keys) {
  const auto dir = kvb::test::temp_dir("gguf_flags");
  const std::string p = (dir / "m.gguf").string();
  std::ofstream(p, std::ios::binary) << gguf_with(keys);
  return kvb::test::input_error_of([&] { kvb::gguf_model_config(kvb::GgufFile::open(p)); });
}

TEST(GgufFlags, TheBaseFileGivesAConfig) {
  const auto dir = kvb::test::temp_dir("gguf_flags");
  const std::string p = (dir / "m.gguf").string();
  auto keys = llama_keys();
  keys.push_back({"llama.rope.dimension_count", 8});
  keys.push_back({"llama.expert_count", 0});
  std::ofstream(p, std::ios::binary) << gguf_with(keys);
  const kvb::ModelConfig c = kvb::gguf_model_config(kvb::GgufFile::open(p));
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.num_layers, 1);
}

TEST(GgufFlags, MixtureOfExpertsIsRefused) {
  auto keys = llama_keys();
  keys.push_back({"llama.expert_count", 8});
  EXPECT_TRUE(kvb::test::contains_all(
      config_error(keys), {"m.gguf: metadata 'llama.expert_count': mixture-of-experts models (8 experts)"}));
}

TEST(GgufFlags, PartialRopeIsRefused) {
  auto keys = llama_keys();
  keys.push_back({"llama.rope.dimension_count", 4});
  EXPECT_TRUE(kvb::test::contains_all(config_error(keys), {"m.gguf: metadata 'llama.rope.dimension_count': RoPE over 4 "
                                                           "of the head's 8 dims is not supported"}));
}

}  // namespace
