// Corrupt model inputs: one clear kvb::Error naming the file and the field, exit code 2 from the
// CLI, no crash (these tests also run under ASan/UBSan in CI).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/model/model.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

class CorruptModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir("corrupt");
    fs::copy(test::fixture("models/tiny-qwen2"), dir);
    st = (dir / "model.safetensors").string();
    bytes = read_file(st);
    std::memcpy(&hlen, bytes.data(), 8);
    header = nlohmann::json::parse(bytes.substr(8, hlen));
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const std::string& path, const std::string& data) { std::ofstream(path, std::ios::binary) << data; }
  // Rewrites the safetensors header (keeping the data section) after `edit`.
  void rewrite_header(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json h = header;
    edit(h);
    std::string hs = h.dump();
    uint64_t n = hs.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    write(st, out + hs + bytes.substr(8 + hlen));
  }
  // Expects load to fail with a message containing every fragment.
  void expect_error(std::initializer_list<std::string> fragments) {
    try {
      Model::load_dir(dir.string());
      FAIL() << "expected kvb::Error";
    } catch (const Error& e) {
      for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), 2);
    }
    auto [code, out] = test::run_cli("generate --model " + dir.string() + " --prompt hi");
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find("kvbench: error:"), std::string::npos) << out;
  }
  fs::path dir;
  std::string st, bytes;
  uint64_t hlen = 0;
  nlohmann::json header;
};

TEST_F(CorruptModel, TruncatedFile) {
  write(st, bytes.substr(0, bytes.size() / 2));
  expect_error({"model.safetensors", "data_offsets"});
}

TEST_F(CorruptModel, TooShortForHeader) {
  write(st, "abc");
  expect_error({"model.safetensors", "header", "too short"});
}

TEST_F(CorruptModel, HeaderPastEndOfFile) {
  std::string b = bytes;
  uint64_t huge = b.size() * 2;
  std::memcpy(b.data(), &huge, 8);
  write(st, b);
  expect_error({"model.safetensors", "header", "past the end"});
}

TEST_F(CorruptModel, HeaderNotJson) {
  std::string b = bytes;
  b[8] = '#';
  write(st, b);
  expect_error({"model.safetensors", "header", "invalid JSON"});
}

TEST_F(CorruptModel, UnknownDtype) {
  rewrite_header([](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "F8_E4M3"; });
  expect_error({"model.safetensors", "model.norm.weight", "dtype", "F8_E4M3"});
}

TEST_F(CorruptModel, ShapeDisagreesWithBytes) {
  rewrite_header([](nlohmann::json& h) { h["model.norm.weight"]["shape"] = {65}; });
  expect_error({"model.safetensors", "model.norm.weight", "bytes"});
}

TEST_F(CorruptModel, WrongShapeForConfig) {
  rewrite_header([](nlohmann::json& h) {
    auto& t = h["model.layers.0.mlp.down_proj.weight"];
    t["shape"] = {t["shape"][1], t["shape"][0]};  // transposed: same bytes, wrong shape
  });
  expect_error({"model.safetensors", "model.layers.0.mlp.down_proj.weight", "shape"});
}

TEST_F(CorruptModel, MissingTensor) {
  rewrite_header([](nlohmann::json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
  expect_error({"model.layers.1.mlp.up_proj.weight", "missing"});
}

TEST_F(CorruptModel, UnknownModelType) {
  auto cfg = parse_json_file((dir / "config.json").string());
  cfg["model_type"] = "mamba";
  write((dir / "config.json").string(), cfg.dump());
  expect_error({"config.json", "model_type", "mamba"});
}

TEST_F(CorruptModel, ConfigFieldOfWrongType) {
  auto cfg = parse_json_file((dir / "config.json").string());
  cfg["num_attention_heads"] = "four";
  write((dir / "config.json").string(), cfg.dump());
  expect_error({"config.json", "num_attention_heads", "integer"});
}

TEST_F(CorruptModel, ConfigNotJson) {
  write((dir / "config.json").string(), "{\"model_type\": \"qwen2\",");
  expect_error({"config.json", "invalid JSON"});
}

TEST_F(CorruptModel, ShardIndexNamingMissingTensor) {
  nlohmann::json idx = {
      {"weight_map", {{"model.norm.weight", "model.safetensors"}, {"ghost.weight", "model.safetensors"}}}};
  write((dir / "model.safetensors.index.json").string(), idx.dump());
  expect_error({"model.safetensors.index.json", "ghost.weight"});
}

TEST(ShardedSafetensors, LoadsTheSameModelFromShards) {
  // Split tiny-llama3 into two shards with an index, and compare a forward.
  const fs::path src = test::fixture("models/tiny-llama3");
  const fs::path dir = fs::temp_directory_path() / ("kvb_shards_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(src / "config.json", dir / "config.json");
  const std::string bytes = read_file((src / "model.safetensors").string());
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, hlen));
  nlohmann::json shard[2] = {nlohmann::json::object(), nlohmann::json::object()};
  std::string data[2];
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const int s = (i++) % 2;
    const uint64_t b = info["data_offsets"][0], e = info["data_offsets"][1];
    nlohmann::json t = info;
    t["data_offsets"] = {data[s].size(), data[s].size() + (e - b)};
    data[s] += bytes.substr(8 + hlen + b, e - b);
    shard[s][name] = t;
    index["weight_map"][name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    std::string h = shard[s].dump();
    uint64_t n = h.size();
    std::ofstream((dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors")).string(), std::ios::binary)
        << std::string(reinterpret_cast<const char*>(&n), 8) << h << data[s];
  }
  std::ofstream((dir / "model.safetensors.index.json").string()) << index.dump();
  auto a = Model::load_dir(src.string());
  auto b = Model::load_dir(dir.string());
  const auto& c = a->config();
  EXPECT_EQ(0,
            std::memcmp(a->layers()[1].w_down.f32, b->layers()[1].w_down.f32, c.hidden_size * c.intermediate_size * 4));
  EXPECT_EQ(0, std::memcmp(a->lm_head().f32, b->lm_head().f32, c.hidden_size * c.vocab_size * 4));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvb
