// kvb::ExpectedAttentionPolicy — Expected Attention scoring on the shared schedule; `lukv`
// derives from it. See expected_attention.cpp for the sources and the choices.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/policies/params.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/scoring.h"

namespace kvb {

/// The pre-RoPE query sums (scoring::QueryMoments) of every (sequence, layer): what
/// `expected_attention`, `lukv` and `cap` estimate their future queries from.
class SeqQueryMoments {
 public:
  /// Adds step's new queries at positions ≥ first_pos to (step.seq, step.layer) (see
  /// scoring::QueryMoments::add; throws kvb::Error naming `policy` without pre-RoPE queries).
  void add(const LayerStep& step, int64_t first_pos, bool second, const std::string& policy) {
    auto& layers = moments_[step.seq];
    if (layers.empty()) layers.resize(step.num_layers);
    layers[step.layer].add(step, first_pos, second, policy.c_str());
  }
  /// The sums of (seq, layer); throws std::out_of_range when none were added.
  const scoring::QueryMoments& at(SeqId seq, int layer) const { return moments_.at(seq).at(layer); }
  /// Forgets `seq` (a reused sequence id starts afresh).
  void erase(SeqId seq) { moments_.erase(seq); }

 private:
  std::map<SeqId, std::vector<scoring::QueryMoments>> moments_;
};

/// Expected Attention (arXiv 2510.00636 §3; kvpress 0.5.5 ExpectedAttentionPress,
/// kvpress/presses/expected_attention_press.py): the attention future queries are expected to pay
/// each key, from running statistics of the pre-RoPE queries, times the value norm.
class ExpectedAttentionPolicy : public ScheduledPolicy {
 public:
  explicit ExpectedAttentionPolicy(PolicyParams p) : ExpectedAttentionPolicy("expected_attention", std::move(p)) {}
  /// A policy scoring with Expected Attention under its own registry `name` (lukv).
  ExpectedAttentionPolicy(std::string name, PolicyParams p) : ScheduledPolicy(std::move(name), std::move(p)) {
    n_future_ = params_.get_int_in("n_future", 1, 1 << 24);
    covariance_ = params_.get_bool("covariance");
    vnorm_ = params_.get_bool("vnorm");
    epsilon_ = params_.get_double("epsilon");  // finite: PolicyParams refuses NaN and inf
  }
  // Keys and value norms are read from the cache.
  PolicyNeeds needs() const override { return {.queries_pre_rope = true, .host_kv = true}; }
  void on_sequence_end(SeqId seq) override { moments_.erase(seq); }

 protected:
  void observe(LayerStep& step) override { moments_.add(step, sinks_, /*second=*/true, name()); }

  /// Expected Attention's score of the L tokens of head h (see expected_attention.cpp); the
  /// sinks' entries are left as they are (they are protected).
  void score(LayerStep& step, int h, int32_t L, std::vector<float>& scores) override;

 private:
  int64_t n_future_ = 512;
  bool covariance_ = true, vnorm_ = true;
  double epsilon_ = 0;
  SeqQueryMoments moments_;
};

}  // namespace kvb
