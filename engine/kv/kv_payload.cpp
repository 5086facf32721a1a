#include "engine/kv/kv_payload.h"

#include <cstring>

#include "engine/util/error.h"
#include "engine/util/memory.h"

namespace kvb {

HostKVPayload::HostKVPayload(int page_size, int head_dim)
    : D_(static_cast<size_t>(head_dim)), page_floats_(2 * static_cast<size_t>(page_size) * head_dim) {}

HostKVPayload::~HostKVPayload() {
  chunks_.clear();
  release_freed_heap();
}

void HostKVPayload::grow(int64_t pages) {
  while (static_cast<int64_t>(chunks_.size()) * kPagesPerChunk < pages)
    chunks_.emplace_back(new float[page_floats_ * kPagesPerChunk]);
}

void HostKVPayload::write(int32_t page, int32_t slot, const float* k, const float* v) {
  if (k) std::memcpy(keys(page) + slot * D_, k, D_ * sizeof(float));
  if (v) std::memcpy(values(page) + slot * D_, v, D_ * sizeof(float));
}

void HostKVPayload::copy(int32_t src_page, int32_t src_slot, int32_t dst_page, int32_t dst_slot) {
  std::memcpy(keys(dst_page) + dst_slot * D_, keys(src_page) + src_slot * D_, D_ * sizeof(float));
  std::memcpy(values(dst_page) + dst_slot * D_, values(src_page) + src_slot * D_, D_ * sizeof(float));
}

void DeviceHeldKVPayload::write(int32_t page, int32_t slot, const float* k, const float* v) {
  if (k || v)
    fail(
        "KV cache: page {} slot {}: K/V rows given to a device-held payload store (the host keeps no "
        "K/V; a policy that reads cached keys on the host must declare PolicyNeeds::host_kv)",
        page, slot);
}

std::unique_ptr<KVPayload> make_kv_payload(KVPayloadKind kind, int page_size, int head_dim) {
  if (kind == KVPayloadKind::kDeviceHeld) return std::make_unique<DeviceHeldKVPayload>();
  return std::make_unique<HostKVPayload>(page_size, head_dim);
}

}  // namespace kvb
