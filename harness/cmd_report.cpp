// `kvbench report --db FILE --out DIR [--run RUN]...`: index.html (inline SVG), report.md and
// cells.csv from a results store (see results/report.h).
#include <fmt/format.h>

#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "results/report.h"

namespace kvb::cli {

namespace {
/// Most resamples `report --resamples` accepts (ten times results::kBootstrapResamples): each
/// costs one pass over a cell's examples and 8 bytes (2147483647 allocated 16 GiB and failed as
/// "out of memory" without naming the option).
constexpr int kMaxBootstrapResamples = 100000;
}  // namespace

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Write index.html (inline SVG), report.md and cells.csv from a results DB");
  struct Opts {
    std::string db, out;
    std::vector<std::string> runs;
    std::string reference = "full";
    int resamples = results::kBootstrapResamples;
    std::string title = "kvbench report";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--db", o->db, "results database")->required();
  cmd->add_option("--out", o->out, "output directory (created)")->required();
  cmd->add_option("--run", o->runs, "runs to include (id, name, 'latest', 'previous'); default all");
  cmd->add_option("--reference", o->reference, "policy name of the reference cells")->capture_default_str();
  cmd->add_option("--resamples", o->resamples, "paired-bootstrap resamples")
      ->capture_default_str()
      ->check(kvb::cli::in_range(1, kMaxBootstrapResamples));
  cmd->add_option("--title", o->title, "report title")->capture_default_str();
  cmd->callback([o] {
    results::Store store(o->db, results::Store::Mode::kReadOnly);
    results::ReportOptions opt;
    opt.out_dir = o->out;
    for (const auto& r : o->runs) opt.run_ids.push_back(store.resolve_run(r));
    opt.cells.reference_policy = o->reference;
    opt.cells.resamples = o->resamples;
    opt.title = o->title;
    auto files = results::write_report(store, opt);
    fmt::print("wrote {}\nwrote {}\nwrote {}\n", files.html, files.markdown, files.csv);
  });
}

}  // namespace kvb::cli
