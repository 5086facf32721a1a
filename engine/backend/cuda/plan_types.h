// Plain structs shared by the attention planner (plan.h, host C++20) and the kernels (.cu, compiled
// as C++17 by nvcc): the unit of work of one attention block and a group of split units.
#pragma once

#include <cstdint>

namespace kvb::cuda {

/// Query rows per attention unit (one CUDA block: 4 warps × 4 rows).
constexpr int kAttnRows = 16;
/// Keys per shared-memory tile of the attention kernel; split lengths are multiples of it.
constexpr int kAttnTile = 64;

/// One block of the attention kernel. Plain ints (copied to the device as-is).
struct AttnUnit {
  int32_t item;   ///< index of the item (sequence) in the step
  int32_t head;   ///< kv head
  int32_t row0;   ///< first row (token · G + g) of the chunk within the item
  int32_t nrows;  ///< rows in the chunk (≤ kAttnRows)
  int32_t kbeg;   ///< first key index of this split
  int32_t kend;   ///< one past the last key index of this split
  int32_t part;   ///< partial-output slot, or −1 when the chunk is not split (direct output)
  int32_t pad;
};

/// A chunk that was split: `count` consecutive units starting at `first` to be combined.
struct AttnGroup {
  int32_t first, count;
};

}  // namespace kvb::cuda
