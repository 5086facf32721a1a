// `kvbench run` (the main job) and `kvbench grade`.
//
// run: suite → tasks → examples; × models × policy specs × budgets × samples → work items keyed
// by content hash (results/grid.h); skip items already stored (resume); generate the rest with
// the engine — one model loaded at a time, one (policy, budget) per engine, continuous batching
// inside — grade each output, and store generations and grades batch by batch in SQLite (one
// transaction per batch, so Ctrl-C or a kill loses at most the batch in flight). Finally print
// the per-cell table.
// grade: re-scores stored generations without generating (examples are re-loaded from the
// run's recorded task specs and data directories).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <cstdio>
#include <map>
#include <set>

#include <fmt/format.h>

#include "datasets/registry.h"
#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "graders/grade.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/judge_grading.h"
#include "harness/model_source.h"
#include "harness/run_support.h"
#include "results/cells.h"
#include "results/grid.h"
#include "results/sha256.h"
#include "results/store.h"
#include "tasks/suite.h"
#include "tasks/task.h"

namespace kvb::cli {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

struct RunArgs {
  std::string suite = "smoke";
  std::vector<std::string> tasks, models, data_dirs;
  std::string policies = "full,snapkv";  // the default run: full cache + one compressing policy
  std::string budgets;  // empty: the suite's, else 64,128
  int samples = 0;      // 0: the suite's
  std::optional<double> temperature, top_p;
  std::optional<int> top_k, max_new_tokens;
  double min_p = 0.0;
  uint64_t seed = 0;
  std::string backend = "cpu", db = "kvbench.db", run_name, on_bad = "fail";
  size_t limit = 0;
  bool query_agnostic = false;  // prefill and compress a task's shared context before its query
  std::string truncate = "middle";  // over-long prompts: middle (LongBench/HELMET) or none (stored as errors)
  std::string config, config_profile;
  std::optional<std::string> shard;
  int batch = 8, prefill_chunk = 512, write_every = 8;
  bool bf16 = false, quiet = false;
  bool strict = false;  // exit 1 when any sample is left ungraded (failed judge request, grader error)
  JudgeArgs judge;
};

/// Splits a comma-separated option value; an empty item ("32,,64", a trailing comma) is an
/// error naming `option` rather than silently dropped.
std::vector<std::string> split_csv(const std::string& s, const char* option) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(',', start);
    std::string part = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
    if (part.empty()) fail("{}: empty item in '{}'", option, s);
    out.push_back(part);
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

/// Splits a policy list on commas that start a new policy (a comma followed by "name:" or a
/// bare name), keeping "rkv:window=8,buffer=128" together: a part containing '=' belongs to
/// the previous policy.
std::vector<std::string> split_policies(const std::string& s) {
  std::vector<std::string> out;
  for (const auto& part : split_csv(s, "--policies")) {
    if (part.find('=') != std::string::npos && part.find(':') == std::string::npos && !out.empty())
      out.back() += "," + part;
    else
      out.push_back(part);
  }
  return out;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string cpu_model() {
  try {
    std::string info = read_file("/proc/cpuinfo");
    auto p = info.find("model name");
    if (p != std::string::npos) {
      auto c = info.find(':', p), e = info.find('\n', p);
      return info.substr(c + 2, e - c - 2);
    }
  } catch (const Error&) {
  }
  return "cpu";
}

/// sha256 over the weight files of a model (revision for local models).
std::string weights_sha256(const std::string& spec) {
  std::vector<std::string> files;
  if (spec == kDefaultModelName) files.push_back(default_model_path());
  else if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".gguf") files.push_back(spec);
  else if (file_exists(spec + "/model.safetensors")) files.push_back(spec + "/model.safetensors");
  else if (file_exists(spec + "/model.safetensors.index.json")) {
    auto idx = parse_json_file(spec + "/model.safetensors.index.json");
    std::set<std::string> shards;
    for (auto& [k, v] : idx["weight_map"].items()) shards.insert(v.get<std::string>());
    for (const auto& s : shards) files.push_back(spec + "/" + s);
  }
  std::string cat;
  for (const auto& f : files) {
    MappedFile m(f);
    cat += results::sha256_hex(std::string_view(reinterpret_cast<const char*>(m.data()), m.size()));
  }
  return files.size() == 1 ? cat : results::sha256_hex(cat);
}

struct ExampleRef {
  const tasks::Example* ex = nullptr;
  int max_new_tokens = 0;
};

SamplingParams engine_sampling(const nlohmann::json& s, double min_p) {
  SamplingParams p;
  p.temperature = static_cast<float>(s.value("temperature", 0.0));
  p.top_p = static_cast<float>(s.value("top_p", 1.0));
  p.top_k = s.value("top_k", 0);
  p.min_p = static_cast<float>(min_p);
  return p;
}

/// Loads every example of a suite's tasks (with limits) into `store`; returns per-task specs.
struct LoadedTasks {
  std::vector<tasks::SuiteTask> suite_tasks;
  std::map<std::string, std::vector<tasks::Example>> examples;  // by suite task spec
  std::vector<std::string> skipped;
};

LoadedTasks load_tasks(const std::vector<tasks::SuiteTask>& suite_tasks, const std::vector<std::string>& data_dirs,
                       size_t cli_limit, const std::string& on_bad) {
  LoadedTasks lt;
  lt.suite_tasks = suite_tasks;
  datasets::DataLocator loc(data_dirs);
  for (const auto& st : suite_tasks) {
    auto task = tasks::make_task(st.spec);
    datasets::BadRecords bad;
    bad.mode = datasets::parse_on_bad(on_bad);
    tasks::TaskContext ctx;
    ctx.locate = [&](const std::string& key) { return loc.locate(key); };
    ctx.bad = &bad;
    ctx.limit = cli_limit ? cli_limit : st.limit;
    lt.examples[st.spec] = task->load_all(ctx);
    for (auto& s : bad.skipped) lt.skipped.push_back(s);
  }
  return lt;
}

void print_cells(results::Store& store, int64_t run_id) {
  auto rows = store.samples({run_id});
  auto cells = results::compute_cells(rows);
  std::printf("\n%-24s %-30s %-28s %7s %4s %18s %10s %14s %26s\n", "model", "task", "policy", "budget", "n",
              "pass@1 [Wilson 95%]", "tok/s", "KV peak (B)", "Δ vs full [paired 95%]");
  bool any_sig = false;
  for (const auto& c : cells) {
    std::string model = c.key.model_id.size() > 24 ? "…" + c.key.model_id.substr(c.key.model_id.size() - 23) : c.key.model_id;
    std::string acc = c.pass1 ? fmt::format("{:.3f} [{:.2f},{:.2f}]", c.pass1->mean, c.pass1->lo, c.pass1->hi) : "-";
    std::string delta;
    if (c.delta_vs_reference) {
      const auto& d = *c.delta_vs_reference;
      const bool sig = d.n > 1 && (d.lo > 0 || d.hi < 0);  // the paired bootstrap CI excludes 0
      any_sig = any_sig || sig;
      delta = d.n > 1 ? fmt::format("{:+.3f} [{:+.2f},{:+.2f}]{}", d.mean, d.lo, d.hi, sig ? "*" : " ")
                      : fmt::format("{:+.3f}", d.mean);
    }
    std::printf("%-24s %-30s %-28s %7s %4d %18s %10.1f %14.0f %26s\n", model.c_str(), c.key.task.c_str(),
                c.key.policy_label.c_str(), c.key.budget ? std::to_string(c.key.budget).c_str() : "-", c.n_samples,
                acc.c_str(), c.decode_tok_s, c.kv_bytes_peak_mean, delta.c_str());
  }
  std::printf("pass@1: mean over examples of per-example mean scores, 95%% Wilson score interval over examples; "
              "Δ vs full: paired by example and sample, 95%% percentile bootstrap over examples%s\n",
              any_sig ? "; * = the interval excludes 0" : "");
}

/// Whether the follow-ups of `ex` start from a fresh prompt built from the previous output
/// (LongBench-v2's CoT step 2: meta "fresh_context") rather than continuing the sequence.
bool fresh_context_followups(const tasks::Example& ex) {
  return !ex.followups.empty() && ex.followups.front().meta.value("fresh_context", false);
}

/// The generation cap of a follow-up turn: --max-new-tokens, else the turn's own, else `first`.
int turn_cap(const tasks::Turn& t, std::optional<int> cli_cap, int first) {
  return cli_cap ? *cli_cap : (t.max_new_tokens > 0 ? t.max_new_tokens : first);
}

/// The follow-up turns of a shared-context multi-turn example (SCBench protocol,
/// datasets-graders.md §SCBench (b)) as the tokens each turn appends to the sequence: the
/// previous turn's gold answer as the assistant reply, then the next user message. With a chat
/// template, turn k appends render(messages up to user k) minus render(messages up to user
/// k−1), both with the generation prompt, so the cached tokens are exactly the conversation's
/// (where a template re-renders earlier text differently, the common prefix is kept and `*note`
/// says so). Without one, it appends gold + "\n\n" + user. Throws kvb::Error when the example
/// wants the model's own outputs as history (not supported: the engine drops generated KV).
std::vector<FollowupTurn> build_followups(const LoadedModel& lm, const tasks::Example& ex, int first_cap,
                                          std::optional<int> cli_cap, std::string* note) {
  std::vector<FollowupTurn> out;
  if (ex.followups.empty() || fresh_context_followups(ex)) return out;
  if (!ex.golden_history)
    fail("task {}: example {}: multi-turn with the model's own outputs as history is not supported "
         "(the SCBench default is the gold answers)", ex.task, ex.id);
  std::string gold = ex.gold_history;
  if (lm.chat && ex.use_chat_template) {
    std::vector<chat::Message> msgs;
    for (const auto& m : ex.messages) msgs.push_back({m.role, m.content});
    chat::RenderOptions ro;
    std::string prev = lm.chat->render(msgs, ro);
    for (const auto& t : ex.followups) {
      msgs.push_back({"assistant", gold});
      msgs.push_back({"user", t.user});
      std::string cur = lm.chat->render(msgs, ro);
      size_t common = 0;
      while (common < prev.size() && common < cur.size() && prev[common] == cur[common]) ++common;
      if (common < prev.size() && note->empty())
        *note = fmt::format("the chat template re-renders the history of turn {} from character {} on; the cache "
                            "keeps the earlier rendering", out.size() + 1, common);
      FollowupTurn f;
      f.append = lm.tokenizer->encode(cur.substr(common), false);
      f.max_new_tokens = turn_cap(t, cli_cap, first_cap);
      f.stop_strings = t.stop;
      out.push_back(std::move(f));
      prev = std::move(cur);
      gold = t.gold_history;
    }
  } else {
    for (const auto& t : ex.followups) {
      FollowupTurn f;
      f.append = lm.tokenizer->encode(gold + "\n\n" + t.user, false);
      f.max_new_tokens = turn_cap(t, cli_cap, first_cap);
      f.stop_strings = t.stop;
      out.push_back(std::move(f));
      gold = t.gold_history;
    }
  }
  return out;
}

/// The cell label of a policy: its name, then the resolved parameters that differ from the
/// registry's defaults as sorted key=value pairs, e.g. "snapkv", "trimkv:random_gates=0",
/// "rkv:lambda=0.2,window=16". Unique per distinct resolved parameters within one kvbench build
/// (the defaults are fixed); the full parameters stay in work_items.policy_params_json.
std::string policy_cell_label(const std::string& name, const nlohmann::json& params) {
  std::map<std::string, std::string> defaults;
  for (const auto& info : policy_registry())
    if (info.name == name)
      for (const auto& p : info.params) defaults[p.key] = p.default_value;
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    char* ea = nullptr;
    char* eb = nullptr;
    const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
    return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;  // "8" == "8.0"
  };
  std::string out = name;
  bool first = true;
  for (const auto& [k, v] : params.items()) {  // nlohmann::json objects iterate in sorted key order
    auto d = defaults.find(k);
    if (d != defaults.end() && same(text(v), d->second)) continue;
    out += (first ? ":" : ",") + k + "=" + text(v);
    first = false;
  }
  return out;
}

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
}

/// The end-of-run line for samples left ungraded (failed judge requests, grader errors): they
/// count in no pass@1 until `kvbench grade --retry-failed` grades them. With --strict, exit 1.
void warn_ungraded(size_t n_ungraded, size_t total, const std::string& reason, const std::string& db, bool strict) {
  if (n_ungraded == 0) return;
  std::fflush(stdout);  // after the summary table
  std::fprintf(stderr,
               "kvbench: warning: %zu of %zu samples are ungraded (first reason: %s); they count in no score "
               "until `kvbench grade --db %s --retry-failed` grades them\n",
               n_ungraded, total, reason.empty() ? "unknown" : reason.c_str(), db.c_str());
  if (strict) std::exit(1);
}

void run_main(const RunArgs& a) {
  if (a.truncate != "middle" && a.truncate != "none")
    fail("--truncate: expected middle or none, got '{}'", a.truncate);
  // --- Suite and tasks.
  tasks::Suite suite;
  if (!a.tasks.empty()) {
    suite.name = "tasks";
    suite.origin = "--task";
    for (const auto& t : a.tasks) {
      tasks::SuiteTask st;
      st.spec = t;
      tasks::make_task(t);  // validates
      suite.tasks.push_back(st);
    }
  } else {
    suite = tasks::load_suite(a.suite);
  }
  std::vector<std::string> data_dirs = a.data_dirs;
  if (data_dirs.empty()) data_dirs = datasets::default_data_dirs();
  LoadedTasks lt = load_tasks(suite.tasks, data_dirs, a.limit, a.on_bad);
  for (const auto& s : lt.skipped) std::fprintf(stderr, "kvbench: skipped bad example: %s\n", s.c_str());

  // --- Policies and budgets.
  std::vector<std::string> policy_texts = split_policies(a.policies);
  if (policy_texts.empty()) fail("--policies: empty list");
  std::vector<int64_t> budgets;
  if (!a.budgets.empty()) {
    for (const auto& b : split_csv(a.budgets, "--budgets")) {
      try {
        size_t pos = 0;
        long long v = std::stoll(b, &pos);
        if (pos != b.size() || v <= 0) throw std::invalid_argument(b);
        budgets.push_back(v);
      } catch (const std::exception&) {
        fail("--budgets: '{}' is not a positive integer", b);
      }
    }
  } else if (!suite.budgets.empty()) {
    for (auto b : suite.budgets) budgets.push_back(b);
  } else {
    budgets = {64, 128};
  }
  // Learned-gate policies without a checkpoint run with RANDOM gates, said loudly and recorded
  // in the run config (policy_notes) and, through the resolved parameters, in every item's label.
  nlohmann::json policy_notes = nlohmann::json::array();
  for (auto& pt : policy_texts) {
    std::string note;
    pt = default_gates(pt, &note);
    if (!note.empty()) {
      std::fprintf(stderr, "kvbench: warning: %s\n", note.c_str());
      policy_notes.push_back(note);
    }
  }
  std::vector<results::PolicySpec> grid_policies;
  std::map<std::string, std::string> label_to_spec;
  for (const auto& pt : policy_texts) {
    PolicySpec ps = PolicySpec::parse(pt, budgets.front());
    auto pol = make_policy(ps);  // validates the parameters
    results::PolicySpec g;
    g.name = ps.name;
    g.params = pol->resolved_params();
    g.params.erase("budget");  // the grid's budget column carries it (it was budgets.front() here)
    g.uses_budget = ps.name != "full";
    g.display = policy_cell_label(ps.name, g.params);
    label_to_spec[g.label()] = pt;
    grid_policies.push_back(g);
  }

  // --- Models (revision = sha256 of the weights).
  std::vector<std::string> model_specs = a.models.empty() ? std::vector<std::string>{kDefaultModelName} : a.models;
  std::vector<results::ModelRef> model_refs;
  std::vector<results::RunModel> run_models;
  for (const auto& m : model_specs) {
    check_model_source(m);  // a missing or damaged model fails here, before the database is opened
    std::string sha = weights_sha256(m);
    model_refs.push_back({m, sha});
    run_models.push_back({m, sha, sha});
  }

  // --- Grid: one expansion per suite task and model (samples, caps and sampling differ per
  // task; sampling per model too when it comes from the model's generation_config.json).
  std::vector<results::WorkItem> items;
  std::map<std::string, ExampleRef> by_example;  // task + "\n" + example id
  nlohmann::json sampling_record = nlohmann::json::object();  // task -> model -> {sampling, source}
  nlohmann::json gen_configs = nlohmann::json::object();      // model -> generation_config.json fields
  std::vector<GenerationDefaults> model_gen;
  for (const auto& m : model_specs) {
    model_gen.push_back(generation_defaults(m));
    if (model_gen.back().present) gen_configs[m] = model_gen.back().to_json();
  }
  for (const auto& st : lt.suite_tasks) {
    const auto& exs = lt.examples[st.spec];
    if (exs.empty()) continue;
    int cap = a.max_new_tokens ? *a.max_new_tokens : (st.max_new_tokens ? *st.max_new_tokens : 0);
    std::vector<results::GridExample> grid_examples;
    for (const auto& e : exs) {
      nlohmann::json msgs = nlohmann::json::array();
      for (const auto& m : e.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
      // The protocol is part of what a generation depends on: a query-agnostic prompt hashes
      // differently (the work item key covers it, so resume never mixes the two).
      std::string prompt_key = msgs.dump();
      if (a.query_agnostic && e.context_chars > 0) prompt_key += "\n[query-agnostic context_chars=" + std::to_string(e.context_chars) + "]";
      grid_examples.push_back({e.task, e.id, prompt_key});
      int mnt = cap ? cap : e.max_new_tokens;
      by_example[e.task + "\n" + e.id] = {&e, mnt > 0 ? mnt : 256};
    }
    for (size_t mi = 0; mi < model_refs.size(); ++mi) {
      results::GridSpec g;
      g.models = {model_refs[mi]};
      g.policies = grid_policies;
      g.budgets = budgets;
      g.samples = a.samples > 0 ? a.samples : st.samples;
      g.seed = a.seed;
      std::string source;
      const nlohmann::json s = resolve_sampling(st.sampling, model_gen[mi], a.temperature, a.top_p, a.top_k, &source);
      g.sampling.temperature = s.value("temperature", 0.0);
      g.sampling.top_p = s.value("top_p", 1.0);
      g.sampling.top_k = s.value("top_k", 0);
      g.sampling.max_new_tokens = cap ? cap : exs.front().max_new_tokens;
      g.examples = grid_examples;
      sampling_record[st.spec][model_refs[mi].id] = {{"temperature", g.sampling.temperature},
                                                     {"top_p", g.sampling.top_p},
                                                     {"top_k", g.sampling.top_k},
                                                     {"source", source}};
      auto part = results::expand_grid(g);
      items.insert(items.end(), part.begin(), part.end());
    }
  }
  if (items.empty()) fail("run: the suite produced no examples (check --data-dir and --limit)");

  // --- Store, run row, shard, resume. Everything that can be refused is checked first, so a bad
  // option never leaves a run row behind.
  kvb::check_backend_name(a.backend);
  const results::Shard shard = results::resolve_shard(a.shard, [](const char* k) { return std::getenv(k); });
  std::unique_ptr<graders::Judge> judge = make_judge(a.judge);  // null without --judge
  results::Store store(a.db);
  results::RunInfo info;
  info.name = a.run_name;
  info.kvbench_version = KVB_VERSION;
  info.git_sha = KVB_GIT_SHA;
  info.host = hostname();
  info.backend = a.backend;
  info.device = a.backend == "cpu" ? cpu_model() : a.backend;
  nlohmann::json tasks_json = nlohmann::json::array();
  for (const auto& st : lt.suite_tasks)
    tasks_json.push_back({{"spec", st.spec}, {"limit", a.limit ? a.limit : st.limit}});
  info.config = {{"suite", suite.origin},  {"tasks", tasks_json},       {"models", model_specs},
                 {"policies", policy_texts}, {"budgets", budgets},        {"samples", a.samples},
                 {"seed", a.seed},           {"data_dirs", data_dirs},    {"min_p", a.min_p},
                 {"weights", a.bf16 ? "bf16" : "f32"}, {"batch", a.batch}, {"prefill_chunk", a.prefill_chunk},
                 {"max_new_tokens", a.max_new_tokens ? *a.max_new_tokens : 0},
                 {"truncate", a.truncate}, {"policy_notes", policy_notes}, {"query_agnostic", a.query_agnostic},
                 {"sampling", sampling_record}};
  // Only when a model has one, so the run key of runs without generation_config.json is unchanged.
  if (!gen_configs.empty()) info.config["generation_config"] = gen_configs;
  if (!a.config.empty()) info.config["config_file"] = {{"path", a.config}, {"profile", a.config_profile}};
  info.models = run_models;
  for (const auto& st : lt.suite_tasks) info.datasets.push_back({st.spec, "", ""});
  info.run_key = results::default_run_key(info);
  const int64_t run_id = store.begin_run(info, shard);
  auto mine = results::select_shard(items, shard);
  store.add_work_items(mine);
  auto todo = store.pending(run_id, mine);
  std::fprintf(stderr, "kvbench: run %lld in %s: %zu work items (shard %d/%d: %zu), %zu already stored, %zu to generate\n",
               static_cast<long long>(run_id), a.db.c_str(), items.size(), shard.index, shard.count, mine.size(),
               mine.size() - todo.size(), todo.size());

  // --- Generate, grade, store: one model at a time, one (policy, budget) engine at a time.
  std::signal(SIGINT, on_sigint);
  const bool tty = isatty(fileno(stderr));
  const auto t_start = std::chrono::steady_clock::now();
  size_t done = 0, n_truncated = 0, n_ungraded = 0;
  std::string first_ungraded;  // one reason, for the end-of-run warning
  int64_t gen_tokens = 0;
  auto progress = [&](bool final_line) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    const double eta = done ? el / done * (todo.size() - done) : 0;
    std::string line = fmt::format("[{}/{}] {:.1f} tok/s, elapsed {:.0f} s, ETA {:.0f} s", done, todo.size(),
                                   el > 0 ? gen_tokens / el : 0.0, el, eta);
    if (a.quiet) return;
    if (tty) std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final_line ? "\n" : "");
    else std::fprintf(stderr, "%s\n", line.c_str());
  };
  for (const auto& mref : model_refs) {
    std::vector<const results::WorkItem*> model_items;
    for (const auto& it : todo)
      if (it.model_id == mref.id) model_items.push_back(&it);
    if (model_items.empty()) continue;
    LoadedModel lm = load_model(mref.id, a.bf16 ? WeightFormat::kBF16 : WeightFormat::kF32);
    std::map<std::pair<std::string, int64_t>, std::vector<const results::WorkItem*>> groups;
    for (const auto* it : model_items) groups[{it->policy_label, it->budget}].push_back(it);
    for (const auto& [key, group] : groups) {
      const std::string& spec_text = label_to_spec.at(key.first);
      EngineOptions eo;
      eo.backend = a.backend;
      eo.max_batch = a.batch;
      eo.prefill_chunk = a.prefill_chunk;
      Engine engine(lm.model, eo, make_policy(PolicySpec::parse(spec_text, key.second)));
      for (size_t start = 0; start < group.size(); start += a.write_every) {
        if (g_interrupted) break;
        const size_t end = std::min(group.size(), start + a.write_every);
        std::vector<GenerationRequest> reqs;
        std::vector<const ExampleRef*> refs;
        std::vector<const results::WorkItem*> req_items;
        std::vector<results::GenerationRecord> gens;
        std::vector<results::GradeRecord> grades;
        std::vector<GradeJob> grade_todo;
        std::vector<int64_t> truncated_from_of;  // per request: prompt tokens before truncation (0: none)
        std::vector<std::string> req_turn_notes;   // per request sent to the engine: multi-turn rendering note
        const int64_t max_ctx = lm.model->config().max_position_embeddings;
        for (size_t i = start; i < end; ++i) {
          const auto* it = group[i];
          const ExampleRef& er = by_example.at(it->task + "\n" + it->example_id);
          GenerationRequest r;
          const tasks::Example& ex = *er.ex;
          std::string rendered_chat;
          if (lm.chat && ex.use_chat_template) {
            std::vector<chat::Message> msgs;
            for (const auto& m : ex.messages) msgs.push_back({m.role, m.content});
            chat::RenderOptions ro;
            rendered_chat = lm.chat->render(msgs, ro);
            r.prompt = lm.tokenizer->encode(rendered_chat, false);
          } else {
            r.prompt = lm.tokenizer->encode(ex.raw_prompt(), true);
          }
          r.sampling = engine_sampling(it->sampling, a.min_p);
          r.max_new_tokens = it->sampling.value("max_new_tokens", er.max_new_tokens);
          r.stop_ids = lm.eos_ids;
          r.stop_strings = ex.stop;
          r.seed = it->seed;
          if (a.query_agnostic && ex.context_chars > 0 && !ex.messages.empty()) {
            // Tokens up to the end of the shared context in the rendered prompt.
            const std::string rendered = lm.chat && ex.use_chat_template ? rendered_chat : ex.raw_prompt();
            const std::string& last = ex.messages.back().content;
            const size_t at = rendered.rfind(last);
            if (at != std::string::npos && ex.context_chars <= last.size()) {
              const size_t n = lm.tokenizer->encode(rendered.substr(0, at + ex.context_chars),
                                                    !(lm.chat && ex.use_chat_template)).size();
              r.context_tokens = std::min(n, r.prompt.size() - 1);
            }
          }
          std::string turn_note;
          r.followups = build_followups(lm, ex, r.max_new_tokens, a.max_new_tokens, &turn_note);
          int64_t reserve = r.max_new_tokens;  // room for every turn's appended tokens and cap
          for (const auto& f : r.followups) reserve += static_cast<int64_t>(f.append.size()) + f.max_new_tokens;
          // Over-long prompts: middle truncation to the context minus the generation cap (never
          // below half the context), as LongBench (pred.py) and HELMET do; --truncate none
          // stores prompts that do not fit the context as errors instead.
          const int64_t prompt_limit = std::max<int64_t>(max_ctx - reserve, max_ctx / 2);
          int64_t truncated_from = 0;
          if (static_cast<int64_t>(r.prompt.size()) > prompt_limit && a.truncate == "middle" && prompt_limit >= 2) {
            truncated_from = static_cast<int64_t>(r.prompt.size());
            r.prompt = truncate_middle(r.prompt, static_cast<size_t>(prompt_limit));
            // The context split follows the cut: kept head, removed middle, kept tail.
            const size_t half = static_cast<size_t>(prompt_limit) / 2;
            const size_t removed = static_cast<size_t>(truncated_from) - 2 * half;
            if (r.context_tokens > half)
              r.context_tokens = r.context_tokens >= half + removed ? r.context_tokens - removed : half;
          }
          if (static_cast<int64_t>(r.prompt.size()) >= max_ctx) {
            // Too long for the model: stored as an error (ungraded), the run goes on.
            results::GenerationRecord g;
            g.item_key = it->key;
            g.prompt_tokens = static_cast<int64_t>(r.prompt.size());
            g.finish_reason = fmt::format("error: prompt of {} tokens exceeds the model's context of {}",
                                          r.prompt.size(), max_ctx);
            gens.push_back(g);
            results::GradeRecord gr;
            gr.item_key = it->key;
            gr.grader = ex.grader;
            gr.ungraded = true;
            gr.reason = "not generated: prompt exceeds the model's context";
            grades.push_back(gr);
            continue;
          }
          truncated_from_of.push_back(truncated_from);
          req_turn_notes.push_back(std::move(turn_note));
          reqs.push_back(std::move(r));
          refs.push_back(&er);
          req_items.push_back(it);
        }
        auto results_ = reqs.empty() ? std::vector<GenerationResult>{} : engine.generate(reqs, lm.tokenizer.get());
        // Fresh-context follow-ups (LongBench-v2 CoT step 2): a new prompt per step, built from
        // the turn's user message with the previous output substituted, generated as a batch.
        for (size_t step = 0;; ++step) {
          std::vector<GenerationRequest> next;
          std::vector<size_t> owner;
          for (size_t k = 0; k < results_.size(); ++k) {
            const tasks::Example& ex = *refs[k]->ex;
            if (!fresh_context_followups(ex) || step >= ex.followups.size()) continue;
            const GenerationResult& prev = step == 0 ? results_[k] : results_[k].followups[step - 1];
            const tasks::Turn& t = ex.followups[step];
            std::string user = t.user;
            const std::string ph = t.meta.value("substitute_previous_output", std::string());
            if (!ph.empty())
              for (size_t p = user.find(ph); p != std::string::npos; p = user.find(ph, p + prev.text.size()))
                user.replace(p, ph.size(), prev.text);
            GenerationRequest q;
            if (lm.chat && ex.use_chat_template) {
              chat::RenderOptions ro;
              std::vector<chat::Message> one;
              one.push_back({"user", user});
              q.prompt = lm.tokenizer->encode(lm.chat->render(one, ro), false);
            } else {
              q.prompt = lm.tokenizer->encode(user, true);
            }
            q.sampling = reqs[k].sampling;
            q.max_new_tokens = turn_cap(t, a.max_new_tokens, reqs[k].max_new_tokens);
            q.stop_ids = lm.eos_ids;
            q.stop_strings = t.stop;
            q.seed = reqs[k].seed + step + 1;
            if (static_cast<int64_t>(q.prompt.size()) >= max_ctx)
              q.prompt = truncate_middle(q.prompt, static_cast<size_t>(std::max<int64_t>(max_ctx - q.max_new_tokens, max_ctx / 2)));
            results_[k].followups.resize(ex.followups.size());
            next.push_back(std::move(q));
            owner.push_back(k);
          }
          if (next.empty()) break;
          auto got = engine.generate(next, lm.tokenizer.get());
          for (size_t j = 0; j < got.size(); ++j) {
            got[j].followups.clear();
            results_[owner[j]].followups[step] = std::move(got[j]);
          }
        }
        for (size_t k = 0; k < results_.size(); ++k) {
          const auto& res = results_[k];
          const auto* it = req_items[k];
          const tasks::Example& ex = *refs[k]->ex;
          results::GenerationRecord g;
          g.item_key = it->key;
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
          // Multi-turn: the row's counts and times cover every turn (tok/s stays honest); its
          // text is the first turn's; each turn's own numbers go to extra_json "turns".
          nlohmann::json turns = nlohmann::json::array();
          std::vector<std::string> turn_texts;
          for (const auto& t : res.followups) {
            turns.push_back({{"text", t.text},
                             {"finish_reason", finish_reason_name(t.finish)},
                             {"prompt_tokens", t.prompt_tokens},
                             {"generated_tokens", t.tokens.size()},
                             {"prefill_s", t.prefill_s},
                             {"decode_s", t.decode_s},
                             {"kv_bytes_final", t.kv_bytes_final}});
            turn_texts.push_back(t.text);
            g.generated_tokens += static_cast<int64_t>(t.tokens.size());
            g.prefill_s += t.prefill_s;
            g.decode_s += t.decode_s;
            g.kv_bytes_peak = std::max<int64_t>(g.kv_bytes_peak, static_cast<int64_t>(t.kv_bytes_peak));
            if (!fresh_context_followups(ex)) {
              g.evictions = t.evictions;
              g.kv_bytes_final = static_cast<int64_t>(t.kv_bytes_final);
            }
          }
          g.device_peak_bytes = static_cast<int64_t>(peak_rss_bytes());
          g.extra = {{"policy_s", res.policy_s}, {"kv_token_bytes_peak", res.kv_token_bytes_peak},
                     {"policy_spec", spec_text}};
          if (truncated_from_of[k]) {
            g.extra["prompt_truncated_from"] = truncated_from_of[k];
            ++n_truncated;
          }
          if (!turns.empty()) g.extra["turns"] = turns;
          if (!req_turn_notes[k].empty()) g.extra["turns_note"] = req_turn_notes[k];
          gens.push_back(g);
          gen_tokens += g.generated_tokens;
          grade_todo.push_back({it->key, &ex, res.text, turn_texts});
        }
        for (auto& gr : grade_jobs(grade_todo, judge.get(), store)) {
          if (gr.ungraded) {
            ++n_ungraded;
            if (first_ungraded.empty()) first_ungraded = gr.reason;
          }
          grades.push_back(std::move(gr));
        }
        store.write_batch(run_id, gens, grades);
        done += gens.size();
        progress(false);
      }
      if (g_interrupted) break;
    }
    if (g_interrupted) break;
  }
  progress(true);
  if (n_truncated)
    std::fprintf(stderr, "kvbench: %zu prompts were longer than the context minus max_new_tokens and were middle-truncated "
                 "(generations.extra.prompt_truncated_from)\n", n_truncated);
  if (g_interrupted) {
    std::fprintf(stderr, "kvbench: interrupted; %zu generations stored in %s; rerun the same command to resume\n",
                 done, a.db.c_str());
    std::exit(130);
  }
  store.end_run(run_id);
  print_cells(store, run_id);
  warn_ungraded(n_ungraded, done, first_ungraded, a.db, a.strict);
}

struct GradeArgs {
  std::string db = "kvbench.db", run;
  bool regrade = false, retry_failed = false, strict = false;
  JudgeArgs judge;
};

void grade_main(const GradeArgs& a) {
  // Grading reads results that must exist: a mistyped --db is an error, not a new empty file.
  if (!file_exists(a.db)) fail("{}: no such results database (grade needs the --db a run wrote)", a.db);
  if (a.regrade && a.retry_failed) fail("grade: --regrade and --retry-failed exclude each other");
  std::unique_ptr<graders::Judge> judge = make_judge(a.judge);  // null without --judge
  results::Store store(a.db);
  std::optional<int64_t> run_id;
  if (!a.run.empty()) run_id = store.resolve_run(a.run);
  auto todo = a.retry_failed ? store.to_grade_failed(run_id) : store.to_grade(run_id, a.regrade);
  // Re-load the examples of each run from its recorded task specs and data directories.
  std::map<int64_t, LoadedTasks> loaded;
  for (const auto& r : store.runs()) {
    if (run_id && r.run_id != *run_id) continue;
    auto cfg = nlohmann::json::parse(r.config_json, nullptr, false);
    if (cfg.is_discarded() || !cfg.contains("tasks")) continue;
    std::vector<tasks::SuiteTask> sts;
    for (const auto& t : cfg["tasks"]) {
      tasks::SuiteTask st;
      st.spec = t.value("spec", "");
      st.limit = t.value("limit", 0);
      sts.push_back(st);
    }
    loaded[r.run_id] = load_tasks(sts, cfg.value("data_dirs", std::vector<std::string>{}), 0, "skip");
  }
  size_t n = 0, n_ungraded = 0;
  std::string first_ungraded;
  std::map<int64_t, std::vector<GradeJob>> jobs;
  for (const auto& tg : todo) {
    auto lit = loaded.find(tg.run_id);
    if (lit == loaded.end()) continue;
    const tasks::Example* ex = nullptr;
    for (auto& [spec, exs] : lit->second.examples)
      for (const auto& e : exs)
        if (e.task == tg.item.task && e.id == tg.item.example_id) ex = &e;
    if (!ex) {
      std::fprintf(stderr, "kvbench: grade: example %s of task %s not found; left ungraded\n",
                   tg.item.example_id.c_str(), tg.item.task.c_str());
      continue;
    }
    jobs[tg.run_id].push_back({tg.item.key, ex, tg.text, tg.turn_texts});
  }
  // Chunks of 64: each chunk's judge requests run concurrently and its grades are committed
  // before the next, so an interrupted re-grade keeps what it finished.
  for (auto& [rid, js] : jobs) {
    for (size_t s = 0; s < js.size(); s += 64) {
      std::vector<GradeJob> chunk(js.begin() + s, js.begin() + std::min(js.size(), s + 64));
      auto grades = grade_jobs(chunk, judge.get(), store);
      for (const auto& g : grades)
        if (g.ungraded) {
          ++n_ungraded;
          if (first_ungraded.empty()) first_ungraded = g.reason;
        }
      n += grades.size();
      store.write_grades(rid, grades);
    }
  }
  std::printf("graded %zu generations in %s (%zu ungraded)\n", n, a.db.c_str(), n_ungraded);
  warn_ungraded(n_ungraded, n, first_ungraded, a.db, a.strict);
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand(
      "run", "Run a benchmark grid (suite × models × policies × budgets × samples) into a SQLite DB; resumable");
  c->add_option("--suite", a->suite, "Built-in suite (smoke, math, longproc, longctx) or a suite YAML file");
  c->add_option("--task", a->tasks, "Task spec instead of a suite (repeatable), e.g. gsm8k:template=rkv");
  c->add_option("--model", a->models, "Model (repeatable): directory, .gguf file or smollm2-135m-instruct");
  c->add_option("--policies", a->policies, "Comma-separated policy specs, e.g. full,snapkv,rkv:window=8");
  c->add_option("--budgets", a->budgets, "Comma-separated KV budgets (tokens per layer and kv head)")
      ->check(CLI::Validator([](std::string& v) { return v.empty() ? std::string("must list at least one budget") : std::string(); }, "LIST"));
  c->add_option("--samples", a->samples, "Samples per example (overrides the suite)")->check(kvb::cli::positive());
  c->add_option("--temperature", a->temperature, "Sampling temperature (overrides the suite)")->check(kvb::cli::non_negative());
  c->add_option("--top-p", a->top_p, "Nucleus threshold (overrides the suite)")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--top-k", a->top_k, "Top-k (overrides the suite)")->check(kvb::cli::non_negative());
  c->add_option("--min-p", a->min_p, "Min-p")->check(kvb::cli::in_range(0.0, 1.0));
  c->add_option("--max-new-tokens", a->max_new_tokens, "Generation cap (overrides suite and task)")->check(kvb::cli::positive());
  c->add_option("--seed", a->seed, "Base seed; each sample's seed derives from (seed, task, example, sample)")->check(kvb::cli::non_negative());
  c->add_option("--backend", a->backend, "cpu");
  c->add_option("--db", a->db, "Results database (SQLite)");
  c->add_option("--run-name", a->run_name, "A label for this run (for compare/report)");
  c->add_option("--limit", a->limit, "First K examples of each task")->check(kvb::cli::non_negative());
  c->add_option("--shard", a->shard, "This process's slice i/n of the grid (default: Slurm/Open MPI rank or 0/1)");
  c->add_option("--data-dir", a->data_dirs, "Local dataset mirror laid out as docs/benchmarks.md describes (repeatable)");
  c->add_option("--on-bad-example", a->on_bad, "skip or fail on a malformed dataset record");
  c->add_option("--batch", a->batch, "Sequences decoded together")->check(kvb::cli::positive());
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")->check(kvb::cli::positive());
  c->add_option("--write-every", a->write_every, "Generations per stored batch (transaction)")->check(kvb::cli::positive());
  c->add_flag("--bf16-weights", a->bf16, "Hold weight matrices as bf16 in memory (CPU computes in f32)");
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
    apply_config(*a, c);
    run_main(*a);
  });

  auto g = std::make_shared<GradeArgs>();
  CLI::App* gc = app.add_subcommand("grade", "Re-score stored generations without generating");
  gc->add_option("--db", g->db, "Results database");
  gc->add_option("--run", g->run, "Only this run (id, name, latest, ...)");
  gc->add_flag("--strict", g->strict, "Exit 1 when any generation is left ungraded");
  gc->add_flag("--regrade", g->regrade, "Re-grade every generation, not only ungraded ones");
  gc->add_flag("--retry-failed", g->retry_failed,
               "Re-grade only generations whose grade is ungraded (failed judge requests, grader errors)");
  add_judge_options(gc, g->judge);
  gc->callback([g] { grade_main(*g); });
}

}  // namespace kvb::cli
