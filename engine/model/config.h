// kvb::ModelConfig — the architecture hyperparameters of a decoder-only transformer, read from
// a Hugging Face config.json or from GGUF metadata, for the architectures of
// engine/model/architecture.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb {

/// RoPE frequency scaling (config.json `rope_scaling`, transformers' rope_type names).
struct RopeScaling {
  std::string type = "default";  ///< default | linear | llama3 | yarn
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 0.0;  ///< 0 = derive from factor (0.1*ln(factor)+1)
  double mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
};

/// A model's generation_config.json as transformers' GenerationConfig reads it: the sampling
/// defaults that model.generate() uses when the caller passes none.
struct GenerationDefaults {
  bool present = false;           ///< the file exists
  std::optional<bool> do_sample;  ///< absent means false (transformers' default): greedy
  std::optional<double> temperature, top_p;
  std::optional<int> top_k;
  std::vector<int32_t> eos_token_ids;  ///< eos_token_id: an integer or a list
  std::optional<int32_t> bos_token_id;

  /// Reads PATH (a generation_config.json); an absent file gives present = false. Throws
  /// kvb::Error ("<file>: <field>: <what>") for a wrongly typed field.
  static GenerationDefaults from_file(const std::string& path);
  /// The sampling transformers' generate() applies with this config and no arguments:
  /// {"temperature": 0} (greedy) unless do_sample is true; with do_sample, {"temperature",
  /// "top_p", "top_k"} with GenerationConfig's defaults (1.0, 1.0, 50) for absent fields
  /// (top_k 0 = off, temperature 0 = greedy, as kvbench's sampler reads them).
  nlohmann::json sampling() const;
  /// The file's fields as read ({} when absent), for a run's stored config.
  nlohmann::json to_json() const;
};

/// Hyperparameters of one model. Shapes below use: H = hidden_size, Hq = num_attention_heads,
/// Hkv = num_key_value_heads, D = head_dim, I = intermediate_size, V = vocab_size.
struct ModelConfig {
  std::string model_type;         ///< an Architecture's model_type (engine/model/architecture.h)
  int64_t vocab_size = 0;         ///< V
  int64_t hidden_size = 0;        ///< H
  int64_t intermediate_size = 0;  ///< I (SwiGLU MLP)
  int64_t num_layers = 0;
  int64_t num_heads = 0;     ///< Hq
  int64_t num_kv_heads = 0;  ///< Hkv (GQA: Hq % Hkv == 0)
  int64_t head_dim = 0;      ///< D (config `head_dim`, else H / Hq)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< q/k/v projections carry a bias (qwen2: always)
  bool qk_norm = false;         ///< per-head RMSNorm on q and k before RoPE (qwen3)
  /// Per layer, the sliding attention window W in tokens: a query at position p attends to
  /// keys at positions (p − W, p] (transformers' sliding_window_overlay). 0 = full causal
  /// attention. Empty = every layer full. Set by the architecture's SlidingRule.
  std::vector<int32_t> layer_window;
  /// Attention scores are q·k·s^(−1/2) with s = `query_pre_attn_scalar` (Gemma 2); 0: s = D.
  double query_pre_attn_scalar = 0;
  /// Soft-capping c·tanh(x / c) of attention scores before the mask (`attn_logit_softcapping`)
  /// and of the output logits (`final_logit_softcapping`); 0 = none.
  double attn_logit_softcap = 0, final_logit_softcap = 0;
  std::vector<int32_t> eos_token_ids;  ///< from config.json and generation_config.json
  int32_t bos_token_id = -1;
  GenerationDefaults generation;  ///< DIR/generation_config.json (from_dir), empty otherwise

  /// Parses a config.json object. `origin` names the file in errors. Throws kvb::Error naming
  /// the field for missing/invalid values or an unknown model_type.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& origin);
  /// Reads DIR/config.json, and DIR/generation_config.json's eos_token_id when present.
  static ModelConfig from_dir(const std::string& dir);
  /// Checks internal consistency (positive sizes, Hq % Hkv == 0, ...); throws kvb::Error.
  void validate(const std::string& origin) const;
  /// The sliding window of `layer` (0 = full attention).
  int32_t window(int64_t layer) const { return layer_window.empty() ? 0 : layer_window[static_cast<size_t>(layer)]; }
  /// True when some layer uses a sliding window.
  bool has_sliding_window() const {
    for (int32_t w : layer_window)
      if (w > 0) return true;
    return false;
  }
  /// The attention score scale, f32: 1/√D, or query_pre_attn_scalar^(−1/2) when set (the
  /// Python double transformers computes, rounded to f32).
  float attention_scale() const;
  /// Number of parameters implied by the shapes (embeddings counted once when tied).
  int64_t num_parameters() const;
};

}  // namespace kvb
