// `kvbench fidelity` (harness/fidelity.h): the KL / NLL / top-1 / greedy-agreement computations
// against float64 references from torch (tests/fixtures/policies/oracle_goldens.json "metrics",
// tools/gen_oracle_goldens.py), the whole pipeline on a tiny fixture model (full vs full: KL 0,
// 100 % agreement; a policy that keeps only a tiny budget: KL > 0, fewer bytes), the policy-list
// parser, and the CLI on stories260K (table + JSON; bad inputs give one clear error).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "engine/model/model.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/fidelity.h"
#include "tests/support/test_support.h"

namespace kvb::fidelity {
namespace {

const std::string kFixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures";
const std::string kStories = std::string(KVB_TEST_DATA_DIR) + "/models/stories260K-hf";

using ::kvb::test::error_of;

TEST(FidelityMetrics, MatchTorchFloat64) {
  const nlohmann::json g = parse_json_file(kFixtures + "/policies/oracle_goldens.json")["metrics"];
  size_t nonzero = 0;
  for (const auto& r : g["rows"]) {
    const std::vector<float> full = r["full"], pol = r["policy"];
    const int V = static_cast<int>(full.size());
    const double kl = r["kl"];
    EXPECT_NEAR(kl_from_logits(full.data(), pol.data(), V), kl, 1e-10 + 1e-9 * kl);
    EXPECT_NEAR(nll_from_logits(full.data(), V, r["target"]), r["nll_full"].get<double>(), 1e-9);
    EXPECT_NEAR(nll_from_logits(pol.data(), V, r["target"]), r["nll_policy"].get<double>(), 1e-9);
    EXPECT_EQ(argmax(full.data(), V), r["argmax_full"].get<int>());
    EXPECT_EQ(argmax(pol.data(), V), r["argmax_policy"].get<int>());
    nonzero += kl > 1e-3;
  }
  EXPECT_GT(nonzero, 4u);
  for (const auto& s : g["sequences"]) {
    const std::vector<int32_t> ref = s["ref"], got = s["got"];
    const Agreement a = greedy_agreement(ref, got);
    EXPECT_DOUBLE_EQ(a.prefix_pct, s["prefix_pct"].get<double>());
    EXPECT_DOUBLE_EQ(a.overall_pct, s["overall_pct"].get<double>());
  }
  // Rows of the teacher-forced comparison: sums over positions of the per-row values.
  const auto& r0 = g["rows"][0];
  const auto& r1 = g["rows"][5];
  std::vector<float> full = r0["full"], pol = r0["policy"];
  const std::vector<float> f1 = r1["full"], p1 = r1["policy"];
  full.insert(full.end(), f1.begin(), f1.end());
  pol.insert(pol.end(), p1.begin(), p1.end());
  const std::vector<int32_t> cont = {r0["target"].get<int32_t>(), r1["target"].get<int32_t>()};
  const TeacherForced t = compare_teacher_forced(full, pol, cont, static_cast<int>(f1.size()));
  EXPECT_EQ(t.positions, 2);
  EXPECT_NEAR(t.kl_sum, r0["kl"].get<double>() + r1["kl"].get<double>(), 1e-9);
  EXPECT_NEAR(t.nll_policy_sum, r0["nll_policy"].get<double>() + r1["nll_policy"].get<double>(), 1e-9);
  EXPECT_EQ(t.top1_agree, (r0["argmax_full"] == r0["argmax_policy"]) + (r1["argmax_full"] == r1["argmax_policy"]));
  EXPECT_NE(error_of([&] {
              const std::vector<int32_t> three = {1, 2, 3};
              compare_teacher_forced(full, pol, three, static_cast<int>(f1.size()));
            }).find("positions"),
            std::string::npos);
}

TEST(FidelityPipeline, FullIsExactAndATinyBudgetIsNot) {
  std::shared_ptr<const Model> model = Model::load_dir(kFixtures + "/models/tiny-llama3");
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42, 99, 5, 250, 3},
                                                     {1, 8, 9, 10, 11, 12, 13, 14, 15, 16, 30}};
  const auto refs = make_references(model, prompts, 40, {});
  ASSERT_EQ(refs.size(), 2u);
  ASSERT_EQ(refs[0].continuation.size(), 40u);
  // The row of policy `spec` at `budget`, which must evaluate without an error.
  const auto evaluated = [&](const std::string& spec, int64_t budget) {
    Row r = evaluate(model, refs, ResolvedPolicy::resolve(spec, budget), budget, {});
    EXPECT_TRUE(r.error.empty()) << spec << ": " << r.error;
    return r;
  };
  const Row full = evaluated("full", 0);
  EXPECT_EQ(full.positions, 80);
  EXPECT_EQ(full.kl_mean, 0.0);
  EXPECT_EQ(full.nll_delta, 0.0);
  EXPECT_EQ(full.top1_pct, 100.0);
  EXPECT_EQ(full.prefix_pct, 100.0);
  EXPECT_EQ(full.overall_pct, 100.0);
  EXPECT_DOUBLE_EQ(full.kv_bytes_ratio, 1.0);
  EXPECT_DOUBLE_EQ(full.kv_read_ratio, 1.0);
  EXPECT_GT(full.kv_read_step, 0.0);
  EXPECT_EQ(full.evictions, 0.0);

  const Row tiny = evaluated("streamingllm:sinks=1,window=2,buffer=1", 4);
  EXPECT_GT(tiny.kl_mean, 1e-4);
  EXPECT_NE(tiny.nll_delta, 0.0);
  EXPECT_LT(tiny.kv_bytes_ratio, 0.5);
  EXPECT_LT(tiny.kv_read_ratio, 0.5);  // an eviction policy reads what it holds
  EXPECT_GT(tiny.evictions, 30.0);
  EXPECT_LE(tiny.top1_pct, 100.0);

  // Quest holds the whole cache and reads only its selected pages (no dense layer in this
  // 2-layer model, then max(min_pages, 8 / 4) = 3 pages of 4 tokens per query head).
  const Row quest = evaluated("quest:page_size=4,dense_layers=0", 8);
  EXPECT_DOUBLE_EQ(quest.kv_bytes_ratio, 1.0);
  EXPECT_EQ(quest.evictions, 0.0);
  EXPECT_LT(quest.kv_read_ratio, 0.9);
  EXPECT_GT(quest.kv_read_ratio, 0.0);

  const Row orc = evaluated("oracle:buffer=2", 4);
  EXPECT_GT(orc.kl_mean, 0.0);
  EXPECT_GT(orc.evictions, 30.0);

  const Row bad = evaluate(model, refs, ResolvedPolicy::resolve("snapkv", 64), 4, {});  // refused at 4
  EXPECT_NE(bad.error.find("must exceed"), std::string::npos) << bad.error;
  const std::string md = markdown_table({full, tiny, bad});
  EXPECT_NE(md.find("| full | - | 100.0 | 100.0 | 100.0 | 0.0000 | +0.0000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("must exceed"), std::string::npos);
  EXPECT_EQ(to_json({full, bad})[1]["error"].get<std::string>(), bad.error);
}

TEST(FidelityPolicies, ListSplitsOnPolicyNamesOnly) {
  EXPECT_EQ(split_policy_list("full,snapkv:window=8,kernel=5,h2o,oracle:buffer=16"),
            (std::vector<std::string>{"full", "snapkv:window=8,kernel=5", "h2o", "oracle:buffer=16"}));
  EXPECT_NE(error_of([] { split_policy_list("window=8,full"); }).find("before any policy"), std::string::npos);
  EXPECT_NE(error_of([] { split_policy_list(""); }).find("no policy"), std::string::npos);
  EXPECT_NE(error_of([] { split_policy_list("full,,snapkv"); }).find("--policies: empty item"), std::string::npos);
  EXPECT_NE(error_of([] { split_policy_list("snapkv:window=4,"); }).find("--policies: empty item"), std::string::npos);
}

std::string run(const std::string& args, int* rc) {
  auto r = test::run_cli(args);
  *rc = r.rc;
  return r.out;
}

TEST(FidelityCli, TableAndJsonOnStories260K) {
  KVB_REQUIRE_BINARY();
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  const std::string dir = testing::TempDir();
  {
    std::ofstream f(dir + "/prompts.txt");
    f << "Once upon a time, there was a little girl named Lily.\n\nTom had a big blue truck.\n";
    std::ofstream j(dir + "/bad.jsonl");
    j << "{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n";
  }
  int rc = 0;
  std::string out = run("fidelity --model " + kStories +
                            " --policies full,streamingllm:buffer=8,oracle:buffer=8 --budgets 16 "
                            "--prompts " +
                            dir + "/prompts.txt --max-new-tokens 40 --json " + dir + "/fid.json",
                        &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("| full | - | 100.0 | 100.0 | 100.0 | 0.0000 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| oracle:buffer=8 | 16 |"), std::string::npos) << out;
  const nlohmann::json j = parse_json_file(dir + "/fid.json");
  EXPECT_EQ(j["prompts"].get<int>(), 2);
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["rows"][0]["kl_mean"].get<double>(), 0.0);
  EXPECT_GT(j["rows"][1]["kl_mean"].get<double>(), 0.0);
  EXPECT_LT(j["rows"][2]["kl_mean"].get<double>(), j["rows"][1]["kl_mean"].get<double>());
  EXPECT_EQ(j["rows"][2]["resolved_params"]["window"].get<int>(), 8);

  out = run("fidelity --model " + kStories + " --prompts " + dir + "/bad.jsonl", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("bad.jsonl:2: expected an object with a string field"), std::string::npos) << out;
  out = run("fidelity --model " + kStories + " --prompts a --text b", &rc);
  EXPECT_NE(out.find("exactly one of --prompts"), std::string::npos) << out;
  out = run("fidelity --model " + kStories + " --text " + dir + "/prompts.txt --budgets 16,x", &rc);
  EXPECT_NE(out.find("--budgets '16,x': 'x' is not a positive integer"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvb::fidelity
