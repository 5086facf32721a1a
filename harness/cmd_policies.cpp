// `kvbench policies`: lists every registered KV policy with its description and every parameter
// with its default and meaning (the defaults are the seeds'; see engine/policies/*.cpp).
// `--json` prints the same as a JSON array; `--resolve SPEC --budget N` prints the fully resolved
// parameters of one spec (what every result row records), or the error for a bad spec.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/policies/policy.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"

namespace kvb::cli {

namespace {
struct PoliciesArgs {
  bool json = false;
  std::string resolve;
  int64_t budget = 0;
};

void run_policies(const PoliciesArgs& a) {
  if (!a.resolve.empty()) {
    auto p = make_policy(PolicySpec::parse(a.resolve, a.budget));
    nlohmann::json j = {{"name", p->name()}, {"params", p->resolved_params()}};
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
    return;
  }
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& info : policy_registry()) {
      nlohmann::json params = nlohmann::json::array();
      for (const auto& p : info.params)
        params.push_back({{"key", p.key}, {"default", p.default_value}, {"help", p.help}});
      arr.push_back({{"name", info.name}, {"description", info.description}, {"params", params}});
    }
    std::fputs((arr.dump(2) + "\n").c_str(), stdout);
    return;
  }
  std::string out;
  for (const auto& info : policy_registry()) {
    out += fmt::format("{}\n  {}\n", info.name, info.description);
    if (info.params.empty()) out += "  (no parameters)\n";
    size_t kw = 0;
    for (const auto& p : info.params) kw = std::max(kw, p.key.size() + 1 + p.default_value.size());
    for (const auto& p : info.params)
      out += fmt::format("    {:<{}}  {}\n", p.key + "=" + p.default_value, kw, p.help);
    out += "\n";
  }
  out += "Spec syntax: --policy name:key=value,...  (budget: tokens kept per (layer, kv_head) after a compression)\n";
  out +=
      "\nWhen policies compress (parameter compress): prompt_end (default) prefills the whole prompt with the full\n"
      "  cache, compresses once at its end, then every `buffer` decode tokens, as the papers and kvpress do: the\n"
      "  result does not depend on --prefill-chunk. chunked also compresses after every prefill chunk that brings\n"
      "  a head to budget + buffer (a bounded cache during prefill). The mode is in every row's resolved params.\n"
      "Budget: every policy except full and wgkv compresses to a budget and needs --budget N (or\n"
      "  budget_kind=ratio); a missing budget is an error, never a silent full cache.\n"
      "Learned policies (trimkv, wgkv: gates=FILE; foresightkv: scorer=FILE) refuse to run without weights\n"
      "  unless RANDOM test weights are asked for (random_gates=SEED / random_scorer=SEED). `kvbench run` alone\n"
      "  asks for them itself (seed 0) when a spec names neither: it warns, records the note in the run's\n"
      "  config (policy_notes) and the cell label carries random_gates=0 / random_scorer=0.\n"
      "Protocol details and each paper's published setting: docs/policies.md.\n";
  std::fputs(out.c_str(), stdout);
}
}  // namespace

void register_policies(CLI::App& app) {
  auto a = std::make_shared<PoliciesArgs>();
  auto* cmd = app.add_subcommand("policies", "List KV policies, their parameters and defaults");
  cmd->add_flag("--json", a->json, "Print as JSON");
  cmd->add_option("--resolve", a->resolve, "Print the resolved parameters of one policy spec");
  cmd->add_option("--budget", a->budget, "Budget used with --resolve (tokens per layer and kv head)")->check(positive());
  cmd->callback([a] { run_policies(*a); });
}

}  // namespace kvb::cli
