// One token-score row per (sequence, layer, decode step), shared by the kv heads of a layer: for
// policies whose kv heads of a layer keep one keep-set (tova, chunkkv), the row is computed on the
// first kv head's score() call of a step and reused by the layer's other heads.
#pragma once

#include <algorithm>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb {

class LayerScoreCache {
 public:
  /// The layer's score row for `step`, L scores (L: the tokens every kv head of the layer holds),
  /// copied into `scores` (which holds at least L). On the first call for step's (seq, layer,
  /// seq_len) the row is set to L zeros and `compute(row)` fills it; later calls of that step
  /// reuse it. Errors: kvb::Error when a kv head of the layer holds other than L tokens, naming
  /// `policy` (its registry name) and `method` (the paper's name): one keep-set per layer needs
  /// equal lengths.
  template <class Compute>
  void score(const LayerStep& step, int32_t L, std::string_view policy, std::string_view method,
             std::vector<float>& scores, Compute&& compute) {
    const auto key = std::make_tuple(step.seq, step.layer, step.seq_len);
    if (key != key_) {
      for (int hk = 0; hk < step.num_kv_heads; ++hk)
        if (step.cache->length(step.seq, step.layer, hk) != L)
          fail("policy '{}': kv heads of layer {} hold different lengths ({} vs {}); {} keeps one keep-set per layer",
               policy, step.layer, step.cache->length(step.seq, step.layer, hk), L, method);
      row_.assign(L, 0.0f);
      compute(row_);
      key_ = key;
    }
    std::copy(row_.begin(), row_.end(), scores.begin());
  }

  /// Drops the row when it belongs to `seq` (a reused sequence id must not see stale scores).
  void forget(SeqId seq) {
    if (std::get<0>(key_) == seq) key_ = {-1, -1, -1};
  }

 private:
  std::tuple<SeqId, int, int64_t> key_{-1, -1, -1};
  std::vector<float> row_;
};

}  // namespace kvb
