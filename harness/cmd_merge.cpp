// `kvbench merge OUT.db IN.db...`: merges shard stores into one (results/store.h Store::merge).
#include <fmt/format.h>

#include "engine/util/io.h"
#include "harness/commands.h"
#include "results/store.h"

namespace kvb::cli {

void register_merge(CLI::App& app) {
  auto* cmd = app.add_subcommand("merge", "Merge result stores (e.g. the shards of a run) into OUT.db");
  auto out = std::make_shared<std::string>();
  auto ins = std::make_shared<std::vector<std::string>>();
  cmd->add_option("out", *out, "output database (created when missing)")->required();
  cmd->add_option("inputs", *ins, "input databases")->required();
  cmd->callback([out, ins] {
    // The output policy (engine/util/io.h): OUT is none of the inputs and a regular file or new name.
    check_output_path(*out, "merge OUT", *ins);
    results::Store::merge(*out, *ins);
    results::Store s(*out, results::Store::Mode::kReadOnly);
    const results::Store::Totals n = s.totals();
    fmt::print("merged {} file(s) into {}: {} run(s), {} generations, {} grades\n", ins->size(), *out, n.runs,
               n.generations, n.grades);
  });
}

}  // namespace kvb::cli
