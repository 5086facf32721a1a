// `kvbench tasks`: lists the benchmark tasks (name, examples, grader, source) or the tasks of a
// suite; `--count` loads the data to count examples, `--show N` prints the first N examples of
// the named tasks as JSON lines (the exact prompts), `--suites` lists the built-in suites.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "datasets/hub.h"
#include "datasets/records.h"
#include "datasets/registry.h"
#include "engine/util/error.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "tasks/suite.h"
#include "tasks/task.h"

namespace kvb::cli {

namespace {

struct TasksArgs {
  std::vector<std::string> names;
  std::string suite;
  std::vector<std::string> data_dirs;
  bool count = false;
  bool suites = false;
  bool download = false;
  size_t show = 0;
  std::string on_bad = "fail";
};

void run_tasks(const TasksArgs& a) {
  if (a.suites) {
    for (const auto& n : tasks::builtin_suites()) {
      auto s = tasks::load_suite(n);
      std::printf("%-10s %3zu tasks  %s\n", n.c_str(), s.tasks.size(), s.description.c_str());
    }
    return;
  }
  std::vector<std::string> specs = a.names;
  std::vector<size_t> limits(specs.size(), 0);
  if (!a.suite.empty()) {
    auto s = tasks::load_suite(a.suite);
    for (const auto& t : s.tasks) {
      specs.push_back(t.spec);
      limits.push_back(t.limit);
    }
  }
  // Tasks named on the command line or by a suite must load under --count; the whole catalogue
  // (no names) lists datasets that are simply not mirrored here as "missing".
  const bool named = !specs.empty();
  if (specs.empty()) {
    specs = tasks::task_names();
    limits.assign(specs.size(), 0);
  }
  std::vector<std::unique_ptr<tasks::Task>> made;  // every spec is checked before any output
  for (const auto& spec : specs) made.push_back(tasks::make_task(spec));
  std::vector<std::string> dirs = a.data_dirs;
  for (const auto& d : datasets::default_data_dirs()) dirs.push_back(d);
  std::unique_ptr<datasets::HubClient> hub;
  if (a.download) hub = std::make_unique<datasets::HubClient>(datasets::HubConfig::from_env());
  datasets::DataLocator loc(dirs, hub.get());
  datasets::BadRecords bad;
  bad.mode = datasets::parse_on_bad(a.on_bad);
  tasks::TaskContext ctx;
  ctx.locate = [&loc](const std::string& k) { return loc.locate(k); };
  ctx.bad = &bad;

  int failed = 0;
  if (a.show) {
    for (size_t i = 0; i < specs.size(); ++i) {
      auto& task = made[i];
      ctx.limit = a.show;
      task->load(ctx, [](tasks::Example&& e) {
        std::printf("%s\n", tasks::to_json(e).dump().c_str());
        return true;
      });
    }
  } else {
    std::printf("%-34s %9s  %-34s %s\n", "task", "examples", "grader", "source");
    for (size_t i = 0; i < specs.size(); ++i) {
      auto& task = made[i];
      const auto& info = task->info();
      std::string n = info.expected_count ? std::to_string(*info.expected_count) : "?";
      if (a.count) {
        ctx.limit = limits[i];
        try {
          n = std::to_string(task->load(ctx, [](tasks::Example&&) { return true; }));
        } catch (const Error& e) {
          n = named ? "error" : "missing";
          std::fprintf(stderr, "kvbench: %s%s: %s\n", named ? "error: " : "", specs[i].c_str(), e.what());
          failed += named;
        }
      } else if (limits[i] && info.expected_count) {
        n = std::to_string(std::min(limits[i], *info.expected_count));
      }
      std::printf("%-34s %9s  %-34s %s\n", specs[i].c_str(), n.c_str(), info.grader.c_str(), info.source.c_str());
    }
  }
  for (const auto& s : bad.skipped) std::fprintf(stderr, "kvbench: skipped: %s\n", s.c_str());
  std::fflush(stdout);
  if (failed) throw CLI::RuntimeError(2);  // the error lines above say which tasks and why
}

}  // namespace

void register_tasks(CLI::App& app) {
  auto a = std::make_shared<TasksArgs>();
  auto* c = app.add_subcommand("tasks", "List benchmark tasks (name, examples, grader, source) or show their prompts");
  c->add_option("names", a->names, "task specs (name[:key=value,...]); default: all tasks");
  c->add_option("--suite", a->suite, "a built-in suite name or a suite YAML file");
  c->add_option("--data-dir", a->data_dirs,
                "local data mirror(s) laid out as docs/benchmarks.md describes (also $KVB_DATA_DIR); repeatable")
      ->allow_extra_args(false);  // `--data-dir D gsm8k`: gsm8k is a task, not a second folder
  c->add_flag("--count", a->count, "load the data and count the examples");
  c->add_option("--show", a->show, "print the first N examples of each task as JSON lines")->check(non_negative());
  c->add_flag("--suites", a->suites, "list the built-in suites");
  c->add_flag("--download", a->download, "fetch Hub-hosted files that are not in the data dirs (HF cache)");
  c->add_option("--on-bad-example", a->on_bad, "skip or fail (default) on a malformed record")
      ->check(CLI::IsMember({"skip", "fail"}));
  c->callback([a] { run_tasks(*a); });
}

}  // namespace kvb::cli
