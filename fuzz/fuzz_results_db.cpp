// Results databases (results/store.h): the input is written as a SQLite file and opened the way
// `grade`/`report`/`compare` open one (read-only: runs, samples, grading work, the judge cache,
// run references), then merged into a fresh output the way `merge` reads its inputs. SQLite's
// own corruption checks answer garbage; the target exercises kvbench's loaders on the values a
// damaged or hand-edited database can hold (NULLs, wrong column types, broken JSON columns).
#include <filesystem>

#include "fuzz/fuzz_support.h"
#include "results/grid.h"
#include "results/store.h"

// Seeds an empty corpus directory (libFuzzer's first non-flag argument) with a small, valid
// results database: one finished run, two graded samples (one ungraded), a cached verdict.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  namespace fs = std::filesystem;
  for (int i = 1; i < *argc; ++i) {
    const std::string dir = (*argv)[i];
    if (dir.empty() || dir[0] == '-' || !fs::is_directory(dir)) continue;
    if (!fs::is_empty(dir)) return 0;
    using namespace kvb::results;
    const std::string seed = dir + "/seed.db";
    {
      Store s(seed);
      GridSpec g;
      g.models = {{"m", "rev"}};
      g.policies = {{"full", nlohmann::json::object(), false, ""}, {"snapkv", {{"window", 8}}, true, ""}};
      g.budgets = {64};
      g.examples = {{"math", "ex0", "What is 1+1?"}};
      const auto items = expand_grid(g);
      RunInfo info;
      info.name = "seed";
      info.config = {{"suite", "math"}};
      info.models = {{"m", "rev", std::string(64, 'a')}};
      info.run_key = default_run_key(info);
      const int64_t run = s.begin_run(info);
      s.add_work_items(items);
      std::vector<GenerationRecord> gens;
      std::vector<GradeRecord> grades;
      for (const auto& it : items) {
        GenerationRecord gen;
        gen.item_key = it.key;
        gen.text = "2";
        gen.finish_reason = "stop";
        gens.push_back(gen);
        GradeRecord gr;
        gr.item_key = it.key;
        if (gens.size() == 1) gr.score = 1.0;
        else gr.ungraded = true;
        gr.grader = "math/1";
        grades.push_back(gr);
      }
      s.write_batch(run, gens, grades);
      s.judge_put({"0", "openai:m", "{}", "yes", 1.0, "default"});
      s.end_run(run);
    }
    return 0;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvb::fuzz::scratch_file(data, size, "in.db");
  for (const char* side : {"-wal", "-shm"}) std::filesystem::remove(path + side);
  kvb::fuzz::expect_ok_or_error([&] {
    kvb::results::Store s(path, kvb::results::Store::Mode::kReadOnly);
    (void)s.runs();
    (void)s.samples();
    (void)s.to_grade(std::nullopt, false);
    (void)s.to_grade_failed(std::nullopt);
    (void)s.judge_get("0");
    for (const char* ref : {"latest", "previous", "1", "deadbeefdeadbeef"}) {
      try {
        (void)s.resolve_run(ref);
      } catch (const kvb::Error&) {
      }
    }
  });
  const std::string out = std::filesystem::path(path).parent_path() / "out.db";
  for (const char* side : {"", "-wal", "-shm"}) std::filesystem::remove(out + side);
  return kvb::fuzz::expect_ok_or_error([&] { kvb::results::Store::merge(out, {path}); });
}
