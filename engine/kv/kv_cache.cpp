#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "engine/util/error.h"

namespace kvb {

KVCache::KVCache(const KVCacheConfig& cfg) : cfg_(cfg) {
  if (cfg.num_layers <= 0 || cfg.num_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.page_size <= 0 ||
      cfg.num_scalars < 0)
    fail("KV cache: invalid shape (layers={}, kv_heads={}, head_dim={}, page_size={}, scalars={})",
         cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, cfg.page_size, cfg.num_scalars);
  const size_t P = cfg.page_size, D = cfg.head_dim, S = cfg.num_scalars;
  off_v_ = P * D;
  off_pos_ = 2 * P * D;
  off_scalar_ = off_pos_ + P;
  page_floats_ = off_scalar_ + P * S;
  page_bytes_ = page_floats_ * sizeof(float);
}

KVCache::~KVCache() = default;

SeqId KVCache::add_sequence() {
  Sequence s;
  s.alive = true;
  s.heads.resize(static_cast<size_t>(cfg_.num_layers) * cfg_.num_kv_heads);
  seqs_.push_back(std::move(s));
  return static_cast<SeqId>(seqs_.size() - 1);
}

bool KVCache::has_sequence(SeqId seq) const {
  return seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[seq].alive;
}

void KVCache::remove_sequence(SeqId seq) {
  if (!has_sequence(seq)) fail("KV cache: unknown sequence {}", seq);
  Sequence& s = seqs_[seq];
  for (Head& h : s.heads) {
    if (!h.pages.empty()) ++shrinks_;
    for (int32_t p : h.pages) free_page(s, p);
    h.pages.clear();
    h.len = 0;
  }
  s.tokens = 0;
  s.alive = false;
}

KVCache::Head& KVCache::head(SeqId seq, int layer, int h) {
  return seqs_[seq].heads[static_cast<size_t>(layer) * cfg_.num_kv_heads + h];
}
const KVCache::Head& KVCache::head(SeqId seq, int layer, int h) const {
  return seqs_[seq].heads[static_cast<size_t>(layer) * cfg_.num_kv_heads + h];
}

float* KVCache::page_base(int32_t page) {
  return chunks_[page / kPagesPerChunk].get() + (page % kPagesPerChunk) * page_floats_;
}
const float* KVCache::page_base(int32_t page) const {
  return chunks_[page / kPagesPerChunk].get() + (page % kPagesPerChunk) * page_floats_;
}

int32_t KVCache::alloc_page(Sequence& s) {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    if (cfg_.max_pages > 0 && allocated_ >= cfg_.max_pages)
      throw Error(fmt::format("KV cache: page pool exhausted ({} pages of {} bytes; raise the KV "
                              "memory limit)", cfg_.max_pages, page_bytes_),
                  ErrorKind::kRuntime);
    if (allocated_ % kPagesPerChunk == 0)
      chunks_.emplace_back(new float[page_floats_ * kPagesPerChunk]);
    page = static_cast<int32_t>(allocated_++);
  }
  ++in_use_;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  ++s.pages;
  s.peak_pages = std::max(s.peak_pages, s.pages);
  return page;
}

void KVCache::free_page(Sequence& s, int32_t page) {
  free_.push_back(page);
  --in_use_;
  --s.pages;
}

int32_t KVCache::append(SeqId seq, int layer, int h, const float* k, const float* v, int32_t pos) {
  Sequence& s = seqs_[seq];
  Head& hd = head(seq, layer, h);
  const int32_t P = cfg_.page_size;
  if (hd.len == static_cast<int32_t>(hd.pages.size()) * P) hd.pages.push_back(alloc_page(s));
  float* base = page_base(hd.pages[hd.len / P]);
  const int32_t slot = hd.len % P;
  const size_t D = cfg_.head_dim;
  if (k) std::memcpy(base + slot * D, k, D * sizeof(float));
  if (v) std::memcpy(base + off_v_ + slot * D, v, D * sizeof(float));
  reinterpret_cast<int32_t*>(base + off_pos_)[slot] = pos;
  if (cfg_.num_scalars > 0)
    std::memset(base + off_scalar_ + static_cast<size_t>(slot) * cfg_.num_scalars, 0,
                cfg_.num_scalars * sizeof(float));
  ++s.tokens;
  return hd.len++;
}

int32_t KVCache::length(SeqId seq, int layer, int h) const { return head(seq, layer, h).len; }

int32_t KVCache::max_length(SeqId seq, int layer) const {
  int32_t m = 0;
  for (int h = 0; h < cfg_.num_kv_heads; ++h) m = std::max(m, head(seq, layer, h).len);
  return m;
}

float* KVCache::key(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return page_base(hd.pages[i / cfg_.page_size]) + (i % cfg_.page_size) * cfg_.head_dim;
}
float* KVCache::value(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return page_base(hd.pages[i / cfg_.page_size]) + off_v_ + (i % cfg_.page_size) * cfg_.head_dim;
}
int32_t* KVCache::position_ptr(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return reinterpret_cast<int32_t*>(page_base(hd.pages[i / cfg_.page_size]) + off_pos_) +
         (i % cfg_.page_size);
}
float* KVCache::scalars(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return page_base(hd.pages[i / cfg_.page_size]) + off_scalar_ +
         static_cast<size_t>(i % cfg_.page_size) * cfg_.num_scalars;
}
const float* KVCache::key(SeqId seq, int layer, int h, int32_t i) const {
  return const_cast<KVCache*>(this)->key(seq, layer, h, i);
}
const float* KVCache::value(SeqId seq, int layer, int h, int32_t i) const {
  return const_cast<KVCache*>(this)->value(seq, layer, h, i);
}
int32_t KVCache::position(SeqId seq, int layer, int h, int32_t i) const {
  return *const_cast<KVCache*>(this)->position_ptr(seq, layer, h, i);
}

const std::vector<int32_t>& KVCache::pages(SeqId seq, int layer, int h) const {
  return head(seq, layer, h).pages;
}
const float* KVCache::page_keys(int32_t page) const { return page_base(page); }
const float* KVCache::page_values(int32_t page) const { return page_base(page) + off_v_; }
const int32_t* KVCache::page_positions(int32_t page) const {
  return reinterpret_cast<const int32_t*>(page_base(page) + off_pos_);
}
const float* KVCache::page_scalars(int32_t page) const { return page_base(page) + off_scalar_; }

int32_t KVCache::compact(SeqId seq, int layer, int h, std::span<const int32_t> keep) {
  Sequence& s = seqs_[seq];
  Head& hd = head(seq, layer, h);
  const int32_t n = static_cast<int32_t>(keep.size());
  for (int32_t j = 0; j < n; ++j) {
    if (keep[j] < 0 || keep[j] >= hd.len || (j > 0 && keep[j] <= keep[j - 1]))
      fail("KV cache: compact(seq={}, layer={}, head={}): keep-set must be strictly increasing "
           "indices < {} (entry {} is {})", seq, layer, h, hd.len, j, keep[j]);
  }
  const int32_t P = cfg_.page_size;
  const size_t D = cfg_.head_dim, S = cfg_.num_scalars;
  // dst index j <= src index keep[j], so copying forward in order never overwrites a token
  // that is still to be read.
  for (int32_t j = 0; j < n; ++j) {
    const int32_t src = keep[j];
    if (src == j) continue;
    float* sb = page_base(hd.pages[src / P]);
    float* db = page_base(hd.pages[j / P]);
    const int32_t ss = src % P, ds = j % P;
    std::memcpy(db + ds * D, sb + ss * D, D * sizeof(float));
    std::memcpy(db + off_v_ + ds * D, sb + off_v_ + ss * D, D * sizeof(float));
    reinterpret_cast<int32_t*>(db + off_pos_)[ds] = reinterpret_cast<int32_t*>(sb + off_pos_)[ss];
    if (S) std::memcpy(db + off_scalar_ + ds * S, sb + off_scalar_ + ss * S, S * sizeof(float));
  }
  const int32_t evicted = hd.len - n;
  const size_t need_pages = (static_cast<size_t>(n) + P - 1) / P;
  if (hd.pages.size() > need_pages) ++shrinks_;
  while (hd.pages.size() > need_pages) {
    free_page(s, hd.pages.back());
    hd.pages.pop_back();
  }
  hd.len = n;
  s.tokens -= evicted;
  s.evictions += evicted;
  return evicted;
}

int64_t KVCache::truncate_from(SeqId seq, int32_t pos) {
  Sequence& s = seqs_[seq];
  const int32_t P = cfg_.page_size;
  int64_t dropped = 0;
  for (int layer = 0; layer < cfg_.num_layers; ++layer) {
    for (int h = 0; h < cfg_.num_kv_heads; ++h) {
      Head& hd = head(seq, layer, h);
      int32_t lo = 0, hi = hd.len;  // first index with position >= pos (positions increase)
      while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (position(seq, layer, h, mid) < pos) lo = mid + 1;
        else hi = mid;
      }
      const int32_t n = lo;
      const size_t need_pages = (static_cast<size_t>(n) + P - 1) / P;
      if (hd.pages.size() > need_pages) ++shrinks_;
      while (hd.pages.size() > need_pages) {
        free_page(s, hd.pages.back());
        hd.pages.pop_back();
      }
      dropped += hd.len - n;
      s.tokens -= hd.len - n;
      hd.len = n;
    }
  }
  return dropped;
}

size_t KVCache::bytes(SeqId seq) const { return seqs_[seq].pages * page_bytes_; }
size_t KVCache::peak_bytes(SeqId seq) const { return seqs_[seq].peak_pages * page_bytes_; }
size_t KVCache::token_bytes(SeqId seq) const { return seqs_[seq].tokens * kv_bytes_per_token(); }
size_t KVCache::bytes_total() const { return in_use_ * page_bytes_; }
size_t KVCache::peak_bytes_total() const { return peak_in_use_ * page_bytes_; }
int64_t KVCache::pages_in_use() const { return in_use_; }
int64_t KVCache::pages_allocated() const { return allocated_; }
int64_t KVCache::evictions(SeqId seq) const { return seqs_[seq].evictions; }

}  // namespace kvb
