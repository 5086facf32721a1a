// Registration of the `kvbench` sub-commands. Each command lives in harness/cmd_<name>.cpp and
// adds itself to the CLI11 app here; main.cpp calls register_all_commands().
#pragma once

#include <CLI/CLI.hpp>

namespace kvb::cli {

/// Adds every sub-command to `app`. Each command's callback may throw kvb::Error; main()
/// turns that into "kvbench: error: ..." and the error's exit code.
void register_all_commands(CLI::App& app);

void register_bench(CLI::App& app);
void register_check_answer(CLI::App& app);
void register_compare(CLI::App& app);
void register_datasets(CLI::App& app);
void register_fidelity(CLI::App& app);
void register_generate(CLI::App& app);
void register_merge(CLI::App& app);
void register_models(CLI::App& app);
void register_policies(CLI::App& app);
void register_report(CLI::App& app);
void register_grade(CLI::App& app);
void register_run(CLI::App& app);
void register_tasks(CLI::App& app);
void register_tokenize(CLI::App& app);

}  // namespace kvb::cli
