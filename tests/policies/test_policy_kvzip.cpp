// `kvzip` (engine/policies/kvzip.cpp) and the engine's scoring passes it runs on (PolicyNeeds::
// scoring_pass, StepRunner::scoring_passes in engine/engine.cpp; docs/architecture.md#scoring-passes)
// on a small random GQA model, CPU backend: the passes' token ids are kvpress's (repeat prompt or
// continuation prompt + the previous chunk's last 8 ids, header, chunk; kvpress 0.5.5
// KVzipPress.prepare), each runs as one step after the prompt, the rollback leaves the logits of
// the full cache bit for bit, and the cut keeps N − ⌊N · (1 − ratio)⌋ entries with the sinks in
// every head. The keep-sets themselves are checked against kvpress on the real model in
// tests/kvpress (KvpressSmolLM2.KvzipMatchesKvpressKVzipPress).
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/policies/wrapped.h"
#include "engine/util/error.h"
#include "tests/support/model_sizes.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

/// `kvzip` as built from `spec`, recording the passes it asks for and the scoring-pass steps of
/// layer 0 (pass index, tokens, first position).
class Recorder : public WrappedPolicy {
 public:
  explicit Recorder(const std::string& spec) : WrappedPolicy(make_policy(PolicySpec::parse(spec, 0))) {}
  std::vector<std::vector<int32_t>> scoring_passes(const ScoringPassRequest& r) override {
    auto p = inner_->scoring_passes(r);
    passes.insert(passes.end(), p.begin(), p.end());
    return p;
  }
  void on_layer_step(LayerStep& st) override {
    if (st.scoring_pass >= 0 && st.layer == 0) steps.push_back({st.scoring_pass, st.n_new, st.seq_len - st.n_new});
    inner_->on_layer_step(st);
  }
  std::vector<std::vector<int32_t>> passes;
  struct Step {
    int pass, n;
    int64_t start;
  };
  std::vector<Step> steps;
};

std::shared_ptr<const Model> gqa_model() {
  return Model::random(
      test::resized(
          model_shape("qwen3-0.6b"),
          {.vocab = 256, .hidden = 64, .intermediate = 128, .layers = 2, .heads = 8, .kv_heads = 2, .head_dim = 16}),
      45);
}

std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 20 + (i * 37) % 230;
  return p;
}

ScoringPrompts pieces() {
  ScoringPrompts p;
  p.repeat = {7, 8, 9};
  p.repeat_part = {10, 11};
  p.suffix = {12};
  p.prefix = 2;
  return p;
}

TEST(PolicyKvzip, PassesAreKvpressChunksAfterThePrompt) {
  const auto prompt = prompt_of(48);
  EngineOptions eo;
  eo.prefill_chunk = 7;  // the prompt in 7 steps; each pass is one step whatever the chunk
  eo.scoring_prompts = pieces();
  auto rec = std::make_unique<Recorder>("kvzip:ratio=0.5,chunk_size=16");
  Recorder* r = rec.get();
  Engine e(gqa_model(), eo, std::move(rec));
  e.score(prompt, {5});
  // Context [2, 48) in chunks [2, 18), [18, 34), [34, 48).
  auto ids = [&](int64_t a, int64_t b) { return std::vector<int32_t>(prompt.begin() + a, prompt.begin() + b); };
  std::vector<std::vector<int32_t>> want(3);
  want[0] = {7, 8, 9, 12};
  for (int32_t t : ids(2, 18)) want[0].push_back(t);
  want[1] = {10, 11};
  for (int32_t t : ids(10, 18)) want[1].push_back(t);
  want[1].push_back(12);
  for (int32_t t : ids(18, 34)) want[1].push_back(t);
  want[2] = {10, 11};
  for (int32_t t : ids(26, 34)) want[2].push_back(t);
  want[2].push_back(12);
  for (int32_t t : ids(34, 48)) want[2].push_back(t);
  EXPECT_EQ(r->passes, want);
  ASSERT_EQ(r->steps.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(r->steps[k].pass, k);
    EXPECT_EQ(r->steps[k].n, static_cast<int>(want[k].size()));
    EXPECT_EQ(r->steps[k].start, 48);  // every pass starts right after the prompt (rolled back between)
  }
}

TEST(PolicyKvzip, RollbackLeavesTheFullCachesLogits) {
  const auto m = gqa_model();
  const auto prompt = prompt_of(48);
  const std::vector<int32_t> forced = {5, 6, 7, 8};
  EngineOptions eo;
  eo.prefill_chunk = 16;
  eo.scoring_prompts = pieces();
  GenerationResult full_stats, kvzip_stats;
  Engine full(m, eo, nullptr);
  const std::vector<float> want = full.score(prompt, forced, &full_stats);
  // 2 layers · 2 kv heads · 48 tokens = 192 entries: ⌊192 · 0.001⌋ = 0 evicted, but the passes run.
  auto rec = std::make_unique<Recorder>("kvzip:ratio=0.999,chunk_size=16");
  Recorder* r = rec.get();
  Engine e(m, eo, std::move(rec));
  const std::vector<float> got = e.score(prompt, forced, &kvzip_stats);
  EXPECT_EQ(r->passes.size(), 3u);
  EXPECT_EQ(got, want) << "the scoring passes left a trace in the cache";
  EXPECT_EQ(kvzip_stats.evictions, 0);
  EXPECT_GT(kvzip_stats.kv_bytes_peak, full_stats.kv_bytes_peak) << "a pass's pages count toward the peak";
}

TEST(PolicyKvzip, OneCutOverAllLayersKeepsTheSinks) {
  const auto m = gqa_model();
  const auto prompt = prompt_of(48);
  for (const char* spec : {"kvzip:ratio=0.25", "kvzip:ratio=0.25,layerwise=true"}) {
    SCOPED_TRACE(spec);
    EngineOptions eo;
    eo.prefill_chunk = 48;
    eo.scoring_prompts = pieces();
    Engine e(m, eo, make_policy(PolicySpec::parse(spec, 0)));
    int64_t total = 0;
    std::vector<int64_t> per_layer(2, 0);
    bool sinks = true;
    e.on_step = [&](const KVCache& c, SeqId seq) {
      total = 0;
      per_layer.assign(2, 0);
      sinks = true;
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) {
          total += c.length(seq, l, h);
          per_layer[l] += c.length(seq, l, h);
          for (int32_t i = 0; i < 4; ++i) sinks = sinks && c.position(seq, l, h, i) == i;
        }
    };
    e.score(prompt, {});
    EXPECT_EQ(total, 192 - static_cast<int64_t>(192 * 0.75));
    if (std::string(spec).find("layerwise") != std::string::npos) {
      EXPECT_EQ(per_layer[0], 96 - 72);
      EXPECT_EQ(per_layer[1], 96 - 72);
    }
    EXPECT_TRUE(sinks) << "the first 4 positions must stay in every head";
  }
}

TEST(PolicyKvzip, RefusesACutWhileDecodingAndBadParameters) {
  EXPECT_THROW((void)make_policy(PolicySpec::parse("kvzip:ratio=0.5,compress=chunked", 0)), Error);
  EXPECT_THROW((void)make_policy(PolicySpec::parse("kvzip:ratio=1.5", 0)), Error);
  EXPECT_THROW((void)make_policy(PolicySpec::parse("kvzip:ratio=0.5,chunk_size=0", 0)), Error);
  EXPECT_THROW((void)make_policy(PolicySpec::parse("kvzip:ratio=0.5,n_sink=4", 0)), Error);
}

}  // namespace
}  // namespace kvb
