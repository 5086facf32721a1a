// `kvbench policies`: lists every registered KV policy with its description and every parameter
// with its default and meaning (the defaults are the seeds'; see engine/policies/*.cpp).
// `--json` prints the same as a JSON array; `--resolve SPEC --budget N` prints the fully resolved
// parameters of one spec (what every result row records), or the error for a bad spec.
// `--checkpoints` lists the released learned-policy checkpoints and the base model each belongs
// to (engine/policies/checkpoints.h): what `kvbench run` picks for a model when no weights are named.
// `--kvpress` prints the kvpress 0.5.5 migration table (engine/policies/kvpress_table.h): each press
// with its arguments, the kvbench spec that equals it and how that equality is known.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/policies/checkpoints.h"
#include "engine/policies/kvpress_table.h"
#include "engine/policies/policy.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"

namespace kvb::cli {

namespace {
struct PoliciesArgs {
  bool json = false;
  bool checkpoints = false;
  bool kvpress = false;
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
  if (a.kvpress) {
    if (a.json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& r : kvpress_table())
        arr.push_back({{"press", r.press},
                       {"kvpress_args", r.args},
                       {"kvbench_spec", r.spec},
                       {"status", kvpress_status_name(r.status)},
                       {"golden", r.golden},
                       {"note", r.note}});
      std::fputs((arr.dump(2) + "\n").c_str(), stdout);
      return;
    }
    std::string out;
    for (const auto& r : kvpress_table()) {
      out += fmt::format("{}({})\n  {:<8} {}\n", r.press, r.args, kvpress_status_name(r.status),
                         r.spec.empty() ? "-" : r.spec);
      if (!r.note.empty()) out += fmt::format("           {}\n", r.note);
    }
    out +=
        "\nA kvpress compression_ratio=r is kvbench's --budget int(L*(1-r)) for an L-token prompt, or\n"
        "budget_kind=ratio,ratio=1-r (kvbench's ratio is the fraction KEPT). golden: equal keep-sets pinned by a\n"
        "kvpress golden in the tests; checked: equal once, from outside the tests; rule: the same rule, other\n"
        "random draws; wrapper: a protocol option of every policy; missing: not in kvbench yet; excused: left\n"
        "out, with the reason. docs/policies.md, \"Migrating from kvpress\".\n";
    std::fputs(out.c_str(), stdout);
    return;
  }
  if (a.checkpoints) {
    if (a.json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& c : known_checkpoints())
        arr.push_back({{"policy", c.policy}, {"weights", c.weights}, {"base_model", c.base_model}, {"note", c.note}});
      std::fputs((arr.dump(2) + "\n").c_str(), stdout);
      return;
    }
    size_t pw = 6, ww = 7, bw = 10;
    for (const auto& c : known_checkpoints()) {
      pw = std::max(pw, c.policy.size());
      ww = std::max(ww, c.weights.size());
      bw = std::max(bw, c.base_model.size());
    }
    std::string out =
        fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", "policy", pw, "weights", ww, "base model", bw, "trained");
    for (const auto& c : known_checkpoints())
      out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", c.policy, pw, c.weights, ww, c.base_model, bw, c.note);
    out +=
        "\n`kvbench run --model <base model>` uses the first weights listed for it when the policy spec names none\n"
        "(gates=...); give gates=HUB_ID[/FILE], a directory or a .pth/.pt/.safetensors file to choose others.\n";
    std::fputs(out.c_str(), stdout);
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
    for (const auto& p : info.params) out += fmt::format("    {:<{}}  {}\n", p.key + "=" + p.default_value, kw, p.help);
    out += "\n";
  }
  out += "Spec syntax: --policy name:key=value,...  (budget: tokens kept per (layer, kv_head) after a compression)\n";
  out +=
      "\nWhen policies compress (parameter compress): prompt_end (default) prefills the whole prompt with the full\n"
      "  cache, compresses once at its end, then every `buffer` decode tokens, as the papers and kvpress do: the\n"
      "  result does not depend on --prefill-chunk. chunked also compresses after every prefill chunk that brings\n"
      "  a head to budget + buffer (a bounded cache during prefill). The mode is in every row's resolved params.\n"
      "Budget: every policy except full, wgkv and duoattention compresses to a budget and needs --budget N\n"
      "  (or budget_kind=ratio); a missing budget is an error, never a silent full cache.\n"
      "Threshold budgets (budget_kind=threshold,threshold=T, every scoring policy; rkv/gkv: score_threshold=T):\n"
      "  tokens outside the sinks and the `window` newest whose score is below T are evicted at the prompt end\n"
      "  and, with decode=true, every `buffer` decode tokens (kvpress DMSPress); no --budget. Each cell stores\n"
      "  the realised tokens per head (kv_tokens_mean, kv_tokens_peak) and the report places it by them.\n"
      "Learned policies (trimkv, wgkv: gates=HUB_ID|DIR|FILE, .pth/.pt/.safetensors; foresightkv: scorer=FILE;\n"
      "  duoattention: pattern=DIR) refuse to run without weights unless RANDOM test weights are asked for\n"
      "  (random_gates=SEED / random_scorer=SEED / random_pattern=SEED). `kvbench run` alone fills a spec that\n"
      "  names neither: with the released weights of the model when `kvbench policies --checkpoints` knows\n"
      "  them (it says which), else with RANDOM weights (seed 0): it warns, records the note in the run's\n"
      "  config (policy_notes) and the cell label carries random_gates=0 / random_scorer=0 / random_pattern=0.\n"
      "Protocol details and each paper's published setting: docs/policies.md.\n";
  std::fputs(out.c_str(), stdout);
}
}  // namespace

void register_policies(CLI::App& app) {
  auto a = std::make_shared<PoliciesArgs>();
  auto* cmd = app.add_subcommand("policies", "List KV policies, their parameters and defaults");
  cmd->add_flag("--json", a->json, "Print as JSON");
  cmd->add_flag("--checkpoints", a->checkpoints,
                "List the released learned-policy checkpoints and the base model each belongs to");
  cmd->add_flag("--kvpress", a->kvpress,
                "Print the kvpress migration table: each press, the kvbench spec that equals it, and how that is known");
  cmd->add_option("--resolve", a->resolve, "Print the resolved parameters of one policy spec");
  cmd->add_option("--budget", a->budget, "Budget used with --resolve (tokens per layer and kv head)")->check(positive());
  cmd->callback([a] { run_policies(*a); });
}

}  // namespace kvb::cli
