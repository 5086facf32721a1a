// Test helper of the ResolvedPolicy tests (test_resolved_policy.cpp, slow/): a policy run
// teacher-forced on stories260K at a budget, and the check that it behaves differently at two
// budgets exactly when ResolvedPolicy::uses_budget() says it takes one.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "engine/policies/resolved.h"
#include "tests/policies/harness.h"

namespace kvb::test {

/// Held positions after every step, then the logits, of one teacher-forced run.
struct BudgetTrace {
  std::vector<HeldPositions> held;
  std::vector<float> logits;
  bool operator==(const BudgetTrace& o) const { return held == o.held && logits == o.logits; }
};

/// `rp` run at `budget` on stories260K: a 240-token prompt (chunks of 64), 4 forced decode tokens.
inline BudgetTrace run_at_budget(const ResolvedPolicy& rp, int64_t budget) {
  std::vector<int32_t> prompt(240), forced(4);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + (i * 37) % 500);
  for (size_t i = 0; i < forced.size(); ++i) forced[i] = static_cast<int32_t>(3 + (i * 11) % 400);
  EngineOptions eo;
  eo.prefill_chunk = 64;
  Engine e(stories(), eo, rp.build_at(budget));
  BudgetTrace t;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    HeldPositions h(kv.config().num_layers, std::vector<std::vector<int32_t>>(kv.config().num_kv_heads));
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int k = 0; k < kv.config().num_kv_heads; ++k)
        for (int32_t i = 0; i < kv.length(s, l, k); ++i) h[l][k].push_back(kv.position(s, l, k, i));
    t.held.push_back(std::move(h));
  };
  t.logits = e.score(prompt, forced);
  return t;
}

/// Checks that `rp` behaves differently at budgets b1 and b2 exactly when it says it uses one.
inline void expect_uses_budget_agrees(const ResolvedPolicy& rp, int64_t b1, int64_t b2) {
  const bool differs = !(run_at_budget(rp, b1) == run_at_budget(rp, b2));
  EXPECT_EQ(rp.uses_budget(), differs) << rp.text() << " at budgets " << b1 << " and " << b2;
}

}  // namespace kvb::test
