// Prompt builders of the benchmarks without an offline copy (LongBench, LongBench v2, SCBench,
// LongMemEval, the missing LongProc files), run on small fixtures written from the documented
// schemas (tests/fixtures/datasets/, made by tools/gen_task_goldens.py) and compared with the
// prompts the same script renders with the reference templates and Python string operations.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include <regex>
#include <nlohmann/json.hpp>

#include "datasets/registry.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/test_support.h"
#include "tasks/suite.h"
#include "tasks/task.h"

using namespace kvb;
using namespace kvb::tasks;

namespace {

std::string fixtures() { return std::string(KVB_SOURCE_DIR) + "/tests/fixtures/datasets"; }

const nlohmann::json& goldens() {
  static nlohmann::json g = [] {
    std::ifstream in(std::string(KVB_SOURCE_DIR) + "/tests/fixtures/tasks/fixture_prompts.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}

std::vector<Example> load(const std::string& spec, datasets::BadRecords* bad = nullptr) {
  datasets::DataLocator loc({fixtures()});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  ctx.bad = bad;
  return make_task(spec)->load_all(ctx);
}

}  // namespace

TEST(FixtureTasks, LongBenchPromptsFlagsAndContextSplit) {
  for (const char* spec : {"hotpotqa", "trec", "lcc", "repobench-p", "multifieldqa_zh", "samsum", "hotpotqa:e=1"}) {
    const auto& g = goldens()[std::string("longbench_") + spec];
    auto ex = load(std::string("longbench_") + spec);
    ASSERT_EQ(ex.size(), g["count"].get<size_t>()) << spec;
    EXPECT_EQ(ex[0].messages.at(0).content, g["prompt"].get<std::string>()) << spec;
    EXPECT_EQ(ex[0].references, g["references"].get<std::vector<std::string>>()) << spec;
    EXPECT_EQ(ex[0].context_chars, g["context_bytes"].get<size_t>()) << spec;
  }
  auto trec = load("longbench_trec");
  EXPECT_FALSE(trec[0].use_chat_template);
  EXPECT_EQ(trec[0].grader, "longbench.classification");
  EXPECT_EQ(trec[0].meta["all_classes"].size(), 2u);
  EXPECT_TRUE(trec[0].meta["first_line"].get<bool>());
  EXPECT_EQ(trec[0].max_new_tokens, 64);
  auto hp = load("longbench_hotpotqa");
  EXPECT_TRUE(hp[0].use_chat_template);
  EXPECT_EQ(hp[0].max_new_tokens, 32);
  EXPECT_EQ(hp[1].meta["length_bucket"], "4-8k");
  EXPECT_EQ(hp[0].id, "longbench_hotpotqa/hp0");
  EXPECT_EQ(load("longbench_samsum")[0].stop, std::vector<std::string>{"\n"});
  EXPECT_THROW(make_task("longbench_narrativeqa:e=1"), Error);  // not in LongBench-E
}

TEST(FixtureTasks, LongBenchV2PlainAndCot) {
  auto ex = load("longbench_v2");
  const auto& g = goldens()["longbench_v2"];
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].messages[0].content, g["prompt"].get<std::string>());
  EXPECT_EQ(ex[0].references, std::vector<std::string>{"B"});
  EXPECT_EQ(ex[0].max_new_tokens, 128);
  EXPECT_EQ(ex[0].grader, "longbench_v2.choice");
  EXPECT_EQ(ex[0].meta["difficulty"], "easy");
  EXPECT_EQ(ex[0].meta["length"], "short");
  auto cot = load("longbench_v2:cot=1");
  const auto& gc = goldens()["longbench_v2:cot=1"];
  EXPECT_EQ(cot[0].messages[0].content, gc["prompt"].get<std::string>());
  ASSERT_EQ(cot[0].followups.size(), 1u);
  EXPECT_EQ(cot[0].followups[0].user, gc["step2"].get<std::string>());
  EXPECT_EQ(cot[0].max_new_tokens, 1024);
  EXPECT_EQ(cot[0].followups[0].max_new_tokens, 128);
  EXPECT_EQ(cot[0].followups[0].meta["substitute_previous_output"], "$COT$");
}

TEST(FixtureTasks, ScBenchAllTwelveMultiTurnWithGoldenHistory) {
  size_t n = 0;
  for (const auto& [key, g] : goldens().items()) {
    if (key.rfind("scbench_", 0) != 0) continue;
    ++n;
    auto ex = load(key);
    ASSERT_EQ(ex.size(), 1u) << key;
    EXPECT_EQ(ex[0].messages.at(0).content, g["prompt"].get<std::string>()) << key;
    EXPECT_EQ(ex[0].context_chars, g["context_bytes"].get<size_t>()) << key;
    const auto& fu = g["followups"];
    ASSERT_EQ(ex[0].followups.size(), fu.size()) << key;
    std::vector<std::string> hist = {ex[0].gold_history};
    for (size_t i = 0; i < fu.size(); ++i) {
      EXPECT_EQ(ex[0].followups[i].user, fu[i].get<std::string>()) << key << " turn " << i + 1;
      hist.push_back(ex[0].followups[i].gold_history);
    }
    hist.pop_back();
    EXPECT_EQ(hist, g["gold_history"].get<std::vector<std::string>>()) << key;
    EXPECT_TRUE(ex[0].golden_history);
    EXPECT_FALSE(ex[0].grader.empty()) << key;
  }
  EXPECT_EQ(n, 12u);
  auto ce = load("scbench_choice_eng");
  EXPECT_EQ(ce[0].references, (std::vector<std::string>{"Tom", "B"}));
  EXPECT_EQ(ce[0].followups[0].references, (std::vector<std::string>{"Home", "A"}));
  auto sn = load("scbench_summary_with_needles");
  EXPECT_EQ(sn[0].max_new_tokens, 800);
  EXPECT_EQ(sn[0].grader, "scbench_rouge_lsum");
  EXPECT_EQ(sn[0].followups[0].max_new_tokens, 15);
  EXPECT_EQ(sn[0].followups[0].grader, "scbench_passkey");
  auto vt = load("scbench_vt");
  EXPECT_EQ(vt[0].references, (std::vector<std::string>{"A", "B"}));
  auto mf = load("scbench_mf");
  EXPECT_EQ(mf[0].references, std::vector<std::string>{"5"});
  EXPECT_EQ(mf[0].max_new_tokens, 5);
}

TEST(FixtureTasks, LongMemEvalReadingPrompts) {
  for (const char* opt : {"", ":cot=0", ":format=nl"}) {
    const auto& g = goldens()[std::string("longmemeval_s") + opt];
    auto ex = load(std::string("longmemeval_s") + opt);
    ASSERT_EQ(ex.size(), 2u);
    EXPECT_EQ(ex[0].messages[0].content, g["prompt"].get<std::string>()) << opt;
    EXPECT_EQ(ex[0].context_chars, g["context_bytes"].get<size_t>()) << opt;
    EXPECT_EQ(ex[0].references, g["references"].get<std::vector<std::string>>());
  }
  auto ex = load("longmemeval_m");
  EXPECT_EQ(ex[0].grader, "judge_longmemeval");
  EXPECT_EQ(ex[0].max_new_tokens, 800);
  EXPECT_FALSE(ex[0].meta["abstention"].get<bool>());
  EXPECT_TRUE(ex[1].meta["abstention"].get<bool>());
  EXPECT_EQ(ex[1].meta["question_type"], "temporal-reasoning");
  EXPECT_EQ(load("longmemeval_oracle").size(), 2u);
}

TEST(FixtureTasks, LongProcMissingFilesFromFixtures) {
  // GitHub-schema fixtures for path_traversal 2k/8k and tom_tracking 8k.
  auto pt = load("longproc_path_traversal_8k:sample=all");
  ASSERT_EQ(pt.size(), 1u);
  EXPECT_NE(pt[0].messages[0].content.find("Now find the route from Lille to Bromsgrove"), std::string::npos);
  EXPECT_EQ(pt[0].references[0], "From Lille, take a bus to Bromsgrove.");
  EXPECT_EQ(pt[0].max_new_tokens, 10240);
  EXPECT_EQ(load("longproc_path_traversal_2k:sample=all")[0].max_new_tokens, 3072);
  auto tom = load("longproc_tom_tracking_8k:sample=all");
  EXPECT_NE(tom[0].messages[0].content.find("[STORY]\nStep 0: A is in the den.\n\n[QUESTION]\nWhere is A?"),
            std::string::npos);
  // HF rows (travel planning, whose GitHub layout is tested in test_travel_zip_tasks.cpp;
  // tom_tracking 8k with source=hf).
  auto tp = load("longproc_travel_planning_2k:sample=all,source=hf");
  ASSERT_EQ(tp.size(), 2u);
  EXPECT_EQ(tp[0].messages[0].content, "TASK:\nPlan trip 0 {rendered}");
  EXPECT_EQ(tp[1].references[0], "<Plan>p1</Plan>");
  EXPECT_EQ(tp[0].meta["item"]["ground_truth_cities"], "A**B");
  EXPECT_EQ(tp[0].grader, "longproc_travel_planning");
  auto th = load("longproc_tom_tracking_8k:sample=all,source=hf");
  EXPECT_EQ(th[0].messages[0].content, "rendered ToM prompt");
  // HELMET sampling needs a precomputed order for the row count.
  EXPECT_THROW(load("longproc_travel_planning_8k"), Error);
}

TEST(FixtureTasks, OnBadExampleSkipOrFail) {
  // A fixture copy with a malformed line and a record missing a field.
  std::string dir = ::testing::TempDir() + "kvb_badlb";
  std::filesystem::create_directories(dir + "/longbench/data");
  std::ofstream(dir + "/longbench/data/hotpotqa.jsonl")
      << "{\"input\": \"q\", \"context\": \"c\", \"answers\": [\"a\"], \"_id\": \"x\"}\n"
      << "{\"input\": \n"
      << "{\"context\": \"c\", \"answers\": [\"a\"], \"_id\": \"y\"}\n"
      << "{\"input\": \"q2\", \"context\": \"c\", \"answers\": [\"b\"], \"_id\": \"z\"}\n";
  datasets::DataLocator loc({dir});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  try {
    make_task("longbench_hotpotqa")->load_all(ctx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hotpotqa.jsonl: line 2: invalid JSON"), std::string::npos) << e.what();
  }
  datasets::BadRecords bad;
  bad.mode = datasets::OnBad::kSkip;
  ctx.bad = &bad;
  auto ex = make_task("longbench_hotpotqa")->load_all(ctx);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[1].id, "longbench_hotpotqa/z");
  ASSERT_EQ(bad.skipped.size(), 2u);
  EXPECT_NE(bad.skipped[1].find("hotpotqa.jsonl: line 3: missing field 'input'"), std::string::npos) << bad.skipped[1];
}

TEST(Suites, BuiltinSuitesParseAndNameRealTasks) {
  auto names = builtin_suites();
  EXPECT_EQ(names, (std::vector<std::string>{"longctx", "longproc", "math", "smoke"}));
  auto math = load_suite("math");
  ASSERT_EQ(math.tasks.size(), 4u);
  EXPECT_EQ(math.tasks[0].spec, "aime24");
  EXPECT_EQ(math.tasks[0].samples, 64);
  EXPECT_EQ(math.tasks[2].sampling["temperature"], 0.6);
  auto smoke = load_suite("smoke");
  EXPECT_EQ(smoke.tasks[0].spec, "smoke");
  EXPECT_EQ(smoke.tasks[0].limit, 8u);
  EXPECT_EQ(*smoke.tasks[0].max_new_tokens, 48);
  EXPECT_THROW(load_suite("nope"), Error);
}

TEST(Suites, UserSuiteFileAndErrors) {
  auto s = parse_suite(
      "name: mine\nsampling: {temperature: 0.7}\nbudgets: [128, 256]\ntasks:\n"
      "  - gsm8k\n  - {task: 'math500:template=rkv', samples: 4, sampling: {top_p: 0.9}}\n",
      "mine.yaml");
  EXPECT_EQ(s.name, "mine");
  EXPECT_EQ(s.budgets, (std::vector<long long>{128, 256}));
  EXPECT_EQ(s.tasks[1].spec, "math500:template=rkv");
  EXPECT_EQ(s.tasks[1].samples, 4);
  EXPECT_EQ(s.tasks[1].sampling["temperature"], 0.7);
  EXPECT_EQ(s.tasks[1].sampling["top_p"], 0.9);
  try {
    parse_suite("tasks:\n  - gsm8k\n  - {task: gsm9k}\n", "bad.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml: tasks[1]: unknown task 'gsm9k'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_suite("tasks:\n  - {task: gsm8k, sample: 3}\n", "t.yaml"), Error);
  // A task's own models, budgets and policies (this task on this model); absent: the run's.
  auto own = parse_suite(
      "tasks:\n  - smoke\n  - {task: gsm8k, models: [qwen2.5-coder-1.5b-instruct], budgets: [256], "
      "policies: [full, 'snapkv:buffer=64']}\n",
      "own.yaml");
  EXPECT_TRUE(own.tasks[0].models.empty() && own.tasks[0].budgets.empty() && own.tasks[0].policies.empty());
  EXPECT_EQ(own.tasks[1].models, std::vector<std::string>{"qwen2.5-coder-1.5b-instruct"});
  EXPECT_EQ(own.tasks[1].budgets, std::vector<long long>{256});
  EXPECT_EQ(own.tasks[1].policies, (std::vector<std::string>{"full", "snapkv:buffer=64"}));
  for (const auto& [bad, msg] : std::vector<std::pair<std::string, std::string>>{
           {"{task: gsm8k, models: []}", "t.yaml: tasks[0]: models: empty list"},
           {"{task: gsm8k, models: m}", "t.yaml: tasks[0]: models: expected a list of strings"},
           {"{task: gsm8k, models: ['']}", "t.yaml: tasks[0]: models[0]: expected a non-empty string"},
           {"{task: gsm8k, policies: [3]}", "t.yaml: tasks[0]: policies[0]: expected a non-empty string"},
           {"{task: gsm8k, budgets: [0]}", "t.yaml: tasks[0]: budgets: expected integers in [1, 2147483647]"},
           {"{task: gsm8k, budgets: []}", "t.yaml: tasks[0]: budgets: expected at least one budget"},
           {"{task: gsm8k, model: [x]}", "t.yaml: tasks[0]: unknown key 'model'"},
       }) {
    const std::string text = "tasks:\n  - " + bad + "\n";  // not `bad` itself: clang 14 cannot capture a binding
    const std::string got = kvb::test::error_of([&] { parse_suite(text, "t.yaml"); });
    EXPECT_NE(got.find(msg), std::string::npos) << bad << ": " << got;
  }
  EXPECT_THROW(parse_suite("tasks:\n  - gsm8k:template=nope\n", "t.yaml"), Error);
  EXPECT_THROW(make_task("gsm8k:color=red"), Error);
}

TEST(TaskRegistry, SmokeTaskIsBuiltInAndGradedByMath) {
  auto t = make_task("smoke");
  TaskContext ctx;
  ctx.locate = [](const std::string& k) -> std::string { throw Error("smoke must not read files: " + k); };
  auto ex = t->load_all(ctx);
  ASSERT_EQ(ex.size(), 8u);
  EXPECT_EQ(ex[0].grader, "math");
  EXPECT_EQ(ex[0].references, std::vector<std::string>{"56"});
  EXPECT_NE(ex[5].messages[0].content.find("Passage:"), std::string::npos);
}

// smoke:extra=N: the 8 written problems, then N generated ones whose answers follow from their
// own text, pinned (nightly runs pair by prompt hash, so the generator must never change).
TEST(TaskRegistry, SmokeExtraProblemsAreFixedAndCorrect) {
  TaskContext ctx;
  ctx.locate = [](const std::string& k) -> std::string { throw Error("smoke must not read files: " + k); };
  auto ex = make_task("smoke:extra=56")->load_all(ctx);
  ASSERT_EQ(ex.size(), 64u);
  EXPECT_EQ(ex[0].references, std::vector<std::string>{"56"});  // the written ones first, unchanged
  EXPECT_EQ(ex[8].id, "smoke/8");
  EXPECT_EQ(ex[8].messages[0].content, "What is 49 plus 16?\nGive only the final answer as a number in \\boxed{}.");
  EXPECT_EQ(ex[13].messages[0].content.substr(0, 59), "There are 8 bags with 7 cards in each bag. How many cards a");
  int ops[3] = {0, 0, 0};
  const std::regex number("\\d+");
  for (size_t i = 8; i < ex.size(); ++i) {
    const std::string q = ex[i].messages[0].content;
    std::vector<long> nums;
    for (std::sregex_iterator m(q.begin(), q.end(), number), e; m != e; ++m) nums.push_back(std::stol(m->str()));
    ASSERT_GE(nums.size(), 2u) << q;
    long want;
    if (q.find(" plus ") != std::string::npos || q.find(" more.") != std::string::npos)
      want = nums[0] + nums[1], ops[0]++;
    else if (q.find(" minus ") != std::string::npos || q.find("gave away") != std::string::npos)
      want = nums[0] - nums[1], ops[1]++;
    else want = nums[0] * nums[1], ops[2]++;
    EXPECT_EQ(ex[i].references, std::vector<std::string>{std::to_string(want)}) << q;
    EXPECT_GT(want, 0) << q;
  }
  EXPECT_EQ(ops[0], 19);
  EXPECT_EQ(ops[1], 19);
  EXPECT_EQ(ops[2], 18);
  EXPECT_EQ(make_task("smoke:extra=0")->load_all(ctx).size(), 8u);
  EXPECT_THROW(make_task("smoke:extra=-1"), Error);
  EXPECT_THROW(make_task("smoke:extra=ten"), Error);
  EXPECT_THROW(make_task("smoke:color=red"), Error);
}

// Every registered task, from the registry alone (no count or list of names here: a new task
// file is covered by these tests as soon as it registers itself; docs/benchmarks.md#adding-a-benchmark-task).
TEST(TaskRegistry, EveryTaskIsMadeByNameRegistersItsDataAndIsDocumented) {
  const auto n = task_names();
  ASSERT_FALSE(n.empty());
  EXPECT_TRUE(std::is_sorted(n.begin(), n.end()));
  EXPECT_EQ(std::adjacent_find(n.begin(), n.end()), n.end()) << "a task name is registered twice";
  const std::string docs = kvb::read_file(std::string(KVB_SOURCE_DIR) + "/docs/benchmarks.md");
  for (const auto& name : n) {
    SCOPED_TRACE(name);
    auto t = make_task(name);
    const TaskInfo& info = t->info();
    EXPECT_EQ(info.name, name);
    EXPECT_FALSE(info.grader.empty());
    EXPECT_FALSE(info.benchmark.empty());
    // Every data file is in the datasets registry (built in, or declared by the task file), so
    // `kvbench datasets fetch` knows where it comes from.
    EXPECT_EQ(info.data_files.empty(), name == "smoke") << "only the built-in smoke task reads no file";
    // (A member of a registered archive or a file derived from one, e.g. longbench/data/x.jsonl
    // in longbench/data.zip, is covered by a registered file of the same benchmark folder.)
    for (const auto& key : info.data_files) {
      const std::string dir = key.substr(0, key.find('/') + 1);
      bool registered = datasets::find_source(key) != nullptr;
      for (const auto& src : datasets::sources()) registered = registered || src.key.rfind(dir, 0) == 0;
      EXPECT_TRUE(registered) << key << " is not a registered data file (nor in a registered benchmark folder)";
    }
    // docs/benchmarks.md names the task: `name`, or `sub` for `<benchmark>_<sub>[_<len>k]`.
    std::string sub = name;
    if (sub.rfind(info.benchmark + "_", 0) == 0 && sub != info.benchmark) sub = sub.substr(info.benchmark.size() + 1);
    static const std::regex kLen("_[0-9.]+k$");
    sub = std::regex_replace(sub, kLen, "");
    EXPECT_TRUE(docs.find("`" + name + "`") != std::string::npos || docs.find("`" + sub + "`") != std::string::npos)
        << "docs/benchmarks.md does not name `" << name << "` (or `" << sub << "`)";
  }
  EXPECT_THROW(make_task("no_such_task"), Error);
  auto [name, opts] = parse_task_spec("gsm8k:template=rkv,max_new_tokens=5");
  EXPECT_EQ(name, "gsm8k");
  EXPECT_EQ(opts.at("max_new_tokens"), "5");
  EXPECT_THROW(parse_task_spec("gsm8k:template"), Error);
}

// Every benchmark family (TaskInfo::benchmark) has at least one task that loads from a fixture
// (tests/fixtures/datasets/, laid out as a data mirror) or, for the benchmarks whose real files
// ship in tests/data/datasets, from those; every task that loads gives examples that carry what the
// harness needs to generate and grade them. A new family without a fixture fails here.
TEST(TaskRegistry, EveryFamilyLoadsFromAFixtureOrTheTestData) {
  KVB_REQUIRE_TEST_DATA("datasets");
  datasets::DataLocator loc({fixtures(), kvb::test::test_data("datasets")});
  TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  ctx.limit = 2;
  std::map<std::string, std::string> family_missing;  // family -> why none of its tasks loaded
  std::set<std::string> loaded_families;
  for (const auto& name : task_names()) {
    SCOPED_TRACE(name);
    auto task = make_task(name);
    const std::string family = task->info().benchmark;
    std::vector<Example> ex;
    try {
      ex = task->load_all(ctx);
    } catch (const Error& e) {
      family_missing.emplace(family, e.what());
      continue;
    }
    ASSERT_FALSE(ex.empty()) << "a fixture must hold at least one example";
    for (const auto& e : ex) {
      EXPECT_EQ(e.task, name);
      EXPECT_FALSE(e.messages.empty()) << e.id;
      EXPECT_FALSE(e.references.empty() && e.followups.empty()) << e.id;
      EXPECT_TRUE(e.max_new_tokens > 0) << e.id;
    }
    loaded_families.insert(family);
  }
  std::string all;
  for (const auto& [family, why] : family_missing)
    if (!loaded_families.count(family)) all += family + ": " + why + "\n";
  EXPECT_TRUE(all.empty()) << "benchmark families without a fixture:\n" << all;
  EXPECT_GT(loaded_families.size(), 5u);
}

// The built-in suites name registered tasks only, and the family suites cover their families.
TEST(Suites, FamilySuitesCoverEveryTaskOfTheirFamilies) {
  std::map<std::string, std::set<std::string>> family;  // benchmark -> task names
  for (const auto& name : task_names()) family[make_task(name)->info().benchmark].insert(name);
  auto names_of = [](const std::string& suite) {
    std::set<std::string> out;
    for (const auto& t : load_suite(suite).tasks) out.insert(parse_task_spec(t.spec).first);
    return out;
  };
  for (const auto& suite : builtin_suites())
    for (const auto& t : names_of(suite)) EXPECT_NO_THROW(make_task(t)) << suite << ": " << t;
  const auto longproc = names_of("longproc"), longctx = names_of("longctx");
  EXPECT_EQ(longproc, family["longproc"]);
  for (const char* b : {"scbench", "longbench"})
    for (const auto& t : family[b]) EXPECT_TRUE(longctx.count(t)) << "longctx lacks " << t;
}
