// The grid-building and summary pieces of `kvbench run` and `kvbench grade`; see harness/run_grid.h.
#include "harness/run_grid.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "datasets/registry.h"
#include "engine/backend/backend.h"
#include "engine/policies/policy.h"
#include "engine/policies/resolved.h"
#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "harness/build_info.h"
#include "harness/cli_checks.h"
#include "harness/input_identity.h"
#include "harness/model_source.h"
#include "harness/run_support.h"
#include "results/cells.h"

namespace kvb::cli {

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
    ctx.locate = [&, spec = st.spec](const std::string& key) {
      std::string path = loc.locate(key);
      lt.data_files[spec].emplace_back(key, path);  // hashed into the run's input identity
      return path;
    };
    ctx.bad = &bad;
    ctx.limit = cli_limit ? cli_limit : st.limit;
    lt.examples[st.spec] = task->load_all(ctx);
    for (auto& s : bad.skipped) lt.skipped.push_back(s);
  }
  return lt;
}

tasks::Suite resolve_suite(const RunArgs& a) {
  if (a.tasks.empty()) return tasks::load_suite(a.suite);
  tasks::Suite suite;
  suite.name = "tasks";
  suite.origin = "--task";
  for (const auto& t : a.tasks) {
    tasks::SuiteTask st;
    st.spec = t;
    tasks::make_task(t);  // validates
    suite.tasks.push_back(st);
  }
  return suite;
}

std::vector<int64_t> resolve_budgets(const RunArgs& a, const tasks::Suite& suite) {
  if (!a.budgets.empty()) return parse_budget_list(a.budgets);
  if (!suite.budgets.empty()) return std::vector<int64_t>(suite.budgets.begin(), suite.budgets.end());
  return {64, 128};
}

RunPolicies resolve_policies(const std::string& list, int64_t first_budget, const std::vector<std::string>& models) {
  RunPolicies p;
  p.texts = split_policy_list(list);
  for (auto& pt : p.texts) {
    // The one parse of this spec. Learned-gate policies without a checkpoint get the released
    // weights known for the run's models (said, and recorded in policy_notes); with none known
    // they run with RANDOM gates, said loudly and recorded too and, through the resolved
    // parameters, in every item's label.
    PolicySpec ps = PolicySpec::parse(pt, first_budget);
    std::string note, picked;
    pt = default_gates(ps, pt, models, &note, &picked);
    if (!picked.empty()) {
      std::fprintf(stderr, "kvbench: %s\n", picked.c_str());
      p.notes.push_back(picked);
    }
    if (!note.empty()) {
      std::fprintf(stderr, "kvbench: warning: %s\n", note.c_str());
      p.notes.push_back(note);
    }
    // Built once by the registry: the built policy says whether it takes a budget
    // (Policy::uses_budget): one cell per budget for those, one cell (budget kNoBudget) for the
    // others (full, budget_kind=ratio or threshold, ...).
    ResolvedPolicy rp(std::move(ps));
    results::PolicySpec g;
    g.name = rp.name();
    g.params = rp.params();
    g.uses_budget = rp.uses_budget();
    g.display = rp.label();
    p.by_label.emplace(g.label(), RunPolicy{pt, std::move(rp)});
    p.grid.push_back(g);
  }
  return p;
}

std::vector<std::string> run_model_specs(const tasks::Suite& suite, const std::vector<std::string>& run_models) {
  std::vector<std::string> out;
  auto add = [&](const std::vector<std::string>& ms) {
    for (const auto& m : ms)
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  for (const auto& st : suite.tasks) add(st.models.empty() ? run_models : st.models);
  if (out.empty()) add(run_models);
  return out;
}

void add_task_policies(RunPolicies& p, const tasks::Suite& suite, const std::vector<int64_t>& run_budgets,
                       const std::vector<std::string>& run_models) {
  for (size_t i = 0; i < suite.tasks.size(); ++i) {
    const auto& st = suite.tasks[i];
    if (st.policies.empty()) continue;
    std::string list;
    for (const auto& t : st.policies) list += (list.empty() ? "" : ",") + t;
    RunPolicies tp;
    try {
      tp = resolve_policies(list, st.budgets.empty() ? run_budgets.front() : st.budgets.front(),
                            st.models.empty() ? run_models : st.models);
    } catch (const Error& e) {
      fail("{}: tasks[{}]: policies: {}", suite.origin, i, e.what());
    }
    p.task_grid[st.spec] = tp.grid;
    for (size_t k = 0; k < tp.grid.size(); ++k) {
      const std::string label = tp.grid[k].label();
      if (p.by_label.count(label)) continue;
      p.by_label.emplace(label, tp.by_label.at(label));
      p.texts.push_back(tp.by_label.at(label).text);
    }
    for (const auto& n : tp.notes) p.notes.push_back(n);
  }
}

RunGrid expand_run_grid(const RunArgs& a, const std::vector<std::string>& model_specs, const LoadedTasks& lt,
                        const RunPolicies& policies, const std::vector<int64_t>& budgets,
                        const std::vector<std::string>& run_models) {
  RunGrid rg;
  std::vector<GenerationDefaults> model_gen;
  for (const auto& m : model_specs) {
    check_model_source(m);  // a missing or damaged model fails here, before the database is opened
    std::string sha = weights_sha256(m);
    rg.models.push_back({model_cell_id(m, a.weights), sha});
    rg.spec_of[rg.models.back().id] = m;
    rg.run_models.push_back({m, sha, sha});
    model_gen.push_back(generation_defaults(m));
    if (model_gen.back().present) rg.gen_configs[m] = model_gen.back().to_json();
  }
  for (const auto& st : lt.suite_tasks) {
    const auto& exs = lt.examples.at(st.spec);
    if (exs.empty()) continue;
    int cap = a.max_new_tokens ? *a.max_new_tokens : (st.max_new_tokens ? *st.max_new_tokens : 0);
    std::vector<results::GridExample> grid_examples;
    for (const auto& e : exs) {
      nlohmann::json msgs = nlohmann::json::array();
      for (const auto& m : e.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
      // The protocol is part of what a generation depends on: a query-agnostic prompt hashes
      // differently (the work item key covers it, so resume never mixes the two).
      std::string prompt_key = msgs.dump();
      if (a.query_agnostic && e.context_chars > 0)
        prompt_key += "\n[query-agnostic context_chars=" + std::to_string(e.context_chars) + "]";
      grid_examples.push_back({e.task, e.id, prompt_key});
      int mnt = cap ? cap : e.max_new_tokens;
      rg.by_example[e.task + "\n" + e.id] = {&e, mnt > 0 ? mnt : 256};
    }
    const std::vector<std::string>& task_models = st.models.empty() ? run_models : st.models;
    const auto own_policies = policies.task_grid.find(st.spec);
    for (size_t mi = 0; mi < rg.models.size(); ++mi) {
      if (std::find(task_models.begin(), task_models.end(), model_specs[mi]) == task_models.end()) continue;
      results::GridSpec g;
      g.models = {rg.models[mi]};
      g.policies = own_policies != policies.task_grid.end() ? own_policies->second : policies.grid;
      g.budgets = st.budgets.empty() ? budgets : std::vector<int64_t>(st.budgets.begin(), st.budgets.end());
      g.samples = a.samples > 0 ? a.samples : st.samples;
      g.seed = a.seed;
      std::string source;
      const nlohmann::json s = resolve_sampling(st.sampling, model_gen[mi], a.temperature, a.top_p, a.top_k, &source);
      g.sampling.temperature = s.value("temperature", 0.0);
      g.sampling.top_p = s.value("top_p", 1.0);
      g.sampling.top_k = s.value("top_k", 0);
      g.sampling.max_new_tokens = cap ? cap : exs.front().max_new_tokens;
      g.examples = grid_examples;
      rg.sampling_record[st.spec][rg.models[mi].id] = {{"temperature", g.sampling.temperature},
                                                       {"top_p", g.sampling.top_p},
                                                       {"top_k", g.sampling.top_k},
                                                       {"source", source}};
      auto part = results::expand_grid(g);
      rg.items.insert(rg.items.end(), part.begin(), part.end());
    }
  }
  if (rg.items.empty()) fail("run: the suite produced no examples (check --data-dir and --limit)");
  return rg;
}

std::string model_cell_id(const std::string& spec, const std::string& weights) {
  return weights == "stored" ? spec : spec + "@" + weights;
}

results::RunInfo run_info(const RunArgs& a, const tasks::Suite& suite, const LoadedTasks& lt,
                          const std::vector<std::string>& model_specs, const RunPolicies& policies,
                          const std::vector<int64_t>& budgets, const std::vector<std::string>& data_dirs,
                          const RunGrid& rg) {
  results::RunInfo info;
  info.name = a.run_name;
  info.kvbench_version = KVB_VERSION;
  info.git_sha = kGitSha;
  info.host = hostname();
  info.backend = a.backend;
  info.device = device_description(a.backend);  // GPU name, memory, driver, CUDA; or CPU model, threads, memory
  nlohmann::json tasks_json = nlohmann::json::array();
  for (const auto& st : lt.suite_tasks) {
    nlohmann::json t = {{"spec", st.spec}, {"limit", a.limit ? a.limit : st.limit}};
    // Only when the task names them, so the run key of a suite without them is unchanged.
    if (!st.models.empty()) t["models"] = st.models;
    if (!st.budgets.empty()) t["budgets"] = st.budgets;
    if (!st.policies.empty()) t["policies"] = st.policies;
    tasks_json.push_back(t);
  }
  info.config = {{"suite", suite.origin},
                 {"tasks", tasks_json},
                 {"models", model_specs},
                 {"policies", policies.texts},
                 {"budgets", budgets},
                 {"samples", a.samples},
                 {"seed", a.seed},
                 {"data_dirs", data_dirs},
                 {"min_p", a.min_p},
                 {"weights", a.weights},
                 {"batch", a.batch},
                 {"prefill_chunk", a.prefill_chunk},
                 {"max_new_tokens", a.max_new_tokens ? *a.max_new_tokens : 0},
                 {"truncate", a.truncate},
                 {"policy_notes", policies.notes},
                 {"query_agnostic", a.query_agnostic},
                 {"sampling", rg.sampling_record}};
  // The scheduler's memory settings, only when given, so the run key of a run without them is
  // unchanged (the batch a cell runs at changes no result, only its speed: docs/results.md).
  if (a.memory_gib > 0) info.config["memory_gib"] = a.memory_gib;
  if (a.max_step_tokens > 0) info.config["max_step_tokens"] = a.max_step_tokens;
  if (a.admission != "reserve") info.config["admission"] = a.admission;
  // Only when a model has one, so the run key of runs without generation_config.json is unchanged.
  if (!rg.gen_configs.empty()) info.config["generation_config"] = rg.gen_configs;
  if (!a.config.empty()) info.config["config_file"] = {{"path", a.config}, {"profile", a.config_profile}};
  info.models = rg.run_models;
  add_input_identity(info, model_specs, lt);  // harness/input_identity.h
  info.run_key = results::default_run_key(info);
  return info;
}

std::string weights_sha256(const std::string& spec) {
  std::vector<std::string> files;
  const std::string root = model_file_of(spec);  // a named model's or a Hub id's local files
  if (root.size() > 5 && root.substr(root.size() - 5) == ".gguf") files.push_back(root);
  else if (file_exists(root + "/model.safetensors.index.json")) {  // the loader's order: the index first
    auto idx = parse_json_file(root + "/model.safetensors.index.json");
    std::set<std::string> shards;
    for (auto& [k, v] : idx["weight_map"].items()) shards.insert(v.get<std::string>());
    for (const auto& s : shards) files.push_back(root + "/" + s);
  } else if (file_exists(root + "/model.safetensors")) {
    files.push_back(root + "/model.safetensors");
  }
  std::string cat;
  for (const auto& f : files) cat += hash_input_file(f).sha256;
  return files.size() == 1 ? cat : sha256_hex(cat);
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

void print_cells(results::Store& store, int64_t run_id) {
  auto rows = store.samples({run_id});
  auto cells = results::compute_cells(rows);
  std::printf("\n%-24s %-30s %-28s %7s %4s %18s %12s %12s %13s %8s %14s %14s %26s\n", "model", "task", "policy",
              "budget", "n", "pass@1 [Wilson 95%]", "dec tok/s/seq", "dec tok/s agg", "prefill tok/s", "TTFT s",
              "KV peak (B)", "KV steady (B)", "Δ vs full [paired 95%]");
  bool any_sig = false;
  for (const auto& c : cells) {
    std::string model =
        c.key.model_id.size() > 24 ? "…" + c.key.model_id.substr(c.key.model_id.size() - 23) : c.key.model_id;
    std::string acc = c.pass1 ? fmt::format("{:.3f} [{:.2f},{:.2f}]", c.pass1->mean, c.pass1->lo, c.pass1->hi) : "-";
    std::string delta;
    if (c.delta_vs_reference) {
      const auto& d = *c.delta_vs_reference;
      const bool sig = d.n > 1 && (d.lo > 0 || d.hi < 0);  // the paired bootstrap CI excludes 0
      any_sig = any_sig || sig;
      delta = d.n > 1 ? fmt::format("{:+.3f} [{:+.2f},{:+.2f}]{}", d.mean, d.lo, d.hi, sig ? "*" : " ")
                      : fmt::format("{:+.3f}", d.mean);
    }
    const std::string agg = c.decode_tok_s_agg ? fmt::format("{:.1f}", *c.decode_tok_s_agg) : "-";
    const std::string steady = c.kv_bytes_steady_mean ? fmt::format("{:.0f}", *c.kv_bytes_steady_mean) : "-";
    std::printf("%-24s %-30s %-28s %7s %4d %18s %12.1f %12s %13.1f %8.3f %14.0f %14s %26s\n", model.c_str(),
                c.key.task.c_str(), c.key.policy_label.c_str(),
                c.key.budget ? std::to_string(c.key.budget).c_str() : "-", c.n_samples, acc.c_str(), c.decode_tok_s,
                agg.c_str(), c.prefill_tok_s, c.ttft_s_mean, c.kv_bytes_peak_mean, steady.c_str(), delta.c_str());
  }
  std::printf(
      "pass@1: mean over examples of per-example mean scores, 95%% Wilson score interval over examples; "
      "Δ vs full: paired by example and sample, 95%% percentile bootstrap over examples%s\n"
      "dec tok/s/seq: generated tokens / seconds of the decode steps each sequence took part in; "
      "dec tok/s agg: generated tokens / the decode steps' wall time (a batch's sequences together); "
      "prefill tok/s: prompt tokens / each sequence's prefill-step seconds; TTFT: mean time to first token; "
      "KV peak: mean high-water mark of a sequence's KV pages; KV steady: mean footprint after compression "
      "(docs/results.md)\n",
      any_sig ? "; * = the interval excludes 0" : "");
}

void warn_ungraded(size_t n_ungraded, size_t total, const std::string& reason, const std::string& db, bool strict) {
  if (n_ungraded == 0) return;
  std::fflush(stdout);  // after the summary table
  std::fprintf(stderr,
               "kvbench: warning: %zu of %zu samples are ungraded (first reason: %s); they count in no score "
               "until `kvbench grade --db %s --retry-failed` grades them\n",
               n_ungraded, total, reason.empty() ? "unknown" : reason.c_str(), db.c_str());
  if (strict) std::exit(1);
}

}  // namespace kvb::cli
