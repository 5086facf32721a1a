// kvb::KVCacheManager — what the scheduler knows about the KV page pool, in the manner of vLLM
// v1's KVCacheManager: the pool's size and use, the pages of a sequence, the pages a sequence's
// next tokens need (allocate_slots), and freeing a sequence. The scheduler admits, plans and
// preempts through this interface only, so it runs without a model against a fake pool
// (tests/scheduler). PagedKVCacheManager implements it over the engine's KVCache.
//
// Our backends allocate a token's pages when they write its K/V (KVCache::append), not ahead of
// the step as vLLM does; allocate_slots therefore reserves pages for the step being planned
// instead of allocating them, and the reservations are released when the next step is planned.
#pragma once

#include <cstdint>

#include "engine/kv/kv_cache.h"

namespace kvb {

/// The scheduler's view of a paged KV pool. Pages are pages of one (sequence, layer, kv head)
/// page list (KVCache); tokens are positions of one sequence, held in every head. Not
/// thread-safe.
class KVCacheManager {
 public:
  virtual ~KVCacheManager() = default;

  /// Pages the pool holds at most; 0 = unbounded (then nothing is ever refused).
  virtual int64_t num_pages() const = 0;
  /// Pages held by all sequences now (reservations not included).
  virtual int64_t pages_in_use() const = 0;
  /// Most pages held at once over the pool's life.
  virtual int64_t peak_pages() const = 0;
  /// Pages sequence `seq` holds now, over all its (layer, kv head) page lists.
  virtual int64_t pages_of(SeqId seq) const = 0;
  /// Pages a sequence holding `tokens` tokens in every (layer, kv head) holds: layers × kv heads
  /// × ⌈tokens / page size⌉ (the pages a prompt of that length takes, uncompressed).
  virtual int64_t pages_for_tokens(int64_t tokens) const = 0;
  /// New pages sequence `seq` needs to take `n` more tokens in every (layer, kv head): each head
  /// grows to ⌈(its length + n) / page size⌉ pages. An upper bound for a step (a compression
  /// inside the step frees pages the later layers may reuse).
  virtual int64_t pages_to_grow(SeqId seq, int64_t n) const = 0;
  /// Creates an empty sequence (no pages) and returns its id.
  virtual SeqId add_sequence() = 0;
  /// Frees every page of `seq` and forgets it (the id is not reused).
  virtual void free(SeqId seq) = 0;

  /// True when `pages` more pages fit beside those in use and those reserved (always with an
  /// unbounded pool).
  bool can_allocate(int64_t pages) const {
    return num_pages() <= 0 || pages_in_use() + reserved_ + pages <= num_pages();
  }
  /// Reserves the pages `seq` needs to take `n` more tokens this step (pages_to_grow) and returns
  /// true; returns false, reserving nothing, when they do not fit (can_allocate). vLLM's
  /// allocate_slots, with the pages themselves allocated later by the backend's writes.
  bool allocate_slots(SeqId seq, int64_t n) {
    if (num_pages() <= 0) return true;
    const int64_t need = pages_to_grow(seq, n);
    if (!can_allocate(need)) return false;
    reserved_ += need;
    return true;
  }
  /// Pages reserved by allocate_slots since the last release_slots.
  int64_t reserved_pages() const { return reserved_; }
  /// Drops every reservation (the planned step ran or was given up).
  void release_slots() { reserved_ = 0; }

 private:
  int64_t reserved_ = 0;
};

/// KVCacheManager over the engine's KVCache: its page pool (KVCacheConfig::max_pages as
/// num_pages) and its per-head page lists; each override does what KVCacheManager documents
/// (peak_pages and pages_of: KVCache bytes / page_bytes). Holds a reference; the cache must
/// outlive it.
class PagedKVCacheManager final : public KVCacheManager {
 public:
  explicit PagedKVCacheManager(KVCache& cache) : cache_(cache) {}
  int64_t num_pages() const override { return cache_.config().max_pages; }
  int64_t pages_in_use() const override { return cache_.pages_in_use(); }
  int64_t peak_pages() const override;
  int64_t pages_of(SeqId seq) const override;
  int64_t pages_for_tokens(int64_t tokens) const override;
  int64_t pages_to_grow(SeqId seq, int64_t n) const override;
  SeqId add_sequence() override { return cache_.add_sequence(); }
  void free(SeqId seq) override { cache_.remove_sequence(seq); }

 private:
  KVCache& cache_;
};

}  // namespace kvb
