// kvb::merging — merge-on-evict (kvpress MergingPress) as the spec option `merge=true` of every
// policy (make_composed, scheduled.cpp): each token a keep-set evicts has its value folded into the
// kept token whose key is most cosine-similar (merging.cpp).
#pragma once

#include <memory>
#include <span>

#include "engine/policies/policy.h"

namespace kvb::merging {

/// Requests (LayerStep::write_values) the merged values of the kept tokens `keep` (strictly
/// increasing indices < L_h) of head h, every other token of the head being evicted:
///   for each evicted e: target t = the kept token of highest cosine(k_e, k_t) (post-RoPE keys,
///   each divided by max(‖k‖, 1e-6); ties to the lower index), s = that cosine;
///   e merges when s ≥ `threshold` and, for `fraction` < 1, s is at least the (1 − fraction)
///   quantile (linear interpolation, as torch.quantile) of the s of the evicted tokens allowed by
///   the threshold (those not allowed count as −∞);
///   weight w_e = max(s, 0) · ‖v_e‖ / (‖v_e‖ + ‖v_t‖ + 1e-6) (‖v_t‖ of the unmerged value);
///   v_t ← (v_t + Σ_e w_e v_e) / (1 + Σ_e w_e) for every kept t that received a weight > 0.
/// Needs host K/V and PolicyNeeds::writes_kv. Source: kvpress 0.5.5 MergingPress.merge
/// (kvpress/presses/merging_press.py; after Token Merging, Bolya et al., ICLR 2023, arXiv
/// 2210.09461 §3, and D2O, Wan et al., arXiv 2406.13035 §3.2).
void merge_evicted(LayerStep& step, int h, std::span<const int32_t> keep, double threshold, double fraction);

/// `inner` whose every keep-set (on_layer_step's; those of on_step_end are applied as they are)
/// first merges the tokens it evicts into its survivors (merge_evicted). `threshold` in [0, 1],
/// `fraction` in (0, 1] (the caller checks). Its needs are inner's plus host K/V and writes.
std::unique_ptr<Policy> make_merging(std::unique_ptr<Policy> inner, double threshold, double fraction);

}  // namespace kvb::merging
