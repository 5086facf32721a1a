// release_freed_heap (engine/util/memory.h): freed heap blocks leave the resident set.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/util/memory.h"

namespace kvb {
namespace {

/// Resident set size of this process in bytes (/proc/self/statm, second field, in pages).
int64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return -1;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : -1;
}

#if defined(__SANITIZE_ADDRESS__)
#define KVB_GLIBC_MALLOC 0  // the sanitizer's allocator replaces glibc's arenas
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVB_GLIBC_MALLOC 0
#endif
#endif
#ifndef KVB_GLIBC_MALLOC
#define KVB_GLIBC_MALLOC 1
#endif

#if KVB_GLIBC_MALLOC
TEST(Memory, ReleaseFreedHeapReturnsFreedBlocksBetweenLiveOnes) {
  // What the CPU forward leaves behind after a prefill: large blocks freed between blocks that
  // stay live (KV chunks). First an 8 MiB block is freed, which raises glibc's mmap threshold
  // so the 1 MiB blocks below come from the heap, as after loading a model.
  {
    std::unique_ptr<char[]> big(new char[8 << 20]);
    std::memset(big.get(), 1, 8 << 20);
  }
  std::vector<std::unique_ptr<char[]>> freed, live;
  for (int i = 0; i < 48; ++i) {
    freed.emplace_back(new char[1 << 20]);
    std::memset(freed.back().get(), 1, 1 << 20);
    live.emplace_back(new char[4096]);
    std::memset(live.back().get(), 1, 4096);
  }
  freed.clear();
  const int64_t before = resident_bytes();
  release_freed_heap();
  const int64_t after = resident_bytes();
  ASSERT_GT(before, 0);
  // 48 MiB freed; at least 40 MiB of it must leave the resident set.
  EXPECT_GT(before - after, int64_t(40) << 20) << "before " << before << " after " << after;
  for (const auto& p : live) EXPECT_EQ(p[4095], 1);  // the live blocks are untouched
}
#endif

}  // namespace
}  // namespace kvb
