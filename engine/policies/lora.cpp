#include "engine/policies/lora.h"

#include <cmath>
#include <set>

#include "engine/kernels/matmul.h"
#include "engine/policies/gate_weights.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

constexpr const char* kNames[kLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};

/// True when `v` is absent, null, false, an empty string, list or object (a PEFT field left at
/// its "off" default).
bool off(const nlohmann::json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return true;
  if (it->is_boolean()) return !it->get<bool>();
  if (it->is_string() || it->is_array() || it->is_object()) return it->empty();
  return false;
}

/// The LoraTarget named `name`, or −1.
int target_of(const std::string& name) {
  for (int t = 0; t < kLoraTargets; ++t)
    if (name == kNames[t]) return t;
  return -1;
}

}  // namespace

const char* lora_target_name(LoraTarget t) { return kNames[static_cast<int>(t)]; }

const char* lora_target_parent(LoraTarget t) { return static_cast<int>(t) <= 3 ? "self_attn" : "mlp"; }

const LoraMatrix* LoraAdapter::at(int layer, LoraTarget t) const {
  if (layer < 0 || layer >= static_cast<int>(layers.size())) return nullptr;
  const LoraMatrix& m = layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
  return m.rank > 0 ? &m : nullptr;
}

LoraAdapter lora_adapter_from(const nlohmann::json& cfg, const std::string& config_path, const GateWeights& tensors) {
  const std::string& cp = config_path;
  if (!cfg.is_object()) fail_at(cp, "", "expected a JSON object (PEFT's adapter_config.json)");
  const std::string peft_type = cfg.value("peft_type", std::string{});
  if (peft_type != "LORA") fail_at(cp, "peft_type", "'{}': only LoRA adapters are read", peft_type);
  for (const char* k : {"use_dora", "fan_in_fan_out", "lora_bias", "use_qalora"})
    if (!off(cfg, k)) fail_at(cp, k, "set: not supported (plain LoRA only)");
  for (const char* k :
       {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern", "exclude_modules",
        "target_parameters", "trainable_token_indices", "alora_invocation_tokens", "layer_replication",
        "megatron_config", "arrow_config", "kasa_config", "monteclora_config", "velora_config", "use_bdlora"})
    if (!off(cfg, k)) fail_at(cp, k, "set: not supported (every layer's targets with one rank and alpha only)");
  if (cfg.contains("bias") && cfg["bias"] != "none")
    fail_at(cp, "bias", "{}: not supported (\"none\" only)", cfg["bias"].dump());
  LoraAdapter a;
  a.source = tensors.path;
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<int64_t>() < 1)
    fail_at(cp, "r", "missing or not a positive integer");
  a.rank = cfg["r"].get<int64_t>();
  if (!cfg.contains("lora_alpha") || !cfg["lora_alpha"].is_number())
    fail_at(cp, "lora_alpha", "missing or not a number");
  a.alpha = cfg["lora_alpha"].get<double>();
  if (cfg.contains("use_rslora") && !cfg["use_rslora"].is_boolean()) fail_at(cp, "use_rslora", "not a boolean");
  a.rslora = cfg.value("use_rslora", false);
  const auto tm = cfg.find("target_modules");
  if (tm == cfg.end() || !tm->is_array() || tm->empty())
    fail_at(cp, "target_modules",
            "must be a non-empty list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
            "down_proj (a regular expression is not read)");
  std::set<int> seen;
  for (const auto& n : *tm) {
    const int t = n.is_string() ? target_of(n.get<std::string>()) : -1;
    if (t < 0)
      fail_at(cp, "target_modules",
              "{}: not a decoder-layer projection (q_proj, k_proj, v_proj, o_proj, gate_proj, "
              "up_proj, down_proj)",
              n.dump());
    if (seen.insert(t).second) a.targets.push_back(static_cast<LoraTarget>(t));
  }
  const std::string& tp = tensors.path;
  // Every tensor must be one target's lora_A / lora_B of one layer.
  int layers = 0;
  for (const auto& [name, t] : tensors.tensors) {
    std::string s = name;
    if (s.rfind("base_model.model.", 0) == 0) s = s.substr(17);
    int layer = -1;
    size_t used = 0;
    bool ok = s.rfind("model.layers.", 0) == 0;
    if (ok) {
      try {
        layer = std::stoi(s.substr(13), &used);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    std::string rest = ok ? s.substr(13 + used) : "";
    int target = -1;
    if (ok)
      for (int k = 0; k < kLoraTargets && target < 0; ++k)
        for (const char* ab : {".lora_A.weight", ".lora_B.weight"})
          if (rest == std::string(".") + lora_target_parent(static_cast<LoraTarget>(k)) + "." + kNames[k] + ab)
            target = k;
    if (!ok || layer < 0 || target < 0)
      fail_at(tp, name,
              "not a LoRA weight of a decoder-layer projection "
              "(base_model.model.model.layers.<l>.<self_attn|mlp>.<proj>.lora_A|lora_B.weight)");
    if (!seen.count(target)) fail_at(tp, name, "{} is not in target_modules of {}", kNames[target], cp);
    if (layer > 4095) fail_at(tp, name, "layer {}: more layers than any model has", layer);
    layers = std::max(layers, layer + 1);
  }
  if (layers == 0) fail_at(tp, "", "no LoRA tensors");
  a.layers.resize(static_cast<size_t>(layers));
  const float scale = static_cast<float>(a.rslora ? a.alpha / std::sqrt(static_cast<double>(a.rank))
                                                  : a.alpha / static_cast<double>(a.rank));
  for (int l = 0; l < layers; ++l)
    for (LoraTarget t : a.targets) {
      const std::string pfx =
          "base_model.model.model.layers." + std::to_string(l) + "." + lora_target_parent(t) + "." + lora_target_name(t);
      auto find = [&](const char* ab) -> const GateTensor& {
        const GateTensor* g = tensors.find(pfx + ab);
        if (!g) g = tensors.find(pfx.substr(17) + ab);
        if (!g) fail_at(tp, pfx + ab, "missing (every layer's targets need lora_A and lora_B)");
        if (g->shape.size() != 2) fail_at(tp, pfx + ab, "expected a matrix, got {} dims", g->shape.size());
        return *g;
      };
      const GateTensor& A = find(".lora_A.weight");
      const GateTensor& B = find(".lora_B.weight");
      if (A.shape[0] != a.rank) fail_at(tp, pfx + ".lora_A.weight", "{} rows, not r = {}", A.shape[0], a.rank);
      if (B.shape[1] != a.rank) fail_at(tp, pfx + ".lora_B.weight", "{} columns, not r = {}", B.shape[1], a.rank);
      LoraMatrix& m = a.layers[static_cast<size_t>(l)][static_cast<size_t>(t)];
      m.rank = a.rank;
      m.in = A.shape[1];
      m.out = B.shape[0];
      m.scale = scale;
      m.a = A.data;
      m.b = B.data;
    }
  return a;
}

LoraAdapter random_lora_adapter(int layers, int64_t H, int64_t Hq, int64_t Hkv, int64_t D, int64_t rank, int64_t seed) {
  LoraAdapter a;
  a.rank = rank;
  a.alpha = 2.0 * static_cast<double>(rank);
  a.targets = {LoraTarget::kQ, LoraTarget::kV};
  a.source = "random_adapter=" + std::to_string(seed);
  a.layers.resize(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    SeededDraws d(seed * 1000003 + l);
    for (LoraTarget t : a.targets) {
      LoraMatrix& m = a.layers[static_cast<size_t>(l)][static_cast<size_t>(t)];
      m.rank = rank;
      m.in = H;
      m.out = (t == LoraTarget::kQ ? Hq : Hkv) * D;
      m.scale = static_cast<float>(a.alpha / static_cast<double>(rank));
      m.a.resize(static_cast<size_t>(rank * m.in));
      for (float& x : m.a) x = d.normal(1.0 / std::sqrt(static_cast<double>(H)));
      m.b.resize(static_cast<size_t>(m.out * rank));
      for (float& x : m.b) x = d.normal(0.02);
    }
  }
  return a;
}

void lora_add(const LoraMatrix& m, const float* x, int64_t T, float* y) {
  if (T <= 0 || m.rank <= 0) return;
  std::vector<float> ax(static_cast<size_t>(T * m.rank)), bax(static_cast<size_t>(T * m.out));
  matmul_nt(x, Mat::of_f32(m.a.data(), m.rank, m.in), nullptr, ax.data(), T, m.in, m.rank);
  matmul_nt(ax.data(), Mat::of_f32(m.b.data(), m.out, m.rank), nullptr, bax.data(), T, m.rank, m.out);
  for (size_t i = 0; i < bax.size(); ++i) y[i] += bax[i] * m.scale;
}

}  // namespace kvb
