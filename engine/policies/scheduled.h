// kvb::ScheduledPolicy — the shared "score + protect + top-k on a schedule" skeleton of the
// eviction policies (docs/architecture.md, Policies and Budget):
//   budget B  = tokens kept per (layer, kv_head) right after a compression;
//   buffer    = tokens that may accumulate before the next compression: a head is compressed
//               after a step in which its length reached B + buffer, so between compressions it
//               holds B … B + buffer − 1 tokens after each step and peaks at B + buffer inside
//               the step's attention (TRIM-KV TrimKVCache.compress; the "resident length ≥ B +
//               buffer" rule R-KV formalises, docs/policies.md);
//               buffer = 1 evicts on every step once past B (TRIM-KV Algorithm 1);
//   window    = most recent tokens always kept; sinks = first tokens always kept.
// At the end of the prompt (LayerStep::prefill_last) a head longer than B is compressed to B
// (SnapKV-style prefill compression, which R-KV, G-KV and TRIM-KV all perform when the prompt
// exceeds the budget). `decode=false` restricts compression to that one prefill point.
// Protocol (`compress`): `prompt_end` (default) never compresses on a prefill chunk that does not
// end the prompt — the whole prompt is prefilled with the full cache, as SnapKV, PyramidKV, R-KV,
// G-KV, TRIM-KV, ForesightKV and kvpress do, so the result does not depend on the prefill chunk;
// `chunked` also applies the "length ≥ B + buffer" rule after every prefill chunk (a bounded cache
// during prefill, for protocols that compress chunk by chunk on purpose).
// A token budget is required (0 is an error: a compressing policy without a budget would silently
// run the full cache); budget_kind=ratio needs none.
// kvpress's wrappers as options (docs/policies.md "Migrating from kvpress"): `press_chunk=N`
// (ChunkPress: the prompt's end compresses each chunk of N positions to its own top fraction) and
// `layer_ratios=r0/r1/...` (PerLayerCompressionPress: a kept fraction per layer), both with
// budget_kind=ratio; `press_block=N` (BlockPress: the budget kept through blocks of N tokens);
// `then=NAME,then_ratio=f` (ComposedPress: NAME re-compresses each keep-set, make_composed).
// Budget kinds: `budget_kind=tokens` (default; B = the spec's budget; 0 = never compress),
// `budget_kind=ratio` (B = floor(ratio · tokens seen so far), at least sinks + window + 1) and
// `budget_kind=threshold` (no budget: at each compression point every token of a head outside the
// sinks and the `window` most recent ones whose score() is below `threshold` is evicted; kvpress
// DMSPress's rule, docs/policies.md "Threshold budgets"). Threshold compression points: the end
// of the prompt (every prefill chunk with compress=chunked) and, with decode=true, every decode
// step whose new position is a multiple of `buffer` (buffer=1: every step, as DMSPress).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/policy.h"

namespace kvb {

/// Parameter entries shared by the scheduled policies, with per-policy defaults.
/// Keys: budget_kind, ratio, threshold, buffer, window, sinks, decode, compress.
/// `threshold_key` names the eviction threshold's key ("threshold"; R-KV and G-KV, whose own
/// `threshold` is a redundancy cosine, use "score_threshold"); the policy's constructor finds it.
/// `window` < 0 means "half of the budget" (H2O's equal heavy/recent split). `global_kind`
/// adds budget_kind=global (a budget of budget × layers × kv_heads tokens shared across all
/// heads and layers, for policies that define one; they implement it in on_step_end).
std::vector<PolicyParamInfo> schedule_params(int64_t buffer, int64_t window, int64_t sinks, bool decode = true,
                                             bool global_kind = false, const char* threshold_key = "threshold");

/// The `compress` parameter entry (prompt_end | chunked) shared by every compressing policy.
PolicyParamInfo compress_param();
/// Reads `compress` from p: true for `chunked`, false for `prompt_end`.
bool parse_compress(PolicyParams& p);
/// True when a step may compress: a decode step, the step that ends the prompt, or (chunked) any
/// prefill chunk. Policies with their own schedule (WG-KV, TRIM-KV's global budget) use it too.
bool compress_point(bool prefill, bool prefill_last, bool chunked);

/// Base class: subclasses provide score(); the base decides when to compress and which tokens are
/// protected, and requests the keep-sets.
class ScheduledPolicy : public ParamPolicy {
 public:
  /// Reads the schedule_params() keys from `p` and validates them (buffer ≥ 1, window ≥ 0,
  /// sinks ≥ 0, 0 < ratio ≤ 1, and for token budgets B > sinks + window unless B = 0; with
  /// budget_kind=threshold a finite `threshold` is required, the budget is not, and window ≥ 0;
  /// `threshold` given with another kind is an error); throws kvb::Error naming the parameter.
  /// Subclasses read their own keys from params_ afterwards; a subclass without threshold
  /// support refuses it with refuse_threshold().
  ScheduledPolicy(std::string name, PolicyParams p, bool global_kind = false);

  void on_layer_step(LayerStep& step) override;
  /// The budget + buffer schedule's pages (docs/architecture.md#budget-buffer-window-sinks), with
  /// B the token budget (budget_kind=ratio: ⌈ratio · (context + gen)⌉, its largest value) and b
  /// the buffer, per head, capped at context + gen:
  ///   decode=false:        peak max(context, min(context, B) + gen), steady min(context, B) + gen;
  ///   compress=prompt_end: steady min(B + b, min(context, B) + gen) (a decode step appends, then
  ///                        compresses; a head that never reaches B + b is never compressed), peak
  ///                        max(context, steady) (the whole prompt is held before it is compressed);
  ///   compress=chunked:    steady as prompt_end (the prompt's end compresses to B), peak
  ///                        max(min(context, B + b − 1 + prefill chunk), steady).
  /// budget_kind=global (budget shared by every head): the heads' total tokens stay within
  /// heads · the per-head bound, plus one partial page per head. Budget 0 (never compress): the
  /// full cache. Policies whose heads or layers share the budget unevenly (PyramidKV, AdaKV,
  /// CAKE) override this with the full cache.
  KvFootprint kv_footprint(const FootprintQuery& q) const override;
  /// Token and global budgets use the budget; budget_kind=ratio (a fraction of the context) and
  /// budget_kind=threshold (a score threshold) do not.
  bool uses_budget() const override { return !ratio_kind_ && !threshold_kind_ && ParamPolicy::uses_budget(); }
  /// Scores (higher = keep) of the cache tokens `subset` (strictly increasing indices) of head h
  /// as score() would give them if the head held only those tokens: kvpress's BlockPress and
  /// ComposedPress call their press on the gathered keys and values. Returns false when the policy
  /// does not score subsets (score_subset), leaving `out` unspecified.
  bool scores_of(LayerStep& step, int h, std::span<const int32_t> subset, std::vector<float>& out) {
    return score_subset(step, h, subset, out);
  }

 protected:
  /// What scores_of computes. Default: when token_local(), score() over the whole head restricted
  /// to `subset`; else false. A policy whose score reads other tokens (KeyDiff's mean key)
  /// overrides it.
  virtual bool score_subset(LayerStep& step, int h, std::span<const int32_t> subset, std::vector<float>& out);
  /// True when score() of a token reads that token alone (KnormPress's key norm).
  virtual bool token_local() const { return false; }
  /// Scores of the L tokens of head h (higher = keep). Entries of protected tokens are ignored.
  virtual void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) = 0;
  /// Called for every layer step before the compression decision (accumulate statistics of the
  /// new tokens: H2O attention sums, TRIM-KV retention gates, ...).
  virtual void observe(LayerStep& step) {}
  /// Called after the keep-set of head h was requested (store per-token state of the survivors).
  virtual void kept(LayerStep& step, int h, const std::vector<int32_t>& keep, const std::vector<float>& scores) {}
  /// The keep-set of a head due for compression (default: sinks + window + top-(B − protected)
  /// of `scores`, scoring::select_keep).
  virtual std::vector<int32_t> select(const std::vector<float>& scores, int32_t L, int64_t B);
  /// Budget of this layer given the policy budget B (PyramidKV overrides).
  /// `L` is the current length of the layer's heads (head 0).
  virtual int64_t layer_budget(const LayerStep& step, int64_t B, int32_t L) const { return B; }
  /// Throws kvb::Error naming `budget_kind` when budget_kind=threshold (for subclasses whose
  /// keep rule is not "score, then keep the top": `why` says what they do instead).
  void refuse_threshold(const std::string& why) const;
  /// The protected recent window for budget B (window < 0: B / 2).
  int32_t window_for(int64_t B) const { return window_ < 0 ? static_cast<int32_t>(B / 2) : window_; }
  /// The budget B in force at this step (tokens or ratio kind), 0 = none.
  int64_t budget_now(const LayerStep& step) const;
  /// True when head of length L must be compressed to B at this step.
  bool due(const LayerStep& step, int32_t L, int64_t B) const;
  /// For policies whose kv heads of a layer share one budget of Hkv · B tokens (adakv,
  /// criticaladakv): sets len[h] to each head's length and returns true when the layer must be
  /// compressed at this step: its total exceeds Hkv · B at the prompt's end, or reaches
  /// Hkv · (B + buffer) at another compression point (a decode step with decode=true, a prompt
  /// chunk with compress=chunked).
  bool shared_layer_due(const LayerStep& step, int64_t B, std::vector<int32_t>& len) const;
  /// The kept fraction of budget_kind=ratio at this step's layer: `layer_ratios`' entry for the
  /// layer when given (throws kvb::Error naming it when its length is not the model's layer count),
  /// else `ratio`.
  double ratio_at(const LayerStep& step) const;
  /// `press_chunk` > 0 (kvpress ChunkPress): the keep-set of head h of L tokens with `scores` —
  /// the cache split into runs of tokens whose positions share a chunk of press_chunk positions,
  /// each run of n tokens keeping its top max(1, floor(ratio_at · n)) (scoring::select_keep, with
  /// the sinks and the window_for(B) newest tokens protected inside the runs that hold them).
  std::vector<int32_t> chunk_select(const LayerStep& step, int h, const std::vector<float>& scores, int32_t L,
                                    int64_t B) const;
  /// `press_block` > 0 (kvpress BlockPress): the keep-set of head h of L tokens at budget B — the
  /// first B tokens, then for each block of press_block tokens after them the top B of the kept
  /// tokens and the block, scored together by scores_of (throws kvb::Error naming press_block when
  /// the policy does not score subsets).
  std::vector<int32_t> block_select(LayerStep& step, int h, int32_t L, int64_t B);
  /// budget_kind=threshold: true when this step is a compression point (see the file comment).
  bool threshold_due(const LayerStep& step) const;
  /// budget_kind=threshold: the keep-set of a head of L tokens with `scores` — the sinks, the
  /// `window` newest tokens and every other token whose score is >= threshold (ascending indices).
  std::vector<int32_t> threshold_keep(const std::vector<float>& scores, int32_t L) const;

  int64_t budget_ = 0;
  bool ratio_kind_ = false;
  bool global_kind_ = false;     ///< budget_kind=global: on_layer_step only observes
  bool threshold_kind_ = false;  ///< budget_kind=threshold: evict scores below threshold_
  double evict_threshold_ = 0.0;
  double ratio_ = 1.0;
  int64_t buffer_ = 1;
  int32_t window_ = 0, sinks_ = 0;
  bool decode_ = true;
  bool chunked_ = false;  ///< compress=chunked
  /// kvpress ChunkPress: chunk length in positions (0 = off); see chunk_select.
  int64_t press_chunk_ = 0;
  /// kvpress BlockPress: block length in tokens (0 = off); see block_select.
  int64_t press_block_ = 0;
  /// kvpress PerLayerCompressionPress: kept fraction per layer (empty = ratio_ everywhere).
  std::vector<double> layer_ratios_;

 private:
  /// Reads and checks press_chunk and layer_ratios (when the policy's table declares them).
  void read_wrappers();
};

/// A policy whose kv heads of a layer share one budget of Hkv · B tokens (adakv, criticaladakv:
/// Ada-KV, Feng et al., arXiv 2407.11550, §3.2): heads end up with different lengths, so its
/// footprint is the full cache (uneven_budget_footprint), and it decides a whole layer at once
/// when shared_layer_due says the layer must be compressed. `Base` is a ScheduledPolicy (its
/// constructors are inherited); the subclass implements compress_layer.
template <class Base>
class SharedLayerBudget : public Base {
 public:
  using Base::Base;
  /// The budget is shared unevenly: the full cache (uneven_budget_footprint).
  KvFootprint kv_footprint(const FootprintQuery& q) const override { return uneven_budget_footprint(q, this->name()); }
  void on_layer_step(LayerStep& step) final {
    const int64_t B = this->budget_now(step);
    std::vector<int32_t> len;
    if (this->shared_layer_due(step, B, len)) compress_layer(step, B, len);
  }

 protected:
  /// Compresses the step's layer to Hkv · B tokens in all; len[h] is kv head h's length (tokens).
  virtual void compress_layer(LayerStep& step, int64_t B, const std::vector<int32_t>& len) = 0;
};

/// kvpress ComposedPress([P1, P2]) as the spec option `then=NAME,then_ratio=f` of a scheduled
/// policy P1 (docs/policies.md "Migrating from kvpress"): whenever P1 requests a keep-set of n
/// tokens for a head, policy NAME scores those n tokens alone (ScheduledPolicy::scores_of) and
/// the top max(1, floor(f · n)) of them are kept. When `spec` has no `then`, returns
/// make_single(spec); otherwise builds P1 from `spec` without `then` and `then_ratio` and NAME
/// with `budget_kind=ratio,ratio=f,decode=false`, both through make_single. Throws kvb::Error
/// naming the parameter when either is not a scheduled policy, f is not in (0, 1], or
/// `then_ratio` is given without `then`.
/// `then=think` (kvpress ComposedPress([P1, ThinKPress])) is the exception: at the end of each
/// prompt P1's kept tokens of every head (all of them when P1 keeps the head whole) have their
/// key channels pruned by ThinK (think.h, window 32), f being the kept fraction of key channels
/// (ThinKPress key_channel_compression_ratio = 1 − f); no token is dropped by it.
/// `merge=true[,merge_threshold=t][,merge_fraction=f]` (kvpress MergingPress(P), any policy P):
/// the policy built from the rest of the spec, every keep-set of its layer turns first merging
/// the values of the tokens it evicts into their most key-similar survivors (merging.h; t in
/// [0, 1], default 0; f in (0, 1], default 1). Throws kvb::Error naming the parameter for a value
/// out of range, or merge_threshold / merge_fraction without merge=true.
/// `rerotate=true` (kvpress KeyRerotationPress(P), any policy P): the policy built from the rest of
/// the spec, the kept keys of every keep-set of its layer turns re-rotated to their ranks
/// (rerotation.h); refused together with then=think (both rewrite the kept keys).
std::unique_ptr<Policy> make_composed(const PolicySpec& spec,
                                      const std::function<std::unique_ptr<Policy>(const PolicySpec&)>& make_single);

}  // namespace kvb
