// `restorekv`: RestoreKV — KVzip plus learned restore tokens. After KVzip's scoring passes
// (kvzip.cpp, shared: KVzipPolicy) and before its cut, n learned restore-token EMBEDDINGS (not
// token ids) run once as one extra step over the whole, still uncut cache at the positions
// P … P + n − 1 after the P-token prompt, with a LoRA adapter on the model's projections for that
// step only (the engine's restore pass: PolicyNeeds::restore_pass, Policy::restore_pass; no policy
// hooks run in it, as kvpress skips its scoring hooks). Their K/V stay in every head and are never
// evicted; the cut then evicts the ⌊N · min(1, (1 − ratio) + n/P)⌋ lowest of KVzip's N = layers ·
// Hkv · P prompt entries (layerwise: per layer), so the restore rows take their room out of the
// same budget ("budget-matched").
// Sources: RestoreKV (arXiv 2608.01247); kvpress 0.5.5 RestoreKVPress (PyPI kvpress==0.5.5,
// kvpress/presses/restorekv_press.py: append_restore_tokens, compress_post; on top of
// kvzip_press.py) and its pipeline (kvpress/pipeline.py: after a RestoreKVPress the question's
// positions start at the cache's length, P + n); docs/policies.md, `restorekv`.
// Weights: `adapter=` a directory (or a Hub repository id) holding PEFT's adapter_config.json and
// adapter_model.safetensors (a LoRA adapter, engine/policies/lora.h says what is read and what is
// refused) and restore_embeddings.safetensors (tensor `restore_embeddings` [n, hidden]), as
// higokri/RestoreKV-<model> publishes them (Llama-3.1-8B-Instruct and Qwen3-8B only).
// `random_adapter=SEED`: RANDOM restore embeddings (8 rows, N(0, 0.02²)) and a RANDOM rank-4 LoRA on
// q_proj and v_proj (random_lora_adapter), drawn at the first scoring pass; tests only.
// Choices: as kvzip's. The restore pass is one step whatever --prefill-chunk; the CUDA backend
// refuses the policy (no embedding input or LoRA there: cuda::check_policy_support).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>

#include "engine/policies/catalog.h"
#include "engine/policies/gate_weights.h"
#include "engine/policies/kvzip.h"
#include "engine/policies/lora.h"
#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

/// Restore rows of random_adapter (the published adapters' n).
constexpr int64_t kRandomRows = 8;
/// LoRA rank of random_adapter.
constexpr int64_t kRandomRank = 4;

class RestoreKVPolicy : public KVzipPolicy {
 public:
  RestoreKVPolicy(PolicyParams p, GateWeights w) : KVzipPolicy("restorekv", std::move(p)) {
    learned_ = learned_weights_choice("restorekv", params_);
    learned_.require();
    if (learned_.path.empty()) {
      rows_ = kRandomRows;
      return;
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string& spec = learned_.path;
    std::string emb;  // where restore_embeddings.safetensors is read from
    if (fs::is_directory(spec, ec)) emb = (fs::path(spec) / "restore_embeddings.safetensors").string();
    else if (is_hub_gate_spec(spec) && spec.find('/') == spec.rfind('/'))
      emb = spec + "/restore_embeddings.safetensors";
    else
      fail_at(spec, "adapter",
              "policy 'restorekv': name a directory (or a Hub repository) holding adapter_config.json, "
              "adapter_model.safetensors and restore_embeddings.safetensors");
    if (w.config_path.empty()) fail_at(spec, "adapter", "policy 'restorekv': no adapter_config.json");
    adapter_ = lora_adapter_from(w.config, w.config_path, w);
    const GateWeights e = GateWeights::load(emb, GateSource{"restorekv", "adapter", "restore_embeddings.safetensors"});
    const GateTensor* t = e.find("restore_embeddings");
    if (!t) fail_at(e.path, "restore_embeddings", "missing");
    if (t->shape.size() != 2 || t->shape[0] < 1 || t->shape[1] < 1)
      fail_at(e.path, "restore_embeddings", "expected [n, hidden] with n, hidden ≥ 1");
    rows_ = t->shape[0];
    embeddings_ = t->data;
    drawn_ = true;
  }

  PolicyNeeds needs() const override {
    PolicyNeeds n = KVzipPolicy::needs();
    n.restore_pass = true;
    return n;
  }

  /// Draws the random adapter at the first layer step (the model's sizes are known there), then
  /// KVzip's scoring.
  void on_layer_step(LayerStep& step) override {
    if (!drawn_) {
      std::lock_guard<std::mutex> lock(draw_mu_);
      if (!drawn_) {
        const int64_t H = step.hidden_size, D = step.head_dim;
        adapter_ = random_lora_adapter(step.num_layers, H, step.num_q_heads, step.num_kv_heads, D, kRandomRank,
                                       learned_.random_seed);
        SeededDraws d(learned_.random_seed * 1000003 + step.num_layers);
        embeddings_.resize(static_cast<size_t>(rows_ * H));
        for (float& x : embeddings_) x = d.normal(0.02);
        drawn_ = true;
      }
    }
    KVzipPolicy::on_layer_step(step);
  }

  /// The restore rows and the adapter, for every sequence whose prompt KVzip scored.
  RestorePass restore_pass(const ScoringPassRequest&) override {
    if (!drawn_) fail("policy 'restorekv': a restore pass before any scoring pass");
    RestorePass r;
    r.n = rows_;
    r.embeddings = embeddings_;
    r.lora = &adapter_;
    return r;
  }

 protected:
  /// kvpress: compression_ratio + n / context_length, at most 1.
  double pruned_fraction(int64_t P) const override {
    return std::min(1.0, (1.0 - ratio_) + static_cast<double>(rows_) / static_cast<double>(P));
  }
  int64_t restored_rows() const override { return rows_; }

 private:
  LearnedWeightsChoice learned_;
  LoraAdapter adapter_;
  std::vector<float> embeddings_;  ///< [rows_, hidden] f32
  int64_t rows_ = 0;
  std::atomic<bool> drawn_{false};  ///< embeddings_ and adapter_ are set
  std::mutex draw_mu_;
};

}  // namespace

KVB_POLICY(restorekv) {
  GateSource src{"restorekv", "adapter", "adapter_model.safetensors", /*config=*/true};
  src.config_file = "adapter_config.json";
  return learned_policy_entry<RestoreKVPolicy>("restorekv", src)
      .with_tests({.min_budget = 0, .params = "ratio=0.5,random_adapter=1", .needs_weights = true});
}

}  // namespace kvb
