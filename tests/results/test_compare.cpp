// compare_runs and `kvbench compare` exit codes on synthetic stores with known differences.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <functional>

#include "engine/util/error.h"
#include "results/compare.h"
#include "synth.h"
#include "tests/support/test_support.h"

using namespace kvb::results;
using namespace kvb::results::testing;

// One run over `items` where item i (in grid order) gets score(i).
static int64_t scored_run(Store& s, const std::vector<WorkItem>& items, const std::string& name,
                          const std::function<double(const WorkItem&)>& score) {
  auto info = run_info(name);
  int64_t run = s.begin_run(info);
  s.add_work_items(items);
  std::vector<GenerationRecord> gens;
  std::vector<GradeRecord> grades;
  for (const auto& it : items) {
    gens.push_back(fake_generation(it));
    GradeRecord g = fake_grade(it);
    g.score = score(it);
    grades.push_back(g);
  }
  s.write_batch(run, gens, grades);
  s.end_run(run);
  return run;
}

static int example_no(const WorkItem& it) { return std::stoi(it.example_id.substr(2)); }

struct CompareFixture : ::testing::Test {
  std::string path = temp_db("compare");
  std::vector<WorkItem> items = expand_grid(small_grid(12, 1));  // 5 cells x 12 examples
  Store store{path};
  int64_t base = scored_run(store, items, "base", [](const WorkItem&) { return 1.0; });
};

TEST_F(CompareFixture, IdenticalRunsDoNotRegress) {
  int64_t cand = scored_run(store, items, "same", [](const WorkItem&) { return 1.0; });
  auto r = compare_runs(store, base, cand);
  EXPECT_FALSE(r.any_regression);
  ASSERT_EQ(r.rows.size(), 5u);
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.shared_samples, 12);
    EXPECT_EQ(row.p_value, 1.0);
    EXPECT_EQ(row.delta.mean, 0.0);
  }
}

TEST_F(CompareFixture, LargeDropInOneCellRegresses) {
  // snapkv@64 loses 8 of 12 examples: sign test p = 2 * 0.5^8 = 0.0078 < 0.05.
  int64_t cand = scored_run(store, items, "drop", [](const WorkItem& it) {
    return it.policy == "snapkv" && it.budget == 64 && example_no(it) < 8 ? 0.0 : 1.0;
  });
  auto r = compare_runs(store, base, cand);
  EXPECT_TRUE(r.any_regression);
  int flagged = 0;
  for (const auto& row : r.rows) {
    if (row.regression) {
      ++flagged;
      EXPECT_EQ(row.policy_label, "snapkv{\"window\":8}");
      EXPECT_EQ(row.budget, 64);
      EXPECT_EQ(row.worse, 8);
      EXPECT_NEAR(row.p_value, 2.0 / 256, 1e-12);
      EXPECT_NEAR(row.delta.mean, -8.0 / 12, 1e-12);
      EXPECT_LT(row.delta.hi, 0);
    }
  }
  EXPECT_EQ(flagged, 1);
  // --min-drop above the drop (66.7 points) silences it.
  CompareOptions o;
  o.min_drop = 70;
  EXPECT_FALSE(compare_runs(store, base, cand, o).any_regression);
  // A stricter alpha than the p-value silences it.
  o = {};
  o.alpha = 0.005;
  EXPECT_FALSE(compare_runs(store, base, cand, o).any_regression);
}

TEST_F(CompareFixture, SmallDropIsNotSignificantAndGainsNeverFail) {
  int64_t small = scored_run(store, items, "small", [](const WorkItem& it) {
    return example_no(it) < 2 ? 0.0 : 1.0;  // 2 of 12 worse everywhere: p = 0.5
  });
  EXPECT_FALSE(compare_runs(store, base, small).any_regression);
  // Reverse direction: a big improvement is not a regression.
  int64_t worse_base = scored_run(store, items, "zero", [](const WorkItem&) { return 0.0; });
  EXPECT_FALSE(compare_runs(store, worse_base, base).any_regression);
  EXPECT_TRUE(compare_runs(store, base, worse_base).any_regression);
}

TEST_F(CompareFixture, NoSharedItemsIsAnError) {
  auto other = expand_grid(small_grid(3, 1));
  for (auto& it : other) {
    it.model_revision = "other-rev";
    it.key = work_item_key(it);
  }
  int64_t cand = scored_run(store, other, "other", [](const WorkItem&) { return 1.0; });
  EXPECT_THROW(compare_runs(store, base, cand), kvb::Error);
}

// A policy whose parameters changed between the runs (an edited config, or a changed default)
// has a new label and no shared work item; compare pairs it with the baseline cell of the same
// policy name and budget by prompt and seed, and names both labels.
TEST_F(CompareFixture, ChangedPolicyParametersArePairedByPromptAndSeed) {
  auto g = small_grid(12, 1);
  g.policies[1].params = {{"window", 1}};  // snapkv{"window":8} -> snapkv{"window":1}
  auto changed = expand_grid(g);
  int64_t cand = scored_run(store, changed, "window1", [](const WorkItem& it) {
    return it.policy == "snapkv" && it.budget == 64 && example_no(it) < 8 ? 0.0 : 1.0;
  });
  auto r = compare_runs(store, base, cand);
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.baseline_only_cells, 0);
  EXPECT_EQ(r.candidate_only_cells, 0);
  EXPECT_TRUE(r.any_regression);
  int flagged = 0;
  for (const auto& row : r.rows) {
    if (row.policy_label.rfind("snapkv", 0) != 0) {
      EXPECT_TRUE(row.baseline_label.empty());
      continue;
    }
    EXPECT_EQ(row.policy_label, "snapkv{\"window\":1}");
    EXPECT_EQ(row.baseline_label, "snapkv{\"window\":8}");
    EXPECT_EQ(row.shared_samples, 12);
    if (row.regression) {
      ++flagged;
      EXPECT_EQ(row.budget, 64);
      EXPECT_EQ(row.worse, 8);
      EXPECT_NEAR(row.p_value, 2.0 / 256, 1e-12);
    }
  }
  EXPECT_EQ(flagged, 1);
  const std::string table = format_compare_table(r, {});
  EXPECT_NE(table.find("snapkv{\"window\":1} (was snapkv{\"window\":8})"), std::string::npos) << table;

  // Two candidate specs of snapkv at once: which one replaced the baseline's is ambiguous, so
  // neither is compared; both are listed as skipped.
  g.policies.push_back({"snapkv", {{"window", 2}}, true, ""});
  auto two = expand_grid(g);
  int64_t amb = scored_run(store, two, "two-snapkvs", [](const WorkItem&) { return 1.0; });
  auto a = compare_runs(store, base, amb);
  EXPECT_EQ(a.rows.size(), 3u);  // full, rkv@64, rkv@128
  EXPECT_EQ(a.baseline_only_cells, 2);
  EXPECT_EQ(a.candidate_only_cells, 4);
  const std::string t = format_compare_table(a, {});
  EXPECT_NE(t.find("skipped baseline: stories260K math snapkv{\"window\":8} @64"), std::string::npos) << t;
  EXPECT_NE(t.find("skipped candidate: stories260K math snapkv{\"window\":2} @128"), std::string::npos) << t;
}

TEST_F(CompareFixture, CliExitCodes) {
  KVB_REQUIRE_BINARY();
  scored_run(store, items, "same", [](const WorkItem&) { return 1.0; });
  scored_run(store, items, "drop",
             [](const WorkItem& it) { return it.policy == "rkv" && example_no(it) < 9 ? 0.0 : 1.0; });
  std::string out;
  EXPECT_EQ(kvb::test::run_cli("compare --db " + path + " --baseline base --candidate same", &out), 0) << out;
  EXPECT_NE(out.find("0 regression(s)"), std::string::npos) << out;
  EXPECT_EQ(kvb::test::run_cli("compare --db " + path + " --baseline base --candidate drop", &out), 1) << out;
  EXPECT_NE(out.find("REGRESSION"), std::string::npos) << out;
  EXPECT_EQ(kvb::test::run_cli("compare --db " + path + " --baseline base --candidate drop --min-drop 80", &out), 0)
      << out;
  EXPECT_EQ(kvb::test::run_cli("compare --db " + path + " --baseline base --candidate nosuchrun", &out), 2) << out;
  EXPECT_NE(out.find("nosuchrun"), std::string::npos) << out;
  // --missing-baseline-ok forgives a missing baseline only when nothing else is stored.
  EXPECT_EQ(
      kvb::test::run_cli("compare --db " + path + " --baseline nosuchrun --candidate drop --missing-baseline-ok", &out), 2)
      << out;
  const std::string first = temp_db("compare_first_night");
  {
    Store one(first);
    scored_run(one, items, "night-1", [](const WorkItem&) { return 1.0; });
  }
  EXPECT_EQ(kvb::test::run_cli("compare --db " + first + " --baseline previous --candidate latest", &out), 2) << out;
  EXPECT_EQ(kvb::test::run_cli(
                "compare --db " + first + " --baseline previous --candidate latest --missing-baseline-ok", &out),
            0)
      << out;
  EXPECT_NE(out.find("no baseline run to compare with"), std::string::npos) << out;
}

// Two runs of one --memory: each cell's aggregate decode rate is Σ generated tokens / Σ
// decode_share_s, and --max-throughput-drop flags a cell that fell by more than that percentage;
// runs of different (or no) --memory are never compared on speed.
static int64_t timed_run(Store& s, const std::vector<WorkItem>& items, const std::string& name,
                         std::optional<double> memory_gib, const std::function<double(const WorkItem&)>& share) {
  auto info = run_info(name);
  if (memory_gib) info.config["memory_gib"] = *memory_gib;
  info.run_key = default_run_key(info);
  int64_t run = s.begin_run(info);
  s.add_work_items(items);
  std::vector<GenerationRecord> gens;
  std::vector<GradeRecord> grades;
  for (const auto& it : items) {
    GenerationRecord g = fake_generation(it);
    g.decode_share_s = share(it);
    g.extra["decode_batch_mean"] = 2.5;
    g.extra["preemptions"] = 1;
    gens.push_back(g);
    GradeRecord gr = fake_grade(it);
    gr.score = 1.0;
    grades.push_back(gr);
  }
  s.write_batch(run, gens, grades);
  s.end_run(run);
  return run;
}

TEST(CompareThroughput, AggregateRateAtEqualMemoryIsComparedAndFlagged) {
  const std::string path = temp_db("compare_tput");
  Store store(path);
  const auto items = expand_grid(small_grid(6, 1));
  const int64_t base = timed_run(store, items, "base", 0.5, [](const WorkItem&) { return 0.1; });
  // rkv's cells decode 30 % slower: their decode steps took 0.1 / 0.7 s per sample.
  const int64_t cand =
      timed_run(store, items, "cand", 0.5, [](const WorkItem& it) { return it.policy == "rkv" ? 0.1 / 0.7 : 0.1; });
  const int64_t other = timed_run(store, items, "other-pool", 1.0, [](const WorkItem&) { return 1.0; });
  const int64_t unpooled = timed_run(store, items, "by-count", std::nullopt, [](const WorkItem&) { return 1.0; });

  auto r = compare_runs(store, base, cand);
  EXPECT_FALSE(r.any_regression);  // shown, never flagged without --max-throughput-drop
  int rkv = 0;
  for (const auto& row : r.rows) {
    ASSERT_TRUE(row.memory_gib && row.tok_s_baseline && row.tok_s_candidate) << row.policy_label;
    EXPECT_EQ(*row.memory_gib, 0.5);
    double tok = 0;
    for (const auto& it : items)
      if (it.policy_label == row.policy_label && it.budget == row.budget) tok += fake_generation(it).generated_tokens;
    const double n = r.rows.empty() ? 0 : row.shared_samples;
    EXPECT_NEAR(*row.tok_s_baseline, tok / (0.1 * n), 1e-9);
    if (row.policy_label.rfind("rkv", 0) == 0) {
      ++rkv;
      EXPECT_NEAR(*row.tok_s_candidate / *row.tok_s_baseline, 0.7, 1e-9);
    } else {
      EXPECT_NEAR(*row.tok_s_candidate, *row.tok_s_baseline, 1e-9);
    }
    EXPECT_FALSE(row.throughput_regression);
  }
  EXPECT_GT(rkv, 0);
  CompareOptions o;
  o.max_throughput_drop = 20;
  r = compare_runs(store, base, cand, o);
  EXPECT_TRUE(r.any_regression);
  for (const auto& row : r.rows) EXPECT_EQ(row.throughput_regression, row.policy_label.rfind("rkv", 0) == 0);
  const std::string table = format_compare_table(r, o);
  EXPECT_NE(table.find("SLOWER"), std::string::npos) << table;
  EXPECT_NE(table.find("-30.0 %"), std::string::npos) << table;
  o.max_throughput_drop = 40;  // a 30 % drop is within it
  EXPECT_FALSE(compare_runs(store, base, cand, o).any_regression);
  // Another pool, or none: no speed comparison at all, whatever the rates; and a throughput gate
  // that was asked for is refused (exit 2) rather than passed by being skipped (issue 46, item 6).
  for (int64_t c : {other, unpooled}) {
    r = compare_runs(store, base, c);
    EXPECT_FALSE(r.any_regression);
    for (const auto& row : r.rows) EXPECT_FALSE(row.memory_gib || row.tok_s_candidate);
  }
  o.max_throughput_drop = 20;
  EXPECT_NE(kvb::test::input_error_of([&] {
              compare_runs(store, base, other, o);
            }).find("(--memory 0.5) and candidate run " + std::to_string(other) + " (--memory 1) do not share one"),
            std::string::npos);
  EXPECT_NE(kvb::test::input_error_of([&] { compare_runs(store, base, unpooled, o); }).find("(no --memory)"),
            std::string::npos);
  // One pool, but the candidate stored no decode time: the gate cannot be evaluated.
  const int64_t untimed = timed_run(store, items, "untimed", 0.5, [](const WorkItem&) { return 0.0; });
  EXPECT_NE(kvb::test::input_error_of([&] {
              compare_runs(store, base, untimed, o);
            }).find("has no decode time stored (candidate run; decode_share_s)"),
            std::string::npos);
  o.max_throughput_drop = 100;
  EXPECT_THROW(compare_runs(store, base, cand, o), kvb::Error);
  o.max_throughput_drop = 0;
  EXPECT_THROW(compare_runs(store, base, cand, o), kvb::Error);
}

TEST(CompareThroughput, CliFlagsASlowerCellAndRefusesBadPercentages) {
  KVB_REQUIRE_BINARY();
  const std::string path = temp_db("compare_tput_cli");
  {
    Store store(path);
    const auto items = expand_grid(small_grid(6, 1));
    timed_run(store, items, "base", 0.5, [](const WorkItem&) { return 0.1; });
    timed_run(store, items, "cand", 0.5, [](const WorkItem& it) { return it.policy == "rkv" ? 0.2 : 0.1; });
  }
  std::string out;
  const std::string cmd = "compare --db " + path + " --baseline base --candidate cand";
  EXPECT_EQ(kvb::test::run_cli(cmd, &out), 0) << out;
  EXPECT_NE(out.find("aggregate decode tok/s at --memory 0.5 GiB"), std::string::npos) << out;
  EXPECT_EQ(kvb::test::run_cli(cmd + " --max-throughput-drop 25", &out), 1) << out;
  EXPECT_NE(out.find("SLOWER"), std::string::npos) << out;
  EXPECT_EQ(kvb::test::run_cli(cmd + " --max-throughput-drop 60", &out), 0) << out;
  for (const char* bad : {"0", "100", "-5", "nan", "inf"}) {
    EXPECT_EQ(kvb::test::run_cli(cmd + " --max-throughput-drop " + bad, &out), 2) << bad << ": " << out;
    EXPECT_NE(out.find("--max-throughput-drop"), std::string::npos) << out;
  }
}
