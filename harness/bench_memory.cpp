// The memory search of `kvbench bench --memory` (harness/bench_memory.h).
#include "harness/bench_memory.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "engine/model/architecture.h"
#include "engine/util/error.h"

namespace kvb::cli {

namespace {

/// A resolved parameter as text ("" when absent), whatever JSON type the policy stored it as.
std::string param(const nlohmann::json& p, const char* key) {
  if (!p.is_object() || !p.contains(key)) return {};
  const auto& v = p.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Policies that share the budget unevenly across heads or layers (a head may exceed B + buffer):
// sized as the full cache.
const std::set<std::string> kUnevenBudget = {"pyramidkv", "adakv", "cake"};

}  // namespace

size_t BenchMemoryPlan::bytes_for(int64_t batch) const {
  return weight_bytes + fixed_bytes + static_cast<size_t>(batch) * (kv_bytes_per_seq + work_bytes_per_seq);
}

int64_t BenchMemoryPlan::max_batch(double budget_bytes) const {
  const double base = static_cast<double>(weight_bytes + fixed_bytes);
  const double per = static_cast<double>(kv_bytes_per_seq + work_bytes_per_seq);
  if (!(budget_bytes >= base + per) || per <= 0) return 0;
  constexpr double kCap = 1099511627776.0;  // 2^40: bytes_for() stays far from size_t overflow
  const double q = std::floor((budget_bytes - base) / per);
  if (!(q <= kCap)) return static_cast<int64_t>(kCap) + 1;
  int64_t b = static_cast<int64_t>(q);
  // Exact in integers at the boundary (the double quotient may round either way).
  while (b > 0 && static_cast<double>(bytes_for(b)) > budget_bytes) --b;
  while (static_cast<double>(bytes_for(b + 1)) <= budget_bytes) ++b;
  return b;
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
  const int64_t heads = c.num_layers * c.num_kv_heads;  // (layer, kv head) pairs of one sequence
  const int64_t full = in.context + in.gen;
  const int64_t chunk = std::min<int64_t>(in.prefill_chunk, in.context);
  PolicyNeeds needs;
  if (policy) needs = policy->needs();

  BenchMemoryPlan plan;
  plan.peak_tokens_per_head = full;
  plan.pages_per_seq = heads * ceil_div(full, P);
  plan.footprint = "full cache: context + gen";
  const std::string name = policy ? policy->name() : "full";
  const nlohmann::json rp = policy ? policy->resolved_params() : nlohmann::json::object();
  const std::string kind = param(rp, "budget_kind"), buf = param(rp, "buffer");
  if (name != "full" && !kUnevenBudget.count(name) && !buf.empty() &&
      (kind == "tokens" || kind == "ratio" || kind == "global")) {
    const int64_t b = std::max<int64_t>(1, std::stoll(buf));
    int64_t B = budget;
    if (kind == "ratio") B = static_cast<int64_t>(std::ceil(std::stod(param(rp, "ratio")) * static_cast<double>(full)));
    const bool chunked = param(rp, "compress") == "chunked";
    const bool decode = param(rp, "decode") != "false";
    if (B > 0) {
      int64_t peak = 0;
      if (!decode) {  // compressed once at the end of the prompt, then grows by gen
        peak = std::max(in.context, std::min(in.context, B) + in.gen);
        plan.footprint = "decode=false: max(context, min(context, B) + gen)";
      } else if (chunked) {
        // Prefill: a head below B + buffer gains a chunk, never beyond the prompt; decode: B + buffer.
        peak = std::min(full, std::max(std::min(in.context, B + b - 1 + chunk), B + b));
        plan.footprint =
            "compress=chunked: min(context + gen, max(min(context, B + buffer - 1 + prefill chunk), B + buffer))";
      } else {
        peak = std::max(in.context, std::min(full, B + b));
        plan.footprint =
            "compress=prompt_end: max(context, min(context + gen, B + buffer)) (whole prompt held before compression)";
      }
      plan.peak_tokens_per_head = peak;
      plan.pages_per_seq = heads * ceil_div(peak, P);
      if (kind == "global") {
        // Heads are ragged; their total stays within heads · peak tokens, plus a partial page each.
        plan.pages_per_seq = ceil_div(heads * peak, P) + heads;
        plan.footprint += ", budget_kind=global: total over heads + one partial page per head";
      }
      plan.footprint = fmt::format("{} (B {}, buffer {})", plan.footprint, B, b);
    }
  } else if (name != "full") {
    plan.footprint =
        fmt::format("{}: no per-head schedule known to the search, sized as the full cache (context + gen)", name);
  }

  // Bytes of one page as the backend stores it.
  plan.page_bytes =
      cuda ? static_cast<size_t>(P * (2 * D * 2 + 4)) : static_cast<size_t>(P * (2 * D + 1 + needs.num_scalars) * 4);
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
  plan.work_bytes_per_seq = static_cast<size_t>(chunk * per_token + 4 * c.vocab_size);
  plan.weight_bytes = cuda ? cuda_weight_bytes(c) : in.host_weight_bytes;
  plan.fixed_bytes = cuda ? (size_t(1) << 30) : (size_t(128) << 20) + static_cast<size_t>(4 * 128 * 2 * I);
  return plan;
}

}  // namespace kvb::cli
