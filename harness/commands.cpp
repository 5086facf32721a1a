#include "harness/commands.h"

#include "datasets/hub.h"
#include "engine/policies/gate_weights.h"

namespace kvb::cli {

void register_all_commands(CLI::App& app) {
  // Learned-policy weights named by a Hub id (trimkv:gates=ngocbh/TrimKV-Qwen3-4B-Math) download
  // through the project's Hub client and cache (engine/policies/gate_weights.h).
  set_hub_file_fetcher([](const std::string& repo, const std::string& revision, const std::string& path) {
    datasets::HubClient hub(datasets::HubConfig::from_env());
    return hub.download(datasets::HubFile{datasets::RepoType::kModel, repo, revision, path});
  });
  // One line per command; keep alphabetical.
  register_bench(app);
  register_check_answer(app);
  register_compare(app);
  register_datasets(app);
  register_fidelity(app);
  register_generate(app);
  register_merge(app);
  register_policies(app);
  register_report(app);
  register_run(app);
  register_tasks(app);
  register_tokenize(app);
}

}  // namespace kvb::cli
