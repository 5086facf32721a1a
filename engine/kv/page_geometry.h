// kvb::KvPageGeometry — the KV page arithmetic, written once: the bytes of one page, the pages a
// number of tokens takes, and the pages a byte budget holds (docs/architecture.md#kv-cache,
// "Memory-aware batching").
//
// A page holds `page_tokens` token slots of ONE (sequence, layer, kv head) (kv_cache.h): a K row
// and a V row of `head_dim` elements each per token in the store's element type, an i32 position
// per token, and `num_scalars` f32 policy scalars per token where the pool that is priced holds
// them. Every (layer, kv head) of a sequence owns its own pages, so a sequence holding T tokens in
// every head takes layers · kv heads · ⌈T / page_tokens⌉ pages.
//
// Who prices pages with it: KVCache::page_bytes (the backend-independent f32 accounting of
// kv_bytes_peak), the engine's --memory pool (kv_page_geometry in engine/backend/backend.h: each
// backend's own page, f32 on the CPU, bf16 on CUDA), `kvbench bench --memory`'s batch search
// (harness/bench_memory.h) and the CUDA backend's device pool and report.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvb {

/// Element type of stored K/V rows.
enum class KvDtype {
  kF32,   ///< 4 bytes (the CPU backends, the host KVCache)
  kBF16,  ///< 2 bytes (the CUDA backend's device pool)
};

/// Bytes of one K or V element of `t`: 4 for kF32, 2 for kBF16.
constexpr size_t kv_dtype_bytes(KvDtype t) { return t == KvDtype::kBF16 ? 2 : 4; }

/// The shape and element type of a paged KV store. Sizes in tokens or elements unless stated.
/// Every function is pure; none checks the fields (KVCache refuses a non-positive shape).
struct KvPageGeometry {
  int num_layers = 0;             ///< layers
  int num_kv_heads = 0;           ///< kv heads per layer (Hkv)
  int head_dim = 0;               ///< D: elements of one K (or V) row
  int page_tokens = 16;           ///< P: token slots per page (> 0)
  KvDtype dtype = KvDtype::kF32;  ///< element type of the K and V rows
  int num_scalars = 0;            ///< S: f32 policy scalars per token held in the page (0: held elsewhere)

  /// Bytes of one page: P · (2 · D · dtype bytes + 4 + 4 · S) (K and V rows, an i32 position and
  /// S f32 scalars per token slot).
  constexpr size_t bytes_per_page() const {
    const size_t P = static_cast<size_t>(page_tokens), D = static_cast<size_t>(head_dim);
    return P * (2 * D * kv_dtype_bytes(dtype) + 4 + 4 * static_cast<size_t>(num_scalars));
  }
  /// Pages ONE (sequence, layer, kv head) of `tokens` tokens takes: ⌈tokens / P⌉ (0 for tokens ≤ 0).
  constexpr int64_t pages_for_tokens(int64_t tokens) const {
    return tokens <= 0 ? 0 : (tokens + page_tokens - 1) / page_tokens;
  }
  /// Pages a sequence holding `tokens_per_head` tokens in every (layer, kv head) takes:
  /// layers · kv heads · pages_for_tokens(tokens_per_head).
  constexpr int64_t pages_for_sequence(int64_t tokens_per_head) const {
    return static_cast<int64_t>(num_layers) * num_kv_heads * pages_for_tokens(tokens_per_head);
  }
  /// Whole pages a pool of `pool_bytes` bytes holds: ⌊pool_bytes / bytes_per_page()⌋ (0 for a
  /// non-positive budget).
  constexpr int64_t pool_pages(int64_t pool_bytes) const {
    return pool_bytes <= 0 ? 0 : pool_bytes / static_cast<int64_t>(bytes_per_page());
  }
};

/// Bytes of a `--memory GIB` KV page pool: GIB · 2^30, truncated to whole bytes (0 for GIB ≤ 0 or
/// NaN). Every command that takes --memory converts it here.
constexpr int64_t kv_pool_bytes_of_gib(double gib) { return gib > 0 ? static_cast<int64_t>(gib * 1073741824.0) : 0; }

}  // namespace kvb
