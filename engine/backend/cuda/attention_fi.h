// kvb::cuda FiPrefill — tensor-core paged causal attention through FlashInfer's FA2 batch-prefill
// kernel (mma.sync bf16 × bf16 → f32 accumulate), for the steps whose query rows are many: chunked
// prefill (and any non-graph step with more than one new token per item).
//
// How kvbench's per-(layer, kv head) ragged pages map onto FlashInfer: FlashInfer's paged KV
// cache gives every request one page list shared by all of its KV heads. kvbench gives every
// (sequence, kv head) its own list (eviction is per head), so each (item b, kv head h) becomes one
// FlashInfer *request* with a single KV head and the G query heads of its group
// (num_qo_heads = G, num_kv_heads = 1). Request r = h·B + b. Its pages are the head's page list
// (copied from the device-resident page tables into one contiguous index array), in HND layout
// with one head: page p's K rows are k_pool[p·P·D …] — exactly the pool's slot layout. The queries
// are repacked per kv head, bf16 [Hkv][T][G][D] (FlashInfer's ragged q with q_indptr[r] =
// h·T + tok0(b)), and the output [Hkv][T][G][D] is unpacked into the step's [T, Hq·D] rows.
//
// The mask is FlashInfer's bottom-right-aligned causal mask: query i of n sees the first
// len − n + i + 1 keys of its head. kvbench appends a step's n tokens at the end of each head and
// keeps keys in position order, so this equals attention.cu's position mask (pos ≤ qpos) for full
// and evicted heads alike.
//
// (Pointer + count arguments: .cu files are compiled as C++17.)
//
// Numerics: q is rounded to bf16 before QKᵀ (attention.cu keeps q in f32); scores and the
// softmax accumulate in f32. Sources: FlashInfer 0.7.2.post1 (flashinfer-python wheel,
// include/flashinfer/attention/prefill.cuh, scheduler.cuh PrefillPlan), headers fetched at
// configure time by tools/fetch_flashinfer.sh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "engine/backend/cuda/kernels.h"

namespace kvb::cuda {

/// FlashInfer batch-prefill attention over the backend's page pool. One object per backend
/// (it owns FlashInfer's workspaces: an int workspace for the plan, a float one for split-KV
/// partials, and a pinned staging copy of the plan).
class FiPrefill {
 public:
  FiPrefill();
  ~FiPrefill();
  FiPrefill(const FiPrefill&) = delete;
  FiPrefill& operator=(const FiPrefill&) = delete;

  /// Whether the kernels were built for head dimension D (64 and 128; kvbench falls back to
  /// attention.cu for other sizes).
  static bool supports_head_dim(int D);

  /// Plans one layer's launch from the request arrays of plan.h fi_requests (qo_indptr [R + 1],
  /// kv_indptr [R + 1], last_page_len [R], R = B·Hkv requests for B items of T tokens in all),
  /// G query heads per kv head, page size P (tokens), head dim D. Reuses the previous plan when
  /// the inputs are equal (the layers of a prefill step usually are). A new plan synchronises `s`
  /// first (its pinned staging buffers are reused) and uploads the request arrays. Throws
  /// kvb::Error on inconsistent input or a FlashInfer planning error.
  void plan(const int32_t* qo_indptr, const int32_t* kv_indptr, const int32_t* last_page_len, int B, int Hkv, int G,
            int P, int D, int T, cudaStream_t s);

  /// Runs the planned layer: q from a.qkv (f32, rows of a.q_stride), keys/values from a.k_pool /
  /// a.v_pool through the page lists at a.pages + a.pt_off[b·Hkv + h], output bf16 into
  /// a.out [T, Hq·D]. a.lse must be null (log-sum-exp rows are attention.cu's). T = Σ n.
  /// Throws kvb::Error on a launch failure.
  void run(const AttnArgs& a, cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvb::cuda
