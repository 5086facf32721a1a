// Shared scoring helpers of the KV policies (docs/architecture.md, Policies and the policy driver: "score + protect + top-k").
// Everything here is f32 and works on one (sequence, layer, kv_head) at a time. head_mlp and
// key_redundancy_mean run their products on the f32 tile kernel over the OpenMP threads (window
// attention does too, in the CPU backend that provides step.window_attention), each value one
// fixed-order sum, so results do not depend on the thread count; the rest is single-threaded.
// Sources of each formula are cited at the function; the policy files say which options they use.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/policies/policy.h"

namespace kvb::scoring {

// Gqa and Pool are declared in policy.h (the backend primitive LayerStep::window_scores uses them).
Gqa parse_gqa(const std::string& s, const std::string& what);

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
/// Sources: SnapKV (arXiv 2404.14469 §4.2), R-KV step 1 (docs/policies.md, `rkv`),
/// G-KV Eq. 1–2 (docs/policies.md), kvpress SnapKVPress.score.
std::vector<float> window_importance(LayerStep& step, int h, Gqa gqa, int* w_out);

/// window_importance(step, h, spec.gqa) pooled with pool1d(spec.kernel, spec.pool): the score of
/// the L − w older tokens of head h in SnapKV, PyramidKV and R-KV. Uses LayerStep::window_scores
/// when the backend provides it (the CUDA backend reduces and pools on the device and copies only
/// L − w floats), else the host path. `w_out` receives w.
std::vector<float> window_scores(LayerStep& step, int h, const WindowScoreSpec& spec, int* w_out);

/// Evaluates a policy's head-wise MLP (policy.h HeadMlp; argument contract of LayerStep::head_mlp):
/// through LayerStep::head_mlp when set, else on the host in f32 (x = null reads
/// step.layer_input). Throws kvb::Error when x is null and step.layer_input is unset, or on
/// inconsistent shapes.
void head_mlp(LayerStep& step, const HeadMlp& mlp, const float* x, int rows, int head, float* out);

/// Pools `x` along its only axis with `kernel` (odd or even; padding kernel/2, output cropped to
/// x.size() as torch does for odd kernels). kernel ≤ 1 or Pool::kNone returns x unchanged.
std::vector<float> pool1d(std::span<const float> x, int kernel, Pool type);

/// R-KV / G-KV key redundancy of head h over its L cached keys (R-KV step 2;
/// docs/policies.md, `rkv`): S = cosine similarity matrix (key norm eps 1e-8), diagonal zeroed;
/// for every row i the LARGEST other index k with S[i,k] > threshold has S[i,k] set to 0 (the most
/// recent near-duplicate is not penalised); when no k qualifies, R-KV zeroes S[i,0]
/// (`zero_first_when_no_match`, R-KV's quirk), G-KV zeroes nothing. Returns the column means
/// c_k = (1/L) Σ_i S[i,k], k < L.
std::vector<float> key_redundancy_mean(const KVCache& cache, SeqId seq, int layer, int h, float threshold,
                                       bool zero_first_when_no_match);

/// In-place softmax of x (max-subtracted, f32).
void softmax_inplace(std::span<float> x);

/// The keep-set of a "protect + top-k" policy: tokens [0, sinks) and [L − window, L) are always
/// kept; of the rest, the (budget − protected) with the highest `scores[i]` (scores has length L;
/// entries of protected tokens are ignored; NaN counts as −inf; ties go to the lower index).
/// Returns strictly increasing indices. When budget ≥ L every token is kept; when the protected
/// tokens alone reach the budget only they are kept.
std::vector<int32_t> select_keep(std::span<const float> scores, int32_t L, int64_t budget, int32_t sinks, int32_t window);

/// Indices of the `k` largest values of `scores` (ties to the lower index), sorted increasing.
std::vector<int32_t> top_k_indices(std::span<const float> scores, int64_t k);

/// One token of one kv head of a layer: `head` in [0, Hkv), `idx` its index in that head's cache.
struct HeadToken {
  int head;
  int32_t idx;
};

/// The `take` highest-scoring tokens of a whole layer, across its kv heads: `scores[h]` holds
/// candidate scores of head h's tokens 0 .. scores[h].size() − 1; a token with `skip` given and
/// `(*skip)[h][i] != 0` is not a candidate (`skip[h]` at least as long as `scores[h]`). NaN
/// counts as −inf; ties go to the lower head, then the lower index. Returns them best first
/// (fewer when there are fewer candidates). Used where a layer's heads share one budget: AdaKV's
/// allocation (Feng et al., arXiv 2407.11550, Alg. 1; kvpress 0.5.5 `adakv_press.py`, the
/// layer-wide top-k over the flattened head × token scores) in `adakv` and `criticaladakv`.
std::vector<HeadToken> layer_top_k(const std::vector<std::vector<float>>& scores, int64_t take,
                                   const std::vector<std::vector<char>>* skip = nullptr);

/// The indices i with (mask[i] != 0) == `set`, increasing: the keep-set of a head from a keep
/// mask (set = true) or a drop mask (set = false) over its L = mask.size() tokens.
std::vector<int32_t> mask_indices(std::span<const char> mask, bool set = true);

/// SplitMix64 mixing (deterministic, platform independent); used for seeded policies.
uint64_t splitmix64(uint64_t x);
/// A uniform double in [0, 1) from a hash of the given words.
double hash_uniform(std::initializer_list<uint64_t> words);

/// Adds this step's LayerStep::attention_colsum to per-token cache scalar `slot` of every kv head
/// of (step.seq, step.layer): afterwards the scalar holds the attention the token has received,
/// summed over the group's query heads and every query since it entered the cache (H2O §3.3's
/// accumulated attention; kvpress ObservedAttentionPress's column sum). Throws kvb::Error naming
/// `policy` when attention_colsum is unset or its length differs from a head's cache length.
void accumulate_attention(LayerStep& step, const char* policy, int slot);

/// LagKV's lag-relative information of one partition (arXiv 2504.04704 §3; kvpress 0.5.5
/// LagKVPress._get_states_score, kvpress/presses/lagkv_press.py): the `lag` rows row(first) …
/// row(first + lag − 1) of width D are min-max normalised per channel by the channel minimum and
/// maximum over the next `lag` rows (the reference partition, rows first + lag … first + 2·lag − 1,
/// which must exist), each normalised row's unbiased standard deviation over its D channels is
/// taken, and a softmax over the partition's rows makes them sum to 1. The normalisation is f32
/// (as kvpress on f32 tensors); the deviation and the softmax are double. A channel whose
/// reference range is 0 gives ±inf / NaN, as kvpress. Returns `lag` values.
std::vector<double> lag_relative_info(const std::function<const float*(int32_t)>& row, int D, int32_t first, int32_t lag);

/// Squared L2 norms of the L cached key rows (`values` false) or value rows (`values` true) of kv
/// head h of (seq, layer), each a double sum over the head_dim channels in channel order. Used by
/// `knorm` (−‖k‖), `cur` (CurDKV's k² and v²) and `noncausal_attn` (‖v‖).
std::vector<double> row_sq_norms(const KVCache& cache, SeqId seq, int layer, int h, bool values);

/// CriticalKV's value weight of the L cached tokens of kv head h of (step.seq, step.layer): for
/// each token i, the mean over the G query heads hq of the group of ‖W_o[:, hq·D:(hq+1)·D] · v_i‖₁,
/// the L1 norm over the H outputs of the value projected through the query head's columns of the
/// output projection (LayerStep::out_proj_head). Each of the H products is an f32 dot product over
/// D channels by the engine's f32 GEMM (matmul_nt: one fixed reduction order per output, whatever
/// the number of tokens or threads), the L1 sum and the group mean are double, the result is
/// rounded to f32 (kvpress: f32 matmul, norm and mean). Reads the values through KVCache::value
/// (host K/V), 256 tokens at a time. Source: kvpress 0.5.5
/// CriticalKVPress.vwl1norm (kvpress/presses/criticalkv_press.py). Throws kvb::Error naming
/// `policy` when step.out_proj_head is unset (the policy did not declare PolicyNeeds::out_proj).
std::vector<float> value_out_l1(const LayerStep& step, int h, const char* policy);

/// Applies the model's RoPE at absolute position `pos` to the D-vector x (rotate-half pairs
/// (i, i + D/2), angle pos · inv_freq[i] in f32 as transformers, cos/sin times `mscale`; see
/// LayerStep::rope_inv_freq) and writes it to out (may not alias x). Turns a pre-RoPE query of
/// LayerStep::queries_pre_rope into the post-RoPE one the attention used.
void rope_rotate(const float* x, int D, int64_t pos, const float* inv_freq, float mscale, float* out);

/// RoPE's rotation averaged over the future positions p = first … first + n − 1 (Expected
/// Attention §3's R̄; kvpress 0.5.5 ExpectedAttentionPress.apply_avg_rope and CapPress._avg_rope_matrix,
/// kvpress/presses/expected_attention_press.py, cap_press.py): R̄ = mean_p (cos_p·I + sin_p·P) with
/// P the rotate-half matrix, cos/sin per channel pair i as transformers computes them (f32 angle
/// p · inv_freq[i], times the attention scaling, rounded to f32), averaged in double.
struct MeanRope {
  std::vector<double> c, s;  ///< c̄_i, s̄_i, head_dim / 2 values each
  /// y = R̄x for D = 2·c.size() values read and written `stride` apart (1: a vector; D: a column
  /// of a row-major D×D matrix): y_i = c̄_i x_i − s̄_i x_{i+D/2}, y_{i+D/2} = c̄_i x_{i+D/2} + s̄_i x_i.
  /// x and y must not alias.
  void apply(const double* x, double* y, int stride) const;
};
/// MeanRope of step's model (step.rope_inv_freq, step.rope_mscale, step.head_dim) over the `n`
/// positions from `first`. Throws kvb::Error naming `policy` when the backend passed no RoPE.
MeanRope mean_rope(const LayerStep& step, int64_t first, int64_t n, const char* policy);

/// Running sums of one layer's pre-RoPE queries (LayerStep::queries_pre_rope) per query head, in
/// double, over every query whose position is at least `first_pos` (kvpress: hidden_states[:,
/// n_sink:]); with `second` also Σ q qᵀ (lower triangle). Used by `expected_attention` (mean and
/// covariance) and `cap` (mean: the historical-query anchor).
struct QueryMoments {
  int64_t n = 0;            ///< queries summed
  std::vector<double> sum;  ///< [Hq, D]: Σ q
  std::vector<double> sq;   ///< [Hq, D, D]: Σ q qᵀ, lower triangle (empty unless `second`)
  /// Adds step's new queries at positions ≥ first_pos. Throws kvb::Error naming `policy` when
  /// step.queries_pre_rope is unset (the backend does not provide it).
  void add(const LayerStep& step, int64_t first_pos, bool second, const char* policy);
};

/// Current length of kv head h of (step.seq, step.layer).
int32_t head_length(const LayerStep& step, int h);

}  // namespace kvb::scoring
