#include "harness/commands.h"

#include <map>
#include <mutex>

#include "datasets/hub.h"
#include "engine/policies/gate_weights.h"

namespace kvb::cli {

void register_all_commands(CLI::App& app) {
  // Learned-policy weights named by a Hub id (trimkv:gates=ngocbh/TrimKV-Qwen3-4B-Math) download
  // through the project's Hub client and cache (engine/policies/gate_weights.h).
  // `kvbench run` builds a policy per work item: a file is resolved (one Hub request) once per process.
  set_hub_file_fetcher([](const std::string& repo, const std::string& revision, const std::string& path) {
    static std::mutex mu;
    static std::map<std::string, std::string> resolved;
    std::lock_guard<std::mutex> lock(mu);
    const std::string key = repo + "@" + revision + "/" + path;
    auto it = resolved.find(key);
    if (it != resolved.end()) return it->second;
    datasets::HubClient hub(datasets::HubConfig::from_env());
    return resolved[key] = hub.download(datasets::HubFile{datasets::RepoType::kModel, repo, revision, path});
  });
  // One line per command; keep alphabetical.
  register_bench(app);
  register_check_answer(app);
  register_compare(app);
  register_datasets(app);
  register_fidelity(app);
  register_generate(app);
  register_grade(app);
  register_merge(app);
  register_models(app);
  register_policies(app);
  register_report(app);
  register_run(app);
  register_tasks(app);
  register_tokenize(app);
}

}  // namespace kvb::cli
