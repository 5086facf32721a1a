// `kvbench bench --memory GIB`: the largest batch whose KV pages fit a KV page pool of GIB GiB,
// for a context, generation length, policy and budget (docs/architecture.md, Memory, "Throughput
// at a fixed KV pool"). `--memory` is the KV page pool in every command: `run --memory GIB` and
// `bench --memory GIB` size the same pool, memory_pool_pages(), ⌊GIB · 2³⁰ / page bytes⌋ pages of
// the backend's own page (kv_page_geometry, engine/backend/backend.h: CPU f32 K/V + positions + the
// policy's scalars, P·(2·D·4 + 4 + 4·S) bytes; CUDA bf16 K/V + positions, P·(2·D·2 + 4)). The
// sizing is a pure function of the model config, the backend, the page size and the policy's
// resolved parameters, so it is unit-tested without a run.
//
// What one sequence holds: the policy answers (Policy::kv_footprint, policy.h): the pages it holds
// at its peak (under compress=prompt_end the whole prompt, uncompressed) and at its steady state
// (budget + buffer per head for a policy that compresses while decoding; context + gen for the
// full cache). The run uses the engine's scheduler (engine.h): at most one prompt chunk per step
// (--max-step-tokens = --prefill-chunk), a sequence admitted while its peak fits beside the
// others' reservations, so at most one sequence is at its prefill peak while the rest decode at
// their steady state, and a batch of b needs peak + (b − 1) · steady pages of the pool.
// Beside the pool the plan estimates the rest of the process (printed, never deciding the batch):
// work buffers (one prefill chunk of activations, plan_bench_memory lists the buffers per token,
// plus, per sequence, one decode row and one f32 logit row of the vocabulary), the weights as the
// backend holds them and a fixed reserve (CPU 128 MiB: the process, libraries and one MLP piece;
// CUDA 1 GiB: the CUDA context, cuBLAS workspace, attention partials and decode metadata). On
// CUDA a host_kv policy's f32 mirror and the policy scalars live in host memory, outside the pool.
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

/// The KV pages one bench batch needs from the pool, and an estimate of the rest of the process's
/// memory at that batch (bytes), split into what scales with the batch and what does not.
struct BenchMemoryPlan {
  int64_t peak_tokens_per_head = 0;  ///< most tokens one (layer, kv head) holds at once
  int64_t pages_per_seq = 0;         ///< pages one sequence holds at its peak (all layers, heads)
  int64_t steady_pages_per_seq = 0;  ///< pages one sequence holds once its prompt is done
  size_t page_bytes = 0;             ///< bytes of one page on this backend (kv_page_geometry)
  size_t kv_bytes_per_seq = 0;       ///< pages_per_seq × page_bytes
  size_t work_bytes_per_seq = 0;     ///< decode activation and logit buffers per sequence of the batch
  size_t work_bytes_fixed = 0;       ///< one prefill chunk's activations
  size_t weight_bytes = 0;           ///< weights as the backend holds them
  size_t fixed_bytes = 0;            ///< runtime reserve independent of the batch
  std::string footprint;             ///< how the pages were derived (the policy's rule, for the printout)

  /// KV pages of a batch: one sequence at its peak, the others at their steady state (0 for 0).
  int64_t pool_pages(int64_t batch) const;
  /// The process estimate at `batch`: weight_bytes + fixed_bytes + work_bytes_fixed + batch ×
  /// work_bytes_per_seq + pool_pages(batch) × page_bytes, as a double (no wrap at any batch).
  double bytes_for(int64_t batch) const;
  /// The largest batch ≤ 2^20 whose pool_pages(batch) ≤ `pool` pages (the --memory pool,
  /// memory_pool_pages); 0 when not even one sequence's peak fits.
  int64_t max_batch(int64_t pool) const;
};

/// Largest `--memory` in GiB (1 PiB), on every command: a pool beyond it is refused (1e11 made
/// byte counts wrap around).
inline constexpr double kMaxMemoryGiB = 1048576;

/// The KV page pool of `--memory gib` (GiB = 2³⁰ bytes) for model `c` on backend `backend` at
/// `page_size` tokens per page, for a policy with `needs` (its scalars priced where the pool
/// holds them): ⌊kv_pool_bytes_of_gib(gib) / kv_page_geometry(...).bytes_per_page()⌋ pages, the
/// pool `run --memory` and `bench --memory` both run (the engine turns
/// EngineOptions::kv_pool_bytes into the same count). 0 when `gib` holds no page or is not
/// positive. Throws kvb::Error ("--backend NAME: no such backend") for an unknown backend.
int64_t memory_pool_pages(double gib, const std::string& backend, const ModelConfig& c, int page_size,
                          const PolicyNeeds& needs = {});

/// The help text of `--memory` on every command that takes it (run, bench): one meaning.
inline constexpr const char* kMemoryHelp =
    "KV page pool in GiB (2^30 bytes), the same pool on every command: floor(GiB * 2^30 / page bytes) pages, a page "
    "being 16 tokens of one (layer, kv head) as the backend stores it (cpu: f32 K and V, positions and the policy's "
    "scalars; cuda: bf16 K and V and positions). Sequences are admitted while their projected pages fit and "
    "preempted when it runs short; weights, activations and the rest of the process are not in it "
    "(docs/architecture.md, Memory-aware batching)";

/// Sizes one bench configuration (see the file comment for every term). `policy` may be null (the
/// full cache); `budget` is the spec's --budget. Throws kvb::Error ("--memory: ...") for a
/// non-positive context, gen, prefill chunk or page size.
BenchMemoryPlan plan_bench_memory(const BenchMemoryInput& in, const Policy* policy, int64_t budget);

/// Device bytes of the CUDA backend's weights for `c`: bf16 matrices (2 B per parameter, a tied
/// embedding once) and f32 norm / bias vectors, as CudaBackend::upload_weights allocates them.
size_t cuda_weight_bytes(const ModelConfig& c);

}  // namespace kvb::cli
