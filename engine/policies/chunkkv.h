// kvb::ChunkKVPolicy — ChunkKV's whole-chunk selection on SnapKV scores; `entropy_chunkkv`
// derives from it. See chunkkv.cpp for the sources and the choices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/policies/layer_score_cache.h"
#include "engine/policies/snapkv.h"

namespace kvb {

/// ChunkKV (arXiv 2502.00299 §3.1; kvpress 0.5.5 ChunkKVPress, kvpress/presses/chunkkv_press.py,
/// wrapping SnapKVPress): one f32 token score per layer (the SnapKV scores summed over the kv
/// heads, the window's tokens at the layer's largest score + 1), cut into chunks of `chunk`
/// tokens; the best chunks by mean score are kept whole by every kv head of the layer.
class ChunkKVPolicy : public SnapKVPolicy {
 public:
  /// `chunkkv` itself (the registry entry's constructor).
  explicit ChunkKVPolicy(PolicyParams p) : ChunkKVPolicy("chunkkv", std::move(p)) {}
  /// A policy built on ChunkKV's layer score under its own registry `name`; reads `chunk`
  /// (min_chunk … 2^20, kvb::Error naming `chunk` otherwise) and refuses threshold budgets.
  ChunkKVPolicy(std::string name, PolicyParams p, int32_t min_chunk = 1);
  void on_sequence_end(SeqId seq) override { layer_scores_.forget(seq); }
  /// Token budgets keep at most B tokens (whole chunks that fit); with budget_kind=ratio the
  /// chunk count follows kvpress and may exceed ⌊ratio · L⌋ by part of a chunk: the full cache
  /// bounds it.
  KvFootprint kv_footprint(const FootprintQuery& q) const override;

 protected:
  /// The layer's token score (the same for every kv head): SnapKV scores of the older tokens,
  /// the window's tokens at the layer's largest score + 1, summed over the kv heads (f32).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override;
  /// The top chunks by mean token score, kept whole (ascending indices).
  std::vector<int32_t> select(const std::vector<float>& scores, int32_t L, int64_t B) override;
  /// The mean score of each chunk of `chunk_` tokens of scores[0, L) from the oldest, the last
  /// one holding the L mod chunk_ newest tokens when that is not 0: ⌈L / chunk_⌉ f32 values, each
  /// an f32 sum in token order divided by the chunk's length.
  std::vector<float> chunk_means(const std::vector<float>& scores, int32_t L) const;

  int32_t chunk_ = 20;

 private:
  LayerScoreCache layer_scores_;
};

}  // namespace kvb
