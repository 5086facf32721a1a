// Shared scoring helpers of the KV policies (DESIGN.md, Engine / Policy: "score + protect + top-k").
// Everything here is f32, single-threaded, and works on one (sequence, layer, kv_head) at a time.
// Sources of each formula are cited at the function; the policy files say which options they use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/policies/policy.h"

namespace kvb::scoring {

/// How the G query heads of a GQA group are reduced into one score per kv head.
enum class Gqa {
  kMaxLogits,  ///< max over the group of the scaled logits, BEFORE the softmax; the softmax then
               ///< runs over the older (non-window) keys only (R-KV repo: rkv/utils.py; seed note
               ///< seed-trimkv-and-baselines.md §3.1 step 1, §5.2)
  kMax,        ///< softmax per query head over all cached keys (causal), then max over the group
               ///< (G-KV: seed-gkv.md §1.1 "Order of operations")
  kMean,       ///< softmax per query head over all cached keys (causal), then mean over the group
               ///< (kvpress SnapKVPress: peers-harnesses.md §1)
};
/// Parses "max_logits" / "max" / "mean"; throws kvb::Error naming `what` otherwise.
Gqa parse_gqa(const std::string& s, const std::string& what);

/// 1-D pooling along the token axis, stride 1, "same" length (padding kernel/2).
enum class Pool {
  kNone,
  kMax,  ///< torch max_pool1d: padding never wins (acts as −inf)
  kAvg,  ///< torch avg_pool1d with count_include_pad=True: zero padding, divide by kernel
};
Pool parse_pool(const std::string& s, const std::string& what);

/// Scaled logits of the window queries of `step` against the cached keys of kv head `h`:
/// returns [G, w, L] f32 row-major (G = Hq / Hkv, L = current length of head h), with −inf where
/// the key's absolute position is after the query's (causal). Requires step.window_queries;
/// throws kvb::Error when it is unset. `w_out` receives w.
std::vector<float> window_logits(const LayerStep& step, int h, int* w_out);

/// Softmax attention probabilities [G, w, L] of the window queries over all cached keys of head h
/// (causal). Uses step.window_attention when the engine provides it, else computes it from
/// window_logits. `w_out` receives w.
std::vector<float> window_probs(LayerStep& step, int h, int* w_out);

/// SnapKV-family importance of the OLDER tokens of head h (the first L − w, i.e. all but the w
/// window tokens), before pooling: attention of the w window queries, reduced over the GQA group
/// by `gqa`, then averaged over the w queries. Returns L − w values (empty when L ≤ w).
/// Sources: SnapKV (arXiv 2404.14469 §4.2), R-KV (seed-trimkv-and-baselines.md §3.1 step 1),
/// G-KV Eq. 1–2 (seed-gkv.md §1.1), kvpress SnapKVPress.score.
std::vector<float> window_importance(LayerStep& step, int h, Gqa gqa, int* w_out);

/// Pools `x` along its only axis with `kernel` (odd or even; padding kernel/2, output cropped to
/// x.size() as torch does for odd kernels). kernel ≤ 1 or Pool::kNone returns x unchanged.
std::vector<float> pool1d(std::span<const float> x, int kernel, Pool type);

/// R-KV / G-KV key redundancy of head h over its L cached keys (seed-trimkv-and-baselines.md §3.1
/// step 2; seed-gkv.md §1.3): S = cosine similarity matrix (key norm eps 1e-8), diagonal zeroed;
/// for every row i the LARGEST other index k with S[i,k] > threshold has S[i,k] set to 0 (the most
/// recent near-duplicate is not penalised); when no k qualifies, R-KV zeroes S[i,0]
/// (`zero_first_when_no_match`, R-KV's quirk), G-KV zeroes nothing. Returns the column means
/// c_k = (1/L) Σ_i S[i,k], k < L.
std::vector<float> key_redundancy_mean(const KVCache& cache, SeqId seq, int layer, int h,
                                       float threshold, bool zero_first_when_no_match);

/// In-place softmax of x (max-subtracted, f32).
void softmax_inplace(std::span<float> x);

/// The keep-set of a "protect + top-k" policy: tokens [0, sinks) and [L − window, L) are always
/// kept; of the rest, the (budget − protected) with the highest `scores[i]` (scores has length L;
/// entries of protected tokens are ignored; NaN counts as −inf; ties go to the lower index).
/// Returns strictly increasing indices. When budget ≥ L every token is kept; when the protected
/// tokens alone reach the budget only they are kept.
std::vector<int32_t> select_keep(std::span<const float> scores, int32_t L, int64_t budget,
                                 int32_t sinks, int32_t window);

/// Indices of the `k` largest values of `scores` (ties to the lower index), sorted increasing.
std::vector<int32_t> top_k_indices(std::span<const float> scores, int64_t k);

/// SplitMix64 mixing (deterministic, platform independent); used for seeded policies.
uint64_t splitmix64(uint64_t x);
/// A uniform double in [0, 1) from a hash of the given words.
double hash_uniform(std::initializer_list<uint64_t> words);

/// Current length of kv head h of (step.seq, step.layer).
int32_t head_length(const LayerStep& step, int h);

}  // namespace kvb::scoring
