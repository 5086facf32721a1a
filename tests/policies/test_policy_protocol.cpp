// The compression protocol (issue 15): with the default compress=prompt_end every policy prefills
// the whole prompt with the full cache, compresses at its end and then every `buffer` decode
// tokens, so greedy output and per-step logits do not depend on --prefill-chunk (64, 128, the
// whole prompt), on stories260K (GQA 8/4) and on a random-weight Qwen3-style model (q/k norm,
// GQA 8/2). Plus: PyramidKV's layer budgets are fixed from the prompt length (KVCache-Factory's
// rule) and its decode-time KV matches a uniform policy's; WG-KV's decode window is exactly W
// tokens; ForesightKV's eviction noise follows the request's seed; a budget-less compressing
// policy is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "engine/engine.h"
#include "engine/policies/policy.h"
#include "engine/policies/snapkv.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "tests/support/model_sizes.h"
#include "tests/policies/harness.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

const std::string kStories = std::string(KVB_TEST_DATA_DIR) + "/models/stories260K-hf";

#define REQUIRE_STORIES() KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors")

std::shared_ptr<const Model> stories() {
  static std::shared_ptr<const Model> m = Model::load_dir(kStories);
  return m;
}

/// A small Qwen3-shaped model (q/k RMSNorm, GQA group 4) with random weights.
std::shared_ptr<const Model> random_qwen3(int layers = 3) {
  return Model::random(
      test::resized(
          model_shape("qwen3-0.6b"),
          {.vocab = 256, .hidden = 64, .intermediate = 128, .layers = layers, .heads = 8, .kv_heads = 2, .head_dim = 16}),
      7);
}

/// n pseudo-random token ids in [3, vocab) (a fixed LCG: the same prompt in every run).
std::vector<int32_t> prompt_of(size_t n, int64_t vocab) {
  std::vector<int32_t> p{1};
  uint64_t x = 12345;
  while (p.size() < n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    p.push_back(static_cast<int32_t>(3 + (x >> 33) % static_cast<uint64_t>(vocab - 3)));
  }
  return p;
}

constexpr size_t kPrompt = 400;  // > 3 x 128
constexpr int kDecode = 48;

struct RunOut {
  std::vector<int32_t> tokens;  ///< greedy generation
  std::vector<float> logits;    ///< teacher-forced logits over `forced`
  int64_t evictions = 0;
  int64_t kv_read = 0;  ///< K+V bytes the decode steps' attention read (GenerationResult::kv_read_bytes)
};

RunOut run(std::shared_ptr<const Model> m, const std::string& spec, int64_t budget, int chunk,
           const std::vector<int32_t>& prompt, const std::vector<int32_t>* forced) {
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  RunOut r;
  {
    Engine e(m, eo, spec == "full" ? nullptr : make_policy(PolicySpec::parse(spec, budget)));
    GenerationRequest q;
    q.prompt = prompt;
    q.max_new_tokens = kDecode;
    auto out = e.generate({q}, nullptr);
    r.tokens = out[0].tokens;
    r.evictions = out[0].evictions;
    r.kv_read = out[0].kv_read_bytes;
  }
  Engine e(m, eo, spec == "full" ? nullptr : make_policy(PolicySpec::parse(spec, budget)));
  r.logits = e.score(prompt, forced ? *forced : r.tokens);
  return r;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

struct ChunkCase {
  std::string spec;
  int64_t budget;
};

// Every registered policy except `oracle` (it needs a recorded trace: test_policy_oracle.cpp),
// on a decode schedule short enough to compress several times in kDecode steps.
std::vector<ChunkCase> chunk_cases() {
  return {
      {"full", 0},
      {"streamingllm:buffer=16", 64},
      {"h2o:buffer=16", 64},
      {"snapkv:buffer=16", 64},
      {"snapkv:buffer=16,window=32,kernel=5,pool=avg,gqa=mean", 64},
      {"pyramidkv:buffer=16,window=8", 64},
      {"rkv:buffer=16", 64},
      {"keydiff:buffer=16", 64},
      {"gkv:buffer=16", 64},
      {"observed_attention:buffer=16", 64},
      {"chunkkv:buffer=16,window=16", 64},
      {"lagkv:buffer=16,lag=32", 64},
      {"cur:buffer=16", 64},
      {"noncausal_attn:chunk=96", 64},                 // 400 = four whole chunks and a padded one; prompt only
      {"simlayerkv:lazy_threshold=0,n_recent=32", 0},  // every layer lazy; prompt only
      {"trimkv:buffer=16,random_gates=3", 64},
      {"trimkv:buffer=16,random_gates=3,budget_kind=global", 64},
      {"wgkv:random_gates=2,window=16,tau=0.5", 0},
      {"wgkv:random_gates=2,window=16,obs_window=16,tau=0.5", 40},
      {"foresightkv:random_scorer=1,window=16,buffer=16", 64},
      {"random:buffer=16,seed=9", 64},
      {"seerattn_r:random_gates=1,block_size=16", 64},
      {"entropy_chunkkv:buffer=16,window=16", 64},
      {"qfilter:buffer=16,random_filters=1", 64},
      {"cap:buffer=16", 64},
      {"lukv:buffer=16", 64},
      {"kvcompose:ratio=0.5,window=8", 0},  // prompt only
      {"knorm:buffer=16,merge=true", 64},
      {"snapkv:buffer=16,rerotate=true", 64},
      {"criticalkv:buffer=16,window=16", 64},
      {"criticaladakv:buffer=16,window=16", 64},
      {"finch:buffer=16,window=16", 64},
      {"fastkvzip:ratio=0.5,random_gates=1", 0},  // one cut over all layers at the prompt's end
      {"kvzip:ratio=0.5,chunk_size=96", 0},       // scoring passes (several chunks) after the prompt, one cut
      {"cam:interval=4,merge_budget=4", 64},      // decode-time merges (seeded draws)
  };
}

class ChunkInvariance : public ::testing::TestWithParam<ChunkCase> {
 protected:
  void check(std::shared_ptr<const Model> m) {
    const ChunkCase& c = GetParam();
    const auto prompt = prompt_of(kPrompt, m->config().vocab_size);
    const RunOut whole = run(m, c.spec, c.budget, 4096, prompt, nullptr);
    ASSERT_EQ(static_cast<int>(whole.tokens.size()), kDecode);
    if (c.spec.rfind("seerattn_r", 0) == 0) {  // keeps the cache, selects reads: it must read less
      EXPECT_LT(whole.kv_read, run(m, "full", 0, 4096, prompt, nullptr).kv_read)
          << "the policy never selected: the check would be vacuous";
    } else if (c.spec != "full") {
      EXPECT_GT(whole.evictions, 0) << "the policy never compressed: the check would be vacuous";
    }
    // Every CPU kernel has one reduction order per output element (issue 38: matmul.h,
    // attention.h), so any prefill chunk gives the whole prompt's logits bit for bit, the same
    // greedy tokens and the same evictions.
    for (int chunk : {7, 64, 100}) {
      SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
      const RunOut r = run(m, c.spec, c.budget, chunk, prompt, &whole.tokens);
      EXPECT_EQ(r.tokens, whole.tokens);
      EXPECT_EQ(r.evictions, whole.evictions);
      EXPECT_EQ(max_abs_diff(r.logits, whole.logits), 0.0f);
    }
  }
};

TEST_P(ChunkInvariance, Stories260K) {
  REQUIRE_STORIES();
  check(stories());
}

TEST_P(ChunkInvariance, RandomQwen3Gqa) { check(random_qwen3()); }

INSTANTIATE_TEST_SUITE_P(EveryPolicy, ChunkInvariance, ::testing::ValuesIn(chunk_cases()),
                         [](const ::testing::TestParamInfo<ChunkCase>& i) {
                           std::string n = std::to_string(i.index) + "_" + i.param.spec.substr(0, i.param.spec.find(':'));
                           return n;
                         });

// The check above can fail: compress=chunked compresses mid-prompt and the result follows the chunk.
TEST(CompressProtocol, ChunkedModeDependsOnTheChunkAndIsRecorded) {
  auto m = random_qwen3();
  const auto prompt = prompt_of(kPrompt, m->config().vocab_size);
  const RunOut whole = run(m, "snapkv:buffer=16,compress=chunked", 64, 4096, prompt, nullptr);
  const RunOut chunked = run(m, "snapkv:buffer=16,compress=chunked", 64, 64, prompt, &whole.tokens);
  EXPECT_GT(max_abs_diff(chunked.logits, whole.logits), 1e-3f);
  // Compressed after the second chunk already (128 tokens >= 64 + 16), not only at the end.
  EngineOptions eo;
  eo.prefill_chunk = 64;
  Engine e(m, eo, make_policy(PolicySpec::parse("snapkv:buffer=16,compress=chunked", 64)));
  int step = 0;
  int32_t after_two = -1;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    if (++step == 2) after_two = kv.length(s, 0, 0);
  };
  e.score(prompt, {});
  EXPECT_EQ(after_two, 64);
  EXPECT_EQ(make_policy(PolicySpec::parse("snapkv", 64))->resolved_params()["compress"], "prompt_end");
  EXPECT_EQ(make_policy(PolicySpec::parse("rkv:compress=chunked", 64))->resolved_params()["compress"], "chunked");
  EXPECT_EQ(make_policy(PolicySpec::parse("wgkv:random_gates=1", 0))->resolved_params()["compress"], "prompt_end");
  for (const auto& info : policy_registry()) {
    if (!info.tests.evicts) continue;  // full; quest and seerattn_r select reads, never compress
    const bool has =
        std::any_of(info.params.begin(), info.params.end(), [](const auto& p) { return p.key == "compress"; });
    EXPECT_TRUE(has) << info.name << " does not declare `compress`";
  }
  EXPECT_TRUE(test::contains_all(test::policy_error("snapkv:compress=sometimes", 64), {"'compress'"}));
}

TEST(CompressProtocol, OracleRefusesChunkedCompression) {
  EXPECT_TRUE(test::contains_all(test::policy_error("oracle:buffer=16,compress=chunked", 64), {"'compress'"}));
  EXPECT_NO_THROW(make_policy(PolicySpec::parse("oracle:buffer=16", 64)));
}

// Only the step that ends the prompt compresses: the cache holds every prompt token until then.
TEST(CompressProtocol, NoCompressionBeforeTheEndOfThePrompt) {
  auto m = random_qwen3();
  const auto prompt = prompt_of(kPrompt, m->config().vocab_size);
  for (const std::string spec : {"snapkv:buffer=16", "trimkv:buffer=16,random_gates=3,budget_kind=global",
                                 "wgkv:random_gates=2,window=16,tau=0.5"}) {
    SCOPED_TRACE(spec);
    EngineOptions eo;
    eo.prefill_chunk = 64;
    Engine e(m, eo, make_policy(PolicySpec::parse(spec, spec.rfind("wgkv", 0) == 0 ? 0 : 64)));
    int step = 0;
    e.on_step = [&](const KVCache& kv, SeqId s) {
      ++step;
      const int64_t seen = std::min<int64_t>(static_cast<int64_t>(step) * 64, kPrompt);
      if (seen < static_cast<int64_t>(kPrompt))
        for (int l = 0; l < kv.config().num_layers; ++l)
          for (int h = 0; h < kv.config().num_kv_heads; ++h) ASSERT_EQ(kv.length(s, l, h), seen) << "step " << step;
    };
    GenerationResult r;
    e.score(prompt, {5, 6, 7}, &r);
    EXPECT_GT(r.evictions, 0);
  }
}

// --- PyramidKV --------------------------------------------------------------------------------

TEST(PyramidKV, LayerBudgetsFollowKVCacheFactory) {
  // C = 64, w = 8, 5 layers, beta 20: min = 56 // 20 = 2, max = 110, step = 108 // 4 = 27.
  std::vector<int64_t> got;
  for (int l = 0; l < 5; ++l) got.push_back(pyramid_layer_budget(64, 8, 400, l, 5, 20));
  EXPECT_EQ(got, (std::vector<int64_t>{118, 91, 64, 37, 10}));
  // max clamped to P - w = 107: min = 112 - 107 = 5, step = 102 // 4 = 25.
  got.clear();
  for (int l = 0; l < 5; ++l) got.push_back(pyramid_layer_budget(64, 8, 115, l, 5, 20));
  EXPECT_EQ(got, (std::vector<int64_t>{115, 90, 65, 40, 15}));
  // Uniform: C <= P < 2(C - w), and P < C.
  for (int64_t P : {64, 100, 111, 30})
    for (int l = 0; l < 5; ++l) EXPECT_EQ(pyramid_layer_budget(64, 8, P, l, 5, 20), 64) << P << " " << l;
  // The integer floor: C = 128, w = 32, 36 layers: min = 96 // 20 = 4, max = 188, step = 184 // 35 = 5.
  EXPECT_EQ(pyramid_layer_budget(128, 32, 4000, 0, 36, 20), 188 + 32);
  EXPECT_EQ(pyramid_layer_budget(128, 32, 4000, 35, 36, 20), 188 - 35 * 5 + 32);
}

/// Per-step total tokens of one sequence over every (layer, kv head); the decode-time maximum.
struct KvTrace {
  int64_t decode_max = 0, after_prompt = -1;
  int64_t decode_max_pages = 0;  ///< the most pages (Σ ⌈length / page_size⌉) at a decode step's end
  std::vector<std::vector<int32_t>> layer_len_after_prompt;  // [layer] head 0 length
};

KvTrace trace(std::shared_ptr<const Model> m, const std::string& spec, int64_t budget, size_t prompt_len, int decode) {
  EngineOptions eo;
  eo.prefill_chunk = 128;
  Engine e(m, eo, make_policy(PolicySpec::parse(spec, budget)));
  KvTrace t;
  int step = 0;
  const int prefill_steps = static_cast<int>((prompt_len + 127) / 128);
  e.on_step = [&](const KVCache& kv, SeqId s) {
    ++step;
    int64_t total = 0, pages = 0;
    const int64_t ps = kv.config().page_size;
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int h = 0; h < kv.config().num_kv_heads; ++h) {
        total += kv.length(s, l, h);
        pages += (kv.length(s, l, h) + ps - 1) / ps;
      }
    if (step == prefill_steps) {
      t.after_prompt = total;
      for (int l = 0; l < kv.config().num_layers; ++l) t.layer_len_after_prompt.push_back({kv.length(s, l, 0)});
    } else if (step > prefill_steps) {
      t.decode_max = std::max(t.decode_max, total);
      t.decode_max_pages = std::max(t.decode_max_pages, pages);
    }
  };
  GenerationRequest q;
  q.prompt = prompt_of(prompt_len, m->config().vocab_size);
  q.max_new_tokens = decode;
  e.generate({q}, nullptr);
  return t;
}

void expect_pyramid_like_uniform(std::shared_ptr<const Model> m, int64_t B, int w, size_t prompt_len, int decode,
                                 std::vector<int> buffers = {16, 128}) {
  const int nl = static_cast<int>(m->config().num_layers);
  const std::string win = ",window=" + std::to_string(w);
  for (const int buffer : buffers) {
    SCOPED_TRACE("buffer " + std::to_string(buffer));
    const std::string buf = "buffer=" + std::to_string(buffer);
    const KvTrace exact = trace(m, "pyramidkv:align=1," + buf + win, B, prompt_len, decode);
    const KvTrace pyr = trace(m, "pyramidkv:" + buf + win, B, prompt_len, decode);  // page-aware (align=16)
    const KvTrace snap = trace(m, "snapkv:" + buf + win, B, prompt_len, decode);
    ASSERT_GT(snap.decode_max, 0);
    // align=1: per-layer budgets after the prompt are KVCache-Factory's, and the tokens match a
    // uniform policy's to within the floor in KVCache-Factory's step.
    std::vector<int64_t> factory;
    for (int l = 0; l < nl; ++l) {
      factory.push_back(pyramid_layer_budget(B, w, static_cast<int64_t>(prompt_len), l, nl, 20));
      EXPECT_EQ(exact.layer_len_after_prompt[l][0], factory.back()) << "layer " << l;
    }
    const double ratio = static_cast<double>(exact.decode_max) / static_cast<double>(snap.decode_max);
    EXPECT_NEAR(ratio, 1.0, 0.01) << "pyramidkv " << exact.decode_max << " vs snapkv " << snap.decode_max;
    // Page-aware (default): the layers keep the aligned budgets, never more tokens nor more pages
    // than the uniform policy at any decode step, and still a pyramid (first layer > last).
    const auto aligned = pyramid_page_aligned(factory, B, 16, w + 1);
    for (int l = 0; l < nl; ++l) EXPECT_EQ(pyr.layer_len_after_prompt[l][0], aligned[l]) << "layer " << l;
    EXPECT_GT(aligned.front(), aligned.back());
    EXPECT_LE(pyr.decode_max, snap.decode_max);
    EXPECT_LE(pyr.decode_max_pages, snap.decode_max_pages)
        << "pyramidkv pages " << pyr.decode_max_pages << " vs snapkv " << snap.decode_max_pages;
  }
}

TEST(PyramidKV, PageAlignedBudgetsStayOnTheUniformPageGrid) {
  // Against the definition: each budget is B + 16·d, Σ d ≤ 0, no budget below min(exact, floor),
  // budgets above B never raised; at every k the pages of the aligned budgets ≤ the uniform ones'.
  for (const int64_t B : {64, 100, 128, 512})
    for (const int n : {5, 12, 36})
      for (const int64_t P : {400, 1100, 5000}) {
        std::vector<int64_t> exact;
        for (int l = 0; l < n; ++l) exact.push_back(pyramid_layer_budget(B, 8, P, l, n, 20));
        const auto a = pyramid_page_aligned(exact, B, 16, 9);
        ASSERT_EQ(a.size(), exact.size());
        int64_t sum_d = 0;
        for (int l = 0; l < n; ++l) {
          EXPECT_EQ((a[l] - B) % 16, 0) << B << " " << n << " " << P << " layer " << l;
          sum_d += (a[l] - B) / 16;
          EXPECT_GE(a[l], std::min<int64_t>(exact[l], 9));
          if (exact[l] >= B) {
            EXPECT_LE(a[l], exact[l]);
          }
        }
        EXPECT_LE(sum_d, 0);
        for (int64_t k = 0; k < 128; ++k) {
          int64_t pages = 0;
          for (int l = 0; l < n; ++l) pages += (a[l] + k + 15) / 16;
          EXPECT_LE(pages, n * ((B + k + 15) / 16)) << "k " << k;
        }
      }
  EXPECT_EQ(pyramid_page_aligned({70, 50}, 64, 1, 9), (std::vector<int64_t>{70, 50}));  // align 1: exact
}

TEST(PyramidKV, DecodeKvPeakWithinOnePercentOfSnapKVStories260K) {
  REQUIRE_STORIES();
  expect_pyramid_like_uniform(stories(), 64, 8, 400, 100);
}

TEST(PyramidKV, DecodeKvPeakWithinOnePercentOfSnapKV36Layers) {
  const ModelConfig c = test::resized(
      model_shape("qwen3-0.6b"),
      {.vocab = 128, .hidden = 32, .intermediate = 64, .layers = 36, .heads = 4, .kv_heads = 2, .head_dim = 8});
  // KVCache-Factory's floored step leaves the layers' mean slightly above the budget (here
  // 36 layers, C = 512, w = 32: 481 + 32 per head on average, +0.2 %).
  expect_pyramid_like_uniform(Model::random(c, 3), 512, 32, 1100, 40, {16});
}

// --- KV peak and steady footprint (issue 33) ----------------------------------------------------

/// Page bytes of every (layer, kv head) holding `tokens` tokens: the reference, from the shape.
size_t cache_bytes(const KVCache& kv, int64_t tokens) {
  const auto& c = kv.config();
  const int64_t pages = (tokens + c.page_size - 1) / c.page_size;
  return static_cast<size_t>(c.num_layers) * c.num_kv_heads * pages * kv.page_bytes();
}

// Under compress=prompt_end the whole prompt is in the cache before it is compressed, so the
// high-water mark is the prompt's full-cache bytes at every --prefill-chunk (the backend
// compresses layer by layer inside the last prompt step; the peak counts a step's compressions
// at its end). compress=chunked keeps the cache bounded during the prompt and shows it. The steady
// footprint is budget + buffer − 1 tokens per head (page-rounded).
TEST(KvPeak, PromptEndPeakIsTheFullPromptAtEveryChunkAndChunkedSavesIt) {
  auto m = random_qwen3();
  const size_t P = 401;
  const int64_t B = 32, buffer = 16;
  GenerationRequest q;
  q.prompt = prompt_of(P, m->config().vocab_size);
  q.max_new_tokens = 48;
  // One greedy generation; `bytes(t)` then gives the reference bytes of t tokens per head in the
  // run's own cache (page bytes include the policy's per-token scalars).
  std::function<size_t(int64_t)> bytes;
  auto run = [&](const std::string& spec, int chunk) {
    EngineOptions eo;
    eo.prefill_chunk = chunk;
    auto e = std::make_shared<Engine>(m, eo, make_policy(PolicySpec::parse(spec, B)));
    bytes = [e](int64_t t) { return cache_bytes(e->cache(), t); };
    const auto r = e->generate({q}, nullptr);
    EXPECT_EQ(r[0].tokens.size(), 48u);
    return r[0];
  };
  for (const std::string name : {"snapkv", "pyramidkv", "streamingllm", "h2o", "tova", "knorm"}) {
    SCOPED_TRACE(name);
    const std::string spec = name + ":buffer=" + std::to_string(buffer) + (name == "pyramidkv" ? ",window=8" : "");
    const GenerationResult whole = run(spec, 4096);
    EXPECT_EQ(whole.kv_bytes_peak, bytes(static_cast<int64_t>(P)));
    if (name != "pyramidkv") {
      EXPECT_EQ(whole.kv_bytes_steady, bytes(B + buffer - 1));  // uniform budgets
    }
    EXPECT_LT(whole.kv_bytes_steady, whole.kv_bytes_peak);
    for (int chunk : {64, 100, 256}) {
      const GenerationResult r = run(spec, chunk);
      EXPECT_EQ(r.kv_bytes_peak, whole.kv_bytes_peak) << "chunk " << chunk;
      EXPECT_EQ(r.kv_bytes_steady, whole.kv_bytes_steady) << "chunk " << chunk;
    }
    if (name == "snapkv" || name == "streamingllm") {
      // Chunked compression holds at most B + buffer − 1 tokens per head between 64-token chunks:
      // at most B + buffer − 1 + 64 inside one.
      const GenerationResult c = run(spec + ",compress=chunked", 64);
      EXPECT_LE(c.kv_bytes_peak, bytes(B + buffer - 1 + 64));
      EXPECT_LT(c.kv_bytes_peak, whole.kv_bytes_peak / 2);
    }
  }
  // The full cache: the peak is the prompt plus the generated tokens but the last (sampled, never
  // appended), reached at the end, so steady = peak = final.
  const GenerationResult full = run("full", 64);
  EXPECT_EQ(full.kv_bytes_peak, bytes(static_cast<int64_t>(P) + 47));
  EXPECT_EQ(full.kv_bytes_steady, full.kv_bytes_peak);
  EXPECT_EQ(full.kv_bytes_final, full.kv_bytes_peak);
}

// --- Decode-time keep-sets in position order (issue 33; docs/policies.md, "Compared with kvpress") --

// kvbench compresses while decoding by re-applying the policy to the cache it holds, in position
// order: a head's slots stay in increasing position order, StreamingLLM keeps the sinks and the
// newest tokens by age, and KNorm keeps the lowest-norm keys (the earlier of two equal norms) plus
// its window. The reference below rebuilds every decode-time compression from what the cache held
// after the previous step plus the new token, from positions and key norms alone.
void expect_decode_keep_sets_in_position_order(const std::string& name, int64_t B, int sinks, int window) {
  auto m = random_qwen3();
  const size_t P = 120;
  const int buffer = 8, forced_n = 60;
  const std::string spec = name == "streamingllm"
                               ? "streamingllm:sinks=" + std::to_string(sinks) + ",buffer=" + std::to_string(buffer)
                               : "knorm:window=" + std::to_string(window) + ",buffer=" + std::to_string(buffer);
  EngineOptions eo;
  eo.prefill_chunk = 512;  // the prompt in one step
  Engine e(m, eo, make_policy(PolicySpec::parse(spec, B)));
  const int nl = static_cast<int>(m->config().num_layers), nh = static_cast<int>(m->config().num_kv_heads);
  std::vector<std::vector<int32_t>> held(static_cast<size_t>(nl * nh));  // positions after the previous step
  auto norm_key = [&](int l, int h, int32_t pos) { return (static_cast<int64_t>(l * nh + h) << 32) | pos; };
  std::map<int64_t, float> norms;  // key norms seen (f32, as the policy scores), by (layer, head, position)
  int step = 0, compressions = 0;
  e.on_step = [&](const KVCache& kv, SeqId sq) {
    ++step;
    for (int l = 0; l < nl; ++l)
      for (int h = 0; h < nh; ++h) {
        std::vector<int32_t> now;
        for (int32_t i = 0; i < kv.length(sq, l, h); ++i) {
          const int32_t pos = kv.position(sq, l, h, i);
          now.push_back(pos);
          const float* k = kv.key(sq, l, h, i);
          double n2 = 0;
          for (int d = 0; d < kv.config().head_dim; ++d) n2 += static_cast<double>(k[d]) * k[d];
          norms.emplace(norm_key(l, h, pos), static_cast<float>(std::sqrt(n2)));  // a key never changes once cached
        }
        ASSERT_TRUE(std::is_sorted(now.begin(), now.end()) && std::adjacent_find(now.begin(), now.end()) == now.end())
            << "slots out of position order, layer " << l << " head " << h;
        auto& prev = held[static_cast<size_t>(l * nh + h)];
        if (step == 1) {  // the prompt: compressed once at its end
          if (name == "streamingllm") {
            std::vector<int32_t> want;
            for (int32_t p = 0; p < sinks; ++p) want.push_back(p);
            for (int32_t p = static_cast<int32_t>(P) - static_cast<int32_t>(B - sinks); p < static_cast<int32_t>(P); ++p)
              want.push_back(p);
            EXPECT_EQ(now, want) << "prompt end, layer " << l << " head " << h;
          }
          prev = now;
          continue;
        }
        std::vector<int32_t> cand = prev;
        cand.push_back(static_cast<int32_t>(P) + step - 2);  // the token this decode step appended
        if (now.size() == cand.size()) {
          EXPECT_EQ(now, cand) << "step " << step;
          prev = now;
          continue;
        }
        ++compressions;
        ASSERT_EQ(static_cast<int64_t>(cand.size()), B + buffer) << "compressed before B + buffer";
        std::vector<int32_t> want;
        if (name == "streamingllm") {
          want.assign(cand.begin(), cand.begin() + sinks);                // the oldest by position...
          want.insert(want.end(), cand.end() - (B - sinks), cand.end());  // ...and the newest by position
        } else {
          const size_t older = cand.size() - static_cast<size_t>(window);
          std::vector<size_t> idx(older);
          for (size_t i = 0; i < older; ++i) idx[i] = i;
          std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
            return norms.at(norm_key(l, h, cand[a])) < norms.at(norm_key(l, h, cand[b]));  // ties: earlier first
          });
          for (int64_t i = 0; i < B - window; ++i) want.push_back(cand[idx[static_cast<size_t>(i)]]);
          want.insert(want.end(), cand.end() - window, cand.end());
          std::sort(want.begin(), want.end());
        }
        EXPECT_EQ(now, want) << name << " step " << step << " layer " << l << " head " << h;
        prev = now;
      }
  };
  e.score(prompt_of(P, m->config().vocab_size), prompt_of(forced_n + 1, m->config().vocab_size));
  EXPECT_GE(compressions, nl * nh * 5) << "expected several decode-time compressions per head";
}

TEST(DecodeKeepSets, StreamingLLMKeepsSinksAndNewestByPosition) {
  expect_decode_keep_sets_in_position_order("streamingllm", 24, 4, 0);
}

TEST(DecodeKeepSets, KnormKeepsLowestNormKeysAndWindowInPositionOrder) {
  expect_decode_keep_sets_in_position_order("knorm", 24, 0, 2);
}

// --- WG-KV ------------------------------------------------------------------------------------

// With tau = 1 nothing is admitted: decode query t sees exactly {t-W+1 .. t}. kvbench's budget
// counts the tokens held after a step (the next token is appended before it attends), so the
// same sliding window is streamingllm:sinks=0,buffer=1 at budget W - 1 — at budget W it is a
// window of W + 1 tokens, which is what WG-KV did before the fix.
TEST(WGKV, TauOneIsASlidingWindowOfExactlyWTokens) {
  auto m = random_qwen3();
  const int W = 16;
  const auto prompt = prompt_of(200, m->config().vocab_size);
  const auto forced = prompt_of(40, m->config().vocab_size);
  EngineOptions eo;
  eo.prefill_chunk = 64;
  auto logits = [&](const std::string& spec, int64_t budget) {
    Engine e(m, eo, make_policy(PolicySpec::parse(spec, budget)));
    if (spec.rfind("wgkv", 0) == 0)
      e.on_step = [&](const KVCache& kv, SeqId s) {
        if (kv.position(s, 0, 0, kv.length(s, 0, 0) - 1) + 1 < 200) return;  // inside the prompt
        for (int l = 0; l < kv.config().num_layers; ++l)
          for (int h = 0; h < kv.config().num_kv_heads; ++h) ASSERT_EQ(kv.length(s, l, h), W - 1);
      };
    return e.score(prompt, forced);
  };
  const auto wg = logits("wgkv:random_gates=2,window=16,tau=1", 0);
  EXPECT_LE(max_abs_diff(wg, logits("streamingllm:sinks=0,buffer=1", W - 1)), 1e-5f);
  EXPECT_GT(max_abs_diff(wg, logits("streamingllm:sinks=0,buffer=1", W)), 1e-4f);
}

// --- ForesightKV ------------------------------------------------------------------------------

/// Positions each (layer, kv head) holds right after the prompt of a one-request generation.
std::vector<std::vector<int32_t>> foresight_keep(uint64_t seed) {
  auto m = random_qwen3();
  EngineOptions eo;
  eo.prefill_chunk = 128;
  Engine e(m, eo, make_policy(PolicySpec::parse("foresightkv:random_scorer=1,window=16,buffer=16", 64)));
  std::vector<std::vector<int32_t>> kept;
  e.on_step = [&](const KVCache& kv, SeqId s) {
    if (!kept.empty()) return;
    if (kv.length(s, 0, 0) > 64) return;  // still inside the prompt
    for (int l = 0; l < kv.config().num_layers; ++l)
      for (int h = 0; h < kv.config().num_kv_heads; ++h) {
        std::vector<int32_t> p;
        for (int32_t i = 0; i < kv.length(s, l, h); ++i) p.push_back(kv.position(s, l, h, i));
        kept.push_back(p);
      }
  };
  GenerationRequest q;
  q.prompt = prompt_of(kPrompt, m->config().vocab_size);
  q.max_new_tokens = 4;
  q.seed = seed;
  q.sampling.temperature = 0.8f;
  e.generate({q}, nullptr);
  return kept;
}

TEST(ForesightKV, EvictionNoiseFollowsTheSampleSeed) {
  const auto a = foresight_keep(11), a2 = foresight_keep(11), b = foresight_keep(12);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, a2) << "the same seed must reproduce the evictions";
  EXPECT_NE(a, b) << "two samples with different seeds must evict different tokens";
  size_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i] != b[i];
  EXPECT_GT(differing, a.size() / 2) << "most heads should differ";
}

// --- Budgets ----------------------------------------------------------------------------------

TEST(CompressProtocol, CompressingPolicyWithoutBudgetIsAnError) {
  for (const auto& info : policy_registry()) {
    if (info.tests.min_budget == 0) continue;  // takes no budget (full, wgkv, duoattention)
    SCOPED_TRACE(info.name);
    const PolicySpec s = info.test_spec(0);
    try {
      make_policy(s);
      ADD_FAILURE() << "expected an error for a missing budget";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), 2);
    }
  }
  // A ratio budget needs no token budget.
  EXPECT_NO_THROW(make_policy(PolicySpec::parse("snapkv:budget_kind=ratio,ratio=0.5", 0)));
  REQUIRE_STORIES();
  auto [code, out] = test::run_cli("generate --model " + kStories + " --prompt 'Once upon a time' --policy snapkv");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("kvbench: error:"), std::string::npos) << out;
  EXPECT_NE(out.find("--budget"), std::string::npos) << out;
}

}  // namespace
}  // namespace kvb
