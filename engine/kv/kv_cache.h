// kvb::KVCache — a paged KV cache in which every (sequence, layer, kv_head) owns its own list of
// pages and its own length, so that eviction policies may keep different tokens, and different
// numbers of tokens, per head ("ragged heads"; docs/architecture.md#kv-cache).
//
// A page holds `page_size` token slots of ONE (sequence, layer, kv_head). The cache itself is the
// page pool and its metadata; the K/V rows live in a payload store (kv_payload.h) addressed by the
// same page ids, so a backend that holds K/V on a device keeps no host copy:
//   K      [page_size, D] f32   keys after RoPE          } the payload store (HostKVPayload, or
//   V      [page_size, D] f32   values                   } none on the host: DeviceHeldKVPayload)
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

#include "engine/kv/kv_payload.h"
#include "engine/kv/page_geometry.h"

namespace kvb {

/// Shape of a KV cache. All sizes in elements/tokens unless stated.
struct KVCacheConfig {
  KVCacheConfig() = default;
  /// A cache of `layers` layers of `kv_heads` heads of dimension `head_dim`, `page_size` tokens
  /// per page and `num_scalars` per-token scalars; no page limit, host payload.
  KVCacheConfig(int layers, int kv_heads, int head_dim, int page_size = 16, int num_scalars = 0)
      : num_layers(layers), num_kv_heads(kv_heads), head_dim(head_dim), page_size(page_size), num_scalars(num_scalars) {}

  int num_layers = 0;
  int num_kv_heads = 0;  ///< Hkv
  int head_dim = 0;      ///< D
  int page_size = 16;    ///< tokens per page
  int num_scalars = 0;   ///< S: per-token policy floats
  /// Upper bound on pages in the pool (0 = unbounded). Allocation beyond it throws kvb::Error
  /// (ErrorKind::kRuntime) naming the limit.
  int64_t max_pages = 0;
  /// Where the K/V rows live: on the host (f32, readable through key()/value()/page_keys()), or
  /// only in a backend's device pool (no host K/V bytes; reading them throws). See kv_payload.h.
  KVPayloadKind payload = KVPayloadKind::kHost;

  /// This shape's page arithmetic as the host cache accounts it: f32 K/V rows, positions and the
  /// num_scalars policy scalars (page_geometry.h; KVCache::page_bytes is its bytes_per_page).
  KvPageGeometry geometry() const {
    return KvPageGeometry{num_layers, num_kv_heads, head_dim, page_size, KvDtype::kF32, num_scalars};
  }
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
  /// null: the payload row is then left unwritten (key()/value() of such a token are
  /// unspecified); with a device-held payload both must be null (kvb::Error otherwise).
  int32_t append(SeqId seq, int layer, int head, const float* k, const float* v, int32_t pos);

  /// Tokens currently held by head (seq, layer, head).
  int32_t length(SeqId seq, int layer, int head) const;
  /// Largest length over the heads of (seq, layer).
  int32_t max_length(SeqId seq, int layer) const;

  /// Pointers to token `i` of head (seq, layer, head): K/V rows [D], position, scalars [S].
  /// `i` must be < length(). Rows of consecutive tokens are contiguous within a page only.
  /// key()/value() throw kvb::Error when the payload is device-held (no host rows).
  float* key(SeqId seq, int layer, int head, int32_t i);
  float* value(SeqId seq, int layer, int head, int32_t i);
  int32_t* position_ptr(SeqId seq, int layer, int head, int32_t i);
  float* scalars(SeqId seq, int layer, int head, int32_t i);
  const float* key(SeqId seq, int layer, int head, int32_t i) const;
  const float* value(SeqId seq, int layer, int head, int32_t i) const;
  int32_t position(SeqId seq, int layer, int head, int32_t i) const;

  /// Page-level access for kernels: the page list of a head, and base pointers of a page.
  const std::vector<int32_t>& pages(SeqId seq, int layer, int head) const;
  /// Keys / values [page_size, D] f32 of a page; throw kvb::Error when the payload is device-held.
  const float* page_keys(int32_t page) const;
  const float* page_values(int32_t page) const;
  const int32_t* page_positions(int32_t page) const;  ///< [page_size]
  const float* page_scalars(int32_t page) const;      ///< [page_size, S]

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

  /// Bytes one page accounts for: K and V as f32 + positions + scalars
  /// (KVCacheConfig::geometry().bytes_per_page()). This is the realised-KV
  /// accounting every backend reports (bytes(), peak_bytes(), ...), whichever store holds the
  /// rows, so results do not depend on the backend; host_payload_bytes() is what the host holds.
  size_t page_bytes() const { return page_bytes_; }
  /// Bytes of K and V only, per token: 2 · D · sizeof(float).
  size_t kv_bytes_per_token() const { return 2 * static_cast<size_t>(cfg_.head_dim) * sizeof(float); }
  /// Bytes held by the pages of `seq` now.
  size_t bytes(SeqId seq) const;
  /// High-water mark of `seq` since it was added, in bytes (pages × page_bytes()), updated at
  /// every page allocation (not sampled). Pages that compact() frees between begin_step(seq) and
  /// end_step(seq) still count as held until end_step: a step (one forward: a prefill chunk or a
  /// decode step) is accounted as if its compressions ran once every layer holds the step's
  /// tokens. So the peak does not depend on how the backend interleaves appends and
  /// compressions across layers inside a step: under compress=prompt_end it is the whole
  /// prompt's full-cache bytes whatever --prefill-chunk is (issue 33; docs/results.md,
  /// kv_bytes_peak).
  size_t peak_bytes(SeqId seq) const;
  /// Opens / closes a step of `seq` (see peak_bytes); kvb::Error for an unknown sequence id.
  /// Steps do not nest (begin_step restarts the count). Only frees between the two calls are
  /// deferred; compact() or truncate_from() outside a step, and remove_sequence(), free at once.
  void begin_step(SeqId seq);
  void end_step(SeqId seq);
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

  /// The payload store (its kind says whether K/V rows are on the host).
  const KVPayload& payload() const { return *payload_; }
  /// True when K/V rows are held on the host (KVPayloadKind::kHost).
  bool host_kv() const { return cfg_.payload == KVPayloadKind::kHost; }
  /// Host bytes allocated for K/V rows (0 with a device-held payload), and for the page metadata
  /// (positions, scalars) of every page ever allocated. Allocation granularity included.
  size_t host_payload_bytes() const { return payload_->host_bytes(); }
  size_t host_metadata_bytes() const;

 private:
  struct Head {
    std::vector<int32_t> pages;
    int32_t len = 0;
  };
  struct Sequence {
    bool alive = false;
    std::vector<Head> heads;  // [layer * Hkv + head]
    int64_t pages = 0, peak_pages = 0, tokens = 0, evictions = 0;
    int64_t held = 0;      // pages freed inside the open step (still counted by peak_pages)
    bool in_step = false;  // between begin_step and end_step
  };
  Head& head(SeqId seq, int layer, int h);
  const Head& head(SeqId seq, int layer, int h) const;
  int32_t alloc_page(Sequence& s);
  void free_page(Sequence& s, int32_t page);
  float* meta_base(int32_t page);
  const float* meta_base(int32_t page) const;
  [[noreturn]] void no_host_kv(const char* what) const;

  KVCacheConfig cfg_;
  size_t page_bytes_ = 0;
  // Page metadata: [pos: P i32][scalars: P·S f32] per page, in 4-byte words, chunks of
  // kPagesPerChunk pages (growing never moves a page).
  size_t meta_words_ = 0;
  static constexpr int kPagesPerChunk = 256;
  std::vector<std::unique_ptr<float[]>> meta_chunks_;
  std::unique_ptr<KVPayload> payload_;
  std::vector<int32_t> free_;
  int64_t allocated_ = 0, in_use_ = 0, peak_in_use_ = 0;
  uint64_t shrinks_ = 0;
  std::vector<Sequence> seqs_;
};

}  // namespace kvb
