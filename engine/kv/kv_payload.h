// kvb::KVPayload — where the key/value rows of the KV cache's pages live
// (docs/architecture.md#kv-cache).
//
// The KV cache is split in two, as vLLM splits its BlockPool (block ids, free list) from the KV
// tensors the workers own: KVCache (kv_cache.h) is the page pool — page ids, per-head page
// tables, token positions, per-token policy scalars and the byte accounting — and a KVPayload
// holds the K and V rows, addressed by (page id, slot). Two stores exist:
//   HostKVPayload        f32 rows on the host: the CPU backends, and the CUDA backend when the
//                        policy reads cached keys/values on the host (PolicyNeeds::host_kv).
//   DeviceHeldKVPayload  nothing on the host: a backend keeps the rows in its own device pool
//                        addressed by the same page ids (the CUDA backend's bf16 pool), so the
//                        host does not hold a second, never-read copy of the KV.
// A store is told about every page id the pool hands out (grow) and moves rows when the cache
// compacts a head (copy); it never decides which tokens are kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvb {

/// Which payload store a KVCache uses (KVCacheConfig::payload).
enum class KVPayloadKind {
  kHost,        ///< HostKVPayload: K/V rows are readable through KVCache::key/value/page_keys
  kDeviceHeld,  ///< DeviceHeldKVPayload: a backend holds the rows on its device
};

/// Storage of the K/V rows of a KVCache's pages. Not thread-safe for grow(); write() and copy()
/// of different pages, and reads, may run concurrently.
class KVPayload {
 public:
  virtual ~KVPayload() = default;
  /// The store's kind.
  virtual KVPayloadKind kind() const = 0;
  /// Makes page ids [0, pages) addressable. The pool calls it with its allocated page count
  /// whenever that grows; ids are never retired (freed pages are reused by the pool).
  virtual void grow(int64_t pages) = 0;
  /// Writes token slot `slot` of page `page`: k and v are [D] f32, each may be null (that row is
  /// then left unwritten). Throws kvb::Error when the store holds no host rows and k or v is set.
  virtual void write(int32_t page, int32_t slot, const float* k, const float* v) = 0;
  /// Copies the K and V rows of (src_page, src_slot) to (dst_page, dst_slot) (compaction).
  virtual void copy(int32_t src_page, int32_t src_slot, int32_t dst_page, int32_t dst_slot) = 0;
  /// Keys [page_size, D] / values [page_size, D] f32 of `page`, row-major; nullptr when the store
  /// holds no host rows.
  virtual float* keys(int32_t page) = 0;
  virtual float* values(int32_t page) = 0;
  /// Host bytes the store has allocated for rows (0 for DeviceHeldKVPayload).
  virtual size_t host_bytes() const = 0;
};

/// K/V rows as f32 on the host. A page is [K: page_size × D][V: page_size × D] f32; pages are
/// allocated in chunks of kPagesPerChunk so that growing never moves existing rows (pointers
/// returned by keys()/values() stay valid for the store's life).
class HostKVPayload final : public KVPayload {
 public:
  /// `page_size` tokens per page, `head_dim` D. Both > 0 (checked by KVCache).
  HostKVPayload(int page_size, int head_dim);
  /// Frees the pages and hands them back to the OS (release_freed_heap).
  ~HostKVPayload() override;
  KVPayloadKind kind() const override { return KVPayloadKind::kHost; }
  void grow(int64_t pages) override;
  void write(int32_t page, int32_t slot, const float* k, const float* v) override;
  void copy(int32_t src_page, int32_t src_slot, int32_t dst_page, int32_t dst_slot) override;
  float* keys(int32_t page) override { return base(page); }
  float* values(int32_t page) override { return base(page) + page_floats_ / 2; }
  size_t host_bytes() const override { return chunks_.size() * kPagesPerChunk * page_floats_ * sizeof(float); }

  static constexpr int kPagesPerChunk = 256;

 private:
  float* base(int32_t page) { return chunks_[page / kPagesPerChunk].get() + (page % kPagesPerChunk) * page_floats_; }

  size_t D_ = 0;
  size_t page_floats_ = 0;  // 2 · page_size · D
  std::vector<std::unique_ptr<float[]>> chunks_;
};

/// No host rows: the K/V of every page live in a backend's device pool addressed by the same
/// page ids (engine/backend/cuda: k_pool/v_pool, bf16). grow() and copy() do nothing (the backend
/// grows its pool from KVCache::pages_allocated() and performs the compaction copies itself);
/// write() accepts only null rows; keys()/values() return nullptr.
class DeviceHeldKVPayload final : public KVPayload {
 public:
  KVPayloadKind kind() const override { return KVPayloadKind::kDeviceHeld; }
  void grow(int64_t) override {}
  void write(int32_t page, int32_t slot, const float* k, const float* v) override;
  void copy(int32_t, int32_t, int32_t, int32_t) override {}
  float* keys(int32_t) override { return nullptr; }
  float* values(int32_t) override { return nullptr; }
  size_t host_bytes() const override { return 0; }
};

/// The store of `kind` for pages of `page_size` tokens of head dimension `head_dim`.
std::unique_ptr<KVPayload> make_kv_payload(KVPayloadKind kind, int page_size, int head_dim);

}  // namespace kvb
