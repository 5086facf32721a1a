// Model loading binds every tensor of the file or fails naming the first one it did not bind
// (issue 38, after llama.cpp's tensor-count check); the known-ignorable tensors load and change
// nothing; GGUF's `rope_freqs.weight` is bound as llama.cpp applies it; config.json flags that
// change the model and that kvbench does not implement are refused.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/model/weights.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace {

using json = nlohmann::json;
using kvb::Model;
using kvb::ModelConfig;
using kvb::WeightStore;

const char* kStories = "models/stories260K-hf";

/// stories260K's config and weights (5 layers, H 64, I 172, D 8, tied embeddings).
struct Stories {
  ModelConfig cfg;
  WeightStore ws;
};
Stories stories() {
  const std::string dir = kvb::test::test_data(kStories);
  return {ModelConfig::from_dir(dir), WeightStore::from_safetensors_dir(dir)};
}

std::string load_error(Stories s) {
  return kvb::test::input_error_of(
      [&] { Model::from_weights(std::move(s.cfg), std::move(s.ws), "stories", kvb::WeightFormat::kF32); });
}

TEST(ModelBinding, StoriesBindsEveryTensorOfItsFile) {
  KVB_REQUIRE_TEST_DATA(kStories);
  Stories s = stories();
  const size_t n = s.ws.tensors().size();
  ASSERT_EQ(n, 47u);  // embed + final norm + 5 × 9 per-layer tensors; tied, so no lm_head
  EXPECT_NO_THROW(Model::from_weights(std::move(s.cfg), std::move(s.ws), "stories"));
}

TEST(ModelBinding, UnboundTensorIsRefusedByName) {
  KVB_REQUIRE_TEST_DATA(kStories);
  struct Extra {
    std::string name;
    std::vector<int64_t> shape;
  };
  for (const Extra& e :
       {Extra{"model.layers.0.mlp.gate_proj.bias", {172}}, Extra{"model.layers.1.self_attn.o_proj.bias", {64}},
        Extra{"model.layers.4.self_attn.q_norm.weight", {8}},        // llama has no q/k norm
        Extra{"model.layers.5.input_layernorm.weight", {64}},        // a sixth layer
        Extra{"model.layers.5.self_attn.rotary_emb.inv_freq", {4}},  // layer 5 of 5
        Extra{"model.layers.x.self_attn.rotary_emb.inv_freq", {4}}, Extra{"model.layers.5.self_attn.fc1.weight", {4, 4}},
        Extra{"model.layers.0.self_attn.fc1.bias", {4}},  // LocRet's heads have no bias
        Extra{"score.weight", {2, 64}}}) {
    SCOPED_TRACE(e.name);
    Stories s = stories();
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    s.ws.add_owned(e.name, e.shape, std::vector<float>(static_cast<size_t>(numel), 0.5f), "extra.safetensors");
    const std::string err = load_error(std::move(s));
    EXPECT_TRUE(kvb::test::contains_all(
        err, {"extra.safetensors: tensor '" + e.name + "': not used by the llama architecture", "binds 47 of the 48"}))
        << err;
  }
}

TEST(ModelBinding, KnownIgnorableTensorsLoadAndChangeNothing) {
  KVB_REQUIRE_TEST_DATA(kStories);
  Stories plain = stories();
  const auto ref = Model::from_weights(std::move(plain.cfg), std::move(plain.ws), "stories");
  Stories s = stories();
  // A tied checkpoint that also stores lm_head (with other values: it must not be read), the RoPE
  // buffers old transformers saved, and LocRet's retaining heads.
  s.ws.add_owned("lm_head.weight", {512, 64}, std::vector<float>(512 * 64, 3.0f), "extra");
  for (int l = 0; l < 5; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    s.ws.add_owned(p + "rotary_emb.inv_freq", {4}, std::vector<float>(4, 9.0f), "extra");
    s.ws.add_owned(p + "fc1.weight", {16, 128}, std::vector<float>(16 * 128, 1.0f), "extra");
    s.ws.add_owned(p + "fc2.weight", {4, 16}, std::vector<float>(4 * 16, 1.0f), "extra");
  }
  s.ws.add_owned("model.rotary_emb.inv_freq", {4}, std::vector<float>(4, 9.0f), "extra");
  std::shared_ptr<Model> m;
  ASSERT_NO_THROW(m = Model::from_weights(std::move(s.cfg), std::move(s.ws), "stories"));
  EXPECT_EQ(m->lm_head().data, m->embed().data);  // tied: the stored copy is not used
  EXPECT_EQ(m->inv_freq(), ref->inv_freq());      // recomputed, not the stored 9s
  EXPECT_EQ(m->weight_bytes(), ref->weight_bytes());
}

TEST(ModelBinding, UntiedLmHeadIsBoundAndAMissingOneNamed) {
  KVB_REQUIRE_TEST_DATA(kStories);
  Stories s = stories();
  s.cfg.tie_word_embeddings = false;
  EXPECT_TRUE(kvb::test::contains_all(load_error(std::move(s)), {"tensor 'lm_head.weight'", "missing"}));
  Stories t = stories();
  t.cfg.tie_word_embeddings = false;
  t.ws.add_owned("lm_head.weight", {512, 64}, std::vector<float>(512 * 64, 3.0f), "extra");
  std::shared_ptr<Model> m;
  ASSERT_NO_THROW(m = Model::from_weights(std::move(t.cfg), std::move(t.ws), "stories"));
  EXPECT_NE(m->lm_head().data, m->embed().data);
  EXPECT_EQ(m->lm_head().f32[0], 3.0f);
}

// llama.cpp's converter writes Llama 3 RoPE scaling as per-frequency divisors
// (convert_hf_to_gguf.py, LlamaModel: 1 above the high-frequency wavelength, `factor` below the
// low one, 1 / ((1 − s) / factor + s) between). Dividing the plain frequencies by them must give
// what transformers' llama3 rope computes from config.json.
TEST(ModelBinding, GgufRopeFreqsGiveTheLlama3Frequencies) {
  KVB_REQUIRE_TEST_DATA(kStories);
  const double factor = 8, low = 1, high = 4, orig = 2048, theta = 10000;
  const int64_t D = 8;
  std::vector<float> divisors;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double f = std::pow(theta, -double(2 * i) / double(D));
    const double wl = 2 * std::numbers::pi / f;
    if (wl < orig / high) divisors.push_back(1.0f);
    else if (wl > orig / low) divisors.push_back(static_cast<float>(factor));
    else {
      const double s = (orig / wl - low) / (high - low);
      divisors.push_back(static_cast<float>(1 / ((1 - s) / factor + s)));
    }
  }
  // The 4 frequencies of D = 8 cover every band: 1 and 0.1 (kept), 0.01 (smoothed), 0.001 (÷ 8).
  ASSERT_EQ(divisors[0], 1.0f);
  ASSERT_EQ(divisors[3], 8.0f);
  ASSERT_GT(divisors[2], 1.0f);
  ASSERT_LT(divisors[2], 8.0f);

  Stories s = stories();
  s.ws.add_owned("rope_freqs.weight", {D / 2}, divisors, "m.gguf");
  const auto m = Model::from_weights(std::move(s.cfg), std::move(s.ws), "stories");

  ModelConfig scaled = ModelConfig::from_dir(kvb::test::test_data(kStories));
  scaled.rope_scaling.type = "llama3";
  scaled.rope_scaling.factor = factor;
  scaled.rope_scaling.low_freq_factor = low;
  scaled.rope_scaling.high_freq_factor = high;
  scaled.rope_scaling.original_max_position_embeddings = static_cast<int64_t>(orig);
  float mscale = 0;
  const std::vector<float> want = kvb::rope_inv_freq(scaled, &mscale);
  ASSERT_EQ(m->inv_freq().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(m->inv_freq()[i], want[i], 1e-6 * want[i]) << i;

  Stories bad = stories();
  bad.ws.add_owned("rope_freqs.weight", {D / 2}, {1.0f, 0.0f, 1.0f, 1.0f}, "m.gguf");
  EXPECT_TRUE(
      kvb::test::contains_all(load_error(std::move(bad)), {"m.gguf: tensor 'rope_freqs.weight'", "element 1 is 0"}));
  Stories wrong_shape = stories();
  wrong_shape.ws.add_owned("rope_freqs.weight", {D}, std::vector<float>(D, 1.0f), "m.gguf");
  EXPECT_TRUE(kvb::test::contains_all(load_error(std::move(wrong_shape)), {"tensor 'rope_freqs.weight'", "shape [8]"}));
}

json llama_config() {
  return json::parse(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
    "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 8,
    "vocab_size": 512, "attention_bias": false, "mlp_bias": false, "pretraining_tp": 1,
    "partial_rotary_factor": 1.0, "quantization_config": null})");
}

std::string config_error(const json& j) {
  return kvb::test::input_error_of([&] { ModelConfig::from_json(j, "config.json"); });
}

TEST(ModelBinding, ConfigFlagsTheEngineDoesNotImplementAreRefused) {
  ASSERT_NO_THROW(ModelConfig::from_json(llama_config(), "config.json"));  // the flags at their no-op values
  // Issue 46, item 8: what transformers saves after loading a GGUF (float tensors) is accepted.
  json from_gguf = llama_config();
  from_gguf["quantization_config"] = {{"quant_method", "gguf"}, {"dequantize", true}};
  EXPECT_NO_THROW(ModelConfig::from_json(from_gguf, "config.json"));
  struct Case {
    std::string model_type, key;
    json value;
    std::string want;
  };
  for (const Case& c : {
           Case{"llama", "mlp_bias", true, "config.json: mlp_bias: true is not supported"},
           Case{"qwen3", "mlp_bias", true, "config.json: mlp_bias: true is not supported"},
           Case{"llama", "attention_bias", true, "config.json: attention_bias: true is not supported for llama"},
           Case{"qwen3", "attention_bias", true, "config.json: attention_bias: true is not supported for qwen3"},
           Case{"gemma2", "attention_bias", true, "config.json: attention_bias: true is not supported for gemma2"},
           Case{"llama", "quantization_config", {{"quant_method", "awq"}}, "config.json: quantization_config"},
           Case{"llama", "partial_rotary_factor", 0.5, "config.json: partial_rotary_factor: 0.5 is not supported"},
           Case{"llama", "partial_rotary_factor", "half", "config.json: partial_rotary_factor"},
           Case{"llama",
                "rope_parameters",
                {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}},
                "config.json: rope_parameters.partial_rotary_factor: 0.25"},
           Case{"llama",
                "rope_scaling",
                {{"rope_type", "longrope"}, {"factor", 2.0}},
                "config.json: rope_scaling.rope_type: unsupported RoPE scaling 'longrope'"},
       }) {
    SCOPED_TRACE(c.model_type + " " + c.key);
    json j = llama_config();
    j["model_type"] = c.model_type;
    j[c.key] = c.value;
    EXPECT_TRUE(kvb::test::contains_all(config_error(j), {c.want})) << config_error(j);
  }
  // Qwen2 always has q/k/v biases and never an o_proj bias: its attention_bias key means nothing.
  json q2 = llama_config();
  q2["model_type"] = "qwen2";
  q2["attention_bias"] = true;
  EXPECT_TRUE(ModelConfig::from_json(q2, "config.json").attention_bias);
}

}  // namespace
