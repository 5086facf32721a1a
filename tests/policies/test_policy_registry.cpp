// What a policy's registry entry declares for tests (PolicyInfo::tests, engine/policies/policy.h)
// checked against the policy itself, for every registered policy: the registry-wide tests (here,
// test_policy_protocol, test_policy_behaviour, test_policy_engine, tests/engine/test_kv_cache)
// choose budgets and parameters from these fields alone, so a wrong declaration would silently
// weaken them. A new policy is covered without editing any of them (docs/policies.md#adding-a-policy).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "engine/policies/policy.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

std::string build_error(const PolicySpec& s) {
  try {
    make_policy(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PolicyRegistry, NamesAreUniqueAndEveryEntryIsComplete) {
  std::set<std::string> names;
  for (const auto& info : policy_registry()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name << " registered twice";
    EXPECT_FALSE(info.description.empty()) << info.name;
    EXPECT_TRUE(info.make) << info.name;
    EXPECT_GE(info.tests.min_budget, 0) << info.name;
  }
  EXPECT_GE(names.size(), 23u);
}

// min_budget is exact: the policy builds at it and refuses one token less, naming the budget.
TEST(PolicyRegistry, MinBudgetIsTheSmallestAcceptedBudget) {
  for (const auto& info : policy_registry()) {
    SCOPED_TRACE(info.name);
    const int64_t m = info.tests.min_budget;
    EXPECT_EQ(build_error(info.test_spec(m)), "") << "at min_budget " << m;
    if (m == 0) continue;  // takes no budget
    const std::string err = build_error(info.test_spec(m - 1));
    EXPECT_NE(err.find("budget"), std::string::npos) << "budget " << m - 1 << " was accepted or gave: " << err;
    EXPECT_EQ(build_error(info.test_spec(m + 1000)), "");
  }
}

// needs_weights matches the entry's LearnedWeightsInfo, and then the policy refuses to build
// without the stand-in `params` name, naming the parameter that takes the file and the one that
// asks for RANDOM test weights.
TEST(PolicyRegistry, NeedsWeightsIsTrueExactlyWhenThePolicyRefusesToRunWithoutThem) {
  int learned = 0;
  for (const auto& info : policy_registry()) {
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.tests.needs_weights, info.learned.has_value());
    const PolicySpec plain = PolicySpec::parse(info.name, info.test_budget(1024));
    if (!info.tests.needs_weights) {
      EXPECT_EQ(build_error(plain), "") << "a policy without weights must build from its defaults";
      continue;
    }
    ++learned;
    EXPECT_NE(info.tests.params.find(info.learned->random_param + "="), std::string::npos)
        << "params must ask for the random stand-in: " << info.tests.params;
    const std::string err = build_error(plain);
    EXPECT_NE(err.find(info.learned->file_param + "="), std::string::npos) << err;
    EXPECT_NE(err.find(info.learned->random_param + "="), std::string::npos) << err;
  }
  EXPECT_GE(learned, 6);  // trimkv, wgkv, foresightkv, duoattention, locret, seerattn_r
}

// evicts == false: the policy declares no `compress` schedule (it never compacts the cache);
// every evicting policy declares one. The engine test checks the evictions themselves.
TEST(PolicyRegistry, EvictsMatchesTheCompressParameter) {
  int kept_whole = 0;
  for (const auto& info : policy_registry()) {
    SCOPED_TRACE(info.name);
    bool has_compress = false;
    for (const auto& p : info.params) has_compress |= p.key == "compress";
    EXPECT_EQ(has_compress, info.tests.evicts);
    kept_whole += !info.tests.evicts;
  }
  EXPECT_EQ(kept_whole, 3);  // full, quest, seerattn_r
}

TEST(PolicyRegistry, TestSpecAppendsParamsAndRejectsARepeatedKey) {
  for (const auto& info : policy_registry()) {
    if (info.tests.params.empty()) continue;
    const PolicySpec s = info.test_spec(7, "zz_extra=1");
    EXPECT_EQ(s.name, info.name);
    EXPECT_EQ(s.budget, 7);
    EXPECT_EQ(s.params.at("zz_extra"), "1");
    const std::string first_key = info.tests.params.substr(0, info.tests.params.find('='));
    EXPECT_TRUE(s.params.count(first_key)) << info.name;
    EXPECT_THROW(info.test_spec(7, first_key + "=2"), Error) << info.name;
  }
}

}  // namespace
}  // namespace kvb
