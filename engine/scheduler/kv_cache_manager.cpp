#include "engine/scheduler/kv_cache_manager.h"

#include <algorithm>

namespace kvb {

int64_t PagedKVCacheManager::peak_pages() const {
  return static_cast<int64_t>(cache_.peak_bytes_total() / cache_.page_bytes());
}

int64_t PagedKVCacheManager::pages_of(SeqId seq) const {
  return static_cast<int64_t>(cache_.bytes(seq) / cache_.page_bytes());
}

int64_t PagedKVCacheManager::pages_for_tokens(int64_t tokens) const {
  return cache_.config().geometry().pages_for_sequence(tokens);
}

int64_t PagedKVCacheManager::pages_to_grow(SeqId seq, int64_t n) const {
  const KVCacheConfig& c = cache_.config();
  const KvPageGeometry g = c.geometry();
  int64_t need = 0;
  for (int l = 0; l < c.num_layers; ++l)
    for (int h = 0; h < c.num_kv_heads; ++h) {
      const int64_t len = cache_.length(seq, l, h);
      const int64_t have = static_cast<int64_t>(cache_.pages(seq, l, h).size());
      need += std::max<int64_t>(0, g.pages_for_tokens(len + n) - have);
    }
  return need;
}

}  // namespace kvb
