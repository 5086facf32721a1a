// kvb::KVCache — a paged KV cache in which every (sequence, layer, kv_head) owns its own list of
// pages and its own length, so that eviction policies may keep different tokens, and different
// numbers of tokens, per head ("ragged heads"; docs/architecture.md#kv-cache).
//
// A page holds `page_size` token slots of ONE (sequence, layer, kv_head):
//   K      [page_size, D] f32   keys after RoPE
//   V      [page_size, D] f32   values
//   pos    [page_size]    i32   absolute position of the token in its sequence
//   scalar [page_size, S] f32   per-token policy scalars (TRIM-KV log β, H2O accumulated
//                               attention, G-KV history score, ...); S = KVCacheConfig::num_scalars
// Tokens of a head are kept in insertion order; token i of a head lives in page i / page_size,
// slot i % page_size. Eviction compacts a head in place (order preserved) and returns the pages
// it no longer needs to the pool, so memory saved is real and counted in bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kvb {

/// Shape of a KV cache. All sizes in elements/tokens unless stated.
struct KVCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;  ///< Hkv
  int head_dim = 0;      ///< D
  int page_size = 16;    ///< tokens per page
  int num_scalars = 0;   ///< S: per-token policy floats
  /// Upper bound on pages in the pool (0 = unbounded). Allocation beyond it throws kvb::Error
  /// (ErrorKind::kRuntime) naming the limit.
  int64_t max_pages = 0;
};

/// Identifies a sequence inside a KVCache.
using SeqId = int32_t;

/// The page pool plus per-(sequence, layer, kv_head) page tables. Not thread-safe for
/// structural changes (add/remove sequence, append, compact); concurrent reads of different
/// heads, and appends/compactions of different (sequence, layer) pairs, are safe.
class KVCache {
 public:
  explicit KVCache(const KVCacheConfig& cfg);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  const KVCacheConfig& config() const { return cfg_; }

  /// Creates an empty sequence and returns its id.
  SeqId add_sequence();
  /// Frees every page of `seq`. The id is not reused.
  void remove_sequence(SeqId seq);
  /// True when `seq` exists.
  bool has_sequence(SeqId seq) const;

  /// Appends one token to head (seq, layer, head): k and v are [D] f32, `pos` its absolute
  /// position; its scalars are zeroed. Returns the token's index in the head. k or v may be
  /// null: the payload row is then left unwritten (a backend that holds K/V elsewhere, the CUDA
  /// pool, keeps only the metadata here; the untouched host pages are never committed by the OS).
  /// key()/value() of such a token are unspecified.
  int32_t append(SeqId seq, int layer, int head, const float* k, const float* v, int32_t pos);

  /// Tokens currently held by head (seq, layer, head).
  int32_t length(SeqId seq, int layer, int head) const;
  /// Largest length over the heads of (seq, layer).
  int32_t max_length(SeqId seq, int layer) const;

  /// Pointers to token `i` of head (seq, layer, head): K/V rows [D], position, scalars [S].
  /// `i` must be < length(). Rows of consecutive tokens are contiguous within a page only.
  float* key(SeqId seq, int layer, int head, int32_t i);
  float* value(SeqId seq, int layer, int head, int32_t i);
  int32_t* position_ptr(SeqId seq, int layer, int head, int32_t i);
  float* scalars(SeqId seq, int layer, int head, int32_t i);
  const float* key(SeqId seq, int layer, int head, int32_t i) const;
  const float* value(SeqId seq, int layer, int head, int32_t i) const;
  int32_t position(SeqId seq, int layer, int head, int32_t i) const;

  /// Page-level access for kernels: the page list of a head, and base pointers of a page.
  const std::vector<int32_t>& pages(SeqId seq, int layer, int head) const;
  const float* page_keys(int32_t page) const;    ///< [page_size, D]
  const float* page_values(int32_t page) const;  ///< [page_size, D]
  const int32_t* page_positions(int32_t page) const;  ///< [page_size]
  const float* page_scalars(int32_t page) const; ///< [page_size, S]

  /// Keeps exactly the tokens `keep` (strictly increasing indices < length) of head
  /// (seq, layer, head), in order, compacting in place and returning freed pages to the pool.
  /// Returns the number of tokens evicted. Throws kvb::Error on unsorted/out-of-range indices.
  int32_t compact(SeqId seq, int layer, int head, std::span<const int32_t> keep);

  /// Drops every token of `seq` whose position is >= `pos`, in every (layer, head), returning
  /// freed pages to the pool: a rollback, not an eviction (evictions() is unchanged). Tokens of a
  /// head are in increasing position order (appends are; compact() keeps order), so this keeps a
  /// prefix of each head and moves no data. Used between the turns of a multi-turn request to
  /// drop the KV of generated tokens that the next turn's history replaces (SCBench golden
  /// context). Returns the number of (head, token) entries dropped.
  int64_t truncate_from(SeqId seq, int32_t pos);

  /// Bytes of one page (K + V + positions + scalars).
  size_t page_bytes() const { return page_bytes_; }
  /// Bytes of K and V only, per token: 2 · D · sizeof(float).
  size_t kv_bytes_per_token() const { return 2 * static_cast<size_t>(cfg_.head_dim) * sizeof(float); }
  /// Bytes held by the pages of `seq` now, and the peak since the sequence was added.
  size_t bytes(SeqId seq) const;
  size_t peak_bytes(SeqId seq) const;
  /// K+V bytes of the tokens `seq` holds now (no page rounding; comparable across page sizes).
  size_t token_bytes(SeqId seq) const;
  /// Bytes of all pages in use now, and the peak over the cache's life.
  size_t bytes_total() const;
  size_t peak_bytes_total() const;
  /// Pages in use / pages ever allocated by the pool (the pool keeps freed pages for reuse).
  int64_t pages_in_use() const;
  int64_t pages_allocated() const;
  /// Total tokens evicted from `seq` by compact().
  int64_t evictions(SeqId seq) const;
  /// How many times a page list lost pages (compact(), truncate_from() or remove_sequence()
  /// freeing at least one page). Page lists otherwise only grow at their tail, so a mirror of
  /// them (the CUDA backend's device-resident page tables) that sees this counter unchanged
  /// only needs to copy the entries past what it already holds.
  uint64_t page_list_shrinks() const { return shrinks_; }

 private:
  struct Head {
    std::vector<int32_t> pages;
    int32_t len = 0;
  };
  struct Sequence {
    bool alive = false;
    std::vector<Head> heads;  // [layer * Hkv + head]
    int64_t pages = 0, peak_pages = 0, tokens = 0, evictions = 0;
  };
  Head& head(SeqId seq, int layer, int h);
  const Head& head(SeqId seq, int layer, int h) const;
  int32_t alloc_page(Sequence& s);
  void free_page(Sequence& s, int32_t page);
  float* page_base(int32_t page);
  const float* page_base(int32_t page) const;

  KVCacheConfig cfg_;
  size_t page_floats_ = 0;  // page size in 4-byte words
  size_t page_bytes_ = 0;
  size_t off_v_ = 0, off_pos_ = 0, off_scalar_ = 0;  // word offsets inside a page
  static constexpr int kPagesPerChunk = 256;
  std::vector<std::unique_ptr<float[]>> chunks_;
  std::vector<int32_t> free_;
  int64_t allocated_ = 0, in_use_ = 0, peak_in_use_ = 0;
  uint64_t shrinks_ = 0;
  std::vector<Sequence> seqs_;
};

}  // namespace kvb
