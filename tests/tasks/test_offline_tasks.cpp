// Offline benchmark files in ../shared/datasets: every file loads with the documented count and
// the first prompt of each task equals the golden that tools/gen_task_goldens.py rendered with
// the reference templates (Python str.format / str.replace, yaml.safe_load).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "datasets/hash.h"
#include "datasets/registry.h"
#include "engine/util/error.h"
#include "tasks/countdown_trace.h"
#include "tasks/task.h"

namespace fs = std::filesystem;
using namespace kvb;
using namespace kvb::tasks;

namespace {

std::string shared_datasets() { return std::string(KVB_SHARED_DIR) + "/datasets"; }

#define REQUIRE_SHARED()                                                            \
  if (!fs::exists(shared_datasets())) GTEST_SKIP() << "../shared/datasets is absent: " << shared_datasets()

const nlohmann::json& goldens() {
  static nlohmann::json g = [] {
    std::ifstream in(std::string(KVB_SOURCE_DIR) + "/tests/tasks/goldens/offline_first_prompts.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}

TaskContext ctx_for(datasets::DataLocator& loc) {
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  return ctx;
}

// A golden text is either the text itself or {len, sha256, head} for long texts.
::testing::AssertionResult same_text(const std::string& got, const nlohmann::json& g) {
  if (g.is_string()) {
    if (got == g.get<std::string>()) return ::testing::AssertionSuccess();
    size_t i = 0;
    const std::string& want = g.get_ref<const std::string&>();
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    return ::testing::AssertionFailure() << "texts differ at byte " << i << " (lengths " << got.size() << " vs "
                                         << want.size() << "): got ..." << got.substr(i, 80);
  }
  if (got.size() != g["len"].get<size_t>())
    return ::testing::AssertionFailure() << "length " << got.size() << " != " << g["len"];
  if (datasets::sha256_hex(got) != g["sha256"].get<std::string>())
    return ::testing::AssertionFailure() << "sha256 differs; head: " << got.substr(0, 200);
  return ::testing::AssertionSuccess();
}

std::vector<ChatMessage> msgs(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"], m["content"]});
  return out;
}

}  // namespace

TEST(OfflineTasks, MathCountsAndFirstPromptsPerTemplate) {
  REQUIRE_SHARED();
  datasets::DataLocator loc({shared_datasets()});
  for (const char* name : {"aime24", "aime25", "gsm8k", "math500"}) {
    const auto& g = goldens()[name];
    for (const char* tmpl : {"r1", "qwen", "rkv"}) {
      auto task = make_task(std::string(name) + ":template=" + tmpl);
      auto all = task->load_all(ctx_for(loc));
      ASSERT_EQ(all.size(), g["count"].get<size_t>()) << name;
      EXPECT_EQ(all.size(), *task->info().expected_count) << name;
      EXPECT_EQ(all[0].messages, msgs(g["templates"][tmpl])) << name << " " << tmpl;
      EXPECT_EQ(all[0].references, std::vector<std::string>{g["reference"].get<std::string>()}) << name;
      EXPECT_EQ(all[0].grader, task->info().grader);
      EXPECT_GT(all[0].max_new_tokens, 0);
    }
  }
}

TEST(OfflineTasks, MathIdsAreUniqueAndStable) {
  REQUIRE_SHARED();
  datasets::DataLocator loc({shared_datasets()});
  auto a = make_task("math500")->load_all(ctx_for(loc));
  std::set<std::string> ids;
  for (const auto& e : a) ids.insert(e.id);
  EXPECT_EQ(ids.size(), a.size());
  EXPECT_EQ(a[0].id, "math500/test/precalculus/807.json");
  auto g = make_task("gsm8k")->load_all(ctx_for(loc));
  EXPECT_EQ(g[0].id, "gsm8k/0");
  EXPECT_EQ(g[0].references[0], "18");  // "#### 18" in the official file
}

TEST(OfflineTasks, LongProcCountsAndFirstPrompts) {
  REQUIRE_SHARED();
  datasets::DataLocator loc({shared_datasets()});
  for (const auto& [name, g] : goldens().items()) {
    if (name.rfind("longproc_", 0) != 0) continue;
    auto task = make_task(name + ":sample=all");
    auto all = task->load_all(ctx_for(loc));
    ASSERT_EQ(all.size(), g["count"].get<size_t>()) << name;
    ASSERT_FALSE(all.empty());
    ASSERT_EQ(all[0].messages.size(), 1u);
    EXPECT_EQ(all[0].messages[0].role, "user");
    EXPECT_TRUE(same_text(all[0].messages[0].content, g["first_prompt"])) << name << ": first prompt";
    EXPECT_TRUE(same_text(all[0].references[0], g["first_reference"])) << name << ": reference";
    EXPECT_EQ(all[0].grader, "longproc_" + name.substr(9, name.rfind('_') - 9));
    // HELMET sampling: shuffle(seed=42), first 100.
    auto sampled = make_task(name)->load_all(ctx_for(loc));
    EXPECT_EQ(sampled.size(), std::min<size_t>(100, all.size())) << name;
    EXPECT_TRUE(same_text(sampled[0].messages[0].content, g["helmet_first_prompt"])) << name;
    EXPECT_EQ(sampled[0].meta["index"].get<size_t>(), g["helmet_first_index"].get<size_t>()) << name;
  }
}

// The countdown search trace must reproduce the traces stored in the data files (generated by
// the reference): "<Search Procedure>\n{log}\n</Search Procedure>".
TEST(OfflineTasks, CountdownTraceMatchesStoredTraces) {
  REQUIRE_SHARED();
  size_t n = 0;
  for (const char* len : {"0.5k", "2k", "8k"}) {
    std::ifstream in(shared_datasets() + "/longproc/countdown/countdown_" + len + ".json");
    auto data = nlohmann::json::parse(in);
    for (const auto& d : data) {
      std::string stored = d["demonstration"];
      size_t b = stored.find("<Search Procedure>\n");
      size_t e = stored.find("\n</Search Procedure>");
      ASSERT_NE(b, std::string::npos);
      auto t = countdown_trace(d["nums"].get<std::vector<int64_t>>(), d["target"].get<int64_t>());
      ASSERT_EQ(t.search_log, stored.substr(b + 19, e - b - 19)) << d["nums"].dump();
      ++n;
    }
  }
  EXPECT_EQ(n, 600u);
}

TEST(OfflineTasks, RegistryHashesMatchSharedFiles) {
  REQUIRE_SHARED();
  size_t checked = 0;
  for (const auto& s : datasets::sources()) {
    fs::path p = fs::path(shared_datasets()) / s.key;
    if (s.sha256.empty() || !fs::exists(p)) continue;
    EXPECT_EQ(fs::file_size(p), s.size) << s.key;
    EXPECT_EQ(datasets::sha256_file(p.string()), s.sha256) << s.key;
    ++checked;
  }
  EXPECT_GE(checked, 20u);
}

TEST(OfflineTasks, MissingFileNamesKeyAndHowToGetIt) {
  datasets::DataLocator loc({"/nonexistent-dir"});
  try {
    make_task("longproc_tom_tracking_8k")->load_all(ctx_for(loc));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longproc/hf/tom_tracking_8k.jsonl"), std::string::npos) << e.what();
  }
}
