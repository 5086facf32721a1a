// LongProc travel_planning from its GitHub layout (travel_planning_all.json split by
// estimated_output_tokens, demonstrations from travel_planning_icl_examples.json) and LongBench
// read straight from data.zip. Fixtures and goldens: tools/gen_travel_zip_fixtures.py, which
// renders the prompts with yaml.safe_load + Python str.format as longproc_data.py does and writes
// the zip with Python's zipfile; its travel search reproduces the real ICL examples' plans.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "datasets/hub.h"
#include "datasets/registry.h"
#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "tasks/task.h"
#include "tasks/travel_trace.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using namespace kvb;
using namespace kvb::tasks;

namespace {

std::string src(const std::string& rel) { return std::string(KVB_SOURCE_DIR) + "/" + rel; }
const std::string kFix = src("tests/fixtures/datasets");
const std::string kZipMirror = src("tests/fixtures/longbench_zip");

nlohmann::json read_json(const std::string& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

const nlohmann::json& gold() {
  static nlohmann::json g = read_json(src("tests/fixtures/tasks/travel_planning.json"));
  return g;
}

std::vector<Example> load(const std::vector<std::string>& dirs, const std::string& spec,
                          datasets::BadRecords* bad = nullptr, datasets::HubClient* hub = nullptr) {
  datasets::DataLocator loc(dirs, hub);
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  ctx.bad = bad;
  return make_task(spec)->load_all(ctx);
}

using ::kvb::test::error_of;

fs::path tmp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kvb_tz_" + std::to_string(::getpid())) / name;
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(TravelPlanning, GithubLayoutPromptsReferencesAndSplit) {
  for (const char* len : {"2k", "8k"}) {
    const auto& g = gold()[std::string("travel_planning_") + len];
    auto ex = load({kFix}, std::string("longproc_travel_planning_") + len + ":sample=all,source=github");
    ASSERT_EQ(ex.size(), g["count"].get<size_t>()) << len;
    ASSERT_EQ(ex.size(), 2u) << len;  // rows at 2048 and 9000 tokens belong to neither config
    EXPECT_EQ(ex[0].messages.size(), 1u);
    EXPECT_EQ(ex[0].messages[0].role, "user");
    EXPECT_EQ(ex[0].messages[0].content, g["first_prompt"].get<std::string>()) << len;
    for (size_t i = 0; i < ex.size(); ++i) {
      const auto& ge = g["examples"][i];
      const std::string& p = ex[i].messages[0].content;
      EXPECT_EQ(p.size(), ge["prompt_len"].get<size_t>()) << len << " " << i;
      EXPECT_EQ(sha256_hex(p), ge["prompt_sha256"].get<std::string>()) << len << " " << i;
      EXPECT_EQ(ex[i].references, std::vector<std::string>{ge["reference"].get<std::string>()}) << len << " " << i;
      EXPECT_EQ(ex[i].meta["item"]["id"], ge["id"]);
      EXPECT_EQ(ex[i].meta["item"]["ground_truth_cities"], ge["ground_truth_cities"]);
      EXPECT_EQ(ex[i].meta["item"]["ground_truth_durations"], ge["ground_truth_durations"]);
      EXPECT_EQ(ex[i].id, std::string("longproc_travel_planning_") + len + "/" + std::to_string(i));
      EXPECT_EQ(ex[i].meta["index"], i);
      EXPECT_EQ(ex[i].grader, "longproc_travel_planning");
      EXPECT_EQ(ex[i].max_new_tokens, std::string(len) == "2k" ? 3072 : 10240);
    }
  }
  // File order is kept within a config: 2k = rows 0 and 3, 8k = rows 2 and 5.
  auto two = load({kFix}, "longproc_travel_planning_2k:sample=all");  // source=auto finds the GitHub layout
  EXPECT_EQ(two[1].meta["file_index"], 3);
  EXPECT_EQ(two[1].meta["item"]["ground_truth_cities"], "Madrid**Porto**Lisbon**Seville");
  // The HF rows remain selectable.
  auto hf = load({kFix}, "longproc_travel_planning_2k:sample=all,source=hf");
  EXPECT_EQ(hf[0].messages[0].content, "TASK:\nPlan trip 0 {rendered}");
}

TEST(TravelPlanning, DemonstrationOfTheRealIclExamples) {
  // The real ICL file (the LongProc data in tests/data): every example's search must reproduce its
  // ground_truth_plan, and the text must equal the Python rendering.
  const std::string p = kvb::test::test_data("datasets/longproc/travel_planning/travel_planning_icl_examples.json");
  KVB_REQUIRE_TEST_DATA("datasets/longproc/travel_planning/travel_planning_icl_examples.json");
  auto icl = read_json(p);
  ASSERT_EQ(icl.size(), 4u);
  EXPECT_EQ(travel_demonstration(icl, p), gold()["demonstration"].get<std::string>());
  auto t = travel_trace(icl[0], "icl[0]");
  EXPECT_EQ(t.plan,
            "**Day 1-5:** Arriving in Helsinki and visit Helsinki for 5 days.\n**Day 5:** Fly from Helsinki to Barcelona.\n"
            "**Day 5-9:** Visit Barcelona for 5 days.\n**Day 9:** Fly from Barcelona to Florence.\n"
            "**Day 9-14:** Visit Florence for 6 days.");
  EXPECT_EQ(t.search_log.rfind("Read the requirements and identify", 0), 0u);
  EXPECT_NE(t.procedure.find("</Solving Procedure>\n\nOutput the plan in the required format:\n<Plan>\n**Day 1-5:**"),
            std::string::npos);
}

TEST(TravelPlanning, BadRowsNameFileElementAndField) {
  fs::path dir = tmp_dir("travel_bad");
  fs::path tp = dir / "longproc/travel_planning";
  fs::create_directories(tp);
  for (const char* f : {"prompts.yaml", "travel_planning_icl_examples.json"})
    fs::copy_file(kFix + "/longproc/travel_planning/" + f, tp / f, fs::copy_options::overwrite_existing);
  auto rows = read_json(kFix + "/longproc/travel_planning/travel_planning_all.json");
  rows[0]["ground_truth_plan"] = "Here is the plan:\n\n**Day 1-5:** Arriving in Oslo and visit Oslo for 5 days.";
  rows[3].erase("estimated_output_tokens");
  std::ofstream(tp / "travel_planning_all.json") << rows.dump();
  std::string file = (tp / "travel_planning_all.json").string();
  std::string m = error_of([&] { load({dir.string()}, "longproc_travel_planning_2k:sample=all"); });
  EXPECT_NE(m.find(file + ": element 0: field 'ground_truth_plan': the search finds a different plan"), std::string::npos)
      << m;
  datasets::BadRecords skip;
  skip.mode = datasets::OnBad::kSkip;
  auto ex = load({dir.string()}, "longproc_travel_planning_2k:sample=all", &skip);
  EXPECT_EQ(ex.size(), 0u);  // row 0 wrong plan, row 3 without estimated_output_tokens
  ASSERT_EQ(skip.skipped.size(), 2u);
  EXPECT_NE(skip.skipped[1].find("element 3: missing field 'estimated_output_tokens'"), std::string::npos)
      << skip.skipped[1];
  // A broken ICL file breaks every prompt: always an error naming it, even in skip mode.
  auto icl = read_json(kFix + "/longproc/travel_planning/travel_planning_icl_examples.json");
  icl[1]["connected_cities"] = nlohmann::json::array();  // no flights: no plan
  std::ofstream(tp / "travel_planning_icl_examples.json") << icl.dump();
  datasets::BadRecords skip2;
  skip2.mode = datasets::OnBad::kSkip;
  m = error_of([&] { load({dir.string()}, "longproc_travel_planning_8k:sample=all", &skip2); });
  EXPECT_NE(m.find("travel_planning_icl_examples.json: element 1: no trip plan satisfies the constraints"), std::string::npos)
      << m;
}

TEST(LongBenchZip, TasksReadFromDataZipEqualTheExtractedFiles) {
  const auto& fixture_gold = read_json(src("tests/fixtures/tasks/fixture_prompts.json"));
  for (const char* spec : {"hotpotqa", "trec", "lcc", "repobench-p", "multifieldqa_zh", "samsum", "hotpotqa:e=1"}) {
    std::string name = std::string("longbench_") + spec;
    auto from_zip = load({kZipMirror}, name);
    auto extracted = load({kFix}, name);
    ASSERT_EQ(from_zip.size(), extracted.size()) << spec;
    for (size_t i = 0; i < from_zip.size(); ++i) EXPECT_EQ(to_json(from_zip[i]), to_json(extracted[i])) << spec;
    EXPECT_EQ(from_zip[0].messages[0].content, fixture_gold[name]["prompt"].get<std::string>()) << spec;
  }
  // --limit stops the stream early.
  datasets::DataLocator loc({kZipMirror});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  ctx.limit = 1;
  EXPECT_EQ(make_task("longbench_hotpotqa")->load_all(ctx).size(), 1u);
}

TEST(LongBenchZip, MissingMemberOrNoDataIsOneClearError) {
  std::string zip = kZipMirror + "/longbench/data.zip";
  std::string m = error_of([&] { load({kZipMirror}, "longbench_qasper"); });
  EXPECT_NE(m.find(zip + ": member 'data/qasper.jsonl' not found"), std::string::npos) << m;
  fs::path empty = tmp_dir("lb_empty");
  m = error_of([&] { load({empty.string()}, "longbench_qasper"); });
  EXPECT_NE(m.find("task longbench_qasper: no data: longbench/data.zip: not found in data directories [" +
                   empty.string() + "]; run `kvbench datasets fetch longbench"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("(an extracted longbench/data/qasper.jsonl is read too)"), std::string::npos) << m;
  // A truncated download in the mirror.
  fs::path trunc = tmp_dir("lb_trunc");
  fs::create_directories(trunc / "longbench");
  {
    std::ifstream in(zip, std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(trunc / "longbench/data.zip", std::ios::binary) << b.substr(0, b.size() * 2 / 3);
  }
  m = error_of([&] { load({trunc.string()}, "longbench_trec"); });
  EXPECT_NE(m.find((trunc / "longbench/data.zip").string() + ": not a readable ZIP archive"), std::string::npos) << m;
}

TEST(LongBenchZip, DataZipFromTheHuggingFaceCache) {
  // data.zip as huggingface_hub caches it (refs/main → commit, snapshots/<commit>/data.zip),
  // resolved offline by the hub client when no data dir has the file.
  fs::path cache = tmp_dir("hf_cache");
  const std::string commit(40, 'a');
  fs::path repo = cache / "datasets--THUDM--LongBench";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / commit);
  std::ofstream(repo / "refs/main") << commit;
  fs::copy_file(kZipMirror + "/longbench/data.zip", repo / "snapshots" / commit / "data.zip",
                fs::copy_options::overwrite_existing);
  datasets::HubConfig cfg;
  cfg.cache_dir = cache.string();
  cfg.offline = true;
  datasets::HubClient hub(cfg);
  auto ex = load({tmp_dir("lb_none").string()}, "longbench_trec", nullptr, &hub);
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].references, std::vector<std::string>{"Definition of something"});
}

namespace {

std::string run_cli(const std::string& cmd) { return ::kvb::test::run_command(cmd).out; }

std::string line_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (l.find(needle) != std::string::npos) return l;
  return "";
}

}  // namespace

TEST(DatasetsCli, ListAndTasksShowTheNewPieces) {
  KVB_REQUIRE_BINARY();
  fs::path cache = tmp_dir("cli_cache");
  const std::string commit(40, 'c');
  fs::path repo = cache / "datasets--THUDM--LongBench";
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs/main") << commit;
  fs::copy_file(kZipMirror + "/longbench/data.zip", repo / "snapshots" / commit / "data.zip",
                fs::copy_options::overwrite_existing);
  const std::string env = "env -u KVB_DATA_DIR HF_HUB_CACHE=" + cache.string() + " ";

  std::string list = run_cli(env + KVB_BINARY + " datasets list --data-dir " + kFix);
  std::string head = line_with(list, "benchmark");
  std::string icl = line_with(list, "longproc/travel_planning/travel_planning_icl_examples.json");
  ASSERT_FALSE(icl.empty()) << list;
  EXPECT_EQ(head.find("benchmark"), icl.find("longproc ")) << head << "\n" << icl;  // columns line up
  EXPECT_NE(icl.find(kFix + "/longproc/travel_planning/travel_planning_icl_examples.json"), std::string::npos) << icl;
  EXPECT_NE(line_with(list, "travel_planning_all.json").find(kFix + "/longproc/travel_planning/travel_planning_all.json"),
            std::string::npos);
  std::string zip = line_with(list, "longbench/data.zip");
  EXPECT_NE(zip.find((repo / "snapshots" / commit / "data.zip").string() + " (HF cache)"), std::string::npos) << zip;

  std::string tasks = run_cli(env + KVB_BINARY + " tasks longproc_travel_planning_2k longproc_travel_planning_8k");
  std::string t2 = line_with(tasks, "longproc_travel_planning_2k");
  EXPECT_NE(t2.find(" 769 "), std::string::npos) << tasks;
  EXPECT_NE(t2.find("0 <= estimated_output_tokens < 2048"), std::string::npos) << t2;
  EXPECT_NE(line_with(tasks, "longproc_travel_planning_8k").find(" 239 "), std::string::npos) << tasks;

  std::string counted = run_cli(env + KVB_BINARY +
                                " tasks longproc_travel_planning_2k:sample=all "
                                "longproc_travel_planning_8k:sample=all --count --data-dir " +
                                kFix);
  EXPECT_NE(line_with(counted, "longproc_travel_planning_2k:sample=all").find(" 2 "), std::string::npos) << counted;
  EXPECT_NE(line_with(counted, "longproc_travel_planning_8k:sample=all").find(" 2 "), std::string::npos) << counted;
  // LongBench from the cached data.zip (offline): counts from the archive's members.
  std::string lb =
      run_cli(env + "HF_HUB_OFFLINE=1 " + KVB_BINARY + " tasks --download --count longbench_hotpotqa longbench_trec");
  EXPECT_NE(line_with(lb, "longbench_hotpotqa ").find(" 2 "), std::string::npos) << lb;
  EXPECT_NE(line_with(lb, "longbench_trec ").find(" 1 "), std::string::npos) << lb;
}
