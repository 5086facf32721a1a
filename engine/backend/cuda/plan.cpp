#include "engine/backend/cuda/plan.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/util/error.h"

namespace kvb::cuda {

void check_model_support(const ModelConfig& cf) {
  const Architecture& a = architecture(cf.model_type);
  auto refuse = [&](const std::string& what) {
    fail("--backend cuda: {}: {} is not implemented by the CUDA kernels; use --backend cpu", cf.model_type, what);
  };
  switch (a.activation) {
    case Activation::kSilu:
    case Activation::kGeluTanh: break;
    default: refuse(fmt::format("MLP activation '{}'", hidden_act_name(a.activation)));
  }
  if (has_role(a, TensorRole::kPostAttnNorm) != has_role(a, TensorRole::kPostMlpNorm))
    refuse("a post-attention norm without a post-MLP norm (or the reverse)");
  // Values ModelConfig::validate refuses when it reads a config.json; checked again here for a
  // config built in code.
  auto invalid = [&](const std::string& what) { fail("--backend cuda: {}: {} is invalid", cf.model_type, what); };
  if (!(cf.attn_logit_softcap >= 0) || !(cf.final_logit_softcap >= 0)) invalid("a negative or NaN logit soft-cap");
  for (int64_t l = 0; l < cf.num_layers; ++l)
    if (cf.window(l) < 0) invalid(fmt::format("layer {}'s negative sliding window {}", l, cf.window(l)));
}

void check_policy_support(const std::string& policy, bool restore_pass) {
  if (restore_pass)
    fail(
        "--backend cuda: policy '{}': a restore pass (input-embedding rows through a LoRA adapter) is not "
        "implemented by the CUDA backend; use --backend cpu",
        policy);
}

namespace {
constexpr int64_t kNoSplit = int64_t(1) << 30;  // a multiple of kAttnTile longer than any head
}  // namespace

AttnPlan plan_attention(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G, int64_t target_units,
                        int32_t min_split) {
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
          p.units.push_back({static_cast<int32_t>(b), h, r0, nr, kb, std::min(kend, kb + p.split_len), p.num_parts++, 0});
        }
      }
    }
  }
  return p;
}

AttnPlan plan_attention_ranged(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int G,
                               int64_t target_units, const std::vector<std::vector<TokenSpans>>& spans,
                               int32_t min_split) {
  if (Hkv < 1 || G < 1) fail("plan_attention_ranged: Hkv={} G={} must be ≥ 1", Hkv, G);
  if (spans.size() != n.size()) fail("plan_attention_ranged: spans for {} items, {} items", spans.size(), n.size());
  if (len.size() != n.size() * static_cast<size_t>(Hkv))
    fail("plan_attention_ranged: {} lengths for {} items × {} kv heads", len.size(), n.size(), Hkv);
  // The dense items through plan_attention, their item indices mapped back.
  std::vector<int32_t> dn, dl, which;
  for (size_t b = 0; b < n.size(); ++b) {
    if (!spans[b].empty()) continue;
    which.push_back(static_cast<int32_t>(b));
    dn.push_back(n[b]);
    for (int h = 0; h < Hkv; ++h) dl.push_back(len[b * Hkv + h]);
  }
  AttnPlan p = plan_attention(dn, dl, Hkv, G, target_units, min_split);
  for (AttnUnit& u : p.units) u.item = which[u.item];
  const int32_t piece = (std::max<int32_t>(min_split, kAttnTile) + kAttnTile - 1) / kAttnTile * kAttnTile;
  for (size_t b = 0; b < n.size(); ++b) {
    if (spans[b].empty()) continue;
    if (n[b] != 1)
      fail("plan_attention_ranged: item {} reads selected ranges but has {} new tokens (decode only)", b, n[b]);
    if (spans[b].size() != static_cast<size_t>(Hkv) * G)
      fail("plan_attention_ranged: item {} has spans for {} query heads of {}", b, spans[b].size(), Hkv * G);
    for (int hq = 0; hq < Hkv * G; ++hq) {
      const int h = hq / G;
      const int32_t L = len[b * Hkv + h];
      std::vector<std::pair<int32_t, int32_t>> pieces;
      int32_t prev = 0;
      for (const auto& [lo, hi] : spans[b][hq]) {
        if (lo < prev || hi <= lo || hi > L)
          fail("plan_attention_ranged: item {} query head {}: range [{}, {}) empty, unsorted or outside the {} keys", b,
               hq, lo, hi, L);
        for (int32_t k = lo; k < hi; k += piece) pieces.emplace_back(k, std::min(hi, k + piece));
        prev = hi;
      }
      const AttnUnit base{static_cast<int32_t>(b), h, hq % G, 1, 0, 0, -1, 0};
      if (pieces.size() <= 1) {
        AttnUnit u = base;
        if (!pieces.empty()) std::tie(u.kbeg, u.kend) = std::tie(pieces[0].first, pieces[0].second);
        p.units.push_back(u);
        continue;
      }
      p.groups.push_back({static_cast<int32_t>(p.units.size()), static_cast<int32_t>(pieces.size())});
      for (const auto& [lo, hi] : pieces) {
        AttnUnit u = base;
        u.kbeg = lo;
        u.kend = hi;
        u.part = p.num_parts++;
        p.units.push_back(u);
      }
    }
  }
  return p;
}

AttnBound attention_bound(std::span<const int32_t> n, int Hkv, int G, int64_t target_units) {
  if (Hkv < 1 || G < 1) fail("attention_bound: Hkv={} G={} must be ≥ 1", Hkv, G);
  int64_t chunks = 0;
  for (const int32_t nb : n) {
    if (nb < 1) fail("attention_bound: an item has {} new tokens", nb);
    chunks += static_cast<int64_t>(Hkv) * ((static_cast<int64_t>(nb) * G + kAttnRows - 1) / kAttnRows);
  }
  return {chunks + (target_units > chunks ? target_units : 0), chunks};
}

FiRequests fi_requests(std::span<const int32_t> n, std::span<const int32_t> len, int Hkv, int P) {
  const int64_t B = static_cast<int64_t>(n.size());
  if (B < 1 || Hkv < 1 || P < 1) fail("fi_requests: {} items, Hkv={}, P={} must be ≥ 1", B, Hkv, P);
  if (len.size() != static_cast<size_t>(B * Hkv))
    fail("fi_requests: {} head lengths for {} items × {} kv heads", len.size(), B, Hkv);
  std::vector<int64_t> row0(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    if (n[b] < 1) fail("fi_requests: item {} has {} new tokens", b, n[b]);
    row0[b + 1] = row0[b] + n[b];
  }
  const int64_t T = row0[B], R = B * Hkv;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (T * Hkv > kMax || R + 1 > kMax) fail("fi_requests: {} rows × {} kv heads exceed 2^31 − 1", T, Hkv);
  FiRequests r;
  r.num_requests = static_cast<int32_t>(R);
  r.num_items = static_cast<int32_t>(B);
  r.tokens = static_cast<int32_t>(T);
  r.total_rows = T * Hkv;
  r.qo_indptr.assign(R + 1, 0);
  r.kv_indptr.assign(R + 1, 0);
  r.last_page_len.assign(R, 0);
  int64_t pages_total = 0;
  for (int h = 0; h < Hkv; ++h)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t q = h * B + b;
      const int32_t l = len[b * Hkv + h];
      if (l < n[b])
        fail("fi_requests: kv head {} of item {} holds {} tokens, fewer than its {} new ones", h, b, l, n[b]);
      const int64_t pages = (static_cast<int64_t>(l) + P - 1) / P;
      pages_total += pages;
      if (pages_total > kMax) fail("fi_requests: more than 2^31 − 1 pages in one launch");
      r.qo_indptr[q] = static_cast<int32_t>(h * T + row0[b]);
      r.kv_indptr[q + 1] = static_cast<int32_t>(pages_total);
      r.last_page_len[q] = static_cast<int32_t>(l - (pages - 1) * P);
    }
  r.qo_indptr[R] = static_cast<int32_t>(Hkv * T);
  return r;
}

PageTableStore::PageTableStore(int layers, int kv_heads) : L_(layers), Hkv_(kv_heads) {
  if (layers < 1 || kv_heads < 1) fail("PageTableStore: {} layers, {} kv heads must be ≥ 1", layers, kv_heads);
}

void PageTableStore::relayout(int64_t rows_cap, int64_t cap) {
  const int64_t heads = rows_cap * L_ * Hkv_;
  if (heads * cap > std::numeric_limits<int32_t>::max())
    fail("device page tables: {} sequences × {} layers × {} kv heads × {} pages exceed 2^31 entries", rows_cap, L_,
         Hkv_, cap);
  std::vector<int32_t> img(static_cast<size_t>(heads * cap), -1);
  const int64_t old_heads = rows_cap_ * L_ * Hkv_, keep = std::min(cap, cap_);
  for (int64_t i = 0; i < old_heads; ++i) std::copy_n(image_.begin() + i * cap_, keep, img.begin() + i * cap);
  image_.swap(img);
  synced_.resize(static_cast<size_t>(heads), 0);
  for (auto& s : synced_) s = std::min(s, cap);
  rows_cap_ = rows_cap;
  cap_ = cap;
  grew_ = true;
}

int64_t PageTableStore::row(int32_t seq) {
  const auto it = row_of_.find(seq);
  if (it != row_of_.end()) return it->second;
  int64_t r;
  if (!free_rows_.empty()) {
    r = free_rows_.back();
    free_rows_.pop_back();
  } else {
    r = rows_used_++;
    if (r >= rows_cap_) relayout(std::max<int64_t>(8, rows_cap_ * 2), std::max<int64_t>(cap_, 16));
  }
  row_of_[seq] = r;
  return r;
}

void PageTableStore::sync(int32_t seq, int layer, int head, std::span<const int32_t> pages, std::vector<int64_t>& writes) {
  if (layer < 0 || layer >= L_ || head < 0 || head >= Hkv_)
    fail("PageTableStore: layer {} head {} out of range ({} × {})", layer, head, L_, Hkv_);
  const int64_t r = row(seq);
  const int64_t n = static_cast<int64_t>(pages.size());
  if (n > cap_) relayout(rows_cap_, (n + n / 2 + 15) / 16 * 16);
  const int64_t h = (r * L_ + layer) * Hkv_ + head, off = h * cap_;
  for (int64_t i = std::min(synced_[h], n); i < n; ++i)
    if (image_[off + i] != pages[i]) {
      image_[off + i] = pages[i];
      writes.push_back(off + i);
      writes.push_back(pages[i]);
    }
  synced_[h] = n;
}

void PageTableStore::shrunk(int32_t seq, int layer, int head, size_t n) {
  const auto it = row_of_.find(seq);
  if (it == row_of_.end()) return;
  int64_t& s = synced_[(it->second * L_ + layer) * Hkv_ + head];
  s = std::min(s, static_cast<int64_t>(n));
}

void PageTableStore::invalidate() { std::fill(synced_.begin(), synced_.end(), 0); }

void PageTableStore::release_if(const std::function<bool(int32_t)>& dead) {
  for (auto it = row_of_.begin(); it != row_of_.end();) {
    if (!dead(it->first)) {
      ++it;
      continue;
    }
    const int64_t h0 = it->second * L_ * Hkv_;
    std::fill(synced_.begin() + h0, synced_.begin() + h0 + static_cast<int64_t>(L_) * Hkv_, 0);
    free_rows_.push_back(it->second);
    it = row_of_.erase(it);
  }
}

int32_t PageTableStore::offset(int32_t seq, int layer, int head) const {
  const auto it = row_of_.find(seq);
  if (it == row_of_.end()) fail("PageTableStore: sequence {} has no page tables on the device", seq);
  return static_cast<int32_t>(((it->second * L_ + layer) * Hkv_ + head) * cap_);
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
