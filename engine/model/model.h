// kvb::Model — a decoder-only transformer (Llama / Qwen2 / Qwen3 family) with its weights
// resolved to f32 row-major matrices, ready for the CPU backend.
//
// Architecture (transformers' LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM):
//   x = embed[token]; for each layer:
//     h = RMSNorm(x)·attn_norm; q,k,v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)
//     (qwen3) q,k = per-head RMSNorm(q)·q_norm, RMSNorm(k)·k_norm;  q,k = RoPE(q,k, position)
//     x += softmax(q·kᵀ/√D + causal) v · Woᵀ
//     x += (SiLU(RMSNorm(x)·mlp_norm·Wgᵀ) ⊙ (…·Wuᵀ))·Wdᵀ
//   logits = RMSNorm(x)·final_norm·lm_headᵀ   (lm_head = embed when tied)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace kvb {

/// Pointers to one layer's weights (f32, row-major [out, in] as in torch Linear).
struct LayerWeights {
  const float* attn_norm = nullptr;  ///< [H]
  const float* wq = nullptr;         ///< [Hq·D, H]
  const float* wk = nullptr;         ///< [Hkv·D, H]
  const float* wv = nullptr;         ///< [Hkv·D, H]
  const float* wo = nullptr;         ///< [H, Hq·D]
  const float* bq = nullptr;         ///< [Hq·D] or null
  const float* bk = nullptr;         ///< [Hkv·D] or null
  const float* bv = nullptr;         ///< [Hkv·D] or null
  const float* q_norm = nullptr;     ///< [D] (qwen3) or null
  const float* k_norm = nullptr;     ///< [D] (qwen3) or null
  const float* mlp_norm = nullptr;   ///< [H]
  const float* w_gate = nullptr;     ///< [I, H]
  const float* w_up = nullptr;       ///< [I, H]
  const float* w_down = nullptr;     ///< [H, I]
};

/// A loaded model. Immutable after load; safe to share between threads.
class Model {
 public:
  /// Loads DIR/config.json (+ generation_config.json) and the safetensors weights. Every tensor
  /// the config implies must be present with the implied shape. Throws kvb::Error naming the
  /// file and the field or tensor.
  static std::shared_ptr<Model> load_dir(const std::string& dir);
  /// Builds a model from a config and a weight store (safetensors or GGUF-dequantised).
  static std::shared_ptr<Model> from_weights(ModelConfig cfg, WeightStore weights, std::string id);
  /// A model with the given shape and random weights (N(0, 0.02), norms 1), for benchmarks.
  static std::shared_ptr<Model> random(const ModelConfig& cfg, uint64_t seed);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const float* embed() const { return embed_; }        ///< [V, H]
  const float* final_norm() const { return norm_; }    ///< [H]
  const float* lm_head() const { return lm_head_; }    ///< [V, H]
  /// RoPE inverse frequencies after scaling, [D/2], and the attention scaling factor
  /// (yarn's mscale; 1 otherwise) applied to cos/sin.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float rope_attention_scaling() const { return rope_mscale_; }
  /// Bytes of weights held in memory (f32).
  size_t weight_bytes() const { return weight_bytes_; }
  /// Where the model came from (directory, file or "random:<shape>").
  const std::string& id() const { return id_; }

 private:
  void bind(const std::string& origin);
  const float* f32(const std::string& name, const std::vector<int64_t>& shape, bool optional = false);

  ModelConfig cfg_;
  WeightStore weights_;
  std::vector<std::unique_ptr<std::vector<float>>> converted_;
  std::vector<LayerWeights> layers_;
  const float* embed_ = nullptr;
  const float* norm_ = nullptr;
  const float* lm_head_ = nullptr;
  std::vector<float> inv_freq_;
  float rope_mscale_ = 1.0f;
  size_t weight_bytes_ = 0;
  std::string id_;
};

/// RoPE inverse frequencies [D/2] and attention scaling for a config, as transformers'
/// ROPE_INIT_FUNCTIONS compute them (default, linear, llama3, yarn).
std::vector<float> rope_inv_freq(const ModelConfig& cfg, float* attention_scaling);

/// Model shapes for `kvbench bench --model-shape NAME` (random weights): stories260k,
/// smollm2-135m, qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.1-8b. Throws kvb::Error on unknown names.
ModelConfig model_shape(const std::string& name);

}  // namespace kvb
