// kvb::rerotation — kvpress KeyRerotationPress as the spec option `rerotate=true` of every policy
// (make_composed, scheduled.cpp): the keys a keep-set keeps are re-rotated to their ranks in it
// (rerotation.cpp).
#pragma once

#include <memory>
#include <span>

#include "engine/policies/policy.h"

namespace kvb::rerotation {

/// Requests (LayerStep::write_keys) that the key of each kept token keep[j] of head h (strictly
/// increasing cache indices) be rotated by j − keep[j] positions: the RoPE rotation of its cache
/// index is replaced by that of its rank among the kept tokens, so the kept keys sit at the
/// contiguous positions 0 … n − 1 (rotate-half RoPE with LayerStep::rope_inv_freq; angle
/// (j − keep[j]) · inv_freq[i] rounded to f32 as kvpress computes it, no attention scaling). The
/// cached positions (KVCache::position) are not changed: causal masks, windows and later tokens'
/// positions stay the original ones, as kvpress's later queries keep theirs. Needs host K/V and
/// PolicyNeeds::writes_kv; throws kvb::Error when the backend gave no RoPE frequencies. Source:
/// kvpress 0.5.5 KeyRerotationPress (kvpress/presses/key_rerotation_press.py; the re-rotation of
/// transformers' SinkCache and of FINCH, Corallo and Papotti, TACL 2024, §3.3).
void rerotate_kept(LayerStep& step, int h, std::span<const int32_t> keep);

/// `inner` whose every keep-set of its layer turns also re-rotates the kept keys (rerotate_kept).
/// Its needs are inner's plus host K/V and writes.
std::unique_ptr<Policy> make_rerotating(std::unique_ptr<Policy> inner);

}  // namespace kvb::rerotation
