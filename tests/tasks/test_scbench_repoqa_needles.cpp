// SCBench repoqa: every repoqa turn carries its repository's needle list over the WHOLE file
// (compute_scores.py collects needle_by_repo across sessions), which the scbench_repoqa grader
// compares the output against.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "datasets/registry.h"
#include "tasks/task.h"

using namespace kvb;
using namespace kvb::tasks;

namespace {

TEST(ScBenchRepoQa, TurnsCarryTheNeedlesOfTheirRepositoryAcrossSessions) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kvb-repoqa-" + std::to_string(getpid()));
  fs::create_directories(dir / "scbench");
  {
    std::ofstream f(dir / "scbench" / "scbench_repoqa.jsonl");
    f << R"({"id": 1, "context": "c1", "lang": "python", "repo": "x/y", "multi_turns": [{"input": "q1", "answer": "def f(): pass", "name": "f"}, {"input": "q2", "answer": "def g(): pass", "name": "g"}]})"
      << "\n"
      << R"({"id": 2, "context": "c2", "lang": "python", "repo": "x/y", "multi_turns": [{"input": "q3", "answer": "def h(): pass", "name": "h"}]})"
      << "\n"
      << R"({"id": 3, "context": "c3", "lang": "go", "repo": "o/z", "multi_turns": [{"input": "q4", "answer": "func k() {}", "name": "k"}]})"
      << "\n";
  }
  datasets::DataLocator loc({dir.string()});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  auto ex = make_task("scbench_repoqa")->load_all(ctx);
  fs::remove_all(dir);
  ASSERT_EQ(ex.size(), 3u);
  const auto& n1 = ex[0].meta["needles"];
  ASSERT_EQ(n1.size(), 3u);  // f, g (session 1) and h (session 2): same repository
  EXPECT_EQ(n1[0]["name"], "f");
  EXPECT_EQ(n1[2]["needle"], "def h(): pass");
  ASSERT_EQ(ex[0].followups.size(), 1u);
  EXPECT_EQ(ex[0].followups[0].meta["needles"], n1);
  EXPECT_EQ(ex[0].followups[0].meta["name"], "g");
  EXPECT_EQ(ex[1].meta["needles"], n1);
  EXPECT_EQ(ex[2].meta["needles"].size(), 1u);
  EXPECT_EQ(ex[0].grader, "scbench_repoqa");
}

TEST(ScBenchRepoQa, MixedTaskGivesNeedlesOnlyToRepoQaTurns) {
  datasets::DataLocator loc({std::string(KVB_SOURCE_DIR) + "/tests/fixtures/datasets"});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  auto ex = make_task("scbench_repoqa_and_kv")->load_all(ctx);
  ASSERT_FALSE(ex.empty());
  EXPECT_EQ(ex[0].grader, "scbench_repoqa");
  ASSERT_TRUE(ex[0].meta.contains("needles"));
  EXPECT_EQ(ex[0].meta["needles"][0]["name"], "bar");
  ASSERT_EQ(ex[0].followups.size(), 1u);
  EXPECT_EQ(ex[0].followups[0].grader, "scbench_kv_retrieval");
  EXPECT_FALSE(ex[0].followups[0].meta.contains("needles"));
}

}  // namespace
