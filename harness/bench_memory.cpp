// The batch search of `kvbench bench --memory` and the --memory pool (harness/bench_memory.h).
#include "harness/bench_memory.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/backend/backend.h"
#include "engine/model/architecture.h"
#include "engine/util/error.h"

namespace kvb::cli {

int64_t BenchMemoryPlan::pool_pages(int64_t batch) const {
  return batch <= 0 ? 0 : pages_per_seq + (batch - 1) * steady_pages_per_seq;
}

double BenchMemoryPlan::bytes_for(int64_t batch) const {
  return static_cast<double>(weight_bytes) + static_cast<double>(fixed_bytes) + static_cast<double>(work_bytes_fixed) +
         static_cast<double>(batch) * static_cast<double>(work_bytes_per_seq) +
         static_cast<double>(pool_pages(batch)) * static_cast<double>(page_bytes);
}

int64_t BenchMemoryPlan::max_batch(int64_t pool) const {
  constexpr int64_t kMax = int64_t{1} << 20;
  if (pages_per_seq <= 0 || pool < pages_per_seq) return 0;
  if (steady_pages_per_seq <= 0) return kMax;
  return std::min<int64_t>(kMax, 1 + (pool - pages_per_seq) / steady_pages_per_seq);
}

int64_t memory_pool_pages(double gib, const std::string& backend, const ModelConfig& c, int page_size,
                          const PolicyNeeds& needs) {
  return kv_page_geometry(backend, c, page_size, needs).pool_pages(kv_pool_bytes_of_gib(gib));
}

size_t cuda_weight_bytes(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, L = c.num_layers;
  // Vectors, uploaded as f32: norms per layer, q/k norms, biases, the final norm, RoPE inv_freq.
  const Architecture* a = find_architecture(c.model_type);
  const int64_t norms = a && has_role(*a, TensorRole::kPostAttnNorm) ? 4 : 2;
  int64_t vec = norms * H + (c.qk_norm ? 2 * D : 0);
  if (c.attention_bias) vec += (c.num_heads + 2 * c.num_kv_heads) * D;
  vec = L * vec + H;
  // num_parameters counts the vectors too: they take 4 B instead of 2, and inv_freq [D/2] f32.
  return static_cast<size_t>(2 * c.num_parameters() + 2 * vec + 4 * (D / 2));
}

BenchMemoryPlan plan_bench_memory(const BenchMemoryInput& in, const Policy* policy, int64_t budget) {
  if (in.context <= 0) fail("--memory: context must be > 0, got {}", in.context);
  if (in.gen <= 0) fail("--memory: gen must be > 0, got {}", in.gen);
  if (in.prefill_chunk <= 0) fail("--memory: prefill chunk must be > 0, got {}", in.prefill_chunk);
  if (in.page_size <= 0) fail("--memory: page size must be > 0, got {}", in.page_size);
  const ModelConfig& c = in.config;
  const bool cuda = in.backend == "cuda";
  const int64_t P = in.page_size, D = c.head_dim, H = c.hidden_size, I = c.intermediate_size;
  const int64_t chunk = std::min<int64_t>(in.prefill_chunk, in.context);
  PolicyNeeds needs;
  if (policy) needs = policy->needs();

  // The policy answers for its own footprint (Policy::kv_footprint): pages at its peak.
  FootprintQuery fq;
  fq.context = in.context;
  fq.gen = in.gen;
  fq.prefill_chunk = in.prefill_chunk;
  fq.page_size = static_cast<int>(P);
  fq.num_layers = static_cast<int>(c.num_layers);
  fq.num_kv_heads = static_cast<int>(c.num_kv_heads);
  const KvFootprint f = policy ? policy->kv_footprint(fq) : full_cache_footprint(fq);
  (void)budget;
  BenchMemoryPlan plan;
  plan.peak_tokens_per_head = f.peak_tokens_per_head;
  plan.pages_per_seq = f.peak_pages;
  plan.steady_pages_per_seq = f.steady_pages;
  plan.footprint = f.rule;

  // Bytes of one page as the backend stores it.
  plan.page_bytes = kv_page_geometry(in.backend, c, static_cast<int>(P), needs).bytes_per_page();
  plan.kv_bytes_per_seq = static_cast<size_t>(plan.pages_per_seq) * plan.page_bytes;

  // Work buffers per prompt token of a prefill step (every sequence of the batch prefills at once).
  const int64_t QKV = (c.num_heads + 2 * c.num_kv_heads) * D, HqD = c.num_heads * D;
  int64_t per_token = 0;
  if (cuda) {
    // CudaBackend::forward: x f32 [H], xn bf16 [H], qkv f32 [QKV], att bf16 [Hq·D],
    // gate|up f32 [2I], act bf16 [I]; keys before RoPE f32 [Hkv·D], colsum lse f32 [Hq].
    per_token = 4 * H + 2 * H + 4 * QKV + 2 * HqD + 8 * I + 2 * I;
    if (needs.keys_pre_rope) per_token += 4 * c.num_kv_heads * D;
    if (needs.attention_colsum) per_token += 4 * c.num_heads;
  } else {
    // CpuBackend::forward, f32: residual [H], its norm [H], q|k|v [QKV], attention output [Hq·D]
    // (the MLP's gate and up run in pieces of at most 128 rows: the fixed reserve).
    per_token = 4 * (2 * H + QKV + HqD);
    if (needs.keys_pre_rope) per_token += 4 * c.num_kv_heads * D;
  }
  plan.work_bytes_fixed = static_cast<size_t>(chunk * per_token);
  plan.work_bytes_per_seq = static_cast<size_t>(per_token + 4 * c.vocab_size);
  plan.weight_bytes = cuda ? cuda_weight_bytes(c) : in.host_weight_bytes;
  plan.fixed_bytes = cuda ? (size_t(1) << 30) : (size_t(128) << 20) + static_cast<size_t>(4 * 128 * 2 * I);
  return plan;
}

}  // namespace kvb::cli
