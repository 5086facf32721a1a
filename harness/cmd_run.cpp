// `kvbench run`, the main job: suite → tasks → examples; × models × policy specs × budgets ×
// samples → work items keyed by content hash (results/grid.h); skip items already stored
// (resume); generate the rest with the engine — one model loaded at a time, one (policy, budget)
// per engine, continuous batching inside — grade each output, and store generations and grades
// batch by batch in SQLite (one transaction per batch, so Ctrl-C or a kill loses at most the
// batch in flight). Finally print the per-cell table. docs/architecture.md#the-run-grid-and-resume.
//
// run_main reads as its steps: resolve the suite, budgets, policies and models; expand the
// grid; open the run; generate model by model, engine by engine, batch by batch. Request
// building is harness/requests.h, the grid pieces shared with `kvbench grade` harness/run_grid.h.
#include <filesystem>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "datasets/registry.h"
#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/gguf.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/memory.h"
#include "harness/bench_memory.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/input_identity.h"
#include "harness/judge_grading.h"
#include "harness/model_source.h"
#include "harness/requests.h"
#include "harness/run_grid.h"
#include "harness/run_support.h"
#include "results/grid.h"
#include "results/store.h"
#include "tasks/suite.h"
#include "tasks/task.h"

namespace kvb::cli {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

/// Fills the options not given on the command line from `--config FILE` (ci/nightly.yaml's
/// format, harness/run_support.h); options on the command line win.
void apply_config(RunArgs& a, CLI::App* c) {
  if (a.config.empty()) {
    if (!a.config_profile.empty()) fail("--config-profile needs --config");
    return;
  }
  const RunConfigFile f = load_run_config(a.config, a.config_profile);
  auto unset = [&](const char* opt) { return c->get_option(opt)->count() == 0; };
  auto join = [](const auto& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + fmt::format("{}", x);
    return s;
  };
  if (f.suite && unset("--suite")) a.suite = *f.suite;
  if (f.db && unset("--db")) a.db = *f.db;
  if (f.backend && unset("--backend")) a.backend = *f.backend;
  if (!f.data_dirs.empty() && unset("--data-dir")) a.data_dirs = f.data_dirs;
  if (!f.models.empty() && unset("--model")) a.models = f.models;
  if (!f.policies.empty() && unset("--policies")) a.policies = join(f.policies);
  if (!f.budgets.empty() && unset("--budgets")) a.budgets = join(f.budgets);
  if (f.samples && unset("--samples")) a.samples = *f.samples;
  if (f.limit && unset("--limit")) a.limit = *f.limit;
  if (f.temperature && unset("--temperature")) a.temperature = f.temperature;
  if (f.top_p && unset("--top-p")) a.top_p = f.top_p;
  if (f.top_k && unset("--top-k")) a.top_k = f.top_k;
  if (f.min_p && unset("--min-p")) a.min_p = *f.min_p;
  if (f.max_new_tokens && unset("--max-new-tokens")) a.max_new_tokens = f.max_new_tokens;
  if (f.seed && unset("--seed")) a.seed = *f.seed;
  if (f.memory && unset("--memory")) a.memory_gib = *f.memory;
}

/// Counters of the generation loop and its progress line on stderr.
struct RunProgress {
  size_t total = 0, done = 0, n_truncated = 0, n_ungraded = 0;
  std::string first_ungraded;  // one reason, for the end-of-run warning
  int64_t gen_tokens = 0;
  bool quiet = false, tty = isatty(fileno(stderr));
  std::chrono::steady_clock::time_point t_start = std::chrono::steady_clock::now();

  void print(bool final_line) const {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const double eta = done ? el / done * (total - done) : 0;
    std::string line = fmt::format(
        "[{}/{}] {:.1f} generated tok/s over the wall time (prefill included), elapsed {:.0f} s, ETA {:.0f} s", done,
        total, el > 0 ? gen_tokens / el : 0.0, el, eta);
    if (quiet) return;
    if (tty) std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final_line ? "\n" : "");
    else std::fprintf(stderr, "%s\n", line.c_str());
  }
};

/// The stored rows of a work item whose prompt does not fit the model: an error generation and
/// an ungraded grade.
void store_not_generated(const results::WorkItem& it, const tasks::Example& ex, const BuiltRequest& b,
                         std::vector<results::GenerationRecord>& gens, std::vector<results::GradeRecord>& grades) {
  results::GenerationRecord g;
  g.item_key = it.key;
  g.prompt_tokens = static_cast<int64_t>(b.request.prompt.size());
  g.finish_reason = "error: " + b.error;
  g.kv_bytes_steady = 0;  // nothing held, nothing decoded (zeros like its other measurements)
  g.kv_tokens_mean = 0.0;
  g.kv_tokens_peak = 0;
  g.decode_share_s = 0.0;
  gens.push_back(g);
  results::GradeRecord gr;
  gr.item_key = it.key;
  gr.grader = ex.grader;
  gr.ungraded = true;
  gr.reason = "not generated: prompt exceeds the model's context";
  grades.push_back(gr);
}

/// Fresh-context follow-ups (LongBench-v2 CoT step 2): a new prompt per step, built from the
/// turn's user message with the previous output substituted, generated as a batch.
void run_fresh_followups(Engine& engine, const LoadedModel& lm, const std::vector<const tasks::Example*>& exs,
                         const std::vector<GenerationRequest>& reqs, std::vector<GenerationResult>& results,
                         std::optional<int> cli_cap) {
  for (size_t step = 0;; ++step) {
    std::vector<GenerationRequest> next;
    std::vector<size_t> owner;
    for (size_t k = 0; k < results.size(); ++k) {
      const tasks::Example& ex = *exs[k];
      if (!fresh_context_followups(ex) || step >= ex.followups.size()) continue;
      const GenerationResult& prev = step == 0 ? results[k] : results[k].followups[step - 1];
      next.push_back(build_fresh_followup(lm, ex, step, prev.text, reqs[k], cli_cap));
      results[k].followups.resize(ex.followups.size());
      owner.push_back(k);
    }
    if (next.empty()) break;
    auto got = engine.generate(next, lm.tokenizer.get());
    for (size_t j = 0; j < got.size(); ++j) {
      got[j].followups.clear();
      results[owner[j]].followups[step] = std::move(got[j]);
    }
  }
}

/// The generation row of one result. Multi-turn: the row's counts and times cover every turn
/// (tok/s stays honest); its text is the first turn's; each turn's own numbers go to extra_json
/// "turns" and its text to `turn_texts`.
results::GenerationRecord generation_record(const results::WorkItem& it, const tasks::Example& ex,
                                            const GenerationResult& res, const BuiltRequest& b,
                                            const std::string& spec_text, std::vector<std::string>* turn_texts) {
  results::GenerationRecord g;
  g.item_key = it.key;
  g.text = res.text;
  g.prompt_tokens = res.prompt_tokens;
  g.generated_tokens = static_cast<int64_t>(res.tokens.size());
  g.finish_reason = finish_reason_name(res.finish);
  g.prefill_s = res.prefill_s;
  g.decode_s = res.decode_s;
  g.ttft_s = res.ttft_s;
  g.evictions = res.evictions;
  g.kv_bytes_peak = static_cast<int64_t>(res.kv_bytes_peak);
  g.kv_bytes_final = static_cast<int64_t>(res.kv_bytes_final);
  int64_t steady = static_cast<int64_t>(res.kv_bytes_steady);
  double share = res.decode_share_s;
  int64_t read_bytes = res.kv_read_bytes, read_steps = res.decode_steps;
  // Realised tokens per head: the mean over every turn's counted steps, the most one head held.
  double tok_sum = res.kv_tokens_mean * static_cast<double>(res.kv_token_steps);
  int64_t tok_steps = res.kv_token_steps, tok_peak = res.kv_tokens_peak;
  nlohmann::json turns = nlohmann::json::array();
  for (const auto& t : res.followups) {
    turns.push_back({{"text", t.text},
                     {"finish_reason", finish_reason_name(t.finish)},
                     {"prompt_tokens", t.prompt_tokens},
                     {"generated_tokens", t.tokens.size()},
                     {"prefill_s", t.prefill_s},
                     {"decode_s", t.decode_s},
                     {"kv_bytes_final", t.kv_bytes_final},
                     {"kv_bytes_steady", t.kv_bytes_steady}});
    turn_texts->push_back(t.text);
    g.generated_tokens += static_cast<int64_t>(t.tokens.size());
    g.prefill_s += t.prefill_s;
    g.decode_s += t.decode_s;
    share += t.decode_share_s;
    steady = std::max<int64_t>(steady, static_cast<int64_t>(t.kv_bytes_steady));
    g.kv_bytes_peak = std::max<int64_t>(g.kv_bytes_peak, static_cast<int64_t>(t.kv_bytes_peak));
    read_bytes += t.kv_read_bytes;
    tok_sum += t.kv_tokens_mean * static_cast<double>(t.kv_token_steps);
    tok_steps += t.kv_token_steps;
    tok_peak = std::max(tok_peak, t.kv_tokens_peak);
    read_steps += t.decode_steps;
    if (!fresh_context_followups(ex)) {
      g.evictions = t.evictions;
      g.kv_bytes_final = static_cast<int64_t>(t.kv_bytes_final);
    }
  }
  g.kv_bytes_steady = steady;
  g.decode_share_s = share;
  g.kv_tokens_mean = tok_steps > 0 ? tok_sum / static_cast<double>(tok_steps) : 0.0;
  g.kv_tokens_peak = tok_peak;
  if (read_steps > 0) g.kv_bytes_read_step = static_cast<double>(read_bytes) / static_cast<double>(read_steps);
  g.device_peak_bytes = static_cast<int64_t>(peak_rss_bytes());
  g.extra = {{"policy_s", res.policy_s}, {"kv_token_bytes_peak", res.kv_token_bytes_peak}, {"policy_spec", spec_text}};
  // The batch this generation really ran in (mean sequences per decode step it took part in) and
  // how often it was preempted (docs/results.md, generations.extra).
  if (res.decode_steps > 0)
    g.extra["decode_batch_mean"] = static_cast<double>(res.decode_batch_sum) / static_cast<double>(res.decode_steps);
  if (res.preemptions > 0) g.extra["preemptions"] = res.preemptions;
  if (b.truncated_from) g.extra["prompt_truncated_from"] = b.truncated_from;
  if (!turns.empty()) g.extra["turns"] = turns;
  if (!b.turn_note.empty()) g.extra["turns_note"] = b.turn_note;
  return g;
}

/// What every batch of the run shares.
struct BatchContext {
  const RunArgs& args;
  const RunGrid& grid;
  const LoadedModel& lm;
  Engine& engine;
  const std::string& spec_text;
  graders::Judge* judge;
  results::Store& store;
  int64_t run_id;
};

/// The request options of a run.
RequestOptions request_options(const RunArgs& a) {
  RequestOptions ro;
  ro.min_p = a.min_p;
  ro.max_new_tokens = a.max_new_tokens;
  ro.query_agnostic = a.query_agnostic;
  ro.truncate_middle = a.truncate == "middle";
  return ro;
}

/// Grades finished generations and stores them with `gens` / `grades` already built (one
/// transaction), then counts them in `progress`.
void grade_and_store(const BatchContext& c, std::vector<results::GenerationRecord>& gens,
                     std::vector<results::GradeRecord>& grades, std::vector<GradeJob>& grade_todo, RunProgress& progress) {
  for (auto& gr : grade_jobs(grade_todo, c.judge, c.store)) {
    if (gr.ungraded) {
      ++progress.n_ungraded;
      if (progress.first_ungraded.empty()) progress.first_ungraded = gr.reason;
    }
    grades.push_back(std::move(gr));
  }
  c.store.write_batch(c.run_id, gens, grades);
  progress.done += gens.size();
  progress.print(false);
  gens.clear();
  grades.clear();
  grade_todo.clear();
}

/// Thrown by the finished-request callback of stream_items on Ctrl-C (ends Engine::generate).
struct Interrupted {};

/// The engine requests of some work items, and what their results are stored with.
struct BuiltBatch {
  std::vector<BuiltRequest> built;
  std::vector<GenerationRequest> reqs;
  std::vector<const tasks::Example*> exs;
  std::vector<const results::WorkItem*> items;
};

/// Builds the requests of `items`; an item too long for the model is stored as an error
/// (ungraded) into `gens` / `grades` instead, and the run goes on.
BuiltBatch build_batch(const BatchContext& c, const std::vector<const results::WorkItem*>& items,
                       std::vector<results::GenerationRecord>& gens, std::vector<results::GradeRecord>& grades) {
  const RequestOptions ro = request_options(c.args);
  BuiltBatch b;
  for (const auto* it : items) {
    const ExampleRef& er = c.grid.by_example.at(it->task + "\n" + it->example_id);
    BuiltRequest r = build_request(c.lm, *er.ex, it->sampling, er.max_new_tokens, it->seed, ro);
    if (!r.error.empty()) {
      store_not_generated(*it, *er.ex, r, gens, grades);
      continue;
    }
    b.reqs.push_back(r.request);
    b.built.push_back(std::move(r));
    b.exs.push_back(er.ex);
    b.items.push_back(it);
  }
  return b;
}

/// Adds finished request k of `b` (result `res`) to `gens` and `grade_todo`, and counts it.
void record_result(const BatchContext& c, const BuiltBatch& b, size_t k, const GenerationResult& res,
                   std::vector<results::GenerationRecord>& gens, std::vector<GradeJob>& grade_todo,
                   RunProgress& progress) {
  std::vector<std::string> turn_texts;
  gens.push_back(generation_record(*b.items[k], *b.exs[k], res, b.built[k], c.spec_text, &turn_texts));
  if (b.built[k].truncated_from) ++progress.n_truncated;
  progress.gen_tokens += gens.back().generated_tokens;
  grade_todo.push_back({b.items[k]->key, b.exs[k], res.text, turn_texts});
}

/// Generates the work items of one (policy, budget) engine in ONE Engine::generate call, so the
/// scheduler can fill the batch (by count, or by pages under --memory) across all of them, and
/// grades and stores them as they finish, --write-every at a time (one transaction each): a kill
/// loses at most the finished generations not yet written and the ones in flight. Returns false
/// when interrupted.
bool stream_items(const BatchContext& c, const std::vector<const results::WorkItem*>& items, RunProgress& progress) {
  std::vector<results::GenerationRecord> gens;
  std::vector<results::GradeRecord> grades;
  std::vector<GradeJob> grade_todo;
  const BuiltBatch b = build_batch(c, items, gens, grades);
  if (!gens.empty()) grade_and_store(c, gens, grades, grade_todo, progress);
  std::vector<GenerationResult> results;
  auto finished = [&](size_t k) {
    record_result(c, b, k, results[k], gens, grade_todo, progress);
    if (gens.size() >= static_cast<size_t>(c.args.write_every)) grade_and_store(c, gens, grades, grade_todo, progress);
    if (g_interrupted) throw Interrupted{};
  };
  try {
    if (!b.reqs.empty()) c.engine.generate_into(b.reqs, c.lm.tokenizer.get(), results, {}, finished);
  } catch (const Interrupted&) {
    return false;
  }
  if (!gens.empty()) grade_and_store(c, gens, grades, grade_todo, progress);
  return true;
}

/// Generates, grades and stores one batch of work items (one transaction): the items whose
/// fresh-context follow-ups generate again after their first turn (run_fresh_followups).
void run_batch(const BatchContext& c, const std::vector<const results::WorkItem*>& batch, RunProgress& progress) {
  std::vector<results::GenerationRecord> gens;
  std::vector<results::GradeRecord> grades;
  std::vector<GradeJob> grade_todo;
  const BuiltBatch b = build_batch(c, batch, gens, grades);
  auto results = b.reqs.empty() ? std::vector<GenerationResult>{} : c.engine.generate(b.reqs, c.lm.tokenizer.get());
  run_fresh_followups(c.engine, c.lm, b.exs, b.reqs, results, c.args.max_new_tokens);
  for (size_t k = 0; k < results.size(); ++k) record_result(c, b, k, results[k], gens, grade_todo, progress);
  grade_and_store(c, gens, grades, grade_todo, progress);
}

/// --memory: refuses a pool that holds no KV page of any of `model_specs` (the backend's page of the
/// full cache, without policy scalars: the smallest the engine makes; memory_pool_pages) before the
/// results database is opened, so such a run leaves no run row behind (issue 46, item 7). Throws
/// kvb::Error "--memory: N bytes hold no KV page of M bytes (model X)".
void check_pool_holds_a_page(const RunArgs& a, const std::vector<std::string>& model_specs) {
  if (!(a.memory_gib > 0)) return;
  for (const auto& m : model_specs) {
    const std::string file = model_file_of(m);
    const bool gguf = file.size() > 5 && file.compare(file.size() - 5, 5, ".gguf") == 0;
    const ModelConfig cfg = gguf ? gguf_model_config(GgufFile::open(file)) : ModelConfig::from_dir(file);
    const int P = EngineOptions{}.page_size;
    if (memory_pool_pages(a.memory_gib, a.backend, cfg, P) < 1)
      fail("--memory: {} bytes hold no KV page of {} bytes (model {})", kv_pool_bytes_of_gib(a.memory_gib),
           kv_page_geometry(a.backend, cfg, P).bytes_per_page(), m);
  }
}

/// The engine options of a run: backend, prefill chunk, the batch bound and the page pool.
EngineOptions engine_options(const RunArgs& a) {
  EngineOptions eo;
  eo.backend = a.backend;
  eo.max_batch = a.batch;
  eo.prefill_chunk = a.prefill_chunk;
  eo.max_step_tokens = a.max_step_tokens;
  eo.admission = parse_admission(a.admission);
  if (a.memory_gib > 0) eo.kv_pool_bytes = kv_pool_bytes_of_gib(a.memory_gib);
  return eo;
}

/// Under --memory: the batch a cell really ran at, and its preemptions (stderr).
void print_schedule(Engine& engine, const RunArgs& a) {
  if (a.memory_gib <= 0 || a.quiet) return;
  const ScheduleStats& st = engine.schedule_stats();
  std::fprintf(stderr,
               "%skvbench: --memory %.3g GiB (%lld KV pages): mean decode batch %.1f, largest %d, %lld preemptions, "
               "peak %lld pages\n",
               isatty(fileno(stderr)) ? "\n" : "", a.memory_gib,
               static_cast<long long>(engine.cache().config().max_pages), st.mean_decode_batch(), st.max_decode_batch,
               static_cast<long long>(st.preemptions), static_cast<long long>(st.peak_pages));
}

/// Generates the pending items of one model: its weights loaded once, one engine per (policy,
/// budget), batches of --write-every items. Returns early when interrupted.
void run_model(const RunArgs& a, const RunGrid& rg, const RunPolicies& policies, const std::string& model_id,
               const std::vector<results::WorkItem>& todo, graders::Judge* judge, results::Store& store, int64_t run_id,
               RunProgress& progress) {
  std::map<std::pair<std::string, int64_t>, std::vector<const results::WorkItem*>> groups;
  for (const auto& it : todo)
    if (it.model_id == model_id) groups[{it.policy_label, it.budget}].push_back(&it);
  if (groups.empty()) return;
  LoadedModel lm = load_model(rg.spec_of.at(model_id), parse_weights_option(a.weights));
  recheck_input_files();  // the files just loaded are the ones the run recorded
  release_freed_heap();   // what loading freed (tokenizer build, conversions) goes back to the OS
  for (const auto& [key, group] : groups) {
    const RunPolicy& rp = policies.by_label.at(key.first);
    const std::string& spec_text = rp.text;
    std::unique_ptr<Policy> policy = rp.resolved.build_at(key.second);
    const EngineOptions eo = with_scoring_prompts(engine_options(a), lm, policy.get());
    Engine engine(lm.model, eo, std::move(policy));
    const BatchContext c{a, rg, lm, engine, spec_text, judge, store, run_id};
    // One generate call for the cell (the scheduler fills the batch across all its items); the
    // items with fresh-context follow-ups, which generate again after their first turn, batch by
    // batch after them.
    std::vector<const results::WorkItem*> streamed, batched;
    for (const auto* it : group)
      (fresh_context_followups(*rg.by_example.at(it->task + "\n" + it->example_id).ex) ? batched : streamed).push_back(it);
    if (!stream_items(c, streamed, progress)) return;
    print_schedule(engine, a);
    for (size_t start = 0; start < batched.size() && !g_interrupted; start += a.write_every) {
      const size_t end = std::min(batched.size(), start + a.write_every);
      run_batch(c, std::vector<const results::WorkItem*>(batched.begin() + start, batched.begin() + end), progress);
    }
    if (g_interrupted) return;
  }
}

void run_main(RunArgs a) {
  if (a.bf16) {
    if (a.weights != "stored" && a.weights != "bf16") fail("--bf16-weights contradicts --weights {}", a.weights);
    a.weights = "bf16";
  }
  parse_weights_option(a.weights);  // a bad value fails before anything is opened
  if (a.truncate != "middle" && a.truncate != "none") fail("--truncate: expected middle or none, got '{}'", a.truncate);
  const tasks::Suite suite = resolve_suite(a);
  const std::vector<std::string> data_dirs = a.data_dirs.empty() ? datasets::default_data_dirs() : a.data_dirs;
  const LoadedTasks lt = load_tasks(suite.tasks, data_dirs, a.limit, a.on_bad);
  for (const auto& s : lt.skipped) std::fprintf(stderr, "kvbench: skipped bad example: %s\n", s.c_str());
  const std::vector<int64_t> budgets = resolve_budgets(a, suite);
  const std::vector<std::string> run_models = a.models.empty() ? std::vector<std::string>{kDefaultModelName} : a.models;
  // Every model some task runs on (a suite task may name its own: tasks/suite.h).
  const std::vector<std::string> model_specs = run_model_specs(suite, run_models);
  RunPolicies policies = resolve_policies(a.policies, budgets.front(), run_models);
  add_task_policies(policies, suite, budgets, run_models);
  use_hash_cache(a.db);  // unchanged model and data files are not read again (harness/input_identity.h)
  const RunGrid rg = expand_run_grid(a, model_specs, lt, policies, budgets, run_models);

  // Store, run row, shard, resume. Everything that can be refused is checked first, so a bad
  // option never leaves a run row behind.
  kvb::check_backend_name(a.backend);
  const results::Shard shard = results::resolve_shard(a.shard, [](const char* k) { return std::getenv(k); });
  std::unique_ptr<graders::Judge> judge = make_judge(a.judge);  // null without --judge
  const results::RunInfo info = run_info(a, suite, lt, model_specs, policies, budgets, data_dirs, rg);
  // The output policy (engine/util/io.h): the database is none of the files read (config, suite,
  // a model file) and a regular file or a new name (the store refuses "", :memory: and URIs).
  if (!a.db.empty() && a.db.rfind("file:", 0) != 0 && a.db != ":memory:") {
    std::vector<std::string> inputs = {a.config};
    std::error_code ec;
    for (const auto& m : model_specs)
      if (std::filesystem::exists(m, ec)) inputs.push_back(m);  // a local model, not a Hub id
    if (file_exists(a.suite)) inputs.push_back(a.suite);        // a suite file, not a built-in name
    check_output_not_input(a.db, "--db", inputs);
    check_replaceable(a.db, "--db");
  }
  check_engine_options(engine_options(a));  // before the database: a refused run leaves no row
  check_pool_holds_a_page(a, model_specs);
  results::Store store(a.db);
  const int64_t run_id = store.begin_run(info, shard);  // refuses a run whose input files changed
  store.put_file_hashes(cacheable_file_hashes());
  const HashCounters hc = hash_counters();
  std::fprintf(stderr, "kvbench: %zu input files identified by sha256 (%.1f MB read, %.1f MB from the hash cache)\n",
               info.inputs.size(), static_cast<double>(hc.bytes_read) / 1e6,
               static_cast<double>(hc.bytes_from_cache) / 1e6);
  auto mine = results::select_shard(rg.items, shard);
  store.add_work_items(mine);
  const auto todo = store.pending(run_id, mine);
  std::fprintf(stderr,
               "kvbench: run %lld in %s: %zu work items (shard %d/%d: %zu), %zu already stored, %zu to generate\n",
               static_cast<long long>(run_id), a.db.c_str(), rg.items.size(), shard.index, shard.count, mine.size(),
               mine.size() - todo.size(), todo.size());

  // Generate, grade, store: one model at a time, one (policy, budget) engine at a time.
  std::signal(SIGINT, on_sigint);
  RunProgress progress;
  progress.total = todo.size();
  progress.quiet = a.quiet;
  for (const auto& mref : rg.models) {
    if (g_interrupted) break;
    run_model(a, rg, policies, mref.id, todo, judge.get(), store, run_id, progress);
  }
  progress.print(true);
  if (progress.n_truncated)
    std::fprintf(stderr,
                 "kvbench: %zu prompts were longer than the context minus max_new_tokens and were middle-truncated "
                 "(generations.extra.prompt_truncated_from)\n",
                 progress.n_truncated);
  if (g_interrupted) {
    std::fprintf(stderr, "kvbench: interrupted; %zu generations stored in %s; rerun the same command to resume\n",
                 progress.done, a.db.c_str());
    std::exit(130);
  }
  store.end_run(run_id);
  print_cells(store, run_id);
  warn_ungraded(progress.n_ungraded, progress.done, progress.first_ungraded, a.db, a.strict);
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand(
      "run", "Run a benchmark grid (suite × models × policies × budgets × samples) into a SQLite DB; resumable");
  c->add_option("--suite", a->suite, "Built-in suite (smoke, math, longproc, longctx) or a suite YAML file");
  c->add_option("--task", a->tasks, "Task spec instead of a suite (repeatable), e.g. gsm8k:template=rkv");
  c->add_option(
      "--model", a->models,
      "Model (repeatable): directory, .gguf file, named model (kvbench models) or Hub id org/name[@rev][:FILE.gguf]");
  c->add_option("--policies", a->policies, "Comma-separated policy specs, e.g. full,snapkv,rkv:window=8");
  c->add_option("--budgets", a->budgets, "Comma-separated KV budgets (tokens per layer and kv head)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.empty() ? std::string("must list at least one budget") : std::string(); },
          "LIST"));
  c->add_option("--samples", a->samples, "Samples per example (overrides the suite)")->check(kvb::cli::positive());
  c->add_option("--temperature", a->temperature, "Sampling temperature (overrides the suite)")
      ->check(kvb::cli::non_negative());
  c->add_option("--top-p", a->top_p, "Nucleus threshold (overrides the suite)")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--top-k", a->top_k, "Top-k (overrides the suite)")->check(kvb::cli::non_negative());
  c->add_option("--min-p", a->min_p, "Min-p")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--max-new-tokens", a->max_new_tokens, "Generation cap (overrides suite and task)")
      ->check(kvb::cli::positive());
  c->add_option("--seed", a->seed, "Base seed; each sample's seed derives from (seed, task, example, sample)")
      ->check(kvb::cli::non_negative());
  c->add_option("--backend", a->backend, "cpu");
  c->add_option("--db", a->db, "Results database (SQLite)");
  c->add_option("--run-name", a->run_name, "A label for this run (for compare/report)");
  c->add_option("--limit", a->limit, "First K examples of each task")->check(kvb::cli::non_negative());
  c->add_option("--shard", a->shard, "This process's slice i/n of the grid (default: Slurm/Open MPI rank or 0/1)");
  c->add_option("--data-dir", a->data_dirs, "Local dataset mirror laid out as docs/benchmarks.md describes (repeatable)");
  c->add_option("--on-bad-example", a->on_bad, "skip or fail on a malformed dataset record");
  c->add_option("--batch", a->batch,
                "Sequences running at once at most (default 8; with --memory: no count limit, the pool bounds it)")
      ->check(kvb::cli::positive());
  c->add_option("--memory", a->memory_gib, kMemoryHelp)->check(kvb::cli::positive());
  c->add_option("--max-step-tokens", a->max_step_tokens,
                "Prompt tokens per forward step over all prefilling sequences, whole chunks (0 = no limit: "
                "--prefill-chunk each; else at least --prefill-chunk); decode tokens of the running sequences "
                "ride along")
      ->check(kvb::cli::non_negative());
  c->add_option("--admission", a->admission,
                "With --memory: reserve (a sequence reserves its projected peak, then its steady pages) or optimistic "
                "(vLLM: admit when the prompt fits now, preempt when the pool runs short)")
      ->capture_default_str();
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")->check(kvb::cli::positive());
  c->add_option("--write-every", a->write_every, "Generations per stored batch (transaction)")->check(kvb::cli::positive());
  c->add_option("--weights", a->weights,
                "How weight matrices are held: stored (as the file stores them; GGUF blocks multiplied in place), "
                "f32 or bf16 (converted on load; the CPU computes in f32)")
      ->capture_default_str();
  c->add_flag("--bf16-weights", a->bf16, "Same as --weights bf16 (kept for old scripts)");
  c->add_flag("--quiet", a->quiet, "No progress line");
  c->add_flag("--strict", a->strict, "Exit 1 when any sample is left ungraded (failed judge request, grader error)");
  c->add_option("--truncate", a->truncate,
                "Prompts longer than the context minus max_new_tokens: middle (keep the first and last halves of "
                "the tokens, as LongBench/HELMET) or none (store as errors)")
      ->capture_default_str();
  c->add_flag("--query-agnostic", a->query_agnostic,
              "For tasks whose prompt holds a shared context (LongMemEval history, LongBench/SCBench documents): "
              "prefill and compress the context before the query arrives (TRIM-KV's LongMemEval protocol); "
              "default: the whole prompt at once (query-aware)");
  c->add_option("--config", a->config,
                "A YAML file such as ci/nightly.yaml (suite, data_dir, db, run: models, policies, budgets, ...); "
                "options on the command line win");
  c->add_option("--config-profile", a->config_profile,
                "A top-level section of --config whose keys override its run section (e.g. gpu_run)");
  add_judge_options(c, a->judge);
  c->callback([a, c] {
    // `--weights stored --bf16-weights` asked for two things (bf16 silently won): only
    // `--weights bf16` agrees with the old flag.
    if (a->bf16 && c->get_option("--weights")->count() > 0 && a->weights != "bf16")
      fail("--bf16-weights contradicts --weights {}", a->weights);
    // `--config-profile ""` named no profile and ran the plain run section.
    if (c->get_option("--config-profile")->count() > 0 && a->config_profile.empty())
      fail("--config-profile: empty name (give a top-level section of --config, e.g. gpu_run)");
    apply_config(*a, c);
    parse_admission(a->admission);  // a bad value fails before anything is opened
    // Admission chooses how sequences enter a KV page pool: without one it would be ignored.
    if (c->get_option("--admission")->count() > 0 && !(a->memory_gib > 0))
      fail("--admission: applies only with --memory (a KV page pool); without it --batch bounds the batch");
    if (a->memory_gib > 0 && !(a->memory_gib <= kMaxMemoryGiB))
      fail("--memory: at most {} GiB, got {}", kMaxMemoryGiB, a->memory_gib);
    if (a->memory_gib > 0 && c->count("--batch") == 0) a->batch = 0;  // the pool bounds the batch
    run_main(*a);
  });
}

}  // namespace kvb::cli
