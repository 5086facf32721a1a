// `kvbench bench --memory GIB`: the largest batch whose weights + KV cache + work buffers fit in a
// memory budget, for a context, generation length, policy and budget (docs/architecture.md,
// Memory, "Throughput at a fixed memory budget"). The sizing is a pure function of the model config, the
// backend, the page size and the policy's resolved parameters, so it is unit-tested without a run.
//
// What one sequence holds at its high-water mark (the search sizes for the PEAK, so the run it
// picks cannot run out of memory on account of the KV cache):
//   - tokens per (layer, kv head): the full cache holds context + gen. A scheduled policy with a
//     token budget B and buffer b holds at most B + b inside a step after the prompt; but under
//     compress=prompt_end (the default) the WHOLE prompt is prefilled with the full cache before
//     it is compressed, and every sequence of the batch is prefilled at the same time, so the
//     peak is max(context, min(context + gen, B + b)): at a long prompt a compressing policy buys
//     no batch over the full cache unless it generates far more than it reads (R-KV's setting),
//     or runs compress=chunked, whose peak is min(context + gen, max(min(context, B + b − 1 +
//     chunk), B + b)) (a head is compressed after any step that brings it to B + b; a prefill step
//     adds up to --prefill-chunk tokens first, and decode one). These are upper bounds where a
//     backend compresses layer by layer inside the step that ends a prompt of ONE chunk (the CPU
//     backend then never holds every layer's whole prompt at once); for a prompt longer than a
//     chunk every layer holds all but the last chunk before any is compressed. budget_kind=ratio uses B = ceil(ratio · (context + gen)); budget_kind=global
//     (heads ragged, their total bounded) counts the total plus one partial page per head.
//     Policies whose footprint is not the per-head schedule (PyramidKV, AdaKV, CAKE and any
//     policy without a `buffer` parameter) are sized as the full cache, an upper bound;
//   - pages: every (layer, kv head) rounds up to whole pages of --page-size tokens; a page costs
//     what the backend stores: CPU P·(2·D·4 + 4 + 4·S) bytes (f32 K and V, positions, S policy
//     scalars: KVCache::page_bytes), CUDA P·(2·D·2 + 4) (bf16 K and V, positions; policy scalars
//     and a host_kv policy's f32 mirror live in host memory, outside a device budget);
//   - work buffers: all sequences of a batch are prefilled together, so activations scale with
//     min(--prefill-chunk, context) × batch tokens (plan_bench_memory lists the buffers per token),
//     plus one f32 logit row of the vocabulary per sequence.
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
  size_t page_bytes = 0;             ///< bytes of one page on this backend
  size_t kv_bytes_per_seq = 0;       ///< pages_per_seq × page_bytes
  size_t work_bytes_per_seq = 0;     ///< activation and logit buffers per sequence of the batch
  size_t weight_bytes = 0;           ///< weights as the backend holds them
  size_t fixed_bytes = 0;            ///< runtime reserve independent of the batch
  std::string footprint;             ///< how peak_tokens_per_head was derived (for the printout)

  /// weight_bytes + fixed_bytes + batch × (kv_bytes_per_seq + work_bytes_per_seq).
  size_t bytes_for(int64_t batch) const;
  /// The largest batch with bytes_for(batch) ≤ budget_bytes, at most 2^40 (a batch beyond that is
  /// reported as 2^40 + 1, still "more than fits any run"); 0 when not even batch 1 fits.
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
