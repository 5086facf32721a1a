// `kvbench bench --memory GIB` (harness/bench_memory.h): the sizing function against sizes
// derived by hand for the stories260K shape (L 5, Hkv 4, Hq 8, D 8, H 64, I 172, V 512, pages of
// 16 tokens), the CUDA weight bytes against the H100 run's device report, the batch search at its
// boundary, and the CPU backend end to end: the batch it picks, and the KV pages the run actually
// held against the plan's peak.
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/page_geometry.h"
#include "engine/model/model.h"
#include "engine/policies/policy.h"
#include "harness/bench_memory.h"
#include "tests/support/test_support.h"

namespace {

using kvb::cli::BenchMemoryInput;
using kvb::cli::BenchMemoryPlan;
using kvb::cli::plan_bench_memory;

BenchMemoryInput stories(int64_t context, int64_t gen, int chunk = 512, const std::string& backend = "cpu") {
  BenchMemoryInput in;
  in.config = kvb::model_shape("stories260k");
  in.backend = backend;
  in.context = context;
  in.gen = gen;
  in.prefill_chunk = chunk;
  in.page_size = 16;
  in.host_weight_bytes = 1000000;
  return in;
}

BenchMemoryPlan plan(const BenchMemoryInput& in, const std::string& spec, int64_t budget) {
  auto p = kvb::make_policy(kvb::PolicySpec::parse(spec, budget));
  return plan_bench_memory(in, p.get(), budget);
}

// stories260K, CPU: a page is 16 × (2·8 K/V floats + 1 position + S scalars) × 4 B.
constexpr int64_t kHeads = 5 * 4;  // layers × kv heads

TEST(BenchMemory, FullCacheOnTheCpuByHand) {
  const auto pl = plan_bench_memory(stories(100, 28), nullptr, 0);
  EXPECT_EQ(pl.peak_tokens_per_head, 128);       // context + gen
  EXPECT_EQ(pl.pages_per_seq, kHeads * 8);       // ceil(128 / 16) = 8 per head
  EXPECT_EQ(pl.page_bytes, 16u * (16 + 1) * 4);  // 1088
  EXPECT_EQ(pl.kv_bytes_per_seq, 160u * 1088);
  // Work: one chunk of min(512, 100) = 100 prompt tokens × 4 B × (2·64 + (8 + 2·4)·8 + 8·8), and
  // per sequence one decode row and 512 logits × 4 B.
  EXPECT_EQ(pl.work_bytes_fixed, 100u * 4 * (128 + 128 + 64));
  EXPECT_EQ(pl.work_bytes_per_seq, 4u * (128 + 128 + 64) + 512 * 4);
  EXPECT_EQ(pl.steady_pages_per_seq, pl.pages_per_seq);  // the full cache: steady = peak
  EXPECT_EQ(pl.weight_bytes, 1000000u);
  EXPECT_EQ(pl.fixed_bytes, (size_t(128) << 20) + 4u * 128 * 2 * 172);
  // "full" by name is the same as no policy.
  const auto named = plan(stories(100, 28), "full", 0);
  EXPECT_EQ(named.pages_per_seq, pl.pages_per_seq);
  EXPECT_EQ(named.kv_bytes_per_seq, pl.kv_bytes_per_seq);
}

TEST(BenchMemory, PageBytesAreTheCachesOwn) {
  // R-KV stores per-token scalars in its pages: the plan's page must cost what KVCache charges.
  auto p = kvb::make_policy(kvb::PolicySpec::parse("rkv", 32));
  const auto pl = plan_bench_memory(stories(100, 200), p.get(), 32);
  kvb::KVCacheConfig kc = kvb::kv_cache_config(kvb::model_shape("stories260k"), 16);
  kc.num_scalars = p->needs().num_scalars;
  kvb::KVCache cache(kc);
  EXPECT_EQ(pl.page_bytes, cache.page_bytes());
}

TEST(BenchMemory, PromptEndHoldsTheWholePromptFirst) {
  // rkv at B 32, buffer 128 (default): decode peaks at B + buffer = 160, above the 100-token prompt.
  auto pl = plan(stories(100, 200), "rkv", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 160);
  EXPECT_EQ(pl.pages_per_seq, kHeads * 10);
  // A 1000-token prompt is held whole before its compression: the peak is the prompt.
  pl = plan(stories(1000, 200), "rkv", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 1000);
  EXPECT_EQ(pl.pages_per_seq, kHeads * 63);  // ceil(1000 / 16)
  // A short generation never reaches B + buffer: context + gen.
  pl = plan(stories(20, 30), "rkv", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 50);
}

TEST(BenchMemory, ChunkedCompressionBoundsThePrefill) {
  // compress=chunked, chunk 16: a head holds at most B + buffer − 1 before a step, + 16 inside it.
  auto pl = plan(stories(1000, 10, 16), "rkv:compress=chunked", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 32 + 128 - 1 + 16);
  EXPECT_EQ(pl.pages_per_seq, kHeads * 11);  // ceil(175 / 16)
  pl = plan(stories(1000, 10, 16), "rkv:compress=chunked,buffer=1", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 32 + 16);
  // A prompt shorter than B + buffer never compresses in prefill: decode's B + buffer is the peak.
  pl = plan(stories(100, 300), "rkv:compress=chunked", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 160);
  // ... and after a short prompt with a short generation the prompt is the peak: its end
  // compresses it to B, and B + gen stays below B + buffer.
  pl = plan(stories(100, 20), "rkv:compress=chunked", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 100);
  EXPECT_EQ(pl.steady_pages_per_seq, kHeads * 4);  // ceil((32 + 20) / 16)
}

TEST(BenchMemory, DecodeFalseAndRatioAndGlobalBudgets) {
  // decode=false: compressed once to B at the prompt's end, then grows by gen.
  auto pl = plan(stories(100, 50), "rkv:decode=false", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 100);  // max(100, 32 + 50)
  pl = plan(stories(100, 150), "rkv:decode=false", 32);
  EXPECT_EQ(pl.peak_tokens_per_head, 182);
  // ratio 0.25 of context + gen = 1200 → B = 300; max(1000, min(1200, 300 + 128)) = 1000.
  pl = plan(stories(1000, 200), "rkv:budget_kind=ratio,ratio=0.25", 0);
  EXPECT_EQ(pl.peak_tokens_per_head, 1000);
  pl = plan(stories(100, 1100), "rkv:budget_kind=ratio,ratio=0.25", 0);
  EXPECT_EQ(pl.peak_tokens_per_head, 300 + 128);
  // TRIM-KV's global budget: ragged heads; total 20 × 192 tokens, plus a partial page per head.
  pl = plan(stories(100, 300), "trimkv:random_gates=0,budget_kind=global", 64);
  EXPECT_EQ(pl.peak_tokens_per_head, 192);
  EXPECT_EQ(pl.pages_per_seq, 20 * 192 / 16 + 20);
}

TEST(BenchMemory, UnevenBudgetsAreSizedAsTheFullCache) {
  for (const char* spec : {"pyramidkv", "adakv"}) {
    const auto pl = plan(stories(100, 300), spec, 128);
    EXPECT_EQ(pl.peak_tokens_per_head, 400) << spec;
    EXPECT_NE(pl.footprint.find("full cache"), std::string::npos) << spec << ": " << pl.footprint;
  }
}

TEST(BenchMemory, CudaPagesAreBf16AndWeightsMatchTheDevice) {
  BenchMemoryInput in = stories(100, 28, 512, "cuda");
  in.config = kvb::model_shape("qwen3-8b");
  in.context = 32768;
  in.gen = 256;
  const auto pl = plan_bench_memory(in, nullptr, 0);
  EXPECT_EQ(pl.page_bytes, 16u * (2 * 128 * 2 + 4));  // bf16 K, V + i32 positions
  EXPECT_EQ(pl.pages_per_seq, 36 * 8 * ((32768 + 256 + 15) / 16));
  // docs/gpu/h100-2026-11-24: "device_weights_GiB: 15.26" for random:qwen3-8b.
  EXPECT_NEAR(pl.weight_bytes / 1073741824.0, 15.26, 0.005);
  // Activations per prompt token (x, xn, qkv, att, gate|up, act) for 512 tokens + a logit row.
  const size_t per_token = 4 * 4096 + 2 * 4096 + 4 * 6144 + 2 * 4096 + 8 * 12288 + 2 * 12288;
  EXPECT_EQ(pl.work_bytes_fixed, 512 * per_token);
  EXPECT_EQ(pl.work_bytes_per_seq, per_token + 4 * 151936);
  EXPECT_EQ(pl.fixed_bytes, size_t(1) << 30);
}

TEST(BenchMemory, MaxBatchIsTheLargestThatFits) {
  // R-KV at B 32 after a 300-token prompt: one sequence at its peak (the prompt), the others at
  // their steady state (B + buffer).
  const auto pl = plan(stories(300, 400), "rkv", 32);
  ASSERT_LT(pl.steady_pages_per_seq, pl.pages_per_seq);
  EXPECT_EQ(pl.pool_pages(1), pl.pages_per_seq);
  EXPECT_EQ(pl.pool_pages(3), pl.pages_per_seq + 2 * pl.steady_pages_per_seq);
  // The process estimate beside the pool: weights, reserve, work buffers and the batch's pages.
  const double base = static_cast<double>(pl.weight_bytes + pl.fixed_bytes + pl.work_bytes_fixed);
  const double three = base + 3.0 * pl.work_bytes_per_seq + static_cast<double>(pl.pool_pages(3) * pl.page_bytes);
  EXPECT_EQ(pl.bytes_for(3), three);
  // The batch is decided by the pool's pages alone.
  EXPECT_EQ(pl.max_batch(pl.pool_pages(3)), 3);      // exactly full
  EXPECT_EQ(pl.max_batch(pl.pool_pages(4) - 1), 3);  // one page short of 4
  EXPECT_EQ(pl.max_batch(pl.pool_pages(1) - 1), 0);  // not even one peak
  EXPECT_EQ(pl.max_batch(0), 0);
  EXPECT_EQ(pl.max_batch(std::numeric_limits<int64_t>::max()), int64_t{1} << 20);  // the cap, no wrap
}

TEST(MemoryPool, RunAndBenchSizeTheSamePoolOnEveryBackend) {
  // `--memory 0.25` on stories260K (L 5, Hkv 4, D 8, pages of 16 tokens): the pool both commands
  // run. CPU: 16 · (2·8·4 + 4) = 1,088 B a page (plus 16 · 4 per policy scalar); CUDA: bf16 K/V,
  // 16 · (2·8·2 + 4) = 576 B, and the policy's scalars stay on the host.
  const kvb::ModelConfig c = kvb::model_shape("stories260k");
  const int64_t bytes = kvb::kv_pool_bytes_of_gib(0.25);
  EXPECT_EQ(bytes, 268435456);
  EXPECT_EQ(kvb::cli::memory_pool_pages(0.25, "cpu", c, 16), 268435456 / 1088);  // 246,723
  EXPECT_EQ(kvb::cli::memory_pool_pages(0.25, "cpu-bf16", c, 16), 268435456 / 1088);
  EXPECT_EQ(kvb::cli::memory_pool_pages(0.25, "cuda", c, 16), 268435456 / 576);  // 466,033
  auto h2o = kvb::make_policy(kvb::PolicySpec::parse("h2o", 32));  // accumulated attention: a scalar a token
  const kvb::PolicyNeeds needs = h2o->needs();
  ASSERT_GT(needs.num_scalars, 0);
  EXPECT_EQ(kvb::cli::memory_pool_pages(0.25, "cpu", c, 16, needs),
            bytes / (16 * (2 * 8 * 4 + 4 + 4 * needs.num_scalars)));
  EXPECT_EQ(kvb::cli::memory_pool_pages(0.25, "cuda", c, 16, needs), bytes / 576);
  EXPECT_EQ(kvb::cli::memory_pool_pages(0, "cpu", c, 16), 0);
  EXPECT_EQ(kvb::cli::memory_pool_pages(1e-7, "cpu", c, 16), 0);  // 107 bytes: no page
  EXPECT_TRUE(kvb::test::error_has([&] { kvb::cli::memory_pool_pages(1, "tpu", c, 16); }, {"--backend tpu"}));
  // bench's plan prices its pages as the pool does, on each backend.
  for (const char* backend : {"cpu", "cpu-bf16", "cuda"}) {
    for (const char* spec : {"full", "h2o"}) {
      const int64_t budget = std::string(spec) == "full" ? 0 : 32;
      auto p = kvb::make_policy(kvb::PolicySpec::parse(spec, budget));
      const auto pl = plan_bench_memory(stories(100, 28, 512, backend), p.get(), budget);
      EXPECT_EQ(pl.page_bytes, kvb::kv_page_geometry(backend, c, 16, p->needs()).bytes_per_page())
          << backend << " " << spec;
    }
  }
  // run's engine (EngineOptions::kv_pool_bytes, as `run --memory` sets it) holds the same pages
  // as bench's memory_pool_pages, full cache and a policy with scalars (CPU backends; the CUDA
  // engine needs a device, its pricing is checked above).
  auto model = kvb::Model::random(c, 1);
  for (const char* backend : {"cpu", "cpu-bf16"}) {
    for (const char* spec : {"full", "h2o"}) {
      kvb::EngineOptions eo;
      eo.backend = backend;
      eo.max_batch = 0;
      eo.kv_pool_bytes = bytes;
      auto p = kvb::make_policy(kvb::PolicySpec::parse(spec, std::string(spec) == "full" ? 0 : 32));
      const kvb::PolicyNeeds n = p->needs();
      kvb::Engine e(model, eo, std::move(p));
      EXPECT_EQ(e.cache().config().max_pages, kvb::cli::memory_pool_pages(0.25, backend, c, 16, n))
          << backend << " " << spec;
    }
  }
}

TEST(MemoryPool, PageGeometryArithmetic) {
  kvb::KvPageGeometry g{5, 4, 8, 16, kvb::KvDtype::kF32, 0};
  EXPECT_EQ(g.bytes_per_page(), 1088u);
  EXPECT_EQ(g.pages_for_tokens(0), 0);
  EXPECT_EQ(g.pages_for_tokens(1), 1);
  EXPECT_EQ(g.pages_for_tokens(16), 1);
  EXPECT_EQ(g.pages_for_tokens(17), 2);
  EXPECT_EQ(g.pages_for_sequence(128), 20 * 8);
  EXPECT_EQ(g.pool_pages(1087), 0);
  EXPECT_EQ(g.pool_pages(1088 * 7 + 5), 7);
  EXPECT_EQ(g.pool_pages(-1), 0);
  g.dtype = kvb::KvDtype::kBF16;
  g.num_scalars = 2;
  EXPECT_EQ(g.bytes_per_page(), 16u * (2 * 8 * 2 + 4 + 8));
  // The host cache's accounting is the f32 geometry with its scalars.
  kvb::KVCacheConfig kc(5, 4, 8, 16, 3);
  EXPECT_EQ(kvb::KVCache(kc).page_bytes(), kc.geometry().bytes_per_page());
  EXPECT_EQ(kc.geometry().bytes_per_page(), 16u * (2 * 8 * 4 + 4 + 12));
  EXPECT_EQ(kvb::kv_pool_bytes_of_gib(-1), 0);
  EXPECT_EQ(kvb::kv_pool_bytes_of_gib(std::numeric_limits<double>::quiet_NaN()), 0);
}

TEST(BenchMemory, BadSizesAreErrors) {
  EXPECT_TRUE(kvb::test::error_has([] { plan_bench_memory(stories(0, 8), nullptr, 0); }, {"--memory", "context"}));
  EXPECT_TRUE(kvb::test::error_has([] { plan_bench_memory(stories(8, 0), nullptr, 0); }, {"--memory", "gen"}));
}

// ---- end to end through the binary, CPU backend, random stories260K weights ----

/// `kvbench bench --model-shape stories260k` with `args` and --json; returns the JSON (null on failure).
nlohmann::json bench_json(const std::string& args, std::string* out) {
  const auto d = kvb::test::temp_dir("bench_memory");
  const std::string js = (d / "bench.json").string();
  const int rc = kvb::test::run_cli("bench --model-shape stories260k " + args + " --json " + js, out);
  if (rc != 0) return nullptr;
  std::ifstream f(js);
  return nlohmann::json::parse(f, nullptr, false);
}

/// The --memory (GiB, as text) whose KV page pool holds exactly `batch` sequences of this
/// configuration: halfway between the pages of `batch` and of `batch + 1`.
std::string memory_for(int64_t batch, int64_t context, int64_t gen, const std::string& spec, int64_t budget,
                       int chunk = 512) {
  const BenchMemoryInput in = stories(context, gen, chunk);
  const auto pl = plan(in, spec, budget);
  const int64_t pages = (pl.pool_pages(batch) + pl.pool_pages(batch + 1)) / 2;
  const double gib = (static_cast<double>(pages) + 0.5) * static_cast<double>(pl.page_bytes) / 1073741824.0;
  return fmt::format("{:.15f}", gib);
}

TEST(BenchMemoryCli, PicksTheBatchAndHoldsThePlannedPeakOnTheCpu) {
  KVB_REQUIRE_BINARY();
  struct Case {
    std::string spec;
    int64_t budget, context, gen, batch;
    int chunk;
  };
  // Full cache: 64 + 8 tokens → 5 pages per head. R-KV at B 32: the 184-token prompt, prefilled in
  // chunks of 60, is held whole by every layer (12 pages per head: the last 4-token chunk fits the
  // 12th page) before the layers are compressed one by one in the step that ends it. (A prompt of
  // one chunk is compressed layer by layer as it is appended: the plan is then an upper bound.)
  for (const Case& c : {Case{"full", 0, 64, 8, 3, 512}, Case{"rkv", 32, 184, 8, 5, 60}}) {
    std::string out;
    const std::string mem = memory_for(c.batch, c.context, c.gen, c.spec, c.budget, c.chunk);
    const auto j = bench_json(fmt::format("--context {} --gen {} --policy {} --budget {} --prefill-chunk {} --memory {}",
                                          c.context, c.gen, c.spec, c.budget, c.chunk, mem),
                              &out);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_NE(out.find("memory_plan:"), std::string::npos) << out;
    EXPECT_NE(out.find("memory_result: planned batch " + std::to_string(c.batch)), std::string::npos) << out;
    ASSERT_EQ(j["rows"].size(), 1u);
    const auto& row = j["rows"][0];
    EXPECT_EQ(row["batch"], c.batch) << c.spec;
    EXPECT_EQ(row["memory_plan"]["batch"], c.batch) << c.spec;
    EXPECT_EQ(row["memory_plan"]["pages_per_seq"], 20 * (c.spec == "full" ? 5 : 12)) << c.spec;
    EXPECT_GT(row["decode_tok_s"].get<double>(), 0) << c.spec;
    // The run stayed within the planned pool (the engine's scheduler admits by pages), with no
    // preemption; the full cache, whose prompts all fit one step, held exactly the planned peak.
    EXPECT_LE(row["kv_pages_peak"].get<int64_t>(), row["kv_pool_pages"].get<int64_t>()) << c.spec;
    EXPECT_EQ(row["kv_pool_pages"], row["memory_plan"]["kv_pool_pages"]) << c.spec;
    EXPECT_GE(row["memory_plan"]["kv_pool_pages"].get<int64_t>(), row["memory_plan"]["pool_pages"].get<int64_t>());
    EXPECT_GT(row["process_peak_rss_mib"].get<double>(), 0) << c.spec;
    EXPECT_FALSE(row.contains("peak_rss_mib")) << "the process peak has its own name";
    EXPECT_EQ(row["preemptions"], 0) << c.spec;
    EXPECT_GE(row["decode_batch_max"].get<int>(), 1) << c.spec;
    if (c.spec == "full") {
      EXPECT_EQ(row["kv_pages_peak"].get<int64_t>(), c.batch * row["memory_plan"]["pages_per_seq"].get<int64_t>());
      EXPECT_EQ(row["decode_batch_max"], c.batch);
    }
  }
}

TEST(BenchMemoryCli, BenchAndRunSizeTheSamePool) {
  // `--memory` is the KV page pool in every command: bench and run on the same model and backend
  // run the same number of pages (0.001 GiB / 1,088 B = 986 pages of stories260K on the CPU).
  KVB_REQUIRE_BINARY();
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  KVB_REQUIRE_TEST_DATA("datasets/gsm8k");
  const std::string model = kvb::test::test_data("models/stories260K-hf");
  const auto d = kvb::test::temp_dir("bench_run_pool");
  const std::string js = (d / "bench.json").string();
  std::string out;
  ASSERT_EQ(kvb::test::run_cli("bench --model " + model + " --context 32 --gen 4 --memory 0.001 --json " + js, &out), 0)
      << out;
  std::ifstream f(js);
  const auto j = nlohmann::json::parse(f, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  const int64_t bench_pages = j["rows"][0]["kv_pool_pages"].get<int64_t>();
  EXPECT_EQ(bench_pages, 1073741 / 1088);
  EXPECT_EQ(j["rows"][0]["memory_plan"]["kv_pool_pages"], bench_pages);
  EXPECT_NE(out.find("memory_plan: KV page pool 0.001 GiB on cpu = 986 pages of 1088 bytes"), std::string::npos) << out;
  ASSERT_EQ(kvb::test::run_cli("run --task gsm8k --data-dir " + kvb::test::test_data("datasets") + " --model " + model +
                                   " --policies full --limit 1 --samples 1 --max-new-tokens 4 --memory 0.001 --db " +
                                   (d / "r.db").string(),
                               &out),
            0)
      << out;
  EXPECT_NE(out.find("--memory 0.001 GiB (" + std::to_string(bench_pages) + " KV pages)"), std::string::npos) << out;
}

TEST(BenchMemoryCli, BadMemoryIsOneErrorLineWithExit2) {
  KVB_REQUIRE_BINARY();
  std::string out;
  for (const char* bad : {"0", "-1", "nan", "inf", "x"}) {
    EXPECT_EQ(kvb::test::run_cli(std::string("bench --model-shape stories260k --memory ") + bad, &out), 2) << bad;
    EXPECT_NE(out.find("kvbench: error: --memory"), std::string::npos) << bad << ": " << out;
  }
  // Not even one sequence fits the pool (100 pages of 1,088 B; 0.0001 GiB holds 98): the pages are named.
  EXPECT_EQ(kvb::test::run_cli("bench --model-shape stories260k --context 64 --gen 8 --memory 0.0001", &out), 2);
  EXPECT_TRUE(kvb::test::contains_all(out, {"kvbench: error: --memory: a KV page pool of 0.0001 GiB (98 pages of "
                                            "1088 bytes on cpu) does not hold one sequence",
                                            "needs 100 pages at its peak"}))
      << out;
  // --memory picks the batch: --batch with it is an error.
  EXPECT_EQ(kvb::test::run_cli("bench --model-shape stories260k --memory 1 --batch 2", &out), 2) << out;
  EXPECT_TRUE(kvb::test::contains_all(out, {"kvbench: error: ", "--batch excludes --memory"})) << out;
}

TEST(BenchCasesCli, CasesRunInOrderOnOneModelAndBadCasesAreErrors) {
  KVB_REQUIRE_BINARY();
  std::string out;
  const auto j = bench_json("--case '48 4 2 full' --case '40 3 1 rkv 32'", &out);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_EQ(j["rows"].size(), 2u) << out;
  EXPECT_EQ(j["rows"][0]["context"], 48);
  EXPECT_EQ(j["rows"][0]["gen"], 4);
  EXPECT_EQ(j["rows"][0]["batch"], 2);
  EXPECT_EQ(j["rows"][0]["policy"], "full");
  EXPECT_EQ(j["rows"][1]["context"], 40);
  EXPECT_EQ(j["rows"][1]["batch"], 1);
  EXPECT_EQ(j["rows"][1]["policy"], "rkv");
  EXPECT_EQ(j["rows"][1]["budget"], 32);
  EXPECT_TRUE(j["rows"][1]["memory_plan"].is_null());
  // Under --memory the batch is '-' and the search picks it, per case.
  const std::string mem = memory_for(2, 48, 4, "full", 0);
  const auto m = bench_json("--memory " + mem + " --case '48 4 - full'", &out);
  ASSERT_TRUE(m.is_object()) << out;
  EXPECT_EQ(m["rows"][0]["batch"], 2) << out;
  for (const char* bad : {"'48 4'", "'48 4 x full'", "'0 4 1 full'", "'48 4 1 full -3'", "'48 4 1 full 1 2'"}) {
    EXPECT_EQ(kvb::test::run_cli(std::string("bench --model-shape stories260k --case ") + bad, &out), 2) << bad;
    EXPECT_NE(out.find("kvbench: error: --case: "), std::string::npos) << bad << ": " << out;
  }
  EXPECT_EQ(kvb::test::run_cli("bench --model-shape stories260k --memory 1 --case '48 4 2 full'", &out), 2);
  EXPECT_NE(out.find("BATCH must be '-' with --memory"), std::string::npos) << out;
}

TEST(BenchCasesCli, PlanOnlyNeedsNoWeights) {
  KVB_REQUIRE_BINARY();
  std::string out;
  // Qwen3-8B on CUDA, planned on a machine without either: 70 GiB, 32K context, full vs R-KV.
  const auto d = kvb::test::temp_dir("bench_plan");
  const std::string js = (d / "plan.json").string();
  ASSERT_EQ(kvb::test::run_cli("bench --backend cuda --model-shape qwen3-8b --memory 70 --plan-only --json " + js +
                                   " --case '32768 256 - full' --case '512 4096 - rkv 1024'",
                               &out),
            0)
      << out;
  std::ifstream f(js);
  const auto j = nlohmann::json::parse(f, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_EQ(j["plans"].size(), 2u);
  // Full, 32K + 256: 36 · 8 · 2064 pages of 16 · 516 B = 4.57 GiB of KV per sequence; a KV page
  // pool of 70 GiB is ⌊70 · 2³⁰ / 8256⌋ = 9,103,915 pages: 15 sequences (weights and work
  // buffers are outside it, in the process estimate).
  EXPECT_EQ(j["plans"][0]["pages_per_seq"], 36 * 8 * 2064);
  EXPECT_EQ(j["plans"][0]["page_bytes"], 16 * 516);
  EXPECT_EQ(j["plans"][0]["kv_pool_pages"], int64_t{70} * 1073741824 / 8256);
  EXPECT_EQ(j["plans"][0]["batch"], 15) << out;
  EXPECT_GT(j["plans"][0]["process_bytes_estimate"].get<double>(), 70.0 * 1073741824) << "pool + weights + work";
  // R-KV at 1024 over a 512-token prompt and 4096 generated: B + buffer = 1152 tokens per head.
  EXPECT_EQ(j["plans"][1]["peak_tokens_per_head"], 1152);
  EXPECT_EQ(kvb::test::run_cli("bench --model-shape stories260k --plan-only", &out), 2);
  EXPECT_NE(out.find("kvbench: error: --plan-only: needs --memory"), std::string::npos) << out;
}

// ---- tools/gpu_vs_transformers.py: the kvbench half and the TSV, without torch ----

TEST(GpuVsTransformers, JoinsKvbenchJsonIntoTheTsv) {
  KVB_REQUIRE(kvb::test::run_command("python3 --version").rc == 0, "python3 is not installed");
  const auto d = kvb::test::temp_dir("vs_hf");
  const std::string js = (d / "kv.json").string(), tsv = (d / "v.tsv").string();
  {
    // A fake kvbench --json: rows out of case order, one case missing, one without a roofline.
    std::ofstream f(js);
    f << R"({"rows": [
      {"context": 2048, "batch": 64, "policy": "full", "budget": 0, "prefill_tok_s": 15077.5, "decode_tok_s": 1549.44,
       "device": {"decode": "127 steps, 40.936 ms/step, 856.7 GB/s achieved (weights + KV read per step), roofline 2989.3 GB/s (copy kernel), 28.7%"}},
      {"context": 8192, "batch": 1, "policy": "full", "budget": 0, "prefill_tok_s": 4618.4, "decode_tok_s": 94.2, "device": {}}
    ]})";
  }
  std::string out;
  ASSERT_EQ(kvb::test::run_command("python3 " + kvb::test::source_path("tools/gpu_vs_transformers.py") +
                                       " --no-hf --kvbench-json " + js + " --out " + tsv +
                                       " --cases '8192 1 full; 2048 64 full; 32768 4 trimkv:random_gates=0 1024'",
                                   &out),
            1)  // a case kvbench did not report is an error (exit 1), still written
      << out;
  std::ifstream f(tsv);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(),
            "context\tbatch\tpolicy\tkvbench_prefill_tok_s\thf_prefill_tok_s\tkvbench_decode_tok_s\thf_decode_tok_s\t"
            "decode_roofline_pct\n"
            "8192\t1\tfull\t4618.4\t-\t94.2\t-\t-\n"
            "2048\t64\tfull\t15077.5\t-\t1549.4\t-\t28.7\n"
            "32768\t4\ttrimkv:random_gates=0@1024\terror\t-\terror\t-\terror\n");
  // Bad cases: argparse's usage error, exit 2.
  EXPECT_EQ(kvb::test::run_command("python3 " + kvb::test::source_path("tools/gpu_vs_transformers.py") +
                                       " --no-hf --kvbench-json " + js + " --out " + tsv + " --cases '8192 full'",
                                   &out),
            2)
      << out;
  EXPECT_NE(out.find("--cases: '8192 full': expected CONTEXT BATCH POLICY [BUDGET]"), std::string::npos) << out;
}

TEST(GpuVsTransformers, RunsTheRealKvbenchOnTheCpu) {
  // --tiny: the same --case command line gpu_check runs on the GPU, on stories260K and the CPU.
  KVB_REQUIRE_BINARY();
  KVB_REQUIRE(kvb::test::run_command("python3 --version").rc == 0, "python3 is not installed");
  const auto d = kvb::test::temp_dir("vs_hf_tiny");
  const std::string tsv = (d / "v.tsv").string();
  std::string out;
  ASSERT_EQ(kvb::test::run_command("python3 " + kvb::test::source_path("tools/gpu_vs_transformers.py") +
                                       " --tiny --no-hf --gen 4 --kvbench " + KVB_BINARY + " --out " + tsv +
                                       " --cases '64 2 full; 96 1 trimkv:random_gates=0 32'",
                                   &out),
            0)
      << out;
  std::ifstream f(tsv);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(f, line);) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, '\t');) cells.push_back(c);
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), 3u) << out;
  ASSERT_EQ(rows[1].size(), 8u);
  EXPECT_EQ(rows[1][0], "64");
  EXPECT_EQ(rows[2][2], "trimkv:random_gates=0@32");
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_GT(std::stod(rows[r][3]), 0) << out;  // kvbench prefill tok/s
    EXPECT_GT(std::stod(rows[r][5]), 0) << out;  // kvbench decode tok/s
    EXPECT_EQ(rows[r][4], "-");                  // no transformers
    EXPECT_EQ(rows[r][7], "-");                  // no roofline on the CPU backend
  }
}

}  // namespace
