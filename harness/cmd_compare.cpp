// `kvbench compare --db FILE --baseline RUN --candidate RUN [--alpha A] [--min-drop POINTS]
// [--max-throughput-drop PCT] [--config FILE] [--missing-baseline-ok]`: a paired test per cell on the
// work items both runs share (results/compare.h), and, for two runs of one --memory, each cell's
// aggregate decode tok/s. Prints a table; exits 1 when any cell regresses significantly (or, with
// --max-throughput-drop, decodes more than PCT % slower at equal memory), 0 otherwise (2 on bad input). With --missing-baseline-ok a baseline that cannot be resolved while the
// store holds no finished run besides the candidate (a nightly's first night) prints a note and
// exits 0.
#include <fmt/format.h>

#include <cmath>

#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/run_support.h"
#include "engine/util/error.h"
#include "results/compare.h"

namespace kvb::cli {

void register_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare", "Paired per-cell test of a candidate run against a baseline run; exit 1 on a significant regression");
  struct Opts {
    std::string db, baseline, candidate, config;
    double alpha = 0.05, min_drop = 0.0, max_tput_drop = 0.0;
    bool missing_baseline_ok = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--db", o->db, "results database holding both runs")->required();
  cmd->add_option("--baseline", o->baseline, "baseline run (id, name, run-key prefix, 'latest', 'previous')")->required();
  cmd->add_option("--candidate", o->candidate, "candidate run")->required();
  cmd->add_option("--alpha", o->alpha, "significance level of the exact sign test")->capture_default_str();
  cmd->add_option("--min-drop", o->min_drop, "only flag drops of at least this many percentage points")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--max-throughput-drop", o->max_tput_drop,
                  "For two runs made with the same --memory: also fail a cell whose aggregate decode tok/s fell by "
                  "more than this many percent, in (0, 100) (wall-clock rates: same machine only)");
  cmd->add_option("--config", o->config,
                  "A YAML file such as ci/nightly.yaml: its thresholds (alpha, min_drop_points, "
                  "max_throughput_drop_pct) fill the options "
                  "not given on the command line");
  cmd->add_flag(
      "--missing-baseline-ok", o->missing_baseline_ok,
      "Exit 0 with a note when the store holds no finished run besides the candidate (a nightly's first night)");
  cmd->callback([o, cmd] {
    // Both thresholds are checked (naming where they came from) before the database is opened.
    std::string alpha_from = "--alpha", min_drop_from = "--min-drop", tput_from = "--max-throughput-drop";
    bool tput_set = cmd->get_option("--max-throughput-drop")->count() > 0;
    if (!o->config.empty()) {
      const RunConfigFile f = load_run_config(o->config);
      if (f.alpha && cmd->get_option("--alpha")->count() == 0) {
        o->alpha = *f.alpha;
        alpha_from = o->config + ": thresholds.alpha";
      }
      if (f.min_drop_points && cmd->get_option("--min-drop")->count() == 0) {
        o->min_drop = *f.min_drop_points;
        min_drop_from = o->config + ": thresholds.min_drop_points";
      }
      if (f.max_throughput_drop_pct && !tput_set) {
        o->max_tput_drop = *f.max_throughput_drop_pct;
        tput_from = o->config + ": thresholds.max_throughput_drop_pct";
        tput_set = true;
      }
    }
    if (!(o->alpha > 0 && o->alpha < 1)) fail("{}: must be in (0, 1), got {}", alpha_from, o->alpha);
    if (!(o->min_drop >= 0 && std::isfinite(o->min_drop)))
      fail("{}: must be a finite number >= 0, got {}", min_drop_from, o->min_drop);
    if (tput_set && !(o->max_tput_drop > 0 && o->max_tput_drop < 100))
      fail("{}: must be a percentage in (0, 100), got {}", tput_from, o->max_tput_drop);
    results::Store store(o->db, results::Store::Mode::kReadOnly);
    const int64_t c = store.resolve_run(o->candidate);
    int64_t b = 0;
    int others = 0;  // finished runs besides the candidate
    for (const auto& r : store.runs()) others += r.run_id != c && !r.finished_at.empty();
    try {
      b = store.resolve_run(o->baseline);
    } catch (const kvb::Error& e) {
      // Only when there is nothing to compare with: a wrong name next to other runs stays an error.
      if (!o->missing_baseline_ok || e.kind() != kvb::ErrorKind::kInput || others > 0) throw;
      std::fprintf(stderr, "kvbench: note: no baseline run to compare with (%s); nothing compared\n", e.what());
      return;
    }
    if (b == c) {  // `latest latest`, `2 2`: a run compared with itself finds nothing, and says so
      if (o->missing_baseline_ok && others == 0) {
        std::fprintf(stderr,
                     "kvbench: note: no baseline run to compare with (run %lld is the only one); nothing "
                     "compared\n",
                     static_cast<long long>(c));
        return;
      }
      fail("--baseline '{}' and --candidate '{}' are the same run ({}): nothing to compare", o->baseline, o->candidate,
           c);
    }
    results::CompareOptions opt;
    opt.alpha = o->alpha;
    opt.min_drop = o->min_drop;
    if (tput_set) opt.max_throughput_drop = o->max_tput_drop;
    auto res = results::compare_runs(store, b, c, opt);
    fmt::print("baseline run {} vs candidate run {} ({})\n{}", b, c, o->db, results::format_compare_table(res, opt));
    std::fflush(stdout);
    if (res.any_regression) throw CLI::RuntimeError(1);
  });
}

}  // namespace kvb::cli
