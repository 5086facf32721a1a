// Internal helpers shared by the scalar (quants.cpp) and SIMD (quants_x86.inc) kernels.
#pragma once

#include <cstdint>

namespace kvb::kernels_detail {

/// Q4_K / Q5_K 6-bit scales and mins of the 8 sub-blocks from the 12 packed bytes `s`
/// (ggml get_scale_min_k4; gguf-py Q4_K.get_scale_min).
inline void k_scale_min(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3f;
    mn[j] = s[4 + j] & 0x3f;
    sc[4 + j] = static_cast<uint8_t>((s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30));
    mn[4 + j] = static_cast<uint8_t>((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

}  // namespace kvb::kernels_detail
