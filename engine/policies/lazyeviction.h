// `lazyeviction`: LazyEviction's recurrence-interval tracking and lagged eviction (declared here so
// that its golden test can read the per-head clocks; engine/policies/lazyeviction.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/policy.h"

namespace kvb {

/// LazyEviction (arXiv 2506.15969 §3; reference code WeianMao/triattention @ e7a0eb18,
/// LazyEviction/model/kv_utils.py Window_LAZYKVCluster.update_kv_in_decoding and
/// model/temp_cacheobs.py TempCache.record_recurrence). Each tracked head holds a set of tokens,
/// and per token the decode step `last` at which its attention last reached `alpha` and its
/// maximum recurrence interval `mri` (exact int64 clocks). Every `buffer` (= W) decode steps, a
/// tracked head holding more than C = budget tokens keeps its W newest tokens and the C − W
/// best-scoring older ones. `gqa=expand` (the reference) tracks and selects per QUERY head; the
/// kv head's cache holds the union of its group's sets and each query head reads only its own set
/// (Policy::select_reads). `gqa=max` (ours) tracks one set per kv head, a token being hit when any
/// query head of the group gives it attention >= alpha. Throws kvb::Error (exit 2) for a missing
/// budget or a budget below `buffer`.
class LazyEvictionPolicy : public ParamPolicy {
 public:
  /// One tracked token: absolute position, step of its last hit, maximum recurrence interval.
  struct Entry {
    int32_t pos = 0;
    int64_t last = 0;
    int64_t mri = 0;
  };
  explicit LazyEvictionPolicy(PolicyParams p);
  PolicyNeeds needs() const override;
  void on_layer_step(LayerStep& step) override;
  void select_reads(ReadStep& step) override;
  void on_sequence_end(SeqId seq) override { seqs_.erase(seq); }
  KvFootprint kv_footprint(const FootprintQuery& q) const override;

  /// The tracked set of head `head` (a query head under gqa=expand, a kv head under gqa=max) of
  /// (seq, layer), in increasing position order; empty before the first decode step of a prompt.
  /// For tests (the golden compares it after every step).
  const std::vector<Entry>& tracked(SeqId seq, int layer, int head) const;
  /// LazyEviction's importance of a token `delta` = t − last steps after its last hit, with
  /// maximum recurrence interval `mri`, in double: 2/(1+exp(1 + delta/(mri + 1e-5))) plus
  /// 2/(1+exp(mri − 1)) when mri > 0 (kv_utils.py; the reference computes it in the model dtype).
  static double importance(int64_t delta, int64_t mri);

 private:
  struct Seq {
    int64_t prompt_end = 0;                              ///< seq_len at the end of the last prompt step
    std::vector<std::vector<std::vector<Entry>>> heads;  ///< [layer][tracked head] -> entries
  };
  int64_t budget_, window_;
  double alpha_;
  bool expand_;
  std::map<SeqId, Seq> seqs_;
};

}  // namespace kvb
