// `kvbench bench`: prefill and decode throughput, ms per decode step, KV bytes and the process's
// peak RSS at a given context length, generation length, batch size, policy and budget. Random
// prompt tokens; with --model-shape, random weights of a named architecture (no download needed).
// --memory GIB: a KV page pool of GIB GiB, the pool `run --memory` runs; the largest batch whose
// KV pages fit it (sized by harness/bench_memory.h), run at that batch. --json FILE: the rows and
// the device report as JSON.
#include <algorithm>
#include <cmath>
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/policies/resolved.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/memory.h"
#include "harness/bench_memory.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/model_source.h"

#include <omp.h>

namespace kvb::cli {

namespace {
struct BenchArgs {
  std::string model, shape, backend = "cpu", policy = "full";
  int context = 512, gen = 128, batch = 1, prefill_chunk = 512, repeats = 1, warmup = 1;
  int64_t budget = 0;
  uint64_t seed = 0;
  double memory_gib = 0;           ///< --memory: 0 = off (run --batch)
  bool plan_only = false;          ///< --plan-only: print the --memory plan, run nothing
  std::vector<std::string> cases;  ///< --case: configurations run one after another on one model
  std::string json;                ///< --json FILE ("" = none)
  /// `policy` at `budget`, resolved once (run_bench) before any weights load.
  std::shared_ptr<const ResolvedPolicy> resolved;
};

constexpr double kGiB = 1073741824.0;

/// The backend report's "key: value" lines as a JSON object of strings (lines without ": " are
/// skipped).
nlohmann::json report_json(const std::string& report) {
  nlohmann::json o = nlohmann::json::object();
  size_t at = 0;
  while (at < report.size()) {
    size_t nl = report.find('\n', at);
    if (nl == std::string::npos) nl = report.size();
    const std::string line = report.substr(at, nl - at);
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) o[line.substr(0, colon)] = line.substr(colon + 2);
    at = nl + 1;
  }
  return o;
}

void run_case(const std::shared_ptr<Model>& model, const std::string& id, BenchArgs a, nlohmann::json& out);

/// `a` with the fields of one --case "CONTEXT GEN BATCH [POLICY [BUDGET]]" (whitespace-separated;
/// BATCH is "-" under --memory, which picks it). Throws kvb::Error ("--case: '<text>': <what>").
BenchArgs parse_case(const std::string& text, BenchArgs a) {
  std::istringstream in(text);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  if (f.size() < 3 || f.size() > 5) fail("--case: '{}': expected CONTEXT GEN BATCH [POLICY [BUDGET]]", text);
  auto num = [&](const std::string& w, const char* what, int64_t lo) {
    char* end = nullptr;
    const long long v = std::strtoll(w.c_str(), &end, 10);
    if (w.empty() || *end != '\0' || v < lo || v > (1LL << 30))
      fail("--case: '{}': {} must be an integer >= {}, got '{}'", text, what, lo, w);
    return static_cast<int64_t>(v);
  };
  a.context = static_cast<int>(num(f[0], "CONTEXT", 1));
  a.gen = static_cast<int>(num(f[1], "GEN", 1));
  if (a.memory_gib > 0) {
    if (f[2] != "-") fail("--case: '{}': BATCH must be '-' with --memory (the search picks it)", text);
  } else {
    a.batch = static_cast<int>(num(f[2], "BATCH", 1));
  }
  a.policy = f.size() > 3 ? f[3] : "full";
  a.budget = f.size() > 4 ? num(f[4], "BUDGET", 0) : 0;
  return a;
}

/// --memory: sizes the batch of run `a` on a model of config `c` whose weights take
/// `host_weight_bytes` on the host (harness/bench_memory.h): the largest batch whose KV pages fit
/// the --memory pool (memory_pool_pages, the pool `run --memory` runs). Sets a.batch, prints the
/// plan (the pool, the batch, and an estimate of the process's memory beside it) and fills
/// `plan_json`. Throws kvb::Error ("--memory: ...", naming the pages) when not even one sequence
/// fits the pool.
BenchMemoryPlan size_batch(const ModelConfig& c, size_t host_weight_bytes, BenchArgs& a, nlohmann::json& plan_json) {
  // The policy's resolved schedule decides its footprint.
  const Policy& probe = a.resolved->built();
  BenchMemoryInput in;
  in.config = c;
  in.backend = a.backend;
  in.context = a.context;
  in.gen = a.gen;
  in.prefill_chunk = a.prefill_chunk;
  in.page_size = EngineOptions{}.page_size;
  in.host_weight_bytes = host_weight_bytes;
  const BenchMemoryPlan plan = plan_bench_memory(in, &probe, a.budget);
  const int64_t pool = memory_pool_pages(a.memory_gib, a.backend, c, in.page_size, probe.needs());
  const int64_t b = plan.max_batch(pool);
  const std::string label = a.policy + (a.budget ? "@" + std::to_string(a.budget) : "");
  if (b < 1)
    fail(
        "--memory: a KV page pool of {} GiB ({} pages of {} bytes on {}) does not hold one sequence of context {} + "
        "gen {} ({}): it needs {} pages at its peak ({} tokens per head)",
        a.memory_gib, pool, plan.page_bytes, a.backend, a.context, a.gen, label, plan.pages_per_seq,
        plan.peak_tokens_per_head);
  if (b >= (1 << 20))
    fail("--memory: {} GiB holds {} or more sequences of this configuration; at most {} are run", a.memory_gib,
         int64_t{1} << 20, (1 << 20) - 1);
  a.batch = static_cast<int>(b);
  std::printf(
      "memory_plan: KV page pool %.4g GiB on %s = %lld pages of %zu bytes; context %d, gen %d, %s: batch %d (one "
      "sequence at its peak, %d at their steady state: %lld pages; batch %d would need %lld)\n",
      a.memory_gib, a.backend.c_str(), static_cast<long long>(pool), plan.page_bytes, a.context, a.gen, label.c_str(),
      a.batch, a.batch - 1, static_cast<long long>(plan.pool_pages(b)), a.batch + 1,
      static_cast<long long>(plan.pool_pages(b + 1)));
  std::printf(
      "memory_plan_kv: %lld tokens per (layer, kv head) at peak; per sequence %lld pages at peak, %lld steady, of %d "
      "tokens, %zu bytes per page; %s\n",
      static_cast<long long>(plan.peak_tokens_per_head), static_cast<long long>(plan.pages_per_seq),
      static_cast<long long>(plan.steady_pages_per_seq), in.page_size, plan.page_bytes, plan.footprint.c_str());
  std::printf(
      "memory_plan_process: estimated process memory at batch %d (not the pool; %s): weights %.3f GiB + fixed %.3f "
      "GiB + work %.3f GiB + KV %.3f GiB = %.3f GiB\n",
      a.batch, a.backend == "cuda" ? "device" : "host RAM", plan.weight_bytes / kGiB, plan.fixed_bytes / kGiB,
      (plan.work_bytes_fixed + b * plan.work_bytes_per_seq) / kGiB,
      plan.pool_pages(b) * static_cast<double>(plan.page_bytes) / kGiB, plan.bytes_for(b) / kGiB);
  plan_json = {{"memory_gib", a.memory_gib},
               {"kv_pool_pages", pool},
               {"page_bytes", plan.page_bytes},
               {"batch", a.batch},
               {"weight_bytes", plan.weight_bytes},
               {"fixed_bytes", plan.fixed_bytes},
               {"kv_bytes_per_seq", plan.kv_bytes_per_seq},
               {"work_bytes_per_seq", plan.work_bytes_per_seq},
               {"work_bytes_fixed", plan.work_bytes_fixed},
               {"process_bytes_estimate", plan.bytes_for(b)},
               {"peak_tokens_per_head", plan.peak_tokens_per_head},
               {"pages_per_seq", plan.pages_per_seq},
               {"steady_pages_per_seq", plan.steady_pages_per_seq},
               {"pool_pages", plan.pool_pages(b)},
               {"footprint", plan.footprint}};
  return plan;
}

void run_bench(BenchArgs a) {
  if (a.model.empty() == a.shape.empty()) fail("bench: give exactly one of --model DIR or --model-shape NAME");
  // The output policy (engine/util/io.h): never the model (its folder's files) nor a device.
  if (!a.json.empty()) check_output_path(a.json, "--json", {a.model.empty() ? a.model : model_file_of(a.model)});
  std::vector<BenchArgs> runs;  // parsed before the weights load: a bad --case fails at once
  for (const std::string& text : a.cases) runs.push_back(parse_case(text, a));
  if (runs.empty()) runs.push_back(a);
  for (BenchArgs& r : runs)
    r.resolved = std::make_shared<const ResolvedPolicy>(ResolvedPolicy::resolve(r.policy, r.budget));
  // Before an 8B shape's weights are generated (minutes on a few cores): the backend must exist.
  if (!a.plan_only) check_backend_name(a.backend);
  // --plan-only may plan for a backend this build lacks (cuda on a CPU machine), but not for one
  // that does not exist.
  if (a.plan_only && !find_backend(a.backend)) {
    std::vector<std::string> known;
    for (const auto& b : backend_registry()) known.push_back(b.name);
    fail("--backend {}: no such backend (known: {})", a.backend, fmt::join(known, ", "));
  }
  if (a.plan_only) {
    // The plan alone: a --model-shape needs no weights (its random F32 weights are 4 B per parameter).
    if (a.memory_gib <= 0) fail("--plan-only: needs --memory");
    nlohmann::json out = {{"model", a.shape.empty() ? a.model : "random:" + a.shape},
                          {"backend", a.backend},
                          {"plans", nlohmann::json::array()}};
    std::shared_ptr<Model> loaded;
    if (a.shape.empty()) loaded = load_model(a.model).model;
    const ModelConfig c = loaded ? loaded->config() : model_shape(a.shape);
    const size_t wb = loaded ? loaded->weight_bytes() : static_cast<size_t>(4 * c.num_parameters());
    for (BenchArgs& r : runs) {
      nlohmann::json pj;
      size_batch(c, wb, r, pj);
      out["plans"].push_back(pj);
    }
    if (!a.json.empty()) write_output_file(a.json, out.dump(2) + "\n");
    return;
  }
  std::shared_ptr<Model> model;
  std::string id;
  if (!a.shape.empty()) {
    // The CUDA backend holds bf16 weights: generate them as bf16 (half the host memory).
    model = Model::random(model_shape(a.shape), a.seed + 1,
                          backend_info(a.backend).bf16_weights ? WeightFormat::kBF16 : WeightFormat::kF32);
    id = "random:" + a.shape;
  } else {
    model = load_model(a.model).model;
    release_freed_heap();  // the tokenizer and chat template just dropped
    id = a.model;
  }
  nlohmann::json out = {{"model", id}, {"backend", a.backend}, {"rows", nlohmann::json::array()}};
  for (const BenchArgs& r : runs) {
    run_case(model, id, r, out);
    if (a.json.empty()) continue;
    // Rewritten (temp file + rename) after every case: a run cut short keeps what it measured.
    write_output_file(a.json, out.dump(2) + "\n");
  }
}

/// One bench configuration (the flags, or one --case) on `model`: prints its rows and appends them
/// to out["rows"] (and its memory plan to out["memory_plans"] under --memory).
void run_case(const std::shared_ptr<Model>& model, const std::string& id, BenchArgs a, nlohmann::json& out) {
  const ModelConfig& c = model->config();
  const int64_t positions = int64_t{a.context} + a.gen;  // both <= INT_MAX: no overflow in 64 bits
  if (positions > c.max_position_embeddings)
    fail("bench: --context {} + --gen {} exceeds the model's max_position_embeddings {}", a.context, a.gen,
         c.max_position_embeddings);
  BenchMemoryPlan plan;
  nlohmann::json plan_json;
  if (a.memory_gib > 0) plan = size_batch(c, model->weight_bytes(), a, plan_json);
  // Sized before anything is allocated: the prompts and a full KV cache of every sequence
  // must fit this machine's memory, or the answer would be a bare "out of memory" (or the OOM
  // killer) minutes into the run.
  if (a.backend == "cpu") {
    const KvPageGeometry g = kv_page_geometry(a.backend, c, EngineOptions{}.page_size);
    const double kv = double(a.batch) * double(g.pages_for_sequence(positions)) * double(g.bytes_per_page());
    const double prompts = double(a.batch) * double(a.context) * sizeof(int32_t);
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && kv + prompts > ram)
      fail(
          "--batch {}: {} sequences of {} positions need {:.1f} GiB of KV cache, more than this machine's {:.1f} GiB "
          "of memory",
          a.batch, a.batch, positions, (kv + prompts) / 1073741824.0, ram / 1073741824.0);
  }
  std::mt19937 rng(static_cast<uint32_t>(a.seed));
  std::uniform_int_distribution<int32_t> tokd(0, static_cast<int32_t>(c.vocab_size) - 1);
  std::vector<GenerationRequest> reqs(a.batch);
  for (auto& r : reqs) {
    r.prompt.resize(a.context);
    for (auto& t : r.prompt) t = tokd(rng);
    r.max_new_tokens = a.gen;  // no EOS: always generate exactly --gen tokens
  }
  EngineOptions eo;
  eo.backend = a.backend;
  eo.prefill_chunk = a.prefill_chunk;
  eo.max_batch = a.batch;
  // --memory: the engine's scheduler, as `kvbench run --memory` runs it: the same KV page pool
  // (EngineOptions::kv_pool_bytes, priced by the engine as memory_pool_pages prices it; the CUDA
  // backend reserves it at once), sequences are admitted by pages (no count limit), one prompt
  // chunk per step rides with the decode tokens, and a sequence that would overrun the pool
  // preempts the newest instead of failing.
  if (a.memory_gib > 0) {
    eo.kv_pool_bytes = kv_pool_bytes_of_gib(a.memory_gib);
    eo.max_batch = 0;
    eo.max_step_tokens = a.prefill_chunk;
  }
  std::printf(
      "model %s (%s, %.1fM params, %d layers, Hq=%lld Hkv=%lld D=%lld), backend %s, threads %d, OMP_WAIT_POLICY %s\n",
      id.c_str(), c.model_type.c_str(), c.num_parameters() / 1e6, static_cast<int>(c.num_layers),
      static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim),
      a.backend.c_str(), omp_get_max_threads(),
      std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "default (spin, then sleep)");
  std::printf("%-8s %-6s %-6s %-22s %12s %12s %10s %14s %20s %9s\n", "context", "gen", "batch", "policy",
              "prefill_tok/s", "decode_tok/s", "ms/step", "kv_bytes_peak", "process_peak_rss_MiB", "policy_%");
  for (int rep = 0; rep < a.repeats; ++rep) {
    Engine engine(model, eo, a.resolved->build());
    // Untimed warm-up on the same engine and batch (a prompt of at most two chunks, 2 tokens):
    // library and kernel loading, a policy's lazily built weights (TRIM-KV's random gates take
    // seconds on an 8B shape) and the first pool growth stay out of the measurement.
    for (int w = 0; w < a.warmup; ++w) {
      std::vector<GenerationRequest> wr(reqs.size());
      for (size_t i = 0; i < wr.size(); ++i) {
        wr[i].prompt.assign(reqs[i].prompt.begin(),
                            reqs[i].prompt.begin() + std::min<size_t>(reqs[i].prompt.size(), 2 * a.prefill_chunk));
        wr[i].max_new_tokens = 2;
      }
      engine.generate(wr, nullptr);
    }
    auto res = engine.generate(reqs, nullptr);
    double prefill = 0, decode = 0, policy = 0, decode_wall = 0;
    size_t kv_peak = 0;
    int64_t gen_tokens = 0;
    for (const auto& r : res) {
      prefill = std::max(prefill, r.prefill_s);
      decode = std::max(decode, r.decode_s);
      decode_wall += r.decode_share_s;  // Σ shares = the decode steps' wall time
      policy += r.policy_s;
      kv_peak += r.kv_bytes_peak;
      gen_tokens += static_cast<int64_t>(r.tokens.size());
    }
    const double steps = std::max(1, a.gen - 1);
    // Aggregate decode throughput: tokens fed by decode steps over those steps' wall time (under
    // --memory the sequences start at different times, so the slowest one's decode_s is not it).
    const double decode_tps = decode_wall > 0 ? (gen_tokens - a.batch) / decode_wall : 0;
    std::printf("%-8d %-6d %-6d %-22s %12.1f %12.1f %10.2f %14zu %20.1f %9.2f\n", a.context, a.gen, a.batch,
                (a.policy + (a.budget ? "@" + std::to_string(a.budget) : "")).c_str(),
                prefill > 0 ? double(a.context) * a.batch / prefill : 0.0, decode_tps, 1000.0 * decode / steps, kv_peak,
                peak_rss_bytes() / 1048576.0,
                (prefill + decode) > 0 ? 100.0 * policy / a.batch / (prefill + decode) : 0.0);
    const std::string dev = engine.backend_report();  // device backends: memory, bandwidth vs roofline
    if (!dev.empty()) std::printf("%s", dev.c_str());
    const double rss_mib = peak_rss_bytes() / 1048576.0;
    const ScheduleStats& st = engine.schedule_stats();
    if (a.memory_gib > 0)
      std::printf(
          "memory_result: planned batch %d, realised mean decode batch %.1f (largest %d), %lld preemptions, decode "
          "%.1f tok/s, KV pool peak %lld of %lld pages = %.3f GiB; process peak RSS %.3f GiB%s\n",
          a.batch, st.mean_decode_batch(), st.max_decode_batch, static_cast<long long>(st.preemptions), decode_tps,
          static_cast<long long>(engine.cache().pages_allocated()),
          static_cast<long long>(engine.cache().config().max_pages),
          engine.cache().pages_allocated() * static_cast<double>(plan.page_bytes) / kGiB, rss_mib / 1024.0,
          dev.empty() ? "" : " (device: device_used_GiB above)");
    out["rows"].push_back({{"context", a.context},
                           {"gen", a.gen},
                           {"batch", a.batch},
                           {"policy", a.policy},
                           {"budget", a.budget},
                           {"prefill_tok_s", prefill > 0 ? double(a.context) * a.batch / prefill : 0.0},
                           {"decode_tok_s", decode_tps},
                           {"ms_per_step", 1000.0 * decode / steps},
                           {"kv_bytes_peak", kv_peak},
                           {"kv_pages_peak", engine.cache().pages_allocated()},
                           {"kv_pool_pages", engine.cache().config().max_pages},
                           {"process_peak_rss_mib", rss_mib},
                           {"policy_pct", (prefill + decode) > 0 ? 100.0 * policy / a.batch / (prefill + decode) : 0.0},
                           {"memory_plan", plan_json},
                           {"decode_batch_mean", st.mean_decode_batch()},
                           {"decode_batch_max", st.max_decode_batch},
                           {"preemptions", st.preemptions},
                           {"device", report_json(dev)}});
  }
}
}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "Measure prefill/decode throughput, KV bytes and the process's peak RSS");
  c->add_option(
      "--model", a->model,
      "Model: a directory, a .gguf file, a named model (kvbench models) or a Hub id org/name[@rev][:FILE.gguf]");
  c->add_option("--model-shape", a->shape,
                "Random-weight architecture: stories260k, smollm2-135m, qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.1-8b");
  c->add_option("--backend", a->backend, "cpu or cuda (builds with KVB_CUDA)");
  c->add_option("--context", a->context, "Prompt tokens per sequence")->check(kvb::cli::positive());
  c->add_option("--gen", a->gen, "Generated tokens per sequence")->check(kvb::cli::positive());
  auto* batch = c->add_option("--batch", a->batch, "Sequences decoded together")->check(kvb::cli::positive());
  c->add_option("--memory", a->memory_gib, kMemoryHelp)
      ->check(kvb::cli::positive())
      ->check(kvb::cli::in_range(0, kMaxMemoryGiB))
      ->excludes(batch);
  c->add_option("--case", a->cases,
                "Run this configuration instead of --context/--gen/--batch/--policy/--budget, on the same weights: "
                "\"CONTEXT GEN BATCH [POLICY [BUDGET]]\" (BATCH '-' with --memory); repeatable, run in order")
      ->allow_extra_args(false);
  c->add_flag("--plan-only", a->plan_only, "With --memory: print the batch and memory plan of each case, run nothing");
  c->add_option("--json", a->json, "Also write the rows, the memory plan and the device report to FILE as JSON");
  c->add_option("--policy", a->policy, "KV policy spec");
  c->add_option("--budget", a->budget, "KV budget per (layer, kv_head)")->check(kvb::cli::non_negative());
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")->check(kvb::cli::positive());
  c->add_option("--repeats", a->repeats, "Repetitions (one row each)")->check(kvb::cli::positive());
  c->add_option("--warmup", a->warmup,
                "Untimed warm-up generations before each timed one (same engine and batch; prompts cut to two "
                "prefill chunks, 2 new tokens)")
      ->check(kvb::cli::non_negative());
  c->add_option("--seed", a->seed, "Seed of the random prompt and weights")->check(kvb::cli::non_negative());
  c->callback([a] { run_bench(*a); });
}

}  // namespace kvb::cli
