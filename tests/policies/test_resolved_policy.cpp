// ResolvedPolicy (engine/policies/resolved.h): ratio and threshold budgets take none (they run
// alike at two budgets, teacher-forced on stories260K), a token budget takes one, the label, the
// resolved parameters and the errors. The same check over every registered policy is
// tests/policies/slow/test_resolved_policy_registry.cpp (label `slow`).
#include <gtest/gtest.h>

#include "engine/policies/resolved.h"
#include "tests/policies/resolved_trace.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

TEST(ResolvedPolicy, RatioAndThresholdBudgetsTakeNone) {
  KVB_REQUIRE_STORIES();
  for (const char* spec : {"streamingllm:budget_kind=ratio,ratio=0.5,buffer=8", "snapkv:budget_kind=ratio,ratio=0.3",
                           "knorm:budget_kind=threshold,threshold=-2,window=5,buffer=3"}) {
    const ResolvedPolicy rp = ResolvedPolicy::resolve(spec, 64);
    EXPECT_FALSE(rp.uses_budget()) << spec;
    EXPECT_EQ(rp.budgets_of({64, 128}), std::vector<int64_t>{0}) << spec;
    test::expect_uses_budget_agrees(rp, 64, 128);
  }
  const ResolvedPolicy tokens = ResolvedPolicy::resolve("snapkv", 64);
  EXPECT_TRUE(tokens.uses_budget());
  EXPECT_EQ(tokens.budgets_of({64, 128}), (std::vector<int64_t>{64, 128}));
  EXPECT_FALSE(ResolvedPolicy::resolve("full").uses_budget());
}

TEST(ResolvedPolicy, LabelParamsAndErrors) {
  const ResolvedPolicy rp = ResolvedPolicy::resolve("snapkv:window=5", 64);
  EXPECT_EQ(rp.label(), "snapkv:window=5");  // only what differs from the defaults
  EXPECT_FALSE(rp.params().contains("budget"));
  EXPECT_EQ(rp.params().at("window").get<int64_t>(), 5);
  EXPECT_EQ(ResolvedPolicy::resolve("snapkv", 64).label(), "snapkv");
  EXPECT_TRUE(test::error_has([] { ResolvedPolicy::resolve("snapkv:nope=1", 64); }, {"nope"}));
  EXPECT_TRUE(test::error_has([] { ResolvedPolicy::resolve("nosuch", 64); }, {"nosuch"}));
  EXPECT_TRUE(test::error_has([&] { rp.build_at(4); }, {"must exceed"}));
}

}  // namespace
}  // namespace kvb
