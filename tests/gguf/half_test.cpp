// The project's one half -> float conversion (engine/model/weights.h f16_bits_to_f32, used by the
// safetensors F16 path and by GGUF dequantisation) against the compiler's own binary16 -> binary32
// conversion (kvb::test::binary16_to_float: _Float16, or F16C with clang 14; IEEE 754 exact widening), for all 65,536 bit patterns.
#include <cmath>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "engine/model/weights.h"
#include "tests/support/test_support.h"

TEST(HalfToFloat, AllBitPatternsEqualTheCompilersConversion) {
  int checked = 0;
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float want = kvb::test::binary16_to_float(b);
    const float got = kvb::f16_bits_to_f32(b);
    uint32_t wb, gb;
    std::memcpy(&wb, &want, 4);
    std::memcpy(&gb, &got, 4);
    if (std::isnan(want)) {
      // Payload and sign kept; the hardware may set the quiet bit on signalling NaNs.
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(gb | 0x00400000u, wb | 0x00400000u) << std::hex << h;
    } else {
      ASSERT_EQ(gb, wb) << std::hex << h;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 65536);
  EXPECT_EQ(kvb::f16_bits_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(kvb::f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(kvb::f16_bits_to_f32(0x7bff), 65504.0f);               // largest finite
}
