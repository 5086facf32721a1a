// `kvbench generate`: one prompt through the engine, text streamed to stdout, timings and KV
// bytes to stderr. The debugging entry point to the engine.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/policies/resolved.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/memory.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/model_source.h"

namespace kvb::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt, system, policy = "full", chat_template, weights = "stored", json_out;
  int json_top = 2;
  bool chat = false, no_thinking = false;
  int max_new_tokens = 256, prefill_chunk = 512;
  // Unset: the model's generation_config.json defaults (greedy unless do_sample), else greedy.
  std::optional<double> temperature, top_p;
  std::optional<int> top_k;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t budget = 0;
  std::vector<std::string> stop;
};

/// `generate --json FILE`: the prompt ids, the generated ids and text, and for every generated
/// position the `json_top` highest logits [(id, logit f32), ...] that the engine predicted there.
/// The logits come from a teacher-forced pass over the generated ids (Engine::score) with a
/// fresh policy of the same spec: the engine's results do not depend on the step shape
/// (docs/architecture.md, invariance), so these are the logits the sampler saw. Used by
/// tools/fidelity_vs_references.py to compare greedy continuations and near-ties with
/// transformers and llama.cpp.
void write_generate_json(const GenerateArgs& a, const LoadedModel& m, const std::vector<int32_t>& prompt,
                         const GenerationResult& r, std::unique_ptr<Policy> policy) {
  EngineOptions eo;
  eo.prefill_chunk = a.prefill_chunk;
  eo.max_batch = 1;
  Engine scorer(m.model, eo, std::move(policy));
  std::vector<int32_t> forced(r.tokens.begin(), r.tokens.end());
  if (!forced.empty()) forced.pop_back();  // logits after the last token are not needed
  const std::vector<float> logits = scorer.score(prompt, forced);
  const size_t V = static_cast<size_t>(m.model->config().vocab_size);
  nlohmann::json top = nlohmann::json::array();
  for (size_t t = 0; t < r.tokens.size() && (t + 1) * V <= logits.size(); ++t) {
    const float* row = logits.data() + t * V;
    std::vector<int32_t> idx(V);
    for (size_t i = 0; i < V; ++i) idx[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(static_cast<size_t>(a.json_top), V);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](int32_t x, int32_t y) { return row[x] > row[y] || (row[x] == row[y] && x < y); });
    nlohmann::json step = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i) step.push_back({idx[i], row[idx[i]]});
    top.push_back(std::move(step));
  }
  nlohmann::json j = {{"model", a.model},
                      {"weights", a.weights},
                      {"policy", a.policy},
                      {"budget", a.budget},
                      {"prompt_ids", prompt},
                      {"ids", r.tokens},
                      {"text", r.text},
                      {"finish", finish_reason_name(r.finish)},
                      {"top_logits", std::move(top)}};
  write_output_file(a.json_out, j.dump() + "\n");
}

void run_generate(const GenerateArgs& a) {
  const ResolvedPolicy resolved = ResolvedPolicy::resolve(a.policy, a.budget);  // a bad spec fails before loading
  if (a.budget > 0 && !resolved.uses_budget()) {
    // A budget the policy does not read is an error, never silently ignored (issue 46, item 7):
    // a policy without one (dms, full, wgkv, kvzap, duoattention), or a ratio or threshold keep-set.
    const std::string name = resolved.spec().name;
    const std::string kind = resolved.params().value("budget_kind", "");
    if (kind == "threshold" || kind == "ratio")
      fail("--budget: policy '{}' with budget_kind={} keeps what its {} decides, not a budget; drop --budget", name,
           kind, kind == "threshold" ? "score threshold" : "ratio");
    fail("--budget: policy '{}' takes no budget (what it keeps is its own decision); drop --budget", name);
  }
  auto policy = resolved.build();
  const WeightFormat wf = parse_weights_option(a.weights);
  LoadedModel m = load_model(a.model, wf, a.chat_template);
  release_freed_heap();
  std::string sampling_source;
  const nlohmann::json sampling = resolve_sampling(nlohmann::json::object(), generation_defaults(a.model),
                                                   a.temperature, a.top_p, a.top_k, &sampling_source);
  std::optional<bool> thinking;
  if (a.no_thinking) thinking = false;
  // A bad --json path fails before any compute (the file is written at the end).
  if (!a.json_out.empty()) {
    try {
      write_output_file(a.json_out, "");
    } catch (const Error& e) {
      throw Error(e.what(), ErrorKind::kInput);  // a path the user named that cannot be written: exit 2
    }
  }
  std::vector<int32_t> prompt = build_prompt(m, a.prompt, a.chat, a.system, thinking);
  if (prompt.empty()) fail("--prompt: encodes to no tokens (and the tokenizer adds no BOS)");
  EngineOptions eo;
  eo.prefill_chunk = a.prefill_chunk;
  eo.max_batch = 1;
  auto json_policy = a.json_out.empty() ? nullptr : resolved.build();
  eo = with_scoring_prompts(eo, m, policy.get());
  Engine engine(m.model, eo, std::move(policy));
  GenerationRequest req;
  req.prompt = prompt;
  req.sampling.temperature = static_cast<float>(sampling.value("temperature", 0.0));
  req.sampling.top_k = sampling.value("top_k", 0);
  req.sampling.top_p = static_cast<float>(sampling.value("top_p", 1.0));
  req.sampling.min_p = a.min_p;
  req.max_new_tokens = a.max_new_tokens;
  req.stop_ids = m.eos_ids;
  req.stop_strings = a.stop;
  req.seed = a.seed;
  tok::StreamDecoder stream(*m.tokenizer, /*skip_special_tokens=*/true);
  auto res = engine.generate({req}, m.tokenizer.get(), [&](size_t, int32_t t) {
    std::string s = stream.push(t);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::string rest = stream.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const GenerationResult& r = res[0];
  std::fprintf(stderr,
               "[kvbench] prompt %lld tokens, prefill %.3f s (prefill %.1f tok/s), TTFT %.3f s; generated %zu "
               "tokens, %lld decode steps in %.3f s (decode %.1f tok/s); finish=%s\n"
               "[kvbench] policy %s budget %lld, weights %s: KV bytes peak %zu, steady %zu, final %zu, read per "
               "decode step %.0f, evictions %lld, "
               "policy time %.1f%%; peak RSS %.1f MiB\n"
               "[kvbench] sampling %s (from %s)\n",
               static_cast<long long>(r.prompt_tokens), r.prefill_s,
               r.prefill_s > 0 ? r.prompt_tokens / r.prefill_s : 0.0, r.ttft_s, r.tokens.size(),
               static_cast<long long>(r.decode_steps), r.decode_s,
               r.decode_s > 0 ? static_cast<double>(r.decode_steps) / r.decode_s : 0.0, finish_reason_name(r.finish),
               a.policy.c_str(), static_cast<long long>(a.budget), a.weights.c_str(), r.kv_bytes_peak,
               r.kv_bytes_steady, r.kv_bytes_final,
               r.decode_steps > 0 ? static_cast<double>(r.kv_read_bytes) / static_cast<double>(r.decode_steps) : 0.0,
               static_cast<long long>(r.evictions),
               (r.prefill_s + r.decode_s) > 0 ? 100.0 * r.policy_s / (r.prefill_s + r.decode_s) : 0.0,
               peak_rss_bytes() / 1048576.0, sampling.dump().c_str(), sampling_source.c_str());
  if (!a.json_out.empty()) write_generate_json(a, m, prompt, r, std::move(json_policy));
}
}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* c = app.add_subcommand("generate", "Generate from one prompt (text to stdout, timings to stderr)");
  c->add_option("--model", a->model,
                "Model: a directory (config.json, *.safetensors, tokenizer.json), a .gguf file, a named model "
                "(kvbench models) or a Hub id org/name[@rev][:FILE.gguf]")
      ->required();
  c->add_option("--prompt", a->prompt, "Prompt text (empty = start from BOS)");
  c->add_flag("--chat", a->chat, "Render the prompt with the model's chat template");
  c->add_option("--system", a->system, "System message (with --chat)");
  c->add_option("--chat-template", a->chat_template, "A named chat template of the model (default: its default one)");
  c->add_flag("--no-thinking", a->no_thinking, "Pass enable_thinking=false to the chat template (Qwen3)");
  c->add_option("--max-new-tokens", a->max_new_tokens, "Maximum generated tokens")->check(kvb::cli::positive());
  c->add_option("--temperature", a->temperature,
                "Sampling temperature (0 = greedy; default: the model's generation_config.json, else greedy)")
      ->check(kvb::cli::non_negative());
  c->add_option("--top-p", a->top_p, "Nucleus sampling threshold (1 = off)")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--top-k", a->top_k, "Top-k sampling (0 = off)")->check(kvb::cli::non_negative());
  c->add_option("--min-p", a->min_p, "Min-p sampling (0 = off)")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--seed", a->seed, "Sampling seed")->check(kvb::cli::non_negative());
  c->add_option("--stop", a->stop, "Stop string (repeatable)");
  c->add_option("--policy", a->policy, "KV policy spec name[:key=value,...] (see `kvbench policies`)");
  c->add_option("--budget", a->budget, "KV budget: tokens kept per (layer, kv_head)")->check(kvb::cli::non_negative());
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")->check(kvb::cli::positive());
  c->add_option("--weights", a->weights,
                "How weight matrices are held: stored (as the file stores them), f32 or bf16 (converted on load)")
      ->capture_default_str();
  c->add_option("--json", a->json_out,
                "Also write prompt ids, generated ids, text and each position's top logits (teacher-forced) to this "
                "JSON file");
  c->add_option("--json-top", a->json_top, "How many top logits per position --json records (default 2)")
      ->check(kvb::cli::positive());
  c->callback([a] { run_generate(*a); });
}

}  // namespace kvb::cli
