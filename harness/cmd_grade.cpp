// `kvbench grade`: re-scores stored generations without generating. The examples of each run
// are re-loaded from its recorded task specs and data directories; rule-based graders and the
// LLM judge run as in `kvbench run` (harness/judge_grading.h), and each chunk of grades is
// committed before the next, so an interrupted re-grade keeps what it finished.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/commands.h"
#include "harness/input_identity.h"
#include "harness/judge_grading.h"
#include "harness/run_grid.h"
#include "results/store.h"

namespace kvb::cli {

namespace {

struct GradeArgs {
  std::string db = "kvbench.db", run;
  bool regrade = false, retry_failed = false, strict = false;
  JudgeArgs judge;
};

void grade_main(const GradeArgs& a) {
  // Grading reads results that must exist: a mistyped --db is an error, not a new empty file.
  if (!file_exists(a.db)) fail("{}: no such results database (grade needs the --db a run wrote)", a.db);
  if (a.regrade && a.retry_failed) fail("grade: --regrade and --retry-failed exclude each other");
  std::unique_ptr<graders::Judge> judge = make_judge(a.judge);  // null without --judge
  results::Store store(a.db);
  std::optional<int64_t> run_id;
  if (!a.run.empty()) run_id = store.resolve_run(a.run);
  auto todo = a.retry_failed ? store.to_grade_failed(run_id) : store.to_grade(run_id, a.regrade);
  // Re-load the examples of each run from its recorded task specs and data directories.
  std::map<int64_t, LoadedTasks> loaded;
  for (const auto& r : store.runs()) {
    if (run_id && r.run_id != *run_id) continue;
    auto cfg = nlohmann::json::parse(r.config_json, nullptr, false);
    if (cfg.is_discarded() || !cfg.contains("tasks")) continue;
    std::vector<tasks::SuiteTask> sts;
    for (const auto& t : cfg["tasks"]) {
      tasks::SuiteTask st;
      st.spec = t.value("spec", "");
      st.limit = t.value("limit", 0);
      sts.push_back(st);
    }
    loaded[r.run_id] = load_tasks(sts, cfg.value("data_dirs", std::vector<std::string>{}), 0, "skip");
  }
  // Grades come from the dataset files the run read: one changed since is refused, naming it
  // (runs stored before schema v5 recorded no hashes and are not checked).
  std::set<int64_t> to_check;
  for (const auto& tg : todo) to_check.insert(tg.run_id);
  for (const int64_t rid : to_check) {
    auto lit = loaded.find(rid);
    if (lit == loaded.end()) continue;
    std::vector<results::RunInput> recorded;
    for (auto& in : store.run_inputs(rid))
      if (in.role == "dataset") recorded.push_back(std::move(in));
    if (recorded.empty()) continue;
    if (auto change = results::describe_input_change(recorded, dataset_inputs(lit->second), rid))
      fail("{} in {}; grading run {} against other data would mix inputs: restore the file", *change, a.db, rid);
  }
  size_t n = 0, n_ungraded = 0;
  std::string first_ungraded;
  std::map<int64_t, std::vector<GradeJob>> jobs;
  for (const auto& tg : todo) {
    auto lit = loaded.find(tg.run_id);
    if (lit == loaded.end()) continue;
    const tasks::Example* ex = nullptr;
    for (auto& [spec, exs] : lit->second.examples)
      for (const auto& e : exs)
        if (e.task == tg.item.task && e.id == tg.item.example_id) ex = &e;
    if (!ex) {
      std::fprintf(stderr, "kvbench: grade: example %s of task %s not found; left ungraded\n",
                   tg.item.example_id.c_str(), tg.item.task.c_str());
      continue;
    }
    jobs[tg.run_id].push_back({tg.item.key, ex, tg.text, tg.turn_texts});
  }
  // Chunks of 64: each chunk's judge requests run concurrently and its grades are committed
  // before the next, so an interrupted re-grade keeps what it finished.
  for (auto& [rid, js] : jobs) {
    for (size_t s = 0; s < js.size(); s += 64) {
      std::vector<GradeJob> chunk(js.begin() + s, js.begin() + std::min(js.size(), s + 64));
      auto grades = grade_jobs(chunk, judge.get(), store);
      for (const auto& g : grades)
        if (g.ungraded) {
          ++n_ungraded;
          if (first_ungraded.empty()) first_ungraded = g.reason;
        }
      n += grades.size();
      store.write_grades(rid, grades);
    }
  }
  std::printf("graded %zu generations in %s (%zu ungraded)\n", n, a.db.c_str(), n_ungraded);
  warn_ungraded(n_ungraded, n, first_ungraded, a.db, a.strict);
}

}  // namespace

void register_grade(CLI::App& app) {
  auto g = std::make_shared<GradeArgs>();
  CLI::App* gc = app.add_subcommand("grade", "Re-score stored generations without generating");
  gc->add_option("--db", g->db, "Results database");
  gc->add_option("--run", g->run, "Only this run (id, name, latest, ...)");
  gc->add_flag("--strict", g->strict, "Exit 1 when any generation is left ungraded");
  gc->add_flag("--regrade", g->regrade, "Re-grade every generation, not only ungraded ones");
  gc->add_flag("--retry-failed", g->retry_failed,
               "Re-grade only generations whose grade is ungraded (failed judge requests, grader errors)");
  add_judge_options(gc, g->judge);
  gc->callback([g] { grade_main(*g); });
}

}  // namespace kvb::cli
