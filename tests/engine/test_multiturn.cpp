// Multi-turn requests (SCBench's shared-context protocol): KVCache::truncate_from drops exactly
// the tokens at or after a position; an engine follow-up turn equals an independent reference
// (a single-turn request whose prompt is the first prompt plus the appended tokens: with the
// full cache, dropping the generated KV and appending is the same sequence); a compressing
// policy keeps its evictions across turns; a turn the context cannot hold ends with kContext.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "tests/support/stories.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

KVCacheConfig small_cfg() { return KVCacheConfig(2, 3, 4, /*page_size=*/4, /*num_scalars=*/1); }

TEST(KVCacheTruncate, DropsTokensFromAPositionOnKeepsEvictionsAndFreesPages) {
  KVCache c(small_cfg());
  SeqId s = c.add_sequence();
  std::vector<float> k(4, 1.0f), v(4, 2.0f);
  for (int t = 0; t < 21; ++t)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 3; ++h) c.append(s, l, h, k.data(), v.data(), t);
  // Ragged heads: head (0, 1) keeps the even positions, head (1, 2) the first 7 and the last 3.
  std::vector<int32_t> even, ends;
  for (int i = 0; i < 21; i += 2) even.push_back(i);
  for (int i = 0; i < 7; ++i) ends.push_back(i);
  for (int i = 18; i < 21; ++i) ends.push_back(i);
  c.compact(s, 0, 1, even);
  c.compact(s, 1, 2, ends);
  const int64_t evicted = c.evictions(s);
  ASSERT_EQ(evicted, (21 - 11) + (21 - 10));
  const int64_t pages_before = c.pages_in_use();

  const int64_t dropped = c.truncate_from(s, 12);
  // Independent count: tokens with position >= 12 in each head.
  int64_t expect_dropped = 0;
  expect_dropped += 4 * (21 - 12);                   // the four untouched heads
  for (int32_t p : even) expect_dropped += p >= 12;  // (0, 1)
  for (int32_t p : ends) expect_dropped += p >= 12;  // (1, 2)
  EXPECT_EQ(dropped, expect_dropped);
  EXPECT_EQ(c.evictions(s), evicted);  // a rollback, not an eviction
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h)
      for (int32_t i = 0; i < c.length(s, l, h); ++i) EXPECT_LT(c.position(s, l, h, i), 12);
  EXPECT_EQ(c.length(s, 0, 0), 12);
  EXPECT_EQ(c.length(s, 0, 1), 6);  // 0, 2, ..., 10
  EXPECT_EQ(c.length(s, 1, 2), 7);
  EXPECT_EQ(c.token_bytes(s), static_cast<size_t>(4 * 12 + 6 + 7) * c.kv_bytes_per_token());
  // Pages: ceil(len / 4) per head.
  const int64_t pages_after = 4 * 3 + 2 + 2;
  EXPECT_EQ(c.pages_in_use(), pages_after);
  EXPECT_LT(pages_after, pages_before);
  EXPECT_EQ(c.bytes(s), static_cast<size_t>(pages_after) * c.page_bytes());
  // Appending again continues after the kept tokens.
  c.append(s, 0, 1, k.data(), v.data(), 12);
  EXPECT_EQ(c.position(s, 0, 1, 6), 12);
  EXPECT_EQ(c.truncate_from(s, 100), 0);
}

class MultiTurn : public test::StoriesTest {
 protected:
  static std::vector<int32_t> tokens(int n, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<int32_t> t{1};  // BOS
    for (int i = 1; i < n; ++i) t.push_back(static_cast<int32_t>(3 + g() % 500));
    return t;
  }
};

TEST_F(MultiTurn, FullCacheFollowupEqualsTheConcatenatedPrompt) {
  const auto p = tokens(40, 1), a1 = tokens(25, 2), a2 = tokens(9, 3);
  GenerationRequest r;
  r.prompt = p;
  r.max_new_tokens = 20;
  r.followups = {{{a1.begin() + 1, a1.end()}, 15, {}}, {{a2.begin() + 1, a2.end()}, 12, {}}};
  Engine e(model_, {}, nullptr);
  auto res = e.generate({r}, nullptr);
  ASSERT_EQ(res[0].followups.size(), 2u);

  // The reference: three single-turn requests on a fresh engine, prompts p, p+a1, p+a1+a2.
  std::vector<int32_t> p1 = p, p2 = p;
  p1.insert(p1.end(), a1.begin() + 1, a1.end());
  p2 = p1;
  p2.insert(p2.end(), a2.begin() + 1, a2.end());
  GenerationRequest q0, q1, q2;
  q0.prompt = p;
  q0.max_new_tokens = 20;
  q1.prompt = p1;
  q1.max_new_tokens = 15;
  q2.prompt = p2;
  q2.max_new_tokens = 12;
  Engine ref(model_, {}, nullptr);
  auto want = ref.generate({q0, q1, q2}, nullptr);
  EXPECT_EQ(res[0].tokens, want[0].tokens);
  EXPECT_EQ(res[0].followups[0].tokens, want[1].tokens);
  EXPECT_EQ(res[0].followups[1].tokens, want[2].tokens);
  EXPECT_EQ(res[0].followups[0].prompt_tokens, 24);
  EXPECT_EQ(res[0].followups[1].prompt_tokens, 8);
  for (const auto& t : res[0].followups) EXPECT_EQ(t.finish, FinishReason::kLength);
  // KV at the end of the last turn: the three inputs and the last turn's fed tokens, no more.
  EXPECT_EQ(res[0].followups[1].kv_bytes_final, want[2].kv_bytes_final);
  EXPECT_EQ(e.cache().pages_in_use(), 0);
}

TEST_F(MultiTurn, BatchedAndChunkedTurnsEqualOneAtATime) {
  // Continuous batching: sequences in different turns share decode steps and prefill chunks.
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.prompt = tokens(30 + 7 * i, 10 + i);
    r.max_new_tokens = 5 + 6 * i;
    auto a = tokens(12 + 3 * i, 20 + i);
    r.followups = {{{a.begin() + 1, a.end()}, 9 - i, {}}};
    reqs.push_back(r);
  }
  EngineOptions o;
  o.prefill_chunk = 7;
  o.max_batch = 2;
  Engine batched(model_, o, nullptr);
  auto got = batched.generate(reqs, nullptr);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Engine one(model_, {}, nullptr);
    auto want = one.generate({reqs[i]}, nullptr);
    EXPECT_EQ(got[i].tokens, want[0].tokens) << i;
    ASSERT_EQ(got[i].followups.size(), 1u);
    EXPECT_EQ(got[i].followups[0].tokens, want[0].followups[0].tokens) << i;
  }
}

TEST_F(MultiTurn, CompressionPersistsAcrossTurnsAndStaysWithinBounds) {
  const int64_t budget = 16, buffer = 8;
  auto make = [&] {
    return make_policy(PolicySpec::parse("snapkv:buffer=" + std::to_string(buffer) + ",window=4", budget));
  };
  GenerationRequest r;
  r.prompt = tokens(60, 5);
  r.max_new_tokens = 12;
  r.sampling.temperature = 0.8f;
  r.seed = 9;
  auto a = tokens(30, 6);
  r.followups = {{{a.begin() + 1, a.end()}, 12, {}}};
  Engine e(model_, {}, make());
  int64_t worst = 0;
  e.on_step = [&](const KVCache& c, SeqId s) {
    for (int l = 0; l < c.config().num_layers; ++l)
      for (int h = 0; h < c.config().num_kv_heads; ++h) worst = std::max<int64_t>(worst, c.length(s, l, h));
  };
  auto res = e.generate({r}, nullptr);
  ASSERT_EQ(res[0].followups.size(), 1u);
  EXPECT_EQ(res[0].followups[0].tokens.size(), 12u);
  // The appended 29 tokens are prefilled onto the compressed cache, then compressed again.
  EXPECT_LE(worst, budget + buffer + 29);
  EXPECT_GT(res[0].followups[0].evictions, res[0].evictions);  // evictions accumulate over turns
  EXPECT_LE(res[0].followups[0].kv_bytes_final, res[0].kv_bytes_peak);
  // Deterministic: the same seed gives the same turns.
  Engine e2(model_, {}, make());
  auto again = e2.generate({r}, nullptr);
  EXPECT_EQ(again[0].tokens, res[0].tokens);
  EXPECT_EQ(again[0].followups[0].tokens, res[0].followups[0].tokens);
}

TEST_F(MultiTurn, ATurnTheContextCannotHoldEndsWithContext) {
  const int64_t ctx = model_->config().max_position_embeddings;  // 512
  GenerationRequest r;
  r.prompt = tokens(100, 7);
  r.max_new_tokens = 4;
  auto big = tokens(static_cast<int>(ctx), 8);
  auto small = tokens(5, 9);
  r.followups = {{{big.begin() + 1, big.end()}, 4, {}}, {{small.begin() + 1, small.end()}, 4, {}}};
  Engine e(model_, {}, nullptr);
  auto res = e.generate({r}, nullptr);
  EXPECT_EQ(res[0].tokens.size(), 4u);
  ASSERT_EQ(res[0].followups.size(), 2u);
  EXPECT_EQ(res[0].followups[0].finish, FinishReason::kContext);
  EXPECT_TRUE(res[0].followups[0].tokens.empty());
  EXPECT_EQ(res[0].followups[1].finish, FinishReason::kContext);
  EXPECT_EQ(e.cache().pages_in_use(), 0);
}

TEST_F(MultiTurn, QueryAgnosticContextIsCompressedBeforeTheQuery) {
  GenerationRequest r;
  r.prompt = tokens(120, 11);
  r.max_new_tokens = 10;
  // Full cache: prefilling the context as its own prompt changes nothing.
  GenerationRequest split = r;
  split.context_tokens = 90;
  Engine e(model_, {}, nullptr);
  auto whole = e.generate({r}, nullptr);
  auto parts = e.generate({split}, nullptr);
  EXPECT_EQ(parts[0].tokens, whole[0].tokens);
  EXPECT_EQ(parts[0].prompt_tokens, 120);

  // SnapKV at budget 32: the context is cut to the budget before any query token is prefilled.
  Engine s(model_, {}, make_policy(PolicySpec::parse("snapkv:buffer=8,window=4", 32)));
  std::vector<int32_t> first_step;
  s.on_step = [&](const KVCache& c, SeqId q) {
    if (!first_step.empty()) return;
    for (int l = 0; l < c.config().num_layers; ++l)
      for (int h = 0; h < c.config().num_kv_heads; ++h) first_step.push_back(c.length(q, l, h));
  };
  auto got = s.generate({split}, nullptr);
  ASSERT_FALSE(first_step.empty());
  for (int32_t len : first_step) EXPECT_EQ(len, 32);  // 90 context tokens compressed to 32
  EXPECT_EQ(got[0].tokens.size(), 10u);
  EXPECT_GE(got[0].evictions, (90 - 32) * static_cast<int64_t>(first_step.size()));
}

}  // namespace
}  // namespace kvb
