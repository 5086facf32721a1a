#include "engine/policies/checkpoints.h"

#include <algorithm>
#include <cctype>

namespace kvb {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<KnownCheckpoint>& known_checkpoints() {
  // TRIM-KV (ngocbh/trimkv README "Released Models", the repos' config.json base_model;
  // docs/policies.md, Released checkpoints): retention gates "rg", bf16 trimkv_weights.pth + config.json.
  // WG-KV (WG-KV/checkpoints, {model}-{λ}.pt, docs/policies.md, Gate files): λ ∈ {0.01 … 2.56}; the default is
  // the release README's example λ = 0.16 for the instruct models and the paper's AIME headline
  // λ = 0.32 for the thinking model; name another file to pick another λ.
  static const std::vector<KnownCheckpoint> k = {
      {"trimkv", "ngocbh/TrimKV-Qwen3-1.7B-Math", "Qwen/Qwen3-1.7B", "math gates, OpenR1-Math-220k, M = 512"},
      {"trimkv", "ngocbh/TrimKV-Qwen3-4B-Math", "Qwen/Qwen3-4B", "math gates, OpenR1-Math-220k, M = 512"},
      {"trimkv", "ngocbh/TrimKV-Qwen3-8B-Math", "Qwen/Qwen3-8B", "math gates, OpenR1-Math-220k, M = 512"},
      {"trimkv", "ngocbh/TrimKV-Qwen3-14B-Math", "Qwen/Qwen3-14B", "math gates, OpenR1-Math-220k, M = 512"},
      {"trimkv", "ngocbh/TrimKV-Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507",
       "long-context gates, SynthLong + BookSum + Buddhi, M = 4096"},
      {"trimkv", "ngocbh/TrimKV-DeepSeek-R1-Distill-Llama-8B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
       "math gates, OpenR1-Math, M = 512"},
      {"trimkv", "ngocbh/TrimKV-Phi-3-mini-128k-instruct", "microsoft/Phi-3-mini-128k-instruct",
       "chunked-prefill gates, LongAlpaca, M = 2048"},
      // LocRet (huangyuxiang03/Locret README "Official checkpoints"): full models saved with
      // save_pretrained whose attention blocks carry the retaining heads (self_attn.fc1/fc2).
      {"locret", "hyx21/Locret-phi-3-mini-128K", "microsoft/Phi-3-mini-128k-instruct",
       "retaining heads, LongAlpaca; the paper's setting: budget 6000, chunk 3072, stabilizers 2500"},
      {"locret", "hyx21/Locret-llama-3.1-8B-instruct", "meta-llama/Llama-3.1-8B-Instruct",
       "retaining heads, LongAlpaca; the paper's setting: budget 6000, chunk 3072, stabilizers 2500"},
      // SeerAttention-R (microsoft/SeerAttention README, decode sparse): AttnGates only —
      // attn_gate_weights.pth + config.json whose base_model names the frozen model.
      {"seerattn_r", "SeerAttention/SeerAttention-Decode-Qwen3-4B-AttnGates", "Qwen/Qwen3-4B",
       "decode AttnGates (Qproj, Kmaxminavg, block 64), self-distilled; README budgets 2048-8192"},
      {"seerattn_r", "SeerAttention/SeerAttention-Decode-Qwen3-8B-AttnGates", "Qwen/Qwen3-8B",
       "decode AttnGates (Qproj, Kmaxminavg, block 64), self-distilled; README budgets 2048-8192"},
      {"seerattn_r", "SeerAttention/SeerAttention-Decode-Qwen3-14B-AttnGates", "Qwen/Qwen3-14B",
       "decode AttnGates (Qproj, Kmaxminavg, block 64), self-distilled; README budgets 2048-8192"},
      // KVzap (NVIDIA/kvpress kvzap/README.md; KVzapPress loads nvidia/KVzap-{mlp,linear}-<model name>):
      // config.json + model.safetensors of a KVzapModel.
      {"kvzap", "nvidia/KVzap-mlp-Qwen3-8B", "Qwen/Qwen3-8B", "KVzip+ surrogate MLP; README threshold -4"},
      // RestoreKV (kvpress 0.5.5 restorekv_press.py loads higokri/RestoreKV-<model name>[_plus]):
      // adapter_config.json + adapter_model.safetensors (PEFT LoRA) + restore_embeddings.safetensors.
      {"restorekv", "higokri/RestoreKV-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
       "8 restore embeddings + LoRA, self-distilled from the full cache; KVzip scores (plus_norm=false)"},
      {"restorekv", "higokri/RestoreKV-Qwen3-8B", "Qwen/Qwen3-8B",
       "8 restore embeddings + LoRA, self-distilled from the full cache; KVzip scores (plus_norm=false)"},
      {"wgkv", "WG-KV/checkpoints/llama-3.1-8b-instruct-0.16.pt", "meta-llama/Llama-3.1-8B-Instruct",
       "write gates, FineWeb-Edu, lambda = 0.16"},
      {"wgkv", "WG-KV/checkpoints/qwen3-4b-instruct-2507-0.16.pt", "Qwen/Qwen3-4B-Instruct-2507",
       "write gates, FineWeb-Edu, lambda = 0.16"},
      {"wgkv", "WG-KV/checkpoints/qwen3-4b-thinking-2507-0.32.pt", "Qwen/Qwen3-4B-Thinking-2507",
       "write gates, FineWeb-Edu + Nemotron-Math-v2, lambda = 0.32 (the paper's AIME setting)"},
  };
  return k;
}

std::string model_hub_id(const std::string& model) {
  // A snapshot directory of the Hugging Face cache: .../models--ORG--NAME/snapshots/<sha>[/].
  std::string m = model;
  while (m.size() > 1 && m.back() == '/') m.pop_back();
  const size_t snap = m.rfind("/snapshots/");
  if (snap != std::string::npos) {
    const size_t start = m.rfind('/', snap - 1);
    const std::string folder =
        m.substr(start == std::string::npos ? 0 : start + 1, snap - (start == std::string::npos ? 0 : start + 1));
    if (folder.rfind("models--", 0) == 0) {
      const std::string rest = folder.substr(8);
      const size_t sep = rest.find("--");
      if (sep != std::string::npos) return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    }
    return "";
  }
  if (const size_t at = m.find('@'); at != std::string::npos) m = m.substr(0, at);
  // "org/name" exactly (a relative path with more parts, or a file, is not an id).
  if (std::count(m.begin(), m.end(), '/') != 1 || m.front() == '/' || m.front() == '.' || m.back() == '/') return "";
  return m;
}

const KnownCheckpoint* default_checkpoint(const std::string& policy, const std::string& model) {
  const std::string id = lower(model_hub_id(model));
  if (id.empty()) return nullptr;
  for (const auto& c : known_checkpoints())
    if (c.policy == policy && lower(c.base_model) == id) return &c;
  return nullptr;
}

}  // namespace kvb
