// `kvbench bench --memory GIB`: the largest batch whose weights + KV cache + work buffers fit in a
// memory budget, for a context, generation length, policy and budget (docs/architecture.md,
// Memory, "Throughput at a fixed memory budget"). The sizing is a pure function of the model config, the
// backend, the page size and the policy's resolved parameters, so it is unit-tested without a run.
//
// What one sequence holds: the policy answers (Policy::kv_footprint, policy.h): the pages it holds
// at its peak (under compress=prompt_end the whole prompt, uncompressed) and at its steady state
// (budget + buffer per head for a policy that compresses while decoding; context + gen for the
// full cache). The run uses the engine's scheduler (engine.h): at most one prompt chunk per step
// (--max-step-tokens = --prefill-chunk), a sequence admitted while its peak fits beside the
// others' reservations, so at most one sequence is at its prefill peak while the rest decode at
// their steady state, and the KV pool for a batch of b is peak + (b − 1) · steady pages. Pages:
// every (layer, kv head) rounds up to whole pages of --page-size tokens; a page costs what the
// backend stores: CPU P·(2·D·4 + 4 + 4·S) bytes (f32 K and V, positions, S policy scalars:
// KVCache::page_bytes), CUDA P·(2·D·2 + 4) (bf16 K and V, positions; policy scalars and a
// host_kv policy's f32 mirror live in host memory, outside a device budget).
// Work buffers: one prefill chunk of activations (plan_bench_memory lists the buffers per token)
// plus, per sequence, one decode row and one f32 logit row of the vocabulary.
// Plus per run: the weights as the backend holds them and a fixed reserve (CPU 128 MiB: the
// process, libraries and one MLP piece; CUDA 1 GiB: the CUDA context, cuBLAS workspace,
// attention partials and decode metadata).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/model/config.h"
#include "engine/policies/policy.h"

namespace kvb::cli {

/// What the memory search needs to know about one bench configuration.
struct BenchMemoryInput {
  ModelConfig config;            ///< the model's architecture
  std::string backend = "cpu";   ///< "cpu", "cpu-bf16" or "cuda" (page and weight bytes depend on it)
  int64_t context = 0;           ///< prompt tokens per sequence (> 0)
  int64_t gen = 0;               ///< generated tokens per sequence (> 0)
  int prefill_chunk = 512;       ///< prompt tokens per sequence per prefill step (> 0)
  int page_size = 16;            ///< KV page size in tokens (> 0)
  size_t host_weight_bytes = 0;  ///< Model::weight_bytes() (the CPU backends hold these)
};

/// The memory one bench batch needs, split into what scales with the batch and what does not.
/// Bytes throughout.
struct BenchMemoryPlan {
  int64_t peak_tokens_per_head = 0;  ///< most tokens one (layer, kv head) holds at once
  int64_t pages_per_seq = 0;         ///< pages one sequence holds at its peak (all layers, heads)
  int64_t steady_pages_per_seq = 0;  ///< pages one sequence holds once its prompt is done
  size_t page_bytes = 0;             ///< bytes of one page on this backend
  size_t kv_bytes_per_seq = 0;       ///< pages_per_seq × page_bytes
  size_t work_bytes_per_seq = 0;     ///< decode activation and logit buffers per sequence of the batch
  size_t work_bytes_fixed = 0;       ///< one prefill chunk's activations
  size_t weight_bytes = 0;           ///< weights as the backend holds them
  size_t fixed_bytes = 0;            ///< runtime reserve independent of the batch
  std::string footprint;             ///< how the pages were derived (the policy's rule, for the printout)

  /// KV pages of a batch: one sequence at its peak, the others at their steady state (0 for 0).
  int64_t pool_pages(int64_t batch) const;
  /// weight_bytes + fixed_bytes + work_bytes_fixed + batch × work_bytes_per_seq + pool_pages(batch)
  /// × page_bytes, as a double (no wrap at any batch).
  double bytes_for(int64_t batch) const;
  /// The largest batch ≤ 2^20 with bytes_for(batch) ≤ budget_bytes (binary search; any finite or
  /// infinite budget returns at once); 0 when not even batch 1 fits.
  int64_t max_batch(double budget_bytes) const;
};

/// Largest `bench --memory` in GiB (1 PiB): a budget beyond it is refused (1e11 made the batch
/// search's byte counts wrap around and loop without end).
inline constexpr double kMaxMemoryGiB = 1048576;

/// Sizes one bench configuration (see the file comment for every term). `policy` may be null (the
/// full cache); `budget` is the spec's --budget. Throws kvb::Error ("--memory: ...") for a
/// non-positive context, gen, prefill chunk or page size.
BenchMemoryPlan plan_bench_memory(const BenchMemoryInput& in, const Policy* policy, int64_t budget);

/// Device bytes of the CUDA backend's weights for `c`: bf16 matrices (2 B per parameter, a tied
/// embedding once) and f32 norm / bias vectors, as CudaBackend::upload_weights allocates them.
size_t cuda_weight_bytes(const ModelConfig& c);

}  // namespace kvb::cli
