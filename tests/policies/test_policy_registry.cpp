// What a policy's registry entry declares for tests (PolicyInfo::tests, engine/policies/policy.h)
// checked against the policy itself, for every registered policy: the registry-wide tests (here,
// test_policy_protocol, test_policy_behaviour, test_policy_engine, tests/engine/test_kv_cache)
// choose budgets and parameters from these fields alone, so a wrong declaration would silently
// weaken them. A new policy is covered without editing any of them (docs/policies.md#adding-a-policy).
// The last tests check the procedure of that guide: every registered policy (a KVB_POLICY entry in
// its own file) has its catalog entry, its section and table row in docs/policies.md and a test
// that names it, and neither the catalog nor the documentation names a policy that is not
// registered.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "engine/policies/catalog.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

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

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> registered_names() {
  std::set<std::string> names;
  for (const auto& info : policy_registry()) names.insert(info.name);
  return names;
}

std::string set_text(const std::set<std::string>& s) {
  std::string out;
  for (const auto& n : s) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The lines of docs/policies.md from the line `start` (exclusive) to the next line starting with
// `stop` (exclusive); empty when `start` is missing.
std::vector<std::string> doc_lines(const std::string& start, const std::string& stop) {
  std::istringstream in(slurp(test::source_path("docs/policies.md")));
  std::vector<std::string> out;
  bool on = false;
  for (std::string line; std::getline(in, line);) {
    if (!on) {
      on = line == start;
      continue;
    }
    if (line.rfind(stop, 0) == 0) break;
    out.push_back(line);
  }
  return out;
}

// Each registered policy has a `### \`name\`` section in docs/policies.md, and every such section
// names a registered policy (a renamed or removed policy leaves no stale section).
TEST(PolicyRegistry, EveryPolicyHasExactlyOneDocsSection) {
  const std::set<std::string> names = registered_names();
  std::istringstream in(slurp(test::source_path("docs/policies.md")));
  const std::regex heading("^### `([a-z0-9_]+)`.*");
  std::set<std::string> documented;
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_match(line, m, heading)) continue;
    EXPECT_TRUE(documented.insert(m[1]).second) << "two sections for " << m[1];
    EXPECT_TRUE(names.count(m[1])) << "docs/policies.md documents '" << m[1] << "', which is not registered";
  }
  for (const auto& n : names) EXPECT_TRUE(documented.count(n)) << "docs/policies.md has no ### `" << n << "` section";
}

// The policy table at the top of docs/policies.md, "The policies" (README.md links to it), lists
// exactly the registered policies, each once.
TEST(PolicyRegistry, ThePolicyTableListsExactlyTheRegisteredPolicies) {
  const std::vector<std::string> lines = doc_lines("## The policies", "### ");
  ASSERT_FALSE(lines.empty()) << "docs/policies.md has no '## The policies' section";
  const std::regex name("`([a-z0-9_]+)`");
  std::set<std::string> listed;
  for (const auto& line : lines) {
    if (line.rfind("| ", 0) != 0) continue;
    const size_t cell = line.find(" | ");  // the policies column: after the kind
    if (cell == std::string::npos) continue;
    const std::string rest = line.substr(cell);
    for (auto it = std::sregex_iterator(rest.begin(), rest.end(), name); it != std::sregex_iterator(); ++it)
      listed.insert((*it)[1]);
  }
  EXPECT_EQ(set_text(listed), set_text(registered_names()))
      << "the table under '## The policies' in docs/policies.md must list every registered policy";
}

// Each registered policy is named by at least one test of its own: a string literal starting with
// its name ("name" or "name:params") in some tests/**/*.cpp other than this file.
TEST(PolicyRegistry, EveryPolicyIsNamedByATest) {
  std::string corpus;
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::source_path("tests"))) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    if (e.path().filename() == "test_policy_registry.cpp") continue;
    corpus += slurp(e.path());
  }
  ASSERT_FALSE(corpus.empty());
  for (const auto& n : registered_names()) {
    const bool named =
        corpus.find("\"" + n + "\"") != std::string::npos || corpus.find("\"" + n + ":") != std::string::npos;
    EXPECT_TRUE(named) << "no test in tests/ names policy '" << n << "' (\"" << n << "\" or \"" << n << ":...\")";
  }
}

// The guide's claim that the registry needs no list: every policy file's KVB_POLICY line is what
// registers it, and each engine/policies/*.cpp with such a line is registered under that name.
TEST(PolicyRegistry, EveryKvbPolicyLineIsRegistered) {
  const std::set<std::string> names = registered_names();
  const std::regex line_re("(^|\n)KVB_POLICY\\(([a-z0-9_]+)\\)");
  std::set<std::string> declared;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("engine/policies"))) {
    if (e.path().extension() != ".cpp") continue;
    const std::string text = slurp(e.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line_re); it != std::sregex_iterator(); ++it)
      declared.insert((*it)[2]);
  }
  EXPECT_EQ(set_text(declared), set_text(names));
}

// The policy catalog (engine/policies/catalog.json) describes exactly the registered policies:
// an entry no policy registers, or a policy without one, fails here. Each registry entry's
// description, parameter table and learned-weights naming are its catalog entry's.
TEST(PolicyRegistry, TheCatalogDescribesExactlyTheRegisteredPolicies) {
  const std::vector<std::string> catalog = policy_catalog_names();
  EXPECT_EQ(set_text(std::set<std::string>(catalog.begin(), catalog.end())), set_text(registered_names()));
  for (const auto& info : policy_registry()) {
    SCOPED_TRACE(info.name);
    const PolicyCatalogEntry& c = policy_catalog_entry(info.name);
    EXPECT_EQ(info.description, c.description);
    EXPECT_EQ(info.learned.has_value(), c.learned.has_value());
    // The learned weights' two parameters come first (weights_params), then the catalog's table.
    const size_t skip = c.learned ? 2 : 0;
    ASSERT_EQ(info.params.size(), c.params.size() + skip);
    for (size_t i = 0; i < c.params.size(); ++i) {
      EXPECT_EQ(info.params[i + skip].key, c.params[i].key);
      EXPECT_EQ(info.params[i + skip].default_value, c.params[i].default_value);
      EXPECT_EQ(info.params[i + skip].help, c.params[i].help);
    }
  }
  try {
    policy_catalog_entry("nosuch");
    ADD_FAILURE() << "no error for a name the catalog lacks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no entry 'nosuch'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvb
