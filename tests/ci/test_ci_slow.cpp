// The nightly catches a regression (label `slow`: three generating runs on the default model).
//
// Three runs of ci/nightly.yaml's CPU profile, reduced to the first kLimit smoke problems, the
// policies full, snapkv and streamingllm at budget 48, 24 new tokens (the short correct answers
// fit) and one batch per cell, into one database, on the default model SmolLM2-135M-Instruct
// (the test fails when it is missing: bootstrap.sh downloads it):
//   base  — the profile as it is;
//   same  — the same build and settings again, under another run name, so every sample is
//           generated again with the same seeds;
//   worse — the same, except that streamingllm gets a deliberately worse setting at the same
//           budget 48: no attention sinks (sinks=0, the recent 48 tokens only: the window
//           attention the StreamingLLM paper shows collapsing; 8 of the 40 solved -> 0 here),
//           i.e. one cell changes. It must keep taking the budget, so that its cell stays at 48
//           and pairs with the baseline's (a budget_kind=ratio spec takes none since issue 47:
//           its cell would be stored without a budget and compared with nothing).
// `kvbench compare base same` must exit 0 with every cell unchanged (no false alarm on
// resampling with the same seeds), and `kvbench compare base worse` must exit 1 with exactly one
// REGRESSION line, the streamingllm cell's, paired with the baseline cell whose parameters it
// changed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "datasets/records.h"
#include "engine/util/io.h"
#include "tests/ci/nightly_support.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using kvb::test::lines_with;
using kvb::test::run_cli;

namespace {

constexpr int kLimit = 40;
const char* const kWorse = "streamingllm:sinks=0";

}  // namespace

TEST(NightlyRegression, CompareFlagsExactlyTheWorseCellAndNotARerun) {
  ASSERT_EQ(access(KVB_BINARY, X_OK), 0) << "kvbench binary not built: " << KVB_BINARY;
  const std::string config = std::string(KVB_SOURCE_DIR) + "/ci/nightly.yaml";
  const auto cfg = kvb::datasets::load_yaml_file(config);
  ASSERT_EQ(cfg["run"]["models"], nlohmann::json::array({"smollm2-135m-instruct"})) << "the default model";
  std::string base_policies, worse_policies;
  int replaced = 0;
  for (const auto& p : cfg["run"]["policies"]) {
    const std::string name = p.get<std::string>();
    if (name != "full" && name != "snapkv" && name != "streamingllm") continue;  // reduced
    base_policies += (base_policies.empty() ? "" : ",") + name;
    worse_policies += (worse_policies.empty() ? "" : ",") + (name == "streamingllm" ? (++replaced, kWorse) : name);
  }
  ASSERT_EQ(replaced, 1) << "ci/nightly.yaml's CPU profile has streamingllm";
  ASSERT_EQ(base_policies, "full,snapkv,streamingllm") << "ci/nightly.yaml's CPU profile has these three";

  const fs::path dir = fs::temp_directory_path() / ("kvb_ci_nightly_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = (dir / "nightly.db").string();
  // The CPU profile (model, sampling, seed, backend, policies) with its smoke task only.
  const std::string reduced = "run --config " + config + " --db " + db + " --task smoke:extra=56 --limit " +
                              std::to_string(kLimit) + " --budgets 48 --max-new-tokens 24 --batch " +
                              std::to_string(kLimit) + " --quiet";
  for (const auto& [name, policies] : std::vector<std::pair<std::string, std::string>>{
           {"base", base_policies}, {"same", base_policies}, {"worse", worse_policies}}) {
    auto [rc, out] = run_cli(reduced + " --run-name " + name + " --policies '" + policies + "'");
    ASSERT_EQ(rc, 0) << name << ": " << out;
  }

  auto [rc_same, same] = run_cli("compare --db " + db + " --baseline base --candidate same --config " + config);
  EXPECT_EQ(rc_same, 0) << same;
  EXPECT_NE(same.find("3 cells compared, 0 regression(s)"), std::string::npos) << same;
  // Same seeds, same build: every example scores exactly as before (0 worse, 0 better, p = 1).
  EXPECT_EQ(lines_with(same, " ok").size(), 3u) << same;
  for (const auto& l : lines_with(same, " ok"))
    EXPECT_TRUE(std::regex_search(l, std::regex("\\s0\\s+0\\s+1\\.0000\\s+ok$"))) << l;

  auto [rc_worse, worse] = run_cli("compare --db " + db + " --baseline base --candidate worse --config " + config);
  EXPECT_EQ(rc_worse, 1) << worse;
  auto flagged = lines_with(worse, "REGRESSION");
  ASSERT_EQ(flagged.size(), 1u) << worse;
  EXPECT_TRUE(std::regex_search(flagged[0], std::regex(std::string("^smollm2-135m-instruct\\s+smoke\\s+") +
                                                       "streamingllm:sinks=0 \\(was streamingllm\\)\\s+48\\s")))
      << flagged[0];
  EXPECT_NE(worse.find("3 cells compared, 1 regression(s)"), std::string::npos) << worse;
  EXPECT_NE(worse.find("0 baseline-only and 0 candidate-only cells skipped"), std::string::npos) << worse;
  fs::remove_all(dir);
}
