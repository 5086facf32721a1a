// The kvpress migration table (engine/policies/kvpress_table.h) against three independent things:
// the press classes kvpress 0.5.5 exports (listed here from the package), the policy registry (each
// spec builds), and the kvpress goldens (each golden's spec resolves to the table's parameters).
// docs/policies.md's table must list the same rows.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "engine/policies/kvpress_table.h"
#include "engine/policies/policy.h"
#include "engine/policies/resolved.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

/// Replaces the table's placeholders (r, s, t, DIR, <P>) with values a policy accepts.
std::string concrete(std::string spec) {
  const std::map<std::string, std::string> subs = {
      {"pattern=DIR", "pattern=" + test::fixture("policies/duo_pattern_tiny")},
      {"scorer=DIR", "scorer=" + test::fixture("policies/kvzap_mlp_tiny-llama3")},
      {"filters=FILE", "filters=" + test::fixture("policies/qfilter_smollm2_random.safetensors")},
      // fastkvzip reads its gates' tensors at its first layer step: any weights file builds it.
      {"gates=FILE", "gates=" + test::fixture("policies/qfilter_smollm2_random.safetensors")},
      {"curve=FILE", "curve=" + test::fixture("policies/lukv_curve_smollm2_random.npy")},
      {"adapter=DIR", "adapter=" + test::fixture("policies/restorekv_smollm2_random")},
      {"sparsity=s", "sparsity=0.25"},
      {"seed=s", "seed=3"},
      {"threshold=t", "threshold=-2"}};
  for (const auto& [from, to] : subs)
    for (size_t at; (at = spec.find(from)) != std::string::npos;) spec.replace(at, from.size(), to);
  return spec;
}

std::string golden_concrete(std::string spec) {
  for (const auto& [from, to] :
       std::map<std::string, std::string>{{"{duo_pattern}", test::fixture("policies/duo_pattern_tiny")},
                                          {"{scorer}", test::fixture("policies/kvzap_mlp_tiny-llama3")},
                                          {"{qfilters}", test::fixture("policies/qfilter_smollm2_random.safetensors")},
                                          {"{lukv_curve}", test::fixture("policies/lukv_curve_smollm2_random.npy")},
                                          {"{restorekv_adapter}", test::fixture("policies/restorekv_smollm2_random")}})
    for (size_t at; (at = spec.find(from)) != std::string::npos;) spec.replace(at, from.size(), to);
  return spec;
}

/// The resolved parameters of `spec` (ResolvedPolicy::params): at budget 100 when the built policy
/// takes a budget, else at none.
nlohmann::json resolved(const std::string& spec) {
  const ResolvedPolicy rp = [&] {
    try {
      return ResolvedPolicy::resolve(spec, 100);
    } catch (const Error&) {  // a policy that refuses a budget
      return ResolvedPolicy::resolve(spec, 0);
    }
  }();
  return rp.params();
}

/// Every golden case a selector ("<file>:<press>" or "<file>:<name prefix>*") picks.
std::vector<nlohmann::json> golden_cases(const std::string& golden) {
  const size_t colon = golden.find(':');
  const std::string file = golden.substr(0, colon), sel = golden.substr(colon + 1);
  std::ifstream in(test::fixture("policies/" + file));
  EXPECT_TRUE(in.good()) << file;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<nlohmann::json> all;
  if (j.contains("cases"))
    for (const auto& c : j["cases"]) all.push_back(c);
  if (j.contains("models"))
    for (const auto& m : j["models"])
      for (const auto& c : m["cases"]) all.push_back(c);
  std::vector<nlohmann::json> out;
  for (const auto& c : all) {
    const bool prefix = !sel.empty() && sel.back() == '*';
    const std::string stem = prefix ? sel.substr(0, sel.size() - 1) : sel;
    if (prefix ? c.value("name", "").rfind(stem, 0) == 0 : c.value("press", "") == sel) out.push_back(c);
  }
  return out;
}

TEST(KvpressTable, EveryPressKvpressExportsHasOneRow) {
  // kvpress 0.5.5's `*Press` classes (dir(kvpress)), but BasePress, ScorerPress and
  // ExpectedAttentionStatsPress (a statistics helper of ExpectedAttentionPress); DMSPress appears
  // once per press it wraps in kvbench.
  const std::set<std::string> kvpress = {"AdaKVPress",
                                         "BlockPress",
                                         "CAMPress",
                                         "CURPress",
                                         "CapPress",
                                         "ChunkKVPress",
                                         "ChunkPress",
                                         "CompactorPress",
                                         "ComposedPress",
                                         "CompressionRatioDecodingPress",
                                         "CriticalAdaKVPress",
                                         "CriticalKVPress",
                                         "DMSPress",
                                         "DecodingPress",
                                         "DuoAttentionPress",
                                         "EntropyGatedChunkKVPress",
                                         "ExpectedAttentionPress",
                                         "FastKVzipPress",
                                         "FinchPress",
                                         "KVComposePress",
                                         "KVgradPress",
                                         "KVzapPress",
                                         "KVzipPress",
                                         "KeyDiffPress",
                                         "KeyRerotationPress",
                                         "KnormPress",
                                         "LUKVPress",
                                         "LagKVPress",
                                         "LeverageScorePress",
                                         "MergingPress",
                                         "NonCausalAttnPress",
                                         "ObservedAttentionPress",
                                         "PerLayerCompressionPress",
                                         "PrefillDecodingPress",
                                         "PyramidKVPress",
                                         "QFilterPress",
                                         "RandomPress",
                                         "RestoreKVPress",
                                         "SimLayerKVPress",
                                         "SnapKVPress",
                                         "StreamingLLMPress",
                                         "TOVAPress",
                                         "ThinKPress"};
  std::set<std::string> rows, seen_classes;
  for (const auto& r : kvpress_table()) {
    EXPECT_TRUE(rows.insert(r.press).second) << "listed twice: " << r.press;
    const std::string cls = r.press.substr(0, r.press.find('('));
    const std::string inner =
        r.press.find('(') == std::string::npos ? "" : r.press.substr(cls.size() + 1, r.press.size() - cls.size() - 2);
    EXPECT_TRUE(kvpress.count(cls)) << r.press << ": not a kvpress 0.5.5 press";
    if (!inner.empty()) EXPECT_TRUE(kvpress.count(inner)) << r.press;
    seen_classes.insert(cls == "DMSPress" ? inner : cls);
    if (cls == "DMSPress") seen_classes.insert("DMSPress");
  }
  for (const auto& p : kvpress) EXPECT_TRUE(seen_classes.count(p)) << p << " has no row";
}

TEST(KvpressTable, EverySpecBuildsAndEveryRowSaysWhatItIs) {
  for (const auto& r : kvpress_table()) {
    SCOPED_TRACE(r.press);
    const bool has_spec =
        r.status == KvpressStatus::kGolden || r.status == KvpressStatus::kChecked || r.status == KvpressStatus::kRule;
    if (has_spec) {
      ASSERT_FALSE(r.spec.empty());
      EXPECT_NO_THROW(resolved(concrete(r.spec)));
    }
    if (r.status == KvpressStatus::kMissing || r.status == KvpressStatus::kExcused) EXPECT_TRUE(r.spec.empty());
    if (r.status == KvpressStatus::kExcused || r.status == KvpressStatus::kChecked || r.status == KvpressStatus::kRule)
      EXPECT_FALSE(r.note.empty()) << "say why";
    EXPECT_EQ(r.status == KvpressStatus::kGolden, !r.golden.empty());
    EXPECT_FALSE(r.args.empty());
  }
}

TEST(KvpressTable, EachGoldenSpecResolvesToTheTableParameters) {
  int compared = 0;
  for (const auto& r : kvpress_table()) {
    if (r.status != KvpressStatus::kGolden) continue;
    SCOPED_TRACE(r.press);
    std::set<std::string> varied;
    std::stringstream vs(r.varied);
    for (std::string v; std::getline(vs, v, ',');) varied.insert(v);
    const nlohmann::json want = resolved(concrete(r.spec));
    const auto cases = golden_cases(r.golden);
    ASSERT_FALSE(cases.empty()) << r.golden << " selects no golden case";
    for (const auto& c : cases) {
      const std::string gspec = golden_concrete(c.at("spec").get<std::string>());
      EXPECT_EQ(PolicySpec::parse(gspec).name, PolicySpec::parse(concrete(r.spec)).name);
      const nlohmann::json got = resolved(gspec);
      for (const auto& [k, v] : want.items())
        if (!varied.count(k) && k != "budget" && k != "budget_kind" && k != "ratio") {
          EXPECT_EQ(got.value(k, nlohmann::json()), v) << k << " in golden " << gspec;
          ++compared;
        }
    }
  }
  EXPECT_GT(compared, 50);
}

TEST(KvpressTable, DocsListTheSameRows) {
  std::ifstream in(test::source_path("docs/policies.md"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t at = doc.find("## Migrating from kvpress");
  ASSERT_NE(at, std::string::npos);
  std::map<std::string, std::string> docs;  // press -> "spec | status"
  std::istringstream lines(doc.substr(at));
  std::string heading;
  std::getline(lines, heading);  // the section's own heading
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("## ", 0) == 0) break;  // the section ends at the next heading
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ls(line.substr(1));
    for (std::string cell; std::getline(ls, cell, '|');) {
      while (!cell.empty() && cell.front() == ' ') cell.erase(0, 1);
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') cell = cell.substr(1, cell.size() - 2);
      cells.push_back(cell);
    }
    ASSERT_GE(cells.size(), 3u) << line;
    docs[cells[0]] = cells[1] + " | " + cells[2];
  }
  EXPECT_EQ(docs.size(), kvpress_table().size());
  for (const auto& r : kvpress_table())
    EXPECT_EQ(docs[r.press], (r.spec.empty() ? "-" : r.spec) + " | " + kvpress_status_name(r.status)) << r.press;
}

/// The message make_policy throws for `spec` at `budget`, "" when it builds.
std::string build_error(const std::string& spec, int64_t budget) {
  try {
    (void)make_policy(PolicySpec::parse(spec, budget));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// kvpress's wrappers as spec options (docs/policies.md, "kvpress's wrappers as spec options"):
// what each refuses, naming the parameter. Their keep-sets are pinned by tests/kvpress.
TEST(KvpressWrappers, OptionsRefuseWhatKvpressDoesNotDo) {
  EXPECT_EQ(build_error("knorm:budget_kind=ratio,decode=false,press_chunk=64", 0), "");
  EXPECT_NE(build_error("knorm:decode=false,press_chunk=64", 100).find("press_chunk"), std::string::npos);
  EXPECT_NE(build_error("knorm:budget_kind=ratio,press_chunk=64", 0).find("decode=false"), std::string::npos);
  EXPECT_EQ(build_error("snapkv:budget_kind=ratio,layer_ratios=0.5/0.25/1", 0), "");
  EXPECT_NE(build_error("snapkv:budget_kind=ratio,layer_ratios=0.5/0", 0).find("layer_ratios"), std::string::npos);
  EXPECT_NE(build_error("snapkv:budget_kind=ratio,layer_ratios=0.5/x", 0).find("layer_ratios"), std::string::npos);
  EXPECT_NE(build_error("snapkv:layer_ratios=0.5", 100).find("layer_ratios"), std::string::npos);
  EXPECT_NE(build_error("snapkv:budget_kind=ratio,ratio=0.5,layer_ratios=0.5", 0).find("layer_ratios"),
            std::string::npos);
  EXPECT_EQ(build_error("keydiff:window=0,decode=false,press_block=128", 100), "");
  EXPECT_NE(build_error("keydiff:decode=false,press_block=128", 100).find("press_block"), std::string::npos);
  EXPECT_EQ(build_error("snapkv:window=64,decode=false,then=knorm,then_ratio=0.5", 100), "");
  EXPECT_NE(build_error("snapkv:window=64,then_ratio=0.5", 100).find("then_ratio"), std::string::npos);
  EXPECT_NE(build_error("snapkv:window=64,then=knorm,then_ratio=1.5", 100).find("then_ratio"), std::string::npos);
  EXPECT_NE(build_error("snapkv:window=64,then=full", 100).find("then"), std::string::npos);
  EXPECT_NE(build_error("snapkv:window=64,then=nosuch", 100).find("nosuch"), std::string::npos);
}

TEST(KvpressWrappers, ComposedPolicyReportsBothPressesAndMergesNeeds) {
  const ResolvedPolicy rp = ResolvedPolicy::resolve("snapkv:window=64,decode=false,then=keydiff,then_ratio=0.25", 100);
  EXPECT_EQ(rp.params().value("then", ""), "keydiff");
  EXPECT_DOUBLE_EQ(rp.params().value("then_ratio", 0.0), 0.25);
  EXPECT_TRUE(rp.params().contains("window"));  // the first policy's own parameters
  EXPECT_EQ(rp.built().name(), "snapkv");
  EXPECT_EQ(rp.built().needs().window_queries, 64);  // snapkv's
  EXPECT_TRUE(rp.built().needs().host_kv);           // keydiff's
  EXPECT_TRUE(rp.uses_budget());
}

}  // namespace
}  // namespace kvb
