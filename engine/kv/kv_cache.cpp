#include "engine/kv/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "engine/util/error.h"

namespace kvb {

KVCache::KVCache(const KVCacheConfig& cfg) : cfg_(cfg) {
  if (cfg.num_layers <= 0 || cfg.num_kv_heads <= 0 || cfg.head_dim <= 0 || cfg.page_size <= 0 || cfg.num_scalars < 0)
    fail("KV cache: invalid shape (layers={}, kv_heads={}, head_dim={}, page_size={}, scalars={})", cfg.num_layers,
         cfg.num_kv_heads, cfg.head_dim, cfg.page_size, cfg.num_scalars);
  const size_t P = cfg.page_size, S = cfg.num_scalars;
  meta_words_ = P + P * S;
  page_bytes_ = cfg.geometry().bytes_per_page();
  payload_ = make_kv_payload(cfg.payload, cfg.page_size, cfg.head_dim);
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
  s.in_step = false;
  s.held = 0;
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

float* KVCache::meta_base(int32_t page) {
  return meta_chunks_[page / kPagesPerChunk].get() + (page % kPagesPerChunk) * meta_words_;
}
const float* KVCache::meta_base(int32_t page) const {
  return meta_chunks_[page / kPagesPerChunk].get() + (page % kPagesPerChunk) * meta_words_;
}

void KVCache::no_host_kv(const char* what) const {
  fail(
      "KV cache: {} read on the host, but the K/V rows are device-held (a policy that reads cached "
      "keys/values on the host must declare PolicyNeeds::host_kv)",
      what);
}

int32_t KVCache::alloc_page(Sequence& s) {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    if (cfg_.max_pages > 0 && allocated_ >= cfg_.max_pages)
      throw Error(fmt::format("KV cache: page pool exhausted ({} pages of {} bytes; raise the KV "
                              "memory limit)",
                              cfg_.max_pages, page_bytes_),
                  ErrorKind::kRuntime);
    if (allocated_ % kPagesPerChunk == 0) meta_chunks_.emplace_back(new float[meta_words_ * kPagesPerChunk]);
    page = static_cast<int32_t>(allocated_++);
    payload_->grow(allocated_);
  }
  ++in_use_;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  ++s.pages;
  s.peak_pages = std::max(s.peak_pages, s.pages + s.held);
  return page;
}

void KVCache::free_page(Sequence& s, int32_t page) {
  free_.push_back(page);
  --in_use_;
  --s.pages;
  if (s.in_step) ++s.held;
}

void KVCache::begin_step(SeqId seq) {
  if (!has_sequence(seq)) fail("KV cache: unknown sequence {}", seq);
  Sequence& s = seqs_[seq];
  s.in_step = true;
  s.held = 0;
}

void KVCache::end_step(SeqId seq) {
  if (!has_sequence(seq)) fail("KV cache: unknown sequence {}", seq);
  Sequence& s = seqs_[seq];
  s.in_step = false;
  s.held = 0;
}

int32_t KVCache::append(SeqId seq, int layer, int h, const float* k, const float* v, int32_t pos) {
  Sequence& s = seqs_[seq];
  Head& hd = head(seq, layer, h);
  const int32_t P = cfg_.page_size;
  if (hd.len == static_cast<int32_t>(hd.pages.size()) * P) hd.pages.push_back(alloc_page(s));
  const int32_t page = hd.pages[hd.len / P];
  const int32_t slot = hd.len % P;
  payload_->write(page, slot, k, v);
  float* meta = meta_base(page);
  reinterpret_cast<int32_t*>(meta)[slot] = pos;
  if (cfg_.num_scalars > 0)
    std::memset(meta + P + static_cast<size_t>(slot) * cfg_.num_scalars, 0, cfg_.num_scalars * sizeof(float));
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
  float* k = payload_->keys(head(seq, layer, h).pages[i / cfg_.page_size]);
  if (!k) no_host_kv("keys");
  return k + static_cast<size_t>(i % cfg_.page_size) * cfg_.head_dim;
}
float* KVCache::value(SeqId seq, int layer, int h, int32_t i) {
  float* v = payload_->values(head(seq, layer, h).pages[i / cfg_.page_size]);
  if (!v) no_host_kv("values");
  return v + static_cast<size_t>(i % cfg_.page_size) * cfg_.head_dim;
}
int32_t* KVCache::position_ptr(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return reinterpret_cast<int32_t*>(meta_base(hd.pages[i / cfg_.page_size])) + (i % cfg_.page_size);
}
float* KVCache::scalars(SeqId seq, int layer, int h, int32_t i) {
  const Head& hd = head(seq, layer, h);
  return meta_base(hd.pages[i / cfg_.page_size]) + cfg_.page_size +
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

const std::vector<int32_t>& KVCache::pages(SeqId seq, int layer, int h) const { return head(seq, layer, h).pages; }
const float* KVCache::page_keys(int32_t page) const {
  const float* k = payload_->keys(page);
  if (!k) no_host_kv("keys");
  return k;
}
const float* KVCache::page_values(int32_t page) const {
  const float* v = payload_->values(page);
  if (!v) no_host_kv("values");
  return v;
}
const int32_t* KVCache::page_positions(int32_t page) const { return reinterpret_cast<const int32_t*>(meta_base(page)); }
const float* KVCache::page_scalars(int32_t page) const { return meta_base(page) + cfg_.page_size; }

int32_t KVCache::compact(SeqId seq, int layer, int h, std::span<const int32_t> keep) {
  Sequence& s = seqs_[seq];
  Head& hd = head(seq, layer, h);
  const int32_t n = static_cast<int32_t>(keep.size());
  for (int32_t j = 0; j < n; ++j) {
    if (keep[j] < 0 || keep[j] >= hd.len || (j > 0 && keep[j] <= keep[j - 1]))
      fail(
          "KV cache: compact(seq={}, layer={}, head={}): keep-set must be strictly increasing "
          "indices < {} (entry {} is {})",
          seq, layer, h, hd.len, j, keep[j]);
  }
  const int32_t P = cfg_.page_size;
  const size_t S = cfg_.num_scalars;
  // dst index j <= src index keep[j], so copying forward in order never overwrites a token
  // that is still to be read.
  for (int32_t j = 0; j < n; ++j) {
    const int32_t src = keep[j];
    if (src == j) continue;
    const int32_t sp = hd.pages[src / P], dp = hd.pages[j / P];
    const int32_t ss = src % P, ds = j % P;
    payload_->copy(sp, ss, dp, ds);
    float* sb = meta_base(sp);
    float* db = meta_base(dp);
    reinterpret_cast<int32_t*>(db)[ds] = reinterpret_cast<int32_t*>(sb)[ss];
    if (S) std::memcpy(db + P + ds * S, sb + P + ss * S, S * sizeof(float));
  }
  const int32_t evicted = hd.len - n;
  const size_t need_pages = static_cast<size_t>(cfg_.geometry().pages_for_tokens(n));
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
      const size_t need_pages = static_cast<size_t>(cfg_.geometry().pages_for_tokens(n));
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
size_t KVCache::host_metadata_bytes() const {
  return meta_chunks_.size() * kPagesPerChunk * meta_words_ * sizeof(float);
}

}  // namespace kvb
