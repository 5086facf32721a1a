// kvb::think — ThinK's query-driven key-channel pruning (think.cpp), shared by the `think` policy
// and the `then=think` option of the scheduled policies (scheduled.cpp, make_composed: kvpress's
// ComposedPress([SnapKVPress, ThinKPress])).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/policies/policy.h"

namespace kvb::think {

/// Key channels ThinK zeroes for head_dim D channels and a kept fraction `kept` of them:
/// floor(D · (1 − kept)) (kvpress ThinKPress: int(head_dim · key_channel_compression_ratio)).
int pruned_channels(int D, double kept);

/// The `n_pruned` channels of kv head h to zero, increasing: the lowest of
///   score[d] = mean over the G query heads of the group and the last min(window, w) window
///              queries of q[d]² (post-RoPE queries, LayerStep::window_queries)
///            × mean over the tokens `rows` of head h of k[d]² (the cached post-RoPE keys),
/// ties to the lower channel. Needs PolicyNeeds::window_queries ≥ 1 and host K/V
/// (PolicyNeeds::host_kv); returns {} when n_pruned ≤ 0, `rows` is empty or no query is held.
/// Source: Xu et al., "ThinK: Thinner Key Cache by Query-Driven Pruning" (arXiv 2407.21018, §3.2,
/// eq. 4: the magnitude-based channel criterion ‖Q[:, d] K[:, d]ᵀ‖ factored as above); kvpress
/// 0.5.5 ThinKPress.compress (kvpress/presses/think_press.py).
std::vector<int> channels_to_prune(LayerStep& step, int h, std::span<const int32_t> rows, int window, int n_pruned);

/// Requests (LayerStep::write_keys) that the keys of tokens `rows` of head h have the channels of
/// channels_to_prune set to 0; does nothing when none are pruned. Needs PolicyNeeds::writes_kv.
void prune_keys(LayerStep& step, int h, std::span<const int32_t> rows, int window, int n_pruned);

}  // namespace kvb::think
