// kvb::cuda plan — host-side (no CUDA) planning of the CUDA backend's attention launches and
// page-table flattening. Kept free of CUDA headers so it builds everywhere and is unit-tested on
// the CPU (tests/engine/test_cuda_host.cpp).
//
// Attention work is cut into units. The rows of one (item, kv head) are its n new query tokens
// times the G query heads of the group (row r = token r / G, head g = r % G), in chunks of at
// most kAttnRows rows. A chunk's visible keys are a prefix [0, kend) of the head's cached tokens
// (keys are stored in position order and the item's n new tokens are the last n of the head), and
// long prefixes are split into ranges of `split_len` keys (split-KV, flash-decoding): each split
// writes an unnormalised partial (m, l, o) that a combine pass merges.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/cuda/plan_types.h"

namespace kvb::cuda {

/// The attention launch plan of one layer of one step.
struct AttnPlan {
  std::vector<AttnUnit> units;
  std::vector<AttnGroup> groups;  ///< only chunks with more than one split
  int32_t num_parts = 0;          ///< partial slots used (each kAttnRows rows)
  int32_t split_len = 0;          ///< keys per split chosen by the planner
};

/// Plans one layer's attention. `n[b]` new tokens of item b (≥ 1); `len[b * Hkv + h]` the cached
/// length of kv head h of item b after this step's append (≥ n[b]); G query heads per kv head;
/// `target_units` the number of blocks wanted to fill the device (e.g. 4 × SM count). The split
/// length is the smallest multiple of kAttnTile (≥ min_split) such that the units reach about
/// target_units. Throws kvb::Error on inconsistent input (len < n, G < 1, sizes mismatch).
AttnPlan plan_attention(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G,
                        int64_t target_units, int32_t min_split = 256);

/// Flattened page tables of one layer: the page list of (item b, head h) starts at
/// offsets[b * Hkv + h] in `pages`.
struct FlatPages {
  std::vector<int32_t> offsets;
  std::vector<int32_t> pages;
};

/// Device slot of key index i of a head whose pages are `pages` (page_size P): page[i / P]·P + i % P.
inline int64_t key_slot(std::span<const int32_t> pages, int32_t i, int P) {
  return static_cast<int64_t>(pages[i / P]) * P + i % P;
}

/// Copy pairs that mirror KVCache::compact(keep) on a device pool: for every kept index j with
/// keep[j] != j, (source slot, destination slot) under the head's page list *before* compaction
/// (compaction keeps a prefix of the pages, so destinations stay valid after it). Applied as a
/// gather of all sources then a scatter, so overlapping pairs are safe. Throws kvb::Error when
/// `keep` is not strictly increasing or out of [0, len).
void compaction_pairs(std::span<const int32_t> pages, int32_t len, int P, std::span<const int32_t> keep,
                      std::vector<int64_t>& src, std::vector<int64_t>& dst);

}  // namespace kvb::cuda
