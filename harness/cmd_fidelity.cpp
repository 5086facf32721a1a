// `kvbench fidelity`: per policy and budget, teacher-forced and free-running agreement with the
// full-cache greedy continuation (KL, ΔNLL, top-1, greedy prefix/overall agreement, KV bytes).
// Protocol and metric definitions: harness/fidelity.h. Prompts come from --prompts FILE (one per
// line; `.jsonl`: a "prompt" or "text" field per line), --text FILE (the whole file is one
// prompt) or --task T --limit K (the task's prompts, chat-rendered as `kvbench run` does).
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "datasets/registry.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/fidelity.h"
#include "harness/model_source.h"
#include "tasks/task.h"

namespace kvb::cli {

namespace {
struct FidelityArgs {
  std::string model, policies = "full", budgets = "32,64", prompts_file, text_file, task, json_out, chat_template;
  size_t limit = 4;
  int max_new_tokens = 128;
  bool chat = false;
  std::vector<std::string> data_dirs;
};

std::vector<std::vector<int32_t>> load_prompts(const FidelityArgs& a, const LoadedModel& m) {
  const int sources = !a.prompts_file.empty() + !a.text_file.empty() + !a.task.empty();
  if (sources != 1) fail("fidelity: give exactly one of --prompts FILE, --text FILE or --task T");
  if (!m.tokenizer) fail("fidelity: model '{}' has no tokenizer (tokenizer.json)", a.model);
  std::vector<std::vector<int32_t>> out;
  auto add_text = [&](const std::string& text) {
    out.push_back(build_prompt(m, text, a.chat && m.chat, "", std::nullopt));
  };
  if (!a.text_file.empty()) {
    const std::string text = read_file(a.text_file, InputKind::kPrompts);
    if (text.empty()) fail("--text {}: empty file (no prompt to measure)", a.text_file);
    add_text(text);
  } else if (!a.prompts_file.empty()) {
    const std::string body = read_file(a.prompts_file, InputKind::kPrompts);
    const bool jsonl = a.prompts_file.size() > 6 && a.prompts_file.substr(a.prompts_file.size() - 6) == ".jsonl";
    size_t start = 0, line_no = 0;
    while (start < body.size()) {
      size_t nl = body.find('\n', start);
      if (nl == std::string::npos) nl = body.size();
      std::string line = body.substr(start, nl - start);
      start = nl + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (jsonl) {
        const nlohmann::json j = parse_json(line, fmt::format("{}:{}", a.prompts_file, line_no));
        const char* key = j.is_object() && j.contains("prompt") ? "prompt" : "text";
        if (!j.is_object() || !j.contains(key) || !j[key].is_string())
          fail("{}:{}: expected an object with a string field \"prompt\" or \"text\"", a.prompts_file, line_no);
        add_text(j[key].get<std::string>());
      } else {
        add_text(line);
      }
      if (a.limit && out.size() >= a.limit) break;
    }
  } else {
    auto task = tasks::make_task(a.task);
    datasets::DataLocator loc(a.data_dirs.empty() ? datasets::default_data_dirs() : a.data_dirs);
    tasks::TaskContext ctx;
    ctx.locate = [&](const std::string& key) { return loc.locate(key); };
    ctx.limit = a.limit;
    for (const auto& ex : task->load_all(ctx)) {
      if (m.chat && ex.use_chat_template) {
        std::vector<chat::Message> msgs;
        for (const auto& msg : ex.messages) msgs.push_back({msg.role, msg.content});
        out.push_back(m.tokenizer->encode(m.chat->render(msgs, chat::RenderOptions{}), false));
      } else {
        out.push_back(m.tokenizer->encode(ex.raw_prompt(), true));
      }
    }
  }
  if (out.empty()) fail("fidelity: no prompts found");
  return out;
}

void run_fidelity(const FidelityArgs& a) {
  const std::vector<std::string> specs = fidelity::split_policy_list(a.policies);
  const std::vector<int64_t> budgets = parse_budget_list(a.budgets);
  // Each spec parsed once and built once, at the largest budget, before anything is loaded: its
  // bad syntax or parameters fail here; the built policy says whether it takes a budget.
  std::vector<ResolvedPolicy> policies;
  const int64_t probe = budgets.empty() ? 0 : *std::max_element(budgets.begin(), budgets.end());
  for (const auto& s : specs) policies.push_back(ResolvedPolicy::resolve(s, probe));
  // A folder reads as an empty file (`--text DIR` measured an empty prompt and exited 0).
  for (const auto& [opt, path] : {std::pair{"--text", &a.text_file}, std::pair{"--prompts", &a.prompts_file}})
    if (!path->empty() && std::filesystem::is_directory(*path)) fail("{} {}: is a directory, not a file", opt, *path);
  if (!a.json_out.empty()) {
    // The output must not be any file this command reads: the prompts, the text, the model (a
    // .gguf file or any file of the model directory).
    // A named model or a Hub id: its cached file or snapshot folder.
    const std::string model = model_file_of(a.model);
    std::vector<std::string> inputs = {a.prompts_file, a.text_file, model};
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "model.safetensors", "model.safetensors.index.json", "special_tokens_map.json"})
      inputs.push_back(model + "/" + f);
    const std::filesystem::path parent = std::filesystem::path(a.json_out).parent_path();
    if (same_file(parent.empty() ? "." : parent.string(), model) && file_exists(a.json_out))
      fail("--json {}: is a file of the model directory {}; name another file", a.json_out, model);
    for (const auto& d : a.data_dirs) inputs.push_back(d);
    check_output_path(a.json_out, "--json", inputs);
  }
  LoadedModel m = load_model(a.model, WeightFormat::kF32, a.chat_template);
  const auto prompts = load_prompts(a, m);
  std::fprintf(stderr, "[kvbench] fidelity: %zu prompts, full-cache greedy references of up to %d tokens\n",
               prompts.size(), a.max_new_tokens);
  const auto refs = fidelity::make_references(m.model, prompts, a.max_new_tokens, m.eos_ids);
  std::vector<fidelity::Row> rows;
  for (const auto& rp : policies) {
    for (int64_t b : rp.budgets_of(budgets)) {  // one row when it takes no budget
      std::fprintf(stderr, "[kvbench] fidelity: %s budget %lld\n", rp.text().c_str(), static_cast<long long>(b));
      rows.push_back(fidelity::evaluate(m.model, refs, rp, b, m.eos_ids));
    }
  }
  int64_t positions = 0;
  for (const auto& r : refs) positions += static_cast<int64_t>(r.continuation.size());
  std::printf("Model %s; %zu prompts, %lld reference tokens (full-cache greedy).\n\n%s", a.model.c_str(), refs.size(),
              static_cast<long long>(positions), fidelity::markdown_table(rows).c_str());
  if (!a.json_out.empty()) {
    nlohmann::json j = {{"model", a.model},
                        {"prompts", refs.size()},
                        {"reference_tokens", positions},
                        {"max_new_tokens", a.max_new_tokens},
                        {"rows", fidelity::to_json(rows)}};
    write_output_file(a.json_out, j.dump(2) + "\n");
  }
}
}  // namespace

void register_fidelity(CLI::App& app) {
  auto a = std::make_shared<FidelityArgs>();
  CLI::App* c = app.add_subcommand(
      "fidelity", "Per policy and budget: agreement with the full-cache greedy continuation (KL, ΔNLL, top-1, KV bytes)");
  c->add_option("--model", a->model,
                "Model: a directory, a .gguf file, a named model (kvbench models) or a Hub id org/name[@rev][:FILE.gguf]")
      ->required();
  c->add_option("--policies", a->policies, "Comma-separated policy specs, e.g. full,snapkv:window=8,kernel=5,oracle");
  c->add_option("--budgets", a->budgets, "Comma-separated budgets (tokens per layer and kv head)");
  c->add_option("--prompts", a->prompts_file, "Prompts file: one prompt per line (.jsonl: \"prompt\"/\"text\" field)");
  c->add_option("--text", a->text_file, "A text file used whole as one prompt");
  c->add_option("--task", a->task, "Take prompts from a task (see `kvbench tasks`)");
  c->add_option("--limit", a->limit, "At most this many prompts (0 = all; default 4)")->check(non_negative());
  c->add_option("--data-dir", a->data_dirs, "Dataset directory for --task (repeatable)");
  c->add_option("--max-new-tokens", a->max_new_tokens, "Length of the full-cache greedy reference")
      ->check(kvb::cli::positive());
  c->add_flag("--chat", a->chat, "Render --prompts/--text lines with the model's chat template");
  c->add_option("--chat-template", a->chat_template,
                "Which of the model's named chat templates (default: \"default\"; also for --task prompts)");
  c->add_option("--json", a->json_out, "Also write the rows as JSON to this file");
  c->callback([a] { run_fidelity(*a); });
}

}  // namespace kvb::cli
