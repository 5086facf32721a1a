#include "engine/backend/cuda/plan.h"

#include <algorithm>

#include "engine/util/error.h"

namespace kvb::cuda {

namespace {
constexpr int64_t kNoSplit = int64_t(1) << 30;  // a multiple of kAttnTile longer than any head
}  // namespace

AttnPlan plan_attention(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G,
                        int64_t target_units, int32_t min_split) {
  if (Hkv < 1 || G < 1) fail("plan_attention: Hkv={} G={} must be ≥ 1", Hkv, G);
  if (len.size() != n.size() * static_cast<size_t>(Hkv))
    fail("plan_attention: {} lengths for {} items × {} kv heads", len.size(), n.size(), Hkv);
  // Visible keys of a chunk whose last row is token i_max of an item with n new tokens: the keys
  // up to and including that token, i.e. L − (n − 1 − i_max).
  int64_t total_keys = 0, chunks = 0;
  for (size_t b = 0; b < n.size(); ++b) {
    if (n[b] < 1) fail("plan_attention: item {} has {} new tokens", b, n[b]);
    const int64_t rows = static_cast<int64_t>(n[b]) * G;
    for (int h = 0; h < Hkv; ++h) {
      const int32_t L = len[b * Hkv + h];
      if (L < n[b]) fail("plan_attention: item {} head {} holds {} keys < its {} new tokens", b, h, L, n[b]);
      for (int64_t r0 = 0; r0 < rows; r0 += kAttnRows) {
        const int64_t i_max = (std::min(rows, r0 + kAttnRows) - 1) / G;
        total_keys += L - (n[b] - 1 - i_max);
        ++chunks;
      }
    }
  }
  AttnPlan p;
  int64_t split = std::max<int64_t>(min_split, kAttnTile);
  if (target_units > chunks && total_keys > 0) {
    const int64_t want = (total_keys + target_units - 1) / target_units;
    split = std::max(split, want);
  } else {
    split = std::max<int64_t>(split, kNoSplit);  // enough blocks already: no splitting
  }
  split = (split + kAttnTile - 1) / kAttnTile * kAttnTile;
  p.split_len = static_cast<int32_t>(std::min<int64_t>(split, kNoSplit));
  for (size_t b = 0; b < n.size(); ++b) {
    const int32_t rows = n[b] * G;
    for (int h = 0; h < Hkv; ++h) {
      const int32_t L = len[b * Hkv + h];
      for (int32_t r0 = 0; r0 < rows; r0 += kAttnRows) {
        const int32_t nr = std::min(kAttnRows, rows - r0);
        const int32_t i_max = (r0 + nr - 1) / G;
        const int32_t kend = L - (n[b] - 1 - i_max);
        const int32_t nsplit = (kend + p.split_len - 1) / p.split_len;
        if (nsplit <= 1) {
          p.units.push_back({static_cast<int32_t>(b), h, r0, nr, 0, kend, -1, 0});
          continue;
        }
        p.groups.push_back({static_cast<int32_t>(p.units.size()), nsplit});
        for (int32_t s = 0; s < nsplit; ++s) {
          const int32_t kb = s * p.split_len;
          p.units.push_back({static_cast<int32_t>(b), h, r0, nr, kb, std::min(kend, kb + p.split_len),
                             p.num_parts++, 0});
        }
      }
    }
  }
  return p;
}

void compaction_pairs(std::span<const int32_t> pages, int32_t len, int P, std::span<const int32_t> keep,
                      std::vector<int64_t>& src, std::vector<int64_t>& dst) {
  if (P < 1) fail("compaction_pairs: page size {} must be ≥ 1", P);
  if (static_cast<int64_t>(pages.size()) * P < len)
    fail("compaction_pairs: {} pages of {} cannot hold {} tokens", pages.size(), P, len);
  for (size_t j = 0; j < keep.size(); ++j) {
    const int32_t k = keep[j];
    if (k < 0 || k >= len || (j > 0 && k <= keep[j - 1]))
      fail("compaction_pairs: keep-set must be strictly increasing indices < {} (entry {} is {})", len, j, k);
    if (k == static_cast<int32_t>(j)) continue;
    src.push_back(key_slot(pages, k, P));
    dst.push_back(key_slot(pages, static_cast<int32_t>(j), P));
  }
}

}  // namespace kvb::cuda
