// kvb::Architecture — one descriptor per supported decoder architecture: the names it goes by
// (Hugging Face config.json `model_type`/`architectures`, GGUF `general.architecture`), its
// tensor names in both formats, and the choices of its transformer block (norm, activation, q/k
// norm, q/k/v bias, RoPE kind, sliding-window rule). The config loaders (config.cpp, gguf.cpp),
// the weight binding (model.cpp) and both backends read this table; adding an architecture that
// reuses an existing block is one entry in kArchitectures (architecture.cpp). See
// docs/architecture.md, "Adding a model architecture".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvb {

/// The weights of a decoder-only transformer by role. Per-layer roles are named with the layer
/// index substituted for `{}` in Architecture::tensors.
enum class TensorRole : uint8_t {
  kEmbed,         ///< token embedding [V, H]
  kFinalNorm,     ///< final RMSNorm weight [H]
  kLmHead,        ///< output projection [V, H] (absent when tied)
  kAttnNorm,      ///< per layer: RMSNorm before attention [H]
  kWq,            ///< [Hq·D, H]
  kWk,            ///< [Hkv·D, H]
  kWv,            ///< [Hkv·D, H]
  kWo,            ///< [H, Hq·D]
  kBq,            ///< [Hq·D] (q/k/v bias)
  kBk,            ///< [Hkv·D]
  kBv,            ///< [Hkv·D]
  kQNorm,         ///< per-head RMSNorm on q [D]
  kKNorm,         ///< per-head RMSNorm on k [D]
  kMlpNorm,       ///< RMSNorm before the MLP [H]
  kPostAttnNorm,  ///< RMSNorm of the attention output before the residual add [H] (Gemma 2)
  kPostMlpNorm,   ///< RMSNorm of the MLP output before the residual add [H] (Gemma 2)
  kGate,          ///< [I, H]
  kUp,            ///< [I, H]
  kDown,          ///< [H, I]
  kCount
};

/// A tensor's name in a Hugging Face safetensors checkpoint and in a GGUF file; per-layer names
/// hold `{}` where the layer index goes. gguf is null when llama.cpp has no such tensor.
struct TensorName {
  TensorRole role;
  const char* hf;
  const char* gguf;
};

/// The q/k/v projection bias rule.
enum class QkvBias : uint8_t {
  kNever,   ///< no bias tensors
  kAlways,  ///< always present (Qwen2)
  kConfig,  ///< config.json `attention_bias`: false (true biases o_proj too: refused); GGUF: attn_q.bias
};

/// Which layers use sliding-window attention, as transformers reads config.json.
enum class SlidingRule : uint8_t {
  kNone,         ///< full attention only; `layer_types` must be all "full_attention"
  kEveryLayer,   ///< `sliding_window` (null = off) on every layer; `layer_types` ignored, as
                 ///< MistralConfig / MistralAttention do
  kLayerTypes,   ///< layers with `layer_types[l] == "sliding_attention"` get `sliding_window`;
                 ///< without layer_types every layer does when sliding_window is set (MinistralConfig)
  kAlternating,  ///< as kLayerTypes, but without layer_types the even layers 0, 2, ... slide
                 ///< (Gemma2Config)
  kGatedLayers,  ///< as kLayerTypes but only when `use_sliding_window`, and without layer_types
                 ///< the layers ≥ `max_window_layers` (Qwen2Config / Qwen3Config __init__)
};

/// MLP activation of the gated MLP: down(act(gate(x)) ⊙ up(x)).
enum class Activation : uint8_t {
  kSilu,      ///< SiLU, x·σ(x) (config "silu")
  kGeluTanh,  ///< GeLU, tanh approximation: x/2·(1 + tanh(√(2/π)(x + 0.044715x³))) ("gelu_pytorch_tanh")
};

/// One architecture: everything the loaders and backends need to know about it.
struct Architecture {
  const char* model_type;                   ///< config.json `model_type` (also ModelConfig::model_type)
  std::span<const char* const> hf_classes;  ///< config.json `architectures` entries it serves
  const char* gguf_arch;                    ///< GGUF `general.architecture` (and key prefix); null: none
  bool gguf_permuted_qk;                    ///< llama.cpp's converter permuted Q/K rows (undo on load)
  std::span<const TensorName> tensors;      ///< every role it has, HF and GGUF names
  Activation activation;                    ///< the MLP activation; config act_key must name it
  const char* act_key;                      ///< config.json key naming the activation
  QkvBias qkv_bias;
  bool qk_norm;  ///< per-head RMSNorm on q and k before RoPE (Qwen3)
  SlidingRule sliding;
  bool norm_plus_one;  ///< HF norm weights hold w − 1: RMSNorm scales by (1 + w)
                       ///< (Gemma2RMSNorm); folded into the weight on load
  bool embed_scale;    ///< embeddings are multiplied by √H (f32), Gemma2Model
  // Every architecture today: RMSNorm `w·x/√(mean(x²)+eps)` with eps from `rms_norm_eps`
  // (GGUF `<arch>.attention.layer_norm_rms_epsilon`), rotate-half RoPE (transformers'
  // apply_rotary_pos_emb; rope_scaling/rope_parameters as config.cpp reads them), tied
  // embeddings when `tie_word_embeddings` (GGUF: no `output.weight`); config.json's optional
  // `query_pre_attn_scalar`, `attn_logit_softcapping` and `final_logit_softcapping` are read for
  // every architecture (ModelConfig).
};

/// The supported architectures, in the order error messages list them.
std::span<const Architecture> architectures();
/// The architecture with config.json `model_type` NAME, or null.
const Architecture* find_architecture(std::string_view model_type);
/// The architecture whose hf_classes holds `hf_class` (a config.json `architectures` entry), or null.
const Architecture* find_architecture_by_class(std::string_view hf_class);
/// config.json's `hidden_act` name of an activation ("silu").
const char* hidden_act_name(Activation a);
/// The architecture GGUF `general.architecture` NAME loads as, or null.
const Architecture* find_gguf_architecture(std::string_view gguf_arch);
/// The architecture with `model_type` NAME; throws kvb::Error (an internal error: configs are
/// validated on load) when there is none.
const Architecture& architecture(std::string_view model_type);
/// "llama, qwen2, ..." (model_type names; gguf = true: GGUF names) for error messages.
std::string architecture_names(bool gguf = false);

/// True when `a`'s tensor table has `role` (e.g. kPostAttnNorm only for Gemma 2).
bool has_role(const Architecture& a, TensorRole role);
/// The HF name of `role` in `layer` (ignored for kEmbed, kFinalNorm, kLmHead), e.g.
/// "model.layers.3.self_attn.q_proj.weight". Throws kvb::Error when the architecture has no such role.
std::string hf_tensor_name(const Architecture& a, TensorRole role, int64_t layer = 0);
/// The HF name of a GGUF tensor name under `a`'s table ("blk.3.attn_q.weight" →
/// "model.layers.3.self_attn.q_proj.weight"); names the table does not know are returned unchanged.
std::string gguf_to_hf_tensor_name(const Architecture& a, const std::string& gguf_name);

}  // namespace kvb
