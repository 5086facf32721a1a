// kvb::KVzipPolicy — KVzip's context-reconstruction scoring passes and its cut over the whole
// cache; `restorekv` (RestoreKV) derives from it. See kvzip.cpp for the sources and the
// choices.
#pragma once

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/policy.h"

namespace kvb {

/// KVzip (kvzip.cpp's file comment): scoring passes that reconstruct the prompt, each cached
/// token scored by the most attention the passes' queries pay it, then one cut over every
/// (layer, kv head, token) of the prompt (or one per layer).
class KVzipPolicy : public ParamPolicy {
 public:
  /// `kvzip` itself (the registry entry's constructor).
  explicit KVzipPolicy(PolicyParams p) : KVzipPolicy("kvzip", std::move(p)) {}
  /// A policy built on KVzip's passes and cut under its own registry `name` (restorekv). Binds
  /// kvzip's parameters (ratio, layerwise, sinks, chunk_size, plus_norm); throws kvb::Error for a
  /// bad value or compress= other than prompt_end.
  KVzipPolicy(std::string name, PolicyParams p);

  /// Pre-RoPE queries, host K/V and scoring passes (plus_norm: also the layer input and W_o).
  PolicyNeeds needs() const override;
  /// The prompt plus one reconstruction pass: every head holds context + pass tokens at the peak.
  KvFootprint kv_footprint(const FootprintQuery& q) const override;
  /// Forgets the sequence's scores.
  void on_sequence_end(SeqId seq) override;
  /// One pass per chunk of the context (see kvzip.cpp), when the cache is still whole.
  std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& rq) override;
  /// In a scoring pass: the chunk's tokens' scores at this layer (see kvzip.cpp).
  void on_layer_step(LayerStep& step) override;
  /// After the passes: the sinks above all, then one cut over every layer (or one per layer) of
  /// the prompt's P positions; the tokens a restore pass appended after it (StepEnd::seq_len − P
  /// of them, which must be restored_rows()) are all kept.
  void on_scoring_passes_end(StepEnd& se) override;
  /// Nothing: the cut is on_scoring_passes_end's.
  void on_step_end(StepEnd&) override {}

 protected:
  /// The fraction of the prompt's (layer, kv head, token) entries the cut evicts for a P-token
  /// prompt: kvpress's compression_ratio, 1 − ratio for kvzip.
  virtual double pruned_fraction(int64_t P) const { return 1.0 - ratio_; }
  /// The rows a restore pass appends after the prompt before the cut (0 for kvzip).
  virtual int64_t restored_rows() const { return 0; }

  double ratio_ = 1.0;
  bool layerwise_ = false, plus_norm_ = false;
  int64_t sinks_ = 4, chunk_ = 2048;

 private:
  /// One sequence's passes: its prompt length, the chunks [s, e) in pass order, and the scores
  /// [layer][kv head][position] f32.
  struct Seq {
    int64_t P = 0;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    std::vector<float> scores;
  };

  std::map<SeqId, Seq> seqs_;
  std::mutex mu_;
};

}  // namespace kvb
