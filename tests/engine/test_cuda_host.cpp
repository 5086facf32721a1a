// Host-side logic of the CUDA backend (no GPU needed): the attention work plan (row chunks,
// causal key prefixes, split-KV ranges), the device compaction pairs against KVCache::compact
// itself, and backend selection errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/plan.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

using cuda::AttnPlan;
using cuda::AttnUnit;

// Independent reference for a chunk's visible keys: simulate the head's key positions (older keys
// at increasing positions below start_pos with random gaps — evictions — then the n new tokens at
// start_pos..start_pos+n−1) and count keys with position ≤ the chunk's last query position.
int32_t visible_keys(int32_t L, int32_t n, int32_t last_token, std::mt19937& rng) {
  const int32_t old = L - n;
  std::vector<int32_t> pos;
  int32_t p = 0;
  for (int32_t i = 0; i < old; ++i) {
    p += 1 + static_cast<int32_t>(rng() % 3);
    pos.push_back(p);
  }
  const int32_t start = p + 1 + static_cast<int32_t>(rng() % 5);
  for (int32_t i = 0; i < n; ++i) pos.push_back(start + i);
  const int32_t qpos = start + last_token;
  return static_cast<int32_t>(std::count_if(pos.begin(), pos.end(), [&](int32_t x) { return x <= qpos; }));
}

// A random batch for the planner: B items of n[b] new tokens (1, or 1 + [0, 40) when `prefill`),
// and per (item, kv head) a cache length n[b] + [0, spread). Draws n[b], then its heads' lengths,
// item by item.
struct RandomBatch {
  std::vector<int32_t> n, len;  // [B], [B * Hkv]
};
RandomBatch random_batch(std::mt19937& rng, int B, int Hkv, bool prefill, int32_t spread) {
  RandomBatch r{std::vector<int32_t>(B), std::vector<int32_t>(static_cast<size_t>(B) * Hkv)};
  for (int b = 0; b < B; ++b) {
    r.n[b] = prefill ? 1 + static_cast<int32_t>(rng() % 40) : 1;
    for (int h = 0; h < Hkv; ++h) r.len[b * Hkv + h] = r.n[b] + static_cast<int32_t>(rng() % spread);
  }
  return r;
}

TEST(CudaPlan, CoversEveryRowOnceAndSplitsPartitionTheCausalPrefix) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int Hkv = 1 + static_cast<int>(rng() % 4), G = 1 + static_cast<int>(rng() % 7);
    const int B = 1 + static_cast<int>(rng() % 5);
    const auto [n, len] = random_batch(rng, B, Hkv, trial % 3 == 0, 3000);
    const int64_t target = 1 + static_cast<int64_t>(rng() % 600);
    const AttnPlan p = cuda::plan_attention(n, len, Hkv, G, target, 128);
    ASSERT_EQ(p.split_len % cuda::kAttnTile, 0);
    ASSERT_GE(p.split_len, 128);
    // row coverage and key ranges per (item, head, row0)
    std::map<std::tuple<int, int, int>, std::vector<const AttnUnit*>> chunks;
    std::vector<int> row_hits;
    for (const auto& u : p.units) chunks[{u.item, u.head, u.row0}].push_back(&u);
    std::vector<int32_t> parts;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hkv; ++h) {
        std::vector<int> hits(static_cast<size_t>(n[b]) * G, 0);
        for (auto& [key, us] : chunks) {
          if (std::get<0>(key) != b || std::get<1>(key) != h) continue;
          const AttnUnit& u0 = *us.front();
          ASSERT_LE(u0.nrows, cuda::kAttnRows);
          for (int r = 0; r < u0.nrows; ++r) ++hits[u0.row0 + r];
          // splits: contiguous, disjoint, covering [0, kend)
          std::mt19937 prng(static_cast<uint32_t>(trial * 131 + b * 17 + h));
          const int32_t last_token = (u0.row0 + u0.nrows - 1) / G;
          const int32_t kend = visible_keys(len[b * Hkv + h], n[b], last_token, prng);
          int32_t expect = 0;
          for (const AttnUnit* u : us) {
            EXPECT_EQ(u->nrows, u0.nrows);
            EXPECT_EQ(u->kbeg, expect);
            EXPECT_GT(u->kend, u->kbeg);
            EXPECT_LE(u->kend - u->kbeg, p.split_len);
            expect = u->kend;
            if (us.size() > 1) parts.push_back(u->part);
            else EXPECT_EQ(u->part, -1);
          }
          EXPECT_EQ(expect, kend) << "item " << b << " head " << h << " row0 " << u0.row0;
        }
        for (size_t r = 0; r < hits.size(); ++r) ASSERT_EQ(hits[r], 1) << "row " << r;
      }
    // partial slots are 0..num_parts−1, each used once; groups list exactly the split chunks
    std::sort(parts.begin(), parts.end());
    ASSERT_EQ(static_cast<int32_t>(parts.size()), p.num_parts);
    for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(parts[i], static_cast<int32_t>(i));
    int32_t grouped = 0;
    for (const auto& g : p.groups) {
      ASSERT_GT(g.count, 1);
      for (int s = 0; s < g.count; ++s) EXPECT_GE(p.units[g.first + s].part, 0);
      grouped += g.count;
    }
    EXPECT_EQ(grouped, p.num_parts);
  }
}

TEST(CudaPlan, SplitsLongDecodeHeadsToFillTheDeviceButNotLargePrefills) {
  // One sequence decoding at 32K context, 8 kv heads, G = 4: 8 chunks only, so the planner splits.
  std::vector<int32_t> n{1}, len(8, 32768);
  const AttnPlan d = cuda::plan_attention(n, len, 8, 4, 528);
  EXPECT_EQ(d.split_len, 512);  // ⌈8·32768 / 528⌉ = 497 → next multiple of 64
  EXPECT_EQ(d.units.size(), 8u * 64);
  EXPECT_EQ(d.groups.size(), 8u);
  // A 512-token prefill chunk: 128 row chunks per head already fill the device.
  std::vector<int32_t> n2{512}, len2(8, 4096);
  const AttnPlan pf = cuda::plan_attention(n2, len2, 8, 4, 528);
  EXPECT_EQ(pf.units.size(), 8u * 128);
  EXPECT_TRUE(pf.groups.empty());
}

// Reference combine of split partials in double, as the combine kernel does it, against one
// softmax over the whole range: the split plan must not change the attention output.
TEST(CudaPlan, SplitPartialsCombineToTheUnsplitSoftmax) {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0.0, 3.0);
  std::vector<double> s(3000), v(3000);
  for (auto& x : s) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int32_t> n{1}, len{3000};
  const AttnPlan p = cuda::plan_attention(n, len, 1, 1, 64, 64);
  ASSERT_GT(p.units.size(), 1u);
  double M = -INFINITY, Lsum = 0, O = 0;
  std::vector<std::tuple<double, double, double>> parts;
  for (const auto& u : p.units) {
    double m = -INFINITY, l = 0, o = 0;
    for (int t = u.kbeg; t < u.kend; ++t) m = std::max(m, s[t]);
    for (int t = u.kbeg; t < u.kend; ++t) {
      l += std::exp(s[t] - m);
      o += std::exp(s[t] - m) * v[t];
    }
    parts.emplace_back(m, l, o);
    M = std::max(M, m);
  }
  for (auto& [m, l, o] : parts) {
    Lsum += l * std::exp(m - M);
    O += o * std::exp(m - M);
  }
  double mx = -INFINITY, z = 0, ref = 0;
  for (double x : s) mx = std::max(mx, x);
  for (size_t t = 0; t < s.size(); ++t) {
    z += std::exp(s[t] - mx);
    ref += std::exp(s[t] - mx) * v[t];
  }
  EXPECT_NEAR(O / Lsum, ref / z, 1e-12 * std::max(1.0, std::fabs(ref / z)));
}

TEST(CudaPlan, RejectsInconsistentInput) {
  std::vector<int32_t> n{4}, len{3};
  EXPECT_THROW(cuda::plan_attention(n, len, 1, 1, 10), Error);
  std::vector<int32_t> len2{3, 4};
  EXPECT_THROW(cuda::plan_attention(n, len2, 1, 1, 10), Error);
  std::vector<int32_t> n0{0}, len0{5};
  EXPECT_THROW(cuda::plan_attention(n0, len0, 1, 1, 10), Error);
}

// FlashInfer request arrays: checked by rebuilding each (item, kv head)'s query rows and key count
// from the arrays the way FlashInfer reads them (rows [qo_indptr[r], qo_indptr[r+1]) of the
// [Hkv][T][G][D] packed queries; (pages − 1)·P + last_page_len keys) and comparing with the batch
// itself, for random ragged prefill and decode batches.
TEST(CudaPlan, FlashInferRequestsCoverEachHeadsRowsAndKeys) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    const int B = 1 + static_cast<int>(rng() % 6), Hkv = 1 + static_cast<int>(rng() % 4);
    const int P = trial % 3 == 0 ? 1 : 16;
    const RandomBatch rb = random_batch(rng, B, Hkv, trial % 2 == 0, 100);
    const cuda::FiRequests rq = cuda::fi_requests(rb.n, rb.len, Hkv, P);
    ASSERT_EQ(rq.num_requests, B * Hkv);
    ASSERT_EQ(rq.qo_indptr.size(), static_cast<size_t>(B * Hkv + 1));
    int32_t T = 0;
    for (int32_t x : rb.n) T += x;
    EXPECT_EQ(rq.tokens, T);
    EXPECT_EQ(rq.total_rows, static_cast<int64_t>(T) * Hkv);
    EXPECT_EQ(rq.qo_indptr.front(), 0);
    EXPECT_EQ(rq.qo_indptr.back(), T * Hkv);
    EXPECT_EQ(rq.kv_indptr.front(), 0);
    for (int h = 0; h < Hkv; ++h) {
      int32_t first_token = 0;
      for (int b = 0; b < B; ++b) {
        const int r = h * B + b;
        // Query rows: the item's tokens in kv head h's block of the packed queries.
        EXPECT_EQ(rq.qo_indptr[r], h * T + first_token);
        EXPECT_EQ(rq.qo_indptr[r + 1] - rq.qo_indptr[r], rb.n[b]);
        first_token += rb.n[b];
        // Keys: FlashInfer's length from pages and the last page's fill.
        const int32_t pages = rq.kv_indptr[r + 1] - rq.kv_indptr[r];
        ASSERT_GE(pages, 1);
        ASSERT_GE(rq.last_page_len[r], 1);
        ASSERT_LE(rq.last_page_len[r], P);
        EXPECT_EQ((pages - 1) * P + rq.last_page_len[r], rb.len[b * Hkv + h]);
      }
    }
  }
  std::vector<int32_t> n{3}, short_len{2}, ok_len{3, 4};
  EXPECT_THROW(cuda::fi_requests(n, short_len, 1, 16), Error);  // a head shorter than its new tokens
  EXPECT_THROW(cuda::fi_requests(n, ok_len, 1, 16), Error);     // two lengths for one head
  EXPECT_THROW(cuda::fi_requests(n, std::vector<int32_t>{3}, 1, 0), Error);
  EXPECT_THROW(cuda::fi_requests(std::vector<int32_t>{0}, std::vector<int32_t>{3}, 1, 16), Error);
}

// The device compaction pairs, applied to a slot-indexed pool as gather-then-scatter, must leave
// the pool holding exactly what KVCache::compact leaves in the host cache.
TEST(CudaCompaction, PairsReproduceKVCacheCompact) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 50; ++trial) {
    const KVCacheConfig kc(1, 2, 2, 1 + static_cast<int>(rng() % 8));
    KVCache cache(kc);
    const SeqId a = cache.add_sequence(), b = cache.add_sequence();
    const int32_t L = 1 + static_cast<int32_t>(rng() % 100);
    // interleave two sequences so page ids are not contiguous
    std::map<int64_t, float> pool;  // slot -> key[0]
    for (int32_t i = 0; i < L; ++i)
      for (SeqId s : {a, b}) {
        const float k[2] = {static_cast<float>(s * 1000 + i), 0.0f};
        const int32_t idx = cache.append(s, 0, 1, k, k, i);
        pool[cuda::key_slot(cache.pages(s, 0, 1), idx, kc.page_size)] = k[0];
      }
    std::vector<int32_t> keep;
    for (int32_t i = 0; i < L; ++i)
      if (rng() % 3 != 0) keep.push_back(i);
    std::vector<int64_t> src, dst;
    const std::vector<int32_t> before = cache.pages(a, 0, 1);
    cuda::compaction_pairs(before, L, kc.page_size, keep, src, dst);
    cache.compact(a, 0, 1, keep);
    std::vector<float> gathered;
    for (int64_t sl : src) gathered.push_back(pool.at(sl));
    for (size_t i = 0; i < dst.size(); ++i) pool[dst[i]] = gathered[i];
    ASSERT_EQ(cache.length(a, 0, 1), static_cast<int32_t>(keep.size()));
    for (int32_t j = 0; j < cache.length(a, 0, 1); ++j) {
      EXPECT_EQ(pool.at(cuda::key_slot(cache.pages(a, 0, 1), j, kc.page_size)), cache.key(a, 0, 1, j)[0]);
      EXPECT_EQ(cache.key(a, 0, 1, j)[0], static_cast<float>(keep[j]));
    }
    // the other sequence's slots are untouched
    for (int32_t j = 0; j < L; ++j)
      EXPECT_EQ(pool.at(cuda::key_slot(cache.pages(b, 0, 1), j, kc.page_size)), 1000.0f + j);
  }
}

// A decode CUDA graph launches attention_bound() blocks and lets surplus ones exit: the bound must
// hold for every plan, whatever the lengths, batch, GQA ratio and device size.
TEST(CudaPlan, AttentionBoundCoversEveryPlan) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 400; ++trial) {
    const int Hkv = 1 + static_cast<int>(rng() % 8), G = 1 + static_cast<int>(rng() % 20);
    const int B = 1 + static_cast<int>(rng() % 70);
    const auto [n, len] = random_batch(rng, B, Hkv, trial % 4 == 0, trial % 2 ? 40000 : 300);
    const int64_t target = 1 + static_cast<int64_t>(rng() % 1200);
    const AttnPlan p = cuda::plan_attention(n, len, Hkv, G, target);
    const cuda::AttnBound bound = cuda::attention_bound(n, Hkv, G, target);
    ASSERT_LE(static_cast<int64_t>(p.units.size()), bound.units) << "trial " << trial;
    ASSERT_LE(static_cast<int64_t>(p.num_parts), bound.units);
    ASSERT_LE(static_cast<int64_t>(p.groups.size()), bound.groups);
    // the bound takes no lengths: the same batch shape with other lengths stays within it too
    std::vector<int32_t> other(len.size());
    for (size_t i = 0; i < other.size(); ++i) other[i] = n[i / Hkv] + static_cast<int32_t>(rng() % 100000);
    EXPECT_LE(static_cast<int64_t>(cuda::plan_attention(n, other, Hkv, G, target).units.size()), bound.units);
  }
  std::vector<int32_t> bad{0};
  EXPECT_THROW(cuda::attention_bound(bad, 1, 1, 4), Error);
  EXPECT_THROW(cuda::attention_bound(std::vector<int32_t>{1}, 0, 1, 4), Error);
}

// The device-resident page tables: a "device" array updated only through what the store hands out
// (its writes, or its whole image after a growth) must equal the KVCache's page lists after every
// step of a random workload of appends, the backend's own compactions (reported with shrunk()),
// rollbacks behind the store's back (truncate_from, seen via page_list_shrinks) and sequences
// coming and going, while a steady decode step copies only the new pages.
TEST(CudaPageTables, DeviceImageTracksTheKVCache) {
  std::mt19937 rng(5);
  const KVCacheConfig kc(3, 2, 2, 4);
  KVCache cache(kc);
  cuda::PageTableStore store(kc.num_layers, kc.num_kv_heads);
  std::vector<int32_t> device;
  std::vector<SeqId> live;
  uint64_t seen = cache.page_list_shrinks();
  const float z[2] = {0, 0};
  int64_t steady_writes = 0, steady_steps = 0;
  for (int step = 0; step < 400; ++step) {
    if (live.size() < 2 || rng() % 40 == 0) live.push_back(cache.add_sequence());
    if (live.size() > 3 && rng() % 30 == 0) {
      const size_t i = rng() % live.size();
      cache.remove_sequence(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (rng() % 50 == 0) cache.truncate_from(live[rng() % live.size()], static_cast<int32_t>(rng() % 20));
    // what the backend does at the start of a forward
    store.release_if([&](int32_t s) { return !cache.has_sequence(s); });
    if (cache.page_list_shrinks() != seen) {
      store.invalidate();
      seen = cache.page_list_shrinks();
    }
    std::vector<int64_t> writes;
    bool compacted = false;
    for (SeqId s : live)
      for (int l = 0; l < kc.num_layers; ++l)
        for (int h = 0; h < kc.num_kv_heads; ++h) {
          cache.append(s, l, h, z, z, 1000 + step);
          // the layer's attention syncs the lists first; a policy hook may then compact the head
          store.sync(s, l, h, cache.pages(s, l, h), writes);
          if (rng() % 25 == 0) {  // a policy's keep-set, applied by the backend
            std::vector<int32_t> keep;
            for (int32_t i = 0; i < cache.length(s, l, h); ++i)
              if (rng() % 2) keep.push_back(i);
            const uint64_t before = cache.page_list_shrinks();
            cache.compact(s, l, h, keep);
            if (before == seen) seen = cache.page_list_shrinks();
            store.shrunk(s, l, h, cache.pages(s, l, h).size());
            compacted = true;
          }
        }
    if (store.take_grew()) {
      device = store.image();
    } else {
      ASSERT_EQ(writes.size() % 2, 0u);
      for (size_t i = 0; i < writes.size(); i += 2)
        device.at(static_cast<size_t>(writes[i])) = static_cast<int32_t>(writes[i + 1]);
      if (!compacted && step > 50) {
        steady_writes += static_cast<int64_t>(writes.size() / 2);
        ++steady_steps;
      }
    }
    for (SeqId s : live)
      for (int l = 0; l < kc.num_layers; ++l)
        for (int h = 0; h < kc.num_kv_heads; ++h) {
          const auto& pg = cache.pages(s, l, h);
          const int32_t off = store.offset(s, l, h);
          ASSERT_LE(static_cast<int64_t>(pg.size()), store.capacity());
          for (size_t i = 0; i < pg.size(); ++i)
            ASSERT_EQ(device.at(off + i), pg[i]) << "step " << step << " seq " << s << " layer " << l << " head " << h;
        }
  }
  // a decode step crosses a page boundary once every page_size tokens per head: the writes per
  // step stay near live heads / page_size, nowhere near a full re-upload of every list
  ASSERT_GT(steady_steps, 0);
  EXPECT_LT(static_cast<double>(steady_writes) / steady_steps,
            4.0 * 3 * kc.num_layers * kc.num_kv_heads / kc.page_size + 4);
  EXPECT_THROW(store.offset(999999, 0, 0), Error);
  std::vector<int64_t> w;
  EXPECT_THROW(store.sync(live[0], 3, 0, cache.pages(live[0], 0, 0), w), Error);
  EXPECT_THROW(cuda::PageTableStore(0, 1), Error);
}

TEST(CudaCompaction, RejectsBadKeepSets) {
  std::vector<int32_t> pages{0, 1};
  std::vector<int64_t> src, dst;
  std::vector<int32_t> unsorted{2, 1}, out_of_range{0, 9}, negative{-1};
  EXPECT_THROW(cuda::compaction_pairs(pages, 8, 4, unsorted, src, dst), Error);
  EXPECT_THROW(cuda::compaction_pairs(pages, 8, 4, out_of_range, src, dst), Error);
  EXPECT_THROW(cuda::compaction_pairs(pages, 8, 4, negative, src, dst), Error);
  EXPECT_THROW(cuda::compaction_pairs(pages, 9, 4, std::vector<int32_t>{0}, src, dst), Error);  // 2 pages < 9 tokens
}

// Read selection (Quest, SeerAttention-R) on the device: the ranged planner must make every ranged
// query head one single-row chunk whose units, in order, cover exactly its ranges (pieces of at most
// the split granularity), each with one partial slot when there are several (a combine group) and
// none when there is one; dense items keep plan_attention's plan; a head without ranges gets one
// empty unit (zeros out).
TEST(CudaPlan, RangedItemsReadExactlyTheirSpans) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int Hkv = 1 + static_cast<int>(rng() % 3), G = 1 + static_cast<int>(rng() % 4);
    const int B = 1 + static_cast<int>(rng() % 4);
    auto [n, len] = random_batch(rng, B, Hkv, false, 2000);
    std::vector<std::vector<cuda::TokenSpans>> spans(B);
    for (int b = 0; b < B; ++b) {
      if (rng() % 3 == 0) {  // dense, maybe a prompt chunk
        n[b] = 1 + static_cast<int32_t>(rng() % 30);
        for (int h = 0; h < Hkv; ++h) len[b * Hkv + h] += n[b];
        continue;
      }
      spans[b].resize(static_cast<size_t>(Hkv) * G);
      for (int hq = 0; hq < Hkv * G; ++hq) {
        const int32_t L = len[b * Hkv + hq / G];
        for (int32_t t = static_cast<int32_t>(rng() % 50); t < L;) {  // maybe no range at all
          const int32_t e = std::min<int32_t>(L, t + 1 + static_cast<int32_t>(rng() % 700));
          spans[b][hq].emplace_back(t, e);
          t = e + 1 + static_cast<int32_t>(rng() % 400);
        }
      }
    }
    const int32_t min_split = 64 * (1 + static_cast<int32_t>(rng() % 5));
    const AttnPlan p = cuda::plan_attention_ranged(n, len, Hkv, G, 500, spans, min_split);
    // dense items: the same units as plan_attention over them alone
    std::vector<int32_t> dn, dl, which;
    for (int b = 0; b < B; ++b)
      if (spans[b].empty()) {
        which.push_back(b);
        dn.push_back(n[b]);
        for (int h = 0; h < Hkv; ++h) dl.push_back(len[b * Hkv + h]);
      }
    const AttnPlan d = cuda::plan_attention(dn, dl, Hkv, G, 500, min_split);
    ASSERT_GE(p.units.size(), d.units.size());
    for (size_t i = 0; i < d.units.size(); ++i) {
      AttnUnit u = d.units[i];
      u.item = which[u.item];
      EXPECT_EQ(std::tie(p.units[i].item, p.units[i].head, p.units[i].row0, p.units[i].nrows, p.units[i].kbeg,
                         p.units[i].kend, p.units[i].part),
                std::tie(u.item, u.head, u.row0, u.nrows, u.kbeg, u.kend, u.part));
    }
    // ranged query heads: units in order reproduce the ranges
    std::map<std::pair<int, int>, std::vector<const AttnUnit*>> by_head;  // (item, hq)
    for (size_t i = d.units.size(); i < p.units.size(); ++i) {
      const AttnUnit& u = p.units[i];
      ASSERT_FALSE(spans[u.item].empty());
      ASSERT_EQ(u.nrows, 1);
      by_head[{u.item, u.head * G + u.row0}].push_back(&u);
    }
    int32_t parts = d.num_parts;
    for (int b = 0; b < B; ++b)
      for (int hq = 0; b < B && !spans[b].empty() && hq < Hkv * G; ++hq) {
        const auto& us = by_head[{b, hq}];
        ASSERT_FALSE(us.empty());
        std::vector<int32_t> covered, want;
        for (const AttnUnit* u : us) {
          EXPECT_LE(u->kend - u->kbeg, std::max(min_split, cuda::kAttnTile));
          for (int32_t t = u->kbeg; t < u->kend; ++t) covered.push_back(t);
          if (us.size() == 1) EXPECT_EQ(u->part, -1);
          else EXPECT_EQ(u->part, parts++);
        }
        for (const auto& [lo, hi] : spans[b][hq])
          for (int32_t t = lo; t < hi; ++t) want.push_back(t);
        EXPECT_EQ(covered, want) << "item " << b << " query head " << hq;
        if (want.empty()) EXPECT_EQ(us.front()->kbeg, us.front()->kend);
      }
    EXPECT_EQ(parts, p.num_parts);
    int32_t grouped = 0;
    for (const auto& g : p.groups) {
      ASSERT_GT(g.count, 1);
      for (int s = 1; s < g.count; ++s) {  // one chunk: same item, head and row
        EXPECT_EQ(p.units[g.first + s].item, p.units[g.first].item);
        EXPECT_EQ(p.units[g.first + s].head, p.units[g.first].head);
        EXPECT_EQ(p.units[g.first + s].row0, p.units[g.first].row0);
      }
      grouped += g.count;
    }
    EXPECT_EQ(grouped, p.num_parts);
  }
  // errors: a ranged prompt chunk, a wrong head count, a bad range
  const std::vector<int32_t> n1{1}, n2{2}, len{100};
  const std::vector<std::vector<cuda::TokenSpans>> ok{{{{0, 10}}}}, bad{{{{10, 5}}}}, outside{{{{90, 101}}}},
      two_heads{{{{0, 10}}, {{0, 10}}}};
  EXPECT_NO_THROW(cuda::plan_attention_ranged(n1, len, 1, 1, 10, ok));
  EXPECT_THROW(cuda::plan_attention_ranged(n2, std::vector<int32_t>{101}, 1, 1, 10, ok), Error);
  EXPECT_THROW(cuda::plan_attention_ranged(n1, len, 1, 1, 10, bad), Error);
  EXPECT_THROW(cuda::plan_attention_ranged(n1, len, 1, 1, 10, outside), Error);
  EXPECT_THROW(cuda::plan_attention_ranged(n1, len, 1, 1, 10, two_heads), Error);
}

// The CUDA backend implements every architecture choice of the supported architectures (issue 30:
// sliding-window layers, Gemma 2's GeLU-tanh, post-block norms, soft-capping, √H embedding scale,
// query_pre_attn_scalar) and refuses, before opening a device, configurations its kernels cannot
// run: negative windows or soft-caps (the loaders never produce them; a hand-built config can).
TEST(CudaModelSupport, AcceptsEveryArchitectureRefusesBrokenConfigs) {
  for (const char* name : {"stories260k", "qwen3-0.6b", "llama-3.1-8b"})
    EXPECT_NO_THROW(cuda::check_model_support(model_shape(name))) << name;
  for (const char* dir : {"models/tiny-mistral", "models/tiny-ministral", "models/tiny-gemma2", "models/tiny-qwen2",
                          "models/tiny-qwen3", "models/tiny-llama3"}) {
    const ModelConfig c = ModelConfig::from_dir(test::fixture(dir));
    EXPECT_NO_THROW(cuda::check_model_support(c)) << dir;
  }
  const ModelConfig gemma = ModelConfig::from_dir(test::fixture("models/tiny-gemma2"));
  ASSERT_TRUE(gemma.has_sliding_window());  // the fixture exercises what the CUDA kernels now implement
  ASSERT_GT(gemma.attn_logit_softcap, 0);
  ASSERT_GT(gemma.final_logit_softcap, 0);
  ASSERT_GT(gemma.query_pre_attn_scalar, 0);
  ModelConfig bad = gemma;
  bad.attn_logit_softcap = -1;
  EXPECT_EQ(test::input_error_of([&] { cuda::check_model_support(bad); }),
            "--backend cuda: gemma2: a negative or NaN logit soft-cap is invalid");
  bad = ModelConfig::from_dir(test::fixture("models/tiny-mistral"));
  ASSERT_FALSE(bad.layer_window.empty());
  bad.layer_window[1] = -3;
  EXPECT_EQ(test::input_error_of([&] { cuda::check_model_support(bad); }),
            "--backend cuda: mistral: layer 1's negative sliding window -3 is invalid");
}

// runs.device (issue 30): the CPU backends record the CPU model (as /proc/cpuinfo names it), the
// hardware threads and the memory; the CUDA backend the GPU, or why there is none.
TEST(DeviceDescription, NamesTheCpuModelThreadsAndMemoryOrTheMissingGpu) {
  std::string model;
  {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; model.empty() && std::getline(f, line);)
      if (line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
  }
  const std::string d = device_description("cpu");
  if (!model.empty()) EXPECT_EQ(d.rfind(model + " (", 0), 0u) << d;
  EXPECT_NE(d.find("(" + std::to_string(std::thread::hardware_concurrency()) + " threads, "), std::string::npos) << d;
  EXPECT_EQ(d.back(), ')');
  EXPECT_NE(d.find(" GiB)"), std::string::npos) << d;
  EXPECT_EQ(device_description("cpu-bf16"), d);
  EXPECT_EQ(device_description("tpu"), "tpu");
  const auto names = compiled_backends();
  if (std::find(names.begin(), names.end(), "cuda") != names.end()) {
    const std::string c = device_description("cuda");
    if (c.rfind("cuda (", 0) == 0) {  // no usable device here: the reason is recorded
      EXPECT_NE(c.find("no CUDA device"), std::string::npos) << c;
    } else {  // a GPU: "<name> (<x> GiB, driver <v>, CUDA <m.n>)"
      EXPECT_NE(c.find(" GiB, driver "), std::string::npos) << c;
      EXPECT_NE(c.find(", CUDA "), std::string::npos) << c;
    }
  }
}

TEST(BackendSelection, UnknownOrMissingBackendsAreClearErrors) {
  const ModelConfig cfg = model_shape("stories260k");
  auto m = Model::random(cfg, 1);
  const KVCacheConfig kc = kv_cache_config(cfg);
  KVCache cache(kc);
  EXPECT_EQ(make_backend("cpu", *m, cache)->name(), "cpu");
  KVCacheConfig held = kc;  // the CPU forward attends over host rows: a device-held cache is refused
  held.payload = KVPayloadKind::kDeviceHeld;
  KVCache held_cache(held);
  const std::string refused = test::error_of([&] { make_backend("cpu", *m, held_cache); });
  EXPECT_NE(refused.find("no host K/V rows"), std::string::npos) << refused;
  try {
    make_backend("metal", *m, cache);
    FAIL() << "expected kvb::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--backend metal"), std::string::npos) << e.what();
  }
  const auto names = compiled_backends();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    try {
      make_backend("cuda", *m, cache);
      FAIL() << "expected kvb::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("available: cpu"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvb

namespace kvb {
namespace {

// The cpu-bf16 verification backend (the CUDA backend's reference in kvb_cuda_check): the same
// CPU forward with bf16 rounding where the device stores bf16. Its cached K/V rows must be exact
// bf16 values, its logits close to (within bf16 tolerance) but not equal to the f32 engine's.
TEST(BackendSelection, CpuBf16RoundsCachedKeysAndStaysWithinBf16Tolerance) {
  const ModelConfig cfg = model_shape("smollm2-135m");
  auto m = Model::random(cfg, 3, WeightFormat::kBF16);
  const KVCacheConfig kc = kv_cache_config(cfg);
  std::vector<int32_t> toks(24);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919) % cfg.vocab_size);
  auto run = [&](const std::string& name, KVCache& cache) {
    auto be = make_backend(name, *m, cache);
    EXPECT_EQ(be->name(), name);
    std::vector<ForwardItem> it(1);
    it[0].seq = cache.add_sequence();
    it[0].tokens = toks.data();
    it[0].n = static_cast<int>(toks.size());
    it[0].prefill = it[0].prefill_last = true;
    std::vector<float> logits;
    be->forward(it, nullptr, logits);
    return logits;
  };
  KVCache c32(kc), c16(kc);
  const auto l32 = run("cpu", c32), l16 = run("cpu-bf16", c16);
  ASSERT_EQ(l32.size(), l16.size());
  double mx = 0, md = 0;
  for (size_t i = 0; i < l32.size(); ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(l32[i])));
    md = std::max(md, static_cast<double>(std::fabs(l32[i] - l16[i])));
  }
  EXPECT_GT(md, 0.0) << "cpu-bf16 rounded nothing";
  EXPECT_LE(md / mx, 2e-2);
  int not_bf16_32 = 0;
  for (int l = 0; l < kc.num_layers; ++l)
    for (int h = 0; h < kc.num_kv_heads; ++h)
      for (int32_t i = 0; i < c16.length(0, l, h); ++i)
        for (int d = 0; d < kc.head_dim; ++d) {
          const float k16 = c16.key(0, l, h, i)[d], v16 = c16.value(0, l, h, i)[d];
          ASSERT_EQ(k16, bf16_bits_to_f32(f32_to_bf16_bits(k16)));
          ASSERT_EQ(v16, bf16_bits_to_f32(f32_to_bf16_bits(v16)));
          const float k32 = c32.key(0, l, h, i)[d];
          not_bf16_32 += k32 != bf16_bits_to_f32(f32_to_bf16_bits(k32));
        }
  EXPECT_GT(not_bf16_32, 0) << "the f32 engine's keys should not all be bf16 values";
}

// Model::random: counter-based, so the same seed gives the same weights whatever the thread
// count, bf16 generation equals rounding the f32 generation, and the moments are N(0, 0.02²)'s.
TEST(RandomModel, DeterministicBf16EqualsRoundedF32AndMomentsMatch) {
  const ModelConfig cfg = model_shape("stories260k");
  auto a = Model::random(cfg, 5), b = Model::random(cfg, 5), c = Model::random(cfg, 6);
  auto h = Model::random(cfg, 5, WeightFormat::kBF16);
  const int64_t n = cfg.intermediate_size * cfg.hidden_size;
  const float* wa = a->layers()[0].w_gate.f32;
  const float* wb = b->layers()[0].w_gate.f32;
  const float* wc = c->layers()[0].w_gate.f32;
  const uint16_t* wh = h->layers()[0].w_gate.bf16;
  ASSERT_TRUE(wa && wb && wc && wh);
  double s1 = 0, s2 = 0;
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(wa[i], wb[i]);
    ASSERT_EQ(wh[i], f32_to_bf16_bits(wa[i]));
    differ += wa[i] != wc[i];
    s1 += wa[i];
    s2 += static_cast<double>(wa[i]) * wa[i];
  }
  EXPECT_GT(differ, n * 9 / 10);
  const double mean = s1 / n, sd = std::sqrt(s2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.001);
  // Different tensors of one model are different draws.
  EXPECT_NE(wa[0], a->layers()[0].w_up.f32[0]);
}

}  // namespace
}  // namespace kvb
