// harness/run_support.h: the run config file reader (against ci/nightly.yaml and crafted
// files), middle truncation (against Python's slicing, written out independently), and the
// random-gates default for learned-gate policies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/util/error.h"
#include "harness/run_support.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using kvb::cli::load_run_config;
using kvb::cli::truncate_middle;

namespace {

std::string write_tmp(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("kvb_run_support_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

using ::kvb::test::error_of;

/// default_gates on the text's parsed spec; checks that the spec gained what the text gained.
std::string default_gates(const std::string& text, const std::vector<std::string>& models, std::string* note,
                          std::string* picked) {
  kvb::PolicySpec spec = kvb::PolicySpec::parse(text);
  const std::string out = kvb::cli::default_gates(spec, text, models, note, picked);
  EXPECT_EQ(spec.to_string(), kvb::PolicySpec::parse(out).to_string()) << text;
  return out;
}

}  // namespace

TEST(RunConfig, NightlyYamlRunSectionProfileAndThresholds) {
  const std::string path = std::string(KVB_SOURCE_DIR) + "/ci/nightly.yaml";
  auto c = load_run_config(path);  // the CPU profile (ci/README.md)
  EXPECT_EQ(c.suite.value_or(""), "ci/nightly-suite.yaml");
  EXPECT_EQ(c.db.value_or(""), "nightly.db");
  EXPECT_EQ(c.data_dirs, (std::vector<std::string>{"nightly-data", "build/test-data/datasets"}));
  EXPECT_EQ(c.models, std::vector<std::string>{"smollm2-135m-instruct"});
  EXPECT_EQ(c.policies, (std::vector<std::string>{"full", "snapkv", "rkv", "streamingllm"}));
  EXPECT_EQ(c.budgets, (std::vector<int64_t>{32, 48}));
  EXPECT_FALSE(c.samples.has_value());  // per task, from the suite file
  EXPECT_FALSE(c.limit.has_value());
  EXPECT_FALSE(c.max_new_tokens.has_value());
  EXPECT_DOUBLE_EQ(c.temperature.value_or(-1), 0.0);  // greedy
  EXPECT_FALSE(c.top_p.has_value());
  EXPECT_EQ(c.seed.value_or(0), 1234u);
  EXPECT_EQ(c.backend.value_or(""), "cpu");
  EXPECT_DOUBLE_EQ(c.alpha.value_or(0), 0.05);
  EXPECT_DOUBLE_EQ(c.min_drop_points.value_or(0), 2.0);

  auto g = load_run_config(path, "gpu_run");  // gpu_run overrides run key by key
  EXPECT_EQ(g.suite.value_or(""), "math");
  EXPECT_EQ(g.models, std::vector<std::string>{"Qwen/Qwen3-4B"});
  EXPECT_EQ(g.policies, (std::vector<std::string>{"full", "snapkv", "rkv", "trimkv"}));
  EXPECT_EQ(g.budgets, (std::vector<int64_t>{512, 1024, 2048}));
  EXPECT_EQ(g.samples.value_or(0), 8);
  EXPECT_EQ(g.limit.value_or(0), 100u);
  EXPECT_EQ(g.max_new_tokens.value_or(0), 128);
  EXPECT_EQ(g.backend.value_or(""), "cuda");
  EXPECT_DOUBLE_EQ(g.temperature.value_or(0), 0.7);
  EXPECT_DOUBLE_EQ(g.top_p.value_or(0), 0.95);
  EXPECT_EQ(g.seed, c.seed);  // not in gpu_run: kept from run
}

TEST(RunConfig, ScalarsAsListsAndDataDirsList) {
  auto p = write_tmp("lists.yaml", "data_dirs: [a, b]\nrun:\n  models: m1\n  policies: snapkv:window=8,buffer=4\n");
  auto c = load_run_config(p);
  EXPECT_EQ(c.data_dirs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.models, std::vector<std::string>{"m1"});
  EXPECT_EQ(c.policies, std::vector<std::string>{"snapkv:window=8,buffer=4"});
  EXPECT_FALSE(c.suite.has_value());
  EXPECT_FALSE(c.samples.has_value());
  fs::remove(p);
}

TEST(RunConfig, ErrorsNameTheFileAndTheKey) {
  const std::string missing = "/nonexistent-kvb/nightly.yaml";
  EXPECT_NE(error_of([&] { load_run_config(missing); }).find("--config /nonexistent-kvb/nightly.yaml: no such file"),
            std::string::npos);
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"run:\n  budget: [64]\n", ": run.budget: unknown key"},
      {"run:\n  budgets: [64, -1]\n", ": run.budgets[1]: must be >= 1, got -1"},
      {"run:\n  budgets: 64\n", ": run.budgets: expected a list of integers"},
      {"run:\n  samples: two\n", ": run.samples: expected an integer"},
      {"run:\n  temperature: hot\n", ": run.temperature: expected a number, got string"},
      {"run:\n  models: [m, 3]\n", ": run.models[1]: expected a string"},
      {"run: [1, 2]\n", ": run: expected a mapping"},
      {"thresholds:\n  alfa: 0.1\n", ": thresholds.alfa: unknown key"},
      {"budgets: [64]\n", ": budgets: unknown top-level key"},
  };
  for (const auto& k : cases) {
    auto p = write_tmp("bad.yaml", k.text);
    std::string m = error_of([&] { load_run_config(p); });
    EXPECT_NE(m.find(p + k.expect), std::string::npos) << k.text << " -> " << m;
    fs::remove(p);
  }
  auto p = write_tmp("ok.yaml", "run:\n  samples: 2\n");
  EXPECT_NE(error_of([&] { load_run_config(p, "gpu_run"); }).find(p + ": no section 'gpu_run'"), std::string::npos);
  fs::remove(p);
}

TEST(TruncateMiddle, EqualsLongBenchSlicing) {
  // LongBench pred.py: half = int(L/2); tokens[:half] + tokens[-half:]. Written out here with
  // explicit index arithmetic over every length and limit in a range.
  for (size_t n = 0; n <= 40; ++n) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(1000 + i);
    for (size_t limit = 2; limit <= 44; ++limit) {
      std::vector<int32_t> expect;
      if (n <= limit) {
        expect = ids;
      } else {
        const size_t half = limit / 2;
        for (size_t i = 0; i < half; ++i) expect.push_back(ids[i]);
        for (size_t i = n - half; i < n; ++i) expect.push_back(ids[i]);
      }
      ASSERT_EQ(truncate_middle(ids, limit), expect) << "n=" << n << " limit=" << limit;
    }
  }
  EXPECT_NE(error_of([] { truncate_middle({1, 2, 3}, 1); }).find("must be >= 2"), std::string::npos);
}

TEST(DefaultGates, LearnedGatePoliciesGetRandomGatesAndANote) {
  std::string note, picked;
  const std::vector<std::string> dflt = {"smollm2-135m-instruct"};
  EXPECT_EQ(default_gates("trimkv", dflt, &note, &picked), "trimkv:random_gates=0");
  EXPECT_NE(note.find("RANDOM gates"), std::string::npos) << note;
  EXPECT_NE(note.find("TRIM-KV"), std::string::npos) << note;
  EXPECT_TRUE(picked.empty());
  EXPECT_EQ(default_gates("wgkv:tau=0.2", dflt, &note, &picked), "wgkv:tau=0.2,random_gates=0");
  EXPECT_NE(note.find("WG-KV"), std::string::npos) << note;
  EXPECT_EQ(default_gates("trimkv:gates=/x.safetensors", dflt, &note, &picked), "trimkv:gates=/x.safetensors");
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(default_gates("trimkv:random_gates=3", dflt, &note, &picked), "trimkv:random_gates=3");
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(default_gates("snapkv:window=8", dflt, &note, &picked), "snapkv:window=8");
  EXPECT_TRUE(note.empty());
  EXPECT_TRUE(picked.empty());
  // The same rule for every learned policy: ForesightKV gets a random scorer, said as loudly.
  EXPECT_EQ(default_gates("foresightkv:window=32,buffer=32", dflt, &note, &picked),
            "foresightkv:window=32,buffer=32,random_scorer=0");
  EXPECT_NE(note.find("RANDOM scorer"), std::string::npos) << note;
  EXPECT_NE(note.find("ForesightKV"), std::string::npos) << note;
  EXPECT_EQ(default_gates("foresightkv:scorer=/s.safetensors", dflt, &note, &picked),
            "foresightkv:scorer=/s.safetensors");
  EXPECT_TRUE(note.empty());
}

TEST(DefaultGates, KnownBaseModelsGetTheirReleasedGatesAndSaySo) {
  std::string note, picked;
  EXPECT_EQ(default_gates("trimkv", {"Qwen/Qwen3-4B"}, &note, &picked), "trimkv:gates=ngocbh/TrimKV-Qwen3-4B-Math");
  EXPECT_TRUE(note.empty()) << note;
  EXPECT_NE(picked.find("using the released TRIM-KV gates ngocbh/TrimKV-Qwen3-4B-Math for Qwen/Qwen3-4B"), std::string::npos)
      << picked;
  EXPECT_EQ(default_gates("wgkv:tau=0.2", {"Qwen/Qwen3-4B-Instruct-2507"}, &note, &picked),
            "wgkv:tau=0.2,gates=WG-KV/checkpoints/qwen3-4b-instruct-2507-0.16.pt");
  // Weights given by the user win over the registry.
  EXPECT_EQ(default_gates("trimkv:gates=/x.pth", {"Qwen/Qwen3-4B"}, &note, &picked), "trimkv:gates=/x.pth");
  EXPECT_TRUE(picked.empty());
  // No released ForesightKV scorer: random, with the warning.
  EXPECT_EQ(default_gates("foresightkv", {"Qwen/Qwen3-4B"}, &note, &picked), "foresightkv:random_scorer=0");
  EXPECT_FALSE(note.empty());
  // Two models that need different gates (or only one has them): one error naming both ways out.
  std::string e = error_of([&] { default_gates("trimkv", {"Qwen/Qwen3-4B", "Qwen/Qwen3-8B"}, &note, &picked); });
  EXPECT_NE(e.find("run the models separately or name the weights (gates=...)"), std::string::npos) << e;
  e = error_of([&] { default_gates("trimkv", {"smollm2-135m-instruct", "Qwen/Qwen3-4B"}, &note, &picked); });
  EXPECT_NE(e.find("ngocbh/TrimKV-Qwen3-4B-Math"), std::string::npos) << e;
}
