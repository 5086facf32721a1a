// `kvbench bench`: prefill and decode throughput, ms per decode step, KV bytes and peak RSS at a
// given context length, generation length, batch size, policy and budget. Random prompt tokens;
// with --model-shape, random weights of a named architecture (no download needed).
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/util/error.h"
#include "engine/util/memory.h"
#include "harness/cli_checks.h"
#include "harness/commands.h"
#include "harness/model_source.h"

#include <omp.h>

namespace kvb::cli {

namespace {
struct BenchArgs {
  std::string model, shape, backend = "cpu", policy = "full";
  int context = 512, gen = 128, batch = 1, prefill_chunk = 512, repeats = 1;
  int64_t budget = 0;
  uint64_t seed = 0;
};

void run_bench(const BenchArgs& a) {
  if (a.model.empty() == a.shape.empty()) fail("bench: give exactly one of --model DIR or --model-shape NAME");
  std::shared_ptr<Model> model;
  std::string id;
  if (!a.shape.empty()) {
    // The CUDA backend holds bf16 weights: generate them as bf16 (half the host memory).
    model = Model::random(model_shape(a.shape), a.seed + 1,
                          a.backend == "cuda" ? WeightFormat::kBF16 : WeightFormat::kF32);
    id = "random:" + a.shape;
  } else {
    model = load_model(a.model).model;
    release_freed_heap();  // the tokenizer and chat template just dropped
    id = a.model;
  }
  const ModelConfig& c = model->config();
  const int64_t positions = int64_t{a.context} + a.gen;  // both <= INT_MAX: no overflow in 64 bits
  if (positions > c.max_position_embeddings)
    fail("bench: --context {} + --gen {} exceeds the model's max_position_embeddings {}", a.context, a.gen,
         c.max_position_embeddings);
  // Sized before anything is allocated: the prompts and a full f32 KV cache of every sequence
  // must fit this machine's memory, or the answer would be a bare "out of memory" (or the OOM
  // killer) minutes into the run.
  if (a.backend == "cpu") {
    const double kv = double(a.batch) * double(positions) * double(c.num_layers) * double(c.num_kv_heads) *
                      double(c.head_dim) * 2.0 * sizeof(float);
    const double prompts = double(a.batch) * double(a.context) * sizeof(int32_t);
    const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && kv + prompts > ram)
      fail("--batch {}: {} sequences of {} positions need {:.1f} GiB of KV cache, more than this machine's {:.1f} GiB "
           "of memory", a.batch, a.batch, positions, (kv + prompts) / 1073741824.0, ram / 1073741824.0);
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
  std::printf("model %s (%s, %.1fM params, %d layers, Hq=%lld Hkv=%lld D=%lld), backend %s, threads %d, OMP_WAIT_POLICY %s\n",
              id.c_str(), c.model_type.c_str(), c.num_parameters() / 1e6, static_cast<int>(c.num_layers),
              static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
              static_cast<long long>(c.head_dim), a.backend.c_str(), omp_get_max_threads(),
              std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "default (spin, then sleep)");
  std::printf("%-8s %-6s %-6s %-22s %12s %12s %10s %14s %12s %9s\n", "context", "gen", "batch", "policy",
              "prefill_tok/s", "decode_tok/s", "ms/step", "kv_bytes_peak", "peak_rss_MiB", "policy_%");
  for (int rep = 0; rep < a.repeats; ++rep) {
    Engine engine(model, eo, make_policy(PolicySpec::parse(a.policy, a.budget)));
    auto res = engine.generate(reqs, nullptr);
    double prefill = 0, decode = 0, policy = 0;
    size_t kv_peak = 0;
    int64_t gen_tokens = 0;
    for (const auto& r : res) {
      prefill = std::max(prefill, r.prefill_s);
      decode = std::max(decode, r.decode_s);
      policy += r.policy_s;
      kv_peak += r.kv_bytes_peak;
      gen_tokens += static_cast<int64_t>(r.tokens.size());
    }
    const double steps = std::max(1, a.gen - 1);
    const double decode_tps = decode > 0 ? (gen_tokens - a.batch) / decode : 0;
    std::printf("%-8d %-6d %-6d %-22s %12.1f %12.1f %10.2f %14zu %12.1f %9.2f\n", a.context, a.gen, a.batch,
                (a.policy + (a.budget ? "@" + std::to_string(a.budget) : "")).c_str(),
                prefill > 0 ? double(a.context) * a.batch / prefill : 0.0, decode_tps, 1000.0 * decode / steps,
                kv_peak, peak_rss_bytes() / 1048576.0,
                (prefill + decode) > 0 ? 100.0 * policy / a.batch / (prefill + decode) : 0.0);
    const std::string dev = engine.backend_report();  // device backends: memory, bandwidth vs roofline
    if (!dev.empty()) std::printf("%s", dev.c_str());
  }
}
}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "Measure prefill/decode throughput, KV bytes and memory");
  c->add_option("--model", a->model, "Model: a directory, a .gguf file, or smollm2-135m-instruct");
  c->add_option("--model-shape", a->shape,
                "Random-weight architecture: stories260k, smollm2-135m, qwen3-0.6b, qwen3-4b, qwen3-8b, llama-3.1-8b");
  c->add_option("--backend", a->backend, "cpu or cuda (builds with KVB_CUDA)");
  c->add_option("--context", a->context, "Prompt tokens per sequence")->check(kvb::cli::positive());
  c->add_option("--gen", a->gen, "Generated tokens per sequence")->check(kvb::cli::positive());
  c->add_option("--batch", a->batch, "Sequences decoded together")->check(kvb::cli::positive());
  c->add_option("--policy", a->policy, "KV policy spec");
  c->add_option("--budget", a->budget, "KV budget per (layer, kv_head)")->check(kvb::cli::non_negative());
  c->add_option("--prefill-chunk", a->prefill_chunk, "Prompt tokens per prefill step")->check(kvb::cli::positive());
  c->add_option("--repeats", a->repeats, "Repetitions (one row each)")->check(kvb::cli::positive());
  c->add_option("--seed", a->seed, "Seed of the random prompt and weights")->check(kvb::cli::non_negative());
  c->callback([a] { run_bench(*a); });
}

}  // namespace kvb::cli
