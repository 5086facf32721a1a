#include "engine/util/memory.h"

#include <cstdlib>  // defines __GLIBC__ on glibc systems, before the test below

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvb {

void release_freed_heap() noexcept {
#if defined(__GLIBC__)
  malloc_trim(0);
#else
#warning "release_freed_heap: no malloc_trim outside glibc; freed heap pages stay resident"
#endif
}

}  // namespace kvb
