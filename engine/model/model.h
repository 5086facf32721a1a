// kvb::Model — a decoder-only transformer of one of the architectures in
// engine/model/architecture.h (Llama, Qwen2, Qwen3, Mistral) with its weights resolved by
// tensor role, ready for the backends.
//
// The block (transformers' LlamaForCausalLM and its relatives):
//   x = embed[token]; for each layer:
//     h = RMSNorm(x)·attn_norm; q,k,v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)
//     (qwen3) q,k = per-head RMSNorm(q)·q_norm, RMSNorm(k)·k_norm;  q,k = RoPE(q,k, position)
//     x += softmax(q·kᵀ/√D + causal [+ sliding window, config.layer_window]) v · Woᵀ
//     x += (SiLU(RMSNorm(x)·mlp_norm·Wgᵀ) ⊙ (…·Wuᵀ))·Wdᵀ
//   with the architecture's variations (architecture.h): Gemma 2 normalises the attention and
//   MLP outputs again before each residual add (post_attn_norm, post_mlp_norm), uses GeLU-tanh,
//   scales embeddings by √H and soft-caps attention scores and logits.
//   logits = RMSNorm(x)·final_norm·lm_headᵀ   (lm_head = embed when tied)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/matmul.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace kvb {

/// How weight matrices are held in memory. kF32: converted to f32 (dequantised GGUF blocks;
/// the reference forward the fidelity tests compare with transformers). kBF16: converted to
/// bf16 (the CUDA backend's format). kStored: as the file stores them (safetensors F32/F16/BF16
/// and GGUF block-quantised types mapped in place, no copy; the CPU backend multiplies them
/// directly, quantising activations per row where the type needs it: engine/kernels/matmul.h).
enum class WeightFormat { kF32, kBF16, kStored };

/// Pointers to one layer's weights (row-major [out, in] as in torch Linear, as kvb::Mat in the
/// model's WeightFormat; vectors are f32).
struct LayerWeights {
  const float* attn_norm = nullptr;       ///< [H]
  Mat wq;                                 ///< [Hq·D, H]
  Mat wk;                                 ///< [Hkv·D, H]
  Mat wv;                                 ///< [Hkv·D, H]
  Mat wo;                                 ///< [H, Hq·D]
  const float* bq = nullptr;              ///< [Hq·D] or null
  const float* bk = nullptr;              ///< [Hkv·D] or null
  const float* bv = nullptr;              ///< [Hkv·D] or null
  const float* q_norm = nullptr;          ///< [D] (qwen3) or null
  const float* k_norm = nullptr;          ///< [D] (qwen3) or null
  const float* mlp_norm = nullptr;        ///< [H]
  const float* post_attn_norm = nullptr;  ///< [H] norm of the attention output (Gemma 2) or null
  const float* post_mlp_norm = nullptr;   ///< [H] norm of the MLP output (Gemma 2) or null
  Mat w_gate;                             ///< [I, H]
  Mat w_up;                               ///< [I, H]
  Mat w_down;                             ///< [H, I]
};

/// A loaded model. Immutable after load; safe to share between threads.
class Model {
 public:
  /// Loads DIR/config.json (+ generation_config.json) and the safetensors weights. Every tensor
  /// the config implies must be present with the implied shape, and every file tensor bound or
  /// known-ignorable (from_weights). Throws kvb::Error naming the file and the field or tensor.
  static std::shared_ptr<Model> load_dir(const std::string& dir, WeightFormat fmt = WeightFormat::kF32);
  /// Builds a model from a config and a weight store; an unbound tensor is an error (model.cpp).
  static std::shared_ptr<Model> from_weights(ModelConfig cfg, WeightStore weights, std::string id,
                                             WeightFormat fmt = WeightFormat::kF32);
  /// A model with the given shape and random weights for benchmarks and backend checks: every
  /// matrix and bias ~ N(0, 0.02²) (Irwin–Hall approximation from a counter-based hash of
  /// (seed, tensor, element), so independent of the thread count), norms 1. With
  /// WeightFormat::kBF16 the matrices are generated as bf16 directly (2 bytes per weight).
  static std::shared_ptr<Model> random(const ModelConfig& cfg, uint64_t seed, WeightFormat fmt = WeightFormat::kF32);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  /// Copies the embedding row of `token` into out[H] (f32; dequantised when stored quantised),
  /// times embed_scale().
  void embed_row(int32_t token, float* out) const;
  const Mat& embed() const { return embed_; }  ///< [V, H]
  /// The factor embed_row applies: √H rounded to f32 for architectures with embed_scale, else 1.
  float embed_scale() const { return embed_scale_; }
  const float* final_norm() const { return norm_; }  ///< [H]
  const Mat& lm_head() const { return lm_head_; }    ///< [V, H]
  WeightFormat weight_format() const { return fmt_; }
  /// RoPE inverse frequencies after scaling, [D/2], and the attention scaling factor
  /// (yarn's mscale; 1 otherwise) applied to cos/sin.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float rope_attention_scaling() const { return rope_mscale_; }
  /// Bytes of weight matrices and vectors as held in memory (f32, bf16 or as stored).
  size_t weight_bytes() const { return weight_bytes_; }
  /// Where the model came from (directory, file or "random:<shape>").
  const std::string& id() const { return id_; }

 private:
  void bind(const std::string& origin);
  const float* f32(const std::string& name, const std::vector<int64_t>& shape, bool optional = false);
  /// A norm weight: f32(), plus 1 when the architecture stores w − 1 (norm_plus_one).
  const float* norm(const std::string& name, const std::vector<int64_t>& shape);
  Mat mat(const std::string& name, const std::vector<int64_t>& shape);

  ModelConfig cfg_;
  WeightStore weights_;
  std::vector<std::unique_ptr<std::vector<float>>> converted_;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<std::vector<uint16_t>>> converted16_;
  Mat embed_, lm_head_;
  const float* norm_ = nullptr;
  WeightFormat fmt_ = WeightFormat::kF32;
  std::vector<float> inv_freq_;
  float rope_mscale_ = 1.0f;
  float embed_scale_ = 1.0f;
  size_t weight_bytes_ = 0;
  std::string id_;
};

/// RoPE inverse frequencies [D/2] and attention scaling for a config, as transformers'
/// ROPE_INIT_FUNCTIONS compute them (default, linear, llama3, yarn).
std::vector<float> rope_inv_freq(const ModelConfig& cfg, float* attention_scaling);

/// A ModelConfig of architecture `type` (ModelConfig::model_type) with vocabulary V, hidden size H,
/// MLP width I, L layers, Hq query and Hkv kv heads of head_dim D, RoPE base `theta` and tied
/// embeddings when `tied`; q/k norms and QKV bias as the architecture declares (attention_bias only
/// for QkvBias::kAlways), rms_norm_eps 1e-6, max_position_embeddings 131072, all else default.
/// Throws kvb::Error on an unknown architecture. model_shape's shapes and test tools build on it.
ModelConfig shape_config(const char* type, int64_t V, int64_t H, int64_t I, int64_t L, int64_t Hq, int64_t Hkv,
                         int64_t D, double theta, bool tied);

/// Model shapes for `kvbench bench --model-shape NAME` (random weights): stories260k,
/// smollm2-135m, qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.1-8b. Throws kvb::Error on unknown names.
ModelConfig model_shape(const std::string& name);

}  // namespace kvb
