// KV cache: paging, ragged per-head compaction, page reuse and byte accounting.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "engine/kv/kv_cache.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

KVCacheConfig cfg(int page = 4) {
  KVCacheConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 3;
  c.head_dim = 8;
  c.page_size = page;
  c.num_scalars = 2;
  return c;
}

void fill(KVCache& c, SeqId s, int n) {
  std::vector<float> k(8), v(8);
  for (int t = 0; t < n; ++t)
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 3; ++h) {
        for (int d = 0; d < 8; ++d) {
          k[d] = 1000.0f * l + 100.0f * h + t + 0.01f * d;
          v[d] = -k[d];
        }
        c.append(s, l, h, k.data(), v.data(), t);
        *c.scalars(s, l, h, t) = static_cast<float>(t);
      }
}

TEST(KVCache, AppendAndReadBackAcrossPages) {
  KVCache c(cfg());
  SeqId s = c.add_sequence();
  fill(c, s, 10);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 3; ++h) {
      ASSERT_EQ(c.length(s, l, h), 10);
      for (int t = 0; t < 10; ++t) {
        EXPECT_EQ(c.key(s, l, h, t)[3], 1000.0f * l + 100.0f * h + t + 0.03f);
        EXPECT_EQ(c.value(s, l, h, t)[0], -(1000.0f * l + 100.0f * h + t));
        EXPECT_EQ(c.position(s, l, h, t), t);
      }
    }
  // 10 tokens in pages of 4 -> 3 pages per head, 6 heads.
  EXPECT_EQ(c.pages_in_use(), 18);
  EXPECT_EQ(c.bytes(s), 18 * c.page_bytes());
  EXPECT_EQ(c.page_bytes(), (4 * 8 * 2 + 4 + 4 * 2) * sizeof(float));
  EXPECT_EQ(c.token_bytes(s), 60 * 2 * 8 * sizeof(float));
}

TEST(KVCache, RaggedCompactionKeepsOrderAndFreesPages) {
  KVCache c(cfg());
  SeqId s = c.add_sequence();
  fill(c, s, 10);
  std::vector<int32_t> keep0 = {0, 3, 4, 9};  // head (0,0): 4 tokens -> 1 page
  std::vector<int32_t> keep1 = {1, 2, 5, 6, 7, 8};  // head (0,1): 6 tokens -> 2 pages
  EXPECT_EQ(c.compact(s, 0, 0, keep0), 6);
  EXPECT_EQ(c.compact(s, 0, 1, keep1), 4);
  EXPECT_EQ(c.length(s, 0, 0), 4);
  EXPECT_EQ(c.length(s, 0, 1), 6);
  EXPECT_EQ(c.length(s, 0, 2), 10);
  for (size_t j = 0; j < keep0.size(); ++j) {
    EXPECT_EQ(c.position(s, 0, 0, j), keep0[j]);
    EXPECT_EQ(c.key(s, 0, 0, j)[0], float(keep0[j]));
    EXPECT_EQ(c.value(s, 0, 0, j)[7], -(keep0[j] + 0.07f));
    EXPECT_EQ(*c.scalars(s, 0, 0, j), float(keep0[j]));
  }
  for (size_t j = 0; j < keep1.size(); ++j) EXPECT_EQ(c.key(s, 0, 1, j)[0], 100.0f + keep1[j]);
  EXPECT_EQ(c.pages_in_use(), 18 - 2 - 1);
  EXPECT_EQ(c.evictions(s), 10);
  EXPECT_EQ(c.peak_bytes(s), 18 * c.page_bytes());
  EXPECT_EQ(c.bytes(s), 15 * c.page_bytes());
  // Freed pages are reused by the next allocation, not newly allocated.
  const int64_t allocated = c.pages_allocated();
  SeqId s2 = c.add_sequence();
  fill(c, s2, 1);
  EXPECT_EQ(c.pages_allocated(), allocated + 3);  // 6 heads need 6 pages, 3 were free
  // Appending after compaction continues at the end.
  std::vector<float> k(8, 7.0f), v(8, 8.0f);
  c.append(s, 0, 0, k.data(), v.data(), 10);
  EXPECT_EQ(c.length(s, 0, 0), 5);
  EXPECT_EQ(c.position(s, 0, 0, 4), 10);
  EXPECT_EQ(c.key(s, 0, 0, 3)[0], 9.0f);
}

TEST(KVCache, RejectsBadKeepSets) {
  KVCache c(cfg());
  SeqId s = c.add_sequence();
  fill(c, s, 5);
  std::vector<int32_t> unsorted = {2, 1}, dup = {1, 1}, oob = {0, 5};
  EXPECT_THROW(c.compact(s, 0, 0, unsorted), Error);
  EXPECT_THROW(c.compact(s, 0, 0, dup), Error);
  EXPECT_THROW(c.compact(s, 0, 0, oob), Error);
  EXPECT_EQ(c.length(s, 0, 0), 5);
}

TEST(KVCache, RemoveSequenceReturnsEveryPageAndPoolLimitIsAnError) {
  KVCacheConfig k = cfg();
  k.max_pages = 6;
  KVCache c(k);
  SeqId s = c.add_sequence();
  fill(c, s, 4);
  EXPECT_EQ(c.pages_in_use(), 6);
  EXPECT_THROW(fill(c, s, 1), Error);
  c.remove_sequence(s);
  EXPECT_EQ(c.pages_in_use(), 0);
  EXPECT_EQ(c.peak_bytes_total(), 6 * c.page_bytes());
}

TEST(KVCache, RandomCompactionsMatchAVectorModel) {
  std::mt19937 rng(3);
  KVCache c(cfg(3));
  SeqId s = c.add_sequence();
  std::vector<std::vector<int>> model(6);  // positions per head
  std::vector<float> k(8), v(8);
  int next = 0;
  for (int round = 0; round < 50; ++round) {
    int add = rng() % 7;
    for (int i = 0; i < add; ++i, ++next)
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 3; ++h) {
          std::fill(k.begin(), k.end(), float(next));
          c.append(s, l, h, k.data(), v.data(), next);
          model[l * 3 + h].push_back(next);
        }
    int l = rng() % 2, h = rng() % 3;
    auto& m = model[l * 3 + h];
    std::vector<int32_t> keep;
    std::vector<int> kept;
    for (size_t i = 0; i < m.size(); ++i)
      if (rng() % 3) {
        keep.push_back(i);
        kept.push_back(m[i]);
      }
    c.compact(s, l, h, keep);
    m = kept;
    for (int L = 0; L < 2; ++L)
      for (int H = 0; H < 3; ++H) {
        const auto& mm = model[L * 3 + H];
        ASSERT_EQ(c.length(s, L, H), (int)mm.size());
        for (size_t i = 0; i < mm.size(); ++i) {
          ASSERT_EQ(c.position(s, L, H, i), mm[i]);
          ASSERT_EQ(c.key(s, L, H, i)[5], float(mm[i]));
        }
      }
  }
  int64_t pages = 0;
  for (const auto& m : model) pages += (m.size() + 2) / 3;
  EXPECT_EQ(c.pages_in_use(), pages);
}

}  // namespace
}  // namespace kvb

namespace kvb {
namespace {

// A backend that keeps K/V elsewhere (CUDA) appends metadata only: positions, lengths, scalars
// and compaction work as with a payload.
TEST(KVCache, MetadataOnlyAppendsKeepPositionsAndCompact) {
  KVCache c(cfg(4));
  const SeqId s = c.add_sequence();
  for (int t = 0; t < 10; ++t) {
    c.append(s, 1, 2, nullptr, nullptr, 100 + t);
    *c.scalars(s, 1, 2, t) = static_cast<float>(t);
  }
  EXPECT_EQ(c.length(s, 1, 2), 10);
  EXPECT_EQ(c.position(s, 1, 2, 9), 109);
  EXPECT_EQ(c.compact(s, 1, 2, std::vector<int32_t>{0, 3, 9}), 7);
  EXPECT_EQ(c.position(s, 1, 2, 1), 103);
  EXPECT_EQ(*c.scalars(s, 1, 2, 2), 9.0f);
  EXPECT_EQ(c.pages(s, 1, 2).size(), 1u);
}

}  // namespace
}  // namespace kvb
