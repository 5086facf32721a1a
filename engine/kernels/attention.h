// kvb::paged_attention — softmax attention of a step's queries over the paged, per-head KV
// cache (engine/kv/kv_cache.h), fused: one pass over a kv head's pages with an online softmax
// (running max m and sum l per query, the accumulator rescaled by exp(m_old − m_new) when the
// max grows; Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", Alg. 3, as
// FlashAttention-2 (Dao 2023, Alg. 1) and llama.cpp's ggml_compute_forward_flash_attn_ext_f16
// apply it). All G query heads of a GQA group and all n query tokens of a sequence's step are
// processed against each K/V page while it is in L1, so a page is read once per group of query
// rows, not once per query head. No full score vector is built unless the caller asks for the
// attention column sums (a policy's PolicyNeeds::attention_colsum).
//
// Exactness: a query's result depends only on its own row and the keys it attends to, in head
// order; keys after the query's position contribute exact zeros (exp(−inf) = 0, ×1 rescales),
// so the bits do not depend on how many other queries, sequences or prefill-chunk tokens share
// the call, nor on the thread split. They do depend on the ISA (vector width of the dot-product
// summation), like matmul_nt.
//
// Threads: the (task, row block) work items are split over the engine's one OpenMP pool
// (dynamic schedule); scratch is per thread and reused across calls (no per-step allocation
// once the largest shape has been seen).
#pragma once

#include <cstdint>
#include <span>

#include "engine/kernels/quants.h"
#include "engine/kv/kv_cache.h"

namespace kvb {

/// A run of a head's cached tokens, by index in the head (0 ≤ begin ≤ end ≤ length): what a
/// page-selecting policy (Quest) lets a query read. Ranges of a task must be increasing and
/// disjoint.
struct TokenRange {
  int32_t begin = 0, end = 0;
};

/// One (sequence, kv head) of a step: its n query tokens × G query heads against that head's
/// cached tokens (the tokens of this step already appended).
struct AttentionTask {
  SeqId seq = 0;
  int head = 0;           ///< kv head index h; its query heads are h·G … h·G + G − 1
  int n = 0;              ///< query tokens (1 in decode)
  int64_t start_pos = 0;  ///< absolute position of query token 0; token i is at start_pos + i
  /// Query token i, group member g: q[i·stride + g·D … + D) f32 (post-RoPE). The output row
  /// out[i·stride + g·D … + D) receives Σ_t softmax(q·k_t · scale)·v_t over the keys with
  /// position ≤ the query's and inside `window` (zeros when there are none).
  const float* q = nullptr;
  float* out = nullptr;
  int64_t stride = 0;  ///< floats between consecutive query tokens in q and out
  /// Optional [length(seq, layer, head)] f32: += the attention probability of every (query token,
  /// group member) row for every key, rows in order (i, g) (the H2O / TOVA column sums).
  float* colsum = nullptr;
  /// Optional subset of the head's tokens to attend to (empty = all tokens).
  std::span<const TokenRange> ranges;
  /// Sliding window in tokens (Mistral, Gemma 2's local layers): a query at position p sees keys
  /// at positions p − window + 1 … p; 0 = full causal attention (attention_floor, forward.h).
  int32_t window = 0;
  /// Logit soft-capping (Gemma 2): scores become softcap·tanh(score / softcap) before the softmax,
  /// as transformers computes it in f32; 0 = none.
  float softcap = 0.0f;
};

/// Runs every task of `tasks` for `layer` of `cache` (D = cache.config().head_dim; query heads
/// per kv head G; scores scaled by `scale`, usually 1/√D). Tasks must name distinct (seq, head)
/// pairs when they carry colsum. Kernel: the best of scalar / AVX2+FMA / AVX-512 builds that
/// `isa` and the running CPU allow. Runs on the OpenMP pool when the work (Σ n·G·L·D
/// multiply-adds) is large enough to pay for waking it.
void paged_attention(const KVCache& cache, int layer, int G, float scale, std::span<const AttentionTask> tasks,
                     Isa isa = best_isa());

namespace kernels_detail {
/// Rows [r0, r1) of task t (row r = query token r / G, group member r % G) — one ISA build each
/// (attention_impl.inc); internal to paged_attention.
using AttendRowsFn = void (*)(const KVCache& cache, int layer, int G, float scale, const AttentionTask& t, int r0,
                              int r1);
void attend_rows_scalar(const KVCache&, int, int, float, const AttentionTask&, int, int);
void attend_rows_avx2(const KVCache&, int, int, float, const AttentionTask&, int, int);
void attend_rows_avx512(const KVCache&, int, int, float, const AttentionTask&, int, int);
}  // namespace kernels_detail

}  // namespace kvb
