// kvb::LoraAdapter — a PEFT LoRA adapter read for a policy-requested pass (RestoreKV's restore
// pass, PolicyNeeds::restore_pass): low-rank deltas on a decoder layer's projections, applied by the
// backend as y += s · B(A x) on top of the base projection y = W x (+ bias), with s = lora_alpha / r
// (use_rslora: lora_alpha / √r) — PEFT's LoraLayer (peft/tuners/lora/layer.py, Linear.forward:
// `result + lora_B(lora_A(dropout(x))) * scaling`; dropout is the identity in inference).
// What is read (docs/policies.md#restorekv): PEFT's adapter_config.json (peft_type LORA, r,
// lora_alpha, use_rslora, target_modules a list of q_proj, k_proj, v_proj, o_proj, gate_proj,
// up_proj, down_proj) and adapter_model.safetensors with, for every decoder layer l and target t,
// base_model.model.model.layers.{l}.{self_attn|mlp}.{t}.lora_A.weight [r, in] and .lora_B.weight
// [out, r]. Everything else PEFT can express is refused with one kvb::Error naming the file and
// field: DoRA (use_dora), bias != "none", modules_to_save, rank_pattern / alpha_pattern,
// layers_to_transform, fan_in_fan_out, a regex target_modules, any other target, LoRA biases and
// tensors that are not a target's lora_A / lora_B.
// Self-contained like every policy component: it knows projection names, not the model.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb {

class GateWeights;

/// The decoder-layer projections a LoRA adapter may target, in PEFT's module names.
enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
/// The number of LoraTarget values.
inline constexpr int kLoraTargets = 7;

/// PEFT's module name of `t` ("q_proj", ..., "down_proj").
const char* lora_target_name(LoraTarget t);
/// The module holding `t` in a decoder layer: "self_attn" (q/k/v/o) or "mlp" (gate/up/down).
const char* lora_target_parent(LoraTarget t);

/// One projection's low-rank delta: y[out] += scale · B · (A · x[in]).
struct LoraMatrix {
  int64_t rank = 0;      ///< r (0: the projection has no delta)
  int64_t in = 0;        ///< input width of the projection
  int64_t out = 0;       ///< output width of the projection
  float scale = 0.0f;    ///< lora_alpha / r (rslora: lora_alpha / √r), rounded to f32 as torch multiplies
  std::vector<float> a;  ///< lora_A [r, in] f32, row-major
  std::vector<float> b;  ///< lora_B [out, r] f32, row-major
};

/// A LoRA adapter over every decoder layer of a model (see the file comment).
struct LoraAdapter {
  int64_t rank = 0;                                          ///< r
  double alpha = 0;                                          ///< lora_alpha
  bool rslora = false;                                       ///< use_rslora
  std::vector<LoraTarget> targets;                           ///< target_modules, in config order
  std::vector<std::array<LoraMatrix, kLoraTargets>> layers;  ///< [layer][target]; rank 0 where not targeted
  std::string source;                                        ///< where it came from (errors)

  /// The delta of `t` in layer `layer`, or nullptr when the adapter does not target it.
  const LoraMatrix* at(int layer, LoraTarget t) const;
};

/// Reads a PEFT LoRA adapter from its adapter_config.json content `config` (read from
/// `config_path`, for messages) and the f32 tensors of its adapter_model.safetensors `tensors`
/// (GateWeights::load converts F16/BF16). The layer count is the one the tensors cover. Throws
/// one kvb::Error "<file>: <field>: ..." for anything outside what the file comment lists.
LoraAdapter lora_adapter_from(const nlohmann::json& config, const std::string& config_path, const GateWeights& tensors);

/// The seeded RANDOM adapter of the test-only `random_adapter=SEED` parameters (tests only): rank
/// `rank`, lora_alpha = 2·rank, on q_proj and v_proj (PEFT's default targets for Llama) of
/// `layers` layers of a model with hidden size H, Hq query heads and Hkv kv heads of head_dim D;
/// A ~ N(0, 1/H), B ~ N(0, 0.02²) (SeededDraws with seed·1000003 + layer).
LoraAdapter random_lora_adapter(int layers, int64_t H, int64_t Hq, int64_t Hkv, int64_t D, int64_t rank, int64_t seed);

/// y[T, m.out] += m.scale · (x[T, m.in] · Aᵀ) · Bᵀ, f32 (matmul_nt twice: one reduction order per
/// element whatever the thread count). x and y must not overlap.
void lora_add(const LoraMatrix& m, const float* x, int64_t T, float* y);

}  // namespace kvb
