// config.json keys as transformers 4.x and 5.x write them (rope_scaling + rope_theta vs
// rope_parameters, layer_types) and generation_config.json's sampling defaults (issue 17).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace {

using json = nlohmann::json;
using kvb::GenerationDefaults;
using kvb::ModelConfig;

json base_config() {
  return json::parse(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1000, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5})");
}

std::vector<float> inv_freq(const json& j, float* scaling) {
  return kvb::rope_inv_freq(ModelConfig::from_json(j, "config.json"), scaling);
}

std::string error_of(const json& j) {
  return kvb::test::input_error_of([&] { ModelConfig::from_json(j, "config.json"); });
}

// The same RoPE written both ways: transformers 4.x (top-level rope_theta + rope_scaling) and
// transformers 5 (rope_parameters holding rope_type and rope_theta) give identical inv_freq.
TEST(ModelConfigKeys, RopeParametersAndRopeScalingGiveIdenticalInvFreq) {
  const json llama3 = {
      {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const json yarn = {
      {"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"beta_fast", 32.0}, {"beta_slow", 1.0}};
  struct Case {
    std::string type;
    json params;
  };
  for (const Case& c : {Case{"default", json::object()}, Case{"linear", {{"factor", 2.0}}}, Case{"llama3", llama3},
                        Case{"yarn", yarn}}) {
    SCOPED_TRACE(c.type);
    json old_style = base_config();
    old_style["rope_theta"] = 500000.0;
    if (c.type != "default") {
      old_style["rope_scaling"] = c.params;
      old_style["rope_scaling"]["rope_type"] = c.type;
    }
    json new_style = base_config();
    new_style["rope_parameters"] = c.params;
    new_style["rope_parameters"]["rope_type"] = c.type;
    new_style["rope_parameters"]["rope_theta"] = 500000.0;
    float s_old = 0, s_new = 0;
    const auto f_old = inv_freq(old_style, &s_old), f_new = inv_freq(new_style, &s_new);
    ASSERT_EQ(f_old.size(), 32u);
    EXPECT_EQ(f_old, f_new);  // bit-identical
    EXPECT_EQ(s_old, s_new);
    // and differ from the default theta, so rope_theta inside rope_parameters was read
    json no_theta = new_style;
    no_theta["rope_parameters"].erase("rope_theta");
    EXPECT_NE(inv_freq(no_theta, &s_new), f_old);
  }
  // The older "type" key and a null rope_scaling next to rope_parameters.
  json legacy = base_config();
  legacy["rope_theta"] = 500000.0;
  legacy["rope_scaling"] = llama3;
  legacy["rope_scaling"]["type"] = "llama3";
  json v5 = base_config();
  v5["rope_scaling"] = nullptr;
  v5["rope_parameters"] = llama3;
  v5["rope_parameters"]["rope_type"] = "llama3";
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  float a = 0, b = 0;
  EXPECT_EQ(inv_freq(legacy, &a), inv_freq(v5, &b));
  const ModelConfig c = ModelConfig::from_json(v5, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
}

TEST(ModelConfigKeys, RopeParametersWinOverRopeScaling) {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.rope_theta, 1e6);
  j["rope_parameters"]["rope_type"] = "dynamic";
  EXPECT_EQ(error_of(j).rfind("config.json: rope_parameters.rope_type: unsupported RoPE scaling 'dynamic'", 0), 0u);
}

TEST(ModelConfigKeys, LayerTypes) {
  json j = base_config();
  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  EXPECT_EQ(ModelConfig::from_json(j, "config.json").num_layers, 3);
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(error_of(j),
            "config.json: layer_types[1]: unsupported layer type \"sliding_attention\" for llama "
            "(supported: full_attention)");
  j["layer_types"] = {"full_attention"};
  EXPECT_EQ(error_of(j), "config.json: layer_types: has 1 entries for num_hidden_layers 3");
  j["layer_types"] = "full_attention";
  EXPECT_EQ(error_of(j).rfind("config.json: layer_types: expected a list", 0), 0u);
}

// Sliding windows per layer as transformers 5 reads config.json for each architecture
// (MistralConfig, MinistralConfig, Qwen2Config/Qwen3Config __init__ and their attention modules).
TEST(ModelConfigKeys, SlidingWindowPerLayer) {
  auto windows = [](json j) { return ModelConfig::from_json(j, "config.json").layer_window; };
  using W = std::vector<int32_t>;
  json mistral = base_config();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  EXPECT_EQ(windows(mistral), (W{4096, 4096, 4096}));
  // MistralConfig ignores layer_types (with a warning): every layer still slides.
  mistral["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(windows(mistral), (W{4096, 4096, 4096}));
  mistral["sliding_window"] = nullptr;
  EXPECT_TRUE(windows(mistral).empty());
  mistral["sliding_window"] = -1;
  EXPECT_EQ(error_of(mistral), "config.json: sliding_window: must be > 0 or null, got -1");

  json ministral = base_config();
  ministral["model_type"] = "ministral";
  ministral["sliding_window"] = 128;
  EXPECT_EQ(windows(ministral), (W{128, 128, 128}));  // no layer_types: every layer
  ministral["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(windows(ministral), (W{128, 0, 128}));
  ministral["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  EXPECT_EQ(error_of(ministral),
            "config.json: layer_types[1]: unsupported layer type \"chunked_attention\" for "
            "ministral (supported: full_attention, sliding_attention)");

  // Gemma 2: without layer_types the even layers slide.
  json gemma = base_config();
  gemma["model_type"] = "gemma2";
  gemma["sliding_window"] = 32;
  EXPECT_EQ(windows(gemma), (W{32, 0, 32}));
  gemma["use_bidirectional_attention"] = true;
  EXPECT_EQ(error_of(gemma),
            "config.json: use_bidirectional_attention: bidirectional attention is not supported (decoder only)");

  // Qwen2/Qwen3: only with use_sliding_window; without layer_types, layers >= max_window_layers.
  for (const char* type : {"qwen2", "qwen3"}) {
    SCOPED_TRACE(type);
    json q = base_config();
    q["model_type"] = type;
    q["sliding_window"] = 64;
    q["max_window_layers"] = 1;
    EXPECT_TRUE(windows(q).empty());
    q["use_sliding_window"] = true;
    EXPECT_EQ(windows(q), (W{0, 64, 64}));
    q["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
    EXPECT_EQ(windows(q), (W{64, 0, 0}));
    q["use_sliding_window"] = false;
    EXPECT_TRUE(windows(q).empty());
  }
}

// The descriptor table: model types and GGUF names are unique, every architecture names every
// role it binds in both formats, and GGUF names map back to the HF ones.
TEST(Architectures, TableIsConsistentAndNamesRoundTrip) {
  std::set<std::string> types, ggufs;
  for (const kvb::Architecture& a : kvb::architectures()) {
    SCOPED_TRACE(a.model_type);
    EXPECT_TRUE(types.insert(a.model_type).second);
    if (a.gguf_arch) {
      EXPECT_TRUE(ggufs.insert(a.gguf_arch).second);
      EXPECT_EQ(kvb::find_gguf_architecture(a.gguf_arch), &a);
    }
    EXPECT_EQ(kvb::find_architecture(a.model_type), &a);
    for (const char* cls : a.hf_classes) EXPECT_EQ(kvb::find_architecture_by_class(cls), &a);
    for (const kvb::TensorName& t : a.tensors) {
      const std::string hf = kvb::hf_tensor_name(a, t.role, 7);
      EXPECT_EQ(hf.find("{}"), std::string::npos) << hf;
      EXPECT_TRUE(kvb::has_role(a, t.role));
      if (!t.gguf) continue;
      const std::string pattern = t.gguf;
      const size_t at = pattern.find("{}");
      const std::string g = at == std::string::npos ? pattern : pattern.substr(0, at) + "7" + pattern.substr(at + 2);
      EXPECT_EQ(kvb::gguf_to_hf_tensor_name(a, g), hf);
    }
  }
  EXPECT_EQ(kvb::architecture_names(), "llama, qwen2, qwen3, mistral, ministral, gemma2");
  EXPECT_EQ(kvb::architecture_names(true), "llama, qwen2, qwen3");
  json j = base_config();
  j["model_type"] = "gemma3";
  EXPECT_EQ(error_of(j),
            "config.json: model_type: unsupported model type 'gemma3' (supported: llama, qwen2, qwen3, "
            "mistral, ministral, gemma2)");
  // Without model_type, the `architectures` class decides.
  j.erase("model_type");
  j["architectures"] = {"MistralForCausalLM"};
  EXPECT_EQ(ModelConfig::from_json(j, "config.json").model_type, "mistral");
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_EQ(error_of(j), "config.json: model_type: missing (and no known class in architectures)");
  // The activation key must name the architecture's activation.
  j = base_config();
  j["hidden_act"] = "gelu";
  EXPECT_EQ(error_of(j), "config.json: hidden_act: unsupported activation \"gelu\" for llama (only silu)");
  j["model_type"] = "gemma2";
  j["hidden_act"] = "silu";  // not Gemma 2's key: ignored
  j["hidden_activation"] = "silu";
  EXPECT_EQ(error_of(j),
            "config.json: hidden_activation: unsupported activation \"silu\" for gemma2 "
            "(only gelu_pytorch_tanh)");
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("kvb_gencfg_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream((path / name).string()) << text;
    return (path / name).string();
  }
};

TEST(GenerationConfig, SamplingAsTransformersGenerateUsesIt) {
  TempDir d;
  EXPECT_FALSE(GenerationDefaults::from_file((d.path / "absent.json").string()).present);
  // Qwen3's: do_sample with temperature, top_k, top_p; EOS a list.
  const std::string qwen =
      d.write("qwen.json",
              R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
          "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  GenerationDefaults g = GenerationDefaults::from_file(qwen);
  EXPECT_TRUE(g.present);
  EXPECT_EQ(g.sampling(), json({{"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 20}}));
  EXPECT_EQ(g.eos_token_ids, std::vector<int32_t>({151645, 151643}));
  EXPECT_EQ(g.to_json()["do_sample"], true);
  // do_sample false (or absent, transformers' default) is greedy whatever else is set.
  g = GenerationDefaults::from_file(
      d.write("greedy.json", R"({"do_sample": false, "temperature": 0.6, "top_p": 0.9, "eos_token_id": 2})"));
  EXPECT_EQ(g.sampling(), json({{"temperature", 0.0}}));
  EXPECT_EQ(g.eos_token_ids, std::vector<int32_t>({2}));
  g = GenerationDefaults::from_file(d.write("absent_do_sample.json", R"({"temperature": 0.7})"));
  EXPECT_EQ(g.sampling(), json({{"temperature", 0.0}}));
  // do_sample alone: GenerationConfig's defaults temperature 1.0, top_p 1.0, top_k 50.
  g = GenerationDefaults::from_file(d.write("sample.json", R"({"do_sample": true})"));
  EXPECT_EQ(g.sampling(), json({{"temperature", 1.0}, {"top_p", 1.0}, {"top_k", 50}}));
  // Wrong types name the file and the field.
  const std::string bad = d.write("bad.json", R"({"do_sample": "yes"})");
  try {
    GenerationDefaults::from_file(bad);
    ADD_FAILURE();
  } catch (const kvb::Error& e) {
    EXPECT_EQ(std::string(e.what()), bad + ": do_sample: expected true or false, got \"yes\"");
  }
  EXPECT_THROW(GenerationDefaults::from_file(d.write("bad2.json", R"({"top_p": 1.5})")), kvb::Error);
  EXPECT_THROW(GenerationDefaults::from_file(d.write("bad3.json", R"({"eos_token_id": ["x"]})")), kvb::Error);
}

TEST(GenerationConfig, ModelDirMergesEosListAndKeepsDefaults) {
  TempDir d;
  d.write("config.json", base_config().dump());
  ModelConfig c = ModelConfig::from_dir(d.path.string());
  EXPECT_FALSE(c.generation.present);
  json cfg = base_config();
  cfg["eos_token_id"] = 2;
  d.write("config.json", cfg.dump());
  d.write("generation_config.json", R"({"do_sample": true, "temperature": 0.8, "eos_token_id": [7, 2, 9]})");
  c = ModelConfig::from_dir(d.path.string());
  EXPECT_TRUE(c.generation.present);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>({2, 7, 9}));
  EXPECT_EQ(c.generation.sampling(), json({{"temperature", 0.8}, {"top_p", 1.0}, {"top_k", 50}}));
}

}  // namespace
