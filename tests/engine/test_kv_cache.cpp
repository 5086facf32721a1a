// KV cache: paging, ragged per-head compaction, page reuse and byte accounting; the split of page
// metadata from K/V payload (a device-held payload keeps no K/V bytes on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/backend/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/policies/policy.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

KVCacheConfig cfg(int page = 4) { return KVCacheConfig(2, 3, 8, page, /*num_scalars=*/2); }

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
  std::vector<int32_t> keep0 = {0, 3, 4, 9};        // head (0,0): 4 tokens -> 1 page
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

namespace kvb {
namespace {

// The CUDA backend's cache (engine/backend/cuda): every K/V row lives in the device pool, so the
// cache is built with a device-held payload and appends metadata only. Driven through the same
// appends, compactions, rollback and removal as a host-payload cache, it must hold 0 host K/V
// bytes throughout while its page tables, positions, scalars and byte accounting equal the host
// cache's exactly (the accounting is backend-independent: results do not depend on the backend).
TEST(KVCachePayload, DeviceHeldPayloadHoldsNoHostKvAndMatchesTheHostCacheMetadata) {
  KVCacheConfig hc = cfg(4), dc = cfg(4);
  dc.payload = KVPayloadKind::kDeviceHeld;
  KVCache host(hc), dev(dc);
  EXPECT_TRUE(host.host_kv());
  EXPECT_FALSE(dev.host_kv());
  EXPECT_EQ(dev.payload().kind(), KVPayloadKind::kDeviceHeld);
  std::mt19937 rng(11);
  std::vector<float> k(8), v(8);
  std::vector<SeqId> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(host.add_sequence());
    ASSERT_EQ(dev.add_sequence(), seqs.back());
  }
  std::vector<int32_t> next(3, 0);  // next position per sequence
  auto same = [&](const char* when) {
    SCOPED_TRACE(when);
    EXPECT_EQ(dev.host_payload_bytes(), 0u);
    EXPECT_EQ(dev.pages_in_use(), host.pages_in_use());
    EXPECT_EQ(dev.pages_allocated(), host.pages_allocated());
    EXPECT_EQ(dev.bytes_total(), host.bytes_total());
    EXPECT_EQ(dev.peak_bytes_total(), host.peak_bytes_total());
    EXPECT_EQ(dev.host_metadata_bytes(), host.host_metadata_bytes());
    EXPECT_EQ(dev.page_list_shrinks(), host.page_list_shrinks());
    for (SeqId s : seqs) {
      if (!host.has_sequence(s)) {
        EXPECT_FALSE(dev.has_sequence(s));
        continue;
      }
      EXPECT_EQ(dev.bytes(s), host.bytes(s));
      EXPECT_EQ(dev.peak_bytes(s), host.peak_bytes(s));
      EXPECT_EQ(dev.token_bytes(s), host.token_bytes(s));
      EXPECT_EQ(dev.evictions(s), host.evictions(s));
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 3; ++h) {
          ASSERT_EQ(dev.pages(s, l, h), host.pages(s, l, h));  // same ids: the device pool's addresses
          ASSERT_EQ(dev.length(s, l, h), host.length(s, l, h));
          for (int32_t i = 0; i < host.length(s, l, h); ++i) {
            ASSERT_EQ(dev.position(s, l, h, i), host.position(s, l, h, i));
            ASSERT_EQ(dev.scalars(s, l, h, i)[0], host.scalars(s, l, h, i)[0]);
            ASSERT_EQ(dev.scalars(s, l, h, i)[1], host.scalars(s, l, h, i)[1]);
          }
        }
    }
  };
  for (int round = 0; round < 40; ++round) {
    const SeqId s = seqs[rng() % 3];
    if (!host.has_sequence(s)) continue;
    const int add = 1 + static_cast<int>(rng() % 9);
    for (int t = 0; t < add; ++t, ++next[s])
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 3; ++h) {
          std::fill(k.begin(), k.end(), static_cast<float>(next[s]));
          const int32_t i = host.append(s, l, h, k.data(), v.data(), next[s]);
          ASSERT_EQ(dev.append(s, l, h, nullptr, nullptr, next[s]), i);
          *host.scalars(s, l, h, i) = *dev.scalars(s, l, h, i) = 0.5f * next[s];
          host.scalars(s, l, h, i)[1] = dev.scalars(s, l, h, i)[1] = -1.0f * l - h;
        }
    const int l = static_cast<int>(rng() % 2), h = static_cast<int>(rng() % 3);
    std::vector<int32_t> keep;
    for (int32_t i = 0; i < host.length(s, l, h); ++i)
      if (rng() % 3) keep.push_back(i);
    ASSERT_EQ(dev.compact(s, l, h, keep), host.compact(s, l, h, keep));
    // The host cache kept the K rows of the tokens whose positions both caches report.
    for (int32_t i = 0; i < host.length(s, l, h); ++i)
      ASSERT_EQ(host.key(s, l, h, i)[2], static_cast<float>(dev.position(s, l, h, i)));
    if (round % 10 == 9) {
      const int32_t cut = std::max(0, next[s] - 3);
      ASSERT_EQ(dev.truncate_from(s, cut), host.truncate_from(s, cut));
      next[s] = cut;
    }
    same("after a round");
  }
  EXPECT_GT(host.host_payload_bytes(), 0u);
  dev.remove_sequence(seqs[1]);
  host.remove_sequence(seqs[1]);
  same("after remove_sequence");
}

// Reading or writing K/V rows on the host of a device-held cache is an error that names the
// missing declaration, never a read of memory that holds no keys.
TEST(KVCachePayload, HostReadsAndWritesOfDeviceHeldRowsAreErrors) {
  KVCacheConfig c = cfg(4);
  c.payload = KVPayloadKind::kDeviceHeld;
  KVCache dev(c);
  const SeqId s = dev.add_sequence();
  std::vector<float> k(8, 1.0f);
  dev.append(s, 0, 0, nullptr, nullptr, 0);
  const std::string e1 = test::error_of([&] { dev.key(s, 0, 0, 0); });
  EXPECT_NE(e1.find("PolicyNeeds::host_kv"), std::string::npos) << e1;
  EXPECT_NE(test::error_of([&] { dev.value(s, 0, 0, 0); }).find("device-held"), std::string::npos);
  EXPECT_NE(test::error_of([&] { dev.page_keys(dev.pages(s, 0, 0)[0]); }).find("device-held"), std::string::npos);
  EXPECT_NE(test::error_of([&] { dev.append(s, 0, 0, k.data(), nullptr, 1); }).find("device-held"), std::string::npos);
  EXPECT_EQ(dev.length(s, 0, 0), 1);  // the rejected append left the head unchanged
  EXPECT_EQ(dev.host_payload_bytes(), 0u);
}

// The host payload allocates whole chunks of pages as the pool grows, never per token, and a
// freed page's rows are reused with the page id.
TEST(KVCachePayload, HostPayloadBytesFollowThePoolInChunks) {
  KVCache c(cfg(4));
  EXPECT_EQ(c.host_payload_bytes(), 0u);
  const SeqId s = c.add_sequence();
  fill(c, s, 1);  // 6 pages
  const size_t chunk = static_cast<size_t>(HostKVPayload::kPagesPerChunk) * 2 * 4 * 8 * sizeof(float);
  EXPECT_EQ(c.host_payload_bytes(), chunk);
  fill(c, s, 4 * 43);  // 44 pages per head would be 264 pages: a second chunk
  EXPECT_EQ(c.pages_allocated(), 6 * 44);
  EXPECT_EQ(c.host_payload_bytes(), 2 * chunk);
}

// Which store the engine builds: host rows for the CPU backends and for a policy that reads
// cached keys/values on the host; device-held (0 host K/V bytes) for `--backend cuda` with the
// full cache and every policy that does not. Checked over the whole registry against each
// policy's own declaration.
TEST(KVCachePayload, CudaCachesHoldNoHostKvUnlessThePolicyReadsKeysOnTheHost) {
  EXPECT_EQ(kv_payload_for("cuda", PolicyNeeds{}), KVPayloadKind::kDeviceHeld);
  EXPECT_EQ(kv_payload_for("cpu", PolicyNeeds{}), KVPayloadKind::kHost);
  EXPECT_EQ(kv_payload_for("cpu-bf16", PolicyNeeds{}), KVPayloadKind::kHost);
  int device_held = 0, host = 0;
  for (const auto& info : policy_registry()) {
    SCOPED_TRACE(info.name);
    const PolicySpec sp = info.test_spec(info.test_budget(256));
    const PolicyNeeds n = make_policy(sp)->needs();
    EXPECT_EQ(kv_payload_for("cpu", n), KVPayloadKind::kHost);
    const KVPayloadKind kind = kv_payload_for("cuda", n);
    EXPECT_EQ(kind, n.host_kv ? KVPayloadKind::kHost : KVPayloadKind::kDeviceHeld);
    KVCacheConfig c = cfg(4);
    c.payload = kind;
    c.num_scalars = n.num_scalars;
    KVCache cache(c);
    const SeqId s = cache.add_sequence();
    for (int t = 0; t < 9; ++t)
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 3; ++h) cache.append(s, l, h, nullptr, nullptr, t);
    EXPECT_EQ(cache.host_payload_bytes() == 0, !n.host_kv);
    EXPECT_EQ(cache.bytes(s), 18 * cache.page_bytes());  // the accounted KV bytes stay
    (n.host_kv ? host : device_held)++;
  }
  EXPECT_GT(device_held, 0);
  EXPECT_GT(host, 0);
}

}  // namespace
}  // namespace kvb
