#include "conveyor/core/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace conveyor {
namespace {

TEST(Float16Test, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(float_to_half(f) & 0x7c00u, 0x7c00u) << h;
      continue;
    }
    EXPECT_EQ(float_to_half(f), h) << h;
  }
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
}

TEST(BFloat16Test, EveryBFloat16RoundTripsThroughFloat) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(f)))) << b;
      continue;
    }
    EXPECT_EQ(float_to_bfloat16(f), b) << b;
  }
}

TEST(BFloat16Test, RoundsToNearestEvenAsTorch) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(0.1f), 0x3dcd);  // torch.tensor(0.1).bfloat16(): 0.10009765625.
  EXPECT_EQ(float_to_bfloat16(std::ldexp(1.0f, 0) + std::ldexp(1.0f, -8)), 0x3f80);  // A tie: to even (down).
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);             // A tie: to even (up).
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isinf(bfloat16_to_float(float_to_bfloat16(3.4e38f))));  // Rounds up past the largest.
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
}

}  // namespace
}  // namespace conveyor
