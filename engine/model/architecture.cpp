#include "engine/model/architecture.h"

#include <string>

#include "engine/util/error.h"

namespace kvb {
namespace {

using R = TensorRole;

/// The Llama family's tensor names: transformers' LlamaForCausalLM state dict and llama.cpp's
/// GGUF names (gguf-py/gguf/constants.py MODEL_TENSORS / tensor_mapping.py).
constexpr TensorName kLlamaTensors[] = {
    {R::kEmbed, "model.embed_tokens.weight", "token_embd.weight"},
    {R::kFinalNorm, "model.norm.weight", "output_norm.weight"},
    {R::kLmHead, "lm_head.weight", "output.weight"},
    {R::kAttnNorm, "model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"},
    {R::kWq, "model.layers.{}.self_attn.q_proj.weight", "blk.{}.attn_q.weight"},
    {R::kWk, "model.layers.{}.self_attn.k_proj.weight", "blk.{}.attn_k.weight"},
    {R::kWv, "model.layers.{}.self_attn.v_proj.weight", "blk.{}.attn_v.weight"},
    {R::kWo, "model.layers.{}.self_attn.o_proj.weight", "blk.{}.attn_output.weight"},
    {R::kBq, "model.layers.{}.self_attn.q_proj.bias", "blk.{}.attn_q.bias"},
    {R::kBk, "model.layers.{}.self_attn.k_proj.bias", "blk.{}.attn_k.bias"},
    {R::kBv, "model.layers.{}.self_attn.v_proj.bias", "blk.{}.attn_v.bias"},
    {R::kQNorm, "model.layers.{}.self_attn.q_norm.weight", "blk.{}.attn_q_norm.weight"},
    {R::kKNorm, "model.layers.{}.self_attn.k_norm.weight", "blk.{}.attn_k_norm.weight"},
    {R::kMlpNorm, "model.layers.{}.post_attention_layernorm.weight", "blk.{}.ffn_norm.weight"},
    {R::kGate, "model.layers.{}.mlp.gate_proj.weight", "blk.{}.ffn_gate.weight"},
    {R::kUp, "model.layers.{}.mlp.up_proj.weight", "blk.{}.ffn_up.weight"},
    {R::kDown, "model.layers.{}.mlp.down_proj.weight", "blk.{}.ffn_down.weight"},
};

/// Gemma 2's: the Llama names, with the sandwich norms (transformers' Gemma2DecoderLayer:
/// post_attention_layernorm is the attention output's norm, pre_feedforward_layernorm the MLP
/// input's). No GGUF names: llama.cpp's converter adds 1 to Gemma norm weights, which this
/// table's norm_plus_one would apply twice.
constexpr TensorName kGemma2Tensors[] = {
    {R::kEmbed, "model.embed_tokens.weight", nullptr},
    {R::kFinalNorm, "model.norm.weight", nullptr},
    {R::kLmHead, "lm_head.weight", nullptr},
    {R::kAttnNorm, "model.layers.{}.input_layernorm.weight", nullptr},
    {R::kWq, "model.layers.{}.self_attn.q_proj.weight", nullptr},
    {R::kWk, "model.layers.{}.self_attn.k_proj.weight", nullptr},
    {R::kWv, "model.layers.{}.self_attn.v_proj.weight", nullptr},
    {R::kWo, "model.layers.{}.self_attn.o_proj.weight", nullptr},
    {R::kBq, "model.layers.{}.self_attn.q_proj.bias", nullptr},
    {R::kBk, "model.layers.{}.self_attn.k_proj.bias", nullptr},
    {R::kBv, "model.layers.{}.self_attn.v_proj.bias", nullptr},
    {R::kPostAttnNorm, "model.layers.{}.post_attention_layernorm.weight", nullptr},
    {R::kMlpNorm, "model.layers.{}.pre_feedforward_layernorm.weight", nullptr},
    {R::kPostMlpNorm, "model.layers.{}.post_feedforward_layernorm.weight", nullptr},
    {R::kGate, "model.layers.{}.mlp.gate_proj.weight", nullptr},
    {R::kUp, "model.layers.{}.mlp.up_proj.weight", nullptr},
    {R::kDown, "model.layers.{}.mlp.down_proj.weight", nullptr},
};

constexpr const char* kLlamaClasses[] = {"LlamaForCausalLM"};
constexpr const char* kQwen2Classes[] = {"Qwen2ForCausalLM"};
constexpr const char* kQwen3Classes[] = {"Qwen3ForCausalLM"};
constexpr const char* kMistralClasses[] = {"MistralForCausalLM"};
constexpr const char* kMinistralClasses[] = {"MinistralForCausalLM"};
constexpr const char* kGemma2Classes[] = {"Gemma2ForCausalLM"};

// The table. Fields: model_type, architectures, GGUF name, GGUF Q/K permuted, tensors,
// activation, its config key, q/k/v bias, q/k norm, sliding-window rule, (1 + w) norms,
// √H embedding scale.
const Architecture kArchitectures[] = {
    // transformers models/llama/modeling_llama.py; llama.cpp convert_hf_to_gguf.py LlamaModel
    // permutes the rows of Q and K (its `permute`), which gguf.cpp undoes.
    {"llama", kLlamaClasses, "llama", true, kLlamaTensors, Activation::kSilu, "hidden_act", QkvBias::kConfig, false,
     SlidingRule::kNone, false, false},
    // models/qwen2/modeling_qwen2.py: q/k/v always biased; layer_types / max_window_layers.
    {"qwen2", kQwen2Classes, "qwen2", false, kLlamaTensors, Activation::kSilu, "hidden_act", QkvBias::kAlways, false,
     SlidingRule::kGatedLayers, false, false},
    // models/qwen3/modeling_qwen3.py: per-head q/k RMSNorm before RoPE.
    {"qwen3", kQwen3Classes, "qwen3", false, kLlamaTensors, Activation::kSilu, "hidden_act", QkvBias::kConfig, true,
     SlidingRule::kGatedLayers, false, false},
    // models/mistral/modeling_mistral.py: Llama's block without q/k/v bias, `sliding_window` on
    // every layer. llama.cpp converts Mistral checkpoints as "llama" (no sliding window in GGUF).
    {"mistral", kMistralClasses, nullptr, false, kLlamaTensors, Activation::kSilu, "hidden_act", QkvBias::kNever, false,
     SlidingRule::kEveryLayer, false, false},
    // models/ministral/modeling_ministral.py: Mistral's block, sliding window per `layer_types`.
    {"ministral", kMinistralClasses, nullptr, false, kLlamaTensors, Activation::kSilu, "hidden_act", QkvBias::kNever,
     false, SlidingRule::kLayerTypes, false, false},
    // models/gemma2/modeling_gemma2.py: sandwich norms (1 + w), GeLU-tanh MLP, √H embedding
    // scale, query_pre_attn_scalar, attention and final logit soft-capping, alternating windows.
    {"gemma2", kGemma2Classes, nullptr, false, kGemma2Tensors, Activation::kGeluTanh, "hidden_activation",
     QkvBias::kConfig, false, SlidingRule::kAlternating, true, true},
};

/// Substitutes the layer index for `{}` in a name pattern.
std::string expand(const char* pattern, int64_t layer) {
  std::string s = pattern;
  if (const size_t at = s.find("{}"); at != std::string::npos) s.replace(at, 2, std::to_string(layer));
  return s;
}

/// The layer index when `name` matches `pattern` ("{}" = one or more digits), else -1; 0 for a
/// pattern without "{}" that equals name.
int64_t match(std::string_view pattern, std::string_view name) {
  const size_t at = pattern.find("{}");
  if (at == std::string_view::npos) return pattern == name ? 0 : -1;
  const std::string_view pre = pattern.substr(0, at), post = pattern.substr(at + 2);
  if (name.size() <= pre.size() + post.size() || name.substr(0, pre.size()) != pre ||
      name.substr(name.size() - post.size()) != post)
    return -1;
  const std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos) return -1;
  return std::stoll(std::string(digits));
}

}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

const Architecture* find_architecture(std::string_view model_type) {
  for (const Architecture& a : kArchitectures)
    if (model_type == a.model_type) return &a;
  return nullptr;
}

const Architecture* find_architecture_by_class(std::string_view hf_class) {
  for (const Architecture& a : kArchitectures)
    for (const char* c : a.hf_classes)
      if (hf_class == c) return &a;
  return nullptr;
}

const char* hidden_act_name(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_pytorch_tanh";
  }
  return "?";
}

bool has_role(const Architecture& a, TensorRole role) {
  for (const TensorName& t : a.tensors)
    if (t.role == role) return true;
  return false;
}

const Architecture* find_gguf_architecture(std::string_view gguf_arch) {
  for (const Architecture& a : kArchitectures)
    if (a.gguf_arch && gguf_arch == a.gguf_arch) return &a;
  return nullptr;
}

const Architecture& architecture(std::string_view model_type) {
  if (const Architecture* a = find_architecture(model_type)) return *a;
  fail("model type '{}' is not supported (supported: {})", model_type, architecture_names());
}

std::string architecture_names(bool gguf) {
  std::string s;
  for (const Architecture& a : kArchitectures) {
    const char* n = gguf ? a.gguf_arch : a.model_type;
    if (!n) continue;
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

std::string hf_tensor_name(const Architecture& a, TensorRole role, int64_t layer) {
  for (const TensorName& t : a.tensors)
    if (t.role == role) return expand(t.hf, layer);
  fail("architecture {} has no tensor of role {}", a.model_type, static_cast<int>(role));
}

std::string gguf_to_hf_tensor_name(const Architecture& a, const std::string& g) {
  for (const TensorName& t : a.tensors) {
    if (!t.gguf) continue;
    if (const int64_t l = match(t.gguf, g); l >= 0) return expand(t.hf, l);
  }
  return g;
}

}  // namespace kvb
