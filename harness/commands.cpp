#include "harness/commands.h"

namespace kvb::cli {

void register_all_commands(CLI::App& app) {
  // One line per command; keep alphabetical.
  register_bench(app);
  register_check_answer(app);
  register_compare(app);
  register_datasets(app);
  register_fidelity(app);
  register_generate(app);
  register_grade(app);
  register_merge(app);
  register_policies(app);
  register_report(app);
  register_run(app);
  register_tasks(app);
  register_tokenize(app);
}

}  // namespace kvb::cli
