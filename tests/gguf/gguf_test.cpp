// GGUF parsing, dequantisation and model loading against goldens made by
// tools/gen_gguf_goldens.py from PyPI `gguf` (dequantize, GGUFReader) and transformers
// (AutoModelForCausalLM / AutoTokenizer.from_pretrained(gguf_file=...)).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/model/gguf.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/gguf/" + name; }

/// The generator's checksum: sum_i bits_i * ((2i+1) * 0x9E3779B97F4A7C15) mod 2^64.
std::string checksum(const float* x, size_t n) {
  uint64_t h = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, 4);
    h += static_cast<uint64_t>(b) * ((2 * static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void expect_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* data, size_t n,
                   const json& g) {
  EXPECT_EQ(shape, g["shape"].get<std::vector<int64_t>>()) << name;
  const auto head = g["head"].get<std::vector<double>>();
  for (size_t i = 0; i < head.size() && i < n; ++i)
    EXPECT_EQ(static_cast<double>(data[i]), head[i]) << name << " element " << i;
  EXPECT_EQ(checksum(data, n), g["checksum"].get<std::string>()) << name;
}

TEST(Gguf, QuantTypesEqualGgufPyDequantize) {
  const json g = kvb::parse_json_file(fixture("quant_types.golden.json"));
  const auto f = kvb::GgufFile::open(fixture("quant_types.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), g["alignment"].get<uint64_t>());
  EXPECT_EQ(f.data_offset(), g["data_offset"].get<uint64_t>());
  ASSERT_EQ(f.tensors().size(), g["tensors"].size());
  for (const auto& t : f.tensors()) {
    ASSERT_TRUE(g["tensors"].contains(t.name)) << t.name;
    const json& gt = g["tensors"][t.name];
    EXPECT_STREQ(kvb::ggml_type_traits(static_cast<uint32_t>(t.type)).name, gt["type"].get<std::string>().c_str());
    EXPECT_EQ(t.dims, gt["gguf_dims"].get<std::vector<int64_t>>());
    const auto v = f.read_f32(t);
    expect_tensor(t.name, t.shape(), v.data(), v.size(), gt);
  }
}

TEST(Gguf, MetadataOfEveryValueType) {
  const json g = kvb::parse_json_file(fixture("quant_types.golden.json"));
  const auto f = kvb::GgufFile::open(fixture("quant_types.gguf"));
  size_t seen = 0;
  for (const auto& [key, v] : f.metadata()) {
    if (!g["metadata"].contains(key)) continue;
    ++seen;
    EXPECT_EQ(v.to_json(), g["metadata"][key]) << key;
  }
  EXPECT_EQ(seen, g["metadata"].size());
  EXPECT_EQ(f.get_int("test.i8"), -100);
  EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93");
  EXPECT_THROW(f.get_int("test.string"), kvb::Error);
  EXPECT_THROW(f.get_string("no.such.key"), kvb::Error);
}

TEST(Gguf, DequantizeRejectsBadInput) {
  std::vector<uint8_t> raw(64, 0);
  std::vector<float> out(64);
  EXPECT_THROW(kvb::dequantize(static_cast<kvb::GgmlType>(kvb::DType::Q8_0), raw.data(), 31, out.data()), kvb::Error);
  EXPECT_THROW(kvb::dequantize(kvb::GgmlType{10} /* Q2_K, not supported */, raw.data(), 256, out.data()), kvb::Error);
  EXPECT_THROW(kvb::dequantize(static_cast<kvb::GgmlType>(77), raw.data(), 32, out.data()), kvb::Error);
}

void check_model(const std::string& gguf, const json& g, bool full_tokenizer) {
  const kvb::GgufModel m = kvb::load_gguf(gguf);
  const json& c = g["config"];
  EXPECT_EQ(m.config.model_type, c["model_type"]);
  EXPECT_EQ(m.config.vocab_size, c["vocab_size"]);
  EXPECT_EQ(m.config.hidden_size, c["hidden_size"]);
  EXPECT_EQ(m.config.intermediate_size, c["intermediate_size"]);
  EXPECT_EQ(m.config.num_layers, c["num_hidden_layers"]);
  EXPECT_EQ(m.config.num_heads, c["num_attention_heads"]);
  EXPECT_EQ(m.config.num_kv_heads, c["num_key_value_heads"]);
  EXPECT_EQ(m.config.head_dim, c["head_dim"]);
  EXPECT_EQ(m.config.max_position_embeddings, c["max_position_embeddings"]);
  EXPECT_EQ(m.config.rms_norm_eps, c["rms_norm_eps"].get<double>());
  EXPECT_EQ(m.config.rope_theta, c["rope_theta"].get<double>());
  EXPECT_EQ(m.config.rope_scaling.type, c["rope_type"]);
  EXPECT_EQ(m.config.tie_word_embeddings, c["tie_word_embeddings"]);
  EXPECT_EQ(m.config.bos_token_id, c["bos_token_id"]);
  ASSERT_FALSE(m.config.eos_token_ids.empty());
  EXPECT_EQ(m.config.eos_token_ids[0], c["eos_token_id"]);

  EXPECT_EQ(m.weights.tensors().size(), g["tensors"].size());
  for (const auto& [name, gt] : g["tensors"].items()) {
    const kvb::TensorView* t = m.weights.find(name);
    ASSERT_NE(t, nullptr) << name;
    // Tensors stay in the file's type (views into the mapping); to_f32 dequantises and undoes
    // the llama Q/K row order, which must equal gguf-py + transformers' conversion.
    const std::vector<float> v = kvb::WeightStore::to_f32(*t);
    expect_tensor(name, t->shape, v.data(), v.size(), gt);
  }

  for (const auto& [k, v] : g["tokenizer_config"].items()) EXPECT_EQ(m.tokenizer_config[k], v) << k;
  EXPECT_EQ(m.tokenizer_config.size(), g["tokenizer_config"].size());
  EXPECT_EQ(m.chat_template, g["tokenizer_config"].value("chat_template", ""));
  if (full_tokenizer) {
    const json& want = g["tokenizer_json"];
    for (const auto& [k, v] : want.items()) EXPECT_EQ(m.tokenizer_json[k], v) << "tokenizer.json ." << k;
    EXPECT_EQ(m.tokenizer_json.size(), want.size());
  } else {
    const json& s = g["tokenizer_json_structure"];
    for (const char* k : {"version", "truncation", "padding", "normalizer", "pre_tokenizer", "post_processor",
                          "decoder", "added_tokens"})
      EXPECT_EQ(m.tokenizer_json[k], s[k]) << k;
    json model = m.tokenizer_json["model"];
    EXPECT_EQ(model["vocab"].size(), s["vocab_size"].get<size_t>());
    const json& merges = model["merges"];
    ASSERT_EQ(merges.size(), s["num_merges"].get<size_t>());
    for (size_t i = 0; i < s["first_merges"].size(); ++i) EXPECT_EQ(merges[i], s["first_merges"][i]);
    const size_t nl = s["last_merges"].size();
    for (size_t i = 0; i < nl; ++i) EXPECT_EQ(merges[merges.size() - nl + i], s["last_merges"][i]);
    model.erase("vocab");
    model.erase("merges");
    EXPECT_EQ(model, s["model"]);
  }
}

TEST(Gguf, TinyLlamaEqualsTransformers) {
  check_model(fixture("tiny_llama.gguf"), kvb::parse_json_file(fixture("tiny_llama.golden.json")), true);
}

TEST(Gguf, Stories260KEqualsTransformers) {
  check_model(fixture("stories260K.gguf"), kvb::parse_json_file(fixture("stories260K.golden.json")), true);
}

TEST(Gguf, SmolLM2FromCacheEqualsTransformers) {
  KVB_REQUIRE_DEFAULT_MODEL();
  const std::string p = kvb::test::default_model_path();
  check_model(p, kvb::parse_json_file(fixture("smollm2.golden.json")), false);
}

TEST(Gguf, HfNames) {
  EXPECT_EQ(kvb::gguf_to_hf_name("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("blk.0.attn_k.bias"), "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(kvb::gguf_to_hf_name("blk.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("blk.3.attn_k_norm.weight"), "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(kvb::gguf_to_hf_name("rope_freqs.weight"), "rope_freqs.weight");
}

}  // namespace
