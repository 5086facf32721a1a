// `chunkkv`: keep whole chunks of consecutive tokens, ranked by their mean SnapKV score summed
// over the layer's kv heads.
// Sources: Liu et al., "ChunkKV: Semantic-Preserving KV Cache Compression for Efficient Long-Context
// LLM Inference" (arXiv 2502.00299, §3.1 and Alg. 1: the prompt is cut into fixed-size chunks,
// each chunk is scored by the observation-window attention its tokens receive, the top chunks
// are kept whole, and the kv heads of a layer share one selection); kvpress 0.5.5 ChunkKVPress
// (NVIDIA/kvpress, PyPI kvpress==0.5.5, kvpress/presses/chunkkv_press.py) wrapping
// SnapKVPress, as kvpress's examples use it: the inner press's per-head scores (SnapKVPress.score:
// window 64, kernel 5, avg pooling, mean over the GQA group, the window's tokens set to the
// layer's largest score + 1), summed over the kv heads, averaged over each chunk of
// `chunk_length` = 20 tokens (a shorter last chunk of the L mod 20 newest tokens), and the
// max(1, ⌊chunks · (1 − compression_ratio)⌋) best chunks kept.
// Choices: the inner scorer is SnapKV (kvbench's `snapkv` scoring with kvpress's parameters as
// defaults; `window`, `kernel`, `pool`, `gqa` change it). Chunks kept: budget_kind=ratio keeps
// max(1, ⌊chunks · ratio⌋), kvpress's rule; a token budget B keeps max(1, ⌊B / chunk⌋) chunks, so
// a head never holds more than B tokens after a compression (B ≥ chunk). Chunk ties go to the
// earlier chunk. A head shorter than one chunk (kvpress falls back to the inner press) keeps the
// top B tokens of the summed score with the window. Decode: the kvbench schedule (buffer 128;
// `decode=false` is kvpress's prefill-only press), chunks counted from the oldest cached token.
#include "engine/policies/chunkkv.h"

#include <algorithm>
#include <limits>

#include "engine/policies/registration.h"
#include "engine/util/error.h"

namespace kvb {

ChunkKVPolicy::ChunkKVPolicy(std::string name, PolicyParams p, int32_t min_chunk)
    : SnapKVPolicy(std::move(name), std::move(p)) {
  params_.bind({{"chunk", &chunk_, within(min_chunk, 1 << 20)}});
  refuse_threshold("it keeps whole chunks ranked by their mean score");
}

KvFootprint ChunkKVPolicy::kv_footprint(const FootprintQuery& q) const {
  if (ratio_kind_) return full_cache_footprint(q, name() + " with budget_kind=ratio: bounded by the full cache");
  return ScheduledPolicy::kv_footprint(q);
}

void ChunkKVPolicy::score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) {
  layer_scores_.score(step, L, name(), "ChunkKV", scores, [&](std::vector<float>& row) {
    std::vector<std::vector<float>> per(step.num_kv_heads);
    float top = -std::numeric_limits<float>::infinity();
    int w = 0;
    for (int hk = 0; hk < step.num_kv_heads; ++hk) {
      per[hk] = scoring::window_scores(step, hk, {gqa_, pool_, kernel_}, &w);
      for (float v : per[hk]) top = std::max(top, v);
    }
    for (int hk = 0; hk < step.num_kv_heads; ++hk)
      for (int32_t i = 0; i < L; ++i) row[i] += i < static_cast<int32_t>(per[hk].size()) ? per[hk][i] : top + 1.0f;
  });
}

std::vector<float> ChunkKVPolicy::chunk_means(const std::vector<float>& scores, int32_t L) const {
  const int32_t n = (L + chunk_ - 1) / chunk_;
  std::vector<float> mean(n, 0.0f);
  for (int32_t c = 0; c < n; ++c) {
    const int32_t lo = c * chunk_, hi = std::min<int32_t>(L, lo + chunk_);
    float s = 0.0f;
    for (int32_t i = lo; i < hi; ++i) s += scores[i];
    mean[c] = s / static_cast<float>(hi - lo);
  }
  return mean;
}

std::vector<int32_t> ChunkKVPolicy::select(const std::vector<float>& scores, int32_t L, int64_t B) {
  if (L < chunk_) return ScheduledPolicy::select(scores, L, B);
  const std::vector<float> mean = chunk_means(scores, L);
  const auto n = static_cast<int64_t>(mean.size());
  int64_t k = ratio_kind_ ? static_cast<int64_t>(static_cast<double>(n) * ratio_) : B / chunk_;
  k = std::clamp<int64_t>(k, 1, n);
  std::vector<int32_t> keep;
  for (int32_t c : scoring::top_k_indices(mean, k))
    for (int32_t i = c * chunk_; i < std::min<int32_t>(L, (c + 1) * chunk_); ++i) keep.push_back(i);
  return keep;
}

KVB_POLICY(chunkkv) { return policy_entry<ChunkKVPolicy>("chunkkv").with_tests({.min_budget = 65}); }

}  // namespace kvb
