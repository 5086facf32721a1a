// kvb::WrappedPolicy — the base of the spec options that wrap a whole policy (make_composed,
// scheduled.cpp: then=think, merge=true, rerotate=true): every hook forwards to the inner policy;
// a subclass overrides the layer turn and adds its needs and parameters.
#pragma once

#include <memory>
#include <utility>

#include "engine/policies/policy.h"

namespace kvb {

/// A policy that behaves as `inner` in everything it does not override. name() is inner's (the
/// option changes what the policy does, not which policy it is).
class WrappedPolicy : public Policy {
 public:
  explicit WrappedPolicy(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  nlohmann::json resolved_params() const override { return inner_->resolved_params(); }
  PolicyNeeds needs() const override { return inner_->needs(); }
  void on_layer_step(LayerStep& step) override { inner_->on_layer_step(step); }
  void on_step_end(StepEnd& step) override { inner_->on_step_end(step); }
  std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& r) override {
    return inner_->scoring_passes(r);
  }
  void on_scoring_passes_end(StepEnd& step) override { inner_->on_scoring_passes_end(step); }
  RestorePass restore_pass(const ScoringPassRequest& r) override { return inner_->restore_pass(r); }
  void select_reads(ReadStep& step) override { inner_->select_reads(step); }
  void on_sequence_begin(SeqId seq, uint64_t seed) override { inner_->on_sequence_begin(seq, seed); }
  void on_sequence_end(SeqId seq) override { inner_->on_sequence_end(seq); }
  KvFootprint kv_footprint(const FootprintQuery& q) const override { return inner_->kv_footprint(q); }
  bool uses_budget() const override { return inner_->uses_budget(); }

 protected:
  /// inner's needs plus what a wrapper that reads and rewrites cached rows needs: host K/V,
  /// PolicyNeeds::writes_kv and the layer hook.
  PolicyNeeds writing_needs() const {
    PolicyNeeds n = inner_->needs();
    n.host_kv = n.writes_kv = n.layer_hook = true;
    return n;
  }
  std::unique_ptr<Policy> inner_;
};

}  // namespace kvb
